"""The GPU catalogue: cost/gpus.yaml and a file's own `gpu_types:` read into GpuSpec records.

A `gpu_types:` entry takes the catalogue's keys, efficiencies optional (absent: GpuSpec's
defaults); it may not shadow a catalogue name (cost/readers/instance.py).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from paraplan.cost import units
from paraplan.cost.errors import InstanceError
from paraplan.cost.specs import GpuSpec
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.fields import (Section, check_int, check_number, config_errors_as,
                                          describe, key_text)


CATALOGUE_PATH = Path(__file__).parents[1] / "gpus.yaml"  # cost/gpus.yaml, beside the records
_GPU_KEYS = ("peak_tflops_bf16", "peak_tflops_fp8", "hbm_gib", "hbm_gbytes_per_s", "matmul_eff_max",
             "matmul_half_gflops", "memory_eff", "attention_eff", "fp8_matmul_eff_max",
             "cudnn_attention_speedup", "fa2_benchmark_tflops", "cudnn_attention_tflops",
             "host_link_gbytes_per_s")
# The optional keys, in the order they are read: (YAML key, GpuSpec field, its conversion to
# the field's unit, None where it has the field's unit; cudnn_attention_tflops: _cudnn_curve).
_OPTIONAL_KEYS = (
    ("matmul_eff_max", "matmul_eff_max", None),
    ("matmul_half_gflops", "matmul_half_flops", units.gflop_to_flops),
    ("memory_eff", "memory_eff", None),
    ("attention_eff", "attention_eff", None),
    ("fp8_matmul_eff_max", "fp8_matmul_eff_max", None),
    ("cudnn_attention_speedup", "cudnn_attention_speedup", None),
    ("fa2_benchmark_tflops", "fa2_benchmark_flops_per_s", units.tflops_to_flops_per_s),
    ("host_link_gbytes_per_s", "host_link_bw_bytes_per_s", units.gbytes_per_s_to_bytes_per_s),
    ("cudnn_attention_tflops", "cudnn_attention_flops_per_s_by_keys", None),
    ("peak_tflops_fp8", "peak_fp8_flops_per_s", units.tflops_to_flops_per_s),
)


def _cudnn_curve(sec: Section) -> tuple[tuple[int, float], ...]:
    """`cudnn_attention_tflops`: a mapping of call length in keys to cuDNN's measured forward +
    backward TFLOP/s there (GpuSpec.cudnn_attention_flops_per_s_by_keys), as (keys, FLOP/s) in
    increasing keys."""
    key = "cudnn_attention_tflops"
    raw = sec.raw[key]
    if not isinstance(raw, dict) or not raw:
        raise sec.error(key, f"expected a mapping of key lengths to TFLOP/s, got {describe(raw)}",
                        "write it like {4096: 739, 8192: 998}")
    field = sec.field(key)
    points = sorted((check_int(k, sec.path, f"{field}.{key_text(k)}", "seq_len"),
                     units.tflops_to_flops_per_s(check_number(v, sec.path, f"{field}.{key_text(k)}",
                                                              key)))
                    for k, v in raw.items())
    return tuple(points)


def gpu_from_mapping(name: str, mapping: Any, path: str, field_prefix: str) -> GpuSpec:
    """One GPU type from its YAML mapping (catalogue entry or user `gpu_types` entry)."""
    sec = Section(mapping, str(path), field_prefix, _GPU_KEYS)
    optional = {}  # absent efficiency keys fall back to GpuSpec's defaults
    for key, field, convert in _OPTIONAL_KEYS:
        if sec.has(key):
            value = _cudnn_curve(sec) if key == "cudnn_attention_tflops" else sec.number(key)
            optional[field] = value if convert is None else convert(value)
    with config_errors_as(str(path), field_prefix, "correct the GPU's numbers"):
        return GpuSpec(
            name=name,
            peak_flops_per_s=units.tflops_to_flops_per_s(sec.number("peak_tflops_bf16")),
            hbm_bytes=units.gib_to_bytes(sec.number("hbm_gib")),
            hbm_bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(sec.number("hbm_gbytes_per_s")),
            **optional,
        )


def _gpu_types(raw: Any, path: str, prefix: str) -> dict[str, GpuSpec]:
    sec = Section(raw, path, prefix, None)
    return {name: gpu_from_mapping(name, spec, path, sec.field(name))
            for name, spec in sec.raw.items()}


def load_catalogue(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """GPU types by name, from `path` or the bundled cost/gpus.yaml: a new dict on every call
    (callers add their own types to it), of records read once per process while the file's
    modification time and size stay (`paraplan plan` asked for the catalogue four times:
    loading the instance, cost/fit's attention fractions, the trust band's MFU records and
    memory fractions; issue 33)."""
    path = CATALOGUE_PATH if path is None else path
    try:
        st = os.stat(path)
    except OSError:  # read_yaml names the file and the problem
        return _gpu_types(read_yaml(path), str(path), "")
    return dict(_catalogue(str(path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=16)
def _catalogue(path: str, mtime_ns: int, size: int) -> dict[str, GpuSpec]:
    """load_catalogue's records of `path` as it was at (mtime_ns, size), the cache's key;
    shared, so never handed out itself."""
    return _gpu_types(read_yaml(path), path, "")


def catalogue_with_gpu_types(top: Section) -> dict[str, GpuSpec]:
    """The bundled catalogue plus the file's own `gpu_types:`, which may not shadow it."""
    gpus = load_catalogue()
    if top.has("gpu_types"):
        user = _gpu_types(top.raw["gpu_types"], top.path, "gpu_types")
        clashes = sorted(user.keys() & gpus.keys())
        if clashes:
            raise InstanceError(top.path, f"gpu_types.{clashes[0]}",
                                "name clashes with the bundled catalogue",
                                f"rename it, e.g. to '{clashes[0]}-custom', or drop it to use"
                                " the catalogue entry")
        gpus.update(user)
    return gpus
