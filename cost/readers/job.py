"""The `job:` section read into a JobSpec: framework, release, precision, optimizer, options.

Each key is checked against the others of the section (an option the framework does not run, a
release the framework never had, a gradient dtype it cannot reduce in); what the job asks of the
model, the GPUs and the search space is checked once the instance is whole
(cost/readers/checks.py). Keys: docs/schema.md.
"""

from __future__ import annotations

from paraplan.cost import units
from paraplan.cost.releases import known_versions
from paraplan.cost.specs import (Attention, Framework, GradReduceDtype, JobSpec, MoeDispatcher,
                                 Optimizer, PipelineSchedule, Precision, OffloadModule,
                                 RecomputeModule, grad_reduce_refusal)
from paraplan.cost.readers.fields import (Section, check_choice, check_number, config_errors_as,
                                          enum_values, shown_value)


JOB_KEYS = ("global_batch", "precision", "optimizer", "attention", "framework", "framework_version",
            "tp_comm_overlap", "cudnn_attention",
            "moe_a2a_overlap", "moe_shared_expert_overlap", "pipeline_schedule", "moe_dispatcher",
            "recompute_early_stop", "grad_reduce_overlap", "recompute_modules", "offload_modules", "activation_fp8_input_store",
            "attention_output_e5m6", "grad_reduce_dtype", "train_tokens", "usd_per_gpu_hour")


