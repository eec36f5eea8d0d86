"""DeepSeek's DualPipe schedule (job.pipeline_schedule: dualpipe): one iteration's time and
memory per device, from the same per-stage coefficients the 1F1B schedule uses.

Sources: DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437, Sec. 3.2.1-3.2.2; the
schedule's code and its bubble / memory table in deepseek-ai/DualPipe (commit 3da1bbe,
README.md "Pipeline Bubbles and Memory Usage Comparison"; dualpipe/dualpipe.py).

Layout. The model is cut into pp stages as for 1F1B (the plan's layers_per_stage and
full_recompute_layers, stage s holding n_s layers); device d holds stage d and stage
pp - 1 - d, and micro-batches enter from both ends, half from each (DualPipe.step: pp even,
the micro-batch count even and at least 2 pp). So every stage's weights live on two devices
("Parameter per device 2x"), whose gradients join the data-parallel reduction.

Time. In the steady state each device runs, for every micro-batch of each direction, one
forward and one backward chunk of each of its stages, a forward chunk of one micro-batch
paired with a backward chunk of another so that each one's all-to-alls run under the other's
compute (the report's Figure 4; cost/coefficients.moe_layer prices a layer's pair with the
hidden seconds slowing compute by NetEfficiency.overlap_slowdown, as every overlap in cost/
does: DeepSeek gives 20 of the H800's 132 SMs to communication while it runs, 15% of them,
within the 0.10-0.40 range that constant is measured over). With T_s the paired forward +
backward time of one micro-batch on stage s (coefficients + cost/schedule.stage_times_s):

    steady_d = m / 2 * (T_d + T_{pp-1-d})
    bubble   = (pp/2 - 1) * max_d (U_d + U_{pp-1-d}) / 2,   U_s = T_s + B_s - 3 W_s
    iteration = max_d steady_d + bubble + max_d (D_d + D_{pp-1-d})

The bubble is DualPipe's (PP/2 - 1)(F&B + B - 3W) of the README's table, with F&B the paired
chunk (T_s), B a backward chunk alone (its all-to-alls exposed, recompute included) and W the
weight-gradient GEMMs a backward chunk defers into the bubble (zero-bubble's split, dualpipe.py
WeightGradStore); the table assumes equal chunks, so each device's two chunks are averaged and
the largest device sets the bubble (the non-uniform case is an approximation). Stage extras
(embedding, output layer, hand-offs, dense prefix) enter T_s and so U_s, but not B_s or W_s.
D_s is the stage's gradient sync and optimizer step (both stages of a device sync).

Memory. A device holds both stages' state (weights, gradients, optimizer shards: 2x the
parameters) and "PP + 1" chunks' activations (the README's table), counted per stage as
DualPipe.step runs them (in_flight_pairs): pp - h micro-batches of the shallower stage h =
min(d, pp - 1 - d) and h + 1 of the deeper one pp - 1 - h; the CUDA context and NCCL buffers
once; the two stages' transient buffers are both counted (conservative).

Planning. The 1F1B formulations optimise m T_max + (sum T - T_max) / v over stages; DualPipe
pairs stage d with pp - 1 - d and has a bubble of another form, so the planner solves its own
split problem (formulations/dualpipe.py) on `terms`, the same affine terms `iteration` prices
a plan with, over the configurations DualPipe can run (schedule_problem) of a cluster of one
GPU type. cost/coefficients.build refuses a DualPipe job unless this module asks
(dualpipe=True), so no planner can price it as 1F1B by mistake.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace

import numpy as np

from paraplan.cost import coefficients, memory, moe, moe_params, schedule
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.flops import layer_matmuls, moe_attention_view
from paraplan.cost.specs import Instance, PipelineSchedule, Precision
from paraplan.cost.plan_specs import Plan


@dataclass(frozen=True)
class DualPipeIteration:
    """One DualPipe iteration, per device d (holding stages d and pp - 1 - d)."""

    iter_time_s: float
    bottleneck_device: int
    steady_s: np.ndarray  # m/2 (T_d + T_mirror)
    bubble_s: float
    sync_s: np.ndarray  # D_d + D_mirror
    time_per_micro_batch_s: np.ndarray  # (T_d + T_mirror) / 2
    mem_bytes: np.ndarray
    capacity_bytes: np.ndarray
    coeffs: coefficients.StageCoefficients
    layers: np.ndarray  # n_d + n_mirror
    recompute_layers: np.ndarray


def plan_problem(plan: Plan) -> str | None:
    """Why DualPipe cannot run this plan, or None (DualPipe.step's assertions)."""
    return schedule_problem(plan.pp, plan.virtual_stages, plan.num_micro_batches)


def schedule_problem(pp: int, virtual_stages: int, num_micro_batches: int) -> str | None:
    """Why DualPipe cannot run a pipeline of pp stages, v chunks and m micro-batches, or None
    (the planner's space keeps the configurations without one, solver/space.py)."""
    if pp < 2 or pp % 2:
        return f"DualPipe needs an even number of pipeline stages >= 2, the plan has pp={pp}"
    if virtual_stages != 1:
        return "DualPipe places two stages per device itself: use virtual_stages 1"
    m = num_micro_batches
    if m % 2 or m < 2 * pp:
        return (f"DualPipe needs an even number of micro-batches >= 2 pp = {2 * pp}"
                f" (half enter from each end), the plan has {m}")
    return None


def mirror(pp: int) -> np.ndarray:
    """The stage each device holds besides its own: pp - 1 - d."""
    return pp - 1 - np.arange(pp)


def schedule_s(t: np.ndarray, u: np.ndarray, d: np.ndarray, m: int) -> tuple[np.ndarray, float, np.ndarray]:
    """(steady_d, bubble, sync_d) seconds of DualPipe from per-stage T_s, U_s and D_s (module
    docstring); the iteration is steady.max() + bubble + sync.max()."""
    pp = t.shape[-1]
    mi = mirror(pp)
    steady = m / 2 * (t + t[mi])
    bubble = (pp / 2 - 1) * float(((u + u[mi]) / 2).max())
    return steady, bubble, d + d[mi]


def in_flight_pairs(pp: int) -> tuple[np.ndarray, np.ndarray]:
    """Per device d, the micro-batches whose activations it holds at its peak: (of its own
    stage d, of its mirror stage pp - 1 - d).

    deepseek-ai/DualPipe dualpipe.py DualPipe.step (3da1bbe), with h = min(d, pp - 1 - d)
    (half_rank) and phase 0 the direction in which the device runs the shallower stage h:
    step 1 runs 2 (pp/2 - h - 1) phase-0 forwards, step 2 h + 1 pairs of a phase-0 and a
    phase-1 forward (pp - h - 1 and h + 1 in flight), step 3 a phase-1 backward before each
    further phase-1 forward, and step 4 (the steady state) a phase-0 forward beside a phase-1
    backward, then a phase-1 forward beside a phase-0 backward: each pair's forward allocates
    before its backward frees, so the peak holds pp - h of stage h and h + 1 of stage
    pp - 1 - h, pp + 1 chunks in all (the repository's table). Replaying the steps with
    unequal chunk sizes gives the same peak (tests/cost/test_dualpipe.py)."""
    d = np.arange(pp)
    h = np.minimum(d, pp - 1 - d)
    shallow, deep = pp - h, h + 1
    own_is_shallow = d < pp / 2
    return np.where(own_is_shallow, shallow, deep).astype(float), np.where(own_is_shallow, deep, shallow).astype(float)


def _unpaired_layer_s(inst: Instance, o, site, net: NetEfficiency) -> tuple[float, float]:
    """(B, W) of one MoE layer: its backward alone (the all-to-alls exposed) and the
    weight-gradient GEMMs in it (each linear's forward GEMM again: BACKWARD_LINEAR_FACTOR
    splits backward into an input- and a weight-gradient GEMM of the forward's size)."""
    alone = replace(inst, job=replace(inst.job, pipeline_schedule=PipelineSchedule.ONE_F_ONE_B))
    lt = coefficients.megatron_layer(alone, o, site, net)
    m = inst.model
    mm = (coefficients.fp8_matmul_time_s if inst.job.precision is Precision.FP8
          else coefficients.matmul_time_s)
    view = moe_attention_view(m) if m.moe is not None else m
    w = sum(mm(f, site.gpu)
            for f in layer_matmuls(view, o.micro_batch, o.tp, o.cp, o.sequence_parallel).linear_calls if f)
    if m.moe is not None:
        x = moe.expert_terms(inst, o, site.gpu, site.etp_link or site.tp_link,
                             site.ep_links or site.dp_link, net, mm, coefficients.memory_time_s)
        w += x.wgrad_s
    return lt.bwd_s, w


@dataclass(frozen=True)
class Terms:
    """DualPipe's time and memory of one configuration, per stage s and affine in the stage's
    layers n_s and fully recomputed layers r_s (module docstring), what `iteration` prices a
    plan with and the planner's split problem reads (formulations/dualpipe.py):

        T_s = a_s + t_s n_s + u_s r_s        (schedule.stage_times_s)
        U_s = T_s + bw_s n_s + ru_s r_s      (a backward chunk alone, less 3 W per layer)
        D_s = e_s + g_s n_s                  (schedule.sync_times_s)
        memory of device d = sum over its two stages s of (k0_s + kn_s n_s - kr_s r_s) + runtime

    where each stage's per-micro-batch activations are weighed by the micro-batches its
    device holds of it (in_flight_pairs) and k0 leaves the runtime allowance out (a device
    holds it once). Devices d and pp - 1 - d hold the same two stages and so the same memory."""

    coeffs: coefficients.StageCoefficients
    num_micro_batches: int
    bw_s: np.ndarray
    ru_s: np.ndarray
    k0_bytes: np.ndarray
    kn_bytes: np.ndarray
    kr_bytes: np.ndarray
    runtime_bytes: float

    def times_s(self, n: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(T_s, U_s, D_s) of a split."""
        t = schedule.stage_times_s(self.coeffs, n, r)
        return t, t + n * self.bw_s + r * self.ru_s, schedule.sync_times_s(self.coeffs, n)

    def mem_bytes(self, n: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Per device d, the bytes it holds (its two stages' and one runtime allowance), shape
        (pp,), with the float operations in the order formulations/dualpipe.DualPipeProblem.sums
        takes, so that a peak equal to the capacity fits (or not) alike in both."""
        per_stage = self.k0_bytes + n * self.kn_bytes - r * self.kr_bytes
        return per_stage + per_stage[mirror(per_stage.shape[-1])] + self.runtime_bytes


class Kept:
    """The values of the last `most` keys built, each built once while kept (the oldest key
    dropped first), on every thread of a search: `terms`' and formulations/dualpipe.py's."""

    def __init__(self, most: int):
        self.most, self._items, self._lock = most, {}, threading.Lock()

    def get(self, key, build):
        """The value kept for `key`, else build()'s, then kept."""
        with self._lock:
            if key in self._items:
                return self._items[key]
        out = build()
        with self._lock:
            while len(self._items) >= self.most:
                del self._items[next(iter(self._items))]  # the oldest
            self._items[key] = out
        return out


# configurations whose Terms `terms` keeps (a search of Qwen3-235B under DualPipe prices about a
# thousand, a few KB each)
_TERMS = Kept(2048)


def terms(inst: Instance, o, net: NetEfficiency = NetEfficiency(), reserve_bytes: float = 0.0) -> Terms:
    """The Terms of outer configuration `o` (its num_micro_batches included).

    Kept (read-only) for the last 2048 calls by value (_TERMS): the instance, the configuration,
    the network, the reserve and, for an MoE model, the MoE parameters in force (cost/moe_params,
    which the expert terms read); every other input is a constant of the code. Each backend's
    search of a DualPipe job prices the same configurations on its own instance object (the
    planner's one-group instance is made per call, solver/search.dualpipe_problem), and the
    terms were about a third of a CP-SAT or MILP search of Qwen3-235B (issue 32)."""
    key = (inst, o, net, reserve_bytes, moe_params.active() if inst.model.moe is not None else None)
    return _TERMS.get(key, lambda: _built_terms(inst, o, net, reserve_bytes))


def _built_terms(inst: Instance, o, net: NetEfficiency, reserve_bytes: float) -> Terms:
    """terms, built (its arrays and its coefficients' read-only: they are kept and shared)."""
    c = coefficients.build(inst, o, net, reserve_bytes, dualpipe=True)
    pp = o.pp
    pl = coefficients.homogeneous_placement(inst.cluster.one_group, o)
    b_layer, w_layer = _unpaired_layer_s(inst, o, pl.sites[0], net)
    # a backward chunk alone replays its recomputed layers' forwards: U_s = T_s + B_s - 3 W_s
    bw = np.full(pp, b_layer - 3 * w_layer)
    # memory: per micro-batch activations (coefficients hold them times the 1F1B in-flight
    # count, the dense prefix's too), weighed by DualPipe's in-flight count of the stage
    own, other = in_flight_pairs(pp)
    held = np.where(np.arange(pp) < pp / 2, own, other[mirror(pp)])  # micro-batches of stage s on its device
    per_mb_act = c.layer_act_bytes / c.in_flight
    per_mb_ckpt = c.layer_ckpt_bytes / c.in_flight
    runtime = memory.runtime_bytes(o.tp, o.cp, o.dp, pp)
    k0 = c.stage_mem_bytes - c.stage_act_bytes + held * c.stage_act_bytes / c.in_flight - runtime
    out = Terms(coeffs=c, num_micro_batches=o.num_micro_batches, bw_s=bw, ru_s=c.recompute_time_s.copy(),
                k0_bytes=k0, kn_bytes=c.layer_state_bytes + held * per_mb_act,
                kr_bytes=held * (per_mb_act - per_mb_ckpt), runtime_bytes=runtime)
    for x in (out, out.coeffs):
        for f in fields(x):
            if isinstance(getattr(x, f.name), np.ndarray):
                getattr(x, f.name).setflags(write=False)
    return out


def iteration(inst: Instance, plan: Plan, net: NetEfficiency = NetEfficiency(),
              reserve_bytes: float = 0.0) -> DualPipeIteration:
    """The DualPipe iteration of `plan` (module docstring)."""
    problem = plan_problem(plan)
    if problem is not None:
        raise ConfigError(problem)
    x = terms(inst, plan.flat_outer, net, reserve_bytes)
    c = x.coeffs
    pp, m = plan.pp, plan.num_micro_batches
    n = np.array(plan.layers_per_stage, float)
    r = np.array(plan.full_recompute_layers, float)
    mi = mirror(pp)
    t, u, d = x.times_s(n, r)
    steady, bubble, sync = schedule_s(t, u, d, m)
    k = int(np.argmax(steady))
    iter_time = float(steady[k] + bubble + sync.max())
    return DualPipeIteration(iter_time_s=iter_time, bottleneck_device=k, steady_s=steady,
                             bubble_s=bubble, sync_s=sync, time_per_micro_batch_s=(t + t[mi]) / 2,
                             mem_bytes=x.mem_bytes(n, r), capacity_bytes=c.capacity_bytes, coeffs=c,
                             layers=n + n[mi], recompute_layers=r + r[mi])


def device_categories_bytes(inst: Instance, plan: Plan, reserve_bytes: float = 0.0) -> list[dict[str, float]]:
    """Per device, bytes per category of cost/memory_breakdown.CATEGORIES (`paraplan memory`
    of a DualPipe job): both stages' state, buffers and logits, the runtime once, and the
    activations of in_flight_pairs' micro-batches; they sum to iteration().mem_bytes."""
    from paraplan.cost.memory_breakdown import CATEGORIES, stage_categories_bytes

    it = iteration(inst, plan, reserve_bytes=reserve_bytes)
    c = it.coeffs
    stages = stage_categories_bytes(inst, plan, c)
    pp = plan.pp
    chunk = [stages[s]["activations"] / c.in_flight[s] for s in range(pp)]  # one micro-batch
    own, other = in_flight_pairs(pp)
    out = []
    for d, m in enumerate(mirror(pp)):
        cats = {k: stages[d][k] + stages[m][k] for k in CATEGORIES}
        cats["activations"] = float(own[d] * chunk[d] + other[d] * chunk[m])
        cats["runtime"] = stages[d]["runtime"]
        assert abs(sum(cats.values()) - it.mem_bytes[d]) <= 1e-6 * it.mem_bytes[d], "categories must sum"
        out.append(cats)
    return out
