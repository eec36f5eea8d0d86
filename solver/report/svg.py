"""Interactive charts of `paraplan report` as inline SVG (no dependency, no external file).

The Gantt chart of one iteration draws the events of cost/timeline.py, one row per pipeline
stage. Every box carries a tooltip (its stage, pass, micro-batch, chunk, start and length);
hovering a box highlights its micro-batch on every stage, and clicking a legend entry hides or
shows that kind of event (the few lines of JS in `SCRIPT`).

Many micro-batches (32-128) make a barcode of the steady state, so `compact_steady_state`
cuts it out: the 1F1B steady state is periodic (micro-batch j + d repeats micro-batch j's
events P seconds later, d = 1 for 1F1B and pp for the interleaved schedule), so removing K
whole periods [t_a, t_a + K P) and joining the two sides loses nothing but repetitions. The
cut is made only where that periodicity is verified on the replayed events themselves; the
chart marks the cut with a band that says how many micro-batches and seconds it stands for,
and the time axis keeps real times on both sides.
"""

from __future__ import annotations

import bisect
import html
import math
from dataclasses import dataclass

from paraplan.cost import timeline
from paraplan.solver.format import seconds

KIND_COLOURS = {
    timeline.EventKind.FORWARD: "#4c72b0",
    timeline.EventKind.BACKWARD: "#55a868",
    timeline.EventKind.RECOMPUTE: "#dd8452",
    timeline.EventKind.SEND_RECV: "#8172b3",
    timeline.EventKind.GRAD_SYNC_OPTIMIZER: "#937860",
}
# Compact the steady state only from this many micro-batches on, and only when the cut omits
# at least MIN_OMITTED of them: below that the whole iteration is readable at 1000 px.
COMPACT_FROM_MICRO_BATCHES = 24
MIN_OMITTED_MICRO_BATCHES = 8
# Geometry (px).
WIDTH_PX, LEFT_PX, RIGHT_PX, ROW_PX, TOP_PX, AXIS_PX = 1000, 78, 16, 24, 14, 42
BREAK_PX = 34
LABEL_MIN_PX = 13  # micro-batch numbers inside boxes at least this wide
REL_TOL = 1e-7  # periodicity check: relative to the iteration time


@dataclass(frozen=True)
class Cut:
    """The omitted steady-state window [start_s, start_s + omitted_s)."""
    start_s: float
    omitted_s: float
    micro_batches: int  # micro-batches whose whole steady-state work the window stands for
    period_s: float


def _key(e: timeline.Event) -> tuple:
    return (e.stage, e.kind, e.chunk, e.in_backward)


