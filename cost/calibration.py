"""Predict published training runs (schema: shared/calibration/README.md) and score the model.

Each row becomes an Instance + Plan and is simulated like any user plan; nothing here is fitted
per row, and nothing a row ran is chosen by its source. What a run ran beyond the schema
(framework, attention kernel, dropout, optimizer, overlap flags) is a fact the row states: in
its own optional `ran:` mapping, or for the bundled rows in cost/published/ran.yaml, which lists
every row by id with the evidence. A fact a row does not state takes RAN_DEFAULTS (below) and is
recorded as unknown (Ran.unknown), so the trust interval can treat it as uncertain. The
documented defaults of the schema's own fields:

    micro_batch null         -> 1 (Megatron-LM's default --micro-batch-size), unless ran.yaml
                                states the run's (its `configs`, from the run's launch scripts;
                                likewise virtual_stages)
    recompute unknown        -> priced both as the least recomputation under which the run
                                fits memory (none, then selective, then full: every published
                                run fitted) and as full recomputation, and predicted at the
                                geometric mean of the two (predict_rows, unknown_variants)
    recompute stated         -> as stated (ran.yaml's `recompute` only where the row's field
                                transcribes something else, with the evidence)
    virtual_stages null      -> 1 (no interleaving)
    sequence_parallel null   -> false (and true with tp 1 -> false, as Megatron-LM's
                                validate_args sets it)
    zero null                -> 0
    inter_node_Gbps null     -> the NIC of the vendor's reference node for that GPU
                                (DEFAULT_NIC_GBIT_PER_S below)
    latencies                -> 5 us inside a node, 10 us between nodes (NCCL-typical)

A row's *source family* (SOURCE_FAMILIES, by the start of its `source`) only groups rows: the
fit weighs each family equally and the cross-validation leaves one family out at a time.

A row that cannot be modelled (e.g. global batch not divisible into micro-batches) is
reported with its reason, never dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from paraplan.cost import units
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.framework_rules import (may_run_unfused_attention, release_has, release_space,
                                           unpriced_reason)
from paraplan.cost.readers.fields import Section
from paraplan.cost.readers.model import check_head_shape
from paraplan.cost.readers.plan_reader import SPLIT_KEYS, default_layer_split, stated_megatron_split
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.releases import find_release, known_versions
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import (APEX_OPTIMIZERS, Attention, NodeGroup, Framework, GpuSpec, GradReduceDtype, Instance, Cluster,
                        JobSpec, Link, Mlp, ModelSpec, Optimizer, Precision, Recompute,
                        grad_reduce_refusal)
from paraplan.cost.plan_specs import Plan

# Per-GPU NIC of the reference systems: DGX-1 V100 (4x100 Gb/s IB for 8 GPUs, taken as 100 per
# GPU as Megatron's V100 cluster had), DGX A100 (8x 200 Gb/s HDR ConnectX-6), DGX H100/H200
# (8x 400 Gb/s NDR ConnectX-7). Source: NVIDIA DGX-1 / DGX A100 / DGX H100 datasheets.
DEFAULT_NIC_GBIT_PER_S = {
    "V100-SXM-32GB": 100, "A100-SXM4-40GB": 200, "A100-SXM4-80GB": 200,
    "H100-SXM5-80GB": 400, "H100-SXM5-96GB": 400, "H200-SXM-141GB": 400,
}


@dataclass(frozen=True, slots=True)
class SourceFamily:
    """A group of rows from one publication (or one table of it): the unit the fit weighs
    equally and the cross-validation leaves out. It decides nothing about what a row ran."""

    name: str
    prefix: str  # the row's `source` starts with this
    zero3: bool = False  # only the rows with ZeRO-3 (Narayanan et al.'s DeepSpeed baseline)


SOURCE_FAMILIES = (
    SourceFamily("narayanan21-zero3", "Narayanan et al., SC'21", zero3=True),
    SourceFamily("narayanan21", "Narayanan et al., SC'21"),
    SourceFamily("korthikanti22", "Korthikanti et al. 2022"),
    SourceFamily("nemo-launcher", "NVIDIA/NeMo-Megatron-Launcher"),
    SourceFamily("nemo", "NVIDIA/NeMo"),
    SourceFamily("mosaicml", "mosaicml/llm-foundry"),
    SourceFamily("torchtitan", "pytorch/torchtitan"),
    SourceFamily("megatron-v1", "nv-adlr/nv-adlr.github.io"),
)
OTHER_FAMILY = SourceFamily("other", "")


def source_family(row: dict) -> SourceFamily:
    """The family of a calibration row, from its source (and ZeRO-3 for Narayanan's Table 2)."""
    source = row.get("source", "")
    for fam in SOURCE_FAMILIES:
        if source.startswith(fam.prefix) and (not fam.zero3 or (row["config"].get("zero") or 0) == 3):
            return fam
    return OTHER_FAMILY


@dataclass(frozen=True, slots=True)
class Ran:
    """What a published run ran beyond the schema's fields (module docstring)."""

    framework: Framework
    attention: Attention
    dropout: float
    optimizer: Optimizer
    tp_comm_overlap: bool
    cudnn_attention: bool  # Transformer Engine's attention kernel (JobSpec.cudnn_attention)
    recompute_early_stop: bool | None  # None: the framework's default
    grad_reduce_dtype: GradReduceDtype | None  # None: the framework's default (JobSpec.grad_reduce)
    recompute: str | None  # None: the row's config.recompute holds
    # the framework release the run used (cost/releases.py), None where the row names none
    framework_version: str | None
    # its year: the stated release's, else the year the row states its release came out in
    # (the version unknown), else None: the current release (framework_rules.release_space)
    release_year: int | None
    # its month, where the stated release or the row dates it (release_month); None: unknown,
    # counted as the year's last (framework_rules.release_has)
    release_month: int | None
    unknown: tuple[str, ...]  # the facts the row does not state (RAN_DEFAULTS filled them)


# What a run that states nothing is priced with: a current Megatron-style stack (fused attention,
# no dropout, Adam, no tensor-parallel overlap). Each such fact is listed in Ran.unknown.
RAN_DEFAULTS = dict(framework=Framework.MEGATRON, attention=Attention.FLASH, dropout=0.0,
                    optimizer=Optimizer.ADAM, tp_comm_overlap=False, cudnn_attention=True,
                    recompute_early_stop=None,
                    grad_reduce_dtype=None)
_RAN_TYPES = dict(framework=Framework, attention=Attention, optimizer=Optimizer,
                  grad_reduce_dtype=GradReduceDtype)
RAN_KEYS = tuple(RAN_DEFAULTS) + ("recompute", "framework_version", "release_year", "release_month")
RAN_FILE = Path(__file__).resolve().parent / "published" / "ran.yaml"


@lru_cache(maxsize=1)
def _ran_entries() -> list[dict]:
    """cost/published/ran.yaml's entries, read once per process for both readers below (each
    parsed it on every `paraplan plan` before) and parsed once per installation
    (read_cache.bundled_yaml). Shared: the readers copy what they keep."""
    from paraplan.cost.read_cache import bundled_yaml
    return bundled_yaml(RAN_FILE)


@lru_cache(maxsize=1)
def _bundled_ran() -> dict[str, dict]:
    """Row id -> the facts cost/published/ran.yaml states for it."""
    out: dict[str, dict] = {}
    for entry in _ran_entries():
        facts = {k: v for k, v in entry.items() if k in RAN_KEYS}
        for row_id in entry["rows"]:
            out[row_id] = facts
    return out


# config fields a bundled row leaves null that cost/published/ran.yaml states for it by id (an
# entry's `configs:`), read from the run's own launch scripts; the row's own value, where it
# gives one, is the row's (stating it in ran.yaml too is refused)
RAN_CONFIG_KEYS = ("micro_batch", "virtual_stages")


@lru_cache(maxsize=1)
def _bundled_configs() -> dict[str, dict[str, int]]:
    """Row id -> the config fields cost/published/ran.yaml states for it (RAN_CONFIG_KEYS)."""
    out: dict[str, dict[str, int]] = {}
    for entry in _ran_entries():
        for row_id, fields in (entry.get("configs") or {}).items():
            bad = [k for k in fields if k not in RAN_CONFIG_KEYS]
            if bad or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in fields.values()):
                raise ConfigError(f"{RAN_FILE}: configs.{row_id}: {fields}: give only"
                                  f" {', '.join(RAN_CONFIG_KEYS)}, each a positive integer")
            out[row_id] = dict(fields)
    return out


