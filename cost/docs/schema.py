"""Writes docs/schema.md's key reference from cost/schema_keys.py: `python -m paraplan.cost.docs.schema`.

The key reference is one table per section of a file: each key's type and unit, its default,
its allowed values or physical range, and what it means. Units and ranges come from
cost/ranges.RANGES (the table every reader checks numbers against), the values of a closed set
from the enum the reader parses it into, the rest from cost/schema_keys.py: nothing in the
table is written twice. The page's prose outside the generated region is left alone.

`--check` writes nothing and exits 1 where the page differs from what would be written
(tests/instances/test_schema_doc.py asserts the same).
"""

from __future__ import annotations

import sys
from enum import Enum

from paraplan.cost.docs.regions import DOCS_DIR, stale, update
from paraplan.cost.ranges import RANGES, fmt
from paraplan.cost.schema_keys import GROUP_FORMAT, ONE_TYPE, Key, SectionDoc

PAGE = DOCS_DIR / "schema.md"
REGION = "keys"
COMMAND = "python -m paraplan.cost.docs.schema"


def _quantity(key: Key) -> str | None:
    q = key.name if key.quantity is None else key.quantity
    return q if q in RANGES else None


def _kind(key: Key) -> str:
    q = _quantity(key)
    unit = RANGES[q].unit if q else ""
    return f"{key.kind}, {unit}" if unit else key.kind


def _values(key: Key) -> str:
    parts = []
    if isinstance(key.allowed, type) and issubclass(key.allowed, Enum):
        parts.append("one of " + ", ".join(f"`{m.value}`" for m in key.allowed))
    elif key.allowed:
        parts.append(key.allowed)
    q = _quantity(key)
    if q:
        r = RANGES[q]
        parts.append(f"{fmt(r.lo)} to {fmt(r.hi)}")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def section_table(sec: SectionDoc) -> str:
    lines = [f"### {sec.title}", ""]
    if sec.intro:
        lines += [sec.intro, ""]
    lines += ["| key | type | default | values | meaning |", "|---|---|---|---|---|"]
    for k in sec.keys:
        lines.append("| " + " | ".join(_cell(c) for c in (f"`{k.name}`", _kind(k), k.default, _values(k),
                                                             k.meaning)) + " |")
    if sec.includes:
        where = sec.includes.path
        lines.append(f"| every key of `{where}:` | | | | as in a one-type `{where}:` |")
    return "\n".join(lines) + "\n"


def render() -> str:
    """The generated region's body: every section's table."""
    out = ["## Key reference", "",
           f"Generated from cost/schema_keys.py and cost/ranges.py by `{COMMAND}`; edit those, not"
           " this table. \"required\": the key has no default. Ranges are the physical ones every"
           " reader checks (cost/ranges.py), in the unit of the type column.", "",
           "## One GPU type (`cost/readers/`)", ""]
    out += [section_table(s) for s in ONE_TYPE]
    out += ["## Node groups, scenarios, events", ""]
    out += [section_table(s) for s in GROUP_FORMAT]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bodies = {REGION: render()}
    if argv == ["--check"]:
        out = stale(PAGE, bodies)
        if out:
            print(f"{PAGE}: stale; run `{COMMAND}`", file=sys.stderr)
        return 1 if out else 0
    if argv:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    print(f"{PAGE}: {'written' if update(PAGE, bodies) else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
