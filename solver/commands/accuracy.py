"""`paraplan accuracy`: the cost model against published runs, out of sample first.

For the bundled rows the headline is the leave-one-source-family-out error (cost/crossval.py):
each row predicted by a model fitted without its source. By default it is read from the stored
cost/published/crossval.yaml (checked against the current model: a stale file is said so);
`--cv` recomputes it live (about 15 s per family), `--write` stores it. Rows of a file the model
was never fitted on are out of sample as they stand. Every row also gets the interval a plan of
its configuration would get (cost/trust.py), built without its own source family's residuals
where it is a bundled row, and the share of rows whose measured time falls inside is reported.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from paraplan.cost.errors import InstanceError
from paraplan.solver.commands.exit_codes import EXIT_ROWS_REFUSED
from paraplan.solver.commands.inputs import read_calibration_files
from paraplan.solver.commands.jsonout import emit_json


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: an undefined statistic is null."""
    return None if x is None or x != x else x


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def out_of_sample(rows, results, live: bool, log):
    """(the out-of-sample RowResult-like predictions by row index, where they come from, folds).

    Live: a leave-one-family-out refit of these rows. Stored: cost/published/crossval.yaml for
    the bundled rows it holds while it matches the current model; rows it does not hold were
    never fitted, so their prediction is out of sample already."""
    from paraplan.cost.calibration import load_published
    from paraplan.cost.crossval import load_stored, stale_rows
    from paraplan.cost.readers.gpus import load_catalogue
    if live:
        from paraplan.cost.crossval import leave_one_family_out
        oos, folds = leave_one_family_out(rows, load_catalogue(), log=log)
        return {i: r.predicted_iter_time_s for i, r in enumerate(oos)}, "refitted now", folds
    bundled = {r["id"] for r in load_published()}
    stored = {s.id: s for s in load_stored()}
    stale = stale_rows([stored[r.id] for r in results if r.id in stored], results)
    out = {}
    for i, r in enumerate(results):
        if r.id in bundled:
            if r.id in stored and r.id not in stale:
                out[i] = stored[r.id].out_of_sample_s
        else:
            out[i] = r.predicted_iter_time_s
    where = "cost/published/crossval.yaml"
    if stale:
        where += (f" (STALE for {len(stale)} rows: the cost model changed since it was written; run"
                  " `paraplan accuracy --cv --write`)")
    return out, where, None


def row_intervals(rows, results, oos, fills):
    """Per row: (interval around the in-sample prediction, interval around the out-of-sample
    one, whether the measured time lies in the latter), each from the stored out-of-sample
    residuals without the row's own family. A row that leaves facts unstated
    (cost/calibration.unknown_variants) gets the band from its fastest possibility's lower end
    to its slowest one's upper end. `fills`: _Fills of the rows."""
    from paraplan.cost.calibration import load_published, source_family
    from paraplan.cost.trust import published_residuals, row_features, trust_for
    bundled = {r["id"] for r in load_published()}
    res = published_residuals()
    out = []
    for i, (row, r) in enumerate(zip(rows, results, strict=True)):
        if r.predicted_iter_time_s is None:
            out.append((None, None, None))
            continue
        own = source_family(row).name if row["id"] in bundled else None
        f = row_features(row, bool(r.full_recompute), fills.of(i))
        spans = []
        for pred in (r.predicted_iter_time_s, oos.get(i)):
            if pred is None:
                spans.append(None)
                continue
            lo, hi = trust_for(f, pred, res, exclude_family=own).interval_s
            if r.span_s is not None:  # the same relative band around each possibility
                lo, hi = lo * r.span_s[0] / pred, hi * r.span_s[1] / pred
            spans.append((lo, hi))
        inside = None if spans[1] is None else spans[1][0] <= r.measured_iter_time_s <= spans[1][1]
        out.append((spans[0], spans[1], inside))
    return out


class _Fills:
    """Each row's priced memory fill (cost/memory_fill.row_memory_fill), priced at most once
    per command: the row's band and its out-of-sample residual both read it, and pricing it
    was most of `accuracy`'s time (issue 32: about 0.6 of 0.85 s, two pricings a row)."""

    def __init__(self, rows):
        self._rows = rows
        self._fill: dict[int, float | None] = {}

    def of(self, i: int) -> float | None:
        if i not in self._fill:
            from paraplan.cost.trust import row_memory_fill
            self._fill[i] = row_memory_fill(self._rows[i])
        return self._fill[i]


