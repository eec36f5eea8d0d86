"""The mixture-of-experts anchors (cost/published/moe.yaml) priced as they ran: each row with a
`paraplan_plan` is `simulate` of that plan on its `paraplan_instance` (a bundled instance) with
the row's `paraplan_options` merged into the instance's sections, and the iteration time turned
into the published metric, model TFLOP/s per GPU as Megatron-LM logs it
(cost/flops.megatron_flops_per_token). Reported beside the published figure, never fitted:
`paraplan accuracy --moe` prints them, tests/validation/test_moe_anchor.py pins each row's
recorded `paraplan_prediction` to what this module computes now.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from paraplan.cost.calibration import PUBLISHED_DIR
from paraplan.cost.class_coefficients import class_placement
from paraplan.cost.coefficients import Placement
from paraplan.cost.plan_specs import Plan
from paraplan.cost.readers.instance import instance_from_mapping
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Cluster, Instance
from paraplan.cost.trust import RANK_MIN_REL_DIFF

ANCHORS_PATH = PUBLISHED_DIR / "moe.yaml"


def _instances_dir() -> Path:
    import paraplan.instances
    return Path(paraplan.instances.__file__).resolve().parent


def anchor_rows() -> list[dict]:
    return read_yaml(ANCHORS_PATH)["rows"]


# Published fine-grained runs priced as the anchors are but never fitted: the out-of-sample
# check of many small experts (the file's header says which and why)
CHECKS_PATH = PUBLISHED_DIR / "moe_checks.yaml"


def check_rows() -> list[dict]:
    return read_yaml(CHECKS_PATH)["rows"]


def _merged(base: dict, options: dict) -> dict:
    out = dict(base)
    for key, value in options.items():
        out[key] = _merged(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


@lru_cache(maxsize=None)
def _bundled_mapping(name: str) -> dict:
    """A bundled instance file's data, read once per process: the MoE fit prices each anchor at
    thousands of grid points (cost/moe_fit.grid_log_errors), and parsing the file took a third
    of each price (15 of 48 ms per price under a profiler). Callers get a copy (anchor_instance)."""
    return read_yaml(_instances_dir() / name)


def anchor_instance(row: dict) -> Instance:
    """The row's bundled instance (`paraplan_instance`, "instances/<file>") with its options: a
    new Instance on each call (pricer prices one under every MoeParams of the fit's grid)."""
    name = row["paraplan_instance"].split()[0].removeprefix("instances/")
    base = copy.deepcopy(_bundled_mapping(name))
    return instance_from_mapping(_merged(base, row.get("paraplan_options", {})), row["id"], prefix="")


@dataclass(frozen=True)
class AnchorPrice:
    id: str
    gpu: str
    published_tflops_per_gpu: float
    iter_time_s: float
    megatron_tflops_per_gpu: float
    error_pct: float  # > 0: paraplan faster than measured
    fits_memory: bool
    host_bound: bool  # the row's run was slowed by host-side work paraplan does not price

    def recorded(self) -> dict:
        """As moe.yaml records it under `paraplan_prediction` (rounded as written there)."""
        return {"iter_time_s": round(self.iter_time_s, 2),
                "megatron_tflops_per_gpu": round(self.megatron_tflops_per_gpu, 1),
                "error_pct": round(self.error_pct, 1), "fits_memory": self.fits_memory}


def price(row: dict) -> AnchorPrice:
    return pricer(row)()


def pricer(row: dict) -> Callable[[], AnchorPrice]:
    """price(row) as a function to call once per MoeParams (cost/moe_fit.grid_log_errors prices
    each row at up to 18,432 grid points): the row's instance and plan read once, and every
    call priced on that one Instance object. Pricing keeps its memos per instance object
    (cost/coefficients); those whose values read MoeParams (an MoE layer's costs) are keyed by
    the parameters in force too, so one point's prices do not carry into the next, while what
    reads none of them (a configuration's parts, the attention view's and dense prefix's layer
    costs, the output layer, the model views) is priced once for all the points: 0.60 -> 0.46 ms a price over the 33 rows (issue 32; each call priced on a
    new Instance equal to this one before). Reading the file's mapping into an Instance and the
    plan against it was over half of each price (1.2-2.0 ms a price -> 0.6-0.7 ms on three rows;
    issue 32). The plan is checked against the instance, and its classes placed on the cluster,
    once here too (simulate's `checked` and `placements`): neither reads MoeParams, so each call
    would repeat the same check and placement (29% of a price under a profiler)."""
    inst, plan, placements = read_plan(row)
    published = float(row["measured"]["value"])

    def priced() -> AnchorPrice:
        # the row ran: priced against the whole HBM, no planning reserve
        bd = simulate(inst, plan, reserve_bytes=0.0, checked=True, placements=placements)
        return AnchorPrice(id=row["id"], gpu=row["cluster"]["gpu"], published_tflops_per_gpu=published,
                           iter_time_s=bd.iter_time_s, megatron_tflops_per_gpu=bd.megatron_tflops_per_gpu,
                           error_pct=100 * (bd.megatron_tflops_per_gpu / published - 1), fits_memory=bd.fits,
                           host_bound=bool(row.get("host_bound", False)))
    return priced


def read_plan(row: dict) -> tuple[Instance, Plan, tuple[Placement, ...]]:
    """The row's instance, its plan checked against it, and the plan's classes placed on its
    cluster: what `pricer` reads once for all its prices (simulate's `checked`, `placements`)."""
    inst = anchor_instance(row)
    plan = plan_from_mapping(row["paraplan_plan"], inst, row["id"])
    plan.check_against(inst)  # as simulate checks it (the reader checks a flat plan on group_alone)
    return inst, plan, tuple(class_placement(inst.cluster, plan.outer, k) for k in range(len(plan.classes)))


def _simulated(row: dict, **gpu):
    """`simulate` of the row's plan, with the named GpuSpec fields of its GPU replaced."""
    inst = anchor_instance(row)
    if gpu:
        inst = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, gpu=replace(inst.cluster.gpu, **gpu))))
    return simulate(inst, plan_from_mapping(row["paraplan_plan"], inst, row["id"]), reserve_bytes=0.0)


