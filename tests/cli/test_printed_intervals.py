"""Every command that prints a predicted time prints its 80% interval (issue 31, "What to build" 2).

The reference for each interval is `paraplan simulate --json` on the same plan file: the command
that prices one given plan, reached through its own code path (read the plan file, simulate it,
cost/trust.plan_trust), so `export`, `plan --top` and `exhaustive` are checked against what a user
gets by asking for that plan alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from paraplan.solver.commands.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "instances" / "tiny-gpt-8xA100.yaml"
TINY_MIXED = ROOT / "instances" / "mixed" / "tiny-2types.yaml"
NARROW = ("--search", "tp=1", "--search", "pp=1")


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _simulated_interval(capsys, instance: Path, plan_file: Path) -> list[float]:
    code, out, _ = _run(capsys, "simulate", instance, "--plan", plan_file, "--json")
    assert code == 0
    band = json.loads(out)["interval_s"]
    assert band is not None and band[0] < band[1]
    return band


def _planned(capsys, tmp_path: Path, instance: Path, *search) -> tuple[Path, dict]:
    """The optimum of `instance` (narrowed by `search`, --search arguments) as `plan -o` writes
    it, and `plan --json`'s document."""
    path = tmp_path / f"{instance.stem}.yaml"
    code, out, _ = _run(capsys, "plan", instance, *search, "--quiet", "--json", "-o", path)
    assert code == 0
    return path, json.loads(out)


