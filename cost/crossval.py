"""Leave-one-source-family-out cross-validation: the cost model's accuracy on runs it was not
fitted on, and the residuals the trust interval of every plan is built from.

For each source family F (cost/calibration.py SOURCE_FAMILIES: one publication, or one table
of it) the fitted parameters (cost/fit.py) are refitted from their unfitted defaults on the rows
of every other family, and F's rows are predicted with those values. A family's rows thus say
how wrong the model is on a source it has never seen: another code base, another cluster,
another year. That is the situation of every user's plan, so the out-of-sample residuals, not
the in-sample ones, are what `paraplan accuracy` reports first and what `cost/trust.py` builds
intervals from.

Start: each fold is fitted from UNFITTED (the catalogue's documented default for a die without
published rows, cost/gpus.yaml), never from the published fit: the coordinate search is local,
and started at the published values (fitted on every row, the left-out ones included) it stays
there, which turned a fold's "out-of-sample" prediction into the in-sample one (tried: 5.6%
instead of 6.9%, coverage 89% instead of 79%). A parameter the fold cannot fit (a die left with fewer than 5
rows) keeps its unfitted default. The global matmul_half_flops is profiled over its whole range
in every fit (cost/fit.py), so its start does not matter. The published values in cost/gpus.yaml
were fitted the same way (from UNFITTED, CV_SWEEPS sweeps) on all rows.

The result is stored in cost/published/crossval.yaml (`paraplan accuracy --cv --write`, about
30-40 s per family on one core) with the in-sample prediction of every row beside it: when the
cost model changes, those no longer match and the file is stale (tests/validation checks it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.cost.calibration import PUBLISHED_DIR, RowResult, predict_rows, source_family
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.specs import GpuSpec

if TYPE_CHECKING:  # the fitter is imported where a fold is fitted: a plan reads the stored
    # predictions only (load_stored), never fits (issue 33, start-up)
    from paraplan.cost.fit import Catalogue

CROSSVAL_FILE = PUBLISHED_DIR / "crossval.yaml"

# The efficiencies cost/fit.py fits per die, each starting a fold at GpuSpec's default: the value
# cost/gpus.yaml gives a die that no published row calibrates (0.75 / 0.7 / 0.4; FP8 0.6)
FITTED_PER_DIE = ("matmul_eff_max", "memory_eff", "attention_eff", "fp8_matmul_eff_max")
UNFITTED = {f.name: f.default for f in fields(GpuSpec) if f.name in FITTED_PER_DIE}
CV_SWEEPS = 6  # coordinate-search sweeps after the profile, as the published fit (cost/fit.py)


def unfitted_catalogue(catalogue: Catalogue) -> Catalogue:
    """The catalogue with every fitted per-die efficiency back at its unfitted default."""
    return {name: replace(gpu, **UNFITTED) for name, gpu in catalogue.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Fold:
    """One family held out: the parameters fitted without its rows, and those left on a bound."""
    family: str
    rows: int  # rows predicted out of sample
    train_rows: int
    values: dict[str, float]  # the parameters fitted without the family
    on_bound: dict[str, str]


def fit_fold(rows: Sequence[dict], family: str, catalogue: Catalogue, sweeps: int = CV_SWEEPS
             ) -> tuple[list[RowResult], Fold]:
    """The predictions of `family`'s rows (in their order) by a fit on every other row, started
    from the unfitted defaults (module docstring)."""
    from paraplan.cost.fit import apply_params, fit
    test = [r for r in rows if source_family(r).name == family]
    train = [r for r in rows if source_family(r).name != family]
    start = unfitted_catalogue(catalogue)
    result = fit(train, start, sweeps=sweeps, log=lambda m: None)
    cat, net = apply_params(start, result.values, result.params, NetEfficiency())
    return predict_rows(test, cat, net), Fold(family=family, rows=len(test), train_rows=len(train),
                                               values=dict(result.values), on_bound=result.on_bound())


def leave_one_family_out(rows: Sequence[dict], catalogue: Catalogue,
                         sweeps: int = CV_SWEEPS, log: Callable[[str], None] | None = None
                         ) -> tuple[list[RowResult], list[Fold]]:
    """Out-of-sample predictions of `rows` (in their order) and one Fold per source family."""
    families = sorted({source_family(r).name for r in rows})
    results: dict[str, list[RowResult]] = {}
    folds = []
    for k, fam in enumerate(families):
        if log:
            log(f"cross-validation {k + 1}/{len(families)}: fitting without {fam}, predicting its rows")
        results[fam], fold = fit_fold(rows, fam, catalogue, sweeps)
        folds.append(fold)
    return [results[source_family(r).name].pop(0) for r in rows], folds


# --- the stored result -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class StoredRow:
    """One row of the stored cross-validation: its in-sample and out-of-sample predictions."""
    id: str
    family: str
    measured_iter_time_s: float
    in_sample_s: float | None  # the prediction of the full fit when the file was written
    out_of_sample_s: float | None  # the prediction fitted without the row's family
    full_recompute: bool  # whether the row's modelled plan recomputes whole layers
    # its fullest stage's priced peak memory over HBM as it ran (cost/memory_fill.row_memory_fill;
    # None: not priced). The memory model is not fitted, so it is one value in and out of
    # sample; stored so that a plan's band reads the 239 rows' fills without pricing them
    memory_fill: float | None = None

    @property
    def error(self) -> float | None:
        if self.out_of_sample_s is None:
            return None
        return self.out_of_sample_s / self.measured_iter_time_s - 1

    @property
    def log_error(self) -> float | None:
        return None if self.out_of_sample_s is None else math.log(
            self.out_of_sample_s / self.measured_iter_time_s)


def to_mapping(rows: Sequence[dict], in_sample: Sequence[RowResult],
               out_of_sample: Sequence[RowResult], folds: Sequence[Fold]) -> dict:
    from paraplan.cost.memory_fill import row_memory_fill
    return {
        "folds": [{"family": f.family, "rows": f.rows, "train_rows": f.train_rows,
                   "values": {k: float(f"{v:.6g}") for k, v in sorted(f.values.items())},
                   "on_bound": dict(sorted(f.on_bound.items()))} for f in folds],
        "rows": [{"id": r["id"], "family": source_family(r).name,
                  "measured_iter_time_s": float(r["measured"]["iter_time_s"]),
                  "in_sample_s": _rounded(a.predicted_iter_time_s),
                  "out_of_sample_s": _rounded(b.predicted_iter_time_s),
                  "full_recompute": bool(a.full_recompute), "memory_fill": row_memory_fill(r)}
                 for r, a, b in zip(rows, in_sample, out_of_sample, strict=True)],
    }


def _rounded(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def write(path: Path, mapping: dict) -> None:
    import yaml
    head = ("# Leave-one-source-family-out predictions of the bundled published rows, written by\n"
            "# `paraplan accuracy --cv --write` (cost/crossval.py says how). Do not edit by hand.\n")
    path.write_text(head + yaml.safe_dump(mapping, sort_keys=False, width=100), encoding="utf-8")


def load_stored(path: Path = CROSSVAL_FILE) -> tuple[StoredRow, ...]:
    from paraplan.cost.readers import strict_yaml
    from paraplan.cost.read_cache import cached  # parsed once per installation
    data = cached(path, lambda p: strict_yaml.read_yaml(p, calibration=True), (strict_yaml,))
    return tuple(StoredRow(**r) for r in data["rows"])


def stale_rows(stored: Sequence[StoredRow], in_sample: Sequence[RowResult],
               rel_tol: float = 1e-4) -> list[str]:
    """Ids whose in-sample prediction moved since the file was written (the model changed)."""
    now = {r.id: r.predicted_iter_time_s for r in in_sample}
    out = []
    for s in stored:
        p = now.get(s.id)
        if (p is None) != (s.in_sample_s is None) or (
                p is not None and abs(p / s.in_sample_s - 1) > rel_tol):
            out.append(s.id)
    return out
