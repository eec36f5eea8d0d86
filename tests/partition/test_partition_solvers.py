"""The per-layer partition problem: segmented DP, MILP (epsilon-constraint) and brute force
agree; the planner's candidate plans lose no optimum; plan == exhaustive with partitions on."""

import dataclasses
import functools
import itertools

import numpy as np
import pytest
from partition_support import instance_and_site, small_instance

from paraplan.cost import partition as P
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.coefficients import build, homogeneous_placement
from paraplan.cost.specs import Cluster, Link, Mlp, SearchSpace
from paraplan.formulations.partition import solve_partition_milp
from paraplan.formulations.partition_dp import min_time, pareto_front
from paraplan.solver import partition_plans as PP
from paraplan.solver.solve import solve as plan
from paraplan.solver.exhaustive import exhaustive

# the hand derivations below assume an ideal network: wire speed, no per-call latency and
# no overlap slowdown (the measured defaults of cost/comm.py are checked in tests/cost)
NET = NetEfficiency(intra_node=1.0, inter_node=1.0, overlap_slowdown=0.0, call_latency_s=0.0)

# (tp, nodes, model overrides, micro_batch, sequence parallel): inside a node, across nodes,
# a 4x4 grid, SwiGLU+GQA, the split stream (seq or B2x2; with tp = 16 also B4x4)
TABLES = [
    (4, 1, {}, 1, False),
    (8, 2, {}, 2, False),
    (16, 4, {}, 1, False),
    (8, 2, dict(mlp=Mlp.SWIGLU, kv_heads=4, ffn=2816), 4, False),
    (8, 2, {}, 2, True),  # split stream: seq or B2x2
    (16, 4, {}, 1, True),  # seq, B2x2 or B4x4
]


def _problem(tp, nodes, kw, mb, sp):
    inst, o, site = instance_and_site(tp=tp, nodes=nodes, **kw)
    o = dataclasses.replace(o, micro_batch=mb, num_micro_batches=o.num_micro_batches // mb,
                            sequence_parallel=sp)
    return PP.problem_from_table(P.layer_table(inst, o, site, NET))


def _brute_force(pb):
    rows = []
    for combo in itertools.product(*[range(len(pb.time_s[o])) for o in pb.ops]):
        choice = dict(zip(pb.ops, combo))
        rows.append((*pb.evaluate(choice), choice))
    return rows


def _front(points):
    """Pareto set (to minimise every coordinate) of a list of tuples: the distinct rows that no
    other row dominates (PP.pareto_mask keeps the first of equal rows)."""
    v = np.array(sorted(set(points)))
    return [tuple(r) for r in v[PP.pareto_mask(v)]]


AGREEMENT = {"front_points": 0, "milp_eps_solves": 0}


@pytest.mark.parametrize("case", range(len(TABLES)))
def test_dp_milp_and_brute_force_agree(case):
    pb = _problem(*TABLES[case])
    brute = _brute_force(pb)
    dp = pareto_front(pb)
    # 1. the DP's front is exactly the brute-force Pareto set of (time, act, workspace,
    #    replicated params, sync), and token splits are on it (they are real candidates)
    want = _front([r[:5] for r in brute])
    assert len(dp) == len(want)
    assert np.allclose(sorted(r[:5] for r in dp), sorted(want), rtol=1e-12, atol=0)
    assert any(pb.labels[o][k] == "T" for *_, ch in dp for o, k in ch.items())
    if TABLES[case][4]:  # block streams are on the front too
        assert any(pb.labels[P.STREAM][ch[P.STREAM]].startswith("B") for *_, ch in dp)
    # 2. at every front point's caps, the MILP's optimum equals the DP's (the epsilon problem)
    for t, a, w, r, g, _ in dp:
        m = solve_partition_milp(pb, act_cap_bytes=a, ws_cap_bytes=w, params_cap=r, sync_cap_s=g)
        d = min_time(pb, act_cap_bytes=a, ws_cap_bytes=w, params_cap=r, sync_cap_s=g)
        assert m.status == d.status == "optimal"
        assert m.time_s == pytest.approx(d.time_s, rel=1e-9) == t
        AGREEMENT["milp_eps_solves"] += 1
    AGREEMENT["front_points"] += len(dp)
    # 3. a cap below every plan is infeasible for both
    least = min(r[1] for r in brute)
    assert solve_partition_milp(pb, act_cap_bytes=least - 1).status == "infeasible"
    assert min_time(pb, act_cap_bytes=least - 1).status == "infeasible"