def cmd_accuracy(args) -> int:
    from paraplan.cost.calibration import predict_rows
    from paraplan.cost.trust import accuracy_tables, coverage, group_stats, ranking_pairs, residuals

    rows, label, rejected = read_calibration_files(args.file, keep_going=True)
    try:
        results = predict_rows(rows)
        res = residuals(rows, results)
        pairs = ranking_pairs(rows, results)
    except (KeyError, TypeError) as e:
        raise InstanceError(label, f"row field {e}", "missing or of the wrong type",
                            "follow the row schema of cost/published/README.md")
    log = (lambda m: print(m, file=sys.stderr)) if not args.json else (lambda m: None)
    oos, oos_from, folds = out_of_sample(rows, results, args.cv, log)
    if args.write:
        _write(rows, results, oos, folds)
    fills = _Fills(rows)
    spans = row_intervals(rows, results, oos, fills)
    modelled = [r for r in results if r.error is not None]
    skipped = [r for r in results if r.error is None]
    by_gpu = defaultdict(list)
    for r in modelled:
        by_gpu[r.gpu].append(r)
    tables = accuracy_tables(res)
    overall = group_stats(res) if res else None
    wrong = [p for p in pairs if not p.right]
    cv = _cv_summary(rows, results, oos, spans)
    cv_res = _cv_residuals(rows, results, oos, fills)
    cv_tables = accuracy_tables(cv_res)  # the same cuts as in sample, out of sample
    cv_coverage = coverage(cv_res) if len({r.features.family for r in cv_res}) > 1 else None
    moe = moe_anchor_prices() if args.moe else []
    moe_cv = moe_cross_validation(moe, args.moe_refit, args.moe_write, log) if args.moe else None
    acc = _Accuracy(label=label, results=results, spans=spans, oos=oos, overall=overall, cv=cv,
                    oos_from=oos_from, cv_tables=cv_tables, cv_coverage=cv_coverage, by_gpu=by_gpu,
                    tables=tables, pairs=pairs, wrong=wrong, skipped=skipped, rejected=rejected,
                    modelled=modelled, args=args, moe=moe, moe_cv=moe_cv)
    if args.json:
        _accuracy_json(acc)
    else:
        _accuracy_text(acc)
    # 1 where some rows were refused as read (each listed with its field and reason, the rest
    # priced), else 0
    return EXIT_ROWS_REFUSED if rejected else 0


@dataclass(frozen=True)
class _Accuracy:
    """What `accuracy` computed, for its JSON and its text."""

    label: Any
    results: Any
    spans: Any
    oos: Any
    overall: Any
    cv: Any
    oos_from: Any
    cv_tables: Any
    cv_coverage: Any
    by_gpu: Any
    tables: Any
    pairs: Any
    wrong: Any
    skipped: Any
    rejected: Any
    modelled: Any
    args: Any
    moe: Any
    moe_cv: Any


def _accuracy_json(acc: _Accuracy) -> None:
    from paraplan.cost.calibration import mape
    emit_json({
        "files": acc.label.split(", "),
        "rows": [{"id": r.id, "predicted_iter_time_s": r.predicted_iter_time_s,
                  "measured_iter_time_s": r.measured_iter_time_s, "error": r.error,
                  "fits_memory": r.fits_memory,
                  "interval_s": list(acc.spans[i][0]) if acc.spans[i][0] else None,
                  "out_of_sample_iter_time_s": acc.oos.get(i),
                  "out_of_sample_interval_s": list(acc.spans[i][1]) if acc.spans[i][1] else None}
                 for i, r in enumerate(acc.results) if r.error is not None],
        "mape": _finite(mape(acc.results)),
        "bias": acc.overall.bias if acc.overall else None,
        "cv_mape": acc.cv["mape"], "cv_bias": acc.cv["bias"], "cv_rows": acc.cv["rows"],
        "cv_by_family": acc.cv["by_family"], "cv_source": acc.oos_from,
        "cv_by_feature": _feature_json(acc.cv_tables),
        "cv_interval_coverage": acc.cv["coverage"], "cv_interval_coverage_nested": acc.cv_coverage,
        "cv_interval_width_median": acc.cv["width_median"],
        "mape_by_gpu": {g: _finite(mape(rs)) for g, rs in sorted(acc.by_gpu.items())},
        "by_feature": _feature_json(acc.tables),
        "ranking": {"right": len(acc.pairs) - len(acc.wrong), "total": len(acc.pairs),
                    "wrong": [{"faster_measured": p.first, "slower_measured": p.second,
                               "measured_s": list(p.measured_s), "predicted_s": list(p.predicted_s)}
                              for p in acc.wrong]},
        "not_modelled": [{"id": r.id, "reason": r.reason} for r in acc.skipped] + acc.rejected,
        "rows_refused": [r["id"] for r in acc.rejected],
        "status": "ok" if acc.modelled else "no_rows",
        **({"moe_anchors": [dict(vars(a)) for a in acc.moe],
            "moe_head_to_heads": moe_head_to_heads_json(acc.moe),
            "moe_cross_validation": moe_cv_json(acc.moe_cv)} if acc.args.moe else {}),
    })


