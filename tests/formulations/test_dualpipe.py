"""The DualPipe split problem (formulations/dualpipe.py): its three solvers against enumeration
of every split on random small problems, and its terms against the simulator
(cost/dualpipe.iteration), which prices every plan the planner returns."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from bundled_plans import bundled_instance, bundled_optimum, same_worker

from paraplan.cost.specs import Instance
from paraplan.formulations.dualpipe import DualPipeProblem, balanced, solve_cpsat, solve_exact, solve_milp

ROOT = Path(__file__).resolve().parents[2]


def random_problem(seed: int) -> DualPipeProblem:
    """A problem of 2 to 6 stages and up to 9 layers whose pairs price a layer alike (one GPU
    type), with memory binding on some: each stage's activations weighed by the micro-batches
    DualPipe holds of it (pp - h on the shallow stage h of a pair, h + 1 on the deep one), a
    capacity drawn around the balanced split's need, recomputation allowed on most."""
    rng = random.Random(seed)
    pp = rng.choice([2, 4, 6])
    L = rng.randint(pp, 9)
    t, u = rng.uniform(1e-3, 3e-3), rng.uniform(0.2e-3, 1e-3)
    bw, ru, g = rng.uniform(-0.5 * t, t), rng.uniform(0, u), rng.uniform(0, 2e-4)
    held = pp - np.arange(pp, dtype=float)  # pp - h on stage h, h + 1 on stage pp - 1 - h
    act = np.array([rng.uniform(0.5e9, 2e9) for _ in range(pp)])
    kn = rng.uniform(1e9, 3e9) + held * act
    k0 = np.array([rng.uniform(1e9, 5e9) for _ in range(pp)])
    cap = rng.uniform(0.6, 1.2) * (k0.sum() * 2 / pp + L * 2 / pp * kn.mean()) + 2e9
    full = lambda x: np.full(pp, x)  # noqa: E731
    return DualPipeProblem(a=np.array([rng.uniform(0, 2e-3) for _ in range(pp)]), t=full(t), u=full(u),
                           bw=full(bw), ru=full(ru), e=np.array([rng.uniform(0, 1e-3) for _ in range(pp)]),
                           g=full(g), k0=k0, kn=kn, kr=held * act * rng.uniform(0.5, 0.95),
                           runtime_bytes=2e9, capacity_bytes=full(cap),
                           num_micro_batches=2 * pp * rng.choice([1, 2, 3]), layers=L,
                           first_min=rng.choice([1, 1, 2]), allow_full_recompute=rng.random() < 0.8)


def every_split(p: DualPipeProblem) -> tuple[np.ndarray, np.ndarray]:
    """(n, r), shape (splits, pp): every split of the layers with each stage's fewest (lows)
    and every recompute count 0..n_s (0 where full recomputation is off), in itertools order."""
    ns, rs = [], []
    lo = p.lows()
    for n in itertools.product(*[range(lo[s], p.layers + 1) for s in range(p.pp)]):
        if sum(n) != p.layers:
            continue
        for r in itertools.product(*[range((x if p.allow_full_recompute else 0) + 1) for x in n]):
            ns.append(n)
            rs.append(r)
    return np.array(ns, np.int64).reshape(-1, p.pp), np.array(rs, np.int64).reshape(-1, p.pp)


def enumerated_rows(p: DualPipeProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, r, Z) of every split (every_split) that fits, in order, by the problem's own rows:
    the objective and memory test that evaluate and fits read, on all splits at once (element
    by element the same float operations as one split's: issue 32, one fits call per split was
    most of this file's time); the rest of fits (layer sum, lows, 0 <= r <= n, recomputation
    allowed) holds by every_split's construction."""
    n, r = every_split(p)
    z, ok = p.rows(n, r)
    return n[ok], r[ok], z[ok]


