"""`paraplan report`: one self-contained HTML page about an instance's optimal plan.

Sections: (1) the pipeline timeline of one iteration (cost/timeline.py replays the schedule
event by event), (2) the time breakdown of cost/simulate.py, (3) memory per stage against
capacity, (4) throughput against peak memory for every outer configuration of the declared
space, with the Pareto frontier. Figures are PNGs drawn with matplotlib's Agg canvas and
embedded as base64 data URIs, so the page has no external files. matplotlib is imported only
when a report is built, so the other sub-commands do not pay for it.
"""

from __future__ import annotations

import base64
import html
import io
import sys
from dataclasses import dataclass

import numpy as np

from cost import schedule, timeline
from cost.coefficients import StageCoefficients, build
from cost.errors import InstanceError
from cost.specs import Instance, Outer, Plan
from cost.units import MS_S, bytes_to_gib
from solver import bounds
from solver.format import count, seconds

KIND_COLOURS = {
    timeline.EventKind.FORWARD: "#4c72b0",
    timeline.EventKind.BACKWARD: "#55a868",
    timeline.EventKind.RECOMPUTE: "#dd8452",
    timeline.EventKind.SEND_RECV: "#8172b3",
    timeline.EventKind.GRAD_SYNC_OPTIMIZER: "#937860",
}
# Micro-batch numbers are written inside boxes at least this share of the time axis wide.
LABEL_MIN_WIDTH_SHARE = 0.012
# Boxes get white outlines when the narrowest pass is at least this share of the time axis.
OUTLINE_MIN_WIDTH_SHARE = 0.004
DPI = 110
# The frontier plot draws the capacity line only when it lies within this factor of the
# largest peak memory plotted.
CAPACITY_SHOWN_BEYOND_DATA = 1.5

SECTIONS = ("Pipeline timeline", "Time breakdown", "Memory per stage",
            "Throughput vs memory frontier")


@dataclass(frozen=True)
class FrontierPoint:
    outer: Outer
    iter_time_s: float
    tokens_per_s: float
    peak_mem_bytes: float


def _time_unit(t_s: float) -> tuple[float, str]:
    """Divisor and unit name that keep an axis of span t_s readable."""
    return (MS_S, "ms") if t_s < 1.0 else (1.0, "s")


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


# --- section 1: timeline ---------------------------------------------------------------------

