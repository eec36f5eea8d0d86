"""What the job asks of the model, the GPU types and the search space, checked once an
instance is whole, by every instance reader (flat, node groups, part files, `--search`).

Each check raises one `InstanceError` naming the file and field, before any plan is priced, so
every command meets the refusal the same way.
"""

from __future__ import annotations

from paraplan.cost.errors import InstanceError
from paraplan.cost.space_rules import search_refusal
from paraplan.cost.specs import (Framework, GpuSpec, Instance, JobSpec, Mlp, ModelSpec, MoeDispatcher,
                                 PipelineSchedule, Precision, RecomputeModule, SearchSpace)
from paraplan.cost.readers.fields import Section, did_you_mean


def check_whole(inst: Instance, search_sec: Section | None, source: str) -> Instance:
    """`inst` once it is whole, checked as every instance reader and `--search` check it: what
    the job needs of every GPU type, its options against the model and the space, and the
    values listed in `search_sec` (None: none) that no plan can run
    (cost/space_rules.search_refusal), named in that section's file; the others name `source`.
    MoE layers' and latent attention's framework (check_megatron_only) is checked before the
    search is read, which meets framework rules."""
    job, model, search = inst.job, inst.model, inst.search
    gpus = tuple(g.gpu for g in inst.cluster.groups)
    check_gpu_features(source, job, gpus)
    check_gpu_prices(source, job, gpus)
    check_moe_overlaps(source, job, model, search)
    # a searched value no plan can run is named before a job option it conflicts with: its fix
    # (drop the value) clears both, while a job option's fix may only reveal the refusal behind it
    # (per-operator partitions on latent attention: every job option dropped, still refused)
    if search_sec is not None:
        refusal = search_refusal(search, model, inst.cluster, job, frozenset(search_sec.raw))
        if refusal is not None:
            raise search_sec.error(refusal.key, refusal.problem, refusal.fix)
    check_job_options(source, job, model, search)
    return inst


def check_megatron_only(source: str, job: JobSpec, model: ModelSpec) -> None:
    """MoE layers (cost/moe.py) and latent attention (Megatron-core's MLASelfAttention,
    cost/flops.py) are priced as Megatron-core runs them: another framework's layout
    (torchtitan's DeepSeek-V3 model, say) is refused, not priced as Megatron's."""
    if job.framework is Framework.MEGATRON:
        return
    for present, what in ((model.moe is not None, "is a mixture-of-experts model, and paraplan"
                           " prices MoE layers as Megatron-core runs them"),
                          (model.mla is not None, "has multi-head latent attention (model.mla),"
                           " which paraplan prices as Megatron-core runs it")):
        if present:
            raise InstanceError(source, "job.framework",
                                f"{model.name} {what}, not {job.framework.value}",
                                "set job.framework: megatron")


def check_gpu_features(source: str, job: JobSpec, gpus: tuple[GpuSpec, ...]) -> None:
    """What the job needs of every GPU type it may run on, refused here, once, rather than when
    the first configuration is priced, where every command would meet it differently: FP8
    linears run on FP8 tensor cores (cost/coefficients.fp8_matmul_time_s; V100 and A100 have no
    peak_tflops_fp8), and offloaded activations (job.offload_modules) cross the GPU's link to
    its host (cost/moe.offload_exposed_s), which the catalogue must give."""
    for gpu in gpus:
        if job.precision is Precision.FP8 and gpu.peak_fp8_flops_per_s is None:
            raise InstanceError(source, "job.precision",
                                f"fp8 needs FP8 tensor cores, and the {gpu.name} has none (its"
                                " catalogue entry gives no peak_tflops_fp8)",
                                "use precision: bf16, or a GPU with FP8 tensor cores (H100, H200,"
                                " B200, ...)")
        if job.offload_modules and gpu.host_link_bw_bytes_per_s is None:
            raise InstanceError(source, "job.offload_modules",
                                f"offloaded activations cross the GPU's link to its host, and the"
                                f" catalogue entry of the {gpu.name} gives none",
                                "add host_link_gbytes_per_s to the GPU's entry (gpu_types), or"
                                " remove offload_modules")


def check_moe_overlaps(source: str, job: JobSpec, model: ModelSpec, search: SearchSpace) -> None:
    """job.moe_a2a_overlap and job.moe_shared_expert_overlap need experts to move;
    --overlap-moe-expert-parallel-comm also needs no full recomputation and the shared-expert
    overlap a shared expert (Megatron-core's TransformerConfig checks)."""
    for key, on in (("moe_a2a_overlap", job.moe_a2a_overlap),
                    ("moe_shared_expert_overlap", job.moe_shared_expert_overlap)):
        if on and model.moe is None:
            raise InstanceError(source, f"job.{key}",
                                f"{model.name} is dense: there is no expert all-to-all to overlap",
                                f"remove {key}, or give the model a moe: section")
    if job.moe_a2a_overlap and search.full_recompute:
        raise InstanceError(source, "job.moe_a2a_overlap",
                            "Megatron-core refuses full recomputation with"
                            " --overlap-moe-expert-parallel-comm, and the search space allows it",
                            "add search: full_recompute: false, or remove moe_a2a_overlap")
    if job.moe_dispatcher is not MoeDispatcher.ALLTOALL and model.moe is None:
        raise InstanceError(source, "job.moe_dispatcher",
                            f"{model.name} is dense: there are no tokens to dispatch to experts",
                            "remove moe_dispatcher, or give the model a moe: section")
    if job.moe_shared_expert_overlap and not model.moe.shared_ffn:
        raise InstanceError(source, "job.moe_shared_expert_overlap",
                            f"{model.name} has no shared expert (model.moe.shared_ffn) to run"
                            " under the all-to-alls", "remove moe_shared_expert_overlap")


