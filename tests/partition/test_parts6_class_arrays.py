"""class_partitions.OuterChoices._class_arrays gathering only each member's own stages per row
(issue 33, row 4: a grid's rows are many).

Checked against the reading that gathers every stage of the picked entry per row and then
keeps the member's (the code before): on the root re-key's grids of every other layer-plan
outer of tiny-2types at tp 4 and of the two-site instance with the three layout options
(several classes and groups), on Megatron's builds and on the optimistic coefficients as base
(_grid and _bounded read both): the same keys in the same order and the same floats. A planted
fault (the first member's picks read one entry on) is caught on some grid.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mixed"))
from test_partitions_lazy import OPTIONS, _choices_of, tiny2  # noqa: E402
from test_plan_sync import two_sites  # noqa: E402

from oracles.class_partitions import kept_groups  # noqa: E402
from paraplan.solver.class_partitions import _MEMORY  # noqa: E402

TIMES = ("stage_time_s", "layer_time_s", "recompute_time_s", "stage_sync_time_s", "layer_sync_time_s")


def _gathered_whole(ch, k, members, kept, picks, priced, base, si, shift: int = 0) -> dict:
    """The arrays with every stage of the picked entry gathered per row, then masked (`shift`:
    the first member's picks read that many entries on)."""
    def rows(attr: str, at: int) -> np.ndarray:
        out = np.repeat(getattr(base[at, k], attr)[None, :], len(picks), axis=0)
        for col, x in enumerate(members):
            stack = np.stack([getattr(base[at, k], attr)] + [getattr(priced[x[0], x[1], j][at], attr)
                                                             for j in kept[x][1:]])
            chosen = stack[(picks[:, col] + (shift if col == 0 else 0)) % len(stack)]
            out[:, ch.masks[x]] = chosen[:, ch.masks[x]]
        return out
    out = {f: rows(f, 0) for f in _MEMORY}
    out["capacity_bytes"] = np.broadcast_to(base[0, k].capacity_bytes, (len(picks), base[0, k].pp))
    out.update({f: rows(f, si) for f in TIMES})
    if base[si, k].layer_drain_saving_s.size:
        out["layer_drain_saving_s"] = rows("layer_drain_saving_s", si)
    return out


def test_class_arrays_are_the_whole_gathers_masked():
    checked = caught = 0
    for inst in (tiny2((8, 8), (4,), 8, 32), two_sites((8, 8), (4,), 4, 16, 100, None, **OPTIONS)):
        for o, ch in _choices_of(inst)[::2]:
            if ch.optimistic(stop_unfit=True) is None:
                continue
            ch.optimistic_bound()
            store, kept = {}, {x: [0] for x in ch.keys}
            for x in ch.open:
                for j, c in kept_groups(ch, x, math.inf):
                    store[x[0], x[1], j + 1] = c
                    kept[x].append(j + 1)
            for k in range(len(o.classes)):
                members = [x for x in ch.keys if x[0] == k]
                picks = np.array(list(itertools.product(*(range(len(kept[x])) for x in members))),
                                 int).reshape(-1, len(members))
                for base in (ch.meg, ch.opt):
                    for si in range(len(ch.scenarios)):
                        got = ch._class_arrays(k, members, kept, picks, store, base, si)
                        want = _gathered_whole(ch, k, members, kept, picks, store, base, si)
                        assert list(got) == list(want)
                        for f in want:
                            assert got[f].shape == want[f].shape and got[f].tobytes() == want[f].tobytes(), f
                        checked += 1
                        if members and len(kept[members[0]]) > 1:
                            bad = _gathered_whole(ch, k, members, kept, picks, store, base, si, shift=1)
                            caught += any(got[f].tobytes() != bad[f].tobytes() for f in want)
    assert checked >= 20 and caught > 0