def timeline_figure(events: list[timeline.Event], pp: int, v: int, analytic_s: float) -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D

    replay_s = timeline.makespan_s(events)
    span = max(replay_s, analytic_s)
    div, unit = _time_unit(span)
    fig = Figure(figsize=(11, 2.2 + 0.42 * pp), layout="constrained")
    ax = fig.add_subplot()
    # white box outlines only where boxes are wide enough for them not to swamp the colour
    pass_s = min((e.duration_s for e in events if e.kind is not timeline.EventKind.SEND_RECV),
                 default=span)
    edge = 0.4 if pass_s >= OUTLINE_MIN_WIDTH_SHARE * span else 0.0
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        groups.setdefault((e.stage, e.kind, e.chunk), []).append((e.start_s / div, e.duration_s / div))
    for (s, kind, chunk), boxes in groups.items():
        # odd model chunks are drawn lighter so interleaved chunks stay apart
        ax.broken_barh(boxes, (s - 0.4, 0.8), facecolors=KIND_COLOURS[kind],
                       alpha=1.0 if chunk % 2 == 0 else 0.6, edgecolor="white", linewidth=edge)
    kinds = [k for k in KIND_COLOURS if any(key[1] is k for key in groups)]
    for e in events:
        if (e.kind in (timeline.EventKind.FORWARD, timeline.EventKind.BACKWARD)
                and e.duration_s >= LABEL_MIN_WIDTH_SHARE * span):
            ax.text((e.start_s + e.end_s) / 2 / div, e.stage, str(e.micro_batch), ha="center",
                    va="center", fontsize=7, color="white")
    ax.axvline(analytic_s / div, color="black", linestyle="--", linewidth=1.2)
    same = abs(replay_s - analytic_s) <= 1e-9 * max(analytic_s, 1.0)
    if not same:
        ax.axvline(replay_s / div, color="crimson", linestyle=":", linewidth=1.4)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp), [f"stage {s}" for s in range(pp)])
    ax.set_xlim(0, span / div * 1.01)
    ax.set_xlabel(f"time since the start of the iteration ({unit})")
    ax.set_ylabel("pipeline stage")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=KIND_COLOURS[k], label=k.value) for k in kinds]
    handles.append(Line2D([], [], color="black", linestyle="--",
                          label=f"analytic iteration time {seconds(analytic_s)}"
                                + (" = replay" if same else "")))
    if not same:
        rel = (replay_s - analytic_s) / analytic_s
        handles.append(Line2D([], [], color="crimson", linestyle=":",
                              label=f"event replay {seconds(replay_s)} ({100 * rel:+.2g}%)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    ax.set_title("One iteration, " + ("1F1B" if v == 1 else f"interleaved 1F1B, v={v} chunks")
                 + " (numbers: micro-batch; empty space: pipeline bubble)", fontsize=10)
    return _png(fig)


# --- section 2: breakdown --------------------------------------------------------------------

def breakdown_figure(bd) -> bytes:
    from matplotlib.figure import Figure

    items = [(name.replace("_", " "), val, False) for name, val in bd.exposed_s.items() if val > 0]
    items += [(f"{name.replace('_', ' ')} (overlapped)", val, True)
              for name, val in bd.overlapped_s.items() if val > 0]
    div, unit = _time_unit(max(v for _, v, _ in items))
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
    from matplotlib.figure import Figure

    parts = memory_parts_bytes(c, n, r)
    pp = c.pp
    fig = Figure(figsize=(max(7.0, 2.5 + 0.5 * pp), 4.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(pp)
    bottom = np.zeros(pp)
    for (name, val), colour in zip(parts.items(), ("#937860", "#4c72b0", "#dd8452")):
        gib = np.array([bytes_to_gib(b) for b in val])
        ax.bar(x, gib, bottom=bottom, color=colour, label=name, width=0.6)
        bottom += gib
    for s in range(pp):
        ax.text(s, bottom[s], f"{bottom[s]:.2f}", ha="center", va="bottom", fontsize=8, zorder=4,
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0))
    cap = bytes_to_gib(float(c.capacity_bytes.min()))
    ax.axhline(cap, color="crimson", linestyle="--", linewidth=1.4,
               label=f"usable capacity {cap:.1f} GiB")
    ax.set_xticks(x, [str(s) for s in range(pp)])
    pad = max(0.0, (3 - pp) / 2)  # keep bars narrow when there are only one or two stages
    ax.set_xlim(-0.5 - pad, pp - 0.5 + pad)
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_ylim(0, max(cap, bottom.max()) * 1.25)
    fig.legend(loc="outside lower center", fontsize=8, ncol=2, frameon=False)
    ax.set_title("Peak memory per GPU of each stage", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


# --- section 4: frontier ---------------------------------------------------------------------

def frontier_points(inst: Instance, coeffs: list[StageCoefficients]) -> list[FrontierPoint]:
    """Each outer configuration's even split with the fewest fully recomputed layers that fit
    (solver.bounds.incumbent); configurations where that split does not fit are left out."""
    tokens = inst.job.global_batch * inst.model.seq_len
    out = []
    for c in coeffs:
        inc = bounds.incumbent(c, inst.search.full_recompute)
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
    if 0 < cap <= CAPACITY_SHOWN_BEYOND_DATA * right:
        ax.axvline(cap, color="crimson", linestyle="--", linewidth=1,
                   label=f"usable capacity {cap:.1f} GiB")
        ax.set_xlim(0, cap * 1.04)
    elif right > 0:  # far right of every point: drawing it would squeeze the points
        ax.set_xlim(0, right * 1.1)
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
"""


def _img(png: bytes, alt: str) -> str:
    return (f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode("ascii")}">')


def _table(headers: list[str] | None, rows: list[list[str]]) -> str:
    head = ("" if headers is None else
            "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr></thead>")
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>"
                   for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _section(k: int, anchor: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{k}. {SECTIONS[k - 1]}</h2>{body}</section>'


def _timeline_section(c: StageCoefficients, p: Plan, analytic_s: float) -> str:
    n, r = np.array(p.layers_per_stage, float), np.array(p.full_recompute_layers, float)
    events = timeline.one_f_one_b_events(c, n, r)
    replay_s = timeline.makespan_s(events)
    t = schedule.stage_times_s(c, n, r)
    uniform = bool(np.ptp(t) <= 1e-12 * t.max())
    rel = (replay_s - analytic_s) / analytic_s
    caption = (
        f"Gantt chart of one iteration, one row per pipeline stage, from the event replay in"
        f" <code>cost/timeline.py</code>: {p.num_micro_batches} micro-batches on {p.pp} stage(s)"
        + (f", {p.virtual_stages} model chunks per stage (odd chunks drawn lighter)"
           if p.virtual_stages > 1 else "")
        + ". Per micro-batch, each stage's time T<sub>s</sub> (cost/coefficients.py) is split"
        " into forward = 1/3 and backward = 2/3 of its compute (the linear layers' ratio; the"
        " coefficients keep the two summed, so this split is an approximation), full recompute"
        " just before the backward, and the stage's pipeline send/recv time half after each"
        " pass. Gradient sync + optimizer step follows each stage's last backward; white space"
        " is the pipeline bubble. The dashed line is the analytic iteration time of"
        " <code>cost/schedule.py</code>, (m &minus; 1/v)&middot;max T<sub>s</sub> +"
        " &Sigma;T<sub>s</sub>/v + max D<sub>s</sub>: that formula is what the planner"
        f" optimises. The replay ends at {html.escape(seconds(replay_s))}"
        f" ({100 * rel:+.2g}% from the formula); the two coincide when all stages take equal"
        " time (checked in tests/solver/test_report.py)"
        + ("" if uniform else "; here the stages differ, and the formula charges the slowest"
           " stage once per micro-batch and every other stage once, where the replay resolves"
           " the actual waits")
        + ".")
    png = timeline_figure(events, p.pp, p.virtual_stages, analytic_s)
    rows = [["analytic (planner's objective)", seconds(analytic_s)],
            ["event replay makespan", seconds(replay_s)],
            ["difference", f"{100 * rel:+.2g}%"]]
    return (f"<figure>{_img(png, 'pipeline timeline')}<figcaption>{caption}</figcaption></figure>"
            + _table(["iteration time", "value"], rows))


def _breakdown_section(bd) -> str:
    rows = [[name, seconds(val), f"{100 * val / bd.iter_time_s:.1f}%"]
            for name, val in bd.exposed_s.items() if val > 0]
    rows.append(["total (iteration time)", seconds(bd.iter_time_s), "100.0%"])
    hidden = [[name, seconds(val)] for name, val in bd.overlapped_s.items() if val > 0]
    caption = ("Time on the critical path of one iteration (<code>Breakdown.exposed_s</code>, on the"
               f" bottleneck stage {bd.bottleneck_stage}; the parts sum to the iteration time) and"
               " communication that runs concurrently with compute and so costs no time"
               " (<code>Breakdown.overlapped_s</code>).")
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
    caption = ("Peak memory of one GPU of each pipeline stage, by part (cost/coefficients.py:"
               " M<sub>s</sub>), against the usable capacity (HBM less the instance's"
               " <code>memory_reserve_gib</code>; the runtime allowance is counted in the fixed"
               " part).")
    return (f"<figure>{_img(memory_figure(c, n, r), 'memory per stage')}<figcaption>{caption}"
            "</figcaption></figure>"
            + _table(["stage", "layers", "fully recomputed", "memory", "capacity", "used"], rows))


def _frontier_section(inst: Instance, coeffs: list[StageCoefficients], result) -> str:
    points = frontier_points(inst, coeffs)
    best = None
    if result.plan is not None and result.breakdown is not None:
        bd = result.breakdown
        best = FrontierPoint(result.plan.outer, bd.iter_time_s, bd.tokens_per_s, bd.peak_mem_bytes)
    front = pareto_front(points + ([best] if best else []))
    cap = float(min(c.capacity_bytes.min() for c in coeffs)) if coeffs else 0.0
    rows = [[outer_label(f.outer) + (" (optimal plan)" if f is best else ""), f"{f.tokens_per_s:,.0f}",
             seconds(f.iter_time_s), f"{bytes_to_gib(f.peak_mem_bytes):.1f} GiB"]
            for f in reversed(front)]
    caption = (
        f"Grey: one point for each of the {len(points)} outer configurations (degrees,"
        " micro-batching, modes) whose even layer split fits, evaluated with the fewest fully"
        " recomputed layers per stage that fit, where the space allows full recompute"
        " (<code>solver.bounds.incumbent</code>):"
        " throughput = global batch &times; sequence length / iteration time, against the"
        " largest stage's peak memory. Blue: the Pareto frontier (no other point has both more"
        " throughput and less memory). Red star: the optimal plan, with its solved layer split"
        " and recompute counts." + (f" {len(coeffs) - len(points)} configurations do not fit"
                                     " with the even split and are not shown." if coeffs else ""))
    png = frontier_figure(points, front, best, cap)
    return (f"<figure>{_img(png, 'throughput vs memory')}<figcaption>{caption}</figcaption></figure>"
            + _table(["frontier plan (outer configuration)", "tokens/s", "iteration time",
                      "peak memory"], rows))


def build_report(inst: Instance, result, coeffs: list[StageCoefficients] | None = None) -> str:
    """The report as one HTML string. `result` is a solver.planner.PlanResult; `coeffs` the
    instance's coefficient table when the caller has it (else it is built)."""
    from solver.planner import coefficient_table

    if coeffs is None:
        coeffs = coefficient_table(inst)
    m, cl = inst.model, inst.cluster
    title = f"paraplan report: {inst.name}"
    facts = [["instance", inst.name],
             ["model", f"{m.name}: {m.layers} layers, hidden {m.hidden}, seq_len {m.seq_len}"],
             ["cluster", f"{cl.num_gpus} x {cl.gpu.name} ({cl.nodes} nodes)"],
             ["global batch", f"{inst.job.global_batch} sequences"],
             ["status", result.status + (f": {result.reason}" if result.reason else "")],
             ["backend", f"{result.backend}, {result.solve_time_s:.2f} s"],
             ["space", f"{result.outer_configs:,} outer configs, {count(result.space_size)} plans"]]
    p, bd = result.plan, result.breakdown
    if p is not None and bd is not None:
        facts += [["iteration time", seconds(result.iter_time_s)],
                  ["best bound", f"{seconds(result.bound_s)} (gap {100 * (result.gap or 0):.4f}%)"],
                  ["throughput", f"{bd.tokens_per_s:,.0f} tokens/s, MFU {100 * bd.mfu:.1f}%"],
                  ["plan", outer_label(p) + f", layers/stage {list(p.layers_per_stage)},"
                                            f" full recompute/stage {list(p.full_recompute_layers)}"]]
        c = build(inst, p.outer, reserve_bytes=inst.search.memory_reserve_bytes)
        s1 = _timeline_section(c, p, result.iter_time_s)
        s2 = _breakdown_section(bd)
        s3 = _memory_section(c, p, bd)
    else:
        none = f"<p>No plan to show ({html.escape(result.status)}).</p>"
        s1 = s2 = s3 = none
    body = (f"<h1>{html.escape(title)}</h1>" + _table(None, facts)
            + _section(1, "timeline", s1) + _section(2, "breakdown", s2)
            + _section(3, "memory", s3) + _section(4, "frontier", _frontier_section(inst, coeffs, result)))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>{body}</body></html>\n")


def cmd_report(args) -> int:
    from cost.loader import load_instance
    from solver.planner import plan

    inst = load_instance(args.instance)
    res = plan(inst, backend=args.backend, time_limit_s=args.time_limit_s)
    page = build_report(inst, res)
    try:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(page)
    except OSError as e:
        raise InstanceError(args.output, "-o/--output", f"cannot write: {e.strerror}",
                            "pass a writable path")
    what = f"iteration {seconds(res.iter_time_s)}" if res.iter_time_s is not None else res.reason
    print(f"wrote {args.output}: {inst.name}, {res.status}, {what}", file=sys.stdout)
    return 0 if res.status in ("optimal", "feasible", "infeasible") else 3


def register(sub) -> None:
    r = sub.add_parser("report", help="HTML report of the optimal plan (timeline, breakdown,"
                                      " memory, throughput-memory frontier)")
    r.add_argument("instance")
    r.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    r.add_argument("--backend", choices=("dp", "cpsat", "milp"), default="dp")
    r.add_argument("--time-limit-s", type=float, default=60.0)
    r.set_defaults(func=cmd_report)
