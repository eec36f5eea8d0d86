"""Two plans of one instance side by side, and why one is faster.

Both plans are priced by cost/simulate.py. Its breakdown splits each iteration time into the
exposed parts of its critical path (`exposed_s`, which sum to the
iteration time: cost/simulate.critical_path), so the difference of two iteration times is exactly the sum of the part-by-part
differences: "why B is faster" is the list of parts that differ, largest first. Used by
`paraplan compare` and by the report's "your plan vs the optimum" section.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.simulate import Breakdown
from paraplan.solver.format import gib, seconds, train_cost_cells

# A part whose difference is below this share of the faster plan's time is not named as a
# reason (it is still in the table).
REASON_MIN_SHARE = 0.005


@dataclass(frozen=True)
class PartDiff:
    part: str
    a_s: float
    b_s: float

    @property
    def diff_s(self) -> float:
        return self.b_s - self.a_s


@dataclass(frozen=True)
class Comparison:
    a_s: float  # iteration times; inf for a plan that does not fit memory
    b_s: float
    parts: tuple[PartDiff, ...]  # every exposed part of either plan, largest |difference| first
    faster: str | None  # "a", "b", or None when equal
    speedup: float  # slower / faster iteration time (1.0 when equal)
    reasons: tuple[str, ...]  # one line per part that explains the difference


def compare(a: Breakdown, b: Breakdown, names: tuple[str, str] = ("A", "B")) -> Comparison:
    keys = list(dict.fromkeys([*a.exposed_s, *b.exposed_s]))
    parts = sorted((PartDiff(k, a.exposed_s.get(k, 0.0), b.exposed_s.get(k, 0.0)) for k in keys),
                   key=lambda d: -abs(d.diff_s))
    parts = tuple(d for d in parts if d.a_s or d.b_s)
    ta, tb = a.iter_time_s, b.iter_time_s
    if abs(ta - tb) <= 1e-12 * max(ta, tb):
        return Comparison(ta, tb, parts, None, 1.0, ())
    faster = "a" if ta < tb else "b"
    fast_s, slow_s = min(ta, tb), max(ta, tb)
    sign = 1.0 if faster == "b" else -1.0  # positive: the faster plan spends less on the part
    reasons = []
    for d in parts:
        saved = sign * -d.diff_s  # time the faster plan saves on this part
        if abs(saved) < REASON_MIN_SHARE * fast_s:
            continue
        name = d.part.replace("_", " ")
        verb = "saves" if saved > 0 else "spends"
        reasons.append(f"{name}: {names[0]} {seconds(d.a_s)}, {names[1]} {seconds(d.b_s)}"
                       f" ({names[0 if faster == 'a' else 1]} {verb} {seconds(abs(saved))})")
    return Comparison(ta, tb, parts, faster, slow_s / fast_s, tuple(reasons))


def comparison_json(c: Comparison, names: tuple[str, str]) -> dict:
    return {"faster": None if c.faster is None else names[0 if c.faster == "a" else 1],
            "speedup": c.speedup,
            "parts": [{"part": d.part, "a_s": d.a_s, "b_s": d.b_s, "diff_s": d.diff_s} for d in c.parts],
            "reasons": list(c.reasons)}


def side_rows(a: Breakdown, b: Breakdown) -> list[list[str]]:
    """Iteration time, throughput, MFU, peak memory and fit of two plans, as table rows."""
    return [["iteration time", seconds(a.iter_time_s), seconds(b.iter_time_s)],
            ["tokens/s", f"{a.tokens_per_s:,.0f}", f"{b.tokens_per_s:,.0f}"],
            ["MFU", f"{100 * a.mfu:.1f}%", f"{100 * b.mfu:.1f}%"],
            ["peak memory", gib(a.peak_mem_bytes), gib(b.peak_mem_bytes)],
            ["fits memory", "yes" if a.fits else "NO", "yes" if b.fits else "NO"]]


def part_rows(c: Comparison) -> list[list[str]]:
    """Every part of the critical path as a table row: the first plan's time, the second's and
    their difference."""
    return [[d.part.replace("_", " "), seconds(d.a_s), seconds(d.b_s),
             ("+" if d.diff_s >= 0 else "-") + seconds(abs(d.diff_s))] for d in c.parts]


def train_rows(a, b) -> list[list[str]]:
    """The time, GPU-hours and cost to train under two plans (cost/train_cost.TrainCost, None
    for a plan that does not fit memory), as table rows; none when neither has one (the job
    gives no train_tokens)."""
    if a is None and b is None:
        return []
    cells = [dict(train_cost_cells(tc)) if tc is not None else {} for tc in (a, b)]
    names = list(dict.fromkeys(k for c in cells for k in c))
    return [[name, cells[0].get(name, "-"), cells[1].get(name, "-")] for name in names]


def fitting_train_cost(inst, bd, trust):
    """The time and cost to train at breakdown `bd`'s iteration time with `trust`'s interval
    (cost/train_cost.py, cost/trust.py); None without job.train_tokens or when the plan does
    not fit memory (it would not train at all)."""
    from paraplan.cost.train_cost import instance_train_cost
    if inst.job.train_tokens is None or not bd.fits:
        return None
    return instance_train_cost(inst, bd.iter_time_s, trust.interval_s)
