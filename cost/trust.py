"""How far to trust a prediction: the calibration residuals, cut by what a plan uses.

A *residual* is one published row's prediction error. The signed relative error is
e = (predicted - measured) / measured and the log error is r = ln(predicted / measured) = ln(1 + e).

Accuracy tables (`paraplan accuracy`): MAPE = mean |e| and bias = mean e per group, for each
cut in FEATURE_CUTS (source family, GPU, ZeRO stage, cp > 1, pp > 1, precision, framework,
framework release, activations, scale band). A bias far from 0 in one group is a missing effect that the overall MAPE hides.

Ranking score: two rows of the same workload (same model shape, GPU, num_gpus, global batch,
precision) whose measured iteration times differ by more than RANK_MIN_REL_DIFF form a pair; the
model ranks the pair right when it predicts the faster row faster. That is what the planner needs.

Prediction interval of a plan (`trust`): from the *out-of-sample* residuals of the published
rows (cost/crossval.py: each row predicted by a model fitted without its source family), since a
user's plan is a run the model was not fitted on either. With r_10, r_90 the 10th and 90th
percentiles of those log errors, each source family weighing the same (a row weighs
1 / (rows of its family) / (families), as in the fit: MosaicML's 181 rows do not outvote the rest),

    interval_s = [predicted_s * exp(-r_90), predicted_s * exp(-r_10)].

Which residuals (`band_pool`). A plan's *distance level* is the count of what it uses that fewer
than MIN_VALIDATING_ROWS rows exercise in its scale band (its ZeRO stage, cp > 1, pp > 1, FP8, its
GPU die, its framework and its framework release; `unvalidated`), and its memory fill where no
row of its scale band fills HBM as far (MIN_MEMORY_ROWS; each row's fill priced by the memory
model as the row ran, `row_memory_fill`), capped at 3; a row's own level is judged as it was
predicted, against the other families' rows only. A release is validated only by rows of that
release (cost/releases.py); no bundled release is run by two source families, so every row's
release counts as unvalidated and every row sits one level above its count without it, as does a
plan of a release no row ran (every current release). The band comes from the rows *at the
plan's level or farther*: a new source at a given distance errs at least as the rows as far from
the others' runs did, and the nearer rows would understate it (the rows of one level come from
one or two families whose errors agree with each other and not with a new source: each level's
own rows held 62% of level 1). And from rows whose die was fitted as the plan's is
(`die_fitted`: 5+ rows of other families on it, cost/fit.MIN_ROWS_PER_DIE): a row predicted on a
die's catalogue defaults (the two V100 rows, +16% and +25%) speaks for plans on such dies only.
Either cut that leaves a thin pool takes the wider one: fewer than MIN_LEVEL_FAMILIES families,
or fewer than MIN_POOL_ROWS rows, from which a 10th or 90th percentile is not bracketed by the
rows themselves (the constant says why), so the band's end would fall where the pool happens to
stop. A thin level steps down one level at a time (`_level_pool`): its pool keeps its own rows
and adds the nearest ones, rather than jumping to the band of all the rows. The bands and coverage of the bundled rows,
and the alternatives measured and not kept: docs/accuracy.md ("The interval a plan carries").

The scale axis (`scale_slow_log_quantile`). A plan on SCALE_AXIS_MIN_GPUS or more GPUs has its
band's slow end (and its pNN factor) reach at least the 10th percentile of a new source's log
error at that scale, read from the rows on that many GPUs as a random-effects model reads them
(`random_effects_log_quantile`: each family's errors an offset of its own, drawn from a normal
whose spread the family means give). The quantiles above read a new source's offset from the
offsets seen, never beyond the farthest, and at scale those are six families' (two of one row);
the published runs held back from the fit missed the band mostly slower than its upper end at
scale. Only the slow end: the side they missed on and the side a pNN objective reads.

Coverage (`covered`, `coverage_report`) is nested: a row's band is built without its family, and
so are the levels and fitted dies of the rows it is built from (a left-out family validates
nothing). A plan in unvalidated territory gets the wider band on its slow side: the rows three
or more features from the others' runs erred so.

Planning under that uncertainty (`quantile_factor`, its full reading in tests/oracles/cost.py;
`search.objective` / `plan --objective`):
the objective pNN of a configuration is its predicted time times exp(-r_(1 - NN/100)) at its
level, the time it stays under in NN% of the out-of-sample residuals. The factor depends on what
the configuration uses (ZeRO stage, cp, pp) and the instance, and on the plan's memory fill,
which the inner problem sets: the planner solves a relaxation (every plan at the factor within
the fullest row of its scale) and, where its plan fills beyond that row, searches the plans
within it and those beyond it apart (`memory_fill_caps`, solver/memory_tiers.py), scaling each
configuration's time coefficients by its factor in that tier, so its proof holds for the
quantile.

A mixture-of-experts plan takes its interval from the MoE anchors instead (`moe_trust`): no
dense row exercises experts, all-to-alls or routing imbalance.

Validation warnings: each feature the plan uses (ZeRO stage > 0, cp > 1, pp > 1, FP8) that fewer
than MIN_VALIDATING_ROWS published rows exercise in the plan's scale band gets one line. A plan
on MFU_RECORD_MIN_GPUS or more GPUs whose predicted MFU is above every MFU measured on its GPU
die in its precision at that scale (`mfu_records`; on several dies, their records weighted by
each die's peak FLOP/s in the plan) gets one line too: there the cost model is extrapolating,
and a planner exploits optimistic errors first.

One reading for every plan shape (`plan_trust`): a flat plan file's plan is the one-class case
of a plan of replica classes on node groups, and is read with the same features (its framework
release among them), the same memory fill (its fullest stage of any class,
cost/memory_fill.peak_memory_fraction) and the same warnings, generalised to classes; the
objective's factor (`objective_factor`) reads those features too, so a p90 plan's band ends at
the time the planner minimised, whatever its shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost.objective import parse_objective
from paraplan.cost.releases import describe
from paraplan.cost.dies import MIN_ROWS_PER_DIE, die  # GPUs that share a compute die share a record
from paraplan.cost.identity_cache import IdentityCache
from paraplan.cost.memory_fill import peak_memory_fraction, row_memory_fill  # noqa: F401 (read here)
from paraplan.cost.plan_specs import Plan
from paraplan.cost.specs import Instance

if TYPE_CHECKING:  # a plan reads the published rows' facts from the trust table, never the rows
    # (published_residuals): cost/calibration.py is imported where rows are read
    from paraplan.cost.calibration import RowResult

# (lowest, highest or None, label): the scale bands of the accuracy tables, in GPUs
SCALE_BANDS = ((1, 8, "1-8"), (9, 64, "9-64"), (65, 255, "65-255"), (256, 1023, "256-1023"),
               (1024, None, ">= 1024"))
RANK_MIN_REL_DIFF = 0.05  # measured times must differ by more than 5% to form a ranking pair
MIN_GROUP_ROWS = 5  # MoE anchors: fewer on the plan's die than this take every die's
MIN_VALIDATING_ROWS = 3  # fewer published rows than this for a feature at a scale: warn
# a memory fill is validated by a published row of its scale band that fills its HBM as far:
# one row, not MIN_VALIDATING_ROWS, so that the feature marks the fills beyond every run of the
# scale (with three, the nested coverage per row rises above the 75-85% target)
MIN_MEMORY_ROWS = 1
# fills that equal to this relative tolerance are equal: a plan searched under a memory cap
# (solver/memory_tiers.py) and priced again lands on the cap up to rounding
FILL_REL_TOL = 1e-9
INTERVAL_QUANTILES = (0.10, 0.90)
# distance levels 0..3 (3 or more unvalidated features; module docstring); a level whose
# residuals come from fewer than MIN_LEVEL_FAMILIES source families borrows every level's.
# Four, not three: the release (unvalidated for every bundled row) shifts each level by one
# rather than merging the two farthest
DISTANCE_LEVELS = 4
MIN_LEVEL_FAMILIES = 2
# ... and a level whose residuals are fewer than MIN_POOL_ROWS takes the next nearer level's
# pool (`_level_pool`): a 10th percentile read from n residuals is bracketed by them (the
# lowest lies below the true 10th percentile) with probability 1 - 0.9^n, at least 95% from
# n = ln 0.05 / ln 0.9 = 28.4, so 29 rows (Wilks' order-statistic bound; the same for the 90th
# and the highest). Fewer, and the band's end is where the pool happens to stop. Counted in
# rows, not effective rows (Kish's, of the family weights): the stored level-3 pool holds about
# 29 effective rows, on the bound's edge, so a refit could flip the planner's level-3 factor for
# no physical reason
MIN_POOL_ROWS = 29
# the scale of the MFU records (tests/validation/test_plausibility.py checks re-planned optima
# against the same records): below it single-node runs set records no cluster plan is held to
MFU_RECORD_MIN_GPUS = 256
# The scale axis (`scale_slow_log_quantile`): a plan on this many GPUs or more is also held to
# how the published runs at that scale err from one source to the next; the same line as the
# MFU records, where the cluster optima land
SCALE_AXIS_MIN_GPUS = MFU_RECORD_MIN_GPUS


def scale_band(num_gpus: int) -> str:
    for lo, hi, label in SCALE_BANDS:
        if num_gpus >= lo and (hi is None or num_gpus <= hi):
            return label
    raise ValueError(f"num_gpus {num_gpus} < 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """What a row (or a plan) uses, as far as the accuracy tables cut by it."""

    family: str  # source family (cost/calibration.py SOURCE_FAMILIES); "" for a plan
    framework: str
    # the framework release (cost/releases.py) the run used or the plan is for; "" where a
    # row names none: an unknown release validates no release, its own included
    framework_version: str = ""
    gpu: str
    num_gpus: int
    zero: int
    cp: int
    pp: int
    precision: str
    activations: str  # "stored" (no or selective recompute) or "full recompute" (any layer)
    # the fullest stage's priced peak memory over its GPU's HBM (peak_memory_fraction); None
    # where it is not priced (a DualPipe plan): such a prediction counts no memory feature
    memory_fill: float | None = None
    # whether the run (or plan) crosses an oversubscribed switch tier (cost/fabric.py): no
    # published row states one, so a plan on such a fabric is one feature farther from them
    oversubscribed: bool = False
    # the scale band of num_gpus, kept rather than derived per read: the planner's quantile
    # factor and the band compare each feature against every published row's band (about
    # 120,000 reads for one GPT-3 plan)
    band: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "band", scale_band(self.num_gpus))


def activations(full_recompute: bool) -> str:
    return "full recompute" if full_recompute else "stored"


def row_features(row: dict, full_recompute: bool, memory_fill: float | None = None) -> Features:
    """`full_recompute`: whether the row's modelled plan recomputes whole layers
    (RowResult.full_recompute: a row's `recompute: unknown` resolves as its family's default);
    `memory_fill`: its priced fill of HBM (row_memory_fill; None: not counted)."""
    from paraplan.cost.calibration import row_ran, source_family
    cf, ran = row["config"], row_ran(row)
    return Features(family=source_family(row).name, framework=ran.framework.value,
                    framework_version=ran.framework_version or "", gpu=row["cluster"]["gpu"],
                    num_gpus=row["cluster"]["num_gpus"], zero=cf.get("zero") or 0, cp=cf.get("cp") or 1,
                    pp=cf["pp"], precision=row.get("precision", "bf16"),
                    activations=activations(full_recompute), memory_fill=memory_fill)


@dataclass(frozen=True, slots=True, kw_only=True)
class Residual:
    """One published row's relative prediction error, with the features that group it."""
    id: str
    features: Features
    error: float  # (predicted - measured) / measured

    @property
    def log_error(self) -> float:
        return math.log1p(self.error)


