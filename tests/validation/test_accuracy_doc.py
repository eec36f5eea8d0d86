"""The figures of docs/accuracy.md and docs/moe.md are generated (cost/docs/accuracy.py) from the
stored cross-validations, and the README quotes the same ones: a model change that re-stores a
cross-validation must come with the regenerated pages (`python -m paraplan.cost.docs.accuracy`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paraplan.cost.docs import accuracy as accuracy_doc
from paraplan.cost.crossval import load_stored
from oracles.cost import regions
from paraplan.cost.docs.regions import region
from paraplan.cost.trust import published_residuals

ROOT = Path(__file__).resolve().parents[2]


def test_the_pages_hold_what_the_stored_records_give():
    for page, bodies in accuracy_doc.bodies(simulate=False).items():
        text = page.read_text()
        for name, body in bodies.items():
            assert region(text, name) == body, f"{page.name}: region {name} is stale; run" \
                                               f" `{accuracy_doc.COMMAND}`"


@pytest.mark.slow
def test_the_long_context_split_is_what_the_model_prices_now():
    # priced live (nine anchors, three simulations each: about 4 s), unlike the stored tables
    for page, names in accuracy_doc.SIMULATED.items():
        bodies = accuracy_doc.bodies(simulate=True)[page]
        for name in names:
            assert region(page.read_text(), name) == bodies[name]


def test_every_generated_region_has_a_generator():
    # a region left in a page with nothing to write it would read as generated and never be
    for page in (accuracy_doc.ACCURACY_PAGE, accuracy_doc.MOE_PAGE):
        made = set(accuracy_doc.bodies(simulate=False)[page]) | set(accuracy_doc.SIMULATED.get(page, ()))
        assert set(regions(page.read_text())) == made


def test_the_headline_table_reads_the_stored_rows():
    # Derived here from crossval.yaml's rows without the generator's helpers: the "all" row's
    # out-of-sample MAPE is the mean |out_of_sample_s / measured - 1| over the rows, its
    # in-sample MAPE the same of in_sample_s; 239 rows (214 bf16/fp16 + 25 FP8).
    rows = [s for s in load_stored() if s.out_of_sample_s is not None]
    oos = sum(abs(s.out_of_sample_s / s.measured_iter_time_s - 1) for s in rows) / len(rows)
    ins = sum(abs(s.in_sample_s / s.measured_iter_time_s - 1) for s in rows) / len(rows)
    table = region(accuracy_doc.ACCURACY_PAGE.read_text(), "dense-families")
    (last,) = [line for line in table.splitlines() if line.startswith("| **all** |")]
    assert last.startswith("| **all** | **239** |")
    assert f"**{100 * ins:.2f}%**" in last and f"**{100 * oos:.2f}%**" in last
    # one line per source family above it, as many as the residuals have
    families = {r.features.family for r in published_residuals()}
    assert sum(line.split(" | ")[0].lstrip("| ") in families for line in table.splitlines()) == len(families)


def test_the_readme_quotes_the_stored_figures():
    # README: "checked against N published training runs (X% mean error on sources left out of
    # its fit, Y% on the runs it was fitted to": N rows, X the out-of-sample MAPE and Y the
    # in-sample one, each to one decimal, from the same stored rows
    rows = [s for s in load_stored() if s.out_of_sample_s is not None]
    oos = sum(abs(s.out_of_sample_s / s.measured_iter_time_s - 1) for s in rows) / len(rows)
    ins = sum(abs(s.in_sample_s / s.measured_iter_time_s - 1) for s in rows) / len(rows)
    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"checked against (\d+) published training runs \((\d+\.\d)% mean error on sources"
                  r" left out of its fit, (\d+\.\d)% on the runs it was fitted to", text)
    assert m is not None
    assert (int(m[1]), m[2], m[3]) == (len(rows), f"{100 * oos:.1f}", f"{100 * ins:.1f}")
