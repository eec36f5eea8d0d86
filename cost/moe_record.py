"""Re-record each priced MoE anchor's `paraplan_prediction` in cost/published/moe.yaml, and each
fine-grained check's in cost/published/moe_checks.yaml: what cost/moe_anchors.price computes
now, rounded as AnchorPrice.recorded writes it. Run after anything moves the MoE prices (a
refit, `paraplan accuracy --moe --moe-write`, or a changed plan): `python -m
paraplan.cost.moe_record`. tests/validation/test_moe_anchor.py and test_moe_checks.py pin the
recorded values to the live ones, so a stale record fails there.

The file is edited as text, row by row, so its comments, anchors and layout stay as written;
only the flow mapping after `paraplan_prediction:` of each priced row is replaced.
"""

from __future__ import annotations

import re
from pathlib import Path

from paraplan.cost.moe_anchors import ANCHORS_PATH, CHECKS_PATH, check_rows, price, priced_rows

ROW_SEPARATOR = "\n  - id: "
_PREDICTION = re.compile(r"paraplan_prediction: \{[^}]*\}")
_INDENT = " " * len("    paraplan_prediction: {")
_WIDTH = 100  # moe.yaml's line length


def _flow(recorded: dict) -> str:
    """`paraplan_prediction: {...}` wrapped at _WIDTH as the file writes it."""
    items = [f"{k}: {'true' if v is True else 'false' if v is False else v}," for k, v in recorded.items()]
    items[-1] = items[-1].rstrip(",") + "}"
    lines, line = [], "    paraplan_prediction: {"
    for item in items:
        if len(line) + 1 + len(item) > _WIDTH and not line.endswith("{"):
            lines.append(line)
            line = _INDENT + item
        else:
            line += ("" if line.endswith("{") else " ") + item
    lines.append(line)
    return "\n".join(lines).removeprefix("    ")


def rerecorded(text: str, recorded: dict[str, dict], path: Path = ANCHORS_PATH) -> str:
    """`text` (moe.yaml, or another file of such rows at `path`) with the prediction of every
    row in `recorded` (id -> AnchorPrice.recorded()) replaced; each id must name a row with one
    prediction mapping."""
    blocks = text.split(ROW_SEPARATOR)
    seen = set()
    for i, block in enumerate(blocks[1:], start=1):
        rid = block.split("\n", 1)[0].strip()
        if rid in recorded:
            blocks[i], n = _PREDICTION.subn(lambda _: _flow(recorded[rid]), block, count=1)
            if n != 1:
                raise ValueError(f"{path}: row {rid} has no paraplan_prediction mapping to replace")
            seen.add(rid)
    missing = set(recorded) - seen
    if missing:
        raise ValueError(f"{path}: no rows {sorted(missing)}")
    return ROW_SEPARATOR.join(blocks)


def main(path: Path = ANCHORS_PATH, checks_path: Path = CHECKS_PATH) -> None:
    for file, rows in ((path, priced_rows()), (checks_path, check_rows())):
        recorded = {r["id"]: price(r).recorded() for r in rows}
        file.write_text(rerecorded(file.read_text(), recorded, file))
        print(f"re-recorded {len(recorded)} predictions in {file}")


if __name__ == "__main__":
    main()
