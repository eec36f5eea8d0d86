"""The totals written on the report's stacked memory bars (page.py per stage, dualpipe.py per
device pair), placed so that the capacity line never runs through them."""

from __future__ import annotations

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
