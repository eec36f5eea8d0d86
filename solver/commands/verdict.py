"""verify's verdict: which methods proved an answer, whether they agree, and its output; one
for homogeneous and mixed clusters (solver/commands/planning.py)."""

from __future__ import annotations

from paraplan.solver.format import table
from paraplan.solver.commands.jsonout import emit_json

EXIT_DISAGREE = 1


def exhaustive_method(inst, objective: str, max_candidates: int, progress: bool, deadline) -> tuple:
    """verify's exhaustive row, within the planners' shared time limit: a space too large or a
    search the limit stops is reported as skipped, with why."""
    from paraplan.solver.exhaustive import SpaceTooLarge, exhaustive
    try:
        if deadline.expired():
            raise TimeoutError("time limit reached before it started")
        ex = exhaustive(inst, objective, max_candidates=max_candidates, progress=progress,
                               time_limit_s=deadline.remaining_s())
        if not ex.complete:
            raise TimeoutError(f"stopped by the time limit after {ex.candidates:,} candidates")
        value = ex.objective_s if ex.quantile_s is None else ex.quantile_s  # what it minimised
        return ("exhaustive", "optimal" if ex.plan else "infeasible", value, ex.wall_time_s, "", ex.objective_s)
    except (SpaceTooLarge, TimeoutError) as e:
        return ("exhaustive", "skipped", None, None, str(e), None)


def report_verify(args, methods: list[tuple], tol_s: float, objective: str = "nominal",
                  quantile: str = "mean") -> int:
    """verify's verdict and output, for homogeneous and mixed clusters alike. Only methods that
    proved their answer ("optimal" or "infeasible") are compared, on the value each minimised
    (`quantile`, search.objective, of the network `objective`: what the proof is for); the
    verdict names them and every method left out (skipped, or stopped without a proof). Exit 0
    only when every method was compared and all agree."""
    proved = [m for m in methods if m[1] in ("optimal", "infeasible")]
    left_out = [m for m in methods if m[1] not in ("optimal", "infeasible")]
    values = [m[2] for m in proved]
    agree = bool(proved) and methods_agree(values, tol_s)
    verified = agree and not left_out
    if args.json:
        _verify_json(methods, proved, left_out, agree, verified, objective, quantile)
    else:
        what = "iteration time" if objective == "nominal" else f"{objective} objective"
        heads = ["method", "status", f"{what} (s)" if quantile == "mean" else f"{what} at {quantile} (s)"]
        heads += [] if quantile == "mean" else ["predicted (s)"]
        print(table([*heads, "time"],
                    [[m, st, "-" if v is None else f"{v:.9g}",
                      *([] if quantile == "mean" else ["-" if p is None else f"{p:.9g}"]),
                      note if t is None else f"{t:.2f} s"]
                     for m, st, v, t, note, p in methods], align="llr" + "r" * (quantile != "mean") + "l"))
        print(_verdict_line(proved, left_out, agree, verified))
    return 0 if verified else EXIT_DISAGREE


def _verdict_line(proved: list[tuple], left_out: list[tuple], agree: bool, verified: bool) -> str:
    """AGREE, DISAGREE or NOT VERIFIED, naming the methods compared and why the others were not."""
    names = ", ".join(m[0] for m in proved)
    why = "; ".join(f"{m[0]} ({m[4] or 'did not prove optimality: ' + m[1]})" for m in left_out)
    if verified and all(m[2] is None for m in proved):  # every method proved that no plan fits
        return f"AGREE: {names} agree the instance is infeasible (no plan fits)"
    if verified:
        return f"AGREE: {names} found the same optimum"
    if not agree and len(proved) > 1:
        return f"DISAGREE: {names}" + (f"; not compared: {why}" if left_out else "")
    compared = names + (" agree" if len(proved) > 1 else " alone") if proved else "nothing compared"
    return f"NOT VERIFIED: {compared}; not compared: {why}"


def _verify_json(methods, proved, left_out, agree: bool, verified: bool, objective: str,
                 quantile: str) -> None:
    # iter_time_s: the predicted time; quantile_s: the value compared (quantile: search.objective)
    out = {"status": "agree" if verified else ("disagree" if not agree and len(proved) > 1 else "not_verified"),
           "agree": agree, "verified": verified,
           "compared": [m[0] for m in proved], "not_compared": {m[0]: m[4] or m[1] for m in left_out},
           "objective": objective, "quantile": quantile, "iter_time_s": proved[0][5] if agree else None,
           "quantile_s": proved[0][2] if agree else None,
           "methods": [{"method": m, "status": st, "iter_time_s": p, "quantile_s": v, "solve_time_s": t,
                        "note": note} for m, st, v, t, note, p in methods]}
    emit_json(out)


def methods_agree(values: list[float | None], tol_s: float) -> bool:
    """verify's verdict: all found no plan, or all found the same optimum within the solvers'
    stated tolerance plus REL_TOL."""
    from paraplan.solver.planner import REL_TOL
    if any(v is None for v in values):
        return all(v is None for v in values)
    return all(abs(v - values[0]) <= tol_s + REL_TOL * values[0] for v in values)
