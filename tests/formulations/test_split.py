"""The layer split of one outer configuration: the exact DP (formulations/split_dp.py) and the
CP-SAT and MILP formulations the planner uses for it (formulations/multiclass*.py with one
replica class on one network, whose problem is exactly this one): hand-derived optima, agreement
with brute force, rounding bounds, time limits and determinism.

Iteration time (cost/schedule.py): Z = (m - 1/v) max_s T_s + (1/v) sum_s T_s + max_s D_s with
T_s = a_s + n_s t_s + r_s u_s, D_s = e_s + n_s g_s; memory
M_s = b_s + n_s (state_s + act_s) - r_s (act_s - ckpt_s) <= K_s.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

from paraplan.cost.coefficients import StageCoefficients, in_flight_micro_batches
from paraplan.cost.schedule import fits, iteration_time_s, stage_mem_bytes
from paraplan.cost.specs import Outer
from paraplan.formulations.multiclass import MultiClassProblem, solve_multiclass_cpsat
from paraplan.formulations.multiclass_milp import solve_multiclass_milp
from paraplan.formulations.quantize import quantize
from paraplan.formulations.result import STATUSES, SplitResult
from paraplan.formulations.split_dp import solve_split_dp

MIB = 2**20
BACKENDS = ("dp", "cpsat", "cbc", "scip", "highs")


def coefficients(*, pp: int, L: int, m: int = 4, v: int = 1, layer_time=1.0, recompute_time=0.5,
                 stage_time=0.0, layer_sync=0.0, stage_sync=0.0, state=0.0, act=0.0, ckpt=0.0,
                 stage_mem=0.0, capacity=1e15) -> StageCoefficients:
    """Hand-built coefficients; scalars broadcast to all pp stages."""

    def col(x) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, float), (pp,)).copy()

    return StageCoefficients(
        outer=Outer(tp=1, pp=pp, dp=1, micro_batch=1, num_micro_batches=m, virtual_stages=v),
        layers=L, layer_time_s=col(layer_time), recompute_time_s=col(recompute_time),
        stage_time_s=col(stage_time), layer_sync_time_s=col(layer_sync),
        stage_sync_time_s=col(stage_sync), layer_state_bytes=col(state), layer_act_bytes=col(act),
        layer_ckpt_bytes=col(ckpt), stage_mem_bytes=col(stage_mem), capacity_bytes=col(capacity))


@dataclass(frozen=True)
class Result:
    """What every backend returns, for one class: split, recompute counts, objective, bound, and
    the documented bound on how far an "optimal" objective may sit above the true optimum (and
    on objective - bound): 2E for the DP (split_dp.py), the formulations' own tolerance_s for
    CP-SAT and the MILPs (multiclass.py, multiclass_milp.py)."""

    status: str
    layers_per_stage: tuple[int, ...] | None
    full_recompute_layers: tuple[int, ...] | None
    objective_s: float | None
    bound_s: float | None
    backend: str
    tolerance_s: float


def lone_class(c: StageCoefficients, allow_full_recompute: bool = True) -> MultiClassProblem:
    """`c` as the planner's inner problem of one class on one network (its count fixed)."""
    return MultiClassProblem(coeffs=((c,),), replicas=(1,), total_micro_batches=c.outer.num_micro_batches,
                             allow_full_recompute=allow_full_recompute, virtual_stages=c.outer.virtual_stages)


def solve(backend: str, c: StageCoefficients, allow_full_recompute: bool = True,
          time_limit_s: float = 10.0, **kw) -> Result:
    if backend == "dp":
        r = solve_split_dp(c, allow_full_recompute, time_limit_s=time_limit_s, **kw)
        return Result(r.status, r.layers_per_stage, r.full_recompute_layers, r.objective_s, r.bound_s,
                      r.backend, 2 * quantize(c, allow_full_recompute).objective_error_s)
    p = lone_class(c, allow_full_recompute)
    r = (solve_multiclass_cpsat(p, time_limit_s=time_limit_s, **kw) if backend == "cpsat"
         else solve_multiclass_milp(p, time_limit_s, backend))
    found = r.layers_per_stage is not None
    return Result(r.status, tuple(r.layers_per_stage[0]) if found else None,
                  tuple(r.full_recompute_layers[0]) if found else None, r.objective_s, r.bound_s,
                  r.backend, r.tolerance_s)


