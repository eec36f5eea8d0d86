"""The page of `paraplan report` (the command: solver/commands/report.py): one self-contained
HTML page about an instance's optimal plan, of any kind, rendered by one builder (build_report).

Sections: (1) the optimality evidence, (2) the pipeline timeline of one iteration
(cost/timeline.py replays the schedule event by event; a long steady state is drawn once with
its repeat count, svg.py), (3) the time breakdown of cost/simulate.py, (4) memory per stage
against capacity, (5) throughput against peak memory for every outer configuration of the
declared space, with the Pareto frontier. A DualPipe plan (report/dualpipe.py) gets its priced
phases per device pair for (2) and its memory per device pair for (4); (5) is not drawn for it.
A plan of several replica classes, or on node groups, gets a Gantt per class for (2), its
stages' time and memory for (4) and its time on every network scenario for (5).
Each caption says first what its figure shows, in plain words, and then where it comes from. Figures are PNGs drawn with matplotlib's Agg canvas and
embedded as base64 data URIs, so the page has no external files. matplotlib is imported only
when a report is built, so the other sub-commands do not pay for it.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass

import numpy as np

from paraplan.cost import dualpipe, schedule, timeline
from paraplan.cost.coefficients import StageCoefficients, build
from paraplan.cost.specs import Instance, Outer, PipelineSchedule
from paraplan.cost.plan_specs import Plan
from paraplan.cost.units import MS_S, bytes_to_gib
from paraplan.cost.partition import plan_layer_fn
from paraplan.cost.train_cost import instance_train_cost
from paraplan.cost.trust import plan_trust
from paraplan.solver.bounds import one_class
from paraplan.solver.report import bars as report_bars
from paraplan.solver.report import dualpipe as report_dualpipe
from paraplan.solver.report import svg as report_svg
from paraplan.solver.format import band_text, count, quantile_phrase, release_text, seconds, train_cost_lines
from paraplan.solver.plan_text import describe_plan, plan_lines, shown_as_groups

DPI = 110
# The replay "ends at the objective" when the two agree to this relative precision.
SAME_TIME_REL = 1e-6
# The frontier plot draws the capacity line only when it lies within this factor of the
# largest peak memory plotted.
CAPACITY_SHOWN_BEYOND_DATA = 1.5
# The frontier's memory axis starts near its smallest point, not at 0, where every point needs
# more than this share of the axis' right end (_axis_start).
ZOOM_FROM = 0.4

SECTIONS = ("Optimality evidence", "Pipeline timeline", "Time breakdown", "Memory per stage",
            "Throughput vs memory frontier", "Your plan vs the optimum")


@dataclass(frozen=True)
class FrontierPoint:
    outer: Outer
    iter_time_s: float
    tokens_per_s: float
    peak_mem_bytes: float


def outer_label(o: Outer) -> str:
    return (f"tp={o.tp} pp={o.pp} dp={o.dp} cp={o.cp} mb={o.micro_batch}x{o.num_micro_batches}"
            f"{' sp' if o.sequence_parallel else ''} zero={o.zero} v={o.virtual_stages}"
            f" {o.recompute.value}")


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


# --- section 2: breakdown --------------------------------------------------------------------

def breakdown_figure(bd) -> bytes:
    from matplotlib.figure import Figure

    items = [(name.replace("_", " "), val, False) for name, val in bd.exposed_s.items() if val > 0]
    items += [(f"{name.replace('_', ' ')} (overlapped)", val, True)
              for name, val in bd.overlapped_s.items() if val > 0]
    longest_s = max(v for _, v, _ in items)
    div, unit = (MS_S, "ms") if longest_s < 1.0 else (1.0, "s")  # the axis in readable units
    fig = Figure(figsize=(9, 0.9 + 0.38 * len(items)), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(items))
    vals = [val / div for _, val, _ in items]
    colours = ["#4c72b0" if not hid else "#c8c8c8" for _, _, hid in items]
    bars = ax.barh(y, vals, color=colours, edgecolor="#555555", linewidth=0.5)
    for bar, (_, val, hid) in zip(bars, items):
        bar.set_hatch("//" if hid else "")
        share = "hidden" if hid else f"{100 * val / bd.iter_time_s:.1f}%"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f"  {seconds(val)} ({share})",
                va="center", fontsize=8)
    ax.set_yticks(y, [name for name, _, _ in items])
    ax.invert_yaxis()
    ax.set_xlim(0, max(vals) * 1.3)
    ax.set_xlabel(f"time per iteration ({unit})")
    ax.set_title(f"Critical path of {seconds(bd.iter_time_s)} (solid) and communication hidden"
                 " behind compute (hatched)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


# --- section 3: memory -----------------------------------------------------------------------

def memory_parts_bytes(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> dict[str, np.ndarray]:
    """The terms of cost.schedule.stage_mem_bytes, by name; they sum to it."""
    return {
        "fixed: embedding/output state, workspace, runtime": c.stage_mem_bytes,
        "layer weights, gradients, optimizer state": n * c.layer_state_bytes,
        "activations in flight (incl. checkpoints)": n * c.layer_act_bytes
        - r * (c.layer_act_bytes - c.layer_ckpt_bytes),
    }


def memory_figure(c: StageCoefficients, n: np.ndarray, r: np.ndarray) -> bytes:
    parts = memory_parts_bytes(c, n, r)
    stacks = [(name, colour, np.array([bytes_to_gib(b) for b in val]))
              for (name, val), colour in zip(parts.items(), ("#937860", "#4c72b0", "#dd8452"))]
    return _png(report_bars.memory_bars(stacks, bytes_to_gib(float(c.capacity_bytes.min())),
                                        [str(s) for s in range(c.pp)], "pipeline stage",
                                        "Peak memory per GPU of each stage", ncol=2, width_per_bar=0.5))


# --- section 4: frontier ---------------------------------------------------------------------

def frontier_points(inst: Instance, coeffs: list[StageCoefficients]) -> list[FrontierPoint]:
    """Each outer configuration's even split with the fewest fully recomputed layers that fit,
    among the counts the job's framework runs (solver.one_class.incumbent); configurations where
    that split does not fit are left out."""
    from paraplan.cost.framework_rules import recompute_pattern
    tokens = inst.job.global_batch * inst.model.seq_len
    out = []
    for c in coeffs:
        inc = one_class.incumbent(c, inst.search.full_recompute,
                                  recompute_pattern(inst.job.framework, c.outer.recompute,
                                                    inst.search.partial_recompute))
        if inc is None:
            continue
        t, n, r = inc
        out.append(FrontierPoint(c.outer, t, tokens / t, float(schedule.stage_mem_bytes(c, n, r).max())))
    return out


def pareto_front(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """Points no other point beats on both throughput (higher) and peak memory (lower),
    by ascending memory."""
    front: list[FrontierPoint] = []
    for p in sorted(points, key=lambda p: (p.peak_mem_bytes, -p.tokens_per_s)):
        if not front or p.tokens_per_s > front[-1].tokens_per_s:
            front.append(p)
    return front


def frontier_figure(points: list[FrontierPoint], front: list[FrontierPoint],
                    best: FrontierPoint | None, capacity_bytes: float) -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(9, 5.6), layout="constrained")
    ax = fig.add_subplot()
    if points:
        ax.scatter([bytes_to_gib(p.peak_mem_bytes) for p in points], [p.tokens_per_s for p in points],
                   s=10, color="#9a9a9a", alpha=0.5, label=f"even split, one per outer config ({len(points)})")
    if front:
        fx = [bytes_to_gib(p.peak_mem_bytes) for p in front]
        fy = [p.tokens_per_s for p in front]
        ax.step(fx, fy, where="post", color="#4c72b0", linewidth=1.2)
        ax.scatter(fx, fy, s=28, color="#4c72b0", zorder=3, label=f"Pareto frontier ({len(front)})")
    if best is not None:
        ax.scatter([bytes_to_gib(best.peak_mem_bytes)], [best.tokens_per_s], marker="*", s=260,
                   color="crimson", edgecolor="black", zorder=4, label="optimal plan")
    cap = bytes_to_gib(capacity_bytes)
    right = max([bytes_to_gib(p.peak_mem_bytes) for p in points + ([best] if best else [])],
                default=cap)
    left = min([bytes_to_gib(p.peak_mem_bytes) for p in points + ([best] if best else [])], default=0.0)
    if 0 < cap <= CAPACITY_SHOWN_BEYOND_DATA * right:
        ax.axvline(cap, color="crimson", linestyle="--", linewidth=1,
                   label=f"usable capacity {cap:.1f} GiB")
        ax.set_xlim(_axis_start(left, cap * 1.04), cap * 1.04)
    elif right > 0:  # far right of every point: drawing it would squeeze the points
        ax.set_xlim(_axis_start(left, right * 1.1), right * 1.1)
        ax.text(0.99, 0.02, f"usable capacity {cap:.1f} GiB: far right of the axis",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="crimson")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.set_xlabel("peak memory per GPU, largest stage (GiB)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside lower center", fontsize=8, ncol=4, frameon=False)
    ax.set_title("Throughput vs peak memory of every outer configuration", fontsize=10)
    return _png(fig)


def _axis_start(lo: float, hi: float) -> float:
    """0, or just left of the smallest value `lo` where every value lies in the right part of
    [0, hi] (ZOOM_FROM): BLOOM-176B's 1,700 configurations all need 26-30 of 30 GiB, and from 0
    they were one vertical smear at the right edge."""
    if lo <= ZOOM_FROM * hi:
        return 0.0
    return lo - 0.06 * (hi - lo)


# --- HTML ------------------------------------------------------------------------------------

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #e4e4e4; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1em 0; } img { max-width: 100%; }
figcaption { font-size: 0.88em; color: #444; max-width: 900px; }
code { background: #f3f3f3; padding: 0 0.2em; }
table.facts th { text-align: left; font-weight: 600; white-space: nowrap; vertical-align: top; }
table.facts td { text-align: left; }
"""