# the relative slow-down of one kind of work that time_split differentiates by: small enough
# that no overlap changes side (every hidden transfer hides behind compute either way), large
# enough that the float sums of a 400 s iteration resolve it
SPLIT_STEP = 1.001


@dataclass(frozen=True)
class TimeSplit:
    """One anchor's predicted iteration time split by what it waits on, with the model's own
    pricing: `attention_s` and `gemm_s` are the seconds the iteration loses per unit slow-down of
    the attention core and of every GEMM (d T / d ln time), so they count that work wherever it
    sits on the critical path (the slowest stage's compute, its share of the pipeline bubble,
    the slowest-rank allowance); `a2a_s` and `cp_comm_s` are the exposed all-to-all and
    context-parallel transfers; `other_s` the rest (memory-bound passes, tp collectives, host
    time, the sync and step)."""

    id: str
    seq_len: int
    cp: int
    iter_time_s: float
    attention_s: float
    gemm_s: float
    a2a_s: float
    cp_comm_s: float
    published_tflops_per_gpu: float
    megatron_tflops_per_gpu: float

    @property
    def other_s(self) -> float:
        return self.iter_time_s - self.attention_s - self.gemm_s - self.a2a_s - self.cp_comm_s

    @property
    def implied_attention_speedup(self) -> float:
        """The factor on the attention core's speed that would make the predicted time the
        measured one were everything else priced right; not capped (it may ask for more
        than the GPU's peak): inf when the rest alone already takes longer than the measured time."""
        measured_s = self.iter_time_s * self.megatron_tflops_per_gpu / self.published_tflops_per_gpu
        attention_s = measured_s - (self.iter_time_s - self.attention_s)
        return self.attention_s / attention_s if attention_s > 0 else float("inf")


