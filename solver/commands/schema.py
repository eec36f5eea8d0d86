"""The JSON every `paraplan ... --json` prints: one documented schema per command.

Conventions, the same for every command:
- the output is one JSON object (bench: written to the --json file) with a string `status`;
- what a command prints opens with `schema_version` (SCHEMA_VERSION, an integer raised when a
  key is removed or changes meaning; adding a key leaves it): the same shape, and the same
  keys, for a plan of one group and one class as for a mixed cluster's;
- times are numbers of seconds whose names end in `_s`; memory is bytes (`_bytes`);
  rates say their unit (`tokens_per_s`); shares are fractions (`gap`, `mfu`, `regret`);
- a value that does not exist is null, never a string such as "-";
- commands that produce a plan give `iter_time_s` (null without a plan) and `breakdown`, with
  the same core fields on homogeneous and mixed clusters (BREAKDOWN).

A schema is a Python value: a type name ("number", "integer", "string", "boolean", "any"),
a tuple of alternatives (("number", "null")), a list [item] (every item matches), a dict of
required fields (extra fields are allowed: they are documented where they are built), or
`MapOf(value)` (any string keys). `validate(obj, command)` returns the list of violations,
empty when `obj` conforms; tests/cli/test_json_schema.py runs every command and checks it.
`python -m solver.schema` prints the schemas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# 2: one breakdown shape on every cluster (solver/format.breakdown_json): every stage names its
# class and group, a mixed cluster's exposed_s holds the critical path's parts (was pipeline +
# sync), and a flat plan's breakdown has classes, pipeline_s, sync_s and idle_gpus
SCHEMA_VERSION = 2

NUM, INT, STR, BOOL, ANY = "number", "integer", "string", "boolean", "any"
NUM_OR_NULL = (NUM, "null")


@dataclass(frozen=True)
class MapOf:
    """A JSON object whose keys are free and whose values all follow one schema."""
    value: Any


STAGE = {"class": INT, "stage": INT, "group": STR, "layers": INT, "full_recompute_layers": INT,
         "time_per_micro_batch_s": NUM, "sync_time_s": NUM, "mem_bytes": NUM, "capacity_bytes": NUM}
CLASS = {"replicas": INT, "num_micro_batches": INT, "pipeline_time_s": NUM, "stage_groups": [STR]}
BREAKDOWN = {"iter_time_s": NUM, "tokens_per_s": NUM, "mfu": NUM, "megatron_tflops_per_gpu": NUM,
             "fits_memory": BOOL, "pipeline_s": NUM, "sync_s": NUM, "idle_gpus": INT,
             "bottleneck_class": INT, "bottleneck_stage": INT, "unit": STR,
             "exposed_s": MapOf(NUM), "overlapped_s": MapOf(NUM), "stages": [STAGE], "classes": [CLASS]}
SPACE = {"outer_configs": INT, "candidates": INT, "priced": INT, "solved": INT, "pruned_by_bound": INT,
         "pruned_by_memory": INT, "pruned_by_dominance": INT, "inner_infeasible": INT, "unresolved": INT,
         "not_covered": [STR]}
EVIDENCE = {"status": STR, "iter_time_s": NUM_OR_NULL, "bound_s": NUM_OR_NULL, "gap": NUM_OR_NULL,
            "solve_time_s": NUM, "backend": STR, "tolerance_s": NUM, "space": SPACE,
            "reason": (STR, "null")}
# the time and cost to train (solver/format.train_cost_json): null without job.train_tokens;
# an interval is [low, high], null where the plan has no trust interval, the cost null unpriced
INTERVAL = ([NUM], "null")
TRAIN_COST = {"train_tokens": NUM, "tokens_per_iteration": INT, "iterations": INT, "num_gpus": INT,
              "iter_time_s": NUM, "time_s": NUM, "time_interval_s": INTERVAL, "gpu_hours": NUM,
              "gpu_hours_interval": INTERVAL, "cost_usd": NUM_OR_NULL, "cost_interval_usd": INTERVAL}
SCENARIO = {"scenario": STR, "iter_time_s": NUM, "tokens_per_s": NUM, "fits_memory": BOOL}
METHOD = {"method": STR, "status": STR, "iter_time_s": NUM_OR_NULL, "quantile_s": NUM_OR_NULL,
          "solve_time_s": NUM_OR_NULL}
MEM_CATEGORIES = ("weights", "grads", "optimizer", "activations", "logits", "workspace", "runtime")

SCHEMAS: dict[str, dict] = {
    # quantile: search.objective (mean | pNN); quantile_s: the plan's value of it, which bound_s bounds
    # objective: the network objective (nominal on a flat cluster) and objective_s its value,
    # per_scenario_s on each scenario it reads (none on a flat cluster)
    "plan": {**EVIDENCE, "objective": STR, "objective_s": NUM_OR_NULL, "per_scenario_s": MapOf(NUM),
             "quantile": STR, "quantile_s": NUM_OR_NULL, "plan": (dict, "null"), "breakdown": (BREAKDOWN, "null"),
             "trust": (dict, "null"), "model_warnings": [STR], "train_cost": (TRAIN_COST, "null")},
    # objective: the network objective (nominal on a flat cluster); objective_s each plan's value
    # of it, iter_time_s its simulated time on the nominal network
    "plan --top": {"status": STR, "objective": STR, "solve_time_s": NUM, "solved": INT,
                   "plans": [{"rank": INT, "objective_s": NUM, "iter_time_s": NUM, "quantile_s": NUM,
                              "vs_best": NUM, "interval_s": INTERVAL, "plan": dict, "breakdown": BREAKDOWN,
                              "train_cost": (TRAIN_COST, "null")}]},
    # one row per network of the instance (a flat instance: its nominal one)
    "simulate": {"status": STR, "iter_time_s": NUM, "breakdown": BREAKDOWN, "model_warnings": [STR],
                 "scenarios": [SCENARIO]},
    # one shape on every cluster: objective (nominal on a flat cluster) and its value objective_s
    "exhaustive": {"status": STR, "complete": BOOL, "objective": STR, "objective_s": NUM_OR_NULL,
                   "iter_time_s": NUM_OR_NULL, "interval_s": INTERVAL, "candidates": INT, "feasible": INT,
                   "outer_configs": INT, "solve_time_s": NUM, "reason": (STR, "null"), "plan": (dict, "null")},
    # the methods are compared on quantile_s, the value each minimised (search.objective `quantile`)
    # objective: the network objective (nominal on a flat cluster)
    "verify": {"status": STR, "agree": BOOL, "objective": STR, "quantile": STR, "iter_time_s": NUM_OR_NULL,
               "quantile_s": NUM_OR_NULL, "methods": [METHOD]},
    "accuracy": {"status": STR, "files": [STR], "mape": NUM_OR_NULL, "bias": NUM_OR_NULL,
                 "rows_refused": [STR],
                 "rows": [{"id": STR, "predicted_iter_time_s": NUM, "measured_iter_time_s": NUM,
                           "error": NUM, "fits_memory": BOOL}]},
    "timeline": {"status": STR, "iterations": NUM, "upper_bound_iterations": NUM, "gap": NUM,
                 "switch_s": NUM, "solve_time_s": NUM, "plan_per_period": [INT]},
    "replan": {"status": STR, "event": STR, "before_s": NUM, "current_after_event_s": NUM,
               "current_after_event_interval_s": INTERVAL, "new_s": NUM_OR_NULL, "new_interval_s": INTERVAL,
               "switch_s": NUM, "pays_off": BOOL, "solve_time_s": NUM},
    "partition": {"status": STR, "agree": BOOL, "tp": INT,
                  "front": [{"time_s": NUM, "act_bytes": NUM, "workspace_bytes": NUM,
                             "grad_sync_s": NUM, "milp_time_s": NUM_OR_NULL, "agree": BOOL}]},
    "bench": {"status": STR, "rungs": [{"name": STR, "cpsat_s": NUM, "exhaustive_s": NUM_OR_NULL,
                                        "ratio": NUM_OR_NULL}]},
    "bench --mixed": {"status": STR, "rows": [dict],
                       "growth": [{"types": INT, "gpus": INT, "status": STR, "objective_s": NUM_OR_NULL,
                                   "outer_configs": INT, "priced": INT, "pruned_by_memory": INT,
                                   "pruned_by_bound": INT, "cpu_s": NUM, "peak_rss_gib": NUM_OR_NULL}],
                       "issue_rows": [dict]},
    "memory": {"status": STR, "plan": dict, "capacity_bytes": NUM, "peak_mem_bytes": NUM,
               "fits_memory": BOOL,
               "stages": [{"stage": INT, "total_bytes": NUM,
                           "categories_bytes": {k: NUM for k in MEM_CATEGORIES}}]},
    "compare": {"status": STR, "faster": (STR, "null"), "speedup": NUM,
                "plans": [{"file": STR, "iter_time_s": NUM, "interval_s": INTERVAL, "breakdown": BREAKDOWN,
                           "train_cost": (TRAIN_COST, "null")}],
                "parts": [{"part": STR, "a_s": NUM, "b_s": NUM, "diff_s": NUM}], "reasons": [STR]},
}
# mixed clusters: the same core plus their own fields
SCHEMAS["memory (mixed cluster)"] = {**SCHEMAS["memory"], "stages": [
    {"class": INT, "stage": INT, "group": STR, "total_bytes": NUM, "capacity_bytes": NUM,
     "categories_bytes": {k: NUM for k in MEM_CATEGORIES}}]}
# what is printed carries its schema version (solver/commands/jsonout.emit_json); bench writes files
for _name, _schema in SCHEMAS.items():
    if not _name.startswith("bench"):
        _schema["schema_version"] = INT


# a type name's test of a JSON value (a bool is no number: JSON tells true from 1)
_TYPES = {ANY: lambda v: True, "null": lambda v: v is None,
          NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
          STR: lambda v: isinstance(v, str), BOOL: lambda v: isinstance(v, bool)}


def _type_ok(value: Any, name: str) -> bool:
    if name not in _TYPES:
        raise ValueError(f"unknown schema type {name!r}")
    return _TYPES[name](value)


def _check(value: Any, spec: Any, path: str) -> list[str]:
    if isinstance(spec, tuple):  # alternatives
        for alt in spec:
            if not _check(value, alt, path):
                return []
        return [f"{path}: {json.dumps(value)[:60]} matches none of {spec!r}"]
    if spec is dict:
        return [] if isinstance(value, dict) else [f"{path}: expected an object"]
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [e for k, v in value.items() for e in _check(v, spec.value, f"{path}.{k}")]
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {type(value).__name__}"]
        errs = [f"{path}.{k}: missing" for k in spec if k not in value]
        return errs + [e for k, s in spec.items() if k in value for e in _check(value[k], s, f"{path}.{k}")]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        return [e for i, v in enumerate(value) for e in _check(v, spec[0], f"{path}[{i}]")]
    return [] if _type_ok(value, spec) else [f"{path}: expected {spec}, got {json.dumps(value)[:60]}"]


def validate(obj: Any, command: str) -> list[str]:
    """Violations of SCHEMAS[command] by `obj` (empty: it conforms); also: no NaN or infinity,
    and every `*_s` field is a number or null."""
    errs = _check(obj, SCHEMAS[command], command)

    def walk(v, path):
        if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
            errs.append(f"{path}: {v} is not valid JSON")
        if isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and k.endswith("_s") and not (x is None or _type_ok(x, NUM)
                                                                    or isinstance(x, (dict, list))):
                    errs.append(f"{path}.{k}: a time must be a number of seconds, got {json.dumps(x)}")
                walk(x, f"{path}.{k}")
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{path}[{i}]")
    walk(obj, command)
    return errs


def _describe(spec: Any, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(spec, dict):
        return "\n".join(f"{pad}{k}: " + (("\n" + _describe(v, indent + 1)) if isinstance(v, (dict, list))
                                          and v and not isinstance(v, MapOf) else _describe(v))
                         for k, v in spec.items())
    if isinstance(spec, list):
        return f"{pad}- list of:\n" + _describe(spec[0], indent + 1)
    if isinstance(spec, MapOf):
        return f"object of {_describe(spec.value)}"
    if isinstance(spec, tuple):
        return " | ".join("object" if a is dict else (_describe(a).strip().replace("\n", "; ")
                                                       if isinstance(a, dict) else str(a)) for a in spec)
    return "object" if spec is dict else str(spec)


if __name__ == "__main__":
    for name, spec in SCHEMAS.items():
        print(f"## {name}\n{_describe(spec)}\n")