def residuals(rows: Sequence[dict], results: Sequence[RowResult]) -> list[Residual]:
    """One residual per modelled row (rows without a prediction have none)."""
    return [Residual(id=r.id, features=row_features(row, bool(r.full_recompute)), error=r.error)
            for row, r in zip(rows, results, strict=True) if r.error is not None]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStats:
    """The prediction error over a group of published rows: count, MAPE and bias."""
    rows: int
    mape: float
    bias: float  # mean signed relative error: > 0 over-predicts the iteration time


def group_stats(res: Sequence[Residual]) -> GroupStats:
    assert res, "group_stats of an empty group"
    return GroupStats(rows=len(res), mape=sum(abs(r.error) for r in res) / len(res),
                      bias=sum(r.error for r in res) / len(res))


# name -> the group a row's features fall in, for the accuracy tables
FEATURE_CUTS: dict[str, Callable[[Features], str]] = {
    "source family": lambda f: f.family,
    "gpu": lambda f: f.gpu,
    "zero": lambda f: f"zero={f.zero}",
    "cp": lambda f: "cp > 1" if f.cp > 1 else "cp = 1",
    "pp": lambda f: "pp > 1" if f.pp > 1 else "pp = 1",
    "precision": lambda f: f.precision,
    "framework": lambda f: f.framework,
    "framework release": lambda f: f"{f.framework} {f.framework_version or '(release unknown)'}",
    "activations": lambda f: f.activations,
    "scale band": lambda f: f"{f.band} GPUs",
}


_BAND_ORDER = {f"{label} GPUs": i for i, (_, _, label) in enumerate(SCALE_BANDS)}


def accuracy_tables(res: Sequence[Residual]) -> dict[str, dict[str, GroupStats]]:
    """For each cut of FEATURE_CUTS, the stats of every non-empty group (groups sorted)."""
    out: dict[str, dict[str, GroupStats]] = {}
    for cut, key in FEATURE_CUTS.items():
        groups: dict[str, list[Residual]] = {}
        for r in res:
            groups.setdefault(key(r.features), []).append(r)
        order = (lambda g: _BAND_ORDER.get(g, len(_BAND_ORDER))) if cut == "scale band" else (lambda g: 0)
        out[cut] = {g: group_stats(groups[g]) for g in sorted(groups, key=lambda g: (order(g), g))}
    return out


# --- ranking ---------------------------------------------------------------------------------

def workload_key(row: dict) -> tuple:
    """Rows with equal keys train the same thing on the same hardware: only the plan differs."""
    md, cl = row["model"], row["cluster"]
    shape = tuple(md.get(k) for k in ("layers", "hidden", "heads", "ffn", "vocab", "seq_len", "mlp"))
    return (shape, md.get("kv_heads") or md["heads"], cl["gpu"], cl["num_gpus"],
            row["config"]["global_batch"], row.get("precision", "bf16"))