def tolerance_s(result: Result | SplitResult, c: StageCoefficients, allow_full_recompute: bool = True) -> float:
    """Result.tolerance_s; for the DP's own SplitResult, 2E (split_dp.py)."""
    if isinstance(result, SplitResult):
        return 2 * quantize(c, allow_full_recompute).objective_error_s
    return result.tolerance_s


def brute_force(c: StageCoefficients, allow_full_recompute: bool = True) -> float | None:
    """Optimal iteration time over every (n, r), or None when no split fits."""
    pp, L, v = c.pp, c.layers, c.outer.virtual_stages
    rows_n, rows_r = [], []
    for n in itertools.product(range(v, L + 1, v), repeat=pp):
        if sum(n) != L:
            continue
        for r in itertools.product(*((range(x + 1) if allow_full_recompute else (0,)) for x in n)):
            rows_n.append(n)
            rows_r.append(r)
    if not rows_n:
        return None
    n, r = np.array(rows_n), np.array(rows_r)
    ok = fits(c, n, r)
    return float(iteration_time_s(c, n[ok], r[ok]).min()) if ok.any() else None


def check_consistent(result: Result | SplitResult, c: StageCoefficients, allow_full_recompute: bool = True) -> None:
    """Invariants of every result: split re-evaluates, fits, bound below objective."""
    assert result.status in STATUSES
    if result.status in ("optimal", "feasible"):
        n, r = np.array(result.layers_per_stage), np.array(result.full_recompute_layers)
        assert n.sum() == c.layers and np.all(n % c.outer.virtual_stages == 0) and np.all(n >= 1)
        assert np.all(r >= 0) and np.all(r <= n) and (allow_full_recompute or not r.any())
        assert fits(c, n, r)
        assert result.objective_s == float(iteration_time_s(c, n, r))
        if result.bound_s is not None:
            assert result.bound_s <= result.objective_s
    if result.status == "optimal":
        assert result.objective_s - result.bound_s <= tolerance_s(result, c, allow_full_recompute)
    if result.status == "infeasible":
        assert result.bound_s == math.inf
    if result.status in ("infeasible", "timeout"):
        assert result.layers_per_stage is None and result.objective_s is None


# ---------------------------------------------------------------- (a) hand-derived optima

# In-flight micro-batches under 1F1B with pp = 2: stage 0 holds 2, stage 1 holds 1
# (in_flight_micro_batches(2, 4, 1) == [2, 1]); per micro-batch a layer stores 10 MiB of
# activations, or a 1 MiB checkpoint when fully recomputed.
ACT_2F1B = np.array([20.0, 10.0]) * MIB
CKPT_2F1B = np.array([2.0, 1.0]) * MIB