def _img(png: bytes, alt: str) -> str:
    return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode("ascii")}">')


def _table(headers: list[str] | None, rows: list[list[str]]) -> str:
    if headers is None:  # a fact sheet: label and text, both left-aligned
        body = "".join(f"<tr><th>{html.escape(str(r[0]))}</th><td>{html.escape(str(r[1]))}</td></tr>"
                       for r in rows)
        return f'<table class="facts"><tbody>{body}</tbody></table>'
    head = "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>"
                   for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _section(k: int, anchor: str, body: str, title: str | None = None) -> str:
    return f'<section id="{anchor}"><h2>{k}. {title or SECTIONS[k - 1]}</h2>{body}</section>'


def plan_coefficients(inst: Instance, p: Plan) -> StageCoefficients:
    """The coefficients the plan was priced with: its own per-operator partitions included
    (cost/partition.py), so that the chart ends where the planner's objective does."""
    return build(inst, p.flat_outer, reserve_bytes=inst.search.memory_reserve_bytes,
                 layer_fn=plan_layer_fn(p.partitions))


def gantt_figure(events, pp: int, m: int, v: int, objective_s: float, title: str,
                 row_labels: list[str] | None = None) -> tuple[str, report_svg.Cut | None]:
    svg, cut = report_svg.gantt_svg(events, pp, m, v, objective_s, title, row_labels)
    fig = (f'<figure class="gantt-fig"><div class="gantt-wrap">{svg}</div>'
           + report_svg.legend_html(report_svg.kinds_present(events), objective_s))
    return fig, cut


