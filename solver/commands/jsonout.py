"""`--json` output: one whole, valid JSON document on stdout, or nothing.

The document is serialised in full before the first byte is written, so an error while
encoding it can never leave half an object on stdout. It is strict JSON (solver/result_json.
json_safe: no NaN or infinities, no integer too long to print).
Every document opens with `schema_version` (solver/commands/schema.SCHEMA_VERSION), so that a
reader can tell which shape it holds.
"""

from __future__ import annotations

import json
import sys

from paraplan.solver.result_json import json_safe


def emit_json(obj: dict) -> None:
    # imported here: the JSON schema's module serves --json only, not a plan's text (issue 33)
    from paraplan.solver.commands.schema import SCHEMA_VERSION
    text = json.dumps(json_safe({"schema_version": SCHEMA_VERSION, **obj}), indent=2, allow_nan=False)
    sys.stdout.write(text + "\n")
