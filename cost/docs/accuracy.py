"""Writes the figures of docs/accuracy.md and docs/moe.md from the stored cross-validations:
`python -m paraplan.cost.docs.accuracy` (`--check`: write nothing, exit 1 where a page is stale).

Every table of figures in those pages is a generated region (cost/docs/regions.py) built here
from what `paraplan accuracy --cv --write` stores (cost/published/crossval.yaml: each dense
row's measured time, its in-sample prediction and the one fitted without its source family)
and what `paraplan accuracy --moe --moe-write` stores (cost/published/moe_crossval.yaml: each
MoE anchor's error in sample and with its table left out, and the fitted parameters), read
through the same functions `paraplan accuracy` and the planner's trust band use
(cost/trust.py). One table is priced now instead, with the current model: moe.md's split of the
long-context anchors' time (`moe_long_context`, about 4 s). A model change that re-stores a
cross-validation, or moves the long-context prices, shows up as a diff of the pages
(tests/validation/test_accuracy_doc.py fails until they are regenerated).

Sign conventions, as the commands print them: a dense row's error is predicted / measured - 1
(> 0: paraplan slower than measured); an MoE anchor's is paraplan's TFLOP/s per GPU over the
published one, minus 1 (> 0: paraplan faster than measured).
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence

from paraplan.cost import moe_fit, moe_params
from paraplan.cost.calibration import RowResult, load_published
from paraplan.cost.crossval import StoredRow, load_stored
from paraplan.cost.docs import regions
from paraplan.cost.docs.regions import DOCS_DIR
from paraplan.cost.trust import (DISTANCE_LEVELS, FEATURE_CUTS, INTERVAL_QUANTILES, SCALE_AXIS_MIN_GPUS, Residual,
                                 coverage_report, family_weights, group_stats, level_pool, published_residuals,
                                 random_effects_log_quantile, ranking_pairs, row_levels, scale_pool,
                                 weighted_quantiles)

COMMAND = "python -m paraplan.cost.docs.accuracy"
ACCURACY_PAGE = DOCS_DIR / "accuracy.md"
MOE_PAGE = DOCS_DIR / "moe.md"
P90 = 0.9


def _pct(x: float, signed: bool = False, digits: int = 1) -> str:
    return f"{100 * x:+.{digits}f}%" if signed else f"{100 * x:.{digits}f}%"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _in_sample_errors(stored: Sequence[StoredRow]) -> dict[str, float]:
    return {s.id: s.in_sample_s / s.measured_iter_time_s - 1 for s in stored if s.in_sample_s is not None}


# --- dense rows ---------------------------------------------------------------------------------

def dense_families(stored: Sequence[StoredRow], res: Sequence[Residual]) -> str:
    """Per source family: rows, in-sample MAPE, out-of-sample MAPE and bias, and the share of
    rows inside the 80% band built without their family (cost/trust.coverage_report)."""
    ins = _in_sample_errors(stored)
    rep = coverage_report(res)
    share = {f: s for f, _, s in rep.by_family}
    by_family: dict[str, list[Residual]] = defaultdict(list)
    for r in res:
        by_family[r.features.family].append(r)
    rows = []
    for fam in sorted(by_family):
        rs = by_family[fam]
        st = group_stats(rs)
        rows.append([fam, str(st.rows), _pct(_mean([abs(ins[r.id]) for r in rs])), _pct(st.mape),
                     _pct(st.bias, True), f"{100 * share[fam]:.0f}%"])
    st = group_stats(res)
    rows.append([f"**{x}**" for x in ("all", str(st.rows), _pct(_mean([abs(ins[r.id]) for r in res]), digits=2),
                                      _pct(st.mape, digits=2), _pct(st.bias, True),
                                      _pct(rep.row_weighted))])
    text = _table(["source family", "rows", "in-sample MAPE", "out-of-sample MAPE", "out-of-sample bias",
                   "in the 80% band"], rows)
    inside = round(rep.row_weighted * len(res))
    return text + (f"\nThe 80% band holds {inside} of the {len(res)} rows ({_pct(rep.row_weighted)});"
                   f" counted per family (each family's share averaged) {_pct(rep.family_weighted)}."
                   f" Its median width is {_pct(rep.median_width)} of the predicted time.\n")


def dense_cuts(res: Sequence[Residual]) -> str:
    """Out of sample by scale band (with the band's coverage), activations, precision and
    framework release: the cuts of cost/trust.FEATURE_CUTS a plan's user reads first."""
    rep = coverage_report(res)
    share = {f"{band} GPUs": s for band, _, s in rep.by_band}
    rows = []
    for cut in ("scale band", "activations", "precision", "framework release"):
        key: Callable = FEATURE_CUTS[cut]
        groups: dict[str, list[Residual]] = defaultdict(list)
        for r in res:
            groups[key(r.features)].append(r)
        order = list(share) if cut == "scale band" else sorted(groups)
        for g in order:
            if g in groups:
                st = group_stats(groups[g])
                rows.append([cut, g, str(st.rows), _pct(st.mape), _pct(st.bias, True),
                             _pct(share[g]) if g in share else ""])
    return _table(["cut", "group", "rows", "MAPE", "bias", "in the 80% band"], rows)


def band_levels(res: Sequence[Residual]) -> str:
    """The band a plan gets at each distance level (on a fitted die, as every bundled GPU type
    of the fitted dies): the rows at that level (each judged as it was predicted, without its
    own family), the pool its band is read from, the band and the p90 factor."""
    levels = row_levels(res)
    rows = []
    for level in range(DISTANCE_LEVELS):
        at = [r for r in res if levels[r.id] == level]
        pool = level_pool(res, level, fitted=True)
        w = family_weights(pool)
        r_lo, r_hi = weighted_quantiles([r.log_error for r in pool], w, INTERVAL_QUANTILES)
        (r_p90,) = weighted_quantiles([r.log_error for r in pool], w, (1 - P90,))
        name = f"{level} and more" if level == DISTANCE_LEVELS - 1 else str(level)
        rows.append([name, str(len(at)), _pct(_mean([abs(r.error) for r in at])) if at else "-",
                     f"{len(pool)} rows, {len({r.features.family for r in pool})} families",
                     f"{math.exp(-r_hi):.2f}-{math.exp(-r_lo):.2f}", f"{math.exp(-r_p90):.3f}"])
    pool = scale_pool(res)
    r_p90 = random_effects_log_quantile(pool, 1 - P90)  # also the band's slow end: 1 - P90 = 0.10
    return _table(["plan's level", "rows at that level", "their mean \\|error\\|", "band from",
                   "band (measured / predicted)", "p90 factor"], rows) + (
        f"\nOn {SCALE_AXIS_MIN_GPUS}+ GPUs (the scale axis) the band's slow end and the p90 factor reach"
        f" at least {math.exp(-r_p90):.3f}: from the"
        f" {len(pool)} rows of {len({r.features.family for r in pool})} families on"
        f" {SCALE_AXIS_MIN_GPUS}+ GPUs, each family's errors an offset of its own.\n")


def ranking(stored: Sequence[StoredRow]) -> str:
    """How many pairs of runs of one workload (measured more than 5% apart) each prediction
    orders right (cost/trust.ranking_pairs), in sample and out of sample."""
    by_id = {s.id: s for s in stored}
    rows = [r for r in load_published() if r["id"] in by_id]

    def pairs(pred: Callable[[StoredRow], float | None]):
        results = [RowResult(id=r["id"], gpu=r["cluster"]["gpu"], source=r["source"],
                             measured_iter_time_s=by_id[r["id"]].measured_iter_time_s,
                             predicted_iter_time_s=pred(by_id[r["id"]])) for r in rows]
        ps = ranking_pairs(rows, results)
        return sum(p.right for p in ps), len(ps)

    (ins, n), (oos, _) = pairs(lambda s: s.in_sample_s), pairs(lambda s: s.out_of_sample_s)
    return (f"Ranking: of the {n} pairs of published runs of one workload measured more than 5%"
            f" apart, {ins} are ordered right in sample and {oos} out of sample (a predicted tie"
            " counts as wrong).\n")


def dense_in_sample(stored: Sequence[StoredRow], res: Sequence[Residual]) -> str:
    """Per source family, the fit on every row scored on those rows."""
    ins = _in_sample_errors(stored)
    fam = {r.id: r.features.family for r in res}
    by_family: dict[str, list[float]] = defaultdict(list)
    for i, e in ins.items():
        if i in fam:
            by_family[fam[i]].append(e)
    rows = [[f, str(len(es)), _pct(_mean([abs(e) for e in es])), _pct(_mean(es), True)]
            for f, es in sorted(by_family.items())]
    es = [e for v in by_family.values() for e in v]
    rows.append([f"**{x}**" for x in ("all", str(len(es)), _pct(_mean([abs(e) for e in es]), digits=2),
                                      _pct(_mean(es), True, 2))])
    return _table(["source family", "rows", "MAPE", "bias"], rows) + "\n" + ranking(stored)


# --- mixture-of-experts anchors -----------------------------------------------------------------

def moe_summary(rows: Sequence[moe_fit.StoredRow]) -> str:
    """One line: the anchors' mean |error| with each table left out and in sample."""
    oos = moe_fit.mean_abs([r.out_of_sample_error_pct for r in rows])
    ins = moe_fit.mean_abs([r.in_sample_error_pct for r in rows])
    bias = _mean([r.out_of_sample_error_pct for r in rows])
    return (f"Over {len(rows)} anchors of {len(moe_fit.by_table(rows))} published tables: mean |error|"
            f" {oos:.1f}% with each table left out of the fit (mean {bias:+.1f}%), {ins:.1f}% in"
            " sample (error > 0: paraplan faster than measured).\n")


def moe_anchors(rows: Sequence[moe_fit.StoredRow]) -> str:
    """Every anchor: its table, GPU, published TFLOP/s per GPU, and its error in sample and
    with its table left out."""
    body = [[r.id, r.gpu, f"{r.published_tflops_per_gpu:,.0f}", f"{r.in_sample_error_pct:+.1f}%",
             f"{r.out_of_sample_error_pct:+.1f}%"] for r in rows]
    return moe_summary(rows) + "\n" + _table(
        ["anchor (cost/published/moe.yaml)", "GPU", "published TF/GPU", "error in sample",
         "table left out"], body)


def moe_parameters(mapping: dict) -> str:
    """The MoE parameters fitted on every table, with their ranges (cost/moe_params.py) and
    which sit on a bound."""
    bound = mapping["fitted_on_bound"]
    rows = [[f"`{n}`", f"{moe_params.RANGES[n][0]:g}-{moe_params.RANGES[n][1]:g}", f"{v:g}",
             bound.get(n, "")] for n, v in mapping["fitted"].items()]
    return _table(["parameter", "range", "fitted on every table", "on its bound"], rows)


LONG_CONTEXT_TOKENS = 16_384  # the long-context anchors: the ModelZoo's 16k-128k Qwen3-235B runs


def moe_long_context() -> str:
    """Each long-context anchor's predicted iteration split by what it waits on
    (cost/moe_anchors.time_split): unlike the tables above this one is priced now, with the
    current model (nine anchors, three simulations each, about 4 s)."""
    from paraplan.cost.moe_anchors import priced_rows, time_split
    rows = []
    for row in priced_rows():
        if row["config"]["seq_len"] < LONG_CONTEXT_TOKENS:
            continue
        x = time_split(row)
        t = x.iter_time_s
        rows.append([x.id, f"{x.seq_len // 1024}k", str(x.cp), f"{x.megatron_tflops_per_gpu:,.1f}",
                     f"{x.published_tflops_per_gpu:,.0f}",
                     f"{100 * (x.megatron_tflops_per_gpu / x.published_tflops_per_gpu - 1):+.1f}%"]
                    + [f"{100 * s / t:.0f}%" for s in (x.attention_s, x.gemm_s, x.a2a_s, x.cp_comm_s, x.other_s)]
                    + [f"{x.implied_attention_speedup:.2f}x"])
    return _table(["anchor", "seq", "cp", "paraplan TF/GPU", "published TF/GPU", "error", "attention",
                   "GEMMs", "all-to-all", "cp comm", "other", "implied attention speed"], rows)


# --- the pages ----------------------------------------------------------------------------------

SIMULATED = {MOE_PAGE: ("moe-long-context",)}  # regions priced now rather than read from a record


def bodies(simulate: bool = True) -> dict:
    """page -> {region name -> body}; without `simulate`, the regions read from the stored
    records only (SIMULATED left out)."""
    from paraplan.cost.readers.strict_yaml import read_yaml
    stored = load_stored()
    res = published_residuals()
    moe_rows = moe_fit.load_stored()
    moe_mapping = read_yaml(moe_fit.CROSSVAL_FILE)
    return {
        ACCURACY_PAGE: {"dense-families": dense_families(stored, res), "dense-cuts": dense_cuts(res),
                        "band-levels": band_levels(res), "dense-in-sample": dense_in_sample(stored, res),
                        "moe-anchors": moe_anchors(moe_rows)},
        MOE_PAGE: {"moe-summary": moe_summary(moe_rows), "moe-parameters": moe_parameters(moe_mapping),
                   **({"moe-long-context": moe_long_context()} if simulate else {})},
    }


def main(argv: list[str] | None = None) -> int:
    return regions.main(argv, COMMAND, bodies)


if __name__ == "__main__":
    sys.exit(main())
