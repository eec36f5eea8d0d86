"""The README's tour shows what `paraplan plan` prints: its figures are checked against a fresh
run of the tour's own command line, read from the README itself (issue 32: the README's tour).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from paraplan.solver.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _readme_tour() -> tuple[list[str], list[str], str]:
    """The README's tour: its `paraplan plan` command line, the evidence block shown under
    "2. Read the evidence", and the prose sentence giving the plan's two times."""
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"```bash\n(paraplan plan --hf-config.*?)\n```", readme, re.S).group(1)
    argv = shlex.split(command.replace("\\\n", " "))[1:]
    block = re.search(r"### 2\. Read the evidence\n```\n(.*?)\n```", readme, re.S).group(1)
    sentence = re.search(r"[\d.]+ s per iteration predicted, [\d.]+ s at the 90th percentile", readme).group(0)
    return argv, block.splitlines(), sentence


def test_the_readme_tour_shows_what_plan_prints(capsys, tmp_path, monkeypatch):
    # every line of the README's block is the command's line, "..." standing for text left out
    argv, block, sentence = _readme_tour()
    monkeypatch.chdir(ROOT)  # the tour's paths are relative to the repository
    argv = [str(tmp_path / "plan.yaml") if a == "plan.yaml" else a for a in argv]
    code, out, _ = _run(capsys, *argv, "--quiet")
    assert code == 0
    printed = out.splitlines()
    for shown in block:
        key = shown[:12]
        line = next((p for p in printed if p.startswith(key)), None)
        assert line is not None, shown
        pieces = [re.escape(piece) for piece in shown.split("...")]
        assert re.fullmatch(".*".join(pieces), line) or (len(pieces) == 1 and line.startswith(shown)), \
            (shown, line)
    code, out, _ = _run(capsys, *argv, "--quiet", "--json")
    doc = json.loads(out)
    assert sentence == (f"{doc['iter_time_s']:.2f} s per iteration predicted,"
                        f" {doc['quantile_s']:.2f} s at the 90th percentile")