def time_split(row: dict) -> TimeSplit:
    """The row's TimeSplit: each derivative by slowing that work by SPLIT_STEP (efficiencies
    divided by it, so none leaves (0, 1])."""
    g = anchor_instance(row).cluster.gpu
    bd = _simulated(row)
    t = bd.iter_time_s
    # every attention speed (cost/coefficients.attention_efficiency: the fitted one, and the
    # benchmarks Transformer Engine runs at), so the derivative holds under every framework
    bench = g.fa2_benchmark_flops_per_s and g.fa2_benchmark_flops_per_s / SPLIT_STEP
    # cuDNN's measured curve (Blackwell) slowed alike
    cudnn = tuple((k, f / SPLIT_STEP) for k, f in g.cudnn_attention_flops_per_s_by_keys)
    slow_attention = _simulated(row, attention_eff=g.attention_eff / SPLIT_STEP,
                                fa2_benchmark_flops_per_s=bench,
                                cudnn_attention_flops_per_s_by_keys=cudnn).iter_time_s
    slow_gemm = _simulated(row, matmul_eff_max=g.matmul_eff_max / SPLIT_STEP,
                           fp8_matmul_eff_max=g.fp8_matmul_eff_max / SPLIT_STEP).iter_time_s
    return TimeSplit(id=row["id"], seq_len=int(row["config"]["seq_len"]),
                     cp=int(row["paraplan_plan"].get("cp", 1)), iter_time_s=t,
                     attention_s=(slow_attention - t) / (SPLIT_STEP - 1),
                     gemm_s=(slow_gemm - t) / (SPLIT_STEP - 1),
                     a2a_s=bd.exposed_s.get("ep_a2a", 0.0), cp_comm_s=bd.exposed_s.get("cp_comm_exposed", 0.0),
                     published_tflops_per_gpu=float(row["measured"]["value"]),
                     megatron_tflops_per_gpu=bd.megatron_tflops_per_gpu)


def priced_rows() -> list[dict]:
    """Rows with a published configuration paraplan can express (`paraplan_plan`)."""
    return [r for r in anchor_rows() if r.get("paraplan_plan")]


def published_table(row: dict) -> tuple:
    """The published comparison a row belongs to: one model on one GPU type and count at one
    sequence length, from one table (the first file of its `config_source`): rows of one table
    ran the same software, so they differ only in the configuration they list."""
    c = row["cluster"]
    return row["model"], c["gpu"], c["num_gpus"], row["config"]["seq_len"], row["config_source"][0]


@dataclass(frozen=True)
class HeadToHead:
    """Two anchors of one published table, the one measured faster first."""

    faster: str
    slower: str
    published_tflops_per_gpu: tuple[float, float]
    paraplan_tflops_per_gpu: tuple[float, float]

    @property
    def right(self) -> bool:
        """paraplan prices the measured-faster configuration faster (a predicted tie is wrong).
        One table's rows share the model and sequence length, so model TFLOP/s per GPU orders
        them as tokens per second per GPU does."""
        return self.paraplan_tflops_per_gpu[0] > self.paraplan_tflops_per_gpu[1]


def head_to_heads(prices: list[AnchorPrice], rows: list[dict] | None = None) -> list[HeadToHead]:
    """Every pair of priced anchors of one published table (published_table), neither bound by
    host-side work, whose published TFLOP/s per GPU differ by more than RANK_MIN_REL_DIFF (as the
    dense rows' ranking pairs), in file order."""
    by_id = {r["id"]: r for r in (anchor_rows() if rows is None else rows)}
    tables: dict[tuple, list[AnchorPrice]] = {}
    for a in prices:
        if not a.host_bound:
            tables.setdefault(published_table(by_id[a.id]), []).append(a)
    out = []
    for members in tables.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                fast, slow = (a, b) if a.published_tflops_per_gpu >= b.published_tflops_per_gpu else (b, a)
                if fast.published_tflops_per_gpu / slow.published_tflops_per_gpu - 1 <= RANK_MIN_REL_DIFF:
                    continue
                out.append(HeadToHead(fast.id, slow.id,
                                      (fast.published_tflops_per_gpu, slow.published_tflops_per_gpu),
                                      (fast.megatron_tflops_per_gpu, slow.megatron_tflops_per_gpu)))
    return out