def test_dp_segments_follow_the_residual_cuts():
    from paraplan.formulations.partition_dp import segments
    pb = _problem(*TABLES[0])
    assert segments(pb) == [["qkv", "attn_core", "attn_out"], ["mlp_in", "mlp_out"]]


def _derived(c):
    return np.concatenate([c.layer_time_s, c.recompute_time_s, c.layer_sync_time_s,
                           c.stage_sync_time_s, c.layer_state_bytes, c.layer_act_bytes,
                           c.layer_ckpt_bytes, c.stage_mem_bytes])


# (ZeRO, nodes of 4 GPUs = dp, sequence parallel, sequence length): the last case has one
# replica and long sequences, so every plan's backward hides its sync (g <= bwd) and the
# cached plan-only front is used; the others use the front with g and max(0, g - bwd)
@pytest.mark.parametrize("zero,dp_nodes,sp,seq_len", [(0, 4, False, 1024), (1, 4, False, 1024),
                                                      (3, 4, False, 1024), (0, 1, False, 1024),
                                                      (1, 4, True, 1024), (0, 1, False, 4096)])
def test_every_plan_is_dominated_by_a_candidate(zero, dp_nodes, sp, seq_len):
    """The module docstring's claim, checked on the built coefficients: every per-operator plan
    of an outer configuration has a candidate whose coefficients are all <= its own (so no
    split/recompute does better with it); also the optimistic coefficients bound all plans."""
    inst = small_instance(nodes=dp_nodes, gpus_per_node=4, seq_len=seq_len)
    n = inst.cluster.num_gpus
    o = dataclasses.replace(instance_and_site(tp=4, nodes=dp_nodes)[1], zero=zero, sequence_parallel=sp)
    pl = homogeneous_placement(inst.cluster.one_group, o)
    PP._FRONTS.clear()
    cands, cand_rows = PP._candidates(inst, o, pl.sites[0], pl.dp_ranks, NET)
    plan_only = [k[2] is None for k in PP._FRONTS.entries]
    assert plan_only == [seq_len == 4096 or zero == 3]
    cand_c = [_derived(build(inst, o, NET, placement=pl, layer_fn=P.partition_layer_fn(p))) for p in cands]
    table = P.table_for(inst, o, pl.sites[0], NET)
    idx, rows = P.all_plans(table)
    opt = _derived(PP.optimistic_coefficients(inst, o, pl, cand_rows, 0.0, NET))
    assert len(cands) < len(idx)  # the filter does something
    checked = 0
    for row in idx:
        plan = P.plan_from_indices(table, row)
        if not P.plan_allowed(plan, o):  # token splits are not offered with ZeRO-3
            continue
        checked += 1
        c = _derived(build(inst, o, NET, placement=pl, layer_fn=P.partition_layer_fn(plan)))
        # relative 1e-12, and 1e-15 s absolute: ZeRO-3's recompute term is a difference of
        # maxima that rounds to +-4e-19 s instead of 0
        tol = 1e-12 * np.abs(c) + 1e-15
        assert any((cc <= c + tol).all() for cc in cand_c)
        assert (opt <= c + tol).all()
    assert n == o.tp * o.dp
    # every plan of the declared space was checked (4 linear candidates with T, 3 without;
    # with sequence parallelism two stream layouts, seq and B2x2)
    on = dataclasses.replace(inst, search=dataclasses.replace(
        inst.search, tensor_partitions=("megatron", "spatial_temporal")))
    assert checked == PP.plans_per_outer(on, o) == (4 if zero < 3 else 3) ** 4 * 3 * (2 if sp else 1)
    if zero < 3:  # some candidate replicates a weight (T), so the state column matters
        assert any(p[op] == "T" for p in cands for op in P.LINEAR_OPS)


def _cross_node_instance(**search):
    inst = small_instance(nodes=2, gpus_per_node=4, layers=2, hidden=2048, heads=32, ffn=8192,
                          seq_len=2048, global_batch=8,
                          search=SearchSpace(pp=(1,), micro_batch=(2, 4, 8), zero=(0,), cp=(1,),
                                             virtual_stages=(1,), tp_across_nodes=True,
                                             tensor_partitions=("megatron", "spatial_temporal"),
                                             **search))
    return inst  # 150 GB/s inside a node, 3.125 GB/s per GPU between nodes