def test_export_prints_the_band_simulate_prints_for_the_plan(capsys, tmp_path):
    # to another framework than the plan's (megatron -> deepspeed) both predictions are printed;
    # deepspeed prices the tiny plan more than 5% slower, so it is written under --force
    path, _ = _planned(capsys, tmp_path, TINY)
    band = _simulated_interval(capsys, TINY, path)
    code, out, err = _run(capsys, "export", path, "--to", "deepspeed", "--force", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["plan"]["interval_s"] == pytest.approx(band, rel=1e-12)
    lo, hi = doc["emitted"]["interval_s"]
    assert lo < doc["emitted"]["iter_time_s"] < hi  # the band of the emitted configuration's own time
    code, _, err = _run(capsys, "export", path, "--to", "deepspeed", "--force")
    planned = next(line for line in err.splitlines() if line.startswith("paraplan: the plan as planned"))
    assert f"(likely measured {band[0]:.4g}-{band[1]:.4g} s, 80%)" in planned
    emitted = next(line for line in err.splitlines() if line.startswith("paraplan: the emitted configuration"))
    assert f"(likely measured {lo:.4g}-{hi:.4g} s, 80%)" in emitted


@pytest.mark.parametrize("instance", [TINY, TINY_MIXED])
def test_plan_top_prints_each_plans_band(capsys, tmp_path, instance):
    out_file = tmp_path / "top.yaml"
    code, out, _ = _run(capsys, "plan", instance, "--top", "2", "--quiet", "--json", "-o", out_file)
    assert code == 0
    plans = json.loads(out)["plans"]
    assert len(plans) == 2
    for k, row in enumerate(plans, start=1):  # plan k written to top-k.yaml
        band = _simulated_interval(capsys, instance, tmp_path / f"top-{k}.yaml")
        assert row["interval_s"] == pytest.approx(band, rel=1e-12)
    code, text, _ = _run(capsys, "plan", instance, "--top", "2", "--quiet")
    assert "likely measured (80%)" in text.splitlines()[1]


def test_exhaustive_prints_the_band_and_the_value_it_minimised(capsys, tmp_path):
    # brute force finds the planner's optimum (the agreement tests); its band and p90 value are
    # then the plan's: simulate's band, and `plan --json`'s quantile_s. The space narrowed to
    # the tiny instance's optimum's degrees (tp 1, pp 1), so that brute force takes a second
    path, planned = _planned(capsys, tmp_path, TINY, *NARROW)
    band = _simulated_interval(capsys, TINY, path)
    code, out, _ = _run(capsys, "exhaustive", TINY, *NARROW, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["iter_time_s"] == pytest.approx(planned["iter_time_s"], rel=1e-12)
    assert doc["interval_s"] == pytest.approx(band, rel=1e-12)
    code, text, _ = _run(capsys, "exhaustive", TINY, *NARROW)
    best = next(line for line in text.splitlines() if line.startswith("best"))
    assert re.search(r"; ([\d.]+) ms at p90, the value minimised", best).group(1) == \
        f"{1e3 * planned['quantile_s']:.1f}"
    assert any(line.startswith("trust       measured time likely in") for line in text.splitlines())


def test_replan_prints_the_band_of_the_running_and_the_new_plan(capsys, tmp_path):
    # An event (tiny-gpt's NVLink at a tenth) changes the network, not what the trust interval
    # reads (GPU, scale, degrees, memory fill): a plan's band is its predicted time times the
    # same two factors on either network (docs/commands.md, trust.interval_s). So each band
    # replan prints is simulate's band of that plan on the nominal network, scaled by the time
    # replan predicts after the event over simulate's time.
    import yaml

    current = tmp_path / "current.yaml"
    code, _, _ = _run(capsys, "plan", TINY, "--quiet", "-o", current)
    event = tmp_path / "event.yaml"
    event.write_text(yaml.safe_dump({"event": {"name": "nvlink-slow", "remaining_hours": 100,
                                               "changes": [{"group": "A100-SXM4-80GB", "intra_scale": 0.1}]}}))
    new = tmp_path / "new.yaml"
    code, out, _ = _run(capsys, "replan", TINY, "--plan", current, "--event", event, "--json", "-o", new)
    assert code == 0
    doc = json.loads(out)

    def scaled_band(plan_file: Path, time_s: float) -> list[float]:
        code, out, _ = _run(capsys, "simulate", TINY, "--plan", plan_file, "--json")
        sim = json.loads(out)
        return [x * time_s / sim["iter_time_s"] for x in sim["interval_s"]]

    assert doc["current_after_event_interval_s"] == pytest.approx(
        scaled_band(current, doc["current_after_event_s"]), rel=1e-9)
    assert doc["new_interval_s"] == pytest.approx(scaled_band(new, doc["new_s"]), rel=1e-9)
    code, text, _ = _run(capsys, "replan", TINY, "--plan", current, "--event", event)
    lines = text.splitlines()
    assert "likely measured" in next(line for line in lines if line.startswith("running"))
    assert "predicted" in next(line for line in lines if line.startswith("objective"))
    assert any(line.startswith("trust       measured time likely in") for line in lines)


# two groups on two sites, the link between them cut to a tenth in the second period
TIMELINE = """\
name: two-sites
model: {layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1000, seq_len: 128, mlp: gelu}
cluster:
  groups:
  - {name: a, site: east, gpu: A100-SXM4-80GB, nodes: 1, gpus_per_node: 4, intra_node_gbytes_per_s: 600, nic_gbit_per_s: 200}
  - {name: h, site: west, gpu: H100-SXM5-80GB, nodes: 1, gpus_per_node: 4, intra_node_gbytes_per_s: 600, nic_gbit_per_s: 400}
  links:
  - {between: [east, west], gbit_per_s: 100, latency_us: 1000}
job: {global_batch: 16}
search: {micro_batch: [1], tp: [2, 4]}
scenarios:
- {name: slow, probability: 0.2, changes: [{between: [east, west], scale: 0.1}]}
timeline:
- {scenario: nominal, duration_h: 2}
- {scenario: slow, duration_h: 1}
switching: {storage_gbytes_per_s: 10, restart_s: 60}
"""


def test_timeline_prints_each_periods_band(capsys, tmp_path):
    # Each period's band is its plan's simulate band (the plan written as a plan file and
    # simulated on the nominal network) scaled to the period's predicted time; and a plan of
    # node groups carries the band the planner minimised, so its upper end is the period's p90
    # time, the value the timeline's iterations count (cost/trust.plan_trust)
    import yaml

    inst = tmp_path / "timeline.yaml"
    inst.write_text(TIMELINE)
    code, out, _ = _run(capsys, "timeline", inst, "--quiet", "--json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["periods"]) == 2
    for p in doc["periods"]:
        plan_file = tmp_path / f"plan-{p['plan']}.yaml"
        plan_file.write_text(yaml.safe_dump({"plan": doc["candidates"][p["plan"]]["plan"]}))
        code, out, _ = _run(capsys, "simulate", inst, "--plan", plan_file, "--json")
        sim = json.loads(out)
        assert p["interval_s"] == pytest.approx(
            [x * p["iter_time_s"] / sim["iter_time_s"] for x in sim["interval_s"]], rel=1e-9)
        assert p["interval_s"][1] == pytest.approx(p["objective_s"], rel=1e-9)
    code, text, _ = _run(capsys, "timeline", inst, "--quiet")
    assert "likely measured (80%)" in text


def test_report_names_the_band_of_the_plan_it_drew(capsys, tmp_path):
    # report plans as plan does (the same optimum), so its line gives simulate's band of that plan
    from paraplan.solver.format import seconds

    path, _ = _planned(capsys, tmp_path, TINY, *NARROW)
    band = _simulated_interval(capsys, TINY, path)
    code, out, _ = _run(capsys, "report", TINY, *NARROW, "--quiet", "-o", tmp_path / "r.html")
    assert code == 0
    assert out.strip().endswith(f"(likely measured {seconds(band[0])} .. {seconds(band[1])}, 80%)")


def test_sweep_writes_the_band_beside_each_time(capsys, tmp_path):
    # one job, the tiny instance as it is: its CSV row carries simulate's band of that plan
    import csv

    import yaml

    from paraplan.solver.sweep import run as sweep

    study = tmp_path / "sweep.yaml"
    study.write_text(yaml.safe_dump({"name": "one", "time_limit_s": 60, "instances": [str(TINY)]}))
    out = tmp_path / "one.csv"
    sweep.run_sweep(sweep.load_sweep(study), csv_path=str(out), workers=1)
    with open(out, newline="", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    path, _ = _planned(capsys, tmp_path, TINY)
    band = _simulated_interval(capsys, TINY, path)
    assert float(row["iter_time_s"]) == pytest.approx(json.loads(_run(
        capsys, "simulate", TINY, "--plan", path, "--json")[1])["iter_time_s"], rel=1e-12)
    assert [float(row["iter_time_low_s"]), float(row["iter_time_high_s"])] == pytest.approx(band, rel=1e-12)
