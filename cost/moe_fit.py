"""Fit the mixture-of-experts parameters (cost/moe_params.py) to the MoE anchors and
cross-validate them leave-one-table-out.

Rows: the priced anchors of cost/published/moe.yaml (cost/moe_anchors.priced_rows), the one
bound by host-side work (`host_bound`) left out of the fit and of every statistic, as
`paraplan accuracy --moe` leaves it out. A row's table is its published comparison
(cost/moe_anchors.published_table: one model on one GPU type and count at one sequence length,
from one file): rows of one table ran the same software and share whatever the model misses
about it, so a table is left out whole.

Objective: the level term, the sum over tables of 1/tables x the mean over the table's rows of
|ln(predicted / measured)| (each table counts equally, as cost/fit.py counts source families),
where predicted / measured is the ratio of model TFLOP/s per GPU (the published metric), the
inverse of the ratio of iteration times; plus PAIR_WEIGHT x the head-to-head term, the mean
over pairs of rows of one table measured more than 5% apart (moe_anchors.head_to_heads) of
|ln(predicted ratio / measured ratio)|. The pairs are what identifies the routing imbalance
(forced-balance against dropless runs of one layout) and the all-to-all overlap (runs with and
without it): fitted to levels alone, the imbalance ran to its 1.0 bound, absorbing the
long-context rows' attention error (too slow, so any slower expert part fits worse), and tied
every forced / dropless pair (4 of 18 head-to-heads right; 13 with the pairs, at 0.1 points of
in-sample and -0.4 points of out-of-sample mean |error|). Method: exhaustive search over a grid of each
parameter's physical range (GRID): every row is priced at every grid point of the parameters
that move its price (a row priced alike at both ends of a parameter's grid does not read it),
so each fold's optimum on the grid is exact, not a local search's, and the folds share the
prices. 72,192 prices over the 33 rows: about 92 s of CPU (measured at load 12; each row's
instance and plan read once, moe_anchors.pricer; 173 s when every price read them anew), and
since every point of a row is priced on that one instance, what reads no MoeParams priced once
for all of them, 63.1 -> 49.4 s (grid_log_errors, base and branch side by side, issue 32); each
point reading only the iteration time, not simulate's whole breakdown (log_error_pricer), 19.8-20.1
-> 11.0-11.5 s of CPU, grid_log_errors equal to the bit (paired, load 10-12, issue 32).

Leave one table out: for each table T, the parameters are fitted on the other tables' rows and
T's rows predicted with them. Those out-of-sample errors are what `paraplan accuracy --moe`
reports first and what cost/trust.moe_trust builds an MoE plan's interval from. They are stored
in cost/published/moe_crossval.yaml (`paraplan accuracy --moe --write`) with each row's
in-sample error beside it: when the cost model changes, those no longer match and the file is
stale (tests/validation/test_moe_fit.py checks it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from paraplan.cost import moe_anchors, moe_params
from paraplan.cost.flops import megatron_tflops_per_gpu
from paraplan.cost.moe_params import MoeParams, UNFITTED
from paraplan.cost.simulate import iter_time_s
from paraplan.cost.trust import RANK_MIN_REL_DIFF

CROSSVAL_FILE = moe_anchors.ANCHORS_PATH.with_name("moe_crossval.yaml")
# The weight of the head-to-head term against the level term (module docstring): a pair's
# ratio is what a planner choosing between two layouts reads, a level what it promises; they
# count alike.
PAIR_WEIGHT = 1.0

# The grid of each parameter, inside its range (cost/moe_params.RANGES); UNFITTED's values are
# on it, so a fold can always keep the unfitted model.
GRID: dict[str, tuple[float, ...]] = {
    "dropless_imbalance": (1.07, 1.1, 1.2, 1.35, 1.5, 1.7, 1.9, 2.2),
    "combined_1f1b_hidden_fraction": (0.0, 0.2, 0.46, 0.6, 0.8, 1.0),
    "grouped_gemm_eff": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "layer_fixed_s": (0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3),
    "expert_gemm_issue_s": (0.0, 5e-6, 1e-5, 1.5e-5, 2e-5, 2.5e-5, 3e-5, 3.34e-5),
}
NAMES = tuple(f.name for f in fields(MoeParams))
assert set(GRID) == set(NAMES)
assert all(getattr(UNFITTED, n) in GRID[n] for n in NAMES)


def table_label(row: dict) -> str:
    """A readable name of the row's published table (moe_anchors.published_table)."""
    model, gpu, gpus, seq, src = moe_anchors.published_table(row)
    return f"{src.split()[-1]} | {model} | {gpus}x{gpu} | seq {seq}"


