"""What every exporter shares: the emitted configuration, deviations, and its re-simulation.

An export has two steps. `runnable` (one per framework) maps the plan onto what the target
framework can run and express: the closest configuration, as an (instance, plan) pair that
cost/ can price, plus one line per deviation from the plan. `render` writes that configuration
in the framework's own syntax, exactly: every setting the plan and the cost model assume
(parallel degrees, batch arithmetic, layer split, recompute, ZeRO/FSDP mode, overlap, bucket
sizes, precision, attention kernel, model shape) is written out, none left to a default.

A plan is made for the framework of its instance's `job.framework`, and the planner searches
only what that framework can run (cost/framework_rules.py), so an export to the same framework
is exact unless the plan uses something the framework's configuration cannot express (per-stage
recompute counts, per-operator tensor partitions). An export to another framework is checked
against that framework's rules; the emitted configuration is then priced again by cost/ under
the target framework (`compare`), so the user sees the time and memory of what will run.

Stage layout, shared by all: stage s holds `layers_per_stage[s]` consecutive layers, the
embedding on stage 0 and the output layer on stage pp-1. With v virtual stages each stage holds
v chunks of `layers_per_stage[s] / v` layers, and model chunk k = c*pp + s (chunk c of stage s)
takes the next layers in order: the interleaving of Megatron-LM and of torchtitan's looped
schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost.errors import ConfigError
from paraplan.cost.framework_rules import FRAMEWORK_RULES
from paraplan.cost.pipeline_split import chunk_ranges
from paraplan.cost.releases import current_release, describe
from paraplan.cost.specs import (Framework, Instance, MoeDispatcher, Optimizer, PipelineSchedule,
                                 grad_reduce_refusal)
from paraplan.cost.plan_specs import Plan
from paraplan.cost.units import bytes_to_gib

# An emitted configuration predicted more than this fraction slower than the plan is not handed
# over without --force. 5%: paraplan's ordering of two configurations of one workload is checked
# against measurements only for pairs measured more than 5% apart (docs/accuracy.md, "Ranking":
# 14 of 14 ordered right); a smaller predicted gap is within what the cost model resolves, so
# refusing on it would refuse on the model's noise, and a larger one is a slowdown it predicts.
MAX_SLOWDOWN = 0.05


class ExportRefused(Exception):
    """The target framework cannot run this model at all (not a plan setting that has a
    closest runnable value): one line saying why, and `fix`, what the user can do instead."""

    def __init__(self, problem: str, fix: str = "export to another framework"):
        super().__init__(problem)
        self.fix = fix


@dataclass(frozen=True, slots=True)
class Emitted:
    """The configuration an export writes, as cost/ can price it.

    `inst` is the plan's instance with `job.framework` set to the target (and any model or job
    setting the target cannot express replaced by what it will run); `plan` the plan it will
    run. `deviations`: one line per difference from the plan (empty: the export is exact;
    `--strict` refuses otherwise). `notes`: what the user must know or do that changes
    nothing in the plan (launcher flags that are not part of the file, settings the instance
    does not fix and the export had to choose)."""

    inst: Instance
    plan: Plan
    deviations: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return not self.deviations


@dataclass(frozen=True, slots=True)
class ExportResult:
    text: str  # the configuration, newline-terminated
    emitted: Emitted

    @property
    def unsupported(self) -> list[str]:
        """The deviations from the plan, one line each; empty when the export is exact."""
        return list(self.emitted.deviations)


def exporter(runnable, render):
    """A framework's `to_<framework>(inst, plan) -> ExportResult`: the plan checked against its
    instance, mapped onto what the framework runs (`runnable`) and written in its syntax
    (`render`)."""
    def export(inst: Instance, plan: Plan) -> ExportResult:
        plan.check_against(inst)
        e = runnable(inst, plan)
        return ExportResult(render(inst, e), e)
    return export


class Deviations:
    """Collects deviations and notes while `runnable` adjusts the instance and plan (from the
    cross-framework notes and the dropped partitions on)."""

    def __init__(self, inst: Instance, plan: Plan, target: Framework):
        self.source_framework = inst.job.framework
        self.source_inst = inst
        self.target = target
        self.plan = plan
        self.deviations: list[str] = []
        self.notes: list[str] = []
        job = inst.job if target is Framework.MEGATRON else self._without_megatron_options(inst.job)
        refusal = grad_reduce_refusal(target, job.optimizer, job.precision, job.grad_reduce_dtype)
        if refusal is not None:
            self.deviations.append(f"job.grad_reduce_dtype {job.grad_reduce_dtype.value}: {refusal[0]};"
                                   f" emitted {target.value}'s own reduction")
            job = replace(job, grad_reduce_dtype=None)
        # another framework's release is its current one (the version names a source release)
        version = job.framework_version if target is inst.job.framework else None
        self.inst = replace(inst, job=replace(job, framework=target, framework_version=version))
        if target is not Framework.TORCHTITAN and plan.zero_bubble is not None:
            self.deviate(f"zero_bubble {plan.zero_bubble.value}: torch.distributed.pipelining's"
                         f" zero-bubble schedule; {target.value} runs interleaved 1F1B: emitted"
                         " with it (slower than planned)", zero_bubble=None)
        if target is not Framework.MEGATRON and inst.model.mtp_layers:
            self.deviations.append(f"model.mtp_layers {inst.model.mtp_layers}: Megatron-core's"
                                   f" --mtp-num-layers; {target.value} has no multi-token prediction"
                                   " module: emitted without it (less time and memory than planned)")
            self.inst = replace(self.inst, model=replace(self.inst.model, mtp_layers=0))
        # what every target says first: the release and framework the plan was priced for, and
        # the per-operator partitions none of them runs
        cross_framework_note(self)
        drop_partitions(self)

    def _without_megatron_options(self, job):
        """The job without the options only Megatron-core runs (cost/specs.JobSpec), one
        deviation line each: the other targets cannot express them."""
        name = self.target.value
        # (field, the value every target runs, why the target cannot run the job's value)
        options = (
            ("optimizer", Optimizer.ADAM, lambda v: f"job.optimizer {v.value}: {name} has no such"
             " optimizer state layout; emitted Adam with fp32 moments (more memory than planned)"),
            ("recompute_modules", (), lambda v: "job.recompute_modules " + " ".join(x.value for x in v)
             + f": Megatron-core's --recompute-modules; {name} keeps those activations (more memory"
             " than planned)"),
            ("activation_fp8_input_store", False, lambda v: "job.activation_fp8_input_store:"
             f" Megatron-core's activation_func_fp8_input_store; {name} stashes the activation input"
             " in bf16 (more memory than planned)"),
            ("attention_output_e5m6", False, lambda v: "job.attention_output_e5m6: DeepSeek-V3's E5M6"
             f" storage; {name} stashes the attention output as it does (more memory than planned)"),
            ("moe_a2a_overlap", False, lambda v: "job.moe_a2a_overlap: Megatron-core's"
             f" --overlap-moe-expert-parallel-comm; {name} runs the expert all-to-alls in the compute"
             " stream (slower than planned)"),
            ("moe_shared_expert_overlap", False, lambda v: "job.moe_shared_expert_overlap:"
             f" Megatron-core's --moe-shared-expert-overlap; {name} runs the shared expert after the"
             " all-to-alls (slower than planned)"),
            ("moe_dispatcher", MoeDispatcher.ALLTOALL, lambda v: f"job.moe_dispatcher {v.value}:"
             f" Megatron-core's flex dispatcher on DeepEP; emitted {name}'s all-to-all dispatch (one"
             " copy per routed token and expert)"),
        )
        for field, plain, why in options:
            value = getattr(job, field)
            if value != plain:
                self.deviations.append(why(value))
                job = replace(job, **{field: plain})
        return job

    def deviate(self, line: str, **plan_changes) -> None:
        self.deviations.append(line)
        if plan_changes:
            self.plan = self.plan.replace_flat(**plan_changes)

    def note(self, line: str) -> None:
        self.notes.append(line)

    def set_job(self, **changes) -> None:
        self.inst = replace(self.inst, job=replace(self.inst.job, **changes))

    def set_model(self, **changes) -> None:
        self.inst = replace(self.inst, model=replace(self.inst.model, **changes))

    def done(self) -> Emitted:
        p, name = self.plan, self.target.value
        try:
            p.check_against(self.inst)
        except ConfigError as e:  # an adjustment broke the plan: a bug in an exporter
            raise AssertionError(f"emitted {name} plan is invalid: {e}") from None
        if not FRAMEWORK_RULES[self.target].admits(tp=p.tp, pp=p.pp, cp=p.cp, dp=p.dp,
                                                   sp=p.sequence_parallel, zero=p.zero,
                                                   v=p.virtual_stages):
            self.notes.append(
                f"{name} runs this configuration, but it lies outside the space paraplan"
                f" searches for {name} (cost/framework_rules.py), so its predicted time is not"
                " validated against published runs")
        return Emitted(self.inst, self.plan, tuple(self.deviations), tuple(self.notes))


def drop_partitions(d: Deviations) -> None:
    """Per-operator tensor partitions (PrimePar) exist in no framework we export to."""
    if d.plan.partitions:
        from paraplan.solver.plan_text import describe_partitions
        lines = describe_partitions(d.plan, d.source_inst) or [str(dict(d.plan.partitions))]
        d.deviate("the per-operator tensor partitions (" + "; ".join(lines) + "): no framework"
                  f" runs them; emitted Megatron 1-D tensor parallelism over tp={d.plan.tp}",
                  partitions=())


def fold_cp_into_dp(d: Deviations, why: str) -> None:
    """A target without ring context parallelism: the cp ranks become data-parallel replicas
    (the closest use of the same GPUs), with the micro-batch count shrunk to keep the global
    batch; refused when the batch does not split that way."""
    p = d.plan
    if p.cp == 1:
        return
    dp = p.dp * p.cp
    batch = d.inst.job.global_batch
    for micro in sorted({p.micro_batch, 1}, reverse=True):
        if batch % (dp * micro) == 0:
            d.deviate(f"context parallelism cp = {p.cp}: {why}; emitted its {p.cp} ranks as data"
                      f" parallel replicas (dp = {dp}, micro_batch = {micro},"
                      f" {batch // (dp * micro)} micro-batches)",
                      cp=1, dp=dp, micro_batch=micro, num_micro_batches=batch // (dp * micro))
            return
    raise ExportRefused(f"context parallelism cp = {p.cp}: {why}, and the global batch {batch}"
                        f" does not split over dp * cp = {dp} replicas; plan for"
                        f" {d.target.value} instead (job.framework: {d.target.value})")


def refuse_latent_attention(inst: Instance, target: Framework) -> None:
    """Refuse, in one line, a model with multi-head latent attention: paraplan prices and
    exports it only as Megatron-core's MLASelfAttention runs it."""
    if inst.model.mla is not None:
        raise ExportRefused(
            f"model {inst.model.name} has multi-head latent attention: paraplan prices it as"
            f" Megatron-core runs it and exports it only to megatron, not {target.value}",
            fix="export it to megatron")


