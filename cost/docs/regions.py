"""Generated regions of the docs/ pages: text between two HTML comments that a generator owns.

A page holds hand-written prose and, between

    <!-- BEGIN generated NAME: COMMAND -->
    ...
    <!-- END generated NAME -->

a region that COMMAND writes (cost/docs/schema.py, cost/docs/accuracy.py). The generators replace
only those regions, so prose around them is left alone, and a test compares each region with
what its generator writes now: a change of the source (a key's description, a stored
cross-validation) shows up as a doc diff, never as a page that silently drifts.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN generated {re.escape(name)}: [^\n]*-->\n)(.*?)(<!-- END generated "
                      rf"{re.escape(name)} -->)", re.S)


def region(text: str, name: str) -> str:
    """The body of region `name` in `text`; ValueError where the page has no such region."""
    m = _pattern(name).search(text)
    if m is None:
        raise ValueError(f"no generated region {name!r}: the page needs its BEGIN/END comments")
    return m.group(2)


def replace_region(text: str, name: str, body: str) -> str:
    """`text` with region `name`'s body replaced by `body` (which ends with a newline)."""
    region(text, name)  # raises where absent
    return _pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def update(page: Path, bodies: dict[str, str]) -> bool:
    """Write `bodies` (region name -> body) into `page`; True where the page changed."""
    old = page.read_text()
    new = old
    for name, body in bodies.items():
        new = replace_region(new, name, body)
    if new != old:
        page.write_text(new)
    return new != old


def stale(page: Path, bodies: dict[str, str]) -> list[str]:
    """The regions of `page` whose body differs from `bodies`."""
    text = page.read_text()
    return [name for name, body in bodies.items() if region(text, name) != body]


def main(argv: list[str] | None, command: str, pages) -> int:
    """A generator's command line: write each page's regions (`pages()`: page -> {region name ->
    body}), or with `--check` write nothing and exit 1 where a page is stale; 2 on other
    arguments."""
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print(f"usage: {command} [--check]", file=sys.stderr)
        return 2
    status = 0
    for page, bodies in pages().items():
        if argv:
            out = stale(page, bodies)
            if out:
                print(f"{page}: stale regions {', '.join(out)}; run `{command}`", file=sys.stderr)
                status = 1
        else:
            print(f"{page}: {'written' if update(page, bodies) else 'unchanged'}", file=sys.stderr)
    return status