def _cut_text(cut, v: int, pp: int, total_s: float) -> str:
    if cut is None:
        return ""
    warm, steady, cool = (html.escape(seconds(x)) for x in cut.phases_s(total_s))
    return (f" The steady state is drawn once: in it every stage repeats the same"
            f" {'forward/backward pair' if v == 1 else f'{pp} forward/backward pairs'} every"
            f" {html.escape(seconds(cut.period_s))}, and the bracketed period marked"
            f" &#215;&nbsp;{cut.repeats} stands for {cut.repeats} such periods"
            f" ({cut.micro_batches} micro-batches, {steady}); the dashed zig-zag after it is where"
            f" the time axis jumps over the {cut.repeats - 1} periods not drawn. Warm-up {warm} +"
            f" {cut.repeats} &#215; {html.escape(seconds(cut.period_s))} + cool-down {cool} ="
            f" {html.escape(seconds(total_s))}, the priced iteration time. The periods were checked"
            " identical on the replayed events before any was left out.")


def _many(k: int, one: str, more: str) -> str:
    return f"{k} {one if k == 1 else more}"


def _zero_bubble_drawn(p: Plan) -> str:
    """What the chart of a plan running torch's zero-bubble schedule draws: the replay
    (cost/timeline.py) orders passes as interleaved 1F1B does and does not split a backward into
    its input and weight gradients, so the chart is that schedule's, and the plan's priced time
    (the dashed line) is the zero-bubble schedule's, shorter by the weight gradients that fill
    the fill and drain (cost/zero_bubble.py)."""
    if p.zero_bubble is None:
        return ""
    return (f" (the plan runs torch's {p.zero_bubble.value}, whose weight-gradient passes fill the"
            " fill and drain; the chart draws the same passes in interleaved 1F1B's order, backward"
            " passes whole, so it ends after the priced time by what those weight gradients save)")


def _timeline_section(c: StageCoefficients, p: Plan, analytic_s: float) -> str:
    n, r = np.array(p.layers_per_stage, float), np.array(p.full_recompute_layers, float)
    events = timeline.one_f_one_b_events(c, n, r)
    replay_s = timeline.makespan_s(events)
    t = schedule.stage_times_s(c, n, r)
    uniform = bool(np.ptp(t) <= 1e-12 * t.max())
    same = abs(replay_s - analytic_s) <= SAME_TIME_REL * analytic_s
    rel = (replay_s - analytic_s) / analytic_s
    fig, cut = gantt_figure(events, p.pp, p.num_micro_batches, p.virtual_stages, analytic_s,
                            "One iteration of the plan, one row per pipeline stage")
    caption = (
        f"What each GPU of the pipeline does during one iteration: one row per stage, time to the"
        f" right, {_many(p.num_micro_batches, 'micro-batch', 'micro-batches')} flowing through"
        f" {_many(p.pp, 'stage', 'stages')} under"
        + (" the 1F1B schedule" if p.virtual_stages == 1 else
           f" interleaved 1F1B with {p.virtual_stages} model chunks per stage (odd chunks lighter)")
        + _zero_bubble_drawn(p)
        + ", each pass placed as soon as its stage and the pass it waits for are free, with the"
        " plan's own times" + (" (its per-operator tensor partitions included)" if p.partitions else "")
        + ". Blue boxes are forward passes, green backward passes (numbered by micro-batch), orange"
        " full recomputation just before a backward, purple the hand-off to the next stage, brown"
        " the gradient sync and optimizer step after a stage's last backward; white space is the"
        " pipeline bubble, when a stage waits. The forward/backward split of a stage's time is"
        " drawn as 1 : 2 (the linear layers' ratio; the cost model prices only their sum, so the"
        " split is an approximation). The dashed line is the iteration time the planner priced,"
        + (" (m &minus; 1/v)&middot;max T<sub>s</sub> + &Sigma;T<sub>s</sub>/v + max D<sub>s</sub>."
           if p.zero_bubble is None else
           " max<sub>s</sub> [m T<sub>s</sub> + (&Sigma;B &minus; B<sub>s</sub>)/v] + max D<sub>s</sub>,"
           " B<sub>s</sub> the stage's pass through the fill and drain less its weight gradients.")
        + " Hover a box for its times (its micro-batch lights up on every stage); click a legend"
        " entry to hide that kind. (Sources: <code>cost/timeline.py</code> for the replay,"
        " <code>cost/schedule.py</code> for the formula.)"
        + _cut_text(cut, p.virtual_stages, p.pp, analytic_s)
        + (f" The replay ends {html.escape(seconds(abs(replay_s - analytic_s)))}"
           f" ({100 * rel:+.2g}%) {'before' if rel < 0 else 'after'} the objective: it runs each"
           " backward whole where the zero-bubble schedule moves the weight gradients into the"
           " fill and drain." if p.zero_bubble is not None else
           " All stages take the same time, so the replay ends exactly at the objective."
           if uniform else " The stages differ a little, yet the replay ends at the objective"
           " (to 1e-6): the formula is exact here, as it is whenever the slowest stage is the"
           " last one (README, Cost model: Pipeline)." if same else
           f" The stages differ, so the replay ends {html.escape(seconds(abs(replay_s - analytic_s)))}"
           f" ({100 * rel:+.2g}%) {'before' if rel < 0 else 'after'} the objective: the formula"
           " charges the slowest stage m times and every other stage once in full, an upper"
           " bound; the replay overlaps a lighter stage's round trip with the slowest stage's"
           " warm-up and cool-down (README, Cost model: Pipeline)."))
    rows = [["planner's objective (formula)", seconds(analytic_s)],
            ["event replay makespan", seconds(replay_s)],
            ["difference", f"{100 * rel:+.2g}%"]]
    return (f"{fig}<figcaption>{caption}</figcaption></figure>"
            + _table(["iteration time", "value"], rows))