def compact_steady_state(events: list[timeline.Event], pp: int, m: int, v: int) -> Cut | None:
    """The longest verified periodic window around the middle of the iteration, or None (few
    micro-batches, or no periodicity: then the chart draws everything).

    P = the time between stage 0's forwards of micro-batches mid and mid + d. Periods are
    counted from that forward; period j is *repeating* when every event starting in it has a
    twin (same stage, kind, chunk, direction and length) starting exactly P earlier. Over a run
    of repeating periods j1..j2 the schedule is periodic, so the window [start of j1 + 1,
    start of j2) can be cut: what follows it is what followed its start, K = j2 - j1 - 1
    periods later."""
    if m < COMPACT_FROM_MICRO_BATCHES:
        return None
    d = 1 if v == 1 else pp  # micro-batch index shift of one period
    starts = {(e.micro_batch, e.chunk): e.start_s for e in events
              if e.stage == 0 and e.kind is timeline.EventKind.FORWARD}
    mid = (m // 2) // d * d
    if (mid, 0) not in starts or (mid + d, 0) not in starts:
        return None
    t0, period = starts[(mid, 0)], starts[(mid + d, 0)] - starts[(mid, 0)]
    if period <= 0:
        return None
    tol = REL_TOL * max(e.end_s for e in events)
    index: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        index.setdefault(_key(e), []).append((e.start_s, e.duration_s))
    for twins in index.values():
        twins.sort()
    bad, lo, hi = set(), 0, 0
    for e in events:
        j = math.floor((e.start_s - t0) / period + 1e-9)
        lo, hi = min(lo, j), max(hi, j)
        twins = index[_key(e)]
        k = bisect.bisect_left(twins, (e.start_s - period - tol,))
        if not any(abs(s - (e.start_s - period)) <= tol and abs(dur - e.duration_s) <= tol
                   for s, dur in twins[k:k + 2]):
            bad.add(j)
    if 0 in bad:
        return None
    j1 = j2 = 0
    while j1 - 1 >= lo and j1 - 1 not in bad:
        j1 -= 1
    while j2 + 1 <= hi and j2 + 1 not in bad:
        j2 += 1
    omitted = j2 - j1 - 1
    if omitted * d < MIN_OMITTED_MICRO_BATCHES:
        return None
    return Cut(start_s=t0 + (j1 + 1) * period, omitted_s=omitted * period,
               micro_batches=omitted * d, period_s=period)


class _Axis:
    """Maps iteration time to x pixels, with the cut (if any) replaced by a BREAK_PX band."""

    def __init__(self, span_s: float, cut: Cut | None):
        self.cut = cut
        shown_s = span_s - (cut.omitted_s if cut else 0.0)
        self.px_per_s = (WIDTH_PX - LEFT_PX - RIGHT_PX - (BREAK_PX if cut else 0)) / shown_s

    def x(self, t_s: float) -> float:
        c = self.cut
        if c is None or t_s <= c.start_s:
            return LEFT_PX + t_s * self.px_per_s
        if t_s < c.start_s + c.omitted_s:  # inside the cut: the band
            return LEFT_PX + c.start_s * self.px_per_s + BREAK_PX / 2
        return LEFT_PX + (t_s - c.omitted_s) * self.px_per_s + BREAK_PX

    def pieces(self, start_s: float, end_s: float) -> list[tuple[float, float]]:
        """Visible [x0, x1] pieces of an interval (an event crossing the cut is clipped)."""
        c = self.cut
        if c is None:
            return [(self.x(start_s), self.x(end_s))]
        lo, hi = c.start_s, c.start_s + c.omitted_s
        out = []
        if start_s < lo:
            out.append((self.x(start_s), self.x(min(end_s, lo))))
        if end_s > hi:
            out.append((self.x(max(start_s, hi)), self.x(end_s)))
        return [(a, b) for a, b in out if b > a]


def _nice_step(span: float, target_ticks: int = 8) -> float:
    raw = span / target_ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(k * mag for k in (1, 2, 2.5, 5, 10) if k * mag >= raw)


def gantt_svg(events: list[timeline.Event], pp: int, m: int, v: int, objective_s: float,
              title: str, row_labels: list[str] | None = None, compact: bool = True) -> tuple[str, Cut | None]:
    """One iteration as an SVG string, and the steady-state cut it made (None: none)."""
    span = max(max((e.end_s for e in events), default=0.0), objective_s)
    cut = compact_steady_state(events, pp, m, v) if compact else None
    ax = _Axis(span, cut)
    height = TOP_PX + pp * ROW_PX + AXIS_PX
    labels = row_labels or [f"stage {s}" for s in range(pp)]
    out = [f'<svg class="gantt" viewBox="0 0 {WIDTH_PX} {height}"'
           f' width="{WIDTH_PX}" height="{height}" role="img"><title>{html.escape(title)}</title>',
           '<rect width="100%" height="100%" fill="white"/>']
    for s in range(pp):
        y = TOP_PX + s * ROW_PX
        out.append(f'<text x="{LEFT_PX - 6}" y="{y + ROW_PX / 2 + 4:.1f}" text-anchor="end"'
                   f' font-size="11">{html.escape(labels[s])}</text>')
        if s % 2:
            out.append(f'<rect x="{LEFT_PX}" y="{y}" width="{WIDTH_PX - LEFT_PX - RIGHT_PX}"'
                       f' height="{ROW_PX}" fill="#f6f6f6"/>')
    unit_div, unit = (1e-3, "ms") if span < 1.0 else (1.0, "s")
    # grid and ticks in real time, on both sides of the cut
    step = _nice_step((span - (cut.omitted_s if cut else 0)) / unit_div) * unit_div
    ybot = TOP_PX + pp * ROW_PX
    k = 0
    while k * step <= span * (1 + 1e-9):
        t = k * step
        k += 1
        if cut and cut.start_s < t < cut.start_s + cut.omitted_s:
            continue
        if cut and t < cut.start_s <= t + 0.5 * step:  # keep tick labels apart from the band
            continue
        x = ax.x(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP_PX}" y2="{ybot + 4}" stroke="#ddd"/>'
                   f'<text x="{x:.1f}" y="{ybot + 16}" font-size="10" text-anchor="middle">'
                   f'{t / unit_div:g}</text>')
    if cut:  # ticks just after the band, so the jump in time reads on the axis
        t = cut.start_s + cut.omitted_s
        x = ax.x(t) + 1
        out.append(f'<text x="{x:.1f}" y="{ybot + 16}" font-size="10" text-anchor="start"'
                   f' fill="#a00">{t / unit_div:.4g}</text>')
    out.append(f'<text x="{(LEFT_PX + WIDTH_PX) / 2}" y="{ybot + 34}" font-size="11"'
               f' text-anchor="middle">time since the start of the iteration ({unit})</text>')
    for e in events:
        colour = KIND_COLOURS[e.kind]
        opacity = 1.0 if e.chunk % 2 == 0 else 0.6
        y = TOP_PX + e.stage * ROW_PX + 3
        mb = "" if e.micro_batch is None else str(e.micro_batch)
        tip = (f"{labels[e.stage]}, {e.kind.value}"
               + (f", micro-batch {mb}" if mb else "") + (f", chunk {e.chunk}" if v > 1 else "")
               + f": {seconds(e.start_s)} to {seconds(e.end_s)} ({seconds(e.duration_s)})")
        for x0, x1 in ax.pieces(e.start_s, e.end_s):
            out.append(f'<rect class="ev k-{e.kind.name.lower()}" data-mb="{mb}" x="{x0:.2f}"'
                       f' y="{y}" width="{max(x1 - x0, 0.4):.2f}" height="{ROW_PX - 6}"'
                       f' fill="{colour}" fill-opacity="{opacity}"><title>{html.escape(tip)}</title></rect>')
            if mb and e.kind in (timeline.EventKind.FORWARD, timeline.EventKind.BACKWARD) \
                    and x1 - x0 >= LABEL_MIN_PX + 2 * len(mb):
                out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + ROW_PX / 2 + 1:.1f}"'
                           f' font-size="9" fill="white" text-anchor="middle"'
                           f' pointer-events="none">{mb}</text>')
    if cut:
        x0 = ax.x(cut.start_s)
        out.append(f'<g class="cut"><rect x="{x0:.1f}" y="{TOP_PX - 4}" width="{BREAK_PX}"'
                   f' height="{pp * ROW_PX + 8}" fill="url(#hatch)" stroke="#a00"'
                   f' stroke-dasharray="3 2"><title>{cut.micro_batches} micro-batches of steady'
                   f' state omitted: {seconds(cut.omitted_s)} ({cut.micro_batches // (1 if v == 1 else pp)}'
                   f' repetitions of a {seconds(cut.period_s)} period)</title></rect>'
                   f'<text x="{x0 + BREAK_PX / 2:.1f}" y="{TOP_PX - 5}" font-size="10"'
                   f' text-anchor="middle" fill="#a00">&#215;{cut.micro_batches}</text></g>')
        out.insert(2, '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse"'
                      ' patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff4f4"/>'
                      '<line x1="0" y1="0" x2="0" y2="6" stroke="#e0a0a0" stroke-width="2"/>'
                      '</pattern></defs>')
    xo = ax.x(objective_s)
    out.append(f'<line x1="{xo:.1f}" x2="{xo:.1f}" y1="{TOP_PX - 6}" y2="{ybot + 4}" stroke="black"'
               f' stroke-dasharray="5 3" stroke-width="1.4"><title>planner objective'
               f' {seconds(objective_s)}</title></line>')
    out.append("</svg>")
    return "".join(out), cut


