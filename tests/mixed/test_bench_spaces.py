"""`paraplan bench --mixed`'s comparison spaces (solver/bench/mixed.py): the space mixed
clusters had before the one-planner merge is a subset of the instance's declared space, which
is a subset of the full space, so their optima can only improve in that order (each is proved
optimal over its own space)."""

from paraplan.cost.readers.instance import load_instance
from paraplan.solver.bench.mixed import MIXED_DIR, full_space, previous_space
from paraplan.solver.search import search


def test_previous_space_is_the_old_rules():
    inst = load_instance(MIXED_DIR / "llama3-70b-32xA100-32xH100.yaml")
    s = previous_space(inst).search
    assert (s.zero, s.cp, s.virtual_stages, s.tp_across_nodes, s.tensor_partitions) == \
        ((0, 1), (1,), (1,), False, ("megatron",))
    f = full_space(inst).search
    assert f.cp is None and f.virtual_stages is None and f.zero == inst.search.zero


def test_optima_improve_as_the_space_grows():
    inst = load_instance(MIXED_DIR / "tiny-2types.yaml")
    times = [search(i, time_limit_s=120) for i in (previous_space(inst), inst, full_space(inst))]
    assert all(r.status == "optimal" for r in times), [r.status for r in times]
    prev, declared, full = (r.objective_s for r in times)
    assert full <= declared * (1 + 1e-9) and declared <= prev * (1 + 1e-9), (prev, declared, full)