def _accuracy_text(acc: _Accuracy) -> None:
    from paraplan.cost.calibration import mape
    from paraplan.solver.format import table
    print(table(["row", "gpu", "predicted", "80% interval", "measured", "error", "out of sample",
                 "fits memory"],
                [[r.id, r.gpu, f"{r.predicted_iter_time_s:.3f} s",
                  f"{acc.spans[i][0][0]:.3f}-{acc.spans[i][0][1]:.3f} s",
                  f"{r.measured_iter_time_s:.3f} s", f"{100 * r.error:+.1f}%",
                  f"{100 * (acc.oos[i] / r.measured_iter_time_s - 1):+.1f}%" if acc.oos.get(i) else "-",
                  "yes" if r.fits_memory else "NO (model says OOM)"]
                 for i, r in enumerate(acc.results) if r.error is not None], align="llrrrrrl"))
    _print_feature_tables(acc.tables, "")
    print()
    print(_cv_text(acc.cv, acc.oos_from, acc.cv_coverage))
    _print_feature_tables({cut: g for cut, g in acc.cv_tables.items() if cut != "source family"},  # the table above
                          " (out of sample)")
    print(f"\nranking: {len(acc.pairs) - len(acc.wrong)} / {len(acc.pairs)} pairs of the same workload (measured"
          " times more than 5% apart) ordered right (a predicted tie counts as wrong)")
    for p in acc.wrong:
        print(f"  wrong: {p.first} measured {p.measured_s[0]:.3f} s < {p.second} {p.measured_s[1]:.3f} s,"
              f" predicted {p.predicted_s[0]:.3f} s vs {p.predicted_s[1]:.3f} s")
    for r in acc.skipped:
        print(f"not modelled: {r.id}: {r.reason}")
    for r in acc.rejected:
        print(f"not read: {r['id']} ({r['file']}): {r['field']}: {r['reason']}")
    oom = sum(1 for r in acc.modelled if not r.fits_memory)
    bias = f", bias {100 * acc.overall.bias:+.2f}%" if acc.overall else ""
    headline = (f"out of sample (each source family left out of the fit): MAPE {100 * acc.cv['mape']:.2f}%"
                f" over {acc.cv['rows']} rows; " if acc.cv["mape"] is not None else "")
    print(f"\n{headline}in sample: MAPE {100 * mape(acc.results):.2f}%{bias} over {len(acc.modelled)} rows"
          f" ({len(acc.skipped) + len(acc.rejected)} not modelled; {oom} predicted not to fit memory although"
          " they ran)")
    if acc.args.moe:
        print()
        print(moe_anchor_text(acc.moe))
        print()
        print(moe_cv_text(acc.moe_cv))


def _feature_json(tables) -> dict:
    """accuracy_tables' statistics per cut and group, as the JSON writes them."""
    return {cut: {g: {"rows": st.rows, "mape": st.mape, "bias": st.bias} for g, st in groups.items()}
            for cut, groups in tables.items()}


