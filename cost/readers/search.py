"""The `search:` section read into a SearchSpace, and `--search` overrides checked like it.

A `search:` value that the instance's shape can never run (cost/space_rules.py: tp=3 with 16
heads, tp beyond a node without tp_across_nodes, pp above the layers, a cp that does not divide
seq_len, a micro_batch dividing no per-replica batch, a memory reserve as large as the GPU) is
refused as it is read, naming the value and why. A `search:` value that `job.framework` can never run (cost/framework_rules.py: e.g.
`cp: [2]` under deepspeed, `zero: [3]` with `pp: [2, 4]` under megatron or deepspeed, `zero: [1]`
under torchtitan or composer) is refused with one InstanceError naming the search key and the
framework; combinations the defaults bring in are filtered, not refused. With part files the
check uses the final job, wherever its `search:` came from.

`job.framework_version` names a release of `job.framework` that cost/releases.py lists (each
with its date and what it changed that cost/ prices; an unknown one is refused, naming the known
ones); left out, the job is for the framework's current release. An older release narrows the
declared space to what it ran (cost/framework_rules.release_space: Megatron-LM v1.0 had no
pipeline, nemo-24.07 no Megatron-FSDP): keys not listed take the release's values, and a listed
value it cannot run is refused naming the release. The plan names the release its time is for
(`plan` and `simulate` print it, `plan --json` gives `framework_version`), and its trust band counts a release that
fewer than three published rows ran at its scale as unvalidated (cost/trust.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from paraplan.cost import units
from paraplan.cost.objective import parse_objective
from paraplan.cost.errors import InstanceError
from paraplan.cost.framework_rules import framework_refusal, release_search
from paraplan.cost.specs import Framework, Instance, JobSpec, Recompute, SearchSpace
from paraplan.cost.readers.fields import (Section, check_bool, check_choice, check_int,
                                          config_errors_as, enum_values)
from paraplan.cost.readers.checks import check_whole


SEARCH_KEYS = ("tp", "pp", "cp", "micro_batch", "max_micro_batch", "max_pp", "max_cp",
                "sequence_parallel", "zero", "virtual_stages", "recompute", "full_recompute",
                "uniform_split", "tp_across_nodes", "tp_per_group", "classes_per_group", "idle_gpus",
                "mixed_families", "asymmetric_pipelines", "memory_reserve_gib", "tensor_partitions", "ep", "etp", "objective")


def search_from_section(sec: Section, framework: Framework | None = None) -> SearchSpace:
    """The planner's declared space; absent keys keep SearchSpace's documented defaults. With
    `framework`, a listed value that framework can never run is refused (module docstring)."""
    kw: dict[str, Any] = {}
    for key in ("tp", "pp", "cp", "micro_batch", "virtual_stages", "zero", "ep", "etp"):
        if sec.has(key):
            kw[key] = sec.list_of(key, lambda v, f, key=key: check_int(v, sec.path, f, key),
                                  "integers")
    if sec.has("sequence_parallel"):
        kw["sequence_parallel"] = sec.list_of(
            "sequence_parallel", lambda v, f: check_bool(v, sec.path, f), "true/false values")
    if sec.has("recompute"):
        allowed = enum_values(Recompute)
        kw["recompute"] = tuple(Recompute(v) for v in sec.list_of(
            "recompute", lambda v, f: check_choice(v, allowed, sec.path, f), " | ".join(allowed)))
    for key in ("max_micro_batch", "max_pp", "max_cp", "classes_per_group"):
        if sec.has(key):
            kw[key] = sec.integer(key)
    for key in ("full_recompute", "uniform_split", "tp_across_nodes", "tp_per_group", "idle_gpus",
                "mixed_families", "asymmetric_pipelines"):
        if sec.has(key):
            kw[key] = sec.boolean(key, False)
    if sec.has("memory_reserve_gib"):
        kw["memory_reserve_bytes"] = units.gib_to_bytes(
            sec.number("memory_reserve_gib"))
    if sec.has("objective"):
        kw["objective"] = sec.string("objective")
        try:
            parse_objective(kw["objective"])
        except ValueError:
            raise sec.error("objective", f"{kw['objective']!r} is not an objective",
                            "write mean (the predicted time) or pNN with NN in 1..99, e.g. p90") from None
    if sec.has("tensor_partitions"):
        allowed = ("megatron", "spatial_temporal")
        kw["tensor_partitions"] = sec.list_of("tensor_partitions",
                                              lambda v, f: check_choice(v, allowed, sec.path, f),
                                              " | ".join(allowed))
    with config_errors_as(sec.path, sec.prefix, "narrow the search space to valid values"):
        space = SearchSpace(**kw)
    if framework is not None:
        refusal = framework_refusal(space, framework, frozenset(kw))
        if refusal is not None:
            raise sec.error(refusal.key, f"{refusal.problem} (job.framework: {framework.value})",
                            refusal.fix)
    return space


def release_search_of(source: str, space: SearchSpace, job: JobSpec, given: frozenset[str]) -> SearchSpace:
    """`space` narrowed to what job.framework_version runs (framework_rules.release_search);
    a listed search value that release cannot run is an InstanceError naming `source`."""
    narrowed, refusal = release_search(space, job.framework, job.release.year, given, job.release.version,
                                       job.release.month)
    if refusal is not None:
        raise InstanceError(source, f"search.{refusal.key}", refusal.problem, refusal.fix)
    return narrowed


# YAML search keys whose SearchSpace field has another name (the unit is converted at load)
_SEARCH_FIELDS = {"memory_reserve_gib": "memory_reserve_bytes"}
SEARCH_LIST_KEYS = ("tp", "pp", "cp", "micro_batch", "sequence_parallel", "zero", "virtual_stages",
                    "recompute", "tensor_partitions", "ep", "etp")


def override_search(inst: Instance, raw: dict[str, Any], source: str = "<--search>") -> Instance:
    """`inst` with the search keys in `raw` (YAML values, e.g. {"tp": [1, 2], "zero": [1]})
    replacing its own; every key and value is checked exactly as in a `search:` section
    (framework rules included), and errors name `source`."""
    sec = Section(raw, source, "search", SEARCH_KEYS)
    parsed = search_from_section(sec, inst.job.framework)
    fields = {_SEARCH_FIELDS.get(k, k): getattr(parsed, _SEARCH_FIELDS.get(k, k)) for k in raw}
    with config_errors_as(source, "search", "narrow the search space to valid values"):
        space = replace(inst.search, **fields)
    space = release_search_of(source, space, inst.job, frozenset(raw))
    return check_whole(replace(inst, search=space), sec, source)
