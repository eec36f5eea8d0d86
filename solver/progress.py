"""Progress of a planner search on a terminal (`paraplan plan` and `report`).

The planners (solver/planner.py, solver/search.py) call their `progress` callback
with one line of text; `search_status` writes the line they send before each node of the search
they visit, so that the line always says how far the search is: outer configurations priced
of all (the rest are pruned unpriced when the search ends), solved, and proved infeasible by
memory, the incumbent, and the current lower bound on the optimum (the smallest of the
incumbent, the bound of the next node in bound order, and the bounds of configurations a time
limit left open: every node not yet visited has a bound at least the next one's, as they are
visited in ascending bound order).

`Printer` shows the lines on stderr: on a terminal as one line rewritten in place (at most
REFRESH_S apart), otherwise (with --progress) one line per LOG_EVERY_S. Results stay on stdout.
"""

from __future__ import annotations

import sys
import time

from paraplan.solver.format import seconds

REFRESH_S = 0.1
LOG_EVERY_S = 1.0


def search_status(res, incumbent_s: float, bounds_s: list[float]) -> str:
    bound_s = min([incumbent_s, *bounds_s])
    line = (f"outer configs {res.priced:,}/{res.outer_configs:,} priced, {res.solved:,} solved,"
            f" {res.pruned_by_memory:,} infeasible by memory")
    if incumbent_s < float("inf"):
        gap = max(0.0, (incumbent_s - bound_s) / incumbent_s)
        line += f"; incumbent {seconds(incumbent_s)}, bound {seconds(bound_s)} (gap {100 * gap:.2f}%)"
    return line


class Printer:
    """A progress callback; `done()` clears the status line."""

    def __init__(self, stream=None, tty: bool | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.width = 0

    def __call__(self, msg: str) -> None:
        now = time.perf_counter()
        if now - self.last < (REFRESH_S if self.tty else LOG_EVERY_S):
            return
        self.last = now
        line = f"[{now - self.t0:6.1f} s] {msg}"
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