def _print_feature_tables(tables, suffix: str) -> None:
    """One table per cut of accuracy_tables' statistics, its cut named with `suffix`."""
    from paraplan.solver.format import table
    for cut, groups in tables.items():
        print()
        print(table([cut + suffix, "rows", "MAPE", "bias"],
                    [[g, str(st.rows), f"{100 * st.mape:.1f}%", f"{100 * st.bias:+.1f}%"]
                     for g, st in groups.items()]))


def _cv_residuals(rows, results, oos, fills):
    from paraplan.cost.trust import Residual, row_features
    return [Residual(id=r.id, features=row_features(row, bool(r.full_recompute), fills.of(i)),
                     error=oos[i] / r.measured_iter_time_s - 1)
            for i, (row, r) in enumerate(zip(rows, results)) if oos.get(i) and r.error is not None]


def _cv_summary(rows, results, oos, spans) -> dict:
    from paraplan.cost.calibration import source_family
    fams: dict[str, list] = defaultdict(list)
    for i, (row, r) in enumerate(zip(rows, results)):
        if r.error is not None:
            fams[source_family(row).name].append((r.error, oos[i] / r.measured_iter_time_s - 1
                                                  if oos.get(i) else None, spans[i][2]))
    cv_errs = [e for v in fams.values() for _, e, _ in v if e is not None]
    inside = [c for v in fams.values() for _, _, c in v if c is not None]
    # each band's width over the out-of-sample prediction it is built around
    widths = sorted((s[1][1] - s[1][0]) / oos[i] for i, s in enumerate(spans) if s[1] is not None)
    return {
        "rows": len(cv_errs),
        "mape": _finite(_mean(abs(e) for e in cv_errs)),
        "bias": _finite(_mean(cv_errs)),
        "coverage": _finite(_mean(inside)),
        "width_median": float(statistics.median(widths)) if widths else None,
        "by_family": {f: {"rows": len(v), "in_sample_mape": _mean(abs(a) for a, _, _ in v),
                          "cv_mape": _mean(abs(e) for _, e, _ in v if e is not None),
                          "cv_bias": _mean(e for _, e, _ in v if e is not None),
                          "interval_coverage": _mean(c for _, _, c in v if c is not None)}
                      for f, v in sorted(fams.items())},
    }