# --- DualPipe (solver/report/dualpipe.py) ---------------------------------------------------

_DUALPIPE_NO_FRONTIER = (
    "<p>Not drawn for a DualPipe job. The frontier evaluates every configuration with an even"
    " layer split under the 1F1B schedules' formula; under DualPipe each configuration's split is"
    " a problem of its own (pairs of stages share a device and the bubble has another form), so"
    " those points would price schedules this plan does not run. The optimality evidence above"
    " covers every configuration DualPipe can run (source: <code>formulations/dualpipe.py</code>).</p>")


def _dualpipe_timeline_section(it, p: Plan) -> str:
    m, pp = p.num_micro_batches, p.pp
    rows = report_dualpipe.timeline_rows(it, m)
    svg = report_svg.phases_svg(rows, it.iter_time_s, "One DualPipe iteration as priced, one row per device pair")
    slow = report_dualpipe.pair_rows(it)[min(it.bottleneck_device, pp - 1 - it.bottleneck_device)]
    caption = (
        f"One iteration of the DualPipe plan: {m} micro-batches, half fed from each end of a"
        f" {pp}-stage pipeline, each device holding two stages (stage d and stage {pp - 1}"
        f" &minus; d), so devices d and {pp - 1} &minus; d do the same work and share a row. Each"
        f" row shows the three parts the cost model charges: blue, the device's steady phase, in"
        f" which it runs a forward and a backward chunk of both its stages for each of the"
        f" {m // 2} micro-batch pairs (drawn once as one block labelled {m // 2} &#215; the time of"
        f" one such pair); grey, the pipeline bubble, {html.escape(seconds(it.bubble_s))}, the"
        f" same for every device; brown, the gradient sync and optimizer step of both stages. The"
        f" slowest pair ({html.escape(slow.label)}) sets the end of the steady phase; the white"
        f" space after a faster pair's steady phase is time the model lets it wait. The"
        f" parts add up to the priced iteration time, {html.escape(seconds(it.iter_time_s))}"
        f" (dashed line): slowest steady phase + bubble + slowest sync."
        " <b>Not drawn exactly:</b> the model prices DualPipe's phases as totals, not step by"
        " step. In the real schedule the bubble is spread over the warm-up and cool-down at both"
        " ends of the steady phase, and devices do not wait at a barrier; the chart places the"
        " bubble after the steady phase, the order in which the formula adds them, and shows no"
        " individual micro-batches. (Source: <code>cost/dualpipe.py</code>, after the"
        " DeepSeek-V3 report and deepseek-ai/DualPipe.)")
    table = _table(["device pair", "layers", "fully recomputed", "time per micro-batch pair",
                    "steady phase", "sync + optimizer"],
                   [[r.label, str(r.layers), str(r.recompute_layers), seconds(2 * r.time_per_micro_batch_s),
                     seconds(r.steady_s), seconds(r.sync_s)] for r in report_dualpipe.pair_rows(it)])
    total = _table(["iteration time", "value"],
                   [["slowest steady phase", seconds(float(it.steady_s.max()))],
                    ["pipeline bubble", seconds(it.bubble_s)],
                    ["slowest gradient sync + optimizer", seconds(float(it.sync_s.max()))],
                    ["iteration (priced)", seconds(it.iter_time_s)]])
    return (f'<figure class="phases-fig"><div class="gantt-wrap">{svg}</div>'
            + report_svg.phase_legend_html(it.iter_time_s)
            + f"<figcaption>{caption}</figcaption></figure>" + table + total)


