"""Every method agrees at the memory edge (issue 35): an instance's memory reserve is moved so
that its exhaustive optimum's peak memory equals the capacity exactly, or lies a few bytes
either side of it, and DP, CP-SAT, MILP and exhaustive search must still return the same status
and objective, for the nominal, robust and expected objectives and under DualPipe.

"Fits" means peak <= capacity as cost.schedule.fits evaluates it (formulations/quantize.py,
Exact memory). The reference is exhaustive search, which enumerates every split and recompute
count and applies that comparison to each; it shares no code with the solvers' memory rows.
At the edge the exhaustive optimum still fits (its peak equals the capacity), so it stays the
optimum; one byte less and it no longer fits, and some other plan (or none) is optimal."""

from __future__ import annotations

import functools
import math
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from agreement_support import assert_backends_agree_with_exhaustive, small_seeds
from randinst import random_cluster_instance, random_instance
from oracles.bounds import max_layers_per_stage

from paraplan.cost.specs import Cluster, Instance
from paraplan.cost.simulate import simulate
from paraplan.formulations.quantize import fit_recompute_range
from paraplan.solver.exhaustive import exhaustive
from paraplan.solver.search import search

# bytes the capacity is moved off the optimum's peak: 0 is the edge itself, negative cuts it
OFFSETS_BYTES = (0, -1, 3)


def with_reserve(inst, reserve_bytes: float):
    return replace(inst, search=replace(inst.search, memory_reserve_bytes=reserve_bytes))


def slack_bytes(pairs) -> float:
    """The least capacity - peak over (peak, capacity) pairs."""
    return min(cap - mem for mem, cap in pairs)


def onto_edge(inst, pairs, offset_bytes: float):
    """`inst` with its reserve raised so that the tightest stage of the plan whose (peak,
    capacity) pairs are given has capacity - peak == offset_bytes exactly; None where float
    arithmetic cannot place it there (the caller re-checks on the moved instance)."""
    reserve = inst.search.memory_reserve_bytes + slack_bytes(pairs) - offset_bytes
    return with_reserve(inst, reserve) if reserve >= 0 else None


def homogeneous_pairs(inst, plan):
    bd = simulate(inst, plan, reserve_bytes=inst.search.memory_reserve_bytes)
    return [(s.mem_bytes, s.capacity_bytes) for s in bd.stages]


def cluster_pairs(inst, plan):
    bd = simulate(inst, plan)
    return [(s.mem_bytes, s.capacity_bytes) for s in bd.stages]


def edge_instances(inst, pairs_of, solve):
    """(offset, moved instance) for each offset whose placement is exact: at offset 0 the
    reference optimum's tightest stage has capacity == peak to the byte."""
    plan = solve(inst)
    if plan is None:
        return []
    out = []
    for offset in OFFSETS_BYTES:
        moved = onto_edge(inst, pairs_of(inst, plan), offset)
        if moved is not None and slack_bytes(pairs_of(moved, plan)) == offset:
            out.append((offset, moved))
    return out


N_SEEDS = 10


@pytest.fixture(scope="module")
def seeds() -> list[int]:
    """The first N_SEEDS small random instances from seed 1000, searched once per test process
    that runs a test reading them, not at every worker's collection (issue 32)."""
    return small_seeds(lambda seed: random_instance(seed, variant=True), 1000, N_SEEDS, 20_000)


# the agreement cases and the not-vacuous check of one kind read the same brute forces: an
# xdist group puts them on one worker (tests/conftest.py), where each is listed once (issue 32)
SAME_NOMINAL_EDGES = pytest.mark.xdist_group("memory-edge-nominal")
SAME_DUALPIPE_EDGES = pytest.mark.xdist_group("memory-edge-dualpipe")


def _edges_listed(inst, pairs_of) -> list:
    """(offset, moved instance, exhaustive(moved)) for each of edge_instances(inst, pairs_of)."""
    return [(offset, moved, exhaustive(moved))
            for offset, moved in edge_instances(inst, pairs_of, lambda i: exhaustive(i).plan)]


@functools.lru_cache(maxsize=None)
def _nominal_edges(seed: int) -> list:
    """_edges_listed of random_instance(seed), once per test process: the not-vacuous check
    listed every seed's edges and their optima again. Read only."""
    return _edges_listed(random_instance(seed, variant=True), homogeneous_pairs)


