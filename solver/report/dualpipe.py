"""What `paraplan report` draws of a DualPipe plan (job.pipeline_schedule: dualpipe).

cost/dualpipe.py prices DualPipe by phase totals, not event by event: device d (holding stages
d and pp - 1 - d) runs its steady phase m/2 (T_d + T_{pp-1-d}), every device pays the one
bubble (pp/2 - 1) max_d (U_d + U_{pp-1-d}) / 2, and the iteration is the slowest steady phase +
the bubble + the slowest gradient sync and optimizer step D_d + D_{pp-1-d}. Devices d and
pp - 1 - d hold the same two stages, so they have the same time and memory: each chart has one
row or bar per device pair. The chart draws those priced totals in the order the formula adds
them; it is not a replay of DualPipe's steps (its warm-up and cool-down, where the bubble
lies, are not priced one by one), and the captions say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost import dualpipe
from paraplan.cost.memory_breakdown import CATEGORIES
from paraplan.cost.specs import Instance
from paraplan.cost.plan_specs import Plan
from paraplan.cost.units import bytes_to_gib
from paraplan.solver.format import seconds
from paraplan.solver.report.svg import Phase
from paraplan.solver.report.bars import memory_bars

MEMORY_COLOURS = {"weights": "#4c72b0", "grads": "#64b5cd", "optimizer": "#8172b3",
                  "activations": "#dd8452", "logits": "#c44e52", "workspace": "#ccb974",
                  "runtime": "#937860"}


@dataclass(frozen=True)
class PairRow:
    """Devices d and pp - 1 - d (d < pp/2): the stages they hold and their priced phases."""
    device: int
    mirror: int
    layers: int
    recompute_layers: int
    time_per_micro_batch_s: float  # (T_d + T_mirror) / 2: one chunk pair of one direction
    steady_s: float
    sync_s: float
    mem_bytes: float
    capacity_bytes: float

    @property
    def label(self) -> str:
        return f"devices {self.device} & {self.mirror}"


def pair_rows(it: dualpipe.DualPipeIteration) -> list[PairRow]:
    pp = len(it.steady_s)
    return [PairRow(device=d, mirror=pp - 1 - d, layers=int(it.layers[d]),
                    recompute_layers=int(it.recompute_layers[d]),
                    time_per_micro_batch_s=float(it.time_per_micro_batch_s[d]),
                    steady_s=float(it.steady_s[d]), sync_s=float(it.sync_s[d]),
                    mem_bytes=float(it.mem_bytes[d]), capacity_bytes=float(it.capacity_bytes[d]))
            for d in range(pp // 2)]


def timeline_rows(it: dualpipe.DualPipeIteration, m: int) -> list[tuple[str, list[Phase]]]:
    """Per device pair: its steady phase from 0, the bubble after the slowest steady phase, its
    sync after the bubble. The latest block ends at it.iter_time_s."""
    slowest = float(it.steady_s.max())
    out = []
    for row in pair_rows(it):
        pair_s = 2 * row.time_per_micro_batch_s
        steady = Phase("steady", 0.0, row.steady_s, f"{m // 2} x {seconds(pair_s)}",
                       f"{row.label}: steady phase, {m // 2} micro-batches from each end x"
                       f" {seconds(pair_s)} (a forward and a backward chunk of stages {row.device}"
                       f" and {row.mirror}) = {seconds(row.steady_s)}")
        bubble = Phase("bubble", slowest, slowest + it.bubble_s, "bubble",
                       f"pipeline bubble {seconds(it.bubble_s)}, charged once to every device")
        sync = Phase("sync", slowest + it.bubble_s, slowest + it.bubble_s + row.sync_s, "",
                     f"{row.label}: gradient sync + optimizer step of both stages, {seconds(row.sync_s)}")
        out.append((row.label, [steady, bubble, sync]))
    return out


def memory_figure(inst: Instance, plan: Plan, it: dualpipe.DualPipeIteration):
    """Peak memory per device pair by category (cost/dualpipe.device_categories_bytes) against
    the usable capacity of `it`, the plan's priced iteration, as a matplotlib Figure."""
    cats = dualpipe.device_categories_bytes(inst, plan, reserve_bytes=inst.search.memory_reserve_bytes)
    pairs = plan.pp // 2
    stacks = [(name, MEMORY_COLOURS[name], gib) for name in CATEGORIES
              if (gib := np.array([bytes_to_gib(cats[d][name]) for d in range(pairs)])).any()]
    return memory_bars(stacks, bytes_to_gib(float(it.capacity_bytes.min())),
                       [f"{d} & {plan.pp - 1 - d}" for d in range(pairs)],
                       "device pair (each device holds stages d and pp - 1 - d)",
                       "Peak memory of one GPU of each device pair, by category", ncol=4, width_per_bar=0.6)
