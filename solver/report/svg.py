"""Interactive charts of `paraplan report` as inline SVG (no dependency, no external file).

The Gantt chart of one iteration draws the events of cost/timeline.py, one row per pipeline
stage. Every box carries a tooltip (its stage, pass, micro-batch, chunk, start and length);
hovering a box highlights its micro-batch on every stage, and clicking a legend entry hides or
shows that kind of event (the few lines of JS in `SCRIPT`).

Many micro-batches (32-128) make a barcode of the steady state, so `compact_steady_state`
finds it and the chart draws it once: the 1F1B steady state is periodic (micro-batch j + d
repeats micro-batch j's events P seconds later, d = 1 for 1F1B and pp for the interleaved
schedule), so N identical periods [t_a, t_a + N P) are drawn as the first of them, bracketed
"x N", followed by a thin break where the time axis jumps by the (N - 1) P not drawn. The
chart then reads warm-up, one steady period x N, cool-down, and warm-up + N P + cool-down is
the whole iteration. The periods are taken as identical only where the replayed events
themselves show it (every event of each period has a twin one period earlier and one period
later); the time axis keeps real times on both sides of the break.
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
BREAK_PX = 12  # the gap where the axis jumps over the repeated periods not drawn
# Where the drawn forward/backward boxes are narrower than this at WIDTH_PX (median), the chart
# is widened until they are not, up to MAX_WIDTH_PX, and scrolls sideways: interleaved plans
# with many chunks (Llama-3 70B at v 10: 80 boxes per stage and period, 2-5 px each at 1000 px)
# drew a barcode in which no box, number or gap could be read.
MIN_BOX_PX = 16
MAX_WIDTH_PX = 8000
BRACKET_PX = 18  # room above the rows for the steady period's "x N" bracket
LABEL_MIN_PX = 13  # micro-batch numbers inside boxes at least this wide
REL_TOL = 1e-7  # periodicity check: relative to the iteration time


@dataclass(frozen=True)
class Cut:
    """The steady state: `repeats` identical periods of `period_s` from `start_s`, drawn once.
    The chart draws [start_s, start_s + period_s) and leaves out the omitted_s after it."""
    start_s: float
    period_s: float
    repeats: int
    micro_batches_per_period: int

    @property
    def omitted_s(self) -> float:
        return (self.repeats - 1) * self.period_s

    @property
    def hidden_from_s(self) -> float:
        """Start of the part not drawn: the end of the one period drawn."""
        return self.start_s + self.period_s

    @property
    def steady_s(self) -> float:
        return self.repeats * self.period_s

    @property
    def micro_batches(self) -> int:
        """Micro-batches whose steady-state work the repeated periods stand for."""
        return self.repeats * self.micro_batches_per_period

    def phases_s(self, total_s: float) -> tuple[float, float, float]:
        """(warm-up, steady, cool-down) seconds of an iteration of `total_s`; they sum to it."""
        return self.start_s, self.steady_s, total_s - self.start_s - self.steady_s


def _key(e: timeline.Event) -> tuple:
    return (e.stage, e.kind, e.chunk, e.in_backward)


def compact_steady_state(events: list[timeline.Event], pp: int, m: int, v: int) -> Cut | None:
    """The longest verified run of identical periods around the middle of the iteration, or
    None (few micro-batches, or no periodicity: then the chart draws everything).

    P = the time between stage 0's forwards of micro-batches mid and mid + d. Periods are
    counted from that forward; periods j - 1 and j are *the same* when every event starting in
    j has a twin (same stage, kind, chunk, direction and length) starting exactly P earlier, and
    every event starting in j - 1 one starting exactly P later. Over a run j1..j2 of such
    boundaries the periods j1 - 1 .. j2 are all the same: N = j2 - j1 + 2 of them."""
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

    def has_twin(e: timeline.Event, shift_s: float) -> bool:
        twins = index[_key(e)]
        k = bisect.bisect_left(twins, (e.start_s + shift_s - tol,))
        return any(abs(s - (e.start_s + shift_s)) <= tol and abs(dur - e.duration_s) <= tol
                   for s, dur in twins[k:k + 2])

    bad, lo, hi = set(), 0, 0  # bad: boundaries j where periods j - 1 and j differ
    for e in events:
        j = math.floor((e.start_s - t0) / period + 1e-9)
        lo, hi = min(lo, j), max(hi, j)
        if not has_twin(e, -period):
            bad.add(j)
        if not has_twin(e, period):
            bad.add(j + 1)
    if 0 in bad:
        return None
    j1 = j2 = 0
    while j1 - 1 >= lo and j1 - 1 not in bad:
        j1 -= 1
    while j2 + 1 <= hi and j2 + 1 not in bad:
        j2 += 1
    repeats = j2 - j1 + 2
    if (repeats - 1) * d < MIN_OMITTED_MICRO_BATCHES:
        return None
    return Cut(start_s=t0 + (j1 - 1) * period, period_s=period, repeats=repeats,
               micro_batches_per_period=d)


class _Axis:
    """Maps iteration time to x pixels, the time not drawn (if any) replaced by a BREAK_PX gap;
    the rows' labels take the `left_px` before time 0."""

    def __init__(self, span_s: float, cut: Cut | None, width_px: float = WIDTH_PX, left_px: float = LEFT_PX):
        self.cut, self.width_px, self.left_px = cut, width_px, left_px
        shown_s = span_s - (cut.omitted_s if cut else 0.0)
        self.px_per_s = (width_px - left_px - RIGHT_PX - (BREAK_PX if cut else 0)) / shown_s

    def x(self, t_s: float) -> float:
        c = self.cut
        if c is None or t_s <= c.hidden_from_s:
            return self.left_px + t_s * self.px_per_s
        if t_s < c.hidden_from_s + c.omitted_s:  # inside the time not drawn: the gap
            return self.left_px + c.hidden_from_s * self.px_per_s + BREAK_PX / 2
        return self.left_px + (t_s - c.omitted_s) * self.px_per_s + BREAK_PX

    def pieces(self, start_s: float, end_s: float) -> list[tuple[float, float]]:
        """Visible [x0, x1] pieces of an interval (an event crossing the gap is clipped)."""
        c = self.cut
        if c is None:
            return [(self.x(start_s), self.x(end_s))]
        lo, hi = c.hidden_from_s, c.hidden_from_s + c.omitted_s
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
              title: str, row_labels: list[str] | None = None) -> tuple[str, Cut | None]:
    """One iteration as an SVG string, and the steady-state cut it made (None: none)."""
    span = max(max((e.end_s for e in events), default=0.0), objective_s)
    cut = compact_steady_state(events, pp, m, v)
    width = chart_width_px(events, span, cut)
    ax = _Axis(span, cut, width)
    top = TOP_PX + (BRACKET_PX if cut else 0)
    height = top + pp * ROW_PX + AXIS_PX
    labels = row_labels or [f"stage {s}" for s in range(pp)]
    # a widened chart keeps its size (the page scrolls it sideways) instead of shrinking back
    wide = ' style="max-width:none"' if width > WIDTH_PX else ""
    out = [f'<svg class="gantt" viewBox="0 0 {width:.0f} {height}"'
           f' width="{width:.0f}" height="{height}"{wide} role="img"><title>{html.escape(title)}</title>',
           '<rect width="100%" height="100%" fill="white"/>']
    for s in range(pp):
        y = top + s * ROW_PX
        out.append(_row_label(LEFT_PX, y, labels[s]))
        if s % 2:
            out.append(f'<rect x="{LEFT_PX}" y="{y}" width="{width - LEFT_PX - RIGHT_PX:.0f}"'
                       f' height="{ROW_PX}" fill="#f6f6f6"/>')
    ybot = top + pp * ROW_PX
    out += _time_axis(ax, cut, span, top, ybot)
    out += _event_rects(events, ax, top, labels, v)
    if cut:
        out.append(_steady_marks(ax, cut, top, pp, objective_s))
    out.append(_dashed_line(ax.x(objective_s), top, ybot, f"planner objective {seconds(objective_s)}") + "</svg>")
    return "".join(out), cut