@SAME_NOMINAL_EDGES
@pytest.mark.parametrize("case", range(N_SEEDS))
def test_nominal_backends_agree_at_the_edge(seeds, case):
    for offset, moved, ex in _nominal_edges(seeds[case]):
        assert_backends_agree_with_exhaustive(moved, ex=ex)
        if offset == 0:  # the plan at the edge is still feasible, so still the optimum
            assert ex.plan is not None


@SAME_NOMINAL_EDGES
def test_the_edge_moves_the_optimum(seeds):
    """Not vacuous: on most seeds the optimum sits exactly on a capacity at offset 0, and one
    byte less makes it infeasible (another plan, or none, is optimal there)."""
    moved_optimum = exact = 0
    for seed in seeds:
        cases = {offset: ex for offset, _, ex in _nominal_edges(seed)}
        if 0 in cases and -1 in cases:
            exact += 1
            at, below = cases[0], cases[-1]
            moved_optimum += below.plan is None or below.iter_time_s > at.iter_time_s
    assert exact >= len(seeds) // 2 and moved_optimum >= 1, (exact, moved_optimum)


HETERO_SEEDS = range(6)


# seed 4 at offset 0 is the case of a layer cap's float floor: its optimum holds 4 layers, all
# recomputed, on one stage whose peak equals the capacity, and (capacity - fixed) / (state +
# ckpt) came out 3.9999999999999996, so the pre-filters dropped it (7.364 ms reported, 6.962 ms
# exhaustive) until cost/coefficients.max_layers_per_stage read cost.schedule.fits's comparison
@pytest.mark.parametrize("seed", HETERO_SEEDS)
@pytest.mark.parametrize("objective", ["nominal", "robust", "expected"])
def test_mixed_cluster_objectives_agree_at_the_edge(seed, objective):
    inst = random_cluster_instance(seed)
    cases = edge_instances(inst, cluster_pairs, lambda i: exhaustive(i, objective).plan)
    for offset, moved in cases:
        ex = exhaustive(moved, objective)
        for backend in ("cpsat", "milp"):
            res = search(moved, backend, time_limit_s=30, objective=objective)
            if ex.objective_s is None:
                assert res.status == "infeasible", (offset, backend)
                continue
            assert res.status == "optimal", (offset, backend)
            assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s, (
                offset, backend, res.objective_s, ex.objective_s)


DUALPIPE_BASE = {
    "name": "tiny-dualpipe-edge",
    "model": {"name": "tiny-moe", "layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000,
              "seq_len": 1024, "mlp": "gelu",
              "moe": {"experts": 8, "top_k": 2, "expert_ffn": 2048, "shared_ffn": 1024, "dense_layers": 1}},
    "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8, "intra_node_link": "nvlink",
                "intra_node_gbytes_per_s": 600, "nic_gbit_per_s": 200},
    "job": {"global_batch": 32, "pipeline_schedule": "dualpipe"}}


def dualpipe_instance(tmp_path, seed: int):
    """A tiny DualPipe job on one DGX A100, drawn: 4 to 8 layers, MoE (dense prefix 0 or 1) or
    dense, a batch of 16 or 32, tp 1 or 2, full recomputation allowed on most, and the GPU's
    memory cut to 2-4%; then the reserve is walked down (recompute_forced) until the optimum
    recomputes layers, so that at its edge the memory row decides between recompute counts."""
    import random

    import yaml

    from paraplan.cost.readers.instance import load_instance
    rng = random.Random(seed)
    raw = yaml.safe_load(yaml.safe_dump(DUALPIPE_BASE))
    raw["model"]["layers"] = rng.randint(4, 8)
    if rng.random() < 0.3:
        raw["model"].pop("moe")
    else:
        raw["model"]["moe"]["dense_layers"] = rng.choice([0, 1])
    raw["job"]["global_batch"] = rng.choice([16, 32])
    # no planning reserve: the GPU is cut to a few GiB, and the reserve is walked below
    raw["search"] = {"tp": [1, 2], "full_recompute": rng.random() < 0.8, "memory_reserve_gib": 0}
    path = tmp_path / f"dualpipe-edge-{seed}.yaml"
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    gpu = inst.cluster.gpu
    scale = rng.choice([0.02, 0.03, 0.04])
    cut = replace(inst.cluster.one_group, gpu=replace(gpu, hbm_bytes=gpu.hbm_bytes * scale))
    het = replace(inst, cluster=Cluster.of(cut))
    return recompute_forced(het)