def _pct(x, signed=False):
    return "-" if x is None else (f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%")


def _cv_text(cv, source, nested) -> str:
    from paraplan.solver.format import table
    lines = [f"out of sample, each source family predicted by a model fitted without it ({source}):",
             table(["source family", "rows", "in-sample MAPE", "out-of-sample MAPE", "bias",
                    "in 80% interval"],
                   [[f, str(s["rows"]), _pct(s["in_sample_mape"]), _pct(s["cv_mape"]),
                     _pct(s["cv_bias"], True), _pct(s["interval_coverage"])]
                    for f, s in cv["by_family"].items()], align="lrrrrr")]
    if cv["mape"] is not None:
        lines.append(f"out of sample: MAPE {_pct(cv['mape'])}, bias {_pct(cv['bias'], True)} over"
                     f" {cv['rows']} rows; the 80% interval (built without the row's own family,"
                     f" median width {_pct(cv['width_median'])} of the prediction) holds"
                     f" {_pct(cv['coverage'])} of them"
                     + (f" (built from this file's rows alone, each band still without the row's family:"
                        f" {_pct(nested)})" if nested is not None else ""))
    return "\n".join(lines)


def _write(rows, results, oos, folds) -> None:
    from paraplan.cost.calibration import RowResult, load_published
    from paraplan.cost.crossval import CROSSVAL_FILE, to_mapping, write
    bundled = [r["id"] for r in load_published()]
    if folds is None or [r["id"] for r in rows] != bundled:
        raise InstanceError("--write", "<options>", "stores only a live cross-validation of the"
                            " bundled rows", "run `paraplan accuracy --cv --write` without files")
    oos_results = [RowResult(id=r.id, gpu=r.gpu, source=r.source,
                             measured_iter_time_s=r.measured_iter_time_s,
                             predicted_iter_time_s=oos.get(i)) for i, r in enumerate(results)]
    write(CROSSVAL_FILE, to_mapping(rows, results, oos_results, folds))
    print(f"wrote {CROSSVAL_FILE}", file=sys.stderr)
    # the residuals every plan's band reads are stored again from it (cost/trust_table.py)
    from paraplan.cost import trust_table
    trust_table.write()
    print(f"wrote {trust_table.TRUST_TABLE}", file=sys.stderr)


def moe_anchor_prices():
    from paraplan.cost.moe_anchors import price, priced_rows
    return [price(r) for r in priced_rows()]


def moe_anchor_text(moe) -> str:
    from paraplan.solver.format import table
    errs = [a.error_pct for a in moe if not a.host_bound]
    return "\n".join([
        "mixture-of-experts anchors, each published configuration priced as it ran"
        " (cost/published/moe.yaml), in sample: the MoE parameters (cost/moe_params.py) fitted on"
        " every table (cross-validated below):",
        table(["anchor", "gpu", "published TF/GPU", "paraplan TF/GPU", "iteration", "error", "fits memory"],
              [[a.id, a.gpu, f"{a.published_tflops_per_gpu:,.1f}", f"{a.megatron_tflops_per_gpu:,.1f}",
                f"{a.iter_time_s:.2f} s", f"{a.error_pct:+.1f}%", "yes" if a.fits_memory else "NO"]
               for a in moe], align="llrrrrl"),
        f"{len(moe)} anchors (error > 0: paraplan faster than measured); the {len(errs)} not bound by"
        f" host-side work: mean {sum(errs) / len(errs):+.1f}%, mean |error| {sum(map(abs, errs)) / len(errs):.1f}%"
        " (TF/GPU: model TFLOP/s per GPU as Megatron-LM logs it)"]
        + [f"  on {d}: {len(e)} anchors, mean {sum(e) / len(e):+.1f}%, mean |error| {sum(map(abs, e)) / len(e):.1f}%"
           for d, e in _by_die([(a.gpu, a.error_pct) for a in moe if not a.host_bound])]
        + _head_to_head_lines(moe))


def moe_cross_validation(moe, refit: bool, write: bool, log):
    """The MoE anchors' leave-one-table-out cross-validation (cost/moe_fit.py): refitted now
    with `refit` (about 2.5 min on two cores) and stored with `write`, else read from
    cost/published/moe_crossval.yaml, which must match the in-sample prices."""
    from paraplan.cost import moe_fit
    if refit or write:
        log("mixture-of-experts anchors: fitting with each table left out (about 2.5 min)")
        cv = moe_fit.cross_validate()
        if write:
            moe_fit.write(cv)
            log(f"wrote {moe_fit.CROSSVAL_FILE}")
        rows = [moe_fit.StoredRow(**r) for r in moe_fit.to_mapping(cv)["rows"]]
        return rows, moe_fit.to_mapping(cv), "refitted now"
    stored = moe_fit.load_stored()
    stale = moe_fit.stale_rows(stored, moe)
    if stale:
        raise InstanceError(str(moe_fit.CROSSVAL_FILE), "rows", f"stale for {len(stale)} anchors"
                            f" ({stale[0]}, ...): the MoE cost model changed since it was written",
                            "run `paraplan accuracy --moe --moe-write`")
    from paraplan.cost.readers.strict_yaml import read_yaml
    return list(stored), read_yaml(moe_fit.CROSSVAL_FILE), f"stored in {moe_fit.CROSSVAL_FILE.name}"


def moe_cv_json(cv) -> dict:
    from paraplan.cost.moe_fit import by_table, mean_abs
    rows, mapping, source = cv

    def errors(rs) -> dict:
        return {"out_of_sample_mean_abs_error_pct": mean_abs([r.out_of_sample_error_pct for r in rs]),
                "in_sample_mean_abs_error_pct": mean_abs([r.in_sample_error_pct for r in rs])}
    return {"source": source, **errors(rows), "rows": len(rows), "tables": len(by_table(rows)),
            "by_table": {t: {"rows": len(rs), **errors(rs)} for t, rs in by_table(rows).items()},
            "by_row": {r.id: {"table": r.table, "in_sample_error_pct": r.in_sample_error_pct,
                              "out_of_sample_error_pct": r.out_of_sample_error_pct} for r in rows},
            "fitted": mapping["fitted"], "fitted_on_bound": mapping["fitted_on_bound"],
            "folds": mapping["folds"]}


def moe_cv_text(cv) -> str:
    from paraplan.solver.format import table
    js, bound = moe_cv_json(cv), cv[1]["fitted_on_bound"]
    lines = [f"mixture-of-experts anchors, leave one table out ({js['source']}): each table's rows predicted"
             " with the MoE parameters fitted on the other tables (cost/moe_fit.py):",
             table(["table", "rows", "out of sample mean |error|", "in sample mean |error|"],
                   [[t, str(g["rows"]), f"{g['out_of_sample_mean_abs_error_pct']:.1f}%",
                     f"{g['in_sample_mean_abs_error_pct']:.1f}%"] for t, g in js["by_table"].items()],
                   align="lrrr"),
             f"out of sample (each table left out): mean |error| "
             f"{js['out_of_sample_mean_abs_error_pct']:.1f}% over {js['rows']} anchors of"
             f" {js['tables']} tables; in sample: {js['in_sample_mean_abs_error_pct']:.1f}%",
             "fitted on every table: " + ", ".join(
                 f"{k} {v:g}" + (f" (on its {bound[k]} bound)" if k in bound else "")
                 for k, v in js["fitted"].items())]
    return "\n".join(lines)


def _head_to_head_lines(moe) -> list[str]:
    """The published tables' head-to-heads (moe_head_to_heads_json): how many pairs of
    configurations paraplan orders as they were measured, and each one it orders wrong."""
    pairs = moe_head_to_heads_json(moe)
    return ([f"head-to-heads: {pairs['right']} / {pairs['total']} pairs of one published"
             " table (published TF/GPU more than 5% apart) ordered right"]
            + [f"  wrong: {p['faster_measured']} measured {p['published_tflops_per_gpu'][0]:,.0f} >"
               f" {p['slower_measured']} {p['published_tflops_per_gpu'][1]:,.0f} TF/GPU, priced"
               f" {p['paraplan_tflops_per_gpu'][0]:,.1f} vs {p['paraplan_tflops_per_gpu'][1]:,.1f}"
               for p in pairs["wrong"]])


def moe_head_to_heads_json(moe) -> dict:
    """cost/moe_anchors.head_to_heads of the priced anchors: how many pairs are ordered right,
    and each one ordered wrong."""
    from paraplan.cost.moe_anchors import head_to_heads
    pairs = head_to_heads(moe)
    return {"right": sum(p.right for p in pairs), "total": len(pairs),
            "wrong": [{"faster_measured": p.faster, "slower_measured": p.slower,
                       "published_tflops_per_gpu": list(p.published_tflops_per_gpu),
                       "paraplan_tflops_per_gpu": list(p.paraplan_tflops_per_gpu)}
                      for p in pairs if not p.right]}


def _by_die(pairs):
    from paraplan.cost.fit import die
    out: dict[str, list[float]] = {}
    for gpu, e in pairs:
        out.setdefault(die(gpu), []).append(e)
    return sorted(out.items())


def register(sub) -> None:
    a = sub.add_parser("accuracy", help="predict published runs: out-of-sample (leave one source"
                       " family out) and in-sample MAPE, 80%% intervals and their coverage, bias per"
                       " family and feature, ranking of plans of one workload")
    a.add_argument("file", nargs="*", help="rows in the schema of cost/published/README.md"
                   " (default: both bundled files, cost/published/)")
    a.add_argument("--json", action="store_true", help="one JSON document on standard output")
    a.add_argument("--cv", action="store_true",
                   help="refit without each source family now (about 15 s a family) instead of"
                        " reading the stored cross-validation (cost/published/crossval.yaml)")
    a.add_argument("--write", action="store_true",
                   help="with --cv on the bundled rows: store the result in cost/published/crossval.yaml")
    a.add_argument("--moe", action="store_true",
                   help="also price the mixture-of-experts anchors of cost/published/moe.yaml as they"
                        " ran, beside the published model TFLOP/s per GPU, and their leave-one-table-out"
                        " cross-validation (cost/moe_fit.py)")
    a.add_argument("--moe-refit", action="store_true",
                   help="with --moe: fit the MoE parameters with each anchor table left out now (about 2.5"
                        " min) instead of reading cost/published/moe_crossval.yaml")
    a.add_argument("--moe-write", action="store_true",
                   help="with --moe: refit and store the result in cost/published/moe_crossval.yaml")
    a.set_defaults(func=cmd_accuracy)