def enumerated(p: DualPipeProblem) -> float:
    """min over every split and recompute count that fits, by the problem's own rows."""
    z = enumerated_rows(p)[2]
    return float(z.min()) if len(z) else math.inf


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_solver_reaches_the_enumerated_optimum(seed):
    p = random_problem(seed)
    want = enumerated(p)
    for res in (solve_exact(p), solve_cpsat(p), solve_milp(p)):
        if not math.isfinite(want):
            assert res.status == "infeasible", res.backend
            continue
        assert res.status == "optimal", res.backend
        assert res.objective_s == pytest.approx(want, abs=res.tolerance_s + 1e-12), res.backend
        assert res.bound_s <= want + 1e-12
        assert p.lower_bound_s() <= want * (1 + 1e-12)


def unlike_problem(seed: int) -> DualPipeProblem:
    """random_problem with each stage's per-layer time drawn apart (+-30%), so that the two
    stages of a pair price a layer unlike: CP-SAT keeps its per-stage model (knapsack rows and
    memory cuts) there, and the exact search hands such a problem to CP-SAT."""
    p = random_problem(seed)
    rng = random.Random(1000 + seed)
    return replace(p, t=p.t * np.array([rng.uniform(0.7, 1.3) for _ in range(p.pp)]))


@pytest.mark.parametrize("seed", range(12))
def test_pairs_priced_unlike_reach_the_enumerated_optimum(seed):
    """The per-stage CP-SAT model (pairs unlike) and the MILP against enumeration of every
    split: the pair model of solve_cpsat covers only pairs priced alike, so this one needs its
    own check."""
    p = unlike_problem(seed)
    assert not p.pairs_alike()
    want = enumerated(p)
    for res in (solve_cpsat(p), solve_milp(p)):
        if not math.isfinite(want):
            assert res.status == "infeasible", res.backend
            continue
        assert res.status == "optimal", res.backend
        assert res.objective_s == pytest.approx(want, abs=res.tolerance_s + 1e-12), res.backend


def symmetric_problem(seed: int, capacity_bytes: float) -> DualPipeProblem:
    """random_problem with every stage alike (its per-stage draws averaged) and the capacity
    given: pairs priced alike, so CP-SAT runs its pair model."""
    p = random_problem(seed)
    alike = lambda x: np.full(p.pp, x.mean())  # noqa: E731
    return replace(p, a=alike(p.a), e=alike(p.e), k0=alike(p.k0), kn=alike(p.kn), kr=alike(p.kr),
                   capacity_bytes=np.full(p.pp, capacity_bytes))


@pytest.mark.parametrize("seed,capacity_bytes", [(80, 1e12), (148, None)])
def test_cpsat_pair_model_finds_and_proves_the_optimum_under_a_short_limit(seed, capacity_bytes):
    """Two symmetric problems (pp 4, 7 layers, memory slack; and one at its drawn capacity) on
    which CP-SAT's pair model under the objective lower-bound search found no solution at all
    (seed 80: none after 20 s; its bound stalled 4% under the optimum): of 1,200 drawn problems
    (200 seeds; drawn, 32 GB and 1 TB capacities; as drawn and symmetric) these two timed out
    under a 1 s limit. _first_steps' hint starts it from a split; the optimum is enumeration's."""
    p = symmetric_problem(seed, capacity_bytes if capacity_bytes is not None
                          else float(random_problem(seed).capacity_bytes[0]))
    assert p.pairs_alike()
    want = enumerated(p)
    res = solve_cpsat(p, time_limit_s=1.0)
    assert res.status == "optimal"
    assert res.objective_s == pytest.approx(want, abs=res.tolerance_s + 1e-12)