def recompute_forced(inst, steps: int = 20):
    """`inst` with its reserve moved one byte past its optimum's peak, again and again, until
    the optimum recomputes layers or nothing fits (seen: 0 to 6 steps)."""
    for _ in range(steps):
        plan = exhaustive(inst).plan
        if plan is None or sum(plan.classes[0].full_recompute_layers) > 0:
            return inst
        moved = onto_edge(inst, cluster_pairs(inst, plan), -1)
        if moved is None:
            return inst
        inst = moved
    return inst


DUALPIPE_SEEDS = range(8)


@functools.lru_cache(maxsize=None)
def _dualpipe_edges(seed: int) -> list:
    """_edges_listed of dualpipe_instance(seed), once per test process: the not-vacuous check
    drew every seed's instance, walked its reserve and listed its edges again (3.2 s of CPU).
    Read only."""
    with tempfile.TemporaryDirectory() as d:
        inst = dualpipe_instance(Path(d), seed)
    return _edges_listed(inst, cluster_pairs)


@SAME_DUALPIPE_EDGES
@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s == 1 else s  # 5.4 s
                                  for s in DUALPIPE_SEEDS])
def test_dualpipe_backends_agree_at_the_edge(seed):
    """DualPipe at the memory edge: the reserve moved so that the exhaustive optimum's fullest
    device holds exactly its capacity, 1 byte less and 3 bytes more (devices as cost/dualpipe
    prices them, which simulate reports); DP, CP-SAT and the MILP each return exhaustive
    search's status and objective."""
    for offset, moved, ex in _dualpipe_edges(seed):
        if offset >= 0:  # the optimum still fits
            assert ex.plan is not None, offset
        for backend in ("dp", "cpsat", "milp"):
            res = search(moved, backend, time_limit_s=30)
            if ex.objective_s is None:
                assert res.status == "infeasible", (offset, backend)
                continue
            assert res.status == "optimal", (offset, backend, res.status)
            assert abs(res.objective_s - ex.objective_s) <= res.tolerance_s + 1e-9 * ex.objective_s, (
                offset, backend, res.objective_s, ex.objective_s)


@pytest.mark.slow  # over 5 s on the 2-core test machine where no case listed its edges (issue 32)
@SAME_DUALPIPE_EDGES
def test_the_dualpipe_edge_is_reached_and_recomputes():
    """Not vacuous: the edge is placed to the byte on most seeds where a plan fits, and there
    the optimum at the edge recomputes layers (seen: 4 of 8 seeds, each recomputing)."""
    placed = recomputing = 0
    for seed in DUALPIPE_SEEDS:
        cases = {offset: ex for offset, _, ex in _dualpipe_edges(seed)}
        if 0 in cases:
            placed += 1
            plan = cases[0].plan
            recomputing += sum(plan.classes[0].full_recompute_layers) > 0
    assert placed >= 3 and recomputing >= 3, (placed, recomputing)


def test_recompute_intervals_match_the_predicate(seeds):
    """fit_recompute_range against cost.schedule.fits evaluated for every (stage, n, r), on
    coefficients whose capacity is set to one split's exact peak (the edge)."""
    from paraplan.cost.coefficients import build
    from paraplan.cost import schedule
    from paraplan.solver.space import one_group_outers
    checked = 0
    for seed in seeds[:4]:
        inst = random_instance(seed, variant=True)
        for outer in one_group_outers(inst)[:3]:
            c = build(inst, outer)
            L = c.layers
            n = np.arange(1, L + 1)
            # the peak of every stage with n = 1, r = 0 becomes its capacity: an exact edge
            cap = schedule.stage_mem_bytes(c, np.ones(c.pp), np.zeros(c.pp))
            c = replace(c, capacity_bytes=cap)
            lo, hi = fit_recompute_range(c, n, L)
            for s in range(c.pp):
                for j, nj in enumerate(n.tolist()):
                    for r in range(nj + 1):
                        nn, rr = np.ones(c.pp), np.zeros(c.pp)
                        nn[s], rr[s] = nj, r
                        mem = schedule.stage_mem_bytes(c, nn, rr)[s]
                        assert (mem <= cap[s]) == (lo[s, j] <= r <= hi[s, j]), (seed, s, nj, r)
                        checked += 1
    assert checked > 100 and not math.isnan(checked)