def fitted_rows() -> list[dict]:
    """The anchors the fit and its cross-validation read: priced, not host-bound."""
    return [r for r in moe_anchors.priced_rows() if not r.get("host_bound")]


def price_with(row: dict, params: MoeParams) -> moe_anchors.AnchorPrice:
    """The row priced as it ran under `params` (a fresh Instance, moe_params.using)."""
    with moe_params.using(params):
        return moe_anchors.price(row)


def log_error_pricer(row: dict) -> Callable[[], float]:
    """log_error(price_with(row, ·)) (tests/oracles/cost.py) under the MoeParams in force, the same float, as a
    function to call once per grid point: the row read once (moe_anchors.pricer), and each call
    reads only the iteration time (simulate.iter_time_s), not simulate's whole breakdown, of
    which the fit reads one number (issue 32). Model TFLOP/s per GPU as simulate's breakdown
    computes it: tokens a second from that time, every GPU of the cluster counted."""
    inst, plan, placements = moe_anchors.read_plan(row)
    published = float(row["measured"]["value"])

    def log_error() -> float:
        # the row ran: priced against the whole HBM, no planning reserve (moe_anchors.pricer)
        time_s = iter_time_s(inst, plan, reserve_bytes=0.0, checked=True, placements=placements)
        tokens_per_s = inst.job.global_batch * inst.model.seq_len / time_s
        return math.log(megatron_tflops_per_gpu(inst.model, tokens_per_s, inst.cluster.num_gpus) / published)
    return log_error


def _point(index: Sequence[int]) -> MoeParams:
    return MoeParams(**{n: GRID[n][i] for n, i in zip(NAMES, index)})


def _reads(row: dict, name: str) -> bool:
    """Whether the row's price moves when `name` goes from one end of its grid to the other."""
    lo = replace(UNFITTED, **{name: GRID[name][0]})
    hi = replace(UNFITTED, **{name: GRID[name][-1]})
    a, b = price_with(row, lo).iter_time_s, price_with(row, hi).iter_time_s
    return abs(a / b - 1) > 1e-12


def grid_log_errors(rows: Sequence[dict]) -> np.ndarray:
    """log errors (tests/oracles/cost.log_error) of every row at every grid point: shape (rows, *grid sizes)."""
    shape = tuple(len(GRID[n]) for n in NAMES)
    out = np.empty((len(rows),) + shape)
    for k, row in enumerate(rows):
        moving = [i for i, n in enumerate(NAMES) if _reads(row, n)]
        base = [NAMES.index(n) for n in NAMES]
        start = [GRID[n].index(getattr(UNFITTED, n)) for n in NAMES]
        sub = np.empty([shape[i] for i in moving]) if moving else np.empty(())
        log_error = log_error_pricer(row)
        for combo in itertools.product(*(range(shape[i]) for i in moving)):
            index = list(start)
            for i, c in zip(moving, combo):
                index[i] = c
            with moe_params.using(_point(index)):
                sub[combo] = log_error()
        # broadcast over the parameters the row does not read
        view = sub.reshape([shape[i] if i in moving else 1 for i in base])
        out[k] = np.broadcast_to(view, shape)
    return out


def _pairs(tables: Sequence[str], published: Sequence[float], keep: np.ndarray) -> list[tuple[int, int]]:
    """Rows of one table, both kept, measured more than RANK_MIN_REL_DIFF apart (the pairs
    moe_anchors.head_to_heads ranks)."""
    n = len(tables)
    return [(i, j) for i in range(n) for j in range(i + 1, n)
            if keep[i] and keep[j] and tables[i] == tables[j]
            and max(published[i], published[j]) / min(published[i], published[j]) - 1 > RANK_MIN_REL_DIFF]


def _loss(errors: np.ndarray, tables: Sequence[str], published: Sequence[float],
          keep: np.ndarray) -> np.ndarray:
    """The objective (module docstring) at every grid point over the rows where `keep`."""
    kept = sorted({t for t, k in zip(tables, keep) if k})
    total = np.zeros(errors.shape[1:])
    for t in kept:
        members = [i for i, (u, k) in enumerate(zip(tables, keep)) if k and u == t]
        total += np.abs(errors[members]).mean(axis=0) / len(kept)
    pairs = _pairs(tables, published, keep)
    if pairs:  # |ln(predicted ratio / measured ratio)| = |e_i - e_j|
        total += PAIR_WEIGHT * np.mean([np.abs(errors[i] - errors[j]) for i, j in pairs], axis=0)
    return total


def _argmin(loss: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmin(loss)), loss.shape))


@dataclass(frozen=True)
class Fold:
    table: str
    rows: int
    train_rows: int
    values: MoeParams


