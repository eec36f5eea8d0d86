"""The slowest stage that memory forces on a stage family's tp choice, recompute counted (issue
33: on 32 A100 + 32 H100 with per-operator partitions and the three layout options, the stage
families' bound, stage_families.py, priced each layer at its group's floor f_g, the least over
the recompute modes, while Llama-3 70B at tp 1 to 4 cannot hold its layers' activations on
80 GB without recomputing many; the families keyed from 9.7 s against an optimum near 11.8 s
at p90, and best first opened them all).

A tp choice of a stage family (stage_families.py) is a lone class of dp replicas through the
groups used, c_g stages on group g at tp t_g (exactly c_g = N_g / (t_g cp dp); with
search.idle_gpus any 1..c_g of them), m = (global batch / b) / dp micro-batches per replica.
With 1F1B stage s of a pipeline of pp stages holds min(pp - s, m) micro-batches in flight
(cost/coefficients.in_flight_micro_batches; interleaved at least as many, m >= pp there:
option_recompute.py's module docstring), so the c_g stages on g, wherever they sit, hold at
least the c_g least of {min(k, m) : k = 1..pp}, i.e. min(k, m) for k = 1..c_g (two groups
cannot both hold the last places, so giving each group the least counts is a relaxation).
A stage of n layers, r of them fully recomputed, at f in flight needs (option_recompute.py)
    every + n (state + f a) - r f (a - c) <= cap,
so it recomputes at least rho_s(n) = clip((n (state + f a) - room) / (f (a - c)), 0, n) of them
(room = cap - every) and takes at least t_s(n) = n f_g + rho_g ceil(rho_s(n)), f_g the group's
layer floor (stage_families.FamilyBounds.floor) and rho_g the least forward a full recompute
repeats (option_recompute.RecomputeFloor.rc_fwd_s). rho_s(n) grows with state, a and c and
falls with room (d rho / d a = (n (state + f c) - room) f / (f (a - c))^2 <= 0 where the stage
holds n layers at all), so each is read at its own least (room at its largest) over the
sequence-parallel flags tp admits and the ZeRO stages the space offers, at the family's ranks
dp cp (the state's sharding) and its least depth (the runtime allowance grows with pp > 1): a
superset of the modes any configuration runs, each group in its own best. A* (option_recompute.
slowest_stage_each_s: the L-th least of every stage's t_s(1..), and each stage's t_s(1) where
every stage holds a layer) is then at most the slowest stage of every split that fits, at every
v, so at most the A of stage_families' derivation (max_s (a_s + n_s t_s), a_s >= 0, now with
the recompute each stage repeats); with idle GPUs the places are the c_g of each group, any of
which a pipeline may leave empty, and A* is the L-th least alone (a superset of every subset's
times, so at most each's).

With the embedding or loss as a layer slot (v > 1 where the job runs the slots) an end stage's
short chunk corrects its stash (cost/schedule.uneven_chunk_mem_bytes): as option_recompute.py,
such a stage is read with no stash (state only). Which group holds the two end stages is not
known, so each group's two places of least and most in flight are read so (both_ends); the v = 1
term reads none so. A pipeline of one stage at ZeRO-3 is given no recompute (its recompute may
hide ZeRO-3's traffic, option_recompute.py), nor an MoE model any term of this module.

With per-operator partitions (search.tensor_partitions) a stays the least over every layer plan
and rho_g the least recomputed forward (plan_range.py): the state, workspace and checkpoint of
every plan are at least Megatron's, so every term is at most its value under any layer plan.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost.framework_rules import rules_for
from paraplan.solver.bounds.option_recompute import RecomputeFloor, slowest_stage_each_s
from paraplan.solver.space import micro_batch_lower_bound_terms


def runs_micro_batch(global_batch: int, micro_batch: int, dp: int) -> bool:
    """Whether a lone class of dp replicas has a configuration at this micro-batch size: its
    count m = floor(global batch / b) / dp is a whole number >= 1, the `valid` of
    stage_families.FamilyBounds._combos, which bounds every other size by inf (so A* is not
    read there: 32-46% of slowest_s's sizes on the dense idle_gpus instances)."""
    count = global_batch // micro_batch
    return count >= dp and count % dp == 0


class StageRecompute:
    """A* of the module docstring for stage families' tp choices (fb: stage_families.
    FamilyBounds: its floors, micro-batch sizes, scenarios and recompute modes)."""

    def __init__(self, fb) -> None:
        self.fb, self.inst = fb, fb.inst
        self.floor = RecomputeFloor(fb)  # its stash and recomputed forward
        self.rules = rules_for(self.inst.job.framework, self.inst.job.optimizer)
        self.memo: dict = {}

    def plain(self) -> bool:
        """Whether no term is read (an MoE model, or no ZeRO stage offered)."""
        return self.inst.model.moe is not None or not self.inst.search.zero

    def _group(self, g: int, tp: int, cp: int, dp: int, pp: int, b: int) -> tuple[float, float, float, float]:
        """(room, state, a, c) of a stage on group g at tp, each at its own best over sp and
        ZeRO (module docstring), at ranks dp cp and depth pp."""
        key = ("group", g, tp, cp, dp, pp, b)
        got = self.memo.get(key)
        if got is None:
            inst = self.inst
            sps = self.floor.sps(tp, cp)
            modes = [(sp, z) for sp in sps for z in inst.search.zero]
            # the modes the framework admits at this depth (a pipeline: Megatron's ZeRO 0-1);
            # v apart, which reads no memory term here (none admitted: every mode, no refusal)
            modes = [(sp, z) for sp, z in modes
                     if self.rules.admits(tp=tp, pp=pp, cp=cp, dp=dp, sp=sp, zero=z, v=1)] or modes
            terms = [micro_batch_lower_bound_terms(inst, tp=tp, cp=cp, pp=pp, dp=1, micro_batch=b, sp=sp, zero=z,
                                                   zero_ranks=dp * cp)
                     for sp, z in modes]
            every, state, c = (min(t[x] for t in terms) for x in (0, 2, 3))
            a = max(min(self.floor.stash_bytes(g, b, tp, cp, sp) for sp in sps), c * (1 + 1e-12))
            cap = inst.cluster.groups[g].gpu.hbm_bytes - inst.search.memory_reserve_bytes
            got = self.memo[key] = (cap - every, state, a, c)
        return got

    def slowest_s(self, used: tuple[int, ...], tps: np.ndarray, counts: np.ndarray, cp: int, dp: int,
                  idle: bool, both_ends: bool) -> np.ndarray:
        """(choices, micro-batch sizes, scenarios): A* of each tp choice (tps, counts: (choices,
        groups), its tp and stage places per group), 0 where no term is read (plain)."""
        fb, L = self.fb, int(self.inst.model.layers)
        out = np.zeros((len(tps), len(fb.mbs), len(fb.idx)))
        if self.plain() or not len(tps):
            return out
        gb = self.inst.job.global_batch
        pp = len(used) if idle else None
        # a pipeline of one stage at ZeRO-3: no recompute read (module docstring)
        one_stage = (3 in self.inst.search.zero) & ((counts.sum(axis=1) == 1) | (idle and len(used) == 1))
        for bi, b in enumerate(fb.mbs.astype(int).tolist()):
            if not runs_micro_batch(gb, b, dp):
                continue  # no configuration: the family's bound is inf there whatever this reads
            m = max(gb // b // dp, 1)
            for x in range(len(tps)):
                key = ("slowest", used, tuple(tps[x]), tuple(counts[x]), cp, dp, idle, both_ends, bool(one_stage[x]), bi)
                got = self.memo.get(key)
                if got is None:
                    got = self.memo[key] = self._slowest(used, tps[x], counts[x], cp, dp, pp, b, bi, m, idle,
                                                         both_ends, bool(one_stage[x]))
                out[x, bi] = got
        return out

    def _slowest(self, used, tps, counts, cp: int, dp: int, pp: int | None, b: int, bi: int, m: int,
                 idle: bool, both_ends: bool, one_stage: bool) -> np.ndarray:
        rooms, helds, slopes, fs, rhos = [], [], [], [], []
        depth = pp if pp is not None else int(counts.sum())
        for g, t, c in zip(used, tps.tolist(), counts.tolist()):
            room, state, a, ck = self._group(g, t, cp, dp, depth, b)
            flight = np.minimum(np.arange(1, c + 1, dtype=float), m)
            held = state + flight * a
            slope = held / (flight * (a - ck))
            if both_ends:  # its places of least and most in flight read with no stash
                held[[0, -1]], slope[[0, -1]] = state, np.inf
            rooms.append(np.full(c, room))
            helds.append(held)
            slopes.append(slope)
            fs.append(np.repeat(self.fb.floor(g, t, cp)[bi][:, None], c, axis=1))
            rho = self.floor.rc_fwd_s(g, t, cp)[bi]
            rhos.append(np.repeat((0.0 * rho if one_stage else rho)[:, None], c, axis=1))
        room, held, slope = (np.concatenate(x)[None] for x in (rooms, helds, slopes))
        f, rho = (np.concatenate(x, axis=1)[None] for x in (fs, rhos))
        return slowest_stage_each_s(room, held, slope, int(self.inst.model.layers), f, rho, every_stage=not idle)[0]