def check_job_options(source: str, job: JobSpec, model: ModelSpec, search: SearchSpace) -> None:
    """The job's recompute and activation-storage options against the model and the search
    space, as Megatron-core's TransformerConfig checks them (Megatron-LM d98e8a6): mla_up_proj
    needs latent attention, moe_act an MoE model, the fp8 activation input a SwiGLU MLP; and
    --recompute-granularity takes one value, so recompute_modules (selective) excludes full
    recomputation of any layer."""
    need = {RecomputeModule.MLA_UP_PROJ: (model.mla is not None, "has no latent attention (model.mla)"),
            RecomputeModule.MOE_ACT: (model.moe is not None, "has no routed experts (model.moe)"),
            RecomputeModule.MOE: (model.moe is not None, "has no routed experts (model.moe)")}
    for mod in job.recompute_modules:
        ok, why = need.get(mod, (True, ""))
        if not ok:
            raise InstanceError(source, "job.recompute_modules", f"{mod.value}: {model.name} {why}",
                                f"remove {mod.value} from recompute_modules")
    if job.offload_modules and model.moe is None:
        raise InstanceError(source, "job.offload_modules", f"{model.name} has no routed experts"
                            " (model.moe) whose inputs these offload", "remove offload_modules")
    if job.recompute_modules and search.full_recompute:
        raise InstanceError(source, "job.recompute_modules",
                            "Megatron-LM's --recompute-granularity is selective (these modules) or"
                            " full (whole layers), and the search space allows full recomputation",
                            "add search: full_recompute: false, or remove recompute_modules")
    storage = [k for k, on in (("recompute_modules", bool(job.recompute_modules)),
                               ("activation_fp8_input_store", job.activation_fp8_input_store),
                               ("attention_output_e5m6", job.attention_output_e5m6)) if on]
    if storage and "spatial_temporal" in search.tensor_partitions:
        raise InstanceError(source, f"job.{storage[0]}",
                            "per-operator tensor partitions price each linear's stash themselves"
                            " (cost/partition.py) and do not apply this option",
                            f"remove {storage[0]}, or search tensor_partitions: [megatron]")
    if job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        # the DualPipe split problem (formulations/dualpipe.py) prices Megatron 1-D layers and
        # searches the split itself: neither baseline nor per-operator layer plans apply
        for key, on, fix in (("uniform_split", search.uniform_split, "uniform_split: false"),
                             ("tensor_partitions", "spatial_temporal" in search.tensor_partitions,
                              "tensor_partitions: [megatron]")):
            if on:
                raise InstanceError(source, f"search.{key}", "is not offered with job.pipeline_schedule"
                                    " dualpipe (the DualPipe split problem, formulations/dualpipe.py,"
                                    " searches Megatron 1-D layer splits)", f"set search {fix}, or use"
                                    " pipeline_schedule: 1f1b")
        from paraplan.cost.dualpipe import schedule_problem  # here: only a DualPipe job reads it
        problem = schedule_problem(2, 1, job.global_batch)
        if problem is not None:  # not even the shortest pipeline runs: no plan can
            raise InstanceError(source, "job.global_batch", f"{job.global_batch}: {problem} (dp ="
                                " micro_batch = 1: the most micro-batches it gives)",
                                "give an even global batch of at least 4, or use"
                                " pipeline_schedule: 1f1b")
    if job.activation_fp8_input_store and model.mlp is not Mlp.SWIGLU:
        raise InstanceError(source, "job.activation_fp8_input_store",
                            f"Megatron-core stores the activation input in fp8 only for SwiGLU, and"
                            f" {model.name}'s MLP is {model.mlp.value}",
                            "remove activation_fp8_input_store")


def check_gpu_prices(source: str, job: JobSpec, gpus: tuple[GpuSpec, ...]) -> None:
    """job.usd_per_gpu_hour names exactly the GPU types of the cluster (`gpus`, one per node
    group): a price for a type the cluster lacks is a typo or the wrong file, and a type
    without one leaves the cost unknown."""
    if not job.usd_per_gpu_s:
        return
    have = sorted({gpu.name for gpu in gpus})
    priced = [name for name, _ in job.usd_per_gpu_s]
    for name in priced:
        if name not in have:
            hint = did_you_mean(name, have)
            raise InstanceError(source, f"job.usd_per_gpu_hour.{name}",
                                f"prices {name}, which the cluster does not have (its GPU types:"
                                f" {', '.join(have)})", (hint + "; " if hint else "")
                                + "price the cluster's GPU types only")
    for name in have:
        if name not in priced:
            raise InstanceError(source, "job.usd_per_gpu_hour",
                                f"gives no price for {name}, which the cluster has",
                                f"add '{name}: <USD per GPU-hour>', or remove usd_per_gpu_hour")