def _dualpipe_memory_section(inst: Instance, p: Plan, it) -> str:
    png = _png(report_dualpipe.memory_figure(inst, p, it))
    rows = [[r.label, str(r.layers), str(r.recompute_layers), f"{bytes_to_gib(r.mem_bytes):.2f} GiB",
             f"{bytes_to_gib(r.capacity_bytes):.2f} GiB", f"{100 * r.mem_bytes / r.capacity_bytes:.0f}%"]
            for r in report_dualpipe.pair_rows(it)]
    caption = (
        "Peak memory of one GPU in each device pair (devices d and pp &minus; 1 &minus; d hold the"
        " same two stages, so they need the same), split into weights, gradients, optimizer"
        " state, activations and the rest, against the usable capacity (dashed: HBM less the"
        " instance's memory reserve). A device holds both its stages' parameters, gradients and"
        " optimizer state, and the activations of pp + 1 micro-batch chunks in flight at its peak,"
        " as DualPipe's own table counts them; the runtime is counted once. (Source:"
        " <code>cost/dualpipe.py</code>, <code>device_categories_bytes</code>.)")
    return (f"<figure>{_img(png, 'memory per device pair')}<figcaption>{caption}</figcaption></figure>"
            + _table(["device pair", "layers (both stages)", "fully recomputed", "memory", "capacity",
                      "used"], rows))


def _breakdown_section(bd) -> str:
    rows = [[name, seconds(val), f"{100 * val / bd.iter_time_s:.1f}%"]
            for name, val in bd.exposed_s.items() if val > 0]
    rows.append(["total (iteration time)", seconds(bd.iter_time_s), "100.0%"])
    hidden = [[name, seconds(val)] for name, val in bd.overlapped_s.items() if val > 0]
    where = (f"the slowest pipeline stage (stage {bd.bottleneck_stage})" if bd.unit == "stage" else
             f"the slowest device pair (device {bd.bottleneck_stage} and its mirror)")
    caption = ("Where the time of one iteration goes. Solid bars: the parts of the critical path,"
               f" the work on {where} plus the pipeline bubble and the gradient sync and optimizer"
               " step, each with its share; they add up to the iteration time. Hatched bars:"
               " communication that runs at the same time as compute and so adds no time."
               " (Source: <code>cost/simulate.py</code>, Breakdown.exposed_s and overlapped_s.)")
    out = (f"<figure>{_img(breakdown_figure(bd), 'time breakdown')}<figcaption>{caption}"
           "</figcaption></figure>" + _table(["on the critical path", "time", "share"], rows))
    if hidden:
        out += _table(["overlapped (hidden) communication", "time"], hidden)
    return out


def _memory_section(c: StageCoefficients, p: Plan, bd) -> str:
    n, r = np.array(p.layers_per_stage, float), np.array(p.full_recompute_layers, float)
    rows = [[str(s.stage), str(s.layers), str(s.full_recompute_layers),
             f"{bytes_to_gib(s.mem_bytes):.2f} GiB", f"{bytes_to_gib(s.capacity_bytes):.2f} GiB",
             f"{100 * s.mem_bytes / s.capacity_bytes:.0f}%"] for s in bd.stages]
    caption = ("Peak memory of one GPU of each pipeline stage, split into the fixed part (embedding"
               " and output layer state, workspace, CUDA and NCCL runtime), the layers' weights,"
               " gradients and optimizer state, and the activations of the micro-batches in flight"
               " at the peak, against the usable capacity (dashed: HBM less the instance's"
               " <code>memory_reserve_gib</code>). (Source: <code>cost/coefficients.py</code>,"
               " M<sub>s</sub>.)")
    return (f"<figure>{_img(memory_figure(c, n, r), 'memory per stage')}<figcaption>{caption}"
            "</figcaption></figure>"
            + _table(["stage", "layers", "fully recomputed", "memory", "capacity", "used"], rows))


def _frontier_section(inst: Instance, coeffs: list[StageCoefficients], result) -> str:
    points = frontier_points(inst, coeffs)
    best = None
    if result.plan is not None and result.breakdown is not None:
        bd = result.breakdown
        best = FrontierPoint(result.plan.flat_outer, bd.iter_time_s, bd.tokens_per_s, bd.peak_mem_bytes)
    front = pareto_front(points + ([best] if best else []))
    cap = float(min(c.capacity_bytes.min() for c in coeffs)) if coeffs else 0.0
    rows = [[outer_label(f.outer) + (" (optimal plan)" if f is best else ""), f"{f.tokens_per_s:,.0f}",
             seconds(f.iter_time_s), f"{bytes_to_gib(f.peak_mem_bytes):.1f} GiB"]
            for f in reversed(front)]
    caption = (
        "How fast each way of laying out the job could run against the memory it needs. Each grey"
        f" point is one of {len(points)} configurations (parallel degrees, micro-batching, modes)"
        " with its layers split evenly over the stages and, where the space allows it, the fewest"
        " fully recomputed layers that fit; it sits at its throughput (tokens per second) and the"
        " peak memory of its fullest stage. Blue: the Pareto frontier, the points no other point"
        " beats on both throughput and memory. Red star: the optimal plan, with its solved layer"
        " split." + (f" {len(coeffs) - len(points)} configurations do not fit with the even split"
                     " and are not shown." if coeffs else "")
        + ("" if inst.search.objective == "mean" else
           f" Points sit at their predicted throughput; the plans were ranked by the time at"
           f" {inst.search.objective} (the predicted time times a factor from the cost model's"
           " errors on comparable published runs, which differs between configurations), so a"
           " point above the star can still rank below it.")
        + " (Source: <code>solver/bounds/one_class.py</code>, incumbent.)")
    png = frontier_figure(points, front, best, cap)
    return (f"<figure>{_img(png, 'throughput vs memory')}<figcaption>{caption}</figcaption></figure>"
            + _table(["frontier plan (outer configuration)", "tokens/s", "iteration time",
                      "peak memory"], rows))


