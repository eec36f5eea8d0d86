"""docs/schema.md's key reference is generated from one description per key, the docstring of
the record field that holds it (cost/schema_keys.py says which field holds which key), and that
table describes exactly the keys the readers accept, section by section."""

from __future__ import annotations

import ast
import importlib
import sys
from dataclasses import fields
from pathlib import Path

from paraplan.cost.docs import schema as schema_doc
from paraplan.cost.docs.field_docs import field_docs, summary
from paraplan.cost.docs.regions import region, replace_region
from paraplan.cost.plan_specs import Plan
from paraplan.cost.schema_keys import SECTIONS, source
from paraplan.cost.specs import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
# every module of the readers' room (cost/readers/), found on disk so a reader added later is read
READERS = tuple(f"cost.readers.{p.stem}" for p in sorted((ROOT / "cost" / "readers").glob("*.py"))
                if p.stem != "__init__")


def test_the_page_is_what_the_generator_writes():
    # A description edited in cost/schema_keys.py (or a range in cost/ranges.py) without
    # `python -m paraplan.cost.docs.schema` leaves the page stale: this fails until it is rerun.
    assert region(schema_doc.PAGE.read_text(), schema_doc.REGION) == schema_doc.render()
    assert schema_doc.main(["--check"]) == 0


def test_every_key_is_described_once_by_a_field_docstring_or_by_the_table():
    for sec in SECTIONS:
        for key in sec.keys:
            where = source(key, sec)
            if where is None:  # no one field holds it: the table says what it means
                assert key.meaning and not key.field and key.record is None, (sec.title, key.name)
                continue
            record, name = where
            assert record is not None, (sec.title, key.name)
            assert name in {f.name for f in fields(record)}, (sec.title, key.name, record.__name__)
            assert summary(field_docs(record).get(name, "")), \
                f"{record.__name__}.{name} (key {sec.path}.{key.name}) has no docstring"


def test_a_field_docstring_is_read_through_the_base_classes_and_cut_at_its_first_paragraph():
    # Plan's degrees are declared on its base class _Modes, its classes on Plan itself
    docs = field_docs(Plan)
    assert {"tp", "zero", "classes"} <= set(docs)
    assert summary("one\n  line\n\nmore for code readers") == "one line"


def test_field_docstrings_compile_to_nothing():
    # The docstrings cost the plan path nothing: the compiled class body holds no constant for
    # them (CPython drops a bare string statement), so importing cost/specs.py keeps none.
    path = sys.modules[ModelSpec.__module__].__file__
    module = compile(Path(path).read_text(), path, "exec")
    body = next(c for c in module.co_consts if getattr(c, "co_name", "") == "ModelSpec")
    doc = field_docs(ModelSpec)["layers"]
    assert doc and doc not in body.co_consts


def _accepted(section) -> tuple[str, ...]:
    module, name = section.accepted.split(":")
    return getattr(importlib.import_module(f"paraplan.{module}"), name)


def test_every_key_a_reader_accepts_is_described_and_no_other():
    for sec in SECTIONS:
        documented = [k.name for k in sec.keys]
        if sec.includes:
            documented += [k.name for k in sec.includes.keys]
        assert len(documented) == len(set(documented)), sec.title
        assert set(documented) == set(_accepted(sec)), sec.title


def _key_tables_read() -> set[tuple[str, str]]:
    """(module, tuple name) of every key tuple the readers hand to `Section(...)` or
    `.section(name, ...)`: the keys some file may hold. Read from the source, so a section a
    reader adds later is found without this test naming it."""
    found = set()
    for module in READERS:
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
        imported = {a.asname or a.name: node.module.removeprefix("paraplan.")
                    for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                    for a in node.names}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            f = node.func
            if not ((isinstance(f, ast.Name) and f.id == "Section")
                    or (isinstance(f, ast.Attribute) and f.attr == "section")):
                continue
            last = node.args[-1]
            if isinstance(last, ast.Name) and last.id.endswith("KEYS"):
                found.add((imported.get(last.id, module), last.id))
    return found


def test_every_section_a_reader_reads_has_a_description():
    read = _key_tables_read()
    # the readers' sections, at the time of writing: the instance's six, MoE, MLA, the GPU
    # entry, the plan, the two part files, and the group format's thirteen (its model, job
    # and search sections are the one-type ones)
    assert len(read) >= 20
    described = {tuple(s.accepted.split(":")) for s in SECTIONS}
    assert read <= described, sorted(read - described)


def test_a_region_is_replaced_and_the_prose_around_it_kept():
    page = ("intro\n<!-- BEGIN generated keys: cmd -->\nold\n<!-- END generated keys -->\n"
            "prose\n")
    out = replace_region(page, "keys", "new\n")
    assert out == page.replace("old\n", "new\n")
    assert region(out, "keys") == "new\n"