HAND_CASES = {
    # pp=2, L=4, m=4, t=1: Z = 3 max(n) + 4 (r = 0, since recompute only adds time);
    # (2,2) -> 3*2 + 4 = 10; (1,3) -> 13.
    "equal_stages": (coefficients(pp=2, L=4), True, (2, 2), (0, 0), 10.0),
    # stage 1 carries a = 2 (output layer): T = (n0, 2 + n1), Z = 3 max T + sum T;
    # (4,2): T=(4,4) -> 12 + 8 = 20; (3,3): T=(3,5) -> 15 + 8 = 23; (5,1): T=(5,3) -> 23.
    "heavy_last_stage": (coefficients(pp=2, L=6, stage_time=[0.0, 2.0]), True, (4, 2), (0, 0), 20.0),
    # memory per stored layer (20, 10) MiB, capacity 35.25 MiB, recompute saves (18, 9) MiB:
    # (2,2): M0 = 40 > 35.25 -> r0 = 1: M0 = 22, T = (2.5, 2) -> 3*2.5 + 4.5 = 12;
    # (1,3) without recompute: M = (20, 30) fits, T = (1, 3) -> 9 + 4 = 13;
    # (3,1): M0 = 60 needs r0 = 2, T = (4, 1) -> 12 + 5 = 17. Optimum (2,2), r = (1,0), 12.
    "memory_forces_recompute_stage0": (coefficients(pp=2, L=4, act=ACT_2F1B, ckpt=CKPT_2F1B,
                                                    capacity=35.25 * MIB), True, (2, 2), (1, 0), 12.0),
    # the same without full recompute: (1,3) at 13.
    "memory_without_recompute": (coefficients(pp=2, L=4, act=ACT_2F1B, ckpt=CKPT_2F1B,
                                              capacity=35.25 * MIB), False, (1, 3), (0, 0), 13.0),
    # capacity 19.25 MiB: (2,2) needs r0 >= 2 (40-36=4) and r1 >= 1 (20-9=11): T=(3, 2.5) -> 14.5;
    # (1,3): r0 >= 1, r1 >= 2: T=(1.5, 4) -> 17.5; (3,1): r0 >= 3: T=(4.5, 1) -> 19.
    "tight_memory_recompute_both": (coefficients(pp=2, L=4, act=ACT_2F1B, ckpt=CKPT_2F1B,
                                                 capacity=19.25 * MIB), True, (2, 2), (2, 1), 14.5),
    # interleaved, v=2, L=8: n in {2,4,6}; Z = 3.5 max T + sum T / 2;
    # (4,4) -> 14 + 4 = 18; (2,6) -> 21 + 4 = 25.
    "interleaved_v2": (coefficients(pp=2, L=8, v=2), True, (4, 4), (0, 0), 18.0),
    # m=1, v=1: the max T term has weight 0; Z = sum T + max D = 4 + max(n0, 3 n1);
    # (3,1) -> 4 + 3 = 7; (2,2) -> 4 + 6 = 10.
    "sync_dominates": (coefficients(pp=2, L=4, m=1, layer_sync=[1.0, 3.0]), True, (3, 1), (0, 0), 7.0),
    # single stage: everything on it, Z = (4-1)*5 + 5 + 0 = 20.
    "single_stage": (coefficients(pp=1, L=5), True, (5,), (0,), 20.0),
}

INFEASIBLE_CASES = {
    # the same memory with capacity 19.25 MiB and no recompute: (1,3) M1=30, (2,2) M0=40, (3,1) M0=60
    "memory_without_recompute": (coefficients(pp=2, L=4, act=ACT_2F1B, ckpt=CKPT_2F1B,
                                              capacity=19.25 * MIB), False),
    # stage 1's fixed memory (16 MiB) exceeds its 15.25 MiB on its own
    "fixed_memory_over_capacity": (coefficients(pp=2, L=4, stage_mem=[0.0, 16 * MIB],
                                                capacity=15.25 * MIB), True),
    # v=2 needs an even L
    "layers_not_multiple_of_v": (coefficients(pp=2, L=5, v=2), True),
    # v=2, pp=4 needs at least 8 layers
    "too_few_layers_for_chunks": (coefficients(pp=4, L=4, v=2), True),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(HAND_CASES))
def test_hand_derived_optimum(backend, case):
    c, allow, n, r, objective_s = HAND_CASES[case]
    assert brute_force(c, allow) == pytest.approx(objective_s, rel=1e-12)
    result = solve(backend, c, allow, time_limit_s=10.0)
    check_consistent(result, c, allow)
    assert result.status == "optimal"
    assert result.backend == backend
    assert (result.layers_per_stage, result.full_recompute_layers) == (n, r)
    assert result.objective_s == pytest.approx(objective_s, rel=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(INFEASIBLE_CASES))
def test_hand_derived_infeasible(backend, case):
    c, allow = INFEASIBLE_CASES[case]
    assert brute_force(c, allow) is None
    result = solve(backend, c, allow, time_limit_s=10.0)
    check_consistent(result, c, allow)
    assert result.status == "infeasible"


# ---------------------------------------------------------------- (b) random sets vs brute force

