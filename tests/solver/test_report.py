"""`paraplan report` (solver/report.py) and the event replay of one iteration (cost/timeline.py).

Expected values: for p stages that each take T per micro-batch and D for the gradient sync and
optimizer step, m micro-batches and v model chunks per stage, 1F1B (v = 1) ends at
(m + p - 1) T + D and the interleaved schedule at (m + (p - 1)/v) T + D (Narayanan et al.
SC'21, Sec. 2.2 and 2.2.2): exactly cost.schedule.iteration_time_s for uniform stages.
"""

from __future__ import annotations

import argparse
import base64
import random
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import instances
from cost import schedule
from cost.coefficients import StageCoefficients, build, in_flight_micro_batches
from cost.loader import load_instance
from cost.specs import Outer, Recompute
from cost.timeline import EventKind, makespan_s, one_f_one_b_events
from solver import report
from solver.planner import INFEASIBLE, OPTIMAL, plan

TINY = Path(instances.__file__).parent / "tiny-gpt-8xA100.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REL = 1e-9


def uniform_coeffs(p: int, m: int, v: int, stage_s=0.1, layer_s=0.2, recompute_s=0.05,
                   p2p_s=0.01, sync_s=0.3, layer_sync_s=0.01) -> StageCoefficients:
    """Every stage identical (no embedding or output layer extras): a hand-made table."""
    def col(x: float) -> np.ndarray:
        return np.full(p, float(x))

    outer = Outer(tp=1, pp=p, dp=1, micro_batch=1, num_micro_batches=m, virtual_stages=v)
    return StageCoefficients(
        outer=outer, layers=4 * v * p, layer_time_s=col(layer_s), recompute_time_s=col(recompute_s),
        stage_time_s=col(stage_s + p2p_s), layer_sync_time_s=col(layer_sync_s),
        stage_sync_time_s=col(sync_s), layer_state_bytes=col(0), layer_act_bytes=col(0),
        layer_ckpt_bytes=col(0), stage_mem_bytes=col(0), capacity_bytes=col(1),
        stage_parts=[{"other": stage_s, "pp_p2p": p2p_s} for _ in range(p)])


def passes(events):
    """(stage, micro_batch, chunk, in_backward) -> (start, end) of that pass's events."""
    out: dict[tuple, list[float]] = {}
    for e in events:
        if e.micro_batch is None:
            continue
        key = (e.stage, e.micro_batch, e.chunk, e.in_backward)
        lo, hi = out.get(key, (e.start_s, e.end_s))
        out[key] = [min(lo, e.start_s), max(hi, e.end_s)]
    return out


def check_schedule(events, p: int, m: int, v: int) -> None:
    tol = 1e-12 * max(1.0, makespan_s(events))
    by_stage = defaultdict(list)
    for e in events:
        assert e.end_s >= e.start_s >= 0
        by_stage[e.stage].append(e)
    for s, evs in by_stage.items():
        evs.sort(key=lambda e: e.start_s)
        for a, b in zip(evs, evs[1:]):
            assert b.start_s >= a.end_s - tol, f"stage {s}: {a} overlaps {b}"
        syncs = [e for e in evs if e.kind is EventKind.GRAD_SYNC_OPTIMIZER]
        assert len(syncs) <= 1 and (not syncs or syncs[0] is evs[-1])
    ps = passes(events)
    assert len(ps) == 2 * p * m * v  # every micro-batch, chunk and stage: one forward, one backward
    for (s, i, k, bwd), (start, _) in ps.items():
        if not bwd:
            dep = (s - 1, i, k, False) if s > 0 else ((p - 1, i, k - 1, False) if k > 0 else None)
        elif s < p - 1:
            dep = (s + 1, i, k, True)
        else:
            dep = (0, i, k + 1, True) if k < v - 1 else (s, i, k, False)
        if dep is not None:
            assert start >= ps[dep][1] - tol, f"pass {(s, i, k, bwd)} starts before {dep} ends"