# Sequence parallelism in the cross-node space: both values (its default), without, with.
BOTH, OFF, ON = (False, True), (False,), (True,)


@functools.lru_cache(maxsize=None)
def _cross_node_case(sp: tuple[bool, ...]):
    """_cross_node_instance with search.sequence_parallel = sp, one object per test process:
    pricing keeps its layer costs per instance object (cost/coefficients), so the tests that plan
    and brute-force it share them (agreement_support.random_cluster_case). Frozen: sharing it
    changes no answer. `sp` is always passed: lru_cache keys f() and f(default) apart."""
    return _cross_node_instance(sequence_parallel=sp)


@functools.lru_cache(maxsize=None)
def _cross_node_plan():
    """plan() of the cross-node space (both sequence-parallel values), once per test process:
    three tests read it (issue 32). Read only: the result is shared."""
    return plan(_cross_node_case(BOTH))


@functools.lru_cache(maxsize=None)
def _cross_node_exhaustive(sp: tuple[bool, ...]):
    """exhaustive() of _cross_node_case(sp), once per test process. Read only."""
    return exhaustive(_cross_node_case(sp))


def _least(parts):
    """The optimum of a space brute-forced in parts (an ExhaustiveResult each): the part with the
    least value (quantile_s, what exhaustive minimises over every memory tier) among those with
    a plan. exhaustive() of the union lists the same plans and keeps the least: the same brute
    force, in two calls, so that a part another test checks is listed once."""
    found = [e for e in parts if e.plan is not None]
    return min(found, key=lambda e: e.quantile_s) if found else parts[0]


@pytest.mark.slow
def test_planner_equals_exhaustive_with_partitions():
    """plan() (candidates + pre-pass + branch-and-bound) vs brute force over every per-operator
    plan of every outer configuration, 2-layer model on 2 x 4 GPUs: same optimum, and it uses
    the spatial-temporal primitive (so the check is not about Megatron only)."""
    inst = _cross_node_case(BOTH)
    # brute force over the space in its halves without and with sequence parallelism, the
    # second being test_planner_equals_exhaustive_with_sequence_parallel's whole space: listed
    # once for both: the two tests took 17.1-20.0 s of CPU with the whole space listed here,
    # 9.8-10.0 s so (-n 0, two runs each at load 15-18, issue 32)
    halves = [_cross_node_exhaustive(OFF), _cross_node_exhaustive(ON)]
    r, e = _cross_node_plan(), _least(halves)
    assert r.status == "optimal"
    assert r.iter_time_s == pytest.approx(e.iter_time_s, rel=1e-9)
    assert any("P2x2" in spec for _, spec in r.plan.partitions)
    meg = plan(dataclasses.replace(inst, search=dataclasses.replace(inst.search, tensor_partitions=("megatron",))))
    assert meg.iter_time_s > r.iter_time_s and not meg.plan.partitions
    # the space count covers every layer plan: 768 for tp = 8, 243 for tp = 4
    assert sum(h.candidates for h in halves) > 768


def test_default_space_is_megatron_only():
    from paraplan.solver.planner import coefficient_table
    inst = _cross_node_case(BOTH)
    off = dataclasses.replace(inst, search=dataclasses.replace(inst.search, tensor_partitions=("megatron",)))
    assert all(not c.partitions for c in coefficient_table(off))
    assert any(c.partitions for c in coefficient_table(inst))


def test_every_pair_is_accounted_for():
    """solved + pruned (memory, bound, dominance) + unresolved = every (outer, layer plan) pair."""
    r = _cross_node_plan()
    assert r.pruned_by_dominance > 0
    assert (r.solved + r.pruned_by_bound + r.pruned_by_memory + r.pruned_by_dominance
            + r.unresolved) == r.outer_configs


