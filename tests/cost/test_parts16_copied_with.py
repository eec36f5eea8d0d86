"""cost/objective.copied_with: dataclasses.replace without re-running a plain record's __init__
(issue 33, rows 3 and 4: the optimistic builds copy each StageCoefficients two or three times
and each backward's _LayerCosts once).

Checked against dataclasses.replace itself, the independent reading:
- on the StageCoefficients of random small instances (ZeRO 0-3, pipelines with and without
  interleaving, torch's zero-bubble schedules, multi-token prediction, per-operator plans and
  optimistic terms: tests/partition/test_parts6_sync_build's draws), scaled and capped as the
  planner scales them, and on each draw's _LayerCosts re-read at a larger backward: every
  field the same object or, for arrays, the same bytes, the type the same, the source
  unchanged; a copied_with that dropped a change, or shared the source's field dict, is caught;
- records it must leave to replace (slots, __post_init__, a field outside __init__) come back
  as replace makes them (their __post_init__ run, the field at its default), and an unknown
  field name raises replace's TypeError;
- stage_memory.stage_columns (a build's per-stage columns gathered at once) gives each row as
  stage_values gives it alone, bit for bit, on random sites, stages and values (one site
  included: stage_values' fill); a gather that swapped two rows is caught.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "partition"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_parts6_sync_build import _layer_fns, _random_case  # noqa: E402

from paraplan.cost import coefficients as C  # noqa: E402
from paraplan.cost import objective  # noqa: E402
from paraplan.cost.coefficients import build_plans, homogeneous_placement  # noqa: E402
from paraplan.cost.comm import NetEfficiency  # noqa: E402
from paraplan.cost.objective import capped_memory, copied_with, scaled_times  # noqa: E402
from paraplan.cost.stage_memory import stage_columns, stage_values  # noqa: E402


def _same_record(a, b) -> bool:
    """Same type and every field equal: arrays by dtype, shape and bytes, others by ==."""
    if type(a) is not type(b):
        return False
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape
                    and x.tobytes() == y.tobytes()):
                return False
        elif isinstance(x, C.StageParts):
            if list(x) != list(y):
                return False
        elif x != y:
            return False
    return True


def _changes(c, rng: random.Random) -> dict:
    """Some of c's fields changed, as the planner changes them (times scaled, capacity capped,
    syncs lowered)."""
    names = ["layer_time_s", "stage_time_s", "layer_sync_time_s", "stage_sync_time_s", "capacity_bytes"]
    return {n: getattr(c, n) * rng.choice([0.5, 1.1, 1.0975598517133156])
            for n in rng.sample(names, rng.randint(1, len(names)))}


def _draws():
    """(StageCoefficients, its changes, _LayerCosts, the larger backward's terms) per draw."""
    net = NetEfficiency()
    out = []
    for seed in range(60):
        inst, o = _random_case(seed)
        rng = random.Random(2000 + seed)
        fns = _layer_fns(inst, o, rng, net)
        for c in build_plans(inst, o, fns, net, 0.0):
            out.append((c, _changes(c, rng)))
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        so = C.stage_outer(o, site)
        u = C._layer_costs(inst, so, site, o.dp, net, fns[-1])
        out.append((u, {"layer_time": u.layer_time * 1.25, "grad_tail": 0.0,
                        "overlapped": dict(u.overlapped, dp_grad_sync=0.0)}))
    return out


def _copies_match(copy_fn, draws) -> bool:
    """copy_fn(record, **changes) equals dataclasses.replace on every draw, and the source is
    left as it was (its fields, and its field dict not shared with the copy)."""
    for record, changes in draws:
        before = dataclasses.replace(record)
        got = copy_fn(record, **changes)
        if not (_same_record(got, dataclasses.replace(record, **changes)) and _same_record(record, before)):
            return False
        if got.__dict__ is record.__dict__:
            return False
    return True


def test_copied_with_is_replace_on_the_planners_records():
    draws = _draws()
    kinds = {type(r).__name__ for r, _ in draws}
    assert kinds == {"StageCoefficients", "_LayerCosts"} and len(draws) >= 150
    assert _copies_match(copied_with, draws)
    # planted faults: a change dropped, or the source's field dict shared, is caught
    def dropped(record, **changes):
        return copied_with(record, **dict(list(changes.items())[1:]))

    def shared(record, **changes):
        record.__dict__.update(changes)
        return record
    assert not _copies_match(dropped, draws)
    assert not _copies_match(shared, draws)


def test_scaled_and_capped_as_replace_scales_them():
    # the two planner copies read through copied_with, against replace's reading of the same
    for record, _ in _draws():
        if not isinstance(record, C.StageCoefficients):
            continue
        f = 1.0975598517133156
        want = dataclasses.replace(record, **{n: getattr(record, n) * f for n in objective.TIME_FIELDS})
        assert _same_record(scaled_times(record, f), want)
        cap = np.minimum(record.capacity_bytes, 0.9 * (record.capacity_bytes + 2e9))
        assert _same_record(capped_memory(record, 0.9, 2e9), dataclasses.replace(record, capacity_bytes=cap))


@dataclasses.dataclass(frozen=True, slots=True)
class _Slotted:
    a: float
    b: float = 0.0


@dataclasses.dataclass(frozen=True)
class _Checked:
    a: float
    seen: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.seen.append(self.a)


@dataclasses.dataclass
class _Derived:
    a: float
    twice: float = dataclasses.field(init=False, default=-1.0)


def test_records_left_to_replace():
    s = _Slotted(1.0, 2.0)
    assert copied_with(s, a=3.0) == _Slotted(3.0, 2.0)
    seen: list = []
    got = copied_with(_Checked(1.0, seen), a=2.0)
    assert got.a == 2.0 and seen == [1.0, 2.0]  # its __post_init__ ran, as under replace
    d = _Derived(1.0)
    d.twice = 2.0
    assert copied_with(d, a=5.0).twice == dataclasses.replace(d, a=5.0).twice == -1.0
    record, _ = _draws()[0]
    with pytest.raises(TypeError):
        copied_with(record, no_such_field=1.0)


def _columns_match(columns_fn, draws) -> bool:
    return all(all(r.tobytes() == stage_values(row, at).tobytes() and r.shape == (len(at),)
                   for r, row in zip(columns_fn(rows, at), rows)) for rows, at in draws)


def test_stage_columns_are_stage_values():
    rng = np.random.default_rng(16)
    draws = []
    for _ in range(300):
        sites, stages = int(rng.integers(1, 5)), int(rng.integers(1, 17))
        at = np.sort(rng.integers(0, sites, stages)).astype(np.int64)
        rows = [[float(x) for x in rng.random(sites) * 10.0 ** rng.integers(-6, 12)] for _ in range(rng.integers(2, 5))]
        draws.append((rows, at))
    assert sum(len(r[0]) == 1 for r, _ in draws) >= 30
    assert _columns_match(stage_columns, draws)
    # planted fault: two rows swapped in the gather
    assert not _columns_match(lambda rows, at: stage_columns(rows[1:2] + rows[:1] + rows[2:], at), draws)