def row_config(row: dict) -> dict:
    """`row`'s config with the fields it leaves null filled from ran.yaml's `configs` for its id
    (RAN_CONFIG_KEYS: what the run's launch scripts set); ConfigError where both state one."""
    stated = _bundled_configs().get(row.get("id"), {})
    cf = row["config"]
    both = [k for k in stated if cf.get(k) is not None]
    if both:
        raise ConfigError(f"row {row['id']}: config.{both[0]} is stated by the row and by {RAN_FILE}:"
                          " remove it from ran.yaml's configs (the row's own value holds)")
    return {**cf, **stated} if stated else cf


def row_ran(row: dict) -> Ran:
    """What `row` ran: its own `ran:` mapping, else ran.yaml's entry for its id, else defaults."""
    stated = dict(_bundled_ran().get(row.get("id"), {}))
    stated.update(row.get("ran") or {})
    values = {}
    for key, default in RAN_DEFAULTS.items():
        value = stated.get(key, default)
        values[key] = _RAN_TYPES[key](value) if key in _RAN_TYPES and value is not None else value
    unknown = tuple(k for k in RAN_DEFAULTS if k not in stated)
    version = stated.get("framework_version")
    release = find_release(values["framework"], version) if version is not None else None
    if version is not None and release is None:  # a row's own ran: is checked by load_rows
        raise ConfigError(f"framework_version {version!r} is not a known {values['framework'].value}"
                          " release (cost/releases.py)")
    year = release.year if release is not None else stated.get("release_year")
    month = release.month if release is not None else stated.get("release_month")
    return Ran(**values, recompute=stated.get("recompute"), framework_version=version,
               release_year=year, release_month=month, unknown=unknown + (() if version is not None else ("framework_version",)))


