"""The one instance reader: an instance file in either form, or one assembled from part files.

Every number is converted to internal units (cost/units.py) here, once; every problem raises
`InstanceError(path, field, problem, fix)` naming the file and the dotted field.

The keys, their units, ranges and defaults: docs/schema.md, generated from the records' field
docstrings and cost/schema_keys.py (python -m paraplan.cost.docs.schema); worked examples:
instances/.

Values of `search:` that the instance's shape or framework can never run are refused
(cost/readers/search.py).

Split files (`load_instance_parts`): a cluster file holds the `cluster:` section and optionally
`gpu_types:`; a job file holds `job:` and optionally `search:`; the model may come from a
Hugging Face config.json instead of `model:` (cost/hf_config.py). Each replaces the matching
section of an instance file, or, with no instance file, the three together make one. Examples:
instances/clusters/ and instances/jobs/.

Node groups, network events and plans of replica classes: the general form of the flat files
above, which are its one-group, one-class case. The same rules hold. `load_instance` and
`instance_from_mapping` read an instance in either form (is_groups_mapping: the file's
`cluster:` lists `groups:` or `links:`, or it declares scenarios, a timeline or switching
costs); `load_plan` and `plan_from_mapping` a plan in either form (a plan listing `classes:`,
else the flat one); `plan_to_mapping` writes the flat form where the instance is flat and the
plan its one class on every GPU, else the classes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from paraplan.cost.errors import InstanceError
from paraplan.cost.ranges import out_of_range, range_text
from paraplan.cost.specs import (Cluster, Instance, JobSpec, ModelSpec, NodeGroup, PipelineSchedule,
                                 SearchSpace)
from paraplan.cost.specs import Scenario, Switching
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.fields import Section, describe
from paraplan.cost.readers.gpus import catalogue_with_gpu_types
from paraplan.cost.readers.model import MODEL_KEYS, model_from_section
from paraplan.cost.readers.job import JOB_KEYS, job_from_section
from paraplan.cost.readers.checks import check_megatron_only, check_whole
from paraplan.cost.readers.search import SEARCH_KEYS, release_search_of, search_from_section
from paraplan.cost.readers.cluster import (CLUSTER_KEYS, GROUPS_CLUSTER_KEYS, group_from_section,
                                           is_groups_mapping, network_from_section)
from paraplan.cost.readers.scenarios import (NOMINAL, SWITCHING_KEYS, read_scenarios,
                                             read_switching, read_timeline)


_CLUSTER_FILE_KEYS = ("cluster", "gpu_types")
_JOB_FILE_KEYS = ("job", "search")


def load_instance(path: str | Path) -> Instance:
    """The instance file at `path`, read once, in either form: a flat `cluster:` as its one
    node group (cost/specs.Cluster.of), a `cluster:` with `groups:` as the groups it lists; or
    the instance a plan file at `path` carries (carries_instance)."""
    return load_instance_parts(path, hf_config=None, cluster=None, job=None)


# `paraplan plan -o` writes the instance beside the plan (cost/readers/plan_writer.py,
# solver/outputs.plan_file), so that a plan file reads back alone: export reads it, and the
# INSTANCE argument of simulate, memory and compare may name the plan file itself.
PLAN_FILE_INSTANCE_KEY = "instance"


def carries_instance(data: Any) -> bool:
    """Whether `data` (a file as read) is a plan file carrying its instance: `plan:` and
    `instance:`, nothing else."""
    return isinstance(data, dict) and set(data) == {"plan", PLAN_FILE_INSTANCE_KEY}


def _no_groups(data: Any, path: str) -> Any:
    """Node groups beside part files (or in a cluster part file) would fail on their first
    unknown key; say what they are and where they can go instead."""
    if is_groups_mapping(data):
        raise InstanceError(path, "cluster.groups",
                            "node groups (several GPU types or sites) are not supported beside part files",
                            "pass the instance file of node groups alone (no --cluster/--job/"
                            "--hf-config parts); a cluster part file takes one GPU type")
    return data


def _check_part_arguments(instance, hf_config, cluster, job, seq_len) -> None:
    """load_instance_parts' arguments: without an instance file every part is given; a
    sequence length is an integer in its range."""
    if instance is None:
        absent = [key for key, value in (("hf_config", hf_config), ("cluster", cluster),
                                         ("job", job)) if value is None]
        if absent:
            raise InstanceError("<arguments>", ", ".join(absent),
                                "no instance file, and the parts are incomplete",
                                "give an instance YAML, or all of a Hugging Face config, a"
                                " cluster file and a job file")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int)
                                or out_of_range("seq_len", seq_len) is not None):
        raise InstanceError("<arguments>", "seq_len",
                            f"expected an integer, got {describe(seq_len)} ({range_text('seq_len')})",
                            "give the training sequence length in tokens")


def load_instance_parts(instance: str | Path | None, *, hf_config: str | Path | None,
                        cluster: str | Path | None, job: str | Path | None,
                        seq_len: int | None = None) -> Instance:
    """An instance assembled from an instance file and/or separate part files.

    - `instance`: an instance YAML (docs/schema.md). Its `model:`, `cluster:` and `job:`
      sections may be left out when the matching part below is given.
    - `hf_config`: a Hugging Face config.json (or its directory): replaces `model:`
      (cost/hf_config.py).
    - `cluster`: a cluster YAML with `cluster:` and optionally `gpu_types:`; it is
      self-contained, so its GPU is looked up in the catalogue plus its own `gpu_types:` only.
    - `job`: a job YAML with `job:` and optionally `search:`; a `search:` there replaces the
      instance file's, otherwise the instance file's (or the default space) is kept.
    - `seq_len`: replaces the model's sequence length, wherever the model comes from.

    An instance file of node groups (`cluster:` with `groups:`) is read alone, as the groups it
    lists; beside part files it is refused, naming what to do instead. A plan file carrying its
    instance (`plan -o`'s) given as `instance` alone reads as that instance.

    Without `instance`, all three parts are required and the instance is named
    `<model>-<GPUs>x<GPU type>`. Every file is checked in full, sections that a part replaces
    included, and every error names the file it comes from.
    """
    _check_part_arguments(instance, hf_config, cluster, job, seq_len)
    data = None if instance is None else read_yaml(instance)
    if carries_instance(data) and hf_config is cluster is job is seq_len is None:
        return instance_from_mapping(data[PLAN_FILE_INSTANCE_KEY], instance, PLAN_FILE_INSTANCE_KEY)
    parts = _Parts([] if instance is None else [str(instance)], seq_len)
    if hf_config is not None:
        parts.sources.append(str(hf_config))
        # imported here: the Hugging Face config reader (cost/hf_config.py) serves
        # --hf-config only, not a plan of an instance YAML (issue 33, start-up)
        from paraplan.cost.hf_config import model_from_hf_config
        parts.model = model_from_hf_config(hf_config, seq_len)
    if cluster is not None:
        path = str(cluster)
        parts.sources.append(path)
        top = Section(_no_groups(read_yaml(path), path), path, "", _CLUSTER_FILE_KEYS)
        parts.group = group_from_section(top.section("cluster", CLUSTER_KEYS),
                                         catalogue_with_gpu_types(top))
    if job is not None:
        path = str(job)
        parts.sources.append(path)
        top = Section(read_yaml(path), path, "", _JOB_FILE_KEYS)
        parts.job = job_from_section(top.section("job", JOB_KEYS))
        if top.has("search"):
            parts.search = top.section("search", SEARCH_KEYS)
    if data is None:  # the parts alone: an instance file naming only the instance
        data = {"name": f"{parts.model.name}-{parts.group.num_gpus}x{parts.group.gpu.name}"}
    return _read(data, "<arguments>" if instance is None else str(instance), "", parts)


@dataclass
class _Parts:
    """The files read, in order (the instance's source); what part files give in place of an
    instance file's sections (None: nothing), and the `seq_len` argument."""
    sources: list[str]
    seq_len: int | None = None
    model: ModelSpec | None = None
    group: NodeGroup | None = None
    job: JobSpec | None = None
    search: Section | None = None

    def given(self) -> bool:
        return any(x is not None for x in (self.model, self.group, self.job, self.seq_len))


def instance_from_mapping(data: Any, path: str | Path = "<memory>", prefix: str = "") -> Instance:
    """The instance `data` describes (an instance file as read, `prefix` ""; or the instance a
    plan file carries under `instance:`), in either form: a flat `cluster:` as its one node
    group, a `cluster:` with `groups:` as the groups it lists, with its scenarios, timeline and
    switching costs. Checked like an instance file; errors name `path` and the field under
    `prefix`."""
    return _read(data, str(path), prefix, _Parts([str(path)]))


def _read(data: Any, path: str, prefix: str, parts: _Parts) -> Instance:
    """The one instance reader: `data` (read from `path`, its fields under `prefix`) in either
    form, each section that `parts` gives taken from there instead (the file's own still
    checked in full); then what every instance is checked for as a whole (checks.check_whole)."""
    if parts.given():
        _no_groups(data, path)
    groups = is_groups_mapping(data)
    top = Section(data, path, prefix, _GROUP_TOP_KEYS if groups else _TOP_KEYS)
    source = " + ".join(parts.sources)
    name = top.string("name")
    gpus = catalogue_with_gpu_types(top)
    search_sec = top.section("search", SEARCH_KEYS) if top.has("search") else None
    if search_sec is not None:
        search_from_section(search_sec)  # check its own values now, in file order
    model = _own_or_part(top, "model", parts.model,
                         lambda: model_from_section(top.section("model", MODEL_KEYS), name))
    if parts.model is None and parts.seq_len is not None:
        model = replace(model, seq_len=parts.seq_len)
    cluster = _own_or_part(top, "cluster", parts.group, lambda: (
        network_from_section(top.section("cluster", GROUPS_CLUSTER_KEYS), gpus) if groups
        else group_from_section(top.section("cluster", CLUSTER_KEYS), gpus)))
    job = _own_or_part(top, "job", parts.job, lambda: job_from_section(top.section("job", JOB_KEYS)))
    if groups and job.pipeline_schedule is not PipelineSchedule.ONE_F_ONE_B:
        raise InstanceError(path, "job.pipeline_schedule", "DualPipe is planned and priced for"
                            " one GPU type only (cost/dualpipe.py: a device holds two stages, which"
                            " on a mixed cluster could sit on different GPU types)",
                            "remove pipeline_schedule, or plan a homogeneous cluster")
    search_sec = parts.search or search_sec
    check_megatron_only(source, job, model)  # before the search meets framework rules
    search = (SearchSpace() if search_sec is None
              else search_from_section(search_sec, job.framework))
    search = release_search_of(source, search, job,
                               frozenset(search_sec.raw) if search_sec is not None else frozenset())
    nominal = cluster.cluster() if groups else Cluster.of(cluster)
    inst = check_whole(Instance(name=name, model=model, cluster=nominal, job=job, search=search,
                                source=source), search_sec, source)
    scenarios = read_scenarios(top, cluster, nominal) if top.has("scenarios") else ()
    timeline = read_timeline(top, scenarios or [Scenario(name=NOMINAL, cluster=nominal)]) \
        if top.has("timeline") else ()
    switching = read_switching(top.section("switching", SWITCHING_KEYS)) \
        if top.has("switching") else Switching()
    return replace(inst, scenarios=tuple(scenarios), timeline=timeline, switching=switching)


def _own_or_part(top: Section, key: str, part, read):
    """Section `key` of `top` as `read()` reads it, or `part` where a part file gives it (the
    file's own section, if it has one, still read and so checked)."""
    own = read() if top.has(key) or part is None else None
    return own if part is None else part


_TOP_KEYS = ("name", "model", "cluster", "job", "gpu_types", "search")
_GROUP_TOP_KEYS = (*_TOP_KEYS, "scenarios", "timeline", "switching")
