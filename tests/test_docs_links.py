"""Every relative link of README.md and docs/*.md reaches a file of the repository, and every
`#anchor` a heading of its page, so that a renamed section (the generated pages rename theirs
when their source changes) cannot leave a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' dropped,
    spaces to '-' (so "Dense runs out of sample: the headline" is
    "dense-runs-out-of-sample-the-headline")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings in code blocks
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_slug_by_hand():
    assert slug("Planning under the model's uncertainty") == "planning-under-the-models-uncertainty"
    assert slug("Node groups, scenarios, events (`cost/groups_loader.py`)") == \
        "node-groups-scenarios-events-costgroups_loaderpy"


def test_every_relative_link_reaches_its_file_and_heading():
    dead = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                dead.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                dead.append(f"{page.name}: {target} (no such heading)")
    assert not dead, dead