def _row_label(left_px: float, y: float, label: str) -> str:
    """A chart row's label, right-aligned left of the time axis."""
    return (f'<text x="{left_px - 6}" y="{y + ROW_PX / 2 + 4:.1f}" text-anchor="end"'
            f' font-size="11">{html.escape(label)}</text>')


def _dashed_line(x: float, top: float, ybot: float, title: str) -> str:
    """The dashed vertical line at the priced iteration time, `title` its tooltip."""
    return (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 6}" y2="{ybot + 4}" stroke="black"'
            f' stroke-dasharray="5 3" stroke-width="1.4"><title>{title}</title></line>')


def chart_width_px(events: list[timeline.Event], span_s: float, cut: Cut | None) -> float:
    """WIDTH_PX, or wider where the median forward/backward box drawn at WIDTH_PX would be
    narrower than MIN_BOX_PX (MIN_BOX_PX module comment), at most MAX_WIDTH_PX."""
    ax = _Axis(span_s, cut)
    widths = sorted(sum(b - a for a, b in ax.pieces(e.start_s, e.end_s)) for e in events
                    if e.kind in (timeline.EventKind.FORWARD, timeline.EventKind.BACKWARD))
    widths = [w for w in widths if w > 0]
    if not widths or widths[len(widths) // 2] >= MIN_BOX_PX:
        return float(WIDTH_PX)
    inner = WIDTH_PX - LEFT_PX - RIGHT_PX - (BREAK_PX if cut else 0)
    scale = MIN_BOX_PX / widths[len(widths) // 2]
    return float(min(MAX_WIDTH_PX, math.ceil(WIDTH_PX + inner * (scale - 1))))


def _time_axis(ax: _Axis, cut: Cut | None, span: float, top: float, ybot: float) -> list[str]:
    """The grid, the tick labels and the axis title of a Gantt chart."""
    out = []
    unit_div, unit = (1e-3, "ms") if span < 1.0 else (1.0, "s")
    # grid and ticks in real time, on both sides of the cut
    ticks = max(8, round(8 * ax.width_px / WIDTH_PX))  # about one tick per 125 px
    step = _nice_step((span - (cut.omitted_s if cut else 0)) / unit_div, ticks) * unit_div
    k = 0
    while k * step <= span * (1 + 1e-9):
        t = k * step
        k += 1
        if cut and cut.hidden_from_s < t < cut.hidden_from_s + cut.omitted_s:
            continue
        if cut and (t < cut.hidden_from_s <= t + 0.5 * step  # keep tick labels apart from the gap
                    or 0 <= t - cut.hidden_from_s - cut.omitted_s < 0.5 * step):  # and its red label
            continue
        x = ax.x(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{ybot + 4}" stroke="#ddd"/>'
                   f'<text x="{x:.1f}" y="{ybot + 16}" font-size="10" text-anchor="middle">'
                   f'{t / unit_div:g}</text>')
    if cut:  # ticks just after the gap, so the jump in time reads on the axis
        t = cut.hidden_from_s + cut.omitted_s
        x = ax.x(t) + 1
        out.append(f'<text x="{x:.1f}" y="{ybot + 16}" font-size="10" text-anchor="start"'
                   f' fill="#a00">{t / unit_div:.4g}</text>')
    # the axis title at every screen width's middle: a widened chart scrolls, so once per 1000 px
    for x in range(WIDTH_PX // 2, int(ax.width_px), WIDTH_PX):
        out.append(f'<text x="{x + ax.left_px / 2}" y="{ybot + 34}" font-size="11"'
                   f' text-anchor="middle">time since the start of the iteration ({unit})</text>')
    return out


def _event_rects(events: list[timeline.Event], ax: _Axis, top: float, labels: list[str], v: int) -> list[str]:
    """One rectangle per event piece, with its tooltip and, where it is wide enough, its
    micro-batch."""
    out = []
    for e in events:
        colour = KIND_COLOURS[e.kind]
        opacity = 1.0 if e.chunk % 2 == 0 else 0.6
        y = top + e.stage * ROW_PX + 3
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
    return out


def _steady_marks(ax: _Axis, cut: Cut, top: float, pp: int, total_s: float) -> str:
    """The bracket over the one steady period drawn, labelled "x N", and the gap after it where
    the axis jumps over the N - 1 periods not drawn. The group carries the phases it stands for
    (data-*-s attributes, seconds): warm-up + repeats x period + cool-down = total_s."""
    x0, x1 = ax.x(cut.start_s), ax.x(cut.hidden_from_s)
    warm, _, cool = cut.phases_s(total_s)
    gap = ax.x(cut.hidden_from_s + cut.omitted_s) - x1
    yb = top - 6
    tip = (f"one steady-state period of {seconds(cut.period_s)} drawn once; the schedule repeats it"
           f" {cut.repeats} times ({cut.micro_batches} micro-batches, {seconds(cut.steady_s)})."
           f" Warm-up {seconds(warm)} + {cut.repeats} x {seconds(cut.period_s)} + cool-down"
           f" {seconds(cool)} = {seconds(total_s)}")
    return (f'<g class="steady" data-warmup-s="{float(warm)!r}" data-period-s="{float(cut.period_s)!r}"'
            f' data-repeats="{cut.repeats}" data-cooldown-s="{float(cool)!r}"><title>{html.escape(tip)}</title>'
            f'<path d="M{x0:.1f},{yb + 5} V{yb} H{x1:.1f} V{yb + 5}" fill="none" stroke="#a00"'
            f' stroke-width="1.2"/>'
            f'<text x="{(x0 + x1) / 2:.1f}" y="{yb - 3}" font-size="11" font-weight="bold"'
            f' text-anchor="middle" fill="#a00">&#215; {cut.repeats}</text>'
            f'<rect x="{x1:.1f}" y="{top - 2}" width="{gap:.1f}" height="{pp * ROW_PX + 4}" fill="white"/>'
            f'<path d="M{x1 + gap / 2 - 3:.1f},{top - 2} l6,{(pp * ROW_PX + 4) / 2:.1f}'
            f' l-6,{(pp * ROW_PX + 4) / 2:.1f}" fill="none" stroke="#a00" stroke-dasharray="3 2"/></g>')


@dataclass(frozen=True)
class Phase:
    """One block of a phase chart: a named part of the iteration on one row."""
    kind: str  # a key of PHASE_COLOURS
    start_s: float
    end_s: float
    label: str = ""  # drawn inside the block when it fits
    tip: str = ""


PHASE_COLOURS = {"steady": "#4c72b0", "bubble": "#c8c8c8", "sync": "#937860"}
PHASE_NAMES = {"steady": "steady phase (forward + backward chunks)", "bubble": "pipeline bubble",
               "sync": "gradient sync + optimizer step"}


def phases_svg(rows: list[tuple[str, list[Phase]]], total_s: float, title: str) -> str:
    """Rows of phase blocks on one time axis from 0 to total_s (a dashed line there): the
    priced parts of an iteration where the cost model gives totals, not events."""
    left = 150
    ax = _Axis(total_s, None, WIDTH_PX, left)
    height = TOP_PX + len(rows) * ROW_PX + AXIS_PX
    out = [f'<svg class="gantt phases" viewBox="0 0 {WIDTH_PX} {height}" width="{WIDTH_PX}"'
           f' height="{height}" role="img"><title>{html.escape(title)}</title>',
           '<rect width="100%" height="100%" fill="white"/>']
    ybot = TOP_PX + len(rows) * ROW_PX
    out += _time_axis(ax, None, total_s, TOP_PX, ybot)
    for i, (label, phases) in enumerate(rows):
        y = TOP_PX + i * ROW_PX
        out.append(_row_label(left, y, label))
        for ph in phases:
            x0, w = ax.x(ph.start_s), (ph.end_s - ph.start_s) * ax.px_per_s
            out.append(f'<rect class="ev k-{ph.kind}" data-kind="{ph.kind}" data-start-s="{ph.start_s!r}"'
                       f' data-end-s="{ph.end_s!r}" x="{x0:.2f}" y="{y + 3}" width="{max(w, 0.4):.2f}"'
                       f' height="{ROW_PX - 6}" fill="{PHASE_COLOURS[ph.kind]}"><title>'
                       f'{html.escape(ph.tip or PHASE_NAMES[ph.kind])}</title></rect>')
            if ph.label and w >= 7 * len(ph.label):
                fill = "white" if ph.kind != "bubble" else "#222"
                out.append(f'<text x="{x0 + w / 2:.1f}" y="{y + ROW_PX / 2 + 4:.1f}" font-size="10"'
                           f' fill="{fill}" text-anchor="middle" pointer-events="none">'
                           f'{html.escape(ph.label)}</text>')
    out.append(_dashed_line(ax.x(total_s), TOP_PX, ybot, f"priced iteration time {seconds(total_s)}")
               + "</svg>")
    return "".join(out)


def phase_legend_html(total_s: float) -> str:
    items = "".join(f'<span class="lg-static"><i style="background:{c}"></i>{html.escape(PHASE_NAMES[k])}</span>'
                    for k, c in PHASE_COLOURS.items())
    return (f'<div class="legend">{items}<span class="lg-static"><i class="dash"></i>priced iteration'
            f' time {html.escape(seconds(total_s))}</span></div>')


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

