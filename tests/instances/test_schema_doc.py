"""docs/schema.md's key reference is generated from one description per key, the docstring of
the record field that holds it (cost/schema_keys.py says which field holds which key), and that
table describes exactly the keys the readers accept, section by section, with the defaults
they fill in."""

from __future__ import annotations

import ast
import importlib
import sys
from dataclasses import fields
from pathlib import Path

from paraplan.cost.docs import schema as schema_doc
from paraplan.cost.docs.field_docs import field_docs, summary
from paraplan.cost.docs.regions import region, replace_region
from paraplan.cost import schema_keys as keys
from paraplan.cost.plan_specs import Plan
from paraplan.cost.readers.gpus import gpu_from_mapping
from paraplan.cost.readers.instance import instance_from_mapping
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.schema_keys import FIELD_DEFAULT, SECTIONS, field_default, source
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


# the smallest files the readers take: every key left out that may be
_MODEL = {"layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000, "seq_len": 1024,
          "mlp": "gelu"}
_GROUP = {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8, "intra_node_gbytes_per_s": 600,
          "nic_gbit_per_s": 200}
_JOB = {"global_batch": 32}


def test_a_key_left_out_is_read_as_the_default_the_page_gives():
    # The page gives a FIELD_DEFAULT key's default as its field's own; the readers pass their
    # own defaults, so this reads files that leave every such key out and compares.
    flat = instance_from_mapping({"name": "t", "model": _MODEL, "cluster": _GROUP, "job": _JOB})
    moe = instance_from_mapping({"name": "m", "cluster": _GROUP, "job": _JOB, "model": {
        **_MODEL, "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024}}})
    groups = instance_from_mapping({"name": "g", "model": _MODEL, "job": _JOB,
                                    "cluster": {"groups": [{"name": "a", **_GROUP}]}})
    read = {
        keys.MODEL: flat.model, keys.MOE: moe.model.moe, keys.CLUSTER: flat.cluster.groups[0],
        keys.JOB: flat.job, keys.SEARCH: flat.search, keys.SWITCHING: groups.switching,
        keys.GPU: gpu_from_mapping("X", {"peak_tflops_bf16": 312, "hbm_gib": 80,
                                         "hbm_gbytes_per_s": 2039}, "<memory>", "gpu_types.X"),
        # 8 replicas x micro-batch 4 x 1 micro-batch = the job's 32 sequences
        # the modes of either form (one reader reads them): the flat form's
        keys.PLAN_MODES: plan_from_mapping({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 4}, flat),
        keys.GROUPS_PLAN: plan_from_mapping({"tp": 1, "micro_batch": 4, "classes": [
            {"replicas": 8, "stages": ["a"], "num_micro_batches": 1}]}, groups),
    }
    checked = 0
    for sec in SECTIONS:
        for key in sec.keys:
            if key.default != FIELD_DEFAULT:
                continue
            assert sec in read, sec.title
            _, name = source(key, sec)
            assert getattr(read[sec], name) == field_default(key, sec), (sec.title, key.name)
            checked += 1
    assert checked >= 60  # the 68 keys whose default was written "false", "0", ... at the time


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
            last = node.args[-1]  # a key tuple, or either of two (`A_KEYS if x else B_KEYS`)
            for name in ([last.body, last.orelse] if isinstance(last, ast.IfExp) else [last]):
                if isinstance(name, ast.Name) and name.id.endswith("KEYS"):
                    found.add((imported.get(name.id, module), name.id))
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