@pytest.mark.parametrize("p, m, v", [(1, 1, 1), (1, 5, 1), (2, 1, 1), (4, 3, 1), (4, 8, 1),
                                     (8, 16, 1), (2, 2, 2), (4, 4, 2), (4, 8, 4), (8, 16, 2)])
def test_uniform_stages_match_the_closed_form(p, m, v):
    c = uniform_coeffs(p, m, v)
    n, r = np.full(p, 4.0 * v), np.full(p, 1.0)
    events = one_f_one_b_events(c, n, r)
    t = float(schedule.stage_times_s(c, n, r)[0])
    d = float(schedule.sync_times_s(c, n)[0])
    expected = (m + (p - 1) / v) * t + d
    assert makespan_s(events) == pytest.approx(expected, rel=REL)
    assert makespan_s(events) == pytest.approx(float(schedule.iteration_time_s(c, n, r)), rel=REL)
    check_schedule(events, p, m, v)
    assert {e.kind for e in events} == set(EventKind)


@pytest.mark.parametrize("p, m, v", [(4, 2, 1), (4, 8, 1), (4, 4, 2), (4, 8, 4), (8, 8, 2)])
def test_forwards_before_the_first_backward_match_the_memory_model(p, m, v):
    """The activations a stage holds at its peak (cost.coefficients.in_flight_micro_batches, in
    stages' worth) are the forward chunks it runs before its first backward."""
    events = one_f_one_b_events(uniform_coeffs(p, m, v), np.full(p, 2.0 * v), np.zeros(p))
    for s in range(p):
        first_bwd = min(e.start_s for e in events if e.stage == s and e.kind is EventKind.BACKWARD)
        ahead = sum(1 for e in events if e.stage == s and e.kind is EventKind.FORWARD
                    and e.start_s < first_bwd)
        assert ahead == in_flight_micro_batches(p, m, v)[s] * v


def test_pass_split_adds_up_to_the_stage_time():
    """Forward : backward = 1 : 2 of the compute; every stage is busy m T_s + D_s in all."""
    c = uniform_coeffs(3, 6, 1)
    n, r = np.array([3.0, 5.0, 2.0]), np.array([1.0, 0.0, 2.0])
    events = one_f_one_b_events(c, n, r)
    t, d = schedule.stage_times_s(c, n, r), schedule.sync_times_s(c, n)
    for s in range(3):
        busy = sum(e.duration_s for e in events if e.stage == s)
        assert busy == pytest.approx(6 * t[s] + d[s], rel=REL)
        fwd = [e.duration_s for e in events if e.stage == s and e.kind is EventKind.FORWARD]
        bwd = [e.duration_s for e in events if e.stage == s and e.kind is EventKind.BACKWARD]
        assert bwd[0] == pytest.approx(2 * fwd[0], rel=REL)


def test_unequal_stages_respect_dependencies_and_busy_time():
    """Random unequal stages: the schedule stays valid, and no replay ends before the busiest
    stage's own work (m T_s + D_s) is done."""
    rng = random.Random(7)
    for _ in range(40):
        p = rng.choice([2, 3, 4, 8])
        v = rng.choice([1, 2, 4])
        m = p * rng.randint(1, 3) if v > 1 else rng.randint(1, 12)
        c = uniform_coeffs(p, m, v)
        c = replace(c, stage_time_s=np.array([rng.random() + 0.01 for _ in range(p)]))
        n = np.array([v * rng.randint(1, 4) for _ in range(p)], float)
        r = np.array([rng.randint(0, int(x)) for x in n], float)
        events = one_f_one_b_events(c, n, r)
        check_schedule(events, p, m, v)
        own = m * schedule.stage_times_s(c, n, r) + schedule.sync_times_s(c, n)
        assert makespan_s(events) >= own.max() * (1 - REL)