def evidence_rows(result, trust, quantile: str = "mean") -> list[list[str]]:
    """Optimality evidence of a planner result (any plan the search returns), and how far to
    trust its time (cost/trust.py). The objective row is what was minimised (the predicted time
    at search.objective `quantile`, as `plan` prints it), the value the bound bounds: shown as
    the predicted time, the bound sat above the objective on every p90 report."""
    claim = {"optimal": "OPTIMAL: proved over the declared space",
             "feasible": "FEASIBLE: not proved optimal (time limit)",
             "infeasible": "INFEASIBLE: proved, no plan in the space fits",
             "timeout": "TIMEOUT: no plan found within the time limit"}[result.status]
    predicted = result.objective_s
    value = result.quantile_s if result.quantile_s is not None else predicted
    rows = [["status", claim]]
    if value is not None:
        rows.append(["objective", seconds(value) + quantile_phrase(quantile, predicted)])
    if result.bound_s is not None:
        rows.append(["best lower bound", f"{seconds(result.bound_s)} (on the objective)"])
        rows.append(["gap", f"{100 * (result.gap or 0):.4f}%"])
    rows.append(["quantisation tolerance", f"{result.tolerance_s:.3g} s"])
    rows.append(["solve time", f"{result.solve_time_s:.2f} s ({result.backend})"])
    rows.append(["declared space", f"{result.outer_configs:,} outer configurations,"
                 f" {count(result.plans_total)} plans"])
    rows.append(["accounted for", f"{result.solved:,} solved exactly ({result.inner_infeasible:,}"
                 f" infeasible), {result.pruned_by_bound:,} pruned by a lower bound,"
                 f" {result.pruned_by_memory:,} proved infeasible by memory,"
                 f" {result.unresolved:,} unresolved"])
    if result.pruned_by_dominance:
        rows.append(["dominated layer plans", f"{result.pruned_by_dominance:,} (outer, layer plan) pairs"])
    if result.reason:
        rows.append(["reason", result.reason])
    if trust is not None:
        if trust.interval_s is None:
            rows.append(["trust", "no published run compares: the time is unvalidated"])
        else:
            rows.append(["trust", f"measured time likely in {band_text(trust.interval_s)}"
                                  f" (10th-90th percentile of the errors of {trust.rows} published"
                                  f" runs: {trust.group})"])
        if trust.release:
            rows.append(["release", release_text(trust)])
        rows += [["warning", w] for w in trust.warnings]
    return rows


def _evidence_section(result, trust, quantile: str = "mean") -> str:
    caption = ("<p>Whether the plan is proved best, and how far to trust its time. \"Optimal\" is"
               " printed only when every configuration of the declared space was solved exactly,"
               " shown not to fit memory, or ruled out because a lower bound on its time was"
               " already slower than the plan; the gap is how far the plan could still be from the"
               " best possible, (objective &minus; bound) / objective. The trust interval is the"
               " range the measured time is likely to fall in, from the errors of comparable"
               " published runs. (Sources: <code>solver/bounds/one_class.py</code>,"
               " <code>cost/trust.py</code>.)</p>")
    return _table(None, evidence_rows(result, trust, quantile)) + caption


def _comparison_section(inst, result, user_plan, label: str) -> str:
    """Your plan against the optimum, on every cluster: `user_plan` of either kind
    (cost/readers/plan_reader.load_plan), simulated once."""
    from paraplan.cost.simulate import simulate
    from paraplan.solver.report.compare import compare, fitting_train_cost, part_rows, side_rows, train_rows

    ours = simulate(inst, user_plan)
    best = result.breakdown
    if best is None:
        return f"<p>No optimum to compare {html.escape(label)} with ({html.escape(result.status)}).</p>"
    cmp = compare(ours, best, ("your plan", "the optimum"))
    side = ([["plan", describe_plan(user_plan, inst), describe_plan(result.plan, inst)]] + side_rows(ours, best)
            + train_rows(*(fitting_train_cost(inst, bd, plan_trust(inst, p, bd.iter_time_s))
                           for p, bd in ((user_plan, ours), (result.plan, best)))))
    if cmp.faster is None:
        verdict = "Your plan is as fast as the optimum."
    elif cmp.faster == "b":
        verdict = f"The optimum is {cmp.speedup:.3f}x faster than your plan ({html.escape(label)})."
    else:  # only possible when the user's plan is outside the declared space
        verdict = (f"Your plan is {cmp.speedup:.3f}x faster: it lies outside the declared space"
                   " (widen <code>search:</code> to let the planner consider it).")
    why = "".join(f"<li>{html.escape(r)}</li>" for r in cmp.reasons)
    if not ours.fits:
        verdict += " Your plan does not fit memory."
    return (f"<p>{verdict}</p>" + (f"<p>Why (the parts of the critical path that differ, largest"
                                    f" first):</p><ul>{why}</ul>" if why else "")
            + _table(["", "your plan", "optimum"], side)
            + _table(["part of the critical path", "your plan", "optimum", "optimum - yours"],
                     part_rows(cmp)))


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{CSS}{report_svg.CSS}</style></head>\n"
            f"<body>{body}<script>{report_svg.SCRIPT}</script></body></html>\n")



