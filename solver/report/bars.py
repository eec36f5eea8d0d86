"""The report's stacked memory bars (page.py per stage, dualpipe.py per device pair) against
the usable capacity, their totals placed so that the capacity line never runs through them."""

from __future__ import annotations

import numpy as np

# a total within this share of the axis height below the capacity line goes inside its bar:
# above it, the label sat on the line (75.6 GiB of 78 on Llama-3 70B, 75.0 of 78 on DeepSeek-V3)
INSIDE_BELOW_CAPACITY = 0.07


def total_labels(ax, totals, capacity: float, top: float) -> None:
    """Each bar's total (GiB) above it, or, where one of them is within INSIDE_BELOW_CAPACITY x
    `top` (the axis height) below `capacity`, every one inside its bar's top in white (one
    placement for all reads as one row of numbers)."""
    inside = any(0 <= capacity - y < INSIDE_BELOW_CAPACITY * top for y in totals)
    for i, y in enumerate(totals):
        ax.text(i, y - 0.01 * top if inside else y, f"{y:.2f}", ha="center",
                va="top" if inside else "bottom", fontsize=8, zorder=4,
                color="white" if inside else "black",
                bbox=None if inside else dict(facecolor="white", edgecolor="none", pad=1.0))


def memory_bars(stacks, capacity_gib: float, ticks: list[str], xlabel: str, title: str, ncol: int,
                width_per_bar: float):
    """A Figure of one stacked bar per tick: `stacks` are (label, colour, GiB per bar), bottom
    first; the usable capacity a dashed line, each bar's total written by total_labels."""
    from matplotlib.figure import Figure

    n = len(ticks)
    fig = Figure(figsize=(max(7.0, 2.5 + width_per_bar * n), 4.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(n)
    bottom = np.zeros(n)
    for name, colour, gib in stacks:
        ax.bar(x, gib, bottom=bottom, color=colour, label=name, width=0.6)
        bottom += gib
    top = max(capacity_gib, bottom.max()) * 1.25
    total_labels(ax, bottom, capacity_gib, top)
    ax.axhline(capacity_gib, color="crimson", linestyle="--", linewidth=1.4,
               label=f"usable capacity {capacity_gib:.1f} GiB")
    ax.set_xticks(x, ticks)
    pad = max(0.0, (3 - n) / 2)  # keep bars narrow when there are only one or two
    ax.set_xlim(-0.5 - pad, n - 0.5 + pad)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_ylim(0, top)
    fig.legend(loc="outside lower center", fontsize=8, ncol=ncol, frameon=False)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return fig
