"""torch's zero-bubble schedules searched with the plan for a torchtitan job
(solver/space.zero_bubble_modes, cost/zero_bubble.py): exhaustive search, which prices every
split of every configuration with cost/schedule.iteration_time_s, against every backend of the
planner; the plan records the schedule, its file reads it back, and the export writes it."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path
from dataclasses import replace

import pytest
import yaml

from agreement_support import assert_backends_agree_with_exhaustive
from bundled_plans import bundled_instance, bundled_optimum, same_worker
from paraplan.cost.readers.plan_reader import load_plan
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.releases import Framework
from paraplan.cost.specs import (Cluster, NodeGroup, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec,
                                 ZeroBubble)
from paraplan.solver.export import to_torchtitan
from paraplan.solver.solve import solve
from paraplan.solver.space import not_covered, one_group_outers

from randinst import Space

ROOT = Path(__file__).resolve().parents[2]


def torchtitan_instance(seed: int) -> Instance:
    """A small torchtitan job whose space pipelines with two chunks per stage: an even layer
    count, enough micro-batches for ZBVZeroBubble's 2 pp - 1 on some configurations, memory
    tight enough that splits and recompute matter."""
    rng = random.Random(seed)
    heads = rng.choice([4, 8])
    hidden = heads * rng.choice([32, 64])
    model = ModelSpec(name=f"zb{seed}", layers=rng.choice([8, 10, 12]), hidden=hidden, heads=heads,
                      kv_heads=heads, ffn=4 * hidden, vocab=rng.choice([1000, 8000]),
                      seq_len=rng.choice([128, 512]), mlp=rng.choice([Mlp.GELU, Mlp.SWIGLU]))
    gpu = GpuSpec(name="toy", peak_flops_per_s=rng.choice([50e12, 300e12]),
                  hbm_bytes=rng.choice([0.4, 0.6, 0.9, 2.75]) * 2**30, hbm_bw_bytes_per_s=1e12)
    cluster = NodeGroup(gpu=gpu, nodes=1, gpus_per_node=rng.choice([3, 4]),
                        intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                        inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5))
    gb = cluster.num_gpus * rng.choice([3, 4, 6])
    space = Space(micro_batch=(1, 2), virtual_stages=(2,), tp=(1,), cp=(1,))
    return Instance(name=f"zb{seed}", model=model, cluster=Cluster.of(cluster),
                    job=JobSpec(global_batch=gb, framework=Framework.TORCHTITAN), search=space)


# Seeds listed (exhaustive optimum, from a scan of the first 30 whose space offers ZBVZeroBubble):
# 0 InterleavedZeroBubble on pp 2 (4, 4); 1 ZBVZeroBubble on pp 3 (2, 4, 4), the V's first
# stage lightest; 2 no plan fits; 6 InterleavedZeroBubble (6, 4); 12 InterleavedZeroBubble on
# pp 4 (2, 4, 4, 2) with 7 layers recomputed; 27 ZBVZeroBubble on pp 4 (2, 2, 2, 4)
SEEDS = (0, 1, 2, 6, 12, 27)


@pytest.mark.parametrize("seed", SEEDS)
def test_backends_agree_with_exhaustive_with_the_schedule_free(seed):
    inst = torchtitan_instance(seed)
    # v = 2 only: every configuration runs InterleavedZeroBubble, which leaves the dominated
    # Interleaved1F1B out (space.with_zero_bubble), and some ZBVZeroBubble
    offered = {o.zero_bubble for o in one_group_outers(inst)}
    assert offered == {ZeroBubble.INTERLEAVED, ZeroBubble.V}
    assert_backends_agree_with_exhaustive(inst)


def test_the_plan_records_its_schedule_and_its_file_and_export_carry_it(tmp_path):
    inst = torchtitan_instance(1)
    res = solve(inst, backend="dp")
    assert res.plan.zero_bubble is ZeroBubble.V  # the exhaustive optimum of seed 1 (above)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(res.plan)))
    assert "zero_bubble: ZBVZeroBubble" in path.read_text()
    assert load_plan(path, inst) == res.plan
    par = tomllib.loads(to_torchtitan(inst, res.plan).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    # the export writes what was planned, not the fastest on the split: the same plan with the
    # schedule left out (Interleaved1F1B) is exported as Interleaved1F1B
    plain = replace(res.plan, zero_bubble=None)
    par = tomllib.loads(to_torchtitan(inst, plain).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"


def test_a_zero_bubble_plan_file_needs_torchtitan(tmp_path):
    from paraplan.cost.errors import InstanceError
    inst = torchtitan_instance(1)
    plan = solve(inst, backend="dp").plan
    megatron = replace(inst, job=replace(inst.job, framework=Framework.MEGATRON))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(plan)))
    with pytest.raises(InstanceError, match="zero_bubble.*framework megatron does not run it"):
        load_plan(path, megatron)


def test_not_covered_names_only_what_is_left_out():
    inst = torchtitan_instance(1)
    line = " ".join(not_covered(inst))
    assert "ZB-H2" in line
    # searched: tests/mixed/test_zero_bubble_classes.py, tests/partition/test_zero_bubble_partitions.py
    assert "several replica classes" not in line and "per-operator" not in line
    assert "the proof covers 1F1B and Interleaved1F1B" not in line


def _torchtitan(path: str, tmp_path, search: dict | None = None) -> str:
    """The bundled instance at `path` with job.framework torchtitan (and `search` merged)."""
    data = yaml.safe_load((ROOT / path).read_text())
    data["job"]["framework"] = "torchtitan"
    data["job"].pop("framework_version", None)
    data.setdefault("search", {}).update(search or {})
    out = tmp_path / "inst.yaml"
    out.write_text(yaml.safe_dump(data))
    return str(out)


def test_a_stage_wise_class_across_two_gpu_types_agrees_with_exhaustive(tmp_path):
    # tiny-2types (A100 and H100 nodes) planned for torchtitan with v = 2: the one pipeline
    # through both groups may run InterleavedZeroBubble (ZBVZeroBubble stays on one group:
    # space.zero_bubble_modes); exhaustive search over every class shape, split and schedule
    # finds InterleavedZeroBubble on stages (h100, a100), which every backend proves
    from agreement_support import assert_mixed_backends_agree_with_exhaustive
    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver.exhaustive import exhaustive
    inst = load_instance(_torchtitan("instances/mixed/tiny-2types.yaml", tmp_path,
                                             {"virtual_stages": [2], "tp": [2, 4], "objective": "mean"}))
    ex = exhaustive(inst)
    assert ex.plan.zero_bubble is ZeroBubble.INTERLEAVED
    assert [c.stage_groups for c in ex.plan.classes] == [(1, 0)]
    assert_mixed_backends_agree_with_exhaustive(inst)
    assert "ZBVZeroBubble on a pipeline across node groups" in " ".join(not_covered(inst))


@pytest.mark.slow  # 5.7 s in an idle whole-suite --durations run (issue 32)
@same_worker("llama3-70b-512xH100")  # its optimum is test_zero_bubble_export's too
def test_llama3_70b_planned_for_torchtitan_runs_zbv(monkeypatch):
    # the bundled 70B / 512 H100 instance with framework torchtitan: planned without the
    # zero-bubble modes (the space before they were searched) its proved p90 optimum is
    # Interleaved1F1B at pp 2, v 4 (18.949 s predicted). It was pp 4, v 10 (19.669 s) until the
    # trust band's scale axis (cost/trust.scale_slow_log_quantile) raised the p90 factor of plans
    # on 256+ GPUs at distance levels 0-2 from 1.0644 to 1.0976 (level 3 stays 1.1196), which
    # moved the p90 ranking. With them: pp 4, v 2 under ZBVZeroBubble (18.605 s),
    # proved, re-simulated with its schedule, and faster
    from paraplan.cost.simulate import simulate
    from paraplan.solver import space
    inst = bundled_instance("llama3-70b-512xH100", torchtitan=True)
    res = bundled_optimum("llama3-70b-512xH100", "dp", torchtitan=True)  # solve(inst, backend="dp")
    assert res.status == "optimal"
    p = res.plan
    assert (p.pp, p.virtual_stages, p.zero_bubble) == (4, 2, ZeroBubble.V)
    bd = simulate(inst, p, reserve_bytes=inst.search.memory_reserve_bytes)
    assert bd.iter_time_s == pytest.approx(res.breakdown.iter_time_s, rel=1e-12)
    monkeypatch.setattr(space, "zero_bubble_modes", lambda inst, o: [])
    before = solve(inst, backend="dp")
    assert before.status == "optimal" and before.plan.zero_bubble is None
    assert (before.plan.pp, before.plan.virtual_stages) == (2, 4)
    assert res.objective_s < before.objective_s


def test_the_report_of_a_zero_bubble_plan_says_what_its_chart_draws():
    # seed 1's optimum runs ZBVZeroBubble (above); the chart replays interleaved 1F1B's order
    # with whole backwards, so it ends after the priced time: the caption says so, and does not
    # explain the gap as 1F1B's formula being an upper bound of the replay
    from paraplan.solver.report.page import build_report
    inst = torchtitan_instance(1)
    res = solve(inst, backend="dp")
    page = build_report(inst, res)
    assert "the plan runs torch's ZBVZeroBubble" in page
    assert "runs each backward whole" in page and "the formula charges the slowest stage" not in page
