"""Memos keyed by the identity of a frozen record.

The planner prices tens of thousands of outer configurations against a handful of records (a
ModelSpec, a JobSpec, an Instance, the tuple of a layout's class shapes), each frozen and
built once or a few times per search. Hashing such a record hashes every field again on
every call (a ModelSpec has some thirty; a tuple of classes hashes each class's stage groups),
which cost more than many of the values kept (issue 33). So these memos key by id(record):
cheap, and exact while the id names the same object, which each entry guarantees by holding
its record alive (no other object can take a live object's id). An equal record of another
identity is computed again, to the same value.

A memo is bounded and cleared whole when full: a plan process meets a few records, a test
session many. `max_entries=1` keeps the last value alone: a one-slot memo. A value that reads
two records (an instance and a placement, a model and a GPU) is kept by read_pair, its entry
holding and checking both; a memo uses one of read and read_pair, never both. get and put
serve a memo whose value is made in one place and read in another (read's, split in two).
`max_entries=math.inf`: unbounded, for a memo that lives as long as one search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class IdentityCache:
    """key -> (owner, value), `key` holding id(owner) and whatever else the value reads;
    `owner` is held by its entry, so that its id names it while the entry lives (read_pair's
    entries: key -> (owner, second, value), `key` holding both ids)."""

    __slots__ = ("entries", "max_entries")

    def __init__(self, max_entries: float) -> None:
        self.entries: dict[Any, tuple[Any, Any]] = {}
        self.max_entries = max_entries

    def read(self, key, owner, make: Callable[..., Any], /, *args, **kwargs) -> Any:
        """The value kept under `key` for `owner`, else make(*args, **kwargs), kept."""
        hit = self.entries.get(key)
        if hit is not None and hit[0] is owner:
            return hit[1]
        value = make(*args, **kwargs)
        if len(self.entries) >= self.max_entries:
            self.entries.clear()
        self.entries[key] = (owner, value)
        return value

    def read_pair(self, key, owner, second, make: Callable[..., Any], /, *args, **kwargs) -> Any:
        """read's value for a value that reads two records, `key` holding both ids."""
        hit = self.entries.get(key)
        if hit is not None and hit[0] is owner and hit[1] is second:
            return hit[2]
        value = make(*args, **kwargs)
        if len(self.entries) >= self.max_entries:
            self.entries.clear()
        self.entries[key] = (owner, second, value)
        return value

    def get(self, key, owner) -> Any:
        """The value kept under `key` for `owner`, else None."""
        hit = self.entries.get(key)
        return hit[1] if hit is not None and hit[0] is owner else None

    def put(self, key, owner, value) -> None:
        """Keep `value` under `key` for `owner` (read's keeping)."""
        if len(self.entries) >= self.max_entries:
            self.entries.clear()
        self.entries[key] = (owner, value)

    def clear(self) -> None:
        self.entries.clear()
