"""Output files: checked before any work starts, written without tracebacks.

Every command that solves and writes a file (plan -o, replan -o, report -o, sweep -o/--json,
bench --csv/--json) calls `check_output_path` before it loads, solves or sweeps anything, so a
missing or unwritable directory costs no solve: the command exits 2 with one line naming the
flag and the path (export solves nothing and reports its own write error in one line). What
can only fail while writing (a full disk, a quota) is caught by
`write_text` and reported the same way.
"""

from __future__ import annotations

import os
import stat
import sys

import yaml

from paraplan.cost.errors import InstanceError


def check_output_path(path: str | None, flag: str, *, regular_only: bool = False) -> None:
    """Raise InstanceError unless `path` can be written: its directory exists and is writable,
    and `path` is not a directory (with `regular_only`, nothing but a regular file or no file:
    a sweep re-reads its outputs on --resume, and /dev/zero would never end)."""
    if path is None:
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InstanceError("<arguments>", flag, f"the directory of {path} does not exist",
                            "create it, or give another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InstanceError("<arguments>", flag, f"the directory of {path} is not writable",
                            "give a path in a directory you can write to")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InstanceError("<arguments>", flag, f"cannot use {path} ({e.strerror})",
                            "give another path") from None
    if stat.S_ISDIR(st.st_mode):
        raise InstanceError("<arguments>", flag, f"{path} is a directory",
                            "give the path of a file")
    if regular_only and not stat.S_ISREG(st.st_mode):
        raise InstanceError("<arguments>", flag, f"{path} is not a regular file (a device,"
                            " pipe or socket)", "give the path of an ordinary file")
    if not os.access(path, os.W_OK):
        raise InstanceError("<arguments>", flag, f"{path} is not writable",
                            "give a path you can write to")


def write_text(path: str, text: str, flag: str) -> None:
    """Write `text` to `path`, a write error (full disk, quota) as one InstanceError line."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise InstanceError("<arguments>", flag, f"cannot write {path}"
                            f" ({e.strerror or type(e).__name__})",
                            "free some space or give another path; the result above is"
                            " complete") from None


def write_plan_file(path: str, header: str, mapping: dict) -> None:
    """A plan file (plan -o, replan -o): the `header` comment, then `mapping` as YAML. Written
    after the result is shown (stdout flushed first), so that a full disk loses nothing."""
    sys.stdout.flush()
    write_text(path, header + yaml.safe_dump(mapping, sort_keys=False), "-o/--output")


def plan_file(inst, plan, read) -> dict:
    """The plan file's mapping, as `plan -o` writes it (`read`: the instance as read_instance
    read it; `inst`: as planned): a flat file's plan of one class on every GPU in the flat
    format, any other (or any plan of a node-group file) in the group format, each with the
    instance as read (cost/readers/instance_writer.py writes every cluster), so that the plan
    file reads back alone."""
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    from paraplan.cost.readers.plan_reader import PLAN_FILE_INSTANCE_KEY
    from paraplan.cost.readers.plan_writer import plan_file_mapping, plan_to_mapping
    if inst.written_as_groups or not inst.flat and not plan.is_flat_on(inst.cluster):
        return {"plan": plan_to_mapping(plan, inst), PLAN_FILE_INSTANCE_KEY: instance_to_mapping(read)}
    return plan_file_mapping(read, plan)