def moe_note(d: Deviations, how: str) -> None:
    """The note every non-Megatron MoE export carries: cost/moe.py prices the MoE layers as
    Megatron-core runs them (an all-to-all token dispatcher, the local experts as one grouped
    GEMM), and `how` says how close the target's layer is to that."""
    if d.inst.model.moe is not None:
        d.note("the MoE layers are priced as Megatron-core runs them (cost/moe.py: all-to-all"
               f" dispatch over the ep ranks, the local experts as one grouped GEMM); {how}")


def dropless_moe(d: Deviations, why: str) -> None:
    """A target whose MoE layer routes every token (no capacity factor): a planned capacity
    factor is dropped, one deviation line (more expert work than planned on the busiest rank)."""
    _drop_moe_field(d, "capacity_factor", why, "dropless routing (the busiest expert takes every"
                    " token routed to it)")


def unrestricted_routing(d: Deviations, why: str) -> None:
    """A target without node-limited routing: a planned model.moe.max_nodes_per_token is
    dropped, one deviation line."""
    _drop_moe_field(d, "max_nodes_per_token", why, "unrestricted routing")


def _drop_moe_field(d: Deviations, field: str, why: str, emitted: str) -> None:
    """A planned model.moe `field` the target does not run, set to None with one deviation line."""
    moe = d.inst.model.moe
    if moe is not None and getattr(moe, field) is not None:
        d.deviate(f"model.moe.{field} {getattr(moe, field)}: {why}; emitted {emitted}")
        d.set_model(moe=replace(moe, **{field: None}))


