"""What changing the running plan costs: stop, save the checkpoint, restart, load it resharded.

A checkpoint holds the bf16 weights (2 bytes per parameter) and Adam's fp32 master weights and
two moments (12 bytes), as Megatron-LM and DeepSpeed write them: 14 bytes per parameter.
Saving writes it once and loading under the new layout reads it once (each rank reads the
slices its new shard needs, so resharding costs no extra pass over storage); both run at the
cluster's aggregate checkpoint-storage bandwidth. The fixed `restart_s` covers stopping,
rescheduling and initialising the job.
"""

from __future__ import annotations

from paraplan.cost.flops import model_params
from paraplan.cost.specs import Switching
from paraplan.cost.specs import ModelSpec

CHECKPOINT_BYTES_PER_PARAM = 14


def checkpoint_bytes(m: ModelSpec) -> float:
    return float(model_params(m) * CHECKPOINT_BYTES_PER_PARAM)


def switch_time_s(m: ModelSpec, sw: Switching) -> float:
    """Seconds of training lost when the plan changes: restart + save + load."""
    return sw.restart_s + 2 * checkpoint_bytes(m) / sw.storage_bw_bytes_per_s