def _random_instance(seed):
    rng = np.random.default_rng(seed)
    hidden = int(rng.choice([512, 1024, 2048]))
    inst = small_instance(nodes=int(rng.choice([1, 2, 2])), gpus_per_node=4, layers=4, hidden=hidden,
                          heads=16, ffn=int(rng.choice([2, 4])) * hidden,
                          seq_len=int(rng.choice([512, 2048])), global_batch=8,
                          mlp=Mlp.SWIGLU if rng.random() < 0.5 else Mlp.GELU,
                          hbm_gib=float(rng.choice([2, 8, 32])),
                          # tp >= 4 and no sequence parallelism, so that the layer plan is
                          # always a real choice
                          search=SearchSpace(tp=(4, 8), pp=(1, int(rng.choice([1, 2]))), micro_batch=(1, 2, 4), cp=(1,),
                                             sequence_parallel=(False,),
                                             zero=tuple(sorted({0, int(rng.choice([1, 3]))})),
                                             virtual_stages=(1,), tp_across_nodes=True,
                                             tensor_partitions=("megatron", "spatial_temporal")))
    link = Link(bw_bytes_per_s=float(rng.choice([16e9, 150e9])), latency_s=5e-6)
    return dataclasses.replace(inst, cluster=Cluster.of(dataclasses.replace(inst.cluster.one_group, intra_node=link)))


# the seeds whose case takes over 5 s of CPU, marked slow: per-test CPU clock, -n 0, load 7-9
# (issue 32): 0: 9.0 s, 1: 12.4, 5: 7.8, 6: 9.3; 3: 2.5 (brute force over every layer plan is
# nearly all of it)
RANDOM_SLOW_SEEDS = (0, 1, 5, 6)


def _random_agreement(seed: int) -> bool:
    """plan() with per-operator partitions against brute force over every layer plan on
    _random_instance(seed); whether the optimum uses the P primitive.
    One case per seed, so that pytest-xdist shares them among its workers (one test of 8 seeds
    ran alone on one worker: 52 s of CPU, issue 32)."""
    inst = _random_instance(seed)
    r, e = plan(inst, backend="milp" if seed % 2 else "cpsat"), exhaustive(inst)
    if e.iter_time_s is None:
        assert r.status == "infeasible"
        return False
    assert r.status == "optimal"
    assert r.iter_time_s == pytest.approx(e.iter_time_s, rel=1e-6)
    return any("P" in spec for _, spec in r.plan.partitions)


# not vacuous: the agreement below is not Megatron-only (measured over seeds 0-7: seed 6's
# optimum uses the P primitive, no other's does; seed 0 is infeasible). Its case checks it (a
# test of its own planned seed 6 again, 9.3 s, wherever pytest-xdist had run the case on the
# other worker; issue 32)
PRIMITIVE_SEED = 6
# The cases run, of seeds 0-7 (issue 32): seed 6 and a cover of the others by branch coverage,
# cheapest first: each of the 8 cases run under its own coverage context (coverage.py,
# branch=True, over cost/, formulations/ and solver/), the seed adding the most lines and arcs not
# yet reached per second of its case taken next, until these 5 reach every line and arc the 8
# reached (0, 1 and 5 alone reach some; run alone, the 5 reach all of them). Seeds 2, 4 and 7
# drove no line or branch of the planner, the brute force or pricing that these do not; under
# coverage the cases took 80.8 -> 49.1 s of CPU.
RANDOM_SEEDS = (0, 1, 3, 5, 6)


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s in RANDOM_SLOW_SEEDS else s
                                  for s in RANDOM_SEEDS])
def test_planner_and_exhaustive_agree_on_random_instances(seed):
    """Seeded random instances (model width, GPUs, link speed, memory, ZeRO): the optimum of
    plan() with per-operator partitions equals brute force over every layer plan."""
    uses_primitive = _random_agreement(seed)
    if seed == PRIMITIVE_SEED:
        assert uses_primitive


def test_same_answer_for_any_threads_and_backend():
    inst = _cross_node_case(BOTH)
    a, b, c = _cross_node_plan(), plan(inst, threads=2), plan(inst, backend="milp")
    assert a.plan == b.plan == c.plan and a.plan.partitions
    assert a.iter_time_s == b.iter_time_s == pytest.approx(c.iter_time_s, rel=1e-9)