def random_coefficients(seed: int) -> tuple[StageCoefficients, bool]:
    """Small random instance. Times are arbitrary floats (so CP-SAT's rounding is exercised);
    memory sits on a 1/2 MiB grid and capacities on a 1/4 MiB offset, so no split lies exactly
    at a capacity and the solvers' conservative memory margins cannot change the answer."""
    rng = np.random.default_rng(seed)
    pp = int(rng.integers(1, 5))
    v = int(rng.choice([1, 2])) if pp > 1 else 1  # interleaving needs pp > 1
    L = v * int(rng.integers(pp, 12 // v + 1))
    m = int(rng.integers(1, 9)) if v == 1 else pp * int(rng.integers(1, 3))  # Megatron: pp | m
    inflight = in_flight_micro_batches(pp, m, v)  # multiples of 1/2
    act = rng.integers(50, 1000, pp) * inflight * MIB
    ckpt = np.floor(act / MIB * rng.uniform(0.05, 0.3, pp)) * MIB
    layer_time = rng.uniform(0.01, 0.1, pp)
    c = coefficients(
        pp=pp, L=L, m=m, v=v, layer_time=layer_time,
        recompute_time=layer_time * rng.uniform(0.2, 0.5, pp), stage_time=rng.uniform(0, 0.1, pp),
        layer_sync=rng.uniform(0, 0.05, pp), stage_sync=rng.uniform(0, 0.05, pp),
        state=rng.integers(1, 300, pp) * MIB, act=act, ckpt=ckpt,
        stage_mem=rng.integers(0, 2000, pp) * MIB)
    uniform = stage_mem_bytes(c, np.full(pp, L / pp), np.zeros(pp))
    capacity = (np.floor(uniform.max() * rng.uniform(0.3, 1.3) / MIB) + 0.25) * MIB
    allow = bool(rng.random() < 0.75)
    return dataclasses.replace(c, capacity_bytes=np.full(pp, capacity)), allow


@pytest.mark.parametrize("seed", range(36))
def test_random_instances_agree_with_brute_force(seed):
    c, allow = random_coefficients(seed)
    best = brute_force(c, allow)
    cp, milp, dp = (solve(b, c, allow) for b in ("cpsat", "cbc", "dp"))
    for result in (cp, milp, dp):
        check_consistent(result, c, allow)
    if best is None:
        assert cp.status == milp.status == dp.status == "infeasible"
        return
    assert cp.status == milp.status == dp.status == "optimal"
    for result in (cp, milp, dp):
        assert best - 1e-12 * best <= result.objective_s <= best + tolerance_s(result, c, allow)
        assert result.bound_s <= best * (1 + 1e-12)
    assert abs(cp.objective_s - milp.objective_s) <= tolerance_s(cp, c, allow) + tolerance_s(milp, c, allow)


def test_random_instances_cover_the_interesting_cases():
    """The seeds above include infeasible sets, v = 2, recompute in the optimum, and pp = 1..4."""
    infeasible = interleaved = recomputed = 0
    pps = set()
    for seed in range(36):
        c, allow = random_coefficients(seed)
        pps.add(c.pp)
        interleaved += c.outer.virtual_stages == 2
        if brute_force(c, allow) is None:
            infeasible += 1
        elif any(solve("cbc", c, allow).full_recompute_layers):
            recomputed += 1
    assert pps == {1, 2, 3, 4}
    assert infeasible >= 3 and interleaved >= 5 and recomputed >= 5


@pytest.mark.parametrize("seed", range(10))
def test_quantization_error_is_bounded(seed):
    """|q Ẑ(x)/v - Z(x)| <= E for every split x; quantized memory use >= real, capacity <= real."""
    c, allow = random_coefficients(100 + seed)
    rng = np.random.default_rng(seed)
    c = dataclasses.replace(c, layer_act_bytes=c.layer_act_bytes + rng.uniform(0, 1000, c.pp),
                            capacity_bytes=c.capacity_bytes + rng.uniform(0, 1000, c.pp))
    Q = quantize(c, allow)
    v, m, L = c.outer.virtual_stages, c.outer.num_micro_batches, c.layers
    for _ in range(200):
        cuts = np.sort(rng.choice(np.arange(1, L // v), c.pp - 1, replace=False)) if c.pp > 1 else []
        n = v * np.diff(np.r_[0, cuts, L // v])
        r = rng.integers(0, n + 1) if allow else np.zeros(c.pp, int)
        t = Q.stage_time_q + n * Q.layer_time_q + r * Q.recompute_time_q
        d = Q.stage_sync_q + n * Q.layer_sync_q
        z_q = (v * m - 1) * t.max() + t.sum() + v * d.max()
        assert abs(Q.time_quantum_s * z_q / v - iteration_time_s(c, n, r)) <= Q.objective_error_s
        mem_q = Q.stage_mem_q + n * Q.layer_mem_q - r * Q.recompute_saving_q
        assert np.all(mem_q * Q.mem_quantum_bytes >= stage_mem_bytes(c, n, r))
    assert np.all(Q.capacity_q * Q.mem_quantum_bytes <= c.capacity_bytes)


def test_quantum_grows_to_keep_the_objective_below_2_to_40():
    c = coefficients(pp=4, L=64, m=4096, layer_time=10.0, recompute_time=5.0)
    Q = quantize(c)
    assert Q.time_quantum_s > 1e-9
    t_ub = np.abs(c.stage_time_s) + c.layers * (np.abs(c.layer_time_s) + np.abs(c.recompute_time_s))
    assert (4096 - 1 + c.pp) * t_ub.max() / Q.time_quantum_s <= 2**40
    result = solve_split_dp(c)  # the DP solves the quantised integers
    assert result.quantum_s == Q.time_quantum_s
    assert result.status == "optimal" and result.layers_per_stage == (16, 16, 16, 16)


# ---------------------------------------------------------------- (c) time limits, determinism, hints

def memory_tight_instance(*, pp: int, L: int, m: int, v: int, seed: int,
                          per_layer_scale: float = 1.0) -> StageCoefficients:
    """GPT-3-like per-stage times, memory at 45% of what a uniform split without recompute
    needs: forces recompute on the early stages. `per_layer_scale` shrinks every per-layer
    time and byte (a deeper model of thinner layers), not the per-stage ones."""
    k = per_layer_scale
    rng = np.random.default_rng(seed)
    act = k * rng.uniform(300, 400, pp) * MIB * in_flight_micro_batches(pp, m, v)
    c = coefficients(
        pp=pp, L=L, m=m, v=v, layer_time=k * rng.uniform(0.015, 0.018, pp),
        recompute_time=k * rng.uniform(0.005, 0.006, pp),
        stage_time=np.r_[0.02, rng.uniform(0.003, 0.004, pp - 2), 0.06],
        layer_sync=k * rng.uniform(0.01, 0.02, pp), stage_sync=rng.uniform(0.01, 0.04, pp),
        state=k * rng.uniform(900, 1000, pp) * MIB, act=act, ckpt=0.1 * act,
        stage_mem=rng.uniform(2000, 4000, pp) * MIB)
    uniform = stage_mem_bytes(c, np.full(pp, L / pp), np.zeros(pp))
    return dataclasses.replace(c, capacity_bytes=np.full(pp, 0.45 * uniform.max()))


def big_instance(seed: int = 1) -> StageCoefficients:
    """pp=16, L=128, v=2, m=64 (memory_tight_instance)."""
    return memory_tight_instance(pp=16, L=128, m=64, v=2, seed=seed)


@pytest.fixture(scope="module")
def big():
    c = big_instance()
    reference = solve("cpsat", c, time_limit_s=30.0)
    assert reference.status == "optimal"
    return c, reference


def test_big_instance_all_backends_agree(big):
    c, reference = big
    check_consistent(reference, c)
    for backend in ("cbc", "scip", "highs"):
        result = solve(backend, c, time_limit_s=30.0)
        check_consistent(result, c)
        assert result.status == "optimal"
        assert abs(result.objective_s - reference.objective_s) <= (tolerance_s(result, c)
                                                                   + tolerance_s(reference, c))


@pytest.mark.parametrize("limit_s", [1e-4, 1e-3, 3e-3])
def test_cpsat_deterministic_time_limit_is_reproducible(big, limit_s, monkeypatch):
    """Deterministic-time limits below and at what the proof needs (about 1e-2 work units):
    whatever comes back is honest (never 'optimal' without the proof's tolerance), its bound is
    below the true optimum, and a repeat gives the same answer.

    The solver also stops on the wall clock WALL_GRACE_S (0.25 s) past the limit, a guard against
    a work-unit estimate that runs long; on a machine loaded 10-fold that clock struck first and
    two runs stopped at different points (bounds 11.58 vs 12.31). That stop is not reproducible by
    design, so it is widened here: only the deterministic limit, which this test is about, stops."""
    monkeypatch.setattr("paraplan.formulations.multiclass.WALL_GRACE_S", 60.0)
    c, reference = big
    runs = [solve("cpsat", c, time_limit_s=limit_s, seed=3) for _ in range(2)]
    for result in runs:
        check_consistent(result, c)
        assert result.bound_s is None or result.bound_s <= reference.objective_s
    key = [(x.status, x.layers_per_stage, x.full_recompute_layers, x.objective_s, x.bound_s) for x in runs]
    assert key[0] == key[1]


@pytest.mark.parametrize("backend", ["cbc", "scip", "highs"])
def test_milp_time_limit_never_claims_unproved_optimality(big, backend):
    """Wall-clock limits are not reproducible, so only honesty is checked: no false
    "infeasible" (CBC 2.10.3's preprocessing gave one at 1 ms), "optimal" only with the proof's
    tolerance, and bounds below the true optimum."""
    c, reference = big
    for limit_s in (0.0005, 0.001, 0.002, 0.01):
        result = solve(backend, c, time_limit_s=limit_s)
        check_consistent(result, c)
        assert result.status != "infeasible"
        assert result.bound_s is None or result.bound_s <= reference.objective_s


def test_cpsat_hint_is_used_under_a_tiny_limit(big, monkeypatch):
    """A limit of 1e-3 deterministic units still returns the hinted solution. The wall-clock
    backstop (multiclass.WALL_GRACE_S past the limit) is lifted here: on a loaded two-core
    machine 0.25 s of wall time stopped CP-SAT before it read the hint (a failure seen once under
    load, passing alone), and deterministic time is the same on every machine."""
    from paraplan.formulations import multiclass
    monkeypatch.setattr(multiclass, "WALL_GRACE_S", 60.0)
    c, reference = big
    hint = ((c.outer.num_micro_batches,), (reference.layers_per_stage,), (reference.full_recompute_layers,))
    result = solve("cpsat", c, time_limit_s=1e-3, hint=hint)
    check_consistent(result, c)
    assert result.status in ("optimal", "feasible")
    assert result.objective_s <= reference.objective_s + tolerance_s(reference, c)


def test_cbc_runs_in_parallel_in_private_directories(tmp_path, monkeypatch):
    """Concurrent CBC runs neither collide nor leave files behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cases = [random_coefficients(seed) for seed in range(8)]
    serial = [solve("cbc", c, allow) for c, allow in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda case: solve("cbc", *case), cases))
    for a, b in zip(serial, parallel):
        assert (a.status, a.layers_per_stage, a.full_recompute_layers) == (
            b.status, b.layers_per_stage, b.full_recompute_layers)
    assert list(tmp_path.iterdir()) == []


def test_milp_rejects_an_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        solve_multiclass_milp(lone_class(coefficients(pp=2, L=4)), 10.0, "gurobi")


def test_split_result_validates_itself():
    with pytest.raises(ValueError, match="status"):
        SplitResult(status="done", layers_per_stage=None, full_recompute_layers=None, objective_s=None,
                    bound_s=None, wall_time_s=0.0, backend="cpsat", quantum_s=1e-9)
    with pytest.raises(ValueError, match="split"):
        SplitResult(status="optimal", layers_per_stage=None, full_recompute_layers=None,
                    objective_s=None, bound_s=None, wall_time_s=0.0, backend="cpsat", quantum_s=1e-9)