def fastest_published_runs(min_gpus: int = MFU_RECORD_MIN_GPUS) -> list[dict]:
    """The fastest bundled published run of each workload (workload_key) on min_gpus or more
    GPUs: the run a re-planned optimum's promise is measured against (bench/promises.py,
    tests/validation/test_plausibility.py)."""
    from paraplan.cost.calibration import load_published
    best: dict[tuple, dict] = {}
    for row in load_published():
        if row["cluster"]["num_gpus"] >= min_gpus:
            k = workload_key(row)
            if k not in best or float(row["measured"]["iter_time_s"]) < float(best[k]["measured"]["iter_time_s"]):
                best[k] = row
    return list(best.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPair:
    """Two published rows whose measured order the predictions may or may not keep."""
    first: str  # the row measured faster
    second: str
    measured_s: tuple[float, float]
    predicted_s: tuple[float, float]

    @property
    def right(self) -> bool:
        """The prediction orders the pair as the measurements do (a predicted tie is wrong)."""
        return self.predicted_s[0] < self.predicted_s[1]


def ranking_pairs(rows: Sequence[dict], results: Sequence[RowResult],
                  min_rel_diff: float = RANK_MIN_REL_DIFF) -> list[RankPair]:
    """Every pair of modelled rows of one workload whose measured times differ by more than
    min_rel_diff (slower / faster - 1 > min_rel_diff), in file order, the faster row first."""
    by_key: dict[tuple, list[tuple[dict, RowResult]]] = {}
    for row, r in zip(rows, results, strict=True):
        if r.predicted_iter_time_s is not None:
            by_key.setdefault(workload_key(row), []).append((row, r))
    pairs = []
    for members in by_key.values():
        for i, (_, a) in enumerate(members):
            for _, b in members[i + 1:]:
                fast, slow = (a, b) if a.measured_iter_time_s <= b.measured_iter_time_s else (b, a)
                if slow.measured_iter_time_s / fast.measured_iter_time_s - 1 <= min_rel_diff:
                    continue
                pairs.append(RankPair(first=fast.id, second=slow.id,
                                      measured_s=(fast.measured_iter_time_s, slow.measured_iter_time_s),
                                      predicted_s=(fast.predicted_iter_time_s, slow.predicted_iter_time_s)))
    return pairs


# --- a plan's interval and warnings ----------------------------------------------------------

def weighted_quantiles(values: Sequence[float], weights: Sequence[float],
                       quantiles: Sequence[float]) -> np.ndarray:
    """Quantiles of a weighted sample: value i sits at the midpoint of its weight on the
    cumulative scale, (w_1 + ... + w_i - w_i / 2) / sum w, and quantiles interpolate linearly
    between those points (the ends clamp to the smallest and largest value)."""
    order = np.argsort(np.asarray(values, dtype=float), kind="stable")
    v = np.asarray(values, dtype=float)[order]
    w = np.asarray(weights, dtype=float)[order]
    mid = (np.cumsum(w) - w / 2) / w.sum()
    return np.interp(np.asarray(quantiles, dtype=float), mid, v)


def log_quantile_interval(predicted_s: float, log_errors: Sequence[float],
                          quantiles: tuple[float, float] = INTERVAL_QUANTILES,
                          weights: Sequence[float] | None = None) -> tuple[float, float]:
    """[predicted / exp(r_hi), predicted / exp(r_lo)] for the quantiles r_lo, r_hi of the log
    errors (weighted when `weights` are given): where the measured time lies if this prediction
    errs like the rows did."""
    if weights is None:
        r_lo, r_hi = np.quantile(np.asarray(log_errors, dtype=float), quantiles)
    else:
        r_lo, r_hi = weighted_quantiles(log_errors, weights, quantiles)
    return predicted_s * math.exp(-r_hi), predicted_s * math.exp(-r_lo)


def family_weights(res: Sequence, families: Sequence[str] | None = None) -> list[float]:
    """1 / (items of the family) / (families): each source family weighs the same. `families`:
    each item's source family, where the items are not residuals (cost/fit.py's rows)."""
    families = [r.features.family for r in res] if families is None else families
    counts: dict[str, int] = {}
    for fam in families:
        counts[fam] = counts.get(fam, 0) + 1
    return [1.0 / counts[fam] / len(counts) for fam in families]


@dataclass(frozen=True, slots=True, kw_only=True)
class Trust:
    """How far to trust a plan's predicted iteration time: interval, rows behind it, warnings."""
    interval_s: tuple[float, float] | None  # None: no published row to compare with
    group: str  # which rows the interval comes from
    rows: int
    warnings: tuple[str, ...]
    # the framework release the plan's time is for (cost/releases.describe); "" for a
    # published row's own interval
    release: str = ""
    release_rows: int = 0  # published rows of that release the band could draw on


def _feature_uses(f: Features) -> list[tuple[str, str, Callable[[Features], bool]]]:
    """(what f uses, its name, whether another row's features exercise it) for each feature of f
    that rows validate per scale band: the ZeRO stage, cp > 1, pp > 1 and FP8, which the warnings
    name; f's GPU die, framework and release (`_context_uses`) only the distance level counts
    (unvalidated_warnings names a GPU type without any row)."""
    uses = []
    if f.zero > 0:
        uses.append((f"zero={f.zero}", f"ZeRO-{f.zero}", lambda g: g.zero == f.zero))
    if f.cp > 1:
        uses.append((f"cp={f.cp}", "cp > 1", lambda g: g.cp > 1))
    if f.pp > 1:
        uses.append((f"pp={f.pp}", "pp > 1", lambda g: g.pp > 1))
    if f.precision == "fp8":
        uses.append(("precision=fp8", "FP8", lambda g: g.precision == "fp8"))
    return uses


def _context_uses(f: Features) -> list[tuple[str, str, Callable[[Features], bool]]]:
    """f's GPU die, its framework and its framework release: rows of any release validate the
    framework, only rows of the same release validate the release (a release changes kernels,
    recipes and overlap: cost/releases.py), and a release no row names (an unknown one) is
    validated by none. The release counts beside the framework rather than in its place: a run
    of another release of the same framework is nearer than a run of another framework
    (measured: in its place, the 80% band held 89.1% of the bundled rows instead of 84.9%)."""
    release = f"{f.framework} {f.framework_version or '(release unknown)'}"
    own = die(f.gpu)  # read once, not per row compared
    uses = [(f"gpu={own}", own, lambda g: die(g.gpu) == own),
            (f"framework={f.framework}", f.framework, lambda g: g.framework == f.framework),
            (f"release={release}", release,
             lambda g: bool(f.framework_version) and (g.framework, g.framework_version)
             == (f.framework, f.framework_version))]
    if f.oversubscribed:  # the fabric's price (cost/fabric.py) is derived, never measured
        uses.append(("fabric=oversubscribed", "an oversubscribed fabric", lambda g: g.oversubscribed))
    return uses


def _memory_uses(f: Features) -> list[tuple[str, str, Callable[[Features], bool]]]:
    """f's memory fill: validated by MIN_MEMORY_ROWS rows of its scale band that fill their HBM
    as far (their priced peak, as f's is priced). A run that stores activations up to the edge
    of HBM exercises what no emptier run does (the allocator's fragmentation, the runtime's
    buffers, the memory model's own error at the edge), so a plan fuller than every row of its
    scale is one feature farther from the measured runs."""
    if f.memory_fill is None:
        return []
    fill = f.memory_fill
    return [(f"memory={100 * fill:.1f}%", "its memory fill",
             lambda g: g.memory_fill is not None and g.memory_fill * (1 + FILL_REL_TOL) >= fill)]


def _in_band(f: Features, res: Sequence[Residual]) -> list[Features]:
    """The features of the residuals in f's scale band: what every feature of f is validated
    by, read once per judgement rather than once per feature (the planner's quantile factor
    and the trust band judge 83 features against the 239 published rows each)."""
    band = f.band
    return [r.features for r in res if r.features.band == band]


def _validating(has: Callable[[Features], bool], in_band: Sequence[Features]) -> int:
    return sum(1 for g in in_band if has(g))


def validation_warnings(f: Features, res: Sequence[Residual],
                        min_rows: int = MIN_VALIDATING_ROWS) -> list[str]:
    """One line per feature of `f` that fewer than min_rows residuals exercise in f's band."""
    lines = []
    in_band = _in_band(f, res)
    for used, name, has in _feature_uses(f):
        n = _validating(has, in_band)
        if n < min_rows:
            lines.append(f"{used} on {f.num_gpus} GPUs: {n} published row{'' if n == 1 else 's'}"
                         f" validate{'s' if n == 1 else ''} {name} at {f.band} GPUs")
    return lines


def unvalidated(f: Features, res: Sequence[Residual], min_rows: int = MIN_VALIDATING_ROWS) -> list[str]:
    """What `f` uses that fewer than min_rows residuals exercise in f's scale band: its ZeRO
    stage, cp > 1, pp > 1, FP8, GPU die, framework, release and an oversubscribed fabric (as
    `_feature_uses` and `_context_uses` name them)."""
    in_band = _in_band(f, res)
    return ([used for used, _, has in _feature_uses(f) + _context_uses(f) if _validating(has, in_band) < min_rows]
            + [used for used, _, has in _memory_uses(f) if _validating(has, in_band) < MIN_MEMORY_ROWS])


def distance_level(f: Features, res: Sequence[Residual]) -> int:
    """How far `f` is from the measured runs `res`: its count of unvalidated features, capped
    at DISTANCE_LEVELS - 1 (module docstring)."""
    return min(len(unvalidated(f, res)), DISTANCE_LEVELS - 1)


def band_pool(f: Features, res: Sequence[Residual], exclude_family: str | None = None
              ) -> tuple[list[Residual], int, list[str]]:
    """(the residuals a prediction with features `f` takes its band from, f's distance level,
    what f uses unvalidated), from those of `res` outside `exclude_family` (the pool): the pool's
    rows whose die was fitted as f's is (`die_fitted`; all of them where those are thin: fewer
    than MIN_POOL_ROWS rows or MIN_LEVEL_FAMILIES source families), and of those the rows at f's
    distance level or farther (where those are thin, the next nearer level's: `_level_pool`).
    Every level and fitted die is judged within the pool (module docstring): a left-out
    family's rows validate nothing its own band is built from."""
    rows, level, _, missing = _band_pool(f, res, exclude_family)
    return rows, level, missing


def _band_pool(f: Features, res: Sequence[Residual], exclude_family: str | None = None
               ) -> tuple[list[Residual], int, int, list[str]]:
    """band_pool's (residuals, level, missing) and, third, the level whose pool the residuals
    are (`_level_pool`: below f's level where that level's is thin)."""
    pool = tuple(r for r in res if r.features.family != exclude_family)
    missing = unvalidated(f, pool)
    level = min(len(missing), DISTANCE_LEVELS - 1)
    rows, taken = _level_pool(pool, level, die_fitted(f, pool))
    return rows, level, taken, missing


def die_fitted(f: Features, res: Sequence[Residual]) -> bool:
    """Whether a prediction with features `f` ran on efficiencies fitted to its die: the
    residuals of other source families than f's hold MIN_ROWS_PER_DIE or more rows on it (the
    fit leaves a die with fewer at its catalogue defaults, cost/fit.py)."""
    return _fitted(f, _die_counts(res))


def _die_counts(res: Sequence[Residual]) -> dict[tuple[str, str], int]:
    """(GPU die, source family) -> the residuals of `res` on that die from that family."""
    counts: dict[tuple[str, str], int] = {}
    for r in res:
        key = (die(r.features.gpu), r.features.family)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _fitted(f: Features, counts: dict[tuple[str, str], int]) -> bool:
    """die_fitted from the residuals' _die_counts: those on f's die of other families than f's."""
    d = die(f.gpu)
    return sum(n for (g, fam), n in counts.items() if g == d and fam != f.family) >= MIN_ROWS_PER_DIE


@lru_cache(maxsize=16)
def _pool_facts(pool: tuple[Residual, ...]) -> tuple[dict[str, int], dict[str, bool]]:
    """pool_facts(pool); for the bundled published rows' pool (every plan's), as the trust
    table stores it (cost/trust_table.py derives it by pool_facts)."""
    if pool == published_residuals():
        table = _trust_table()
        return ({row_id: level for row_id, level, _ in table["pool_facts"]},
                {row_id: fitted for row_id, _, fitted in table["pool_facts"]})
    return pool_facts(pool)


def pool_facts(pool: tuple[Residual, ...]) -> tuple[dict[str, int], dict[str, bool]]:
    """Each residual's distance level and whether its die was fitted, judged as its row was
    predicted: against the pool's residuals of the other source families (the fit it was
    predicted by saw only those)."""
    by_family: dict[str, list[Residual]] = {}
    for r in pool:
        by_family.setdefault(r.features.family, []).append(r)
    others = {fam: [x for x in pool if x.features.family != fam] for fam in by_family}
    # both depend on the row's features alone (its family among them): the 239 bundled rows
    # have 83 distinct ones, each judged once
    level: dict[Features, int] = {}
    fitted: dict[Features, bool] = {}
    counts = _die_counts(pool)  # die_fitted's, read once for every row
    for r in pool:
        if r.features not in level:
            level[r.features] = distance_level(r.features, others[r.features.family])
            fitted[r.features] = _fitted(r.features, counts)
    return {r.id: level[r.features] for r in pool}, {r.id: fitted[r.features] for r in pool}


def _families(res: Sequence[Residual]) -> int:
    return len({r.features.family for r in res})


def _thick(rows: Sequence[Residual]) -> bool:
    """Whether a band's 10th and 90th percentiles can be read from `rows`: MIN_POOL_ROWS or more
    of MIN_LEVEL_FAMILIES or more source families (the constants say why)."""
    return len(rows) >= MIN_POOL_ROWS and _families(rows) >= MIN_LEVEL_FAMILIES


def _level_pool(pool: tuple[Residual, ...], level: int, fitted: bool) -> tuple[list[Residual], int]:
    """(those of `pool` on a die fitted as `fitted` says at distance `level` or farther, `level`),
    each row judged within the pool (_pool_facts); where that cut is thin (`_thick`), the rows
    at level - 1 or farther, and so on to every level's (level 0). The pools are nested, so each
    step down keeps the farther rows and adds the nearer ones: a thin level borrows only the
    rows nearest it in distance, not the band of all the rows at once. Likewise a thin die cut
    takes every die's rows."""
    levels, die_fit = _pool_facts(pool)
    same_die = [r for r in pool if die_fit[r.id] == fitted]
    base = same_die if _thick(same_die) else list(pool)
    for nearest in range(level, 0, -1):
        far = [r for r in base if levels[r.id] >= nearest]
        if _thick(far):
            return far, nearest
    return base, 0


def trust_for(f: Features, predicted_s: float, res: Sequence[Residual],
              exclude_family: str | None = None) -> Trust:
    """The prediction interval from the family-weighted out-of-sample residuals `res` at f's
    distance level or farther (band_pool, module docstring), leaving out `exclude_family`'s (a
    published row's own source, for coverage)."""
    warnings = tuple(validation_warnings(f, res))
    pool, level, taken, missing = _band_pool(f, res, exclude_family)
    if not pool:
        return Trust(interval_s=None, group="no published rows", rows=0, warnings=warnings)
    families = len({r.features.family for r in pool})
    what = f"unvalidated: {', '.join(missing)}" if missing else "every feature validated"
    # a level too thin for a 10-90 band reads the nearer levels' rows too (_level_pool)
    where = (f"rows at distance level {level} or farther" if taken == level else
             f"rows at distance level {taken} or farther (level {level}: fewer than {MIN_POOL_ROWS} rows"
             f" of {MIN_LEVEL_FAMILIES}+ families)")
    r_lo, r_hi, held_at_scale = _band_ends(f, pool, res, exclude_family, INTERVAL_QUANTILES)
    held = f"; its slow end held to the runs on {SCALE_AXIS_MIN_GPUS}+ GPUs (scale axis)" if held_at_scale else ""
    return Trust(interval_s=(predicted_s * math.exp(-r_hi), predicted_s * math.exp(-r_lo)),
                 group=f"out of sample: each row predicted by a model fitted without its source;"
                       f" {families} source families weighted equally; {where} ({what}){held}",
                 rows=len(pool), warnings=warnings)


def _band_ends(f: Features, pool: Sequence[Residual], res: Sequence[Residual], exclude_family: str | None,
               quantiles: tuple[float, float]) -> tuple[float, float, bool]:
    """(r_lo, r_hi, whether the scale axis set r_lo) of the band of a prediction with features
    `f` from its band pool `pool`: the family-weighted quantiles of the pool's log errors, the
    slow end (r_lo) reaching the scale axis's where that is farther (scale_slow_log_quantile,
    from `res` without `exclude_family`)."""
    lo, hi = weighted_quantiles([r.log_error for r in pool], family_weights(pool), quantiles)
    scale = scale_slow_log_quantile(f, res, exclude_family, quantiles[0])
    if scale is not None and scale < lo:
        return scale, float(hi), True
    return float(lo), float(hi), False


def scale_pool(res: Sequence[Residual], exclude_family: str | None = None) -> list[Residual]:
    """The residuals of the runs on SCALE_AXIS_MIN_GPUS or more GPUs outside `exclude_family`."""
    return [r for r in res if r.features.num_gpus >= SCALE_AXIS_MIN_GPUS and r.features.family != exclude_family]


def random_effects_log_quantile(pool: Sequence[Residual], quantile: float) -> float | None:
    """The `quantile` of the log error of a new source family's run, where each family's errors
    share an offset: r = mu + a_family + e_row, a ~ N(0, tau^2), e ~ N(0, sigma^2). With K
    families of n rows, mu is the mean of the family means m_k, tau^2 their sample variance
    (K - 1 degrees of freedom), sigma^2 the pooled variance of the rows about their family's
    mean (n - K degrees of freedom), and a new family's run lies at mu + z_q sqrt(tau^2 (1 + 1/K)
    + sigma^2) (the 1/K: mu is itself a mean of K offsets). Family-weighted quantiles of the
    rows (`weighted_quantiles`) read the new family's offset from the K offsets seen, never
    beyond the farthest; this reads it from their spread. None where K < 2 or n = K (no spread
    to read)."""
    by_family: dict[str, list[float]] = {}
    for r in pool:
        by_family.setdefault(r.features.family, []).append(r.log_error)
    k, n = len(by_family), len(pool)
    if k < 2 or n <= k:
        return None
    means = np.array([np.mean(v) for v in by_family.values()])
    within = sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in by_family.values())
    tau2, sigma2 = float(np.var(means, ddof=1)), within / (n - k)
    return float(np.mean(means)) + NormalDist().inv_cdf(quantile) * math.sqrt(tau2 * (1 + 1 / k) + sigma2)