@functools.lru_cache(maxsize=None)
def _token_split_case(sp: tuple[bool, ...]):
    """test_planner_equals_exhaustive_when_token_splits_win's instance with
    search.sequence_parallel = sp, one object per test process (as _cross_node_case)."""
    return small_instance(nodes=2, gpus_per_node=4, layers=2, hidden=512, heads=16, ffn=2048,
                          seq_len=4096, global_batch=8,
                          search=SearchSpace(tp=(8,), pp=(1,), micro_batch=(1, 2), zero=(0,), cp=(1,),
                                             virtual_stages=(1,), tp_across_nodes=True,
                                             sequence_parallel=sp,
                                             tensor_partitions=("megatron", "spatial_temporal")))


@functools.lru_cache(maxsize=None)
def _token_split_exhaustive(sp: tuple[bool, ...]):
    """exhaustive() of _token_split_case(sp), once per test process. Read only."""
    return exhaustive(_token_split_case(sp))


# with sequence parallelism the brute force runs over twice the layer plans: over 5 s on the 2-core
# test machine (--durations, issue 32)
@pytest.mark.parametrize("sp", [OFF, pytest.param(BOTH, marks=pytest.mark.slow)])
def test_planner_equals_exhaustive_when_token_splits_win(sp):
    """Long sequences, a narrow model and a tp = 8 group across the 3.125 GB/s NIC: the MLP's
    activations (T*h*2 B = 4 MiB per collective, four per layer and micro-batch) outweigh its
    weight-gradient all-reduce (4 B x h*f = 4 MiB, once per iteration, overlapped with the
    backward), so the optimum splits the MLP by tokens (weights replicated on the group).
    With sequence parallelism allowed, the stream itself is split by tokens and every linear
    op splits by tokens, with all-to-alls into and out of the head-split attention core.
    plan() equals brute force over every layer plan, and its state bytes include the
    replicated weights."""
    from paraplan.cost import memory
    from paraplan.cost.flops import layer_params
    inst = _token_split_case(sp)
    # brute force in halves by sequence parallelism (_least): the half without it is the OFF
    # case's whole space, listed once for both cases
    r, e = plan(inst), _least([_token_split_exhaustive((v,)) for v in sp])
    assert r.status == "optimal"
    assert r.iter_time_s == pytest.approx(e.iter_time_s, rel=1e-9)
    parts = dict(r.plan.partitions)
    c = build(inst, r.plan.flat_outer, layer_fn=P.plan_layer_fn(r.plan.partitions))
    base = memory.layer_state_bytes(inst.model, 8, 0, 1)
    from paraplan.solver.plan_text import describe_partitions
    assert "mlp.fc2: T@nodes" in describe_partitions(r.plan, inst)  # the group spans 2 nodes
    if sp == (False,):
        assert parts["mlp_in"] == parts["mlp_out"] == "T"
        # two MLP weights (h x f each), replicated instead of 1/8 each: 2 * 7/8 * 512*2048 params
        assert c.layer_state_bytes[0] - base == 2 * 7 / 8 * 512 * 2048 * 18
    else:
        assert r.plan.sequence_parallel
        assert all(parts[op] == "T" for op in P.LINEAR_OPS)
        # every linear weight replicated: 7/8 of the layer's matrices (norm scales excluded)
        assert c.layer_state_bytes[0] - base == pytest.approx(
            7 / 8 * (layer_params(inst.model) - 2 * 512) * 18, rel=1e-12)


@pytest.mark.slow  # over 5 s on the 2-core test machine (--durations, issue 32)
def test_planner_equals_exhaustive_with_sequence_parallel():
    """Per-operator plans on a split stream (2 x 4 GPUs): the optimum mixes token splits
    (attention) and P(2x2) composites, keeps the stream in PrimePar's B2x2 block layout (the
    composites' partial sums reduce-scatter onto it, LayerNorm all-reduces its per-token
    statistics over GPU pairs), and equals brute force over every layer plan, stream included."""
    inst = _cross_node_case(ON)
    r, e = plan(inst), _cross_node_exhaustive(ON)  # listed once with the partitions test's
    assert r.status == "optimal" and r.plan.sequence_parallel
    assert r.iter_time_s == pytest.approx(e.iter_time_s, rel=1e-9)
    specs = {spec for _, spec in r.plan.partitions}
    # composites with P(2x2) inside the node win; the token split of attention no longer does
    # once its extra weight-gradient all-reduce pays NCCL's per-call latency (cost/comm.py)
    assert any("P2x2" in x for x in specs)
    assert dict(r.plan.partitions)[P.STREAM] == "B2x2"