# The published rows, shipped with the package (cost/published/README.md names the sources):
# verbatim copies of shared/calibration/published.yaml and published-fp8.yaml.
PUBLISHED_DIR = Path(__file__).resolve().parent / "published"
BUNDLED_FILES = (PUBLISHED_DIR / "published.yaml", PUBLISHED_DIR / "published-fp8.yaml")


def load_published() -> list[dict]:
    """The rows of both bundled files (each checked by load_rows): read once per process (a
    plan's trust lines read them twice otherwise, 0.6 s each) and parsed once per installation
    (_checked_rows), and their rows are shared, so callers copy a row before changing it."""
    return list(_bundled_rows())


@lru_cache(maxsize=1)
def _bundled_rows() -> tuple[dict, ...]:
    return tuple(r for p in BUNDLED_FILES for r in _checked_rows(p))


def _checked_rows(path: Path) -> list[dict]:
    """load_rows(path) of a bundled file, parsed once per installation (cost/read_cache.py:
    cached under a digest of the file and of this module and the readers it uses, cost/readers/
    strict_yaml.py, fields.py and model.py, which read and check it)."""
    import sys

    from paraplan.cost.readers import fields, model as model_reader, strict_yaml
    from paraplan.cost.read_cache import cached
    return cached(path, lambda p: load_rows(str(p)),
                  (sys.modules[__name__], strict_yaml, fields, model_reader))


INTRA_LATENCY_US = 5.0
INTER_LATENCY_US = 10.0


@dataclass(frozen=True)
class RowResult:
    """One published row's measured iteration time beside the model's prediction for it."""
    id: str
    gpu: str
    source: str
    measured_iter_time_s: float
    predicted_iter_time_s: float | None
    reason: str | None = None  # why the row could not be modelled
    fits_memory: bool | None = None
    # whether the modelled plan recomputes whole layers (the row's recompute, resolved as
    # row_to_instance_plan resolves "unknown"): cost/trust.py cuts residuals by it
    full_recompute: bool | None = None
    # the predicted times under every value of the facts the row does not state (unknown_variants),
    # (fastest, slowest); None when the row states all that moves its price
    span_s: tuple[float, float] | None = None

    @property
    def error(self) -> float | None:
        """Signed relative error (predicted - measured) / measured."""
        if self.predicted_iter_time_s is None:
            return None
        return (self.predicted_iter_time_s - self.measured_iter_time_s) / self.measured_iter_time_s