def test_a_dualpipe_job_that_fits_nowhere_is_infeasible_with_its_reason(tmp_path):
    """Every backend says infeasible with the memory reason (it was a ConfigError traceback from
    the 1F1B coefficients). The reserve leaves 0.5 GiB of the A100's 80: the tiny MoE model's
    embedding state alone (32,000 x 1,024 x 16 bytes of Adam state = 0.49 GiB before tp) plus
    the runtime allowance exceeds it, so exhaustive search finds nothing either."""
    import yaml

    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver.solve import solve as plan
    raw = {"name": "dualpipe-nowhere",
           "model": {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096,
                     "vocab": 32000, "seq_len": 1024, "mlp": "gelu"},
           "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8,
                       "intra_node_link": "nvlink", "intra_node_gbytes_per_s": 600, "nic_gbit_per_s": 200},
           "job": {"global_batch": 32, "pipeline_schedule": "dualpipe"},
           "search": {"memory_reserve_gib": 79.5}}
    path = tmp_path / "dualpipe-nowhere.yaml"
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    assert exhaustive(inst).plan is None
    for backend in ("dp", "cpsat", "milp"):
        res = plan(inst, backend=backend)
        assert res.status == "infeasible" and res.plan is None, backend
        assert res.reason.startswith("no plan fits memory") and "DualPipe" in res.reason, res.reason


def test_layer_caps_hold_a_peak_equal_to_the_capacity(seeds):
    """cost/coefficients.max_layers_per_stage and one_class's proofs at the edge: for every
    stage and n, the capacity is set to the stage's exact peak with n layers all recomputed
    (cost.schedule.stage_mem_bytes, the value cost.schedule.fits compares), so by the
    definition of "fits" the cap is n there, and one float step of capacity lower it is n - 1
    (the peak of n - 1 layers is a whole layer's state + checkpoint lower, far more than a
    step). The float quotient (capacity - fixed) / (state + ckpt) misses n on some of these."""
    from paraplan.cost import schedule
    from paraplan.cost.coefficients import build
    from paraplan.solver.bounds import one_class
    from paraplan.solver.space import one_group_outers
    checked = quotient_low = 0
    for seed in seeds[:4]:
        inst = random_instance(seed, variant=True)
        for outer in one_group_outers(inst)[:3]:
            c = build(inst, outer)
            if c.outer.virtual_stages != 1:
                continue
            for n in range(1, c.layers + 1):
                nn = np.full(c.pp, float(n))
                peak = schedule.stage_mem_bytes(c, nn, nn)
                at = replace(c, capacity_bytes=peak)
                below = replace(c, capacity_bytes=np.nextafter(peak, -np.inf))
                assert (max_layers_per_stage(at) == n).all(), (seed, n)
                assert (max_layers_per_stage(below) == n - 1).all(), (seed, n)
                # the tight bound and the infeasibility proof see the split of n per stage
                assert one_class.memory_infeasible(at) == (n * c.pp < c.layers), (seed, n)
                if n * c.pp == c.layers:
                    assert math.isfinite(one_class.tight_lower_bound_s(at)), (seed, n)
                    assert math.isinf(one_class.tight_lower_bound_s(below)), (seed, n)
                quotient = np.floor((peak - c.stage_mem_bytes) / (c.layer_state_bytes + c.layer_ckpt_bytes))
                quotient_low += int((quotient < n).any())
                checked += 1
    # not vacuous: the quotient alone was one layer low on 30 of 54 cases when this was written
    assert checked > 50 and quotient_low >= 1, (checked, quotient_low)


def test_fewest_recomputed_layers_at_the_edge(seeds):
    """one_class.min_recompute (the planner's incumbents and hints) at the edge: with every
    stage holding n layers, r of them recomputed, and its capacity set to exactly that peak,
    the fewest recomputed layers that fit are r (r fits, its peak being the capacity; r - 1
    keeps one more layer's activations, act - ckpt > 0 bytes more, and does not)."""
    from paraplan.cost import schedule
    from paraplan.cost.coefficients import build
    from paraplan.solver.bounds import one_class
    from paraplan.solver.space import one_group_outers
    checked = 0
    for seed in seeds[:4]:
        inst = random_instance(seed, variant=True)
        for outer in one_group_outers(inst)[:3]:
            c = build(inst, outer)
            if not (c.layer_act_bytes > c.layer_ckpt_bytes).all():
                continue
            for n in range(1, c.layers + 1):
                nn = np.full(c.pp, float(n))
                for r in range(n + 1):
                    rr = np.full(c.pp, float(r))
                    at = replace(c, capacity_bytes=schedule.stage_mem_bytes(c, nn, rr))
                    assert (one_class.min_recompute(at, nn) == rr).all(), (seed, n, r)
                    checked += 1
    assert checked > 100, checked
