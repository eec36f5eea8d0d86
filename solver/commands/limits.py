"""The run limits every command shares: --time-limit-s (wall-clock seconds for the whole
command) and --threads, checked once after parsing, and the deadline a command hands down to
each solve it runs, so that several solves in one command share one limit.

A bad value is an input error (exit 2, one line naming the argument and the fix), never a
silent default: a limit must be a finite number of seconds above zero, a thread count at least 1.
"""

from __future__ import annotations

import math
import time

from paraplan.cost.errors import InstanceError

# the smallest slice of the limit a solve is started with: below it the solve is skipped and
# its configurations stay unresolved
MIN_SLICE_S = 1e-3


def check_args(args) -> None:
    """Refuse unusable --time-limit-s / --threads values (when the command has them)."""
    limit = getattr(args, "time_limit_s", None)
    if limit is not None and not (isinstance(limit, (int, float)) and math.isfinite(limit) and limit > 0):
        raise InstanceError("<arguments>", "--time-limit-s",
                            f"must be a finite number of seconds above 0, got {limit!r}",
                            "pass a positive wall-clock limit, e.g. --time-limit-s 60")
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise InstanceError("<arguments>", "--threads", f"must be at least 1, got {threads}",
                            "pass --threads 1 (or more, up to the machine's cores)")


class Deadline:
    """One wall-clock limit shared by the solves of a command."""

    def __init__(self, time_limit_s: float):
        self.limit_s = time_limit_s
        self.end = time.perf_counter() + time_limit_s

    def remaining_s(self) -> float:
        return self.end - time.perf_counter()

    def expired(self) -> bool:
        return self.remaining_s() < MIN_SLICE_S