@dataclass(frozen=True)
class CrossValidation:
    ids: tuple[str, ...]
    tables: tuple[str, ...]
    gpus: tuple[str, ...]
    published_tflops_per_gpu: tuple[float, ...]
    in_sample_error_pct: tuple[float, ...]
    out_of_sample_error_pct: tuple[float, ...]
    fitted: MoeParams
    folds: tuple[Fold, ...]


def cross_validate(rows: Sequence[dict] | None = None) -> CrossValidation:
    """Fit on every table (in sample) and leave each table out in turn (module docstring)."""
    rows = fitted_rows() if rows is None else list(rows)
    tables = [table_label(r) for r in rows]
    errors = grid_log_errors(rows)
    published = [float(r["measured"]["value"]) for r in rows]
    everything = np.ones(len(rows), bool)
    best = _argmin(_loss(errors, tables, published, everything))
    in_sample = [100 * math.expm1(errors[(k,) + best]) for k in range(len(rows))]
    out = [math.nan] * len(rows)
    folds = []
    for t in dict.fromkeys(tables):
        held = np.array([u == t for u in tables])
        point = _argmin(_loss(errors, tables, published, ~held))
        for k in np.flatnonzero(held):
            out[k] = 100 * math.expm1(errors[(k,) + point])
        folds.append(Fold(table=t, rows=int(held.sum()), train_rows=int((~held).sum()),
                          values=_point(point)))
    return CrossValidation(ids=tuple(r["id"] for r in rows), tables=tuple(tables),
                           gpus=tuple(r["cluster"]["gpu"] for r in rows),
                           published_tflops_per_gpu=tuple(published),
                           in_sample_error_pct=tuple(in_sample), out_of_sample_error_pct=tuple(out),
                           fitted=_point(best), folds=tuple(folds))


def to_mapping(cv: CrossValidation) -> dict:
    def values(p: MoeParams) -> dict:
        return {n: float(f"{getattr(p, n):.6g}") for n in NAMES}
    return {
        "fitted": values(cv.fitted),
        "fitted_on_bound": cv.fitted.on_bound(),
        "folds": [{"table": f.table, "rows": f.rows, "train_rows": f.train_rows,
                   "values": values(f.values), "on_bound": f.values.on_bound()} for f in cv.folds],
        "rows": [{"id": i, "table": t, "gpu": g, "published_tflops_per_gpu": p,
                  "in_sample_error_pct": round(a, 3), "out_of_sample_error_pct": round(b, 3)}
                 for i, t, g, p, a, b in zip(cv.ids, cv.tables, cv.gpus, cv.published_tflops_per_gpu,
                                             cv.in_sample_error_pct, cv.out_of_sample_error_pct,
                                             strict=True)],
    }


def write(cv: CrossValidation, path: Path = CROSSVAL_FILE) -> None:
    import yaml
    head = ("# Leave-one-table-out cross-validation of the mixture-of-experts parameters over the\n"
            "# MoE anchors, written by `paraplan accuracy --moe --write` (cost/moe_fit.py says how).\n"
            "# Do not edit by hand. error_pct > 0: paraplan faster than measured.\n")
    path.write_text(head + yaml.safe_dump(to_mapping(cv), sort_keys=False, width=100), encoding="utf-8")


@dataclass(frozen=True)
class StoredRow:
    id: str
    table: str
    gpu: str
    published_tflops_per_gpu: float
    in_sample_error_pct: float
    out_of_sample_error_pct: float


def by_table(rows: Sequence[StoredRow]) -> dict[str, list[StoredRow]]:
    """The stored rows grouped by their anchor table, in the order the tables first appear."""
    out: dict[str, list[StoredRow]] = {}
    for r in rows:
        out.setdefault(r.table, []).append(r)
    return out


def load_stored(path: Path = CROSSVAL_FILE) -> tuple[StoredRow, ...]:
    from paraplan.cost.readers.strict_yaml import read_yaml
    return tuple(StoredRow(**r) for r in read_yaml(path)["rows"])


def stale_rows(stored: Sequence[StoredRow], prices: Sequence[moe_anchors.AnchorPrice],
               abs_tol_pct: float = 0.01) -> list[str]:
    """Ids whose in-sample error moved since the file was written (the model changed), or that
    are in one of the two and not the other."""
    now = {a.id: a.error_pct for a in prices if not a.host_bound}
    was = {s.id: s.in_sample_error_pct for s in stored}
    return sorted(i for i in now.keys() | was.keys()
                  if i not in now or i not in was or abs(now[i] - was[i]) > abs_tol_pct)


def mean_abs(values: Sequence[float]) -> float:
    return float(np.mean(np.abs(values))) if len(values) else math.nan
