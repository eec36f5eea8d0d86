"""`paraplan report` (solver/report/page.py) and the event replay of one iteration (cost/timeline.py).

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

from paraplan import instances
from paraplan.cost import schedule
from paraplan.cost.coefficients import StageCoefficients, build, in_flight_micro_batches
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Outer, Recompute
from paraplan.cost.timeline import EventKind, makespan_s, one_f_one_b_events
from paraplan.solver.format import seconds
from paraplan.solver.report import page as report
from paraplan.solver.solve import solve as plan
from paraplan.solver.planner import INFEASIBLE, OPTIMAL

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


def test_report_has_its_sections_and_embedded_images(tiny_report):
    # the evidence section came first and the Gantt chart became inline SVG (interactive)
    page = tiny_report
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for k, (anchor, title) in enumerate(zip(("evidence", "timeline", "breakdown", "memory", "frontier"),
                                            report.SECTIONS), start=1):
        assert f'<section id="{anchor}"><h2>{k}. {title}</h2>' in page
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert len(images) == 3  # breakdown, memory, frontier
    assert all(base64.b64decode(b).startswith(PNG_MAGIC) for b in images)
    assert page.count('<svg class="gantt"') == 1 and "<script>" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    assert "tokens/s" in page and "GiB" in page and "event replay makespan" in page
    assert "OPTIMAL: proved over the declared space" in page and "best lower bound" in page


def test_report_subcommand_writes_the_file(tmp_path, capsys):
    from paraplan.solver.commands import report as report_command
    parser = argparse.ArgumentParser(prog="paraplan")
    report_command.register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "r.html"
    args = parser.parse_args(["report", str(TINY), "-o", str(out), "--backend", "milp",
                              "--time-limit-s", "30"])
    assert args.func(args) == 0
    assert out.read_text(encoding="utf-8").count("data:image/png;base64,") == 3
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


# --- the pipeline formula against the event replay (README, Cost model: Pipeline) ---------------

def _stage_table(times_s, m: int, v: int = 1) -> StageCoefficients:
    """Stages with the given per-micro-batch times T_s, no p2p, recompute or sync."""
    p = len(times_s)
    z = np.zeros(p)
    outer = Outer(tp=1, pp=p, dp=1, micro_batch=1, num_micro_batches=m, virtual_stages=v)
    return StageCoefficients(
        outer=outer, layers=p * v, layer_time_s=z, recompute_time_s=z,
        stage_time_s=np.array(times_s, float), layer_sync_time_s=z, stage_sync_time_s=z,
        layer_state_bytes=z, layer_act_bytes=z, layer_ckpt_bytes=z, stage_mem_bytes=z,
        capacity_bytes=z + 1, stage_parts=[{} for _ in range(p)])


def test_formula_is_an_upper_bound_of_the_replay():
    # The replay is the exact makespan of the (interleaved) 1F1B schedule: every pass starts
    # when its stage and its dependency are free (a longest path). The formula charges the
    # slowest stage m times and every other stage once in full; on 400 random stage times it is
    # never below the replay.
    rng = random.Random(7)
    for _ in range(400):
        p, v = rng.choice([2, 3, 4, 6]), rng.choice([1, 1, 2])
        m = p * rng.randint(1, 4)
        c = _stage_table([rng.uniform(0.5, 1.5) for _ in range(p)], m, v)
        n = r = np.zeros(p)
        replay = makespan_s(one_f_one_b_events(c, n, r))
        assert replay <= float(schedule.iteration_time_s(c, n, r)) * (1 + REL)


def test_formula_is_exact_when_the_last_stage_is_slowest():
    # Slowest stage last: stage p-1 starts after sum_{s<p-1} F_s, then runs all m forward and
    # backward passes back to back (nothing downstream delays its backwards), then the last
    # backward drains through sum_{s<p-1} B_s: m T_{p-1} + sum_{s<p-1} T_s, the formula.
    c = _stage_table([0.6, 0.9, 0.7, 1.0], 8)
    n = r = np.zeros(4)
    assert makespan_s(one_f_one_b_events(c, n, r)) == pytest.approx(8 * 1.0 + 0.6 + 0.9 + 0.7, rel=REL)


def test_a_lighter_stage_after_the_slowest_costs_less_than_the_formula_says():
    # Stages T = (1, 2, 2, 1.5), forward = T/3, backward = 2T/3, m = 8; the slowest is stage 1
    # (stage 2 ties; the path is the same). Stage 2 waits for stage 3's round trip at the start
    # (T_3 - F_2 = 1.5 - 2/3) and at the end (T_3 - B_2 = 1.5 - 4/3) instead of the whole T_3
    # the formula charges, so the replay is shorter by T_2 - T_3 = 0.5:
    #   formula 8*2 + 1 + 2 + 1.5 = 20.5, replay 20.0.
    c = _stage_table([1.0, 2.0, 2.0, 1.5], 8)
    n = r = np.zeros(4)
    assert float(schedule.iteration_time_s(c, n, r)) == pytest.approx(20.5, rel=REL)
    assert makespan_s(one_f_one_b_events(c, n, r)) == pytest.approx(20.0, rel=REL)


def test_small_gpt_split_2_4_4_2_replay_is_shorter_by_the_tail_difference():
    # The README's case: small-gpt, pp=4, split [2,4,4,2], 4 micro-batches. Stages 1 and 2 are
    # the slowest, stage 3 (2 layers + the output layer) is lighter: by the derivation above
    # the replay ends T_2 - T_3 earlier than the formula, up to the p2p halves and the per-stage
    # sync times the replay adds after each stage's own last backward.
    inst = load_instance(Path(instances.__file__).parent / "small-gpt-16xA100.yaml")
    o = Outer(tp=1, pp=4, dp=4, micro_batch=4, num_micro_batches=4, recompute=Recompute.SELECTIVE)
    c = build(inst, o)
    n, r = np.array([2, 4, 4, 2], float), np.zeros(4)
    t = schedule.stage_times_s(c, n, r)
    formula = float(schedule.iteration_time_s(c, n, r))
    replay = makespan_s(one_f_one_b_events(c, n, r))
    assert formula - replay == pytest.approx(t[2] - t[3], rel=0.02)
    assert (replay - formula) / formula < -0.02


# --- the report's own features ----------------------------------------------------------------

def test_steady_state_cut_at_many_micro_batches():
    # Uniform 1F1B: in the steady state every stage does one forward and one backward per
    # micro-batch, so the period is T; below COMPACT_FROM_MICRO_BATCHES nothing is cut.
    from paraplan.solver.report import svg as report_svg
    c = _stage_table([0.3] * 4, 128)
    n = r = np.zeros(4)
    events = one_f_one_b_events(c, n, r)
    cut = report_svg.compact_steady_state(events, 4, 128, 1)
    assert cut is not None and cut.period_s == pytest.approx(0.3, rel=REL)
    assert cut.omitted_s == pytest.approx((cut.repeats - 1) * 0.3, rel=REL)
    # 1F1B on 4 stages: 3 warm-up forwards on stage 0, so at most m - 3 whole periods repeat
    assert 100 <= cut.micro_batches <= 128 - 3
    small = one_f_one_b_events(_stage_table([0.3] * 4, 8), n, r)
    assert report_svg.compact_steady_state(small, 4, 8, 1) is None
    svg, drawn = report_svg.gantt_svg(events, 4, 128, 1, 0.3 * (128 + 3), "t")
    assert drawn == cut and f"&#215; {cut.repeats}<" in svg
    # the interleaved schedule is cut too (its later stages reach their steady state later)
    ev2 = one_f_one_b_events(_stage_table([0.3] * 4, 64, 2), n, r)
    cut2 = report_svg.compact_steady_state(ev2, 4, 64, 2)
    assert cut2 is not None and cut2.micro_batches % 4 == 0
    assert cut2.period_s == pytest.approx(4 * 0.3, rel=REL)  # pp micro-batches of T each


def _steady_attrs(svg: str) -> dict[str, float]:
    m = re.search(r'<g class="steady" data-warmup-s="([^"]+)" data-period-s="([^"]+)"'
                  r' data-repeats="(\d+)" data-cooldown-s="([^"]+)">', svg)
    assert m is not None, "no steady-state mark"
    return dict(zip(("warmup", "period", "repeats", "cooldown"), map(float, m.groups())))


def test_64_interleaved_micro_batches_draw_one_steady_period_times_n():
    # 4 stages, 2 chunks each, 64 micro-batches, T = 0.3 s per micro-batch and stage (no p2p,
    # recompute or sync): the iteration is (m + (p - 1)/v) T = (64 + 1.5) 0.3 = 19.65 s
    # (Narayanan et al. SC'21, Sec. 2.2.2), and one steady period is p micro-batches' T = 1.2 s.
    # The chart draws that period once with "x N", and warm-up + N periods + cool-down is the
    # iteration; stage 0's forward boxes are those of the micro-batches outside the N - 1
    # periods not drawn (pp micro-batches each, both chunks).
    from paraplan.solver.report import svg as report_svg
    p, m, v, t = 4, 64, 2, 0.3
    c = _stage_table([t] * p, m, v)
    n = r = np.zeros(p)
    events = one_f_one_b_events(c, n, r)
    total = (m + (p - 1) / v) * t
    assert makespan_s(events) == pytest.approx(total, rel=REL)
    svg, cut = report_svg.gantt_svg(events, p, m, v, total, "t")
    assert cut is not None and cut.repeats >= 8
    a = _steady_attrs(svg)
    assert a["repeats"] == cut.repeats and a["period"] == pytest.approx(p * t, rel=REL)
    assert a["warmup"] + a["repeats"] * a["period"] + a["cooldown"] == pytest.approx(total, rel=1e-12)
    assert a["warmup"] > 0 and a["cooldown"] > 0
    assert svg.count("&#215; ") == 1 and f"&#215; {cut.repeats}<" in svg
    fwd0 = re.findall(r'<rect class="ev k-forward" data-mb="(\d+)" x="[^"]+" y="' + str(report_svg.TOP_PX
                      + report_svg.BRACKET_PX + 3) + '"', svg)
    assert len(fwd0) == v * (m - (cut.repeats - 1) * p)  # one box per drawn forward: none twice
    # the drawn width: warm-up + one period + cool-down fill the plot, the gap stands for the rest
    # (the chart is widened: at 1,000 px its boxes, 0.05 s forwards and 0.1 s backwards of ~4 s
    # drawn, were under report_svg.MIN_BOX_PX)
    width = float(re.search(r'<svg class="gantt" viewBox="0 0 [0-9.]+ [0-9.]+" width="([0-9.]+)"', svg).group(1))
    assert width > report_svg.WIDTH_PX and 'style="max-width:none"' in svg
    plot_px = width - report_svg.LEFT_PX - report_svg.RIGHT_PX - report_svg.BREAK_PX
    drawn_s = a["warmup"] + a["period"] + a["cooldown"]
    x_end = float(re.search(r'<line x1="([0-9.]+)"[^>]*stroke-dasharray="5 3"', svg).group(1))
    assert x_end == pytest.approx(report_svg.LEFT_PX + plot_px + report_svg.BREAK_PX, abs=0.1)
    assert drawn_s == pytest.approx(total - (cut.repeats - 1) * a["period"], rel=1e-12)
    # the median forward/backward box drawn is then MIN_BOX_PX wide (its width is set so)
    boxes = sorted(float(w) for w in re.findall(
        r'<rect class="ev k-(?:forward|backward)"[^>]* width="([0-9.]+)"', svg))
    assert boxes[len(boxes) // 2] == pytest.approx(report_svg.MIN_BOX_PX, abs=0.5)


def test_a_chart_of_wide_boxes_keeps_the_page_width():
    # 1F1B on 4 stages and 8 micro-batches of T = 0.3 s: the iteration (m + p - 1) T = 3.3 s
    # over the 906 px plot, a forward (T/3 = 0.1 s) 27.5 px, a backward 55 px, so the median
    # box is above MIN_BOX_PX (16) and the chart stays 1,000 px wide
    from paraplan.solver.report import svg as report_svg
    p, m, t = 4, 8, 0.3
    events = one_f_one_b_events(_stage_table([t] * p, m, 1), np.zeros(p), np.zeros(p))
    svg, cut = report_svg.gantt_svg(events, p, m, 1, (m + p - 1) * t, "t")
    assert cut is None and f'width="{report_svg.WIDTH_PX}"' in svg and "max-width:none" not in svg


def test_partitioned_plan_is_drawn_with_its_own_coefficients():
    # A per-operator plan (here token splits) has its own layer times: the chart must end at
    # the planner's objective (pp = 1: formula and replay coincide), not at the Megatron plan's.
    from paraplan.cost.readers.search import override_search
    inst = override_search(load_instance(TINY), {
        "tp": [4], "pp": [1], "zero": [0], "recompute": ["none"], "micro_batch": [4],
        "tensor_partitions": ["megatron", "spatial_temporal"]})
    res = plan(inst, time_limit_s=30)
    assert res.status == OPTIMAL and res.plan.partitions
    c = report.plan_coefficients(inst, res.plan)
    n = np.array(res.plan.layers_per_stage, float)
    r = np.array(res.plan.full_recompute_layers, float)
    assert makespan_s(one_f_one_b_events(c, n, r)) == pytest.approx(res.iter_time_s, rel=1e-6)
    megatron = build(inst, res.plan.flat_outer)
    assert abs(makespan_s(one_f_one_b_events(megatron, n, r)) - res.iter_time_s) > 1e-6 * res.iter_time_s
    page = report.build_report(inst, res)
    from paraplan.solver.plan_text import describe_partitions
    assert all(f"<td>{line}</td>" in page for line in describe_partitions(res.plan, inst))  # the plan's rows


def test_report_compares_a_users_plan(tiny_report):
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    inst = load_instance(TINY)
    res = plan(inst, time_limit_s=30)
    mine = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2, "recompute": "selective",
                              "sequence_parallel": True}, inst)
    page = report.build_report(inst, res, user_plan=mine, user_plan_label="mine.yaml")
    assert '<section id="comparison"><h2>6. Your plan vs the optimum</h2>' in page
    assert "The optimum is" in page and "faster than your plan" in page


def test_mixed_cluster_report():
    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver.search import search
    inst = load_instance(Path(instances.__file__).parent / "mixed" / "tiny-2types.yaml")
    res = search(inst, "cpsat", 30)
    assert res.status == OPTIMAL
    page = report.build_report(inst, res)  # the one builder, as for a flat plan
    assert page.count('<svg class="gantt"') == len(res.plan.classes)
    assert "Network scenarios and regret" in page and "OPTIMAL: proved" in page
    # the evidence carries the plan's trust band, as `plan` prints it: the search minimised the
    # p90 time (search.objective's default), and a p90 plan's band ends at its p90 time
    # (cost/trust.plan_trust), so the band's upper end is the minimised value on the page
    assert inst.search.objective == "p90"
    minimised = re.search(r"<th>minimised \(p90\)</th><td>([^:<]+):", page).group(1)
    upper = re.search(r"<th>trust</th><td>measured time likely in [^<]* \.\. ([^ ]+ m?s) ", page).group(1)
    assert minimised == upper == seconds(res.quantile_s)


def test_a_flat_file_and_its_one_group_file_get_the_same_page(tmp_path, tiny_report):
    # one group == homogeneous: tiny-gpt written as one node group (the same node, named) is the
    # same instance, so the one builder writes the same page, byte for byte, but the measured
    # solve time. The flat file's page is tiny_report, made by the calls this test made for it
    # (load_instance(TINY), plan(inst, time_limit_s=30), report.build_report), once per process
    # (issue 32)
    import yaml

    raw = yaml.safe_load(TINY.read_text(encoding="utf-8"))
    raw["cluster"] = {"groups": [{"name": "a100", **raw["cluster"]}]}
    path = tmp_path / "one-group.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    inst = load_instance(path)
    res = plan(inst, time_limit_s=30)
    pages = [re.sub(r"<th>solve time</th><td>[^<]*", "", page)
             for page in (tiny_report, report.build_report(inst, res))]
    assert pages[0] == pages[1]


def test_a_plan_of_two_classes_on_one_group_is_drawn_class_by_class(tmp_path):
    # tiny-gpt on its one 8-GPU node, batch 15 at 2,048 tokens, with two replica classes
    # allowed: the proved optimum is two classes (1 replica of 1 micro-batch beside 7 of 2,
    # 33.76 ms against the one-class plan's 61.21, exhaustive search in
    # tests/mixed/test_one_group_options.py), which a one-class page cannot draw; the one
    # builder gives it a Gantt per class and its stages' table, and no frontier (whose points
    # are one-class plans)
    import dataclasses
    from tests.mixed.test_one_group_options import TWO_CLASSES, _file
    inst = load_instance(_file(tmp_path, *TWO_CLASSES))
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, classes_per_group=2))
    res = plan(inst, "cpsat", 30)
    assert res.status == OPTIMAL and len(res.plan.classes) == 2
    page = report.build_report(inst, res)
    assert page.count('<svg class="gantt"') == 2 and "<h3>class 2:" in page
    assert "<th>class</th><th>stage</th><th>group</th>" in page
    assert "Pareto frontier" not in page


# --- DualPipe (solver/report/dualpipe.py) -------------------------------------------------------

def test_dualpipe_report_draws_its_timeline_breakdown_and_memory_per_device_pair(tmp_path):
    # The tiny MoE of tests/solver/test_dualpipe_planning.py under DualPipe, 4 stages forced so
    # that there are two device pairs (0 & 3, 1 & 2). The timeline's rows end where the cost
    # model's iteration does: slowest steady phase + bubble + slowest sync (cost/dualpipe.py).
    import yaml

    from paraplan.cost import dualpipe
    from paraplan.solver.report import dualpipe as report_dualpipe
    from tests.solver.test_dualpipe_planning import BASE
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    raw["search"] = {"pp": [4], "tp": [1]}
    path = tmp_path / "dualpipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    res = plan(inst, time_limit_s=30)
    assert res.status == OPTIMAL and res.plan.pp == 4
    page = report.build_report(inst, res)
    for k, anchor in enumerate(("evidence", "timeline", "breakdown", "memory", "frontier"), start=1):
        assert f'<section id="{anchor}"><h2>{k}. ' in page
    assert "<h2>4. Memory per device pair</h2>" in page and "Not drawn for a DualPipe job" in page
    assert "Not drawn exactly:" in page and "No plan to show" not in page
    assert page.count('<svg class="gantt phases"') == 1
    images = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert [alt for alt, _ in images] == ["time breakdown", "memory per device pair"]
    assert all(base64.b64decode(b).startswith(PNG_MAGIC) for _, b in images)
    it = dualpipe.iteration(inst, res.plan, reserve_bytes=inst.search.memory_reserve_bytes)
    assert it.iter_time_s == pytest.approx(res.iter_time_s, rel=1e-9)
    blocks = [(kind, float(a), float(b)) for kind, a, b in re.findall(
        r'data-kind="(\w+)" data-start-s="([^"]+)" data-end-s="([^"]+)"', page)]
    assert [k for k, _, _ in blocks] == ["steady", "bubble", "sync"] * 2  # one row per device pair
    assert max(b for _, _, b in blocks) == pytest.approx(it.iter_time_s, rel=1e-12)
    for (kind, a, b), (d, part) in zip(blocks, [(d, part) for d in (0, 1) for part in range(3)]):
        expected = (it.steady_s[d], it.bubble_s, it.sync_s[d])[part]
        assert b - a == pytest.approx(expected, rel=1e-12), (kind, d)
    assert it.steady_s[0] == it.steady_s[3] and it.sync_s[1] == it.sync_s[2]  # mirrors share a row
    rows = report_dualpipe.pair_rows(it)
    assert [r.label for r in rows] == ["devices 0 & 3", "devices 1 & 2"]
    for r in rows:
        assert f"{r.mem_bytes / 2**30:.2f} GiB" in page


def test_captions_say_what_is_drawn_before_citing_a_file(tiny_report):
    # issue 34: a caption opens with what its figure shows in plain words; a file may follow
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", tiny_report, re.S)
    captions += re.findall(r'<section id="evidence">.*?</table>(<p>.*?</p>)', tiny_report, re.S)
    assert len(captions) == 5  # timeline, breakdown, memory, frontier, evidence
    for text in captions:
        first = re.split(r"\.\s", re.sub(r"<[^>]+>", "", text), maxsplit=1)[0]
        assert ".py" not in first and "_s" not in first, first
        assert len(first.split()) >= 6, first
        assert "Source" in text  # the file reference follows


def test_the_evidence_objective_is_the_value_the_bound_bounds():
    # a p90 plan: predicted 10 s, 11 s at p90 (what was minimised), bound 10.9 s on that value.
    # The row pair must read objective >= bound: 11.000 s, then 10.900 s; showing the predicted
    # 10 s as the objective put the bound above it on every p90 report
    from paraplan.solver.planner import SolveResult
    from paraplan.solver.report.page import evidence_rows
    res = SolveResult(status="optimal", plan=None, objective="nominal", objective_s=10.0, bound_s=10.9,
                      solve_time_s=1.0, backend="dp", outer_configs=1, plans_total=1, quantile_s=11.0)
    rows = dict((r[0], r[1]) for r in evidence_rows(res, None, "p90"))
    assert rows["objective"].startswith("11.000 s at p90") and rows["objective"].endswith("predicted 10.000 s")
    assert rows["best lower bound"] == "10.900 s (on the objective)"
    assert rows["gap"] == f"{100 * (11.0 - 10.9) / 11.0:.4f}%"


def test_the_frontier_axis_starts_near_its_points_where_they_crowd_the_right():
    # BLOOM-176B's points need 26.7 .. 30 GiB of a 31.2 GiB axis: all beyond 0.4 x 31.2 = 12.48,
    # so the axis starts 6% of the span left of the smallest, 26.7 - 0.06 x 4.5 = 26.43; points
    # from 5 GiB keep the axis at 0
    from paraplan.solver.report.page import _axis_start
    assert _axis_start(26.7, 31.2) == pytest.approx(26.43, abs=1e-12)
    assert _axis_start(5.0, 81.1) == 0.0


def test_memory_totals_go_inside_their_bars_where_one_would_sit_on_the_capacity_line():
    # capacity 78 GiB on an axis of 78 x 1.25 = 97.5: a 75.61 GiB total is 2.39 below the line,
    # within 7% of 97.5 (6.825), so every total is written inside its bar's top in white; with
    # totals of 60 and 50 (18 and 28 below) they stay above their bars
    from matplotlib.figure import Figure
    from paraplan.solver.report.bars import total_labels
    ax = Figure().add_subplot()
    total_labels(ax, [75.61, 69.64], 78.0, 97.5)
    assert [(t.get_text(), t.get_va(), t.get_color()) for t in ax.texts] == [
        ("75.61", "top", "white"), ("69.64", "top", "white")]
    ax = Figure().add_subplot()
    total_labels(ax, [60.0, 50.0], 78.0, 97.5)
    assert {(t.get_va(), t.get_color()) for t in ax.texts} == {("bottom", "black")}