def row_model(row: dict, ran: Ran | None = None) -> ModelSpec:
    """The model a published row trained (`ran`: row_ran(row), where the caller has it)."""
    md = row["model"]
    return ModelSpec(name=row["id"], layers=md["layers"], hidden=md["hidden"], heads=md["heads"],
                     kv_heads=md.get("kv_heads") or md["heads"], ffn=md["ffn"], vocab=md["vocab"],
                     seq_len=md["seq_len"], mlp=Mlp(md["mlp"]), dropout=(ran or row_ran(row)).dropout)


class RowMemo:
    """What pricing a row reads that no catalogue or network efficiency changes (its config,
    what it ran, its model, job, layer split and plans, its unknown variants), kept per row
    object: for a caller that prices the same rows under many catalogues (cost/fit.py's trials:
    reading them anew was a sixth of a refit under a profiler, issue 32). Each step is kept
    where it stands in the reading, so a row that cannot be read still fails at the same step
    with the same message (a step that raises keeps nothing). Holds every row it keeps a value
    of, so no other object takes its id() meanwhile; the rows must not change while it is used
    (load_published's are shared and read only)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, object], tuple[dict, object]] = {}

    def __call__(self, row: dict, what: object, make):
        key = (id(row), what)
        hit = self._kept.get(key)
        if hit is None:
            hit = self._kept[key] = (row, make())
        return hit[1]


def row_to_instance_plan(row: dict, catalogue: dict[str, GpuSpec],
                         memo: RowMemo | None = None) -> tuple[Instance, Plan]:
    memo = memo if memo is not None else RowMemo()
    cl, cf = row["cluster"], memo(row, "config", lambda: row_config(row))
    ran = memo(row, "ran", lambda: row_ran(row))
    model = memo(row, "model", lambda: row_model(row, ran))
    gpu_name = cl["gpu"]
    if gpu_name not in catalogue:
        raise ConfigError(f"GPU type {gpu_name!r} is not in the catalogue")
    # a run on part of one node (1 or 4 GPUs of an 8-GPU server) is a one-node cluster
    gpn = min(cl["gpus_per_node"], cl["num_gpus"])
    if cl["num_gpus"] % gpn:
        raise ConfigError("num_gpus is not a multiple of gpus_per_node")
    nic = cl.get("inter_node_Gbps_per_gpu") or DEFAULT_NIC_GBIT_PER_S.get(gpu_name)
    if nic is None:
        raise ConfigError("inter_node_Gbps_per_gpu is unknown and the GPU has no default NIC")
    group = NodeGroup(
        gpu=catalogue[gpu_name], nodes=cl["num_gpus"] // gpn, gpus_per_node=gpn,
        intra_node=Link(bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(cl["intra_node_GBps_per_gpu"]) / 2,
                        latency_s=units.us_to_s(INTRA_LATENCY_US)),
        inter_node=Link(bw_bytes_per_s=units.gbit_per_s_to_bytes_per_s(nic),
                        latency_s=units.us_to_s(INTER_LATENCY_US)))
    job = memo(row, "job", lambda: JobSpec(
        global_batch=cf["global_batch"], precision=Precision(row.get("precision", "bf16")),
        optimizer=ran.optimizer, attention=ran.attention, framework=ran.framework,
        tp_comm_overlap=ran.tp_comm_overlap, cudnn_attention=ran.cudnn_attention,
        recompute_early_stop=ran.recompute_early_stop, grad_reduce_dtype=ran.grad_reduce_dtype,
        grad_reduce_overlap=_grad_reduce_overlap(ran)))
    # the space of the run's own release: what re-planning its workload may choose
    inst = Instance(name=row["id"], model=model, cluster=Cluster.of(group), job=job, source="calibration",
                    search=release_space(ran.framework, ran.release_year, ran.release_month))

    mb = cf.get("micro_batch") or 1
    dp = cf["dp"]
    if cf["global_batch"] % (dp * mb):
        raise ConfigError(f"global_batch {cf['global_batch']} is not a multiple of dp*micro_batch = {dp * mb}")
    rc = ran.recompute or cf.get("recompute") or "unknown"
    rc = "fit" if rc == "unknown" else rc
    pp, v = cf["pp"], cf.get("virtual_stages") or 1
    split, embedding, loss = memo(row, "split", lambda: row_layer_split(Section(cf, row["id"], "config", None),
                                                                       model.layers, pp, v))

    def plan_with(mode: str) -> Plan:
        return memo(row, ("plan", mode), lambda: Plan.flat(
            tp=cf["tp"], pp=pp, dp=dp, cp=cf.get("cp") or 1, micro_batch=mb,
            num_micro_batches=cf["global_batch"] // (dp * mb),
            # Megatron-LM's validate_args turns sequence parallelism off at tp 1
            sequence_parallel=bool(cf.get("sequence_parallel")) and cf["tp"] > 1,
            recompute=Recompute.SELECTIVE if mode == "selective" else Recompute.NONE,
            zero=cf.get("zero") or 0, virtual_stages=v, layers_per_stage=split,
            full_recompute_layers=split if mode == "full" else (0,) * pp,
            embedding_in_split=embedding, loss_in_split=loss))
    if rc != "fit":
        return inst, plan_with(rc)
    for mode in ("none", "selective", "full"):
        if simulate(inst, plan_with(mode), reserve_bytes=0.0).fits:  # the row ran: whole HBM
            return inst, plan_with(mode)
    return inst, plan_with("full")


def _grad_reduce_overlap(ran: Ran) -> bool | None:
    """job.grad_reduce_overlap of a run of Megatron-LM's own optimizer whose release is dated
    (framework_version or release_year): whether that release overlapped its gradient reduction
    (framework_rules.MEGATRON_FEATURE_MONTHS); None otherwise (the current release's)."""
    if (ran.framework is not Framework.MEGATRON or ran.optimizer in APEX_OPTIMIZERS
            or ran.release_year is None):
        return None
    return release_has("overlap_grad_reduce", ran.release_year, ran.release_month)


def unknown_variants(row: dict) -> list[dict]:
    """The row as it reads (first), then under each other value of the facts it does not state
    that move its price: an unstated attention kernel may have been unfused (scores stored) where
    the row's release predates fused attention in its framework (a row that states no release is
    the current one, fused: cost/framework_rules.may_run_unfused_attention); an unknown
    recompute may have been full recomputation rather than the least that fits."""
    ran = row_ran(row)
    unfused = "attention" in ran.unknown and may_run_unfused_attention(ran.framework, ran.release_year)
    kernels = [None, "standard"] if unfused else [None]
    unknown_recompute = (row["config"].get("recompute") or "unknown") == "unknown" and ran.recompute is None
    recomputes = [None, "full"] if unknown_recompute else [None]
    out = []
    for kernel in kernels:
        for recompute in recomputes:
            variant = row
            if kernel:
                variant = {**variant, "ran": {**(row.get("ran") or {}), "attention": kernel}}
            if recompute:
                variant = {**variant, "config": {**row["config"], "recompute": recompute}}
            out.append(variant)
    return out


def predict_rows(rows: list[dict], catalogue: dict[str, GpuSpec] | None = None,
                 net: NetEfficiency | None = None, memo: RowMemo | None = None) -> list[RowResult]:
    """Each row's predicted iteration time. A row that leaves facts unstated
    (unknown_variants) is priced under each of their values that fits memory (the run did fit),
    and predicted at the geometric mean of the fastest and slowest: the point whose largest
    log error over those possibilities is smallest, the possibilities themselves kept as
    RowResult.span_s for the interval. `memo`: what the rows' pricing reads that `catalogue` and
    `net` do not change, where the caller prices them again (RowMemo)."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    net = net if net is not None else NetEfficiency()
    memo = memo if memo is not None else RowMemo()
    out = []
    for row in rows:
        measured = float(row["measured"]["iter_time_s"])
        base = dict(id=row["id"], gpu=row["cluster"]["gpu"], source=row.get("source", ""),
                    measured_iter_time_s=measured)
        try:
            inst, plan = row_to_instance_plan(row, catalogue, memo)
            unpriced = unpriced_reason(inst.job.framework, plan.zero, plan.pp)
            if unpriced:
                raise ConfigError(unpriced)
            bd = simulate(inst, plan, net, reserve_bytes=0.0)  # the row ran: against the whole HBM
        except (ConfigError, KeyError, ValueError) as e:
            out.append(RowResult(**base, predicted_iter_time_s=None, reason=str(e)))
            continue
        predicted, span = bd.iter_time_s, None
        variants = memo(row, "variants", lambda: unknown_variants(row))
        if len(variants) > 1:
            times = [bd.iter_time_s] if bd.fits else []
            times += [t for t in (_variant_time(v, catalogue, net, memo) for v in variants[1:]) if t is not None]
            if times:
                span = (min(times), max(times))
                predicted = math.sqrt(span[0] * span[1])
        out.append(RowResult(**base, predicted_iter_time_s=predicted, fits_memory=bd.fits,
                             full_recompute=any(plan.full_recompute_layers), span_s=span))
    return out


def _variant_time(row: dict, catalogue, net, memo: RowMemo) -> float | None:
    """The predicted time of a variant of a row, None where it cannot run (or not fit)."""
    try:
        inst, plan = row_to_instance_plan(row, catalogue, memo)
        bd = simulate(inst, plan, net, reserve_bytes=0.0)
    except (ConfigError, KeyError, ValueError):
        return None
    return bd.iter_time_s if bd.fits else None


def mape(results: list[RowResult]) -> float:
    errs = [abs(r.error) for r in results if r.error is not None]
    return sum(errs) / len(errs) if errs else float("nan")


def load_rows(path: str, keep_going: bool = False):
    """The rows of a calibration file, each checked against the schema of
    shared/calibration/README.md, so that predict_rows meets only rows it can model or explain.

    Every problem raises one InstanceError naming the row's field, e.g. `[3].config.pp`; the
    file's limits are cost/readers/strict_yaml.py's for calibration files (64 MiB, 200,000 nodes). Fields
    the schema does not list are kept and ignored, and null means "not published" where the
    schema allows it. With `keep_going`, returns (good rows, [(row id, InstanceError)]) instead:
    a row that breaks the schema is set aside, the file still read (the file's own problems
    still raise).
    """
    rows = read_yaml(path, calibration=True)
    if not isinstance(rows, list) or not rows:
        raise InstanceError(path, "<top level>", "expected a non-empty list of rows",
                            "write one '- id: ...' entry per published run")
    good, bad = [], []
    for i, row in enumerate(rows):
        try:
            _check_row(Section(row, path, f"[{i}]", None))
        except InstanceError as e:
            if not keep_going:
                raise
            row_id = row.get("id") if isinstance(row, dict) and isinstance(row.get("id"), str) else f"[{i}]"
            bad.append((row_id, e))
            continue
        good.append(row)
    return (good, bad) if keep_going else good


def _check_row(row: Section) -> None:
    row.string("id")
    if row.has("source"):
        row.string("source")
    row.choice("precision", tuple(p.value for p in Precision), Precision.BF16.value)

    model = row.section("model", None)
    layers = model.integer("layers")  # ranges as in an instance (cost/ranges.py)
    for key in ("ffn", "vocab", "seq_len"):
        model.integer(key)
    heads = model.integer("heads")
    kv_heads = model.integer("kv_heads") if model.has_value("kv_heads") else heads
    check_head_shape(model, model.integer("hidden"), heads, kv_heads)  # as the instance loader
    model.choice("mlp", tuple(m.value for m in Mlp))

    cluster = row.section("cluster", None)
    cluster.string("gpu")
    cluster.integer("num_gpus")
    cluster.integer("gpus_per_node")
    cluster.number("intra_node_GBps_per_gpu")
    if cluster.has_value("inter_node_Gbps_per_gpu"):
        cluster.number("inter_node_Gbps_per_gpu")

    config = row.section("config", None)
    for key in ("tp", "dp", "global_batch"):
        config.integer(key)
    pp = config.integer("pp")
    for key in ("cp", "micro_batch"):
        if config.has_value(key):
            config.integer(key)
    virtual_stages = config.integer("virtual_stages") if config.has_value("virtual_stages") else 1
    row_layer_split(config, layers, pp, virtual_stages)
    if config.has_value("recompute"):
        config.choice("recompute", ("none", "selective", "full", "unknown"))
    if config.has_value("sequence_parallel"):
        config.boolean("sequence_parallel", False)
    if config.has_value("zero"):
        config.integer("zero")

    row.section("measured", None).number("iter_time_s")
    if row.has("ran"):
        _check_ran(row.section("ran", RAN_KEYS), Precision(row.raw.get("precision", "bf16")))


def row_layer_split(config: Section, layers: int, pp: int, v: int) -> tuple[tuple[int, ...], bool, bool]:
    """(layers per stage, embedding_in_split, loss_in_split) of a row's `config` section: as
    its split keys state it (plan_reader.SPLIT_KEYS), else the default split; InstanceError
    naming the field where the split cannot be built."""
    # a key stated null or false says what its absence says
    stated = [k for k in SPLIT_KEYS if config.has_value(k) and config.raw[k] is not False]
    if not stated:
        if layers % v:
            raise config.error("virtual_stages", f"{v} chunks per stage do not divide the {layers}"
                               " layers", "give the interleaving the run used, and where the run"
                               " counted the embedding or loss as a layer, say so"
                               " (embedding_in_split / loss_in_split: true) or give its"
                               " first_stage_layers / last_stage_layers")
        if layers // v < pp:
            raise config.error("pp", f"{pp} x {v} chunks: more pipeline stages than the {layers}"
                               " layers", "give the pipeline degree the run used")
        return default_layer_split(layers, pp, v), False, False
    return stated_megatron_split(config, stated, layers, pp, v, f"({layers} layers, pp {pp}, virtual_stages {v})",
                                 "give the split the run used, as Megatron-core takes it")


def _check_ran(ran: Section, precision: Precision) -> None:
    """A row's optional `ran:` mapping (module docstring): each fact one of its known values,
    and a stated grad_reduce_dtype one the row's framework, optimizer and precision run."""
    for key, kind in _RAN_TYPES.items():
        if ran.has(key):
            ran.choice(key, tuple(v.value for v in kind))
    if ran.has_value("grad_reduce_dtype"):
        refusal = grad_reduce_refusal(Framework(ran.raw.get("framework", RAN_DEFAULTS["framework"].value)),
                                      Optimizer(ran.raw.get("optimizer", RAN_DEFAULTS["optimizer"].value)),
                                      precision, GradReduceDtype(ran.raw["grad_reduce_dtype"]),
                                      ran.raw.get("framework_version"))
        if refusal is not None:
            raise ran.error("grad_reduce_dtype", *refusal)
    if ran.has("dropout"):
        ran.number("dropout")
    for key in ("tp_comm_overlap", "cudnn_attention", "recompute_early_stop"):
        if ran.has(key):
            ran.boolean(key, False)
    framework = Framework(ran.raw.get("framework", RAN_DEFAULTS["framework"].value))
    if ran.has("framework_version"):
        known = known_versions(framework)
        if ran.raw["framework_version"] not in known:
            raise ran.error("framework_version", f"{ran.raw['framework_version']!r} is not a"
                            f" {framework.value} release paraplan knows", "use one of: " + ", ".join(known)
                            + " (cost/releases.py), or leave it out: the release is then unknown")
        for key in ("release_year", "release_month"):
            if ran.has(key):
                raise ran.error(key, "the stated framework_version dates the release",
                                f"remove {key} (it is for a release whose version is unknown)")
    if ran.has("release_year"):
        ran.integer("release_year")
    if ran.has("release_month"):
        if not ran.has("release_year"):
            raise ran.error("release_month", "a month without its year dates nothing",
                            "give release_year too, or remove release_month")
        ran.integer("release_month")
    if ran.has("recompute"):
        ran.choice("recompute", ("none", "selective", "full"))