def _facts(inst: Instance, result, trust, t: float | None) -> list[list[str]]:
    """The fact sheet at the top: the instance, the status and, with a plan, its time `t`
    (on the nominal network), throughput, the plan itself and the time to train."""
    m, cl = inst.model, inst.cluster
    several = len(cl.groups) > 1  # then each group is named with its site
    cluster = " + ".join(f"{g.num_gpus} x {g.gpu.name} ({f'{g.name}@{g.site}' if several else f'{g.nodes} node' + 's' * (g.nodes > 1)})"
                         for g in cl.groups)
    scenarios = len(inst.scenarios) > 1
    facts = [["instance", inst.name],
             ["model", f"{m.name}: {m.layers} layers, hidden {m.hidden}, seq_len {m.seq_len}"],
             ["cluster", cluster], ["global batch", f"{inst.job.global_batch} sequences"],
             ["status", result.status + (f": {result.reason}" if result.reason else "")]]
    if scenarios:
        facts.append(["network objective", result.objective])
    p, bd = result.plan, result.breakdown
    if p is None or bd is None:
        return facts
    at = ([[f"minimised ({inst.search.objective})", f"{seconds(result.quantile_s)}: the time the plan stays"
                                                     f" under in {inst.search.objective[1:]}% of the cost model's"
                                                     " out-of-sample errors"]]
          if inst.search.objective != "mean" and result.quantile_s is not None else [])
    idle = f", {bd.idle_gpus} idle GPUs" if bd.idle_gpus else ""
    peak = " of all GPUs' peak" if several else ""  # of GPU types that may differ
    facts += [["iteration time", seconds(t) + (" on the nominal network" if scenarios else "")], *at,
              ["throughput", f"{bd.tokens_per_s:,.0f} tokens/s, MFU {100 * bd.mfu:.1f}%{peak},"
                             f" {bd.megatron_tflops_per_gpu:,.1f} model TFLOP/s per GPU as"
                             f" Megatron-LM logs it{idle}"]]
    # as `plan` prints it: one class on every GPU of one group in one line, then its partitions
    facts += [["plan" if i == 0 else "", line.strip()] for i, line in enumerate(plan_lines(p, inst))]
    # the time, GPU-hours and cost to train (none without job.train_tokens): plan's two lines
    tc = instance_train_cost(inst, t, None if trust is None else trust.interval_s)
    facts += [["time to train" if i == 0 else "", line] for i, line in enumerate(train_cost_lines(tc))]
    return facts


def _class_timelines_section(inst: Instance, p: Plan, bd) -> str:
    """One Gantt per replica class, its stages labelled with the node groups they run on."""
    figs = []
    for i, (events, k) in enumerate(zip(timeline.plan_events(inst, p, inst.search.memory_reserve_bytes), p.classes)):
        names = [inst.cluster.groups[g].name for g in k.stage_groups]
        fig, cut = gantt_figure(events, len(names), k.num_micro_batches, p.virtual_stages, bd.iter_time_s,
                                f"class {i + 1}", [f"{s}: {g}" for s, g in enumerate(names)])
        replay_s = timeline.makespan_s(events)
        if k.stage_dp:  # an asymmetric pipeline: its rows are each stage's rank 0
            figs.append(_asymmetric_timeline(k, fig, replay_s, bd.iter_time_s, _cut_text(cut, 1, len(names), bd.iter_time_s)))
            continue
        figs.append(f"<h3>class {i + 1}: {_many(k.replicas, 'replica', 'replicas')},"
                    f" {_many(k.num_micro_batches, 'micro-batch', 'micro-batches')} each</h3>{fig}<figcaption>What each GPU of one replica of class {i + 1} does"
                    " during one iteration: one row per pipeline stage, labelled with the node group"
                    " it runs on, forward passes blue, backward green, the gradient sync and"
                    " optimizer step brown, white space waiting. This replica finishes at"
                    f" {html.escape(seconds(replay_s))}; the dashed line is the plan's iteration"
                    " time, set by the slowest replica's pipeline plus the slowest gradient sync and"
                    " optimizer step. (Source: <code>cost/timeline.py</code>.)"
                    + _cut_text(cut, 1, len(names), bd.iter_time_s) + "</figcaption></figure>")
    return "".join(figs)


def _asymmetric_timeline(k, fig: str, replay_s: float, iter_time_s: float, cut_text: str) -> str:
    """The Gantt of an asymmetric pipeline (cost/timeline.asymmetric_events) and its caption."""
    dps = ", ".join(f"stage {s}: {d} rank{'s' if d > 1 else ''} of {k.num_micro_batches // d} micro-batches"
                    for s, d in enumerate(k.stage_dp))
    return (f"<h3>one pipeline, a data-parallel degree per stage ({html.escape(dps)})</h3>{fig}<figcaption>What"
            " the first rank of each stage does during one iteration: one row per pipeline stage,"
            " labelled with the node group it runs on, forward passes blue, backward green, the gradient"
            " sync and optimizer step brown, white space waiting. The batch's micro-batches go round-robin"
            " over a stage's ranks, each rank running its own in 1F1B order. The replay finishes at"
            f" {html.escape(seconds(replay_s))}; the dashed line is the priced iteration time"
            f" ({html.escape(seconds(iter_time_s))}, cost/asymmetric.py), which does not price a stage"
            " waiting mid-run for a slower neighbour. (Source: <code>cost/timeline.py</code>.)" + cut_text
            + "</figcaption></figure>")


