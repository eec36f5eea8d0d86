"""`paraplan bench --mixed`: the optimal plan of each bundled mixed-cluster
instance against the two plans a user would otherwise pick, measured in one run:

(a) the best plan on the largest homogeneous group alone (the homogeneous planner, full space:
    cp, interleaving, ZeRO-2/3 included), the rest of the cluster idle;
(b) the best plan with a uniform split over all GPUs: every group used, even layer splits and
    the same number of micro-batches on every replica (solver/space.py, uniform=True);
(c) the best plan in the space mixed clusters had before the one-planner merge (issue 12):
    the instance's own space without ZeRO-2/3, context parallelism, interleaving, tensor
    parallelism across nodes or per-operator partitions (previous_space), against the best
    plan of the instance's space with context parallelism and interleaving open (full_space;
    the files narrow both to keep the optimum column's solve times short);
(d) on the instances in PARTITIONS, the best plan with per-operator (spatial-temporal) partitions
    chosen per replica class and group (search.tensor_partitions: megatron, spatial_temporal) and
    its solve time: the partitions and the heterogeneous split in one proved search (issue 12).

Throughput is tokens per second of the predicted iteration time. For instances with network
scenarios it also reports the robust and expected plans' worst regret, a `replan` answer time
for every scenario as the event, and the timeline plan against its upper bound.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.scenarios import load_event
from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bench.growth import GPU_TYPES, ISSUE_ROWS, growth_rows, issue_rows
from paraplan.solver.dynamic import replan
from paraplan.solver.format import table
from paraplan.solver.search import search
from paraplan.solver.solve import solve
from paraplan.solver.partition_plans import SPATIAL_TEMPORAL

MIXED_DIR = Path(__file__).resolve().parents[2] / "instances" / "mixed"
INSTANCES = ["llama3-70b-32xA100-32xH100", "llama3-70b-3types-2sites", "llama3-8b-dynamic"]
EVENT = MIXED_DIR / "events" / "inter-site-degraded.yaml"
# instances also solved with per-operator partitions (the larger ones' partition spaces are
# far beyond the others' and are not part of the bench)
PARTITIONS = ["llama3-70b-32xA100-32xH100"]
# the growth rows (solver/bench/growth.py): Llama-3 70B on 1 to this many GPU types
GROWTH_TYPES = len(GPU_TYPES)
# issue 33's larger rows (growth.ISSUE_ROWS): each search's wall limit, past the 10 s of CPU
# each is meant to be proved in, so that the row shows how far it got
ISSUE_LIMIT_S = 60.0
ISSUE = ISSUE_ROWS


@dataclass
class MixedBenchRow:
    instance: str
    gpus: int
    optimum_status: str
    optimum_tokens_per_s: float | None
    solve_s: float
    largest_group: str
    largest_status: str
    largest_tokens_per_s: float | None
    uniform_status: str
    uniform_tokens_per_s: float | None
    previous_status: str = "-"
    previous_tokens_per_s: float | None = None
    full_status: str = "-"
    full_tokens_per_s: float | None = None
    full_solve_s: float | None = None
    partitions_status: str = "-"
    partitions_tokens_per_s: float | None = None
    partitions_solve_s: float | None = None
    robust_worst_regret: float | None = None
    expected_worst_regret: float | None = None
    replan_max_s: float | None = None
    timeline_gap: float | None = None

    def ratio(self, other: float | None) -> float | None:
        return _over(self.optimum_tokens_per_s, other)


def _over(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def previous_space(inst):
    """`inst` with its declared space cut to what mixed clusters could use before the
    one-planner merge: ZeRO 0-1, cp 1, no interleaving, one tp inside a node, Megatron 1-D."""
    s = inst.search
    return replace(inst, search=replace(s, zero=tuple(z for z in s.zero if z <= 1) or (0,), cp=(1,),
                                        virtual_stages=(1,), tp_across_nodes=False, tp_per_group=False,
                                        tensor_partitions=("megatron",)))


def with_partitions(inst):
    """`inst` with per-operator partitions in its declared space (beside Megatron's plans)."""
    return replace(inst, search=replace(inst.search, tensor_partitions=("megatron", SPATIAL_TEMPORAL)))


def full_space(inst):
    """`inst` with context parallelism and interleaving over every value the planner admits."""
    return replace(inst, search=replace(inst.search, cp=None, virtual_stages=None))


def _tokens_per_s(inst, t_s: float | None) -> float | None:
    return None if t_s is None else inst.job.global_batch * inst.model.seq_len / t_s


def bench_instance(name: str, time_limit_s: float = 120.0, log=print) -> MixedBenchRow:
    inst = load_instance(MIXED_DIR / f"{name}.yaml")
    t0 = time.perf_counter()
    opt = search(inst, time_limit_s=time_limit_s)
    solve_s = time.perf_counter() - t0
    log(f"{name}: optimum {opt.status} {opt.objective_s} s in {solve_s:.2f} s")
    g = max(range(len(inst.cluster.groups)), key=lambda i: (inst.cluster.groups[i].num_gpus, -i))
    alone = inst.group_alone(g)
    # the full homogeneous space: the files narrow cp and interleaving for the mixed-cluster
    # planner's time only (instances/mixed/*.yaml), not for this baseline
    alone = replace(alone, search=replace(alone.search, cp=None, virtual_stages=None))
    homo = solve(alone, time_limit_s=time_limit_s)
    log(f"{name}: largest group {inst.cluster.groups[g].name} {homo.status} {homo.iter_time_s} s")
    uni = search(inst, time_limit_s=time_limit_s, uniform=True)
    log(f"{name}: uniform {uni.status} {uni.objective_s} s")
    prev = search(previous_space(inst), time_limit_s=time_limit_s)
    log(f"{name}: previous space {prev.status} {prev.objective_s} s")
    t0 = time.perf_counter()
    full = search(full_space(inst), time_limit_s=time_limit_s)
    full_s = time.perf_counter() - t0
    log(f"{name}: full space {full.status} {full.objective_s} s in {full_s:.2f} s")
    row = MixedBenchRow(instance=name, gpus=inst.cluster.num_gpus, optimum_status=opt.status,
                    optimum_tokens_per_s=_tokens_per_s(inst, opt.objective_s), solve_s=solve_s,
                    largest_group=f"{inst.cluster.groups[g].num_gpus} x {inst.cluster.groups[g].gpu.name}",
                    largest_status=homo.status, largest_tokens_per_s=_tokens_per_s(inst, homo.iter_time_s),
                    uniform_status=uni.status, uniform_tokens_per_s=_tokens_per_s(inst, uni.objective_s),
                    previous_status=prev.status, previous_tokens_per_s=_tokens_per_s(inst, prev.objective_s),
                    full_status=full.status, full_tokens_per_s=_tokens_per_s(inst, full.objective_s),
                    full_solve_s=full_s)
    if name in PARTITIONS:
        t0 = time.perf_counter()
        part = search(with_partitions(inst), time_limit_s=time_limit_s)
        row.partitions_solve_s = time.perf_counter() - t0
        row.partitions_status = part.status
        row.partitions_tokens_per_s = _tokens_per_s(inst, part.objective_s)
        log(f"{name}: with partitions {part.status} {part.objective_s} s in {row.partitions_solve_s:.2f} s")
    if len(inst.scenarios) > 1:
        from paraplan.solver.dynamic import plan_timeline, regrets, scenario_optima
        optima = scenario_optima(inst, "cpsat", time_limit_s)
        for objective in ("robust", "expected"):
            res = search(inst, time_limit_s=time_limit_s, objective=objective)
            worst = max(r.regret for r in regrets(inst, res.plan, optima))
            setattr(row, f"{objective}_worst_regret", worst)
        answer_s = [replan(inst, opt.plan, sc, 200 * 3600.0, None, time_limit_s=time_limit_s).solve_time_s
                    for sc in inst.scenarios[1:]]
        row.replan_max_s = max(answer_s)
        if inst.timeline:
            row.timeline_gap = plan_timeline(inst, time_limit_s=time_limit_s).gap
    if row.replan_max_s is None and opt.plan is not None:
        try:  # the bundled event, where the instance has the sites it names
            event, remaining_s, remaining_it = load_event(EVENT, inst)
        except InstanceError:
            return row
        row.replan_max_s = replan(inst, opt.plan, event, remaining_s, remaining_it,
                                  time_limit_s=time_limit_s).solve_time_s
    return row


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def run_mixed_bench(args) -> int:
    rows = [bench_instance(n, log=(lambda m: None) if args.quiet else print) for n in INSTANCES]
    text = table(
        ["instance", "GPUs", "optimum tok/s", "solve", "largest group", "tok/s", "x", "uniform tok/s", "x",
         "full space tok/s", "solve", "previous space tok/s", "x", "partitions tok/s", "solve"],
        [[r.instance, str(r.gpus), _fmt(r.optimum_tokens_per_s, ",.0f"), f"{r.solve_s:.2f} s",
          r.largest_group, _fmt(r.largest_tokens_per_s, ",.0f"), _fmt(r.ratio(r.largest_tokens_per_s), ".2f"),
          _fmt(r.uniform_tokens_per_s, ",.0f"), _fmt(r.ratio(r.uniform_tokens_per_s), ".2f"),
          _fmt(r.full_tokens_per_s, ",.0f"), _fmt(r.full_solve_s, ".2f") + " s",
          _fmt(r.previous_tokens_per_s, ",.0f"),
          _fmt(_over(r.full_tokens_per_s, r.previous_tokens_per_s), ".3f"),
          _fmt(r.partitions_tokens_per_s, ",.0f"),
          "-" if r.partitions_solve_s is None else f"{r.partitions_solve_s:.2f} s"] for r in rows],
        align="lrrrlrrrrrrrrrr")
    def pct(x: float | None, spec: str) -> str:
        return "-" if x is None else format(100 * x, spec) + "%"

    dyn = [[r.instance, pct(r.robust_worst_regret, ".2f"), pct(r.expected_worst_regret, ".2f"),
            _fmt(r.replan_max_s, ".2f") + " s", pct(r.timeline_gap, ".3f")]
           for r in rows if r.replan_max_s is not None]
    if dyn:
        text += "\n\n" + table(["instance", "robust worst regret", "expected worst regret",
                                "slowest replan", "timeline gap to bound"], dyn, align="lrrrr")
    growth = growth_rows(GROWTH_TYPES, log=(lambda m: None) if args.quiet else print)
    text += "\n\n" + table(["GPU types (4 nodes each)", "GPUs", "outer configs", "priced",
                             "infeasible by memory", "pruned by bound", "optimum", "CPU"],
                            [[str(g.types), str(g.gpus), f"{g.outer_configs:,}", f"{g.priced:,}",
                              f"{g.pruned_by_memory:,}", f"{g.pruned_by_bound:,}",
                              f"{g.status} {_fmt(g.objective_s, '.3f')} s", f"{g.cpu_s:.2f} s"] for g in growth],
                            align="rrrrrrrr")
    issue = issue_rows(ISSUE_LIMIT_S, log=(lambda m: None) if args.quiet else print, rows=ISSUE)
    text += "\n\n" + table(["issue 33 row", "GPUs", "outer configs set up", "priced", "infeasible by memory",
                             "pruned by bound", "result", "CPU", "peak RSS"],
                            [[name, str(g.gpus), f"{g.outer_configs:,}", f"{g.priced:,}", f"{g.pruned_by_memory:,}",
                              f"{g.pruned_by_bound:,}", f"{g.status} {_fmt(g.objective_s, '.3f')} s",
                              f"{g.cpu_s:.2f} s", f"{_fmt(g.peak_rss_gib, '.2f')} GiB"] for name, g in issue],
                            align="lrrrrrrrr")
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"status": "ok", "rows": [asdict(r) for r in rows],
                       "growth": [asdict(g) for g in growth],
                       "issue_rows": [dict(asdict(g), row=name) for name, g in issue]}, fh, indent=2)
    return 0