def refuse_dualpipe(inst: Instance, target: Framework) -> None:
    """DeepSeek's DualPipe (job.pipeline_schedule dualpipe, cost/dualpipe.py) is run by no
    framework we export to, so its plan is refused rather than emitted as 1F1B: 1F1B on DualPipe's
    split neither has DualPipe's bubble nor its memory (each device holds one stage, not two), so
    the emitted time and memory are not the plan's (65% slower and over 80 GiB on the bundled
    DeepSeek-V3 / 2,048 H800 plan)."""
    if inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        raise ExportRefused(
            f"job.pipeline_schedule dualpipe: {target.value} does not run DeepSeek's DualPipe"
            " (Megatron-LM and DeepSpeed run 1F1B and interleaved 1F1B; torchtitan's schedules,"
            " torch.distributed.pipelining's, have none that feeds micro-batches from both ends"
            " with each stage on two devices), and DualPipe's split emitted as 1F1B is not the"
            " plan", fix="run it with deepseek-ai/DualPipe, or plan the job with"
            " job.pipeline_schedule: 1f1b to export it")


def cross_framework_note(d: Deviations) -> None:
    source_job = d.source_inst.job
    if source_job.release != current_release(d.target):  # an older release, or another framework's
        d.note(f"the plan's time is for {describe(source_job.framework, source_job.framework_version)};"
               f" this file targets {d.target.value}'s current release,"
               f" {current_release(d.target).version}, whose flags and defaults may differ")
    if d.source_framework is not d.target:
        d.note(f"the plan was made for {d.source_framework.value} (its instance's"
               f" job.framework); {d.target.value} gathers, reduces and stores differently"
               " (cost/framework.py, cost/memory.py), so the emitted configuration is priced"
               f" again as {d.target.value} runs it")