def _module_list(sec: Section, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A job's list of Megatron-core module names (recompute_modules, offload_modules), each
    known and listed once."""
    if not sec.has(key):
        return ()
    modules = sec.list_of(key, lambda value, field: check_choice(value, allowed, sec.path, field),
                          "modules (" + ", ".join(allowed) + ")")
    if len(set(modules)) != len(modules):
        raise sec.error(key, "lists a module twice", "list each module once")
    return tuple(modules)


def job_from_section(sec: Section) -> JobSpec:
    framework = sec.choice("framework", enum_values(Framework), Framework.MEGATRON.value)
    for key, flag in (("moe_a2a_overlap", "--overlap-moe-expert-parallel-comm"),
                      ("moe_shared_expert_overlap", "--moe-shared-expert-overlap")):
        if sec.boolean(key, False) and framework != Framework.MEGATRON.value:
            raise sec.error(key, f"is Megatron-core's {flag}, which framework {framework} does"
                            " not run", f"remove {key}, or set framework: megatron")
    if sec.boolean("moe_a2a_overlap", False) and sec.boolean("moe_shared_expert_overlap", False):
        raise sec.error("moe_shared_expert_overlap", "Megatron-core refuses it beside"
                        " --overlap-moe-expert-parallel-comm (moe_a2a_overlap)", "keep one of the two")
    if framework != Framework.MEGATRON.value:
        if sec.has_value("optimizer") and sec.choice("optimizer", enum_values(Optimizer)) != Optimizer.ADAM.value:
            raise sec.error("optimizer", f"{sec.raw['optimizer']} runs only with framework megatron,"
                            f" not {framework}", "use optimizer: adam, or set framework: megatron")
        for key, on in (("recompute_modules", sec.has("recompute_modules")),
                        ("offload_modules", sec.has("offload_modules")),
                        ("activation_fp8_input_store", sec.boolean("activation_fp8_input_store", False))):
            if on:
                raise sec.error(key, f"is a Megatron-core option, which framework {framework} does"
                                " not run", f"remove {key}, or set framework: megatron")
    schedule = sec.choice("pipeline_schedule", enum_values(PipelineSchedule),
                          PipelineSchedule.ONE_F_ONE_B.value)
    if schedule == PipelineSchedule.DUALPIPE.value:
        for key in ("moe_a2a_overlap", "moe_shared_expert_overlap"):
            if sec.boolean(key, False):
                raise sec.error(key, "DualPipe overlaps every all-to-all with the paired"
                                " forward/backward chunk's compute itself (cost/dualpipe.py)",
                                f"remove {key}, or use pipeline_schedule: 1f1b")
    modules = _module_list(sec, "recompute_modules", enum_values(RecomputeModule))
    offloads = _module_list(sec, "offload_modules", enum_values(OffloadModule))
    train_tokens = sec.number("train_tokens") if sec.has_value("train_tokens") else None
    grad_reduce = _grad_reduce_dtype(sec, Framework(framework), _framework_version(sec, Framework(framework)))
    with config_errors_as(sec.path, sec.prefix, "correct the job description"):
        return JobSpec(
            global_batch=sec.integer("global_batch"),
            precision=Precision(sec.choice("precision", enum_values(Precision), Precision.BF16.value)),
            optimizer=Optimizer(sec.choice("optimizer", enum_values(Optimizer), Optimizer.ADAM.value)),
            attention=Attention(sec.choice("attention", enum_values(Attention), Attention.FLASH.value)),
            framework=Framework(framework),
            framework_version=_framework_version(sec, Framework(framework)),
            tp_comm_overlap=sec.boolean("tp_comm_overlap", False),
            cudnn_attention=sec.boolean("cudnn_attention", True),
            moe_a2a_overlap=sec.boolean("moe_a2a_overlap", False),
            moe_shared_expert_overlap=sec.boolean("moe_shared_expert_overlap", False),
            pipeline_schedule=PipelineSchedule(schedule),
            moe_dispatcher=MoeDispatcher(sec.choice("moe_dispatcher", enum_values(MoeDispatcher),
                                                    MoeDispatcher.ALLTOALL.value)),
            recompute_early_stop=(sec.boolean("recompute_early_stop", False)
                                  if sec.has_value("recompute_early_stop") else None),
            grad_reduce_overlap=(sec.boolean("grad_reduce_overlap", False)
                                 if sec.has_value("grad_reduce_overlap") else None),
            recompute_modules=tuple(RecomputeModule(x) for x in modules),
            offload_modules=tuple(OffloadModule(x) for x in offloads),
            activation_fp8_input_store=sec.boolean("activation_fp8_input_store", False),
            attention_output_e5m6=sec.boolean("attention_output_e5m6", False),
            grad_reduce_dtype=grad_reduce,
            train_tokens=train_tokens,
            usd_per_gpu_s=_gpu_prices(sec, train_tokens),
        )


def _grad_reduce_dtype(sec: Section, framework: Framework, version: str | None) -> GradReduceDtype | None:
    """job.grad_reduce_dtype (None when absent: the framework's default, JobSpec.grad_reduce),
    refused where the job's framework, optimizer or precision cannot run it (specs.
    grad_reduce_refusal)."""
    if not sec.has_value("grad_reduce_dtype"):
        return None
    dtype = GradReduceDtype(sec.choice("grad_reduce_dtype", enum_values(GradReduceDtype)))
    optimizer = Optimizer(sec.choice("optimizer", enum_values(Optimizer), Optimizer.ADAM.value))
    precision = Precision(sec.choice("precision", enum_values(Precision), Precision.BF16.value))
    refusal = grad_reduce_refusal(framework, optimizer, precision, dtype, version)
    if refusal is not None:
        raise sec.error("grad_reduce_dtype", *refusal)
    return dtype


def _framework_version(sec: Section, framework: Framework) -> str | None:
    """job.framework_version: a release of the job's framework that cost/releases.py knows
    (None when absent: the current release)."""
    if not sec.has_value("framework_version"):
        return None
    version = sec.raw["framework_version"]
    known = known_versions(framework)
    if not isinstance(version, str) or version not in known:
        raise sec.error("framework_version", f"{shown_value(version)} is not a {framework.value}"
                        f" release paraplan knows", "use one of: " + ", ".join(known)
                        + f" (or leave it out: the current release, {known[-1]})")
    return version


def _gpu_prices(sec: Section, train_tokens: float | None) -> tuple[tuple[str, float], ...]:
    """job.usd_per_gpu_hour, {GPU type: USD per GPU-hour}, as ((type, USD per GPU-second), ...)
    sorted by type; () when absent. Which types it must name is the cluster's business
    (check_gpu_prices, once the cluster is known)."""
    if not sec.has_value("usd_per_gpu_hour"):
        return ()
    if train_tokens is None:
        raise sec.error("usd_per_gpu_hour", "prices a training run, and the job gives no"
                        " train_tokens", "add train_tokens: <tokens to train on, e.g. 15.0e+12>,"
                        " or remove usd_per_gpu_hour")
    table = sec.section("usd_per_gpu_hour", None)
    if not table.raw:
        raise sec.error("usd_per_gpu_hour", "names no GPU type",
                        "write one 'GPU type: USD per GPU-hour' line per GPU type of the cluster,"
                        " e.g. {H100-SXM5-80GB: 2.5}, or remove usd_per_gpu_hour")
    return tuple(sorted((name, check_number(usd, table.path, table.field(name), "usd_per_gpu_hour")
                         / units.HOUR_S) for name, usd in table.raw.items()))