# (its marks sat on symmetric_problem since that helper was inserted above it, so the test ran
# on any worker and its DP reference was solved a second time there: issue 32)
@pytest.mark.slow  # about 12 s of CPU at -n 0, start-up included: three searches of 9,715 configurations
@same_worker("qwen3-235b-a22b-256xH100")  # the DP reference is test_moe_plausibility's optimum
def test_cpsat_and_milp_prove_the_qwen3_dualpipe_bench_row():
    """The bench's Qwen3-235B DualPipe row (solver/bench/ladder.dualpipe_instance): its first
    configuration (pp 16, 64 micro-batches, 94 layers, recomputation needed on most stages) left
    the per-stage CP-SAT model a 3.5% gap after 30 s, so the row ran to the 600 s limit
    unproved; the MILP's per-stage model was feasible only at 60 s. CP-SAT and the MILP (each
    with its pair model now) must prove it well inside 120 s, at the optimum the exact threshold
    search (backend dp: the same pair tables, a different search over the pairs' layers) proves."""
    from paraplan.solver.solve import solve

    inst = bundled_instance("qwen3-235b-a22b-256xH100", dualpipe=True)
    cp = solve(inst, "cpsat", 120)
    # its limit a hang guard (bundled_plans.GUARD_LIMIT_S): the DP is the reference here, the
    # 120 s are CP-SAT's and the MILP's
    ref = bundled_optimum("qwen3-235b-a22b-256xH100", "dp", dualpipe=True)
    assert ref.status == "optimal"
    assert cp.status == "optimal"
    assert cp.iter_time_s == pytest.approx(ref.iter_time_s, rel=1e-9)
    assert cp.plan == ref.plan
    milp = solve(inst, "milp", 120)
    assert milp.status == "optimal"
    assert milp.iter_time_s == pytest.approx(ref.iter_time_s, rel=1e-9)


def test_the_random_problems_exercise_memory():
    # not vacuous: some have no split that fits, some optima recompute layers (seen: 13 of the
    # 40 infeasible, 19 optima with recomputed layers)
    infeasible = recomputed = 0
    for seed in SEEDS:
        res = solve_exact(random_problem(seed))
        infeasible += res.status == "infeasible"
        recomputed += res.status == "optimal" and sum(res.full_recompute_layers[0]) > 0
    assert infeasible >= 5 and recomputed >= 5, (infeasible, recomputed)


def enumerated_optimum(p: DualPipeProblem):
    """(Z, n, r) of the first minimum over every split that fits (as `enumerated`), or None;
    the split re-checked by the problem's own fits and evaluate."""
    n, r, z = enumerated_rows(p)
    if not len(z):
        return None
    i = int(np.argmin(z))  # the first of the least
    best = (tuple(int(x) for x in n[i]), tuple(int(x) for x in r[i]))
    assert p.fits(*best) and p.evaluate(*best) == z[i]
    return (float(z[i]), *best)


EDGE_SEEDS = [s for s in SEEDS if s % 3 == 0]
EDGE_OFFSETS_BYTES = (0, -1, 3)  # capacity - the optimum's tightest pair: on it, just off it, just in
# over 5 s, marked slow: seed 24 took 5.5 s in an idle whole-suite --durations run (issue 32)
EDGE_SLOW_SEEDS = (24,)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s in EDGE_SLOW_SEEDS else s
                                  for s in EDGE_SEEDS])
def test_every_solver_agrees_at_the_memory_edge(seed):
    """Issue 35: the capacity set so that the enumerated optimum's tightest pair holds exactly
    its peak (offset 0: it still fits, so it stays the optimum), one byte less (it no longer
    fits: another split or none is optimal) and 3 bytes more; the exact search, CP-SAT and the
    MILP must each reach what enumeration of every split finds, by the problem's own `fits`.
    Before the solvers re-checked memory exactly, CP-SAT and the MILP rounded it up to 1 KiB
    and rejected splits that fit by up to a few KiB."""
    base = random_problem(seed)
    best = enumerated_optimum(base)
    if best is None:
        pytest.skip("no split fits at any capacity drawn here")
    peak = float(base.sums(best[1], best[2])[3].max())
    for offset in EDGE_OFFSETS_BYTES:
        p = replace(base, capacity_bytes=np.full(base.pp, peak + offset))
        if float((p.pair_capacity_bytes() - p.sums(best[1], best[2])[3]).min()) != offset:
            continue  # float arithmetic cannot place the capacity there
        want = enumerated_optimum(p)
        if offset >= 0:  # on the edge the optimum still fits, so it is still the optimum
            assert want is not None and want[0] == best[0], offset
        for res in (solve_exact(p), solve_cpsat(p), solve_milp(p)):
            if want is None:
                assert res.status == "infeasible", (offset, res.backend)
                continue
            assert res.status == "optimal", (offset, res.backend, res.status)
            assert res.objective_s == pytest.approx(want[0], abs=res.tolerance_s + 1e-12), (offset, res.backend)
            assert p.fits(res.layers_per_stage[0], res.full_recompute_layers[0])