def scale_slow_log_quantile(f: Features, res: Sequence[Residual], exclude_family: str | None,
                            quantile: float) -> float | None:
    """The scale axis: for a plan on SCALE_AXIS_MIN_GPUS or more GPUs, the `quantile` (< 0.5:
    the slow side, predicted faster than measured) of a new source's log error from the runs at
    that scale (`scale_pool`, `random_effects_log_quantile`); None below that scale or where
    the runs at scale are too few. The band's slow end and a pNN objective's factor reach at
    least this far: the published runs held back from the fit missed the band mostly on that
    side at scale, and within the bundled rows the sources at scale differ by offsets that the
    few families there (six) bracket only in part."""
    if f.num_gpus < SCALE_AXIS_MIN_GPUS:
        return None
    return random_effects_log_quantile(scale_pool(res, exclude_family), quantile)


# any plan at the scale axis's scale: scale_slow_log_quantile reads nothing else of it
_AT_SCALE = Features(family="", framework="", gpu="", num_gpus=SCALE_AXIS_MIN_GPUS, zero=0, cp=1, pp=1,
                     precision="bf16", activations="stored")


def _scale_factor(f: Features, res: Sequence[Residual], quantile: float) -> float | None:
    """exp(-r) for r the scale axis's log error at 1 - quantile (scale_slow_log_quantile); None
    where the axis holds nothing: below its scale, too few runs there, or a quantile of 0.5 or
    less (the axis holds the slow side only)."""
    if quantile <= 0.5:
        return None
    r = scale_slow_log_quantile(f, res, None, 1.0 - quantile)
    return None if r is None else math.exp(-r)


