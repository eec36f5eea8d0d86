"""An Instance written back as the mapping of an instance file (docs/schema.md), such that
the instance reader rebuilds an equal Instance.

`paraplan plan -o` writes the instance beside every plan, flat or of replica classes, so that a
plan made from part files (--hf-config --cluster --job) can be exported or simulated without an
instance file, and a plan on node groups carries its cluster too.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from paraplan.cost import units
from paraplan.cost.specs import (GpuSpec, Instance, JobSpec, ModelSpec, MoeDispatcher,
                                 PipelineSchedule, SearchSpace)
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.readers.cluster_writer import group_to_mapping, groups_to_mapping, writes_flat


# ModelSpec fields whose YAML key differs from the field's name
_MODEL_FIELD_KEYS = {"attention_head_dim": "head_dim"}


def instance_to_mapping(inst: Instance) -> dict:
    """`inst` in the instance-file schema (cost/readers/instance.py), such that `instance_from_mapping`
    rebuilds an equal Instance: units converted back, defaults of the search space left out
    (writing them out would make the framework refusal check see them as user choices); the
    cluster flat where a flat file writes it, else as node groups with the instance's
    scenarios, timeline and switching costs (cost/readers/cluster_writer.py)."""
    model = _model_to_mapping(inst.model)
    job = _job_to_mapping(inst.job)
    flat = writes_flat(inst)
    network = {} if flat else groups_to_mapping(inst)
    cluster = group_to_mapping(inst.cluster.one_group) if flat else network.pop("cluster")
    out: dict[str, Any] = {"name": inst.name, "model": model, "cluster": cluster, "job": job}
    catalogue = load_catalogue()
    custom = {g.gpu.name: _gpu_to_mapping(g.gpu) for g in inst.cluster.groups
              if catalogue.get(g.gpu.name) != g.gpu}
    if custom:
        out["gpu_types"] = custom
    search = _search_to_mapping(inst.search)
    if search:
        out["search"] = search
    return {**out, **network}  # scenarios, timeline, switching: after the search, as files order them


def _model_to_mapping(model_spec: ModelSpec) -> dict:
    """The model section of instance_to_mapping: every field set, optional ones left out at
    their default."""
    from dataclasses import fields

    model = {}
    for f in fields(model_spec):
        value = getattr(model_spec, f.name)
        if value is None or value == ():  # an optional key left out: its default
            continue
        key = _MODEL_FIELD_KEYS.get(f.name, f.name)
        if f.name == "moe":
            model[key] = {g.name: getattr(value, g.name) for g in fields(value)
                          if getattr(value, g.name) is not None}
            continue
        if f.name == "mla":  # every width, q_lora_rank null included (the section requires it)
            model[key] = {g.name: getattr(value, g.name) for g in fields(value)}
            continue
        model[key] = (value.value if isinstance(value, Enum)
                      else list(value) if isinstance(value, tuple) else value)
    return model


def _job_to_mapping(job: JobSpec) -> dict:
    """The job section of instance_to_mapping: its five plain keys, then each optional one only
    where it differs from its default (None: left out), so files stay as they were written."""
    def flag(on: bool):
        return True if on else None

    optional = (
        ("framework_version", job.framework_version),
        ("tp_comm_overlap", flag(job.tp_comm_overlap)),
        ("cudnn_attention", None if job.cudnn_attention else False),
        ("moe_a2a_overlap", flag(job.moe_a2a_overlap)),
        ("moe_shared_expert_overlap", flag(job.moe_shared_expert_overlap)),
        ("pipeline_schedule", None if job.pipeline_schedule is PipelineSchedule.ONE_F_ONE_B
         else job.pipeline_schedule.value),
        ("moe_dispatcher", None if job.moe_dispatcher is MoeDispatcher.ALLTOALL else job.moe_dispatcher.value),
        ("recompute_early_stop", job.recompute_early_stop),
        ("grad_reduce_overlap", job.grad_reduce_overlap),
        ("recompute_modules", [x.value for x in job.recompute_modules] or None),
        ("offload_modules", [x.value for x in job.offload_modules] or None),
        ("activation_fp8_input_store", flag(job.activation_fp8_input_store)),
        ("attention_output_e5m6", flag(job.attention_output_e5m6)),
        ("grad_reduce_dtype", None if job.grad_reduce_dtype is None else job.grad_reduce_dtype.value),
        ("train_tokens", job.train_tokens),
        ("usd_per_gpu_hour", {name: usd * units.HOUR_S for name, usd in job.usd_per_gpu_s} or None),
    )
    return {"global_batch": job.global_batch, "precision": job.precision.value,
            "optimizer": job.optimizer.value, "attention": job.attention.value,
            "framework": job.framework.value, **{k: v for k, v in optional if v is not None}}


def _gpu_to_mapping(gpu: GpuSpec) -> dict:
    out = {"peak_tflops_bf16": gpu.peak_flops_per_s / units.TFLOPS_FLOPS,
           "hbm_gib": units.bytes_to_gib(gpu.hbm_bytes),
           "hbm_gbytes_per_s": gpu.hbm_bw_bytes_per_s / units.GBYTE_BYTES,
           "matmul_eff_max": gpu.matmul_eff_max,
           "matmul_half_gflops": gpu.matmul_half_flops / units.GFLOP_FLOPS,
           "memory_eff": gpu.memory_eff, "attention_eff": gpu.attention_eff,
           "fp8_matmul_eff_max": gpu.fp8_matmul_eff_max,
           "cudnn_attention_speedup": gpu.cudnn_attention_speedup}
    if gpu.peak_fp8_flops_per_s is not None:
        out["peak_tflops_fp8"] = gpu.peak_fp8_flops_per_s / units.TFLOPS_FLOPS
    if gpu.fa2_benchmark_flops_per_s is not None:
        out["fa2_benchmark_tflops"] = gpu.fa2_benchmark_flops_per_s / units.TFLOPS_FLOPS
    if gpu.host_link_bw_bytes_per_s is not None:
        out["host_link_gbytes_per_s"] = gpu.host_link_bw_bytes_per_s / units.GBYTE_BYTES
    if gpu.cudnn_attention_flops_per_s_by_keys:
        out["cudnn_attention_tflops"] = {k: f / units.TFLOPS_FLOPS
                                         for k, f in gpu.cudnn_attention_flops_per_s_by_keys}
    return out


def _search_to_mapping(space: SearchSpace) -> dict:
    from dataclasses import fields

    default = SearchSpace()
    out: dict[str, Any] = {}
    for f in fields(space):
        value = getattr(space, f.name)
        if value == getattr(default, f.name) or f.name == "partial_recompute":
            continue  # partial_recompute: no key; the job's release sets it again as it is read
        if f.name == "memory_reserve_bytes":
            out["memory_reserve_gib"] = units.bytes_to_gib(value)
        elif isinstance(value, tuple):
            out[f.name] = [v.value if isinstance(v, Enum) else v for v in value]
        else:
            out[f.name] = value
    return out
