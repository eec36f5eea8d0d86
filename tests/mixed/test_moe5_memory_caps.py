"""The listing's micro-batch caps read in numpy batches (space.fits_each, issue 33, moe5).

fits_each reads every candidate size of a layout at once; each of its answers is checked here
against a fresh reading: the homogeneous rule size by size, with micro_batch_lower_bound_parts'
floats (its last stage's part on its last stage's group, its fullest stage's on some group of
the class, for some sp flag and ZeRO stage). A planted fault (the activation checkpoint left out
of the batched parts) must be seen, so that the comparison can fail.
"""
from __future__ import annotations

import dataclasses

import pytest
from test_moelazy_partial_bound import SEEDS as MOE_SEEDS, _instance

from paraplan.cost.readers.instance import load_instance
from paraplan.solver import space as space_mod
from paraplan.solver.space import declared_partials, micro_batch_lower_bound_parts


def fresh_fits(inst, tpg, cp, cands, sps, zeros, facts, ranks, capacity) -> list[bool]:
    """fits_each read size by size, as the listing read it before."""
    def class_fits(fact, b, sp, z):
        last, used, pp = fact
        def parts(g):
            return micro_batch_lower_bound_parts(inst, tp=tpg[g], cp=cp, pp=pp, dp=1, micro_batch=b, sp=sp,
                                                 zero=z, zero_ranks=ranks)
        own = parts(last)
        return own[0] <= capacity[last] and (own[1] <= capacity[last] or any(
            parts(g)[1] <= capacity[g] for g in used if g != last))
    return [any(all(class_fits(f, b, sp, z) for f in facts) for sp in sps for z in zeros) for b in cands]


def checked_calls(inst, monkeypatch) -> tuple[int, int]:
    """(fits_each calls of the listing of `inst`, how many sizes they did not fit), each call's
    answer asserted to be the fresh reading's."""
    real = space_mod.fits_each
    seen = [0, 0]

    def checked(*args):
        got = real(*args).tolist()
        assert got == fresh_fits(*args), args[1:]
        seen[0] += 1
        seen[1] += got.count(False)
        return real(*args)

    with monkeypatch.context() as m:
        m.setattr(space_mod, "fits_each", checked)
        for part in declared_partials(inst):
            part.blocks()
    return seen[0], seen[1]


def deepseek_small():
    """DeepSeek-V3 on H800 with idle GPUs on 64 of them: MoE layouts with binding memory caps."""
    from pathlib import Path
    inst = load_instance(Path(__file__).resolve().parents[2] / "instances/deepseek-v3-shaped-2048xH800.yaml")
    groups = (dataclasses.replace(inst.cluster.groups[0], nodes=8),)
    return dataclasses.replace(inst, cluster=dataclasses.replace(inst.cluster, groups=groups),
                               search=dataclasses.replace(inst.search, idle_gpus=True), scenarios=())


def cases():
    return [("moe idle", s) for s in MOE_SEEDS] + [("deepseek", 0)]


def build(kind, seed):
    if kind == "deepseek":
        return deepseek_small()
    inst = _instance(seed, True)  # every divisor of the batch a candidate size
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, micro_batch=None))


@pytest.mark.parametrize("kind, seed", cases())
def test_batched_caps_are_the_size_by_size_reading(kind, seed, monkeypatch):
    calls, _ = checked_calls(build(kind, seed), monkeypatch)
    assert calls > 0


def test_the_caps_bind_somewhere(monkeypatch):
    """Not vacuous: some size read does not fit."""
    assert checked_calls(deepseek_small(), monkeypatch)[1] > 0


def test_a_planted_fault_in_the_batched_caps_is_caught(monkeypatch):
    """The activation checkpoint left out of the batched parts: some answer differs."""
    real = space_mod._activation_arrays

    def without_checkpoint(*args):
        ckpt, workspace, logits = real(*args)
        return 0 * ckpt, workspace, logits

    monkeypatch.setattr(space_mod, "_activation_arrays", without_checkpoint)
    with pytest.raises(AssertionError):
        checked_calls(deepseek_small(), monkeypatch)


class _Shape:
    """A class as the count form reads it: replicas and depth."""

    def __init__(self, replicas: int, pp: int) -> None:
        self.replicas, self.pp = replicas, pp


def _random_sizes(seed: int):
    import random
    from paraplan.solver.space import divisors
    rng = random.Random(seed)
    shapes = [_Shape(rng.randint(1, 12), rng.randint(1, 6)) for _ in range(rng.randint(1, 3))]
    gb = rng.choice([96, 120, 256, 360, 1024, 1536, 2520])
    return shapes, gb, list(divisors(gb))


@pytest.mark.parametrize("uniform", [False, True])
def test_splitting_sizes_are_has_micro_batch_split_size_by_size(uniform):
    """splitting_sizes (one reachability mask up to the largest rest) against
    has_micro_batch_split read per size (its own mask per rest) and brute force, over random
    classes."""
    from paraplan.solver.space import has_micro_batch_split, splitting_sizes
    kept = dropped = 0
    for seed in range(300):
        shapes, gb, sizes = _random_sizes(seed)
        fresh = [b for b in sizes if has_micro_batch_split(shapes, gb // b, uniform)]
        assert splitting_sizes(shapes, gb, sizes, uniform) == fresh, seed
        if not uniform:  # and by brute force, apart from the masks both read
            assert fresh == [b for b in sizes if _fresh_split(shapes, gb // b)], seed
        kept, dropped = kept + len(fresh), dropped + len(sizes) - len(fresh)
    assert kept and dropped  # not vacuous: sizes both kept and dropped


def test_a_planted_fault_in_the_splitting_sizes_is_caught(monkeypatch):
    """The mask read up to half the largest rest: some size differs."""
    from paraplan.solver.space import has_micro_batch_split, splitting_sizes
    real = space_mod._reachable
    monkeypatch.setattr(space_mod, "_reachable", lambda x, rest: real(x, rest // 2))
    differs = 0
    for seed in range(300):
        shapes, gb, sizes = _random_sizes(seed)
        fresh = [b for b in sizes if _fresh_split(shapes, gb // b)]
        differs += splitting_sizes(shapes, gb, sizes, False) != fresh
    assert differs


def _fresh_split(shapes, total: int) -> bool:
    """has_micro_batch_split at v = 1 by brute force: counts m_k = lo_k + j_k, sum r_k m_k = total."""
    import itertools
    r = [c.replicas for c in shapes]
    lo = [1] if len(shapes) == 1 else [max(c.pp, 1) for c in shapes]
    rest = total - sum(a * b for a, b in zip(r, lo))
    if rest < 0:
        return False
    return any(sum(a * j for a, j in zip(r[:-1], js)) <= rest and (rest - sum(a * j for a, j in zip(r[:-1], js))) % r[-1] == 0
               for js in itertools.product(*[range(rest // a + 1) for a in r[:-1]]))
