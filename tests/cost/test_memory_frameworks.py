"""Memory as the frameworks allocate it (cost/memory.py) against the published rows."""

import pytest

from cost.calibration import BUNDLED_FILES, load_rows, predict_rows, row_to_instance_plan
from cost.loader import load_catalogue
from cost.simulate import simulate

# the published rows as shipped with the package (cost/published/), so a fresh clone runs these
FILES = {f.name: f for f in BUNDLED_FILES}
# Megatron-LM v1 (Shoeybi et al. 2019) trained with activation checkpointing per layer; these
# rows say recompute: none, under which 40 (64) standard-attention layers at micro-batch 8 need
# ~50-68 GiB of activations: no memory model can fit them in 32 GB. A data question for the
# calibration file, not a modelling rule.
ROW_SAYS_NO_RECOMPUTE = {"megatron-v1blog-1.2B-tp1", "megatron-v1blog-4.2B-tp4"}
# Open: with Transformer Engine's cached FP8 weight *and* transpose (2 bytes per GEMM weight,
# cost/memory.fp8_weight_bytes) these NeMo 24.07 FP8 runs come out 1-3 GiB over 80 GiB; whether
# TE keeps the transpose across micro-batches (or Megatron gathers FP8 parameters) is unverified
FP8_WEIGHT_CACHE_OPEN = {"nemo2407-GPT3-175B-512gpu", "nemo2407-GPT3-20B-64gpu",
                         "nemo2407-LLAMA3-8B-8gpu", "nemo2407-Nemotron-340B-128gpu"}

@pytest.mark.parametrize("name", sorted(FILES))
def test_no_published_row_predicted_out_of_memory(name):
    res = predict_rows(load_rows(str(FILES[name])))
    oom = {r.id for r in res if r.fits_memory is False}
    known = ROW_SAYS_NO_RECOMPUTE | FP8_WEIGHT_CACHE_OPEN
    assert oom <= known, sorted(oom - known)


def test_torchtitan_peak_memory_within_ten_percent():
    # torchtitan's benchmark reports torch.cuda max_reserved (train.py logs
    # device_mem_stats.max_reserved_gib at commit 9dec370, the benchmark's version): allocator
    # peak plus fragmentation, without the CUDA context and NCCL buffers (< 1 GiB here, which
    # simulate's peak includes).
    cat = load_catalogue()
    rows = [r for r in load_rows(str(FILES["published-fp8.yaml"])) if r["measured"].get("peak_mem_gib")]
    assert rows
    for row in rows:
        inst, plan = row_to_instance_plan(row, cat)
        got = simulate(inst, plan).peak_mem_bytes
        want = row["measured"]["peak_mem_gib"] * 2**30
        assert abs(got - want) / want < 0.10, (row["id"], got / 2**30)
