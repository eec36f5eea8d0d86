"""Out-of-sample check of what grows with scale: one source's Megatron-LM runs at eleven scales,
256 to 12,288 GPUs, with the same software and layout (MegaScale, Jiang et al. NSDI'24, arXiv
2402.15627: the Megatron-LM baseline of Table 2 and Figure 9; tests/data/published/megascale.yaml
cites each number). The rows are a check, never fitted: the fit and the cross-validation read
cost/published/ alone. Each row is priced as `paraplan accuracy FILE` prices it (predict_rows: the
documented defaults for what the paper does not state), and the bounds below are derived from the
paper's own numbers (docs/accuracy.md, "One source at eleven scales", has the table)."""

from functools import lru_cache
from pathlib import Path

from paraplan.cost.calibration import BUNDLED_FILES, load_published, load_rows, predict_rows

ROOT = Path(__file__).resolve().parents[2]
MEGASCALE = ROOT / "tests" / "data" / "published" / "megascale.yaml"

# the batch-768 and batch-6144 strong-scaling blocks of Table 2, and Figure 9's weak scaling
STRONG_768 = (256, 512, 768, 1024)
STRONG_6144 = (3072, 6144, 8192, 12288)
WEAK_530B = (2240, 4480, 11200)


@lru_cache(maxsize=1)
def _priced() -> dict[tuple[str, int], tuple[float, float]]:
    """(model, GPUs) -> (predicted, measured) seconds per iteration."""
    rows = load_rows(str(MEGASCALE))
    out = {}
    for row, res in zip(rows, predict_rows(rows)):
        assert res.reason is None, (res.id, res.reason)
        model = "175b" if row["model"]["layers"] == 96 else "530b"
        out[(model, row["cluster"]["num_gpus"])] = (res.predicted_iter_time_s, res.measured_iter_time_s)
    for (model, n), (p, m) in sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        print(f"{model} {n:>6} GPUs  predicted {p:7.3f} s  measured {m:7.3f} s  error {100 * (p / m - 1):+5.1f}%")
    return out


def _error(model: str, gpus: int) -> float:
    predicted, measured = _priced()[(model, gpus)]
    return predicted / measured - 1


def test_the_check_rows_are_never_fitted():
    # the fit and the cross-validation read the bundled files only, and no bundled row is one
    # of these runs: a check that the fit saw would check nothing
    assert all(p.parent.name == "published" and p.parent.parent.name == "cost" for p in BUNDLED_FILES)
    ids = {r["id"] for r in load_rows(str(MEGASCALE))}
    assert len(ids) == 11
    assert not ids & {r["id"] for r in load_published()}
    assert not [r for r in load_published() if r.get("source", "").startswith("Jiang et al.")]


def test_the_check_table_is_predicted_within_the_project_family_limit():
    # 12%: the out-of-sample MAPE above which a source family of 3+ rows counts as failed
    # (docs/accuracy.md). Today 10.0%: the 175B rows +2..+13%, the 530B rows +18..+20% (at
    # pp 35 without sequence parallelism, the unstated default, only full recomputation fits
    # 80 GB, so they are priced with it; with it the paper's 49.2% MFU would be 66% of the
    # A100's peak in hardware FLOPs)
    errors = [abs(_error(model, n)) for model, n in _priced()]
    assert sum(errors) / len(errors) <= 0.12


def test_the_error_drifts_less_than_the_measured_loss_of_scaling_efficiency():
    # Strong scaling at a fixed batch: a model with no term that grows with scale would predict
    # perfect scaling, and its error would drift by the whole measured loss of efficiency.
    # Table 2: 256 -> 1,024 GPUs at batch 768, 40.0 s -> 11.9 s: efficiency
    # (40.0 x 256) / (11.9 x 1,024) = 10,240 / 12,185.6 = 0.840, a loss of 16.0%;
    # 3,072 -> 12,288 GPUs at batch 6144, 29.02 s -> 8.57 s: 89,149.4 / 105,308.2 = 0.847, 15.3%.
    # The priced terms (pipeline bubble over fewer micro-batches per replica, the exposed
    # gradient all-reduce, the slowest of more ranks) must take up part of it: today the error
    # drifts by -9.4 and -4.8 points (41% and 69% of the loss priced).
    for block, loss in ((STRONG_768, 1 - 10240 / 12185.6), (STRONG_6144, 1 - 89149.4 / 105308.2)):
        drift = _error("175b", block[-1]) - _error("175b", block[0])
        # the priced loss of efficiency is more than none of the measured one (drift > -loss)
        # and not more than all of it beyond the source's run-to-run spread, about 3% (the
        # equal-work pairs of the last test: 0.972x and 1.029x)
        assert -loss < drift < 0.03, (block, drift, loss)


def test_weak_scaling_slowdown_with_more_ranks_is_priced_but_not_overshot():
    # Figure 9: the same 280 sequences per replica on 2,240 and 11,200 GPUs (batch = GPUs), only
    # the number of ranks grows; MFU 49.20% -> 48.20%, so the iteration is 49.2 / 48.2 = 1.0207
    # times longer (the bars' labels to 0.05 points: 1.0207 +- 0.0015). What grows with ranks
    # (the slowest of more GPUs, cost/scale.py; the gradient all-reduce over more data-parallel
    # ranks, cost/comm.py) must lengthen the step, and by no more than measured: today by 0.6%,
    # a third of it (docs/accuracy.md says what the rest would need).
    p_small, _ = _priced()[("530b", WEAK_530B[0])]
    p_large, _ = _priced()[("530b", WEAK_530B[-1])]
    assert 1.0 < p_large / p_small <= 49.2 / 48.2


def test_same_work_per_replica_at_eight_times_the_gpus_grows_within_the_measured_spread():
    # Table 2 has two pairs with the same micro-batches per replica at 8x the GPUs (dp 12 -> 96:
    # 768 sequences on 768 GPUs and 6,144 on 6,144, 64 each; dp 16 -> 128: 48 each). Measured:
    # 14.78 / 15.2 = 0.972 and 12.24 / 11.9 = 1.029, run-to-run spread of one source
    # (stragglers vary by run, Sec. 5.1) of about +-3% around no growth. The priced growth with
    # the data-parallel degree must lie inside it.
    for small, large in ((768, 6144), (1024, 8192)):
        ratio = _priced()[("175b", large)][0] / _priced()[("175b", small)][0]
        assert 14.78 / 15.2 <= ratio <= 12.24 / 11.9, (small, large, ratio)