def _class_breakdown_section(bd) -> str:
    return (f"<p>iteration {html.escape(seconds(bd.iter_time_s))} = slowest pipeline"
            f" {html.escape(seconds(bd.pipeline_s))} + gradient sync/optimizer"
            f" {html.escape(seconds(bd.sync_s))}</p>" + _breakdown_section(bd))


def _stage_table_section(bd) -> str:
    rows = [[f"{k}", str(s), g, seconds(t), f"{bytes_to_gib(mem):.2f} GiB", f"{bytes_to_gib(cap):.2f} GiB",
             f"{100 * mem / cap:.0f}%"] for k, s, g, t, mem, cap in bd.stage_rows()]
    return _table(["class", "stage", "group", "time/micro-batch", "memory", "capacity", "used"], rows)


def _scenario_section(inst: Instance, p: Plan, regrets) -> str:
    """The plan on every declared network scenario, with its regret against each scenario's
    own optimum where `regrets` (solver/dynamic.regrets) gives it."""
    from paraplan.cost.simulate import simulate
    rows = []
    by_name = {r.scenario: r for r in (regrets or [])}
    for sc in inst.scenarios:
        t = simulate(inst, p, cluster=sc.cluster).iter_time_s
        reg = by_name.get(sc.name)
        rows.append([sc.name, "-" if sc.probability is None else f"{sc.probability:g}", seconds(t),
                     "-" if reg is None else seconds(reg.optimum_s),
                     "-" if reg is None else f"{100 * reg.regret:+.2f}%"])
    return (_table(["scenario", "probability", "this plan", "scenario's optimum", "regret"], rows)
            + "<p>How this plan fares on each declared network scenario: its"
              " iteration time there, the best time any plan reaches on that"
              " scenario, and the regret, how much slower this plan is than that best"
              " (this plan's time / the scenario's optimum &minus; 1). (Source:"
              " <code>cost/simulate.py</code>.)</p>")


def build_report(inst: Instance, result, coeffs: list[StageCoefficients] | None = None, regrets=None,
                 user_plan: Plan | None = None, user_plan_label: str = "") -> str:
    """The report of any planner result (solver/solve.py's SolveResult) as one HTML string: the
    facts, the optimality evidence with the plan's trust interval (cost/trust.py), then
    (2) timeline, (3) breakdown, (4) memory and (5) a view of the alternatives. A plan of one
    class on every GPU of a flat cluster gets its Gantt checked against the formula, its memory
    per stage and the throughput-memory frontier of the declared configurations (`coeffs`, the
    instance's coefficient table, built when not given; a DualPipe plan: per device pair, no
    frontier). A plan of several classes, or on node groups, gets a Gantt per class, its stages'
    time and memory, and its time on every network scenario (with the regret against each
    scenario's optimum, `regrets`). `user_plan`, of either kind: compared with the optimum."""
    p, bd = result.plan, result.breakdown
    one_class = not shown_as_groups(inst, p)
    dual = inst.job.pipeline_schedule is PipelineSchedule.DUALPIPE
    if coeffs is None:
        from paraplan.solver.planner import coefficient_table
        coeffs = coefficient_table(inst) if one_class and not dual else []
    t = trust = None
    if p is not None and bd is not None:
        t = result.iter_time_s if one_class else bd.iter_time_s  # a cluster's: the nominal network's
        trust = plan_trust(inst, p, t)
    title = f"paraplan report: {inst.name}"
    body = (f"<h1>{html.escape(title)}</h1>" + _table(None, _facts(inst, result, trust, t))
            + _section(1, "evidence", _evidence_section(result, trust, inst.search.objective)))
    if p is None or bd is None:
        none = f"<p>No plan to show ({html.escape(result.status)}).</p>"
        if not one_class:  # without a plan there is no scenario to price it on
            return _page(title, body + none)
        s1 = s2 = s3 = none
    elif not one_class:
        s1, s2, s3 = _class_timelines_section(inst, p, bd), _class_breakdown_section(bd), _stage_table_section(bd)
    elif dual:  # the DualPipe iteration (cost/dualpipe.py) priced once for its timeline and memory
        it = dualpipe.iteration(inst, p, reserve_bytes=inst.search.memory_reserve_bytes)
        s1, s2, s3 = _dualpipe_timeline_section(it, p), _breakdown_section(bd), _dualpipe_memory_section(inst, p, it)
    else:
        c = plan_coefficients(inst, p)
        s1, s2, s3 = _timeline_section(c, p, result.iter_time_s), _breakdown_section(bd), _memory_section(c, p, bd)
    if not one_class:
        s5 = _section(5, "frontier", _scenario_section(inst, p, regrets), "Network scenarios and regret")
    else:
        s5 = _section(5, "frontier", _DUALPIPE_NO_FRONTIER if dual else _frontier_section(inst, coeffs, result))
    body += (_section(2, "timeline", s1) + _section(3, "breakdown", s2)
             + _section(4, "memory", s3, "Memory per device pair" if dual and one_class and p is not None else None) + s5)
    if user_plan is not None:
        body += _section(6, "comparison", _comparison_section(inst, result, user_plan, user_plan_label))
    return _page(title, body)