def test_real_coefficients_interleaved_with_recompute():
    inst = load_instance(TINY)
    outer = Outer(tp=1, pp=4, dp=2, micro_batch=1, num_micro_batches=16, virtual_stages=2,
                  recompute=Recompute.NONE)
    c = build(inst, outer)
    n, r = np.array([2.0, 2.0, 2.0, 2.0]), np.array([0.0, 2.0, 1.0, 0.0])
    events = one_f_one_b_events(c, n, r)
    check_schedule(events, 4, 16, 2)
    assert any(e.kind is EventKind.SEND_RECV for e in events)
    assert any(e.kind is EventKind.RECOMPUTE and e.stage == 1 for e in events)
    assert not any(e.kind is EventKind.RECOMPUTE and e.stage in (0, 3) for e in events)


def test_interleaved_needs_micro_batches_divisible_by_pp():
    with pytest.raises(ValueError, match="divisible by pp"):
        one_f_one_b_events(uniform_coeffs(4, 6, 2), np.full(4, 2.0), np.zeros(4))


def test_memory_parts_sum_to_stage_memory():
    inst = load_instance(TINY)
    c = build(inst, Outer(tp=2, pp=2, dp=2, micro_batch=2, num_micro_batches=8))
    n, r = np.array([5.0, 3.0]), np.array([2.0, 0.0])
    total = sum(report.memory_parts_bytes(c, n, r).values())
    np.testing.assert_allclose(total, schedule.stage_mem_bytes(c, n, r), rtol=REL)


def test_pareto_front_is_exactly_the_undominated_points():
    rng = random.Random(3)
    o = Outer(tp=1, pp=1, dp=1, micro_batch=1, num_micro_batches=1)
    pts = [report.FrontierPoint(o, 1.0, rng.randint(1, 30), rng.randint(1, 30)) for _ in range(200)]
    front = report.pareto_front(pts)

    def dominated(a):
        return any(b.tokens_per_s >= a.tokens_per_s and b.peak_mem_bytes <= a.peak_mem_bytes
                   and (b.tokens_per_s, b.peak_mem_bytes) != (a.tokens_per_s, a.peak_mem_bytes)
                   for b in pts)

    assert {(f.tokens_per_s, f.peak_mem_bytes) for f in front} == {
        (a.tokens_per_s, a.peak_mem_bytes) for a in pts if not dominated(a)}


@pytest.fixture(scope="module")
def tiny_report() -> str:
    inst = load_instance(TINY)
    res = plan(inst, time_limit_s=30)
    assert res.status == OPTIMAL
    return report.build_report(inst, res)


def test_report_has_four_sections_and_embedded_images(tiny_report):
    page = tiny_report
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for k, (anchor, title) in enumerate(zip(("timeline", "breakdown", "memory", "frontier"),
                                            report.SECTIONS), start=1):
        assert f'<section id="{anchor}"><h2>{k}. {title}</h2>' in page
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert len(images) == 4
    assert all(base64.b64decode(b).startswith(PNG_MAGIC) for b in images)
    assert "http://" not in page and "https://" not in page  # self-contained
    assert "tokens/s" in page and "GiB" in page and "event replay makespan" in page


def test_report_subcommand_writes_the_file(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="paraplan")
    report.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "r.html"
    args = parser.parse_args(["report", str(TINY), "-o", str(out), "--backend", "milp",
                              "--time-limit-s", "30"])
    assert args.func(args) == 0
    assert out.read_text(encoding="utf-8").count("data:image/png;base64,") == 4
    assert "wrote" in capsys.readouterr().out


def test_report_of_an_infeasible_instance(tmp_path):
    text = TINY.read_text(encoding="utf-8") + "search:\n  memory_reserve_gib: 79.9\n"
    path = tmp_path / "tight.yaml"
    path.write_text(text, encoding="utf-8")
    inst = load_instance(path)
    res = plan(inst, time_limit_s=30)
    assert res.status == INFEASIBLE
    page = report.build_report(inst, res)
    assert page.count("No plan to show") == 3 and '<section id="frontier">' in page