def test_balanced_evens_each_pair_where_memory_allows():
    # four stages, pairs (0, 3) and (1, 2), memory never binding: [5, 1, 1, 1] holds 6 layers
    # in pair (0, 3), evened to 3 + 3, and 2 in pair (1, 2), already 1 + 1; the objective
    # reads the pairs' sums only, so it is unchanged
    p = replace(random_problem(0), a=np.zeros(4), t=np.full(4, 1.0), u=np.full(4, 0.5), bw=np.zeros(4),
                ru=np.zeros(4), e=np.zeros(4), g=np.zeros(4), k0=np.zeros(4), kn=np.ones(4), kr=np.ones(4),
                runtime_bytes=0.0, capacity_bytes=np.full(4, 1e9), num_micro_batches=8, layers=8,
                first_min=1, allow_full_recompute=True)
    n, r = balanced(p, [5, 1, 1, 1], [0, 0, 0, 0])
    assert n == [3, 1, 1, 3] and r == [0, 0, 0, 0]
    assert p.evaluate(n, r) == p.evaluate([5, 1, 1, 1], [0, 0, 0, 0])


def test_problem_terms_are_what_simulate_prices(tmp_path):
    # the planner's problem of a configuration (search.dualpipe_problem on
    # cost/dualpipe.terms) evaluates a split to the time cost/dualpipe.iteration gives the
    # plan, and its memory check is the simulator's, on random splits of a small MoE model
    from paraplan.cost import dualpipe
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.plan_specs import Plan
    from paraplan.solver.search import dualpipe_problem
    from paraplan.solver.space import declared_outers
    inst = load_instance(_tiny_dualpipe(tmp_path))
    # the terms as simulate prices them: the predicted time (a quantile objective scales them,
    # solver/search.dualpipe_problem)
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, objective="mean"))
    het = inst
    rng = random.Random(1)
    outers = [o for o in declared_outers(het) if o.classes[0].pp == 4][:6]
    assert outers
    for o in outers:
        p = dualpipe_problem(het, o)
        for _ in range(5):
            cuts = sorted(rng.sample(range(1, p.layers), p.pp - 1))
            n = [b - a for a, b in zip([0] + cuts, cuts + [p.layers])]
            r = [rng.randint(0, x) for x in n]
            plan = Plan.of(_outer(o, p.num_micro_batches), tuple(n), tuple(r))
            it = dualpipe.iteration(inst, plan, reserve_bytes=inst.search.memory_reserve_bytes)
            assert p.evaluate(n, r) == pytest.approx(it.iter_time_s, rel=1e-12)
            assert p.fits(n, r) == (bool((it.mem_bytes <= it.capacity_bytes).all()) and n[0] >= p.first_min)


def _outer(o, m):
    from paraplan.cost.specs import Outer
    c = o.classes[0]
    return Outer(tp=o.tp, pp=c.pp, dp=c.replicas, cp=o.cp, micro_batch=o.micro_batch, num_micro_batches=m,
                 sequence_parallel=o.sequence_parallel, recompute=o.recompute, zero=o.zero, ep=o.ep, etp=o.etp)


TINY_DUALPIPE = """
name: tiny-dualpipe
model: {name: tiny-moe, layers: 8, hidden: 1024, heads: 16, ffn: 4096, vocab: 32000, seq_len: 1024,
        mlp: gelu, moe: {experts: 8, top_k: 2, expert_ffn: 2048, shared_ffn: 1024, dense_layers: 1}}
cluster: {gpu: A100-SXM4-80GB, nodes: 2, gpus_per_node: 8, intra_node_link: nvlink,
          intra_node_gbytes_per_s: 600, nic_gbit_per_s: 200}
job: {global_batch: 32, pipeline_schedule: dualpipe}
"""


def _tiny_dualpipe(tmp_path) -> Path:
    """The tiny GPT of instances/tiny-gpt-8xA100.yaml with 8 experts (a dense first layer) on
    two DGX A100 nodes, under DualPipe."""
    path = tmp_path / "tiny-dualpipe.yaml"
    path.write_text(TINY_DUALPIPE)
    return path