def model_chunks(plan: Plan, v_shape: bool = False) -> list[tuple[int, int, int]]:
    """(stage, first layer, layer count) of each model chunk, in chunk order k = c*pp + s, as
    Megatron-core places them (cost/pipeline_split.chunk_ranges).

    v_shape: two chunks per stage placed as a V (torch's ZBVZeroBubble: rank s holds chunks s
    and 2 pp - 1 - s), so chunk k sits on stage k for k < pp and on stage 2 pp - 1 - k after;
    torch's schedules count no embedding or loss slot in a stage's layers."""
    if not v_shape:
        return [(s, first, count) for s, _, first, count in
                chunk_ranges(plan.layers_per_stage, plan.virtual_stages, plan.embedding_in_split,
                             plan.loss_in_split)]
    n, v, pp = plan.layers_per_stage, plan.virtual_stages, plan.pp
    assert v == 2 and not (plan.embedding_in_split or plan.loss_in_split), \
        "a V places two chunks per stage, decoder layers only"
    chunks, first = [], 0
    for k in range(v * pp):
        s = 2 * pp - 1 - k if k >= pp else k
        count = n[s] // v
        chunks.append((s, first, count))
        first += count
    return chunks


@dataclass(frozen=True, slots=True)
class Prediction:
    """One configuration priced by cost/simulate.py."""

    iter_time_s: float
    peak_mem_bytes: float
    capacity_bytes: float
    fits: bool
    # the 10th-90th percentile band of the measured time (cost/trust.plan_trust), as `plan`,
    # `simulate` and `compare` print it; None where no published row prices one
    interval_s: tuple[float, float] | None


@dataclass(frozen=True, slots=True)
class Comparison:
    plan: Prediction
    emitted: Prediction


def predict(inst: Instance, plan: Plan) -> Prediction:
    from paraplan.cost.simulate import simulate
    from paraplan.cost.trust import plan_trust

    bd = simulate(inst, plan)
    worst = max(bd.stages, key=lambda s: s.mem_bytes / s.capacity_bytes)
    band = plan_trust(inst, plan, bd.iter_time_s).interval_s
    return Prediction(bd.iter_time_s, worst.mem_bytes, worst.capacity_bytes, bd.fits,
                      None if band is None else (float(band[0]), float(band[1])))


def compare(inst: Instance, plan: Plan, emitted: Emitted) -> Comparison:
    """The plan as planned (its own framework) and the emitted configuration (the target's)."""
    return Comparison(predict(inst, plan), predict(emitted.inst, emitted.plan))


def will_not_run(cmp: Comparison) -> str | None:
    """Why the emitted configuration is not handed over without --force, in one phrase giving
    both numbers, or None. It does not run when it does not fit memory (emitted peak vs usable
    capacity) or is predicted more than MAX_SLOWDOWN slower than the plan (emitted vs planned
    time per iteration)."""
    e, p = cmp.emitted, cmp.plan
    problems = []
    if not e.fits:
        need, usable = gib_pair(e.peak_mem_bytes, e.capacity_bytes)
        problems.append(f"it needs {need} GiB per GPU of {usable} GiB usable (the plan"
                        f" {bytes_to_gib(p.peak_mem_bytes):.1f} GiB)")
    slowdown = e.iter_time_s / p.iter_time_s - 1
    if slowdown > MAX_SLOWDOWN:
        problems.append(f"it runs {e.iter_time_s:.4g} s per iteration against the plan's"
                        f" {p.iter_time_s:.4g} s ({100 * slowdown:+.1f}%, more than"
                        f" {100 * MAX_SLOWDOWN:.0f}% slower)")
    return "; ".join(problems) or None


def gib_pair(a_bytes: float, b_bytes: float) -> tuple[str, str]:
    """Two sizes in GiB with the fewest decimals (1 to 6) that tell them apart, so a peak just
    over the capacity never reads '32.0 of 32.0'."""
    a, b = bytes_to_gib(a_bytes), bytes_to_gib(b_bytes)
    for digits in range(1, 7):
        if f"{a:.{digits}f}" != f"{b:.{digits}f}":
            break
    return f"{a:.{digits}f}", f"{b:.{digits}f}"
