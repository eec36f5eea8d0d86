"""Typed access to one YAML mapping: `Section`, and the checks of a single value.

Every reader turns a parsed mapping into records through `Section` (cost/readers/ and
cost/calibration.py's rows), so every value is checked, and every problem worded, one way.

Typed strictly: a bool or 8.0 is not an integer, "400" is not a number, NaN/inf are refused.
Every number must lie in its documented physical range (cost/ranges.py, one table for every
reader: e.g. nic_gbit_per_s 1 to 10,000, hbm_gib 1 to 10,000, efficiencies 0.01 to 1, latencies
0 to 1,000 us, gpus_per_node 1 to 1,024, layers 1 to 10**6); a value outside it is refused with
one line naming the range, before anything is sized by it. So is a cluster of more than 2**24
GPUs. Unknown keys are errors with a "did you mean" hint.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from enum import Enum
from typing import Any, Iterator

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.hf_layout import key_text, shown as _shown
from paraplan.cost.ranges import RANGES, out_of_range, range_fix, range_text


_MAX_INT = 10**9  # integers beyond are typos whatever their range (cost/ranges.py)

_REQUIRED = object()


def describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, int) and abs(value) >= 10**60:
        return _shown(value)  # "an integer of about N digits"
    return f"{type(value).__name__} {_shown(value)}"


def shown_value(value: Any) -> str:
    """A value for "unknown value ..." messages: a string quoted, anything else described."""
    return _shown(value) if isinstance(value, str) else describe(value)


def _looks_numeric(value: str) -> bool:
    """Text that is a finite number in plain ASCII, as a user may have meant it."""
    text = value.strip()
    if not text.isascii() or len(text) > 40:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# YAML 1.1, which PyYAML follows, reads an exponent only with a '.' in the mantissa and a sign
# in the exponent: 6.0e+2 is a number, 6e2 and 6.0e2 are text.
_YAML_EXPONENT_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.[0-9_]*[eE][-+][0-9]+")


class Section:
    """One YAML mapping being read; knows its file and dotted prefix so errors can name both.

    `allowed`: the keys it may hold, or None for any (printable) key. Also reads calibration
    rows (cost/calibration.py, load_rows).
    """

    def __init__(self, raw: Any, path: str, prefix: str, allowed: tuple[str, ...] | None):
        self.path, self.prefix = path, prefix
        if not isinstance(raw, dict):
            raise InstanceError(path, prefix or "<top level>",
                                f"expected a mapping, got {describe(raw)}",
                                "write indented 'key: value' lines there")
        for key in raw:
            if not isinstance(key, str) or not key or not key.isprintable():
                raise InstanceError(path, self.field(key_text(key)),
                                    f"key {_shown(key)} is not a name",
                                    "use a non-empty string on one line, without control"
                                    " characters, as the key")
            if allowed is not None and key not in allowed:
                raise InstanceError(path, self.field(key_text(key)),
                                    f"unknown key {_shown(key)}", did_you_mean(key, allowed)
                                    or "remove it; allowed keys are " + ", ".join(allowed))
        self.raw = raw

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, problem: str, fix: str) -> InstanceError:
        return InstanceError(self.path, self.field(key), problem, fix)

    def has(self, key: str) -> bool:
        return key in self.raw

    def has_value(self, key: str) -> bool:
        """The key is present and not null."""
        return self.raw.get(key) is not None

    def _get(self, key: str, default: Any, what: str) -> Any:
        if key not in self.raw:
            if default is _REQUIRED:
                where = f" under '{self.prefix}'" if self.prefix else ""
                raise self.error(key, f"missing required key '{key}'",
                                 f"add '{key}: <{what}>'{where}")
            return default
        return self.raw[key]

    def section(self, key: str, allowed: tuple[str, ...] | None) -> Section:
        return Section(self._get(key, _REQUIRED, "mapping"), self.path, self.field(key), allowed)

    def integer(self, key: str, default: Any = _REQUIRED) -> int:
        """The integer under `key`, within its physical range (cost/ranges.py)."""
        value = self._get(key, default, "integer")
        return value if value is default else check_int(value, self.path, self.field(key), key)

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        """The finite number under `key`, within its physical range (cost/ranges.py)."""
        value = self._get(key, default, "number")
        return value if value is default else check_number(value, self.path, self.field(key), key)

    def string(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._get(key, default, "string")
        if value is default:
            return value
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise self.error(key, f"expected a non-empty string, got {describe(value)}",
                             "write a name on one line, without control characters (quote it"
                             " if YAML reads it as a number)")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        return check_bool(self._get(key, default, "true|false"), self.path, self.field(key))

    def choice(self, key: str, allowed: tuple[str, ...], default: Any = _REQUIRED) -> str:
        return check_choice(self._get(key, default, " | ".join(allowed)), allowed, self.path,
                            self.field(key))

    def list_of(self, key: str, check, what: str) -> tuple:
        """A non-empty list under `key`, each item passed through check(value, field)."""
        value = self.raw[key]
        if not isinstance(value, list) or not value:
            raise self.error(key, f"expected a non-empty list of {what}, got {describe(value)}",
                             "write a list like [1, 2, 4]")
        if len(value) > 4096:
            raise self.error(key, f"has {len(value)} entries", "list at most 4096 values")
        return tuple(check(v, f"{self.field(key)}[{i}]") for i, v in enumerate(value))

    def int_list(self, key: str, length: int) -> tuple[int, ...] | None:
        """The list under `key`, or None when the key is absent."""
        if key not in self.raw:
            return None
        value = self.raw[key]
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of integers, got {describe(value)}",
                             f"write a list like [{', '.join(['1'] * min(length, 4))}]")
        if len(value) != length:
            raise self.error(key, f"has {len(value)} entries but pp = {length}",
                             "give one entry per pipeline stage")
        return tuple(check_int(v, self.path, f"{self.field(key)}[{i}]", key)
                     for i, v in enumerate(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_fix(value: Any, *, integer: bool = False, hi: float = _MAX_INT) -> str:
    """How to write `value` as a number; `hi`: its range's upper bound, past which (and past
    _MAX_INT) a number read from text is called a typo (job.train_tokens reaches 10**16)."""
    if isinstance(value, bool):
        return "write a number, not true/false"
    if isinstance(value, str) and _looks_numeric(value):
        text = value.strip()
        if "e" in text.lower() and not _YAML_EXPONENT_FLOAT.fullmatch(text):
            number = float(text)
            if abs(number) > max(hi, _MAX_INT):
                return (f"YAML reads {text} as text, and as a number it would be absurdly"
                        " large: check for a typo or the unit")
            if integer:
                return f"YAML reads {text} as text; write {number:.0f}"
            mantissa, exponent = re.split("[eE]", text.lower())
            mantissa += "" if "." in mantissa else ".0"
            exponent = exponent if exponent[0] in "+-" else "+" + exponent
            return f"YAML reads {text} as text; write {mantissa}e{exponent}"
        return "remove the quotes"
    return "write a whole number" if integer else "write a plain number"


def check_int(value: Any, path: str, field: str, quantity: str) -> int:
    """`value` as an integer of `quantity`, within its range (cost/ranges.py)."""
    hi = RANGES[quantity].hi
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value > max(hi, _MAX_INT):
            raise InstanceError(path, field, f"{value:g} is absurdly large (more than {hi:,})",
                                "check for a typo: extra digits, or a size where a count belongs")
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            fix = f"write {int(value)} without the decimal point"
        else:
            fix = _number_fix(value, integer=True)
        raise InstanceError(path, field, f"expected an integer, got {describe(value)}", fix)
    if value > _MAX_INT:  # a typo guard, before the range: the value may be hundreds of digits
        raise InstanceError(path, field, f"{_shown(value)} is absurdly large (more than"
                            f" {hi:,}; {range_text(quantity)})",
                            "check for a typo: extra digits, or a size where a count belongs")
    problem = out_of_range(quantity, value)
    if problem is not None:
        raise InstanceError(path, field, problem, range_fix(quantity))
    return value


def check_bool(value: Any, path: str, field: str) -> bool:
    """`value` as a boolean (a key's value or a list item): true or false, nothing else."""
    if not isinstance(value, bool):
        raise InstanceError(path, field, f"expected true or false, got {describe(value)}",
                            "write true or false")
    return value


def check_choice(value: Any, allowed: tuple[str, ...], path: str, field: str) -> str:
    """`value` as one of the names `allowed` (a key's value or a list item)."""
    if not isinstance(value, str) or value not in allowed:
        raise InstanceError(path, field, f"unknown value {shown_value(value)}",
                            "use one of: " + ", ".join(allowed))
    return value


def check_number(value: Any, path: str, field: str, quantity: str) -> float:
    """`value` as a finite number of `quantity`, within its range (cost/ranges.py)."""
    if not _is_number(value):
        raise InstanceError(path, field, f"expected a number, got {describe(value)}",
                            _number_fix(value, hi=RANGES[quantity].hi))
    if not math.isfinite(value):
        raise InstanceError(path, field, f"{value} is not a finite number", "give a finite value")
    if isinstance(value, int) and abs(value) > 10**60:
        value = math.copysign(math.inf, value)  # compared, never printed in full
    problem = out_of_range(quantity, value)
    if problem is not None:
        raise InstanceError(path, field, problem, range_fix(quantity))
    return float(value)


def did_you_mean(name: str, known) -> str:
    """"did you mean 'X'?" for the known name closest to `name`, else "" (a name of 100 or more
    characters is not compared: difflib's matching is quadratic). difflib is imported here: only
    a mistyped name reads it (issue 33, start-up)."""
    import difflib
    close = difflib.get_close_matches(name, list(known), n=1) if len(name) < 100 else []
    return f"did you mean '{close[0]}'?" if close else ""


def enum_values(enum: type[Enum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


@contextmanager
def config_errors_as(path: str, field: str, fix: str) -> Iterator[None]:
    """Re-raise the records' own ConfigError as a file-level InstanceError."""
    try:
        yield
    except ConfigError as e:
        raise InstanceError(path, field, str(e), fix) from None
_ABSENT = object()  # default of keys that may be left out; an explicit null is still refused
_MAX_ITEMS = 4096  # groups, links, scenarios, periods, changes, classes


def did_you_mean_or_known(name: str, known, what: str) -> str:
    """A fix for an unknown name: the closest known one, else the list of them."""
    return did_you_mean(name, known) or f"the {what} are: " + ", ".join(sorted(known))


def list_items(sec: Section, key: str, *, each: str) -> list[tuple[str, Any]]:
    """(dotted field, raw item) for each entry of the non-empty list under `key`; `each`
    names one entry for the messages."""
    if not sec.has(key):
        raise sec.error(key, f"missing required key '{key}'",
                        f"add '{key}:' with one '- ...' entry per {each}")
    value = sec.raw[key]
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else describe(value)
        raise sec.error(key, f"expected a non-empty list, got {got}",
                        f"write one '- ...' entry per {each}")
    if len(value) > _MAX_ITEMS:
        raise sec.error(key, f"has {len(value)} entries", f"list at most {_MAX_ITEMS}")
    return [(f"{sec.field(key)}[{i}]", item) for i, item in enumerate(value)]


def optional_number(sec: Section, key: str) -> float | None:
    """The number under `key`, or None when the key is absent (a null is refused)."""
    value = sec.number(key, _ABSENT)
    return None if value is _ABSENT else value
