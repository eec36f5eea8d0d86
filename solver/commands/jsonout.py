"""`--json` output: one whole, valid JSON document on stdout, or nothing.

The document is serialised in full before the first byte is written, so an error while
encoding it can never leave half an object on stdout. It is strict JSON: NaN and infinities
(which `json.dump` would write as the invalid tokens NaN and Infinity) become null, and an
integer too long for Python's int -> str conversion (over 4,300 digits: a count of plans in an
astronomical space) becomes a string in scientific notation, as `solver.format.count` writes it.
Every document opens with `schema_version` (solver/commands/schema.SCHEMA_VERSION), so that a
reader can tell which shape it holds.
"""

from __future__ import annotations

import json
import math
import sys

from paraplan.solver.commands.schema import SCHEMA_VERSION
from paraplan.solver.format import count

_MAX_INT_DIGITS = 4000  # below Python's default int -> str limit (4,300 digits)


def json_safe(obj):
    """`obj` with non-finite floats as None and huge integers as scientific strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, int):
        return count(obj) if obj.bit_length() > _MAX_INT_DIGITS * 3.3 else obj
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def emit_json(obj: dict) -> None:
    text = json.dumps(json_safe({"schema_version": SCHEMA_VERSION, **obj}), indent=2, allow_nan=False)
    sys.stdout.write(text + "\n")