def legend_html(kinds: list[timeline.EventKind], objective_s: float) -> str:
    items = "".join(
        f'<span class="lg" data-kind="k-{k.name.lower()}" title="click to hide or show">'
        f'<i style="background:{KIND_COLOURS[k]}"></i>{html.escape(k.value)}</span>' for k in kinds)
    return (f'<div class="legend">{items}<span class="lg-static"><i class="dash"></i>planner'
            f' objective {html.escape(seconds(objective_s))}</span></div>')


CSS = """
.gantt-wrap { overflow-x: auto; } svg.gantt { max-width: 100%; height: auto; font-family: inherit; }
svg.gantt rect.ev:hover { stroke: black; stroke-width: 1; }
svg.gantt.hl rect.ev { fill-opacity: 0.18; } svg.gantt.hl rect.ev.on { fill-opacity: 1; stroke: black; stroke-width: 0.6; }
svg.gantt .hidden { display: none; }
.legend { font-size: 0.85em; margin: 0.3em 0 0.8em 78px; }
.legend span { margin-right: 1.2em; cursor: pointer; user-select: none; white-space: nowrap; }
.legend span.off { opacity: 0.35; text-decoration: line-through; } .legend span.lg-static { cursor: default; }
.legend i { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; vertical-align: -0.1em; }
.legend i.dash { border-left: 2px dashed black; width: 0; }
"""

# Hover a box: its micro-batch lights up on every stage. Click a legend entry: hide that kind.
SCRIPT = """
document.querySelectorAll('figure.gantt-fig').forEach(function (fig) {
  var svg = fig.querySelector('svg.gantt');
  svg.addEventListener('mouseover', function (ev) {
    var mb = ev.target.getAttribute && ev.target.getAttribute('data-mb');
    if (!mb) return;
    svg.classList.add('hl');
    svg.querySelectorAll('rect.ev').forEach(function (r) {
      r.classList.toggle('on', r.getAttribute('data-mb') === mb); });
  });
  svg.addEventListener('mouseleave', function () { svg.classList.remove('hl'); });
  fig.querySelectorAll('.legend span.lg').forEach(function (lg) {
    lg.addEventListener('click', function () {
      lg.classList.toggle('off');
      svg.querySelectorAll('rect.' + lg.dataset.kind).forEach(function (r) {
        r.classList.toggle('hidden'); });
    });
  });
});
"""


def kinds_present(events: list[timeline.Event]) -> list[timeline.EventKind]:
    present = {e.kind for e in events}
    return [k for k in KIND_COLOURS if k in present]