def _pool_quantile_factor(pool: Sequence[Residual], quantile: float) -> float:
    if not pool:
        return 1.0
    (r,) = weighted_quantiles([r.log_error for r in pool], family_weights(pool), (1.0 - quantile,))
    return math.exp(-float(r))


def nested_bands(res: Sequence[Residual], quantiles: tuple[float, float] = INTERVAL_QUANTILES
                 ) -> list[tuple[float, float]]:
    """For each residual, the (r_lo, r_hi) log-error quantiles of the band built, as for a plan,
    from the residuals of the other source families (band_pool: their levels and fitted dies
    judged without the row's family too)."""
    out = []
    for r in res:
        pool, _, _ = band_pool(r.features, res, exclude_family=r.features.family)
        lo, hi, _ = _band_ends(r.features, pool, res, r.features.family, quantiles)
        out.append((lo, hi))
    return out


def covered(res: Sequence[Residual], quantiles: tuple[float, float] = INTERVAL_QUANTILES) -> list[bool]:
    """For each residual, whether it lies inside its nested band (`nested_bands`)."""
    return [bool(lo <= r.log_error <= hi) for r, (lo, hi) in zip(res, nested_bands(res, quantiles), strict=True)]


def relative_width(r_lo: float, r_hi: float) -> float:
    """A band's width over the predicted time: the interval is [p exp(-r_hi), p exp(-r_lo)]
    (log_quantile_interval), so its width is p (exp(-r_lo) - exp(-r_hi))."""
    return math.exp(-r_lo) - math.exp(-r_hi)


def coverage(res: Sequence[Residual], quantiles: tuple[float, float] = INTERVAL_QUANTILES) -> float:
    """The share of residuals inside their band (`covered`): how often a band of this width
    holds a new source's run, each row counting once."""
    inside = covered(res, quantiles)
    return sum(inside) / len(inside)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoverageReport:
    """`covered` counted three ways. Row-weighted, MosaicML's 181 rows (76% of them, almost all
    on 1-64 GPUs) decide the figure; family-weighted, each source family's share counts once,
    as the band weighs them; by scale band, whether the band holds at the scale a plan is for."""

    row_weighted: float
    family_weighted: float  # the mean over source families of each family's share
    by_family: tuple[tuple[str, int, float], ...]  # (family, rows, share), families sorted
    by_band: tuple[tuple[str, int, float], ...]  # (scale band, rows, share), SCALE_BANDS order
    # the median over rows of their nested band's width over the predicted time
    # (relative_width): a band can hold every row by being wide, so coverage is read beside it
    median_width: float


def coverage_report(res: Sequence[Residual],
                    quantiles: tuple[float, float] = INTERVAL_QUANTILES) -> CoverageReport:
    bands = nested_bands(res, quantiles)
    inside = [bool(lo <= r.log_error <= hi) for r, (lo, hi) in zip(res, bands, strict=True)]

    def shares(key: Callable[[Features], str], order: Sequence[str]) -> tuple[tuple[str, int, float], ...]:
        groups: dict[str, list[bool]] = {}
        for r, ok in zip(res, inside, strict=True):
            groups.setdefault(key(r.features), []).append(ok)
        return tuple((g, len(groups[g]), sum(groups[g]) / len(groups[g])) for g in order if g in groups)

    by_family = shares(lambda f: f.family, sorted({r.features.family for r in res}))
    return CoverageReport(row_weighted=sum(inside) / len(inside),
                          family_weighted=sum(s for _, _, s in by_family) / len(by_family),
                          by_family=by_family,
                          by_band=shares(lambda f: f.band, [label for _, _, label in SCALE_BANDS]),
                          median_width=float(np.median([relative_width(lo, hi) for lo, hi in bands])))


# The bundled published rows' facts that every plan reads (its band, its quantile objective, its
# warnings), derived once by cost/trust_table.py and stored beside the rows: deriving them on
# each run joined three data files and priced every row, 6% of `paraplan plan` on GPT-3 175B
# (issue 33). tests/cost/test_trust_table.py derives them again and compares.
TRUST_TABLE = Path(__file__).resolve().parent / "published" / "trust_table.json"


@lru_cache(maxsize=1)
def _trust_table() -> dict:
    return json.loads(TRUST_TABLE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def published_residuals() -> tuple[Residual, ...]:
    """The out-of-sample residuals of both bundled published files (cost/crossval.py's stored
    leave-one-family-out predictions, nothing simulated), as the trust table stores them
    (cost/trust_table.derive_residuals), read once per process."""
    table = _trust_table()
    names = table["feature_fields"]
    return tuple(Residual(id=row_id, features=Features(**dict(zip(names, values, strict=True))), error=error)
                 for row_id, error, values in table["residuals"])


def plan_trust(inst: Instance, plan: Plan, predicted_s: float) -> Trust:
    """How far to trust a plan's predicted time, read one way for a plan of any shape (the flat
    plan file's plan is its one-class case): the band of its least validated GPU type at its
    distance level (trust_for; a plan is as far from the measured runs as its least validated
    part), a mixture-of-experts model's from the MoE anchors (moe_trust), named with the
    framework release the time is for (with_release). Its features are those objective_factor
    reads of its configuration (the job's release among them) at the plan's own memory fill
    (plan_memory_fill), the fill whose memory tier the planner valued it at
    (solver/memory_tiers.py), so a p90 plan's upper end is its p90 time. Its warnings: the
    band's (validation_warnings), then what no published row calibrates on the GPU types it
    uses (unvalidated_warnings), a predicted MFU above the published ones
    (mfu_record_warning) and a stage fuller than they fill their memory
    (memory_headroom_warning)."""
    res = published_residuals()
    groups = inst.cluster.groups
    used = {g for c in plan.classes for g in c.stage_groups}
    gpus = plan_gpu_types(inst, plan)
    full = any(any(c.full_recompute_layers) for c in plan.classes)
    fill = plan_memory_fill(inst, plan)
    trusts = [trust_for(Features(family="", framework=inst.job.framework.value,
                                 framework_version=inst.job.release.version, gpu=g,
                                 num_gpus=inst.cluster.num_gpus, zero=plan.zero, cp=plan.cp,
                                 pp=max(len(c.stage_groups) for c in plan.classes),
                                 precision=inst.job.precision.value, activations=activations(full),
                                 memory_fill=fill, oversubscribed=oversubscribed(groups, used)),
                       predicted_s, res) for g in gpus]
    trust = max(trusts, key=_upper_end)
    if inst.model.moe is not None:
        trust = max((moe_trust(g, predicted_s, trust.warnings) for g in gpus), key=_upper_end)
    extra = tuple(unvalidated_warnings(inst, plan, res) + mfu_record_warning(inst, plan, predicted_s, mfu_records())
                  + memory_headroom_warning(inst, fill))
    trust = replace(trust, warnings=trust.warnings + extra) if extra else trust
    return with_release(trust, inst.job, res)


def plan_gpu_types(inst: Instance, plan) -> list[str]:
    """The GPU types (names) of the node groups the stages of `plan` (a Plan, or a
    configuration's ClassOuter) sit on, sorted."""
    groups = inst.cluster.groups
    return sorted({groups[g].gpu.name for c in plan.classes for g in c.stage_groups})


def _upper_end(trust: Trust) -> tuple[bool, float]:
    """The order in which plan_trust takes the widest of its GPU types' bands."""
    return trust.interval_s is not None, trust.interval_s[1] if trust.interval_s else 0.0


def published_memory_fractions(band: str) -> tuple[tuple[float, str], ...]:
    """(peak_memory_fraction, id) of every bundled published row in scale band `band`, priced
    as it ran (crossval.yaml's memory fills), fullest first: how full a run's memory the cost
    model has been checked at. Read from the trust table (cost/trust_table.derive_memory_fractions)."""
    return tuple((fill, row_id) for b, fill, row_id in _trust_table()["memory_fractions"] if b == band)


def memory_headroom_warning(inst: Instance, fill: float | None, min_rows: int = MIN_VALIDATING_ROWS) -> list[str]:
    """One line when fewer than min_rows published rows of the plan's scale band fill their
    memory as far as `fill`, the plan's fullest stage of any class (plan_memory_fill; None:
    not counted, no line). A plan
    that stores activations up to the edge of HBM is priced by the same memory model, but no
    run checks that it fits or runs at that speed there (allocator fragmentation, the
    runtime's own buffers); the band counts it one distance level only beyond the fullest of
    them (_memory_uses), where the rows give their errors no wider spread (docs/accuracy.md,
    "Memory fill")."""
    if fill is None:
        return []
    num_gpus = inst.cluster.num_gpus
    rows = published_memory_fractions(scale_band(num_gpus))
    reach = [f for f, _ in rows if f >= fill]
    if len(reach) >= min_rows:
        return []
    best = (f"; the fullest {100 * rows[0][0]:.1f}% ({rows[0][1]})" if rows else "")
    return [f"peak memory {100 * fill:.1f}% of HBM on {num_gpus} GPUs: {len(reach)} published"
            f" row{'' if len(reach) == 1 else 's'} at {scale_band(num_gpus)} GPUs fill"
            f"{'s' if len(reach) == 1 else ''} memory as far{best}; the band widens only past the fullest row"]


def with_release(trust: Trust, job, res: Sequence[Residual]) -> Trust:
    """`trust` naming the framework release the time is for (`job`'s) and how many published
    rows ran that release."""
    version = job.release.version
    rows = sum(1 for r in res if (r.features.framework, r.features.framework_version)
               == (job.framework.value, version))
    return replace(trust, release=describe(job.framework, job.framework_version), release_rows=rows)


def measured_mfu(row: dict, catalogue: dict) -> float:
    """A published row's model FLOPs utilisation: its measured tokens per second times the
    model FLOPs per token (cost/flops.model_flops_per_token, the definition every plan's MFU
    uses) over its GPUs' bf16 peak (FP8 runs too, as their sources count them). Read from the
    row's model, batch and GPUs alone (calibration.row_model, row_config): building the whole
    instance of each row on 256+ GPUs took 1.2% of GPT-3 175B's plan (issue 33)."""
    from paraplan.cost.calibration import row_config, row_model
    from paraplan.cost.flops import model_flops_per_token
    model = row_model(row)
    tokens_per_s = row_config(row)["global_batch"] * model.seq_len / float(row["measured"]["iter_time_s"])
    return tokens_per_s * model_flops_per_token(model) / (
        row["cluster"]["num_gpus"] * catalogue[row["cluster"]["gpu"]].peak_flops_per_s)


@lru_cache(maxsize=1)
def mfu_records() -> dict[tuple[str, str], tuple[float, str]]:
    """(GPU die, precision) -> (the best measured MFU among the published rows on
    MFU_RECORD_MIN_GPUS or more GPUs, that row's id), as the trust table stores them
    (cost/trust_table.derive_mfu_records: measured_mfu of each row)."""
    return {(d, precision): (mfu, row_id) for d, precision, mfu, row_id in _trust_table()["mfu_records"]}


def mfu_record_warning(inst: Instance, plan: Plan, predicted_s: float,
                       records: dict[tuple[str, str], tuple[float, str]]) -> list[str]:
    """One line when the plan's predicted MFU (over the GPUs it runs on) beats the best
    published MFU of its GPUs at MFU_RECORD_MIN_GPUS+ GPUs in its precision (module
    docstring): on GPUs of several dies, their records weighted by each die's share of the
    plan's peak FLOP/s, the MFU the plan would have were each die at its record, so a plan
    above it runs some die above its record. None below that scale (the cluster's GPUs, as the
    band's scale) or where a die the plan runs on has no record."""
    from paraplan.cost.flops import model_flops_per_token
    if inst.cluster.num_gpus < MFU_RECORD_MIN_GPUS:
        return []
    precision = inst.job.precision.value
    groups = inst.cluster.groups
    peak: dict[str, float] = {}  # die -> peak FLOP/s of the plan's GPUs on it
    for g, n in enumerate(plan.outer.gpus_per_group(len(groups))):
        if n:
            d = die(groups[g].gpu.name)
            peak[d] = peak.get(d, 0.0) + n * groups[g].gpu.peak_flops_per_s
    if any((d, precision) not in records for d in peak):
        return []
    total = sum(peak.values())
    # weights p / total: one die's is exactly 1, so its record is read unchanged
    best = sum(p / total * records[(d, precision)][0] for d, p in peak.items())
    mfu = inst.job.global_batch * inst.model.seq_len / predicted_s * model_flops_per_token(inst.model) / total
    if mfu <= best:
        return []
    dies = sorted(peak)
    held = (f"{100 * best:.1f}%, {records[(dies[0], precision)][1]}" if len(dies) == 1 else
            f"{100 * best:.1f}%, each die's record weighted by its share of the plan's peak FLOP/s: "
            + "; ".join(f"{d} {100 * records[(d, precision)][0]:.1f}%, {records[(d, precision)][1]}" for d in dies))
    return [f"MFU {100 * mfu:.1f}% is {100 * (mfu - best):.1f} points above the best MFU published"
            f" on {' and '.join(dies)} ({precision}) at {MFU_RECORD_MIN_GPUS}+ GPUs"
            f" ({held}): the cost model is unchecked at this efficiency"]


def unvalidated_warnings(inst: Instance, plan: Plan, res: Sequence[Residual]) -> list[str]:
    """Lines for what no published row calibrates at all: each GPU type the plan runs on
    without rows (its efficiencies are the catalogue defaults, cost/gpus.yaml: e.g. B200 and
    GB200) and a mixture-of-experts model (cost/published/moe.yaml's anchors, to which four MoE
    parameters are fitted, err far more than the dense rows: cost/moe_fit.py), with the
    anchors on each die the plan runs on."""
    gpus = plan_gpu_types(inst, plan)
    calibrated = {r.features.gpu for r in res}
    lines = [f"{gpu}: no published row calibrates this GPU; its efficiencies are the"
             " catalogue defaults (cost/gpus.yaml), not fitted" for gpu in gpus if gpu not in calibrated]
    if inst.model.moe is not None:
        etp = f", etp={plan.etp}" if plan.etp is not None else ""
        errs = moe_anchor_errors()
        on_dies = ""
        for d in dict.fromkeys(die(g) for g in gpus):  # each die once, in the GPU types' order
            here = [e for g, e in errs if die(g) == d]
            on_dies += (f"; on {d} {len(here)} runs, {min(here):+.0f}% to {max(here):+.0f}%" if here
                        else f"; none on {d}")
        lines.append(f"mixture of experts (ep={plan.ep}{etp}): four MoE parameters are fitted to"
                     f" {len(errs)} published Megatron-core MoE runs (cost/moe_fit.py), which come out {min(e for _, e in errs):+.0f}%"
                     f" to {max(e for _, e in errs):+.0f}% (+: paraplan faster than measured; mean"
                     f" |error| {np.mean([abs(e) for _, e in errs]):.0f}%){on_dies} (cost/published/moe.yaml)")
    return lines


@lru_cache(maxsize=1)
def _moe_anchor_rows() -> tuple[tuple[str, float, bool], ...]:
    """(GPU, error %, host_bound) of every MoE anchor priced as it ran (cost/published/moe.yaml,
    paraplan_prediction.error_pct; > 0: paraplan's time below the measured one)."""
    from paraplan.cost.read_cache import bundled_yaml
    rows = bundled_yaml(TRUST_TABLE.parent / "moe.yaml")["rows"]  # beside the table: cost/published/
    return tuple((r["cluster"]["gpu"], float(r["paraplan_prediction"]["error_pct"]), bool(r.get("host_bound")))
                 for r in rows if (r.get("paraplan_prediction") or {}).get("error_pct") is not None)


def moe_anchor_errors() -> tuple[tuple[str, float], ...]:
    """(GPU, error %) of every MoE anchor priced as it ran, the host-bound one included."""
    return tuple((g, e) for g, e, _ in _moe_anchor_rows())


@lru_cache(maxsize=1)
def _moe_out_of_sample_rows() -> tuple[tuple[str, float, bool], ...]:
    """(GPU, out-of-sample error %, False) of every anchor in cost/published/moe_crossval.yaml,
    read here: cost/moe_fit, which writes it, imports this module."""
    from paraplan.cost.read_cache import bundled_yaml
    return tuple((r["gpu"], float(r["out_of_sample_error_pct"]), False)
                 for r in bundled_yaml(TRUST_TABLE.parent / "moe_crossval.yaml")["rows"])


def _moe_anchor_logs(gpu: str, min_group_rows: int = MIN_GROUP_ROWS,
                     anchors: Sequence[tuple[str, float, bool]] | None = None) -> tuple[list[float], str]:
    """(log errors, where they come from) of the MoE anchors a plan on `gpu` takes its band
    from (moe_trust) and a pNN objective's factor: their out-of-sample errors (moe_trust's
    docstring) unless `anchors` is given."""
    errs = [(g, e) for g, e, host in (_moe_out_of_sample_rows() if anchors is None else anchors) if not host]
    here = [e for g, e in errs if die(g) == die(gpu)]
    chosen, where = (here, f"on {die(gpu)}") if len(here) >= min_group_rows else (
        [e for _, e in errs], f"on every GPU ({len(here)} on {die(gpu)})")
    return [-math.log1p(e / 100) for e in chosen], where


def moe_trust(gpu: str, predicted_s: float, warnings: tuple[str, ...] = (),
              min_group_rows: int = MIN_GROUP_ROWS,
              anchors: Sequence[tuple[str, float, bool]] | None = None) -> Trust:
    """A mixture-of-experts plan's interval: no dense row exercises its experts, all-to-alls or
    routing imbalance, so it comes from the MoE anchors' out-of-sample errors, each anchor
    predicted with the MoE parameters fitted without its table (cost/moe_fit.py, stored in
    cost/published/moe_crossval.yaml, which leaves out the run slowed by host-side work),
    those on the plan's die when at least min_group_rows are, else all of them
    (_moe_anchor_logs). An anchor's error e = model TFLOP/s predicted / measured - 1 is
    measured time / predicted time - 1, so its log error in this module's sense is
    r = -ln(1 + e). `anchors`: (GPU, error %, host_bound) rows in place of the stored ones."""
    logs, where = _moe_anchor_logs(gpu, min_group_rows, anchors)
    source = ("each predicted with its table left out of the fit (cost/published/moe_crossval.yaml)"
              if anchors is None else "as given")
    return Trust(interval_s=log_quantile_interval(predicted_s, logs), rows=len(logs), warnings=warnings,
                 group=f"mixture-of-experts anchors {where}, {source}")


# --- planning under the model's uncertainty ---------------------------------------------------

@lru_cache(maxsize=4096)
def objective_factor(objective: str, *, gpus: tuple[str, ...], num_gpus: int, framework: str,
                     framework_version: str, precision: str, zero: int, cp: int, pp: int, moe: bool,
                     memory_fill: float | None = None, oversubscribed: bool = False) -> float:
    """The objective's time / the predicted time of a configuration (module docstring): 1 for
    `mean`; for pNN the largest quantile_factor over the plan's GPU types (a mixed cluster is as
    far from the measured runs as its least validated type), its plans filling at most
    `memory_fill` of HBM (None: the memory fill not counted); a mixture-of-experts model takes
    the MoE anchors' quantile, the same for every configuration. Its features are the ones
    plan_trust reads of a plan (the job's release among them), so the band a p90 plan prints
    ends at its p90 time."""
    q = parse_objective(objective)
    if q is None:
        return 1.0
    if moe:
        logs = [_moe_anchor_logs(g)[0] for g in gpus]
        return max(math.exp(-float(np.quantile(np.asarray(x, dtype=float), 1.0 - q))) if x else 1.0 for x in logs)
    # quantile_factor reads f only through its distance level, and that only through cp > 1
    # and pp > 1 of the two (_feature_uses: the counts compare g.cp > 1, g.pp > 1): so cp and
    # pp are read as min(., 2), and the planner's thousands of (cp, pp) share a few entries
    return max(_published_quantile_factor(
        Features(family="", framework=framework, framework_version=framework_version, gpu=g,
                 num_gpus=num_gpus, zero=zero, cp=min(cp, 2),
                 pp=min(pp, 2), precision=precision, activations="stored", memory_fill=memory_fill,
                 oversubscribed=oversubscribed), q)
        for g in gpus)


def _published_quantile_factor(f: Features, quantile: float) -> float:
    """quantile_factor(f, quantile, published_residuals()): that reads f only through its
    distance level and whether its die is fitted (band_pool with no family left out), so each
    such pool is read once."""
    res = published_residuals()
    factor = _published_level_factor(distance_level(f, res), die_fitted(f, res), quantile)
    scale = _published_scale_factor(quantile) if f.num_gpus >= SCALE_AXIS_MIN_GPUS else None
    return factor if scale is None else max(factor, scale)


@lru_cache(maxsize=16)
def _published_scale_factor(quantile: float) -> float | None:
    """The scale axis's factor (_scale_factor) from the published residuals, read once."""
    return _scale_factor(_AT_SCALE, published_residuals(), quantile)


@lru_cache(maxsize=64)
def _published_level_factor(level: int, fitted: bool, quantile: float) -> float:
    return _pool_quantile_factor(_level_pool(published_residuals(), level, fitted)[0], quantile)


def objective_factors(inst, configs) -> np.ndarray:
    """objective_factor_of of each configuration or plan of `configs`, read in one pass: the
    configurations of one class layout share their classes (solver/space.declared_outers
    lists a layout's completions on one tuple), so each (layout, ZeRO stage, cp) is read once
    (the floors read before pricing ask for every outer configuration: 142,906 on Llama-3 70B
    over four GPU types). Past that, a configuration is read by what objective_factor_of reads
    of it: the groups its stages use, whether its deepest class is pipelined, its ZeRO stage and
    cp (as min(., 2)), kept for the last instance read (_FACTORS_BY_USE) so that the instance's
    own features are read once a key (8 types x 8 nodes: 47,333 configurations in 2,551 calls
    read objective_factor_of 22,954 times, now 385; issue 33)."""
    if inst.search.objective == "mean":
        return np.ones(len(configs))
    by_use = _FACTORS_BY_USE.read(id(inst), inst, dict)
    memo: dict[tuple, float] = {}
    out = np.empty(len(configs))
    for j, modes in enumerate(configs):
        key = (id(modes.classes), modes.zero, modes.cp)  # `configs` holds the tuples alive
        f = memo.get(key)
        if f is None:
            use = (frozenset(g for c in modes.classes for g in c.stage_groups),
                   max(len(c.stage_groups) for c in modes.classes) > 1, modes.zero, min(modes.cp, 2))
            f = by_use.get(use)
            if f is None:
                f = by_use[use] = objective_factor_of(inst, modes)
            memo[key] = f
        out[j] = f
    return out


# objective_factors' factors of the last instance by what objective_factor_of reads of a
# configuration
_FACTORS_BY_USE = IdentityCache(1)


def objective_factor_of(inst, modes) -> float:
    """search.objective's time / the predicted time of a configuration or plan `modes` on a
    group-format instance (ClassOuter or Plan on a Instance; objective_factor):
    1 for `mean`. It depends only on the GPU types used, whether they sit under an
    oversubscribed switch tier, the job's framework release, the ZeRO stage, cp, the deepest
    class and the memory fill the
    search admits (search.memory_fill_cap, or the fill its
    relaxation reads, search.factor_memory_fill: solver/memory_tiers.py), so the planner scales its time
    coefficients by it (solver/search.problem_of, the floors read before pricing) and every
    bound and proof holds for the quantile."""
    if inst.search.objective == "mean":
        return 1.0
    groups = inst.cluster.groups
    used = {g for c in modes.classes for g in c.stage_groups}
    # cp and pp as objective_factor reads them (min(., 2)), so that they share its cache entry
    return objective_factor(inst.search.objective, gpus=tuple(plan_gpu_types(inst, modes)),
                            num_gpus=sum(g.num_gpus for g in groups),
                            framework=inst.job.framework.value, framework_version=inst.job.release.version,
                            precision=inst.job.precision.value, zero=modes.zero, cp=min(modes.cp, 2),
                            pp=min(max(len(c.stage_groups) for c in modes.classes), 2),
                            moe=inst.model.moe is not None,
                            memory_fill=_fill_counted(inst, factor_fill(inst.search)),
                            oversubscribed=oversubscribed(groups, used))


def oversubscribed(groups, used) -> bool:
    """Whether any of the groups `used` sits under a switch tier oversubscribed above 1:1
    (cost/fabric.py): the plan's fabric then differs from every published run's."""
    return any(t.oversubscription > 1 for g in used for t in groups[g].tiers)


def factor_fill(search) -> float:
    """The memory fill a search's objective factor is read at (search.factor_memory_fill,
    else its cap: every plan of the search fills at most that)."""
    return search.memory_fill_cap if search.factor_memory_fill is None else search.factor_memory_fill


def _fill_counted(inst, fill: float | None) -> float | None:
    """`fill` where the band counts a plan's memory fill: not for a mixture-of-experts model
    (its band is the MoE anchors') nor a DualPipe job (peak_memory_fraction does not price its
    memory)."""
    from paraplan.cost.specs import PipelineSchedule
    if inst.model.moe is not None or inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE:
        return None
    return fill


def memory_fill_caps(inst) -> tuple[float, ...]:
    """The memory tiers the planner searches apart (solver/memory_tiers.py), as caps on the
    fraction of HBM a plan fills: (the fullest published row of the instance's scale band,
    1.0) where a quantile objective counts the memory fill and that row fills less than all of
    HBM; (1.0,) otherwise. A plan within the first is validated in memory (_memory_uses), one
    beyond it is not, and its factor is the next distance level's, or the same where its
    configuration is at level 3 already: then the planner's relaxation, whose plan is valued at
    its own factor, ends the search (solver/memory_tiers.py)."""
    if parse_objective(inst.search.objective) is None or _fill_counted(inst, 1.0) is None:
        return (1.0,)
    cap = inst.search.memory_fill_cap
    num_gpus = sum(g.num_gpus for g in inst.cluster.groups)
    rows = published_memory_fractions(scale_band(num_gpus))
    if not rows or rows[0][0] >= cap:
        return (cap,)
    return (rows[0][0], cap)


def plan_memory_fill(inst, plan) -> float | None:
    """The memory fill the band counts of a plan of any shape: its fullest stage of any class
    over its GPU's HBM (peak_memory_fraction); None where the band does not count it
    (_fill_counted: a mixture-of-experts model, a DualPipe job)."""
    return None if _fill_counted(inst, 1.0) is None else peak_memory_fraction(inst, plan)


# --- the band by level, for the accuracy page (cost/docs/accuracy.py) ---------------------------

def level_pool(res: Sequence[Residual], level: int, fitted: bool = True) -> list[Residual]:
    """The residuals a prediction at distance `level`, on a die fitted as `fitted` says, takes
    its band from (band_pool with no family left out)."""
    return _level_pool(tuple(res), level, fitted)[0]


def row_levels(res: Sequence[Residual]) -> dict[str, int]:
    """Each residual's distance level, judged as its row was predicted: against the other
    source families' rows."""
    return _pool_facts(tuple(res))[0]
