"""Time and cost to train (issue 34): job.train_tokens and job.usd_per_gpu_hour give, beside
every plan, the wall-clock time, GPU-hours and cost to train, with the plan's trust interval
carried through; the refusals are one line naming the field and the fix; a job without the
keys shows nothing new.

The expected numbers are derived by hand from the plan's own iteration time t (read from the
JSON) and the instance: tiny-gpt has global_batch 32 x seq_len 1,024 = 32,768 tokens per
iteration on 8 A100; tiny-2types has the same job on 8 A100 + 8 H100.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from paraplan import instances
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.schema import validate

INSTANCES = Path(instances.__file__).parent
TINY_RAW = yaml.safe_load((INSTANCES / "tiny-gpt-8xA100.yaml").read_text())
MIXED_RAW = yaml.safe_load((INSTANCES / "mixed" / "tiny-2types.yaml").read_text())
A100, H100 = "A100-SXM4-80GB", "H100-SXM5-80GB"
TOKENS_PER_ITERATION = 32 * 1024  # global_batch x seq_len of both instances
HOUR_S, DAY_S = 3600.0, 86400.0


def with_job(raw: dict, tmp_path: Path, name: str = "inst.yaml", **job) -> str:
    out = copy.deepcopy(raw)
    out["job"].update(job)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(out, sort_keys=False), encoding="utf-8")
    return str(path)


def run(capsys, argv, code=0) -> tuple[str, str]:
    assert main([str(a) for a in argv]) == code
    return capsys.readouterr()


def plan_json(capsys, path) -> dict:
    out, _ = run(capsys, ["plan", path, "--json", "--quiet"])
    return json.loads(out)


# --- the hand-derived cases --------------------------------------------------------------------

def test_one_group_plan_gives_time_gpu_hours_and_cost_with_its_trust_interval(capsys, tmp_path):
    # 3.2768e10 tokens / 32,768 tokens per iteration = 10**6 iterations exactly; at t s each:
    # time 10**6 t s, GPU-hours 10**6 t x 8 / 3,600, cost GPU-hours x $2 (one type, A100);
    # each end of the trust interval [t_lo, t_hi] gives the same formulas with t_lo, t_hi
    path = with_job(TINY_RAW, tmp_path, train_tokens=3.2768e10, usd_per_gpu_hour={A100: 2.0})
    doc = plan_json(capsys, path)
    assert not validate(doc, "plan")
    t = doc["iter_time_s"]
    t_lo, t_hi = doc["trust"]["interval_s"]
    tc = doc["train_cost"]
    N = 10**6
    assert tc["iterations"] == N and tc["tokens_per_iteration"] == TOKENS_PER_ITERATION
    assert tc["num_gpus"] == 8 and tc["iter_time_s"] == t
    assert tc["time_s"] == pytest.approx(N * t, rel=1e-12)
    assert tc["gpu_hours"] == pytest.approx(N * t * 8 / HOUR_S, rel=1e-12)
    assert tc["cost_usd"] == pytest.approx(N * t * 8 / HOUR_S * 2.0, rel=1e-12)
    assert tc["time_interval_s"] == pytest.approx([N * t_lo, N * t_hi], rel=1e-12)
    assert tc["gpu_hours_interval"] == pytest.approx([N * t_lo * 8 / HOUR_S,
                                                      N * t_hi * 8 / HOUR_S], rel=1e-12)
    assert tc["cost_interval_usd"] == pytest.approx([N * t_lo * 8 / HOUR_S * 2.0,
                                                     N * t_hi * 8 / HOUR_S * 2.0], rel=1e-12)
    # the text shows the same figures, rounded as printed
    out, _ = run(capsys, ["plan", path, "--quiet"])
    lines = [x for x in out.splitlines() if x.startswith("train")]
    assert len(lines) == 1
    first = lines[0]
    second = out.splitlines()[out.splitlines().index(first) + 1]
    assert "3.277e+10 tokens = 1,000,000 iterations of 32,768 tokens" in first
    hours = N * t / HOUR_S  # about 7 hours at tiny-gpt's 26 ms
    assert 1 <= hours < 48, hours  # so it is printed in hours, to 0.1 h
    assert f": {hours:,.1f} h ({N * t_lo / HOUR_S:,.1f} h .. {N * t_hi / HOUR_S:,.1f} h)" in first
    gpu_hours = hours * 8
    assert 10 <= gpu_hours < 100 and gpu_hours * 2.0 >= 100  # 3 digits; whole dollars
    assert (f"on 8 GPUs: GPU-hours {gpu_hours:#.3g} ({N * t_lo * 8 / HOUR_S:#.3g} .."
            f" {N * t_hi * 8 / HOUR_S:#.3g}), cost ${gpu_hours * 2.0:,.0f}") in second


def test_iterations_are_whole_steps(capsys, tmp_path):
    # 1e9 / 32,768 = 30,517.578...: the run takes 30,518 optimizer steps
    doc = plan_json(capsys, with_job(TINY_RAW, tmp_path, train_tokens=1.0e9))
    tc = doc["train_cost"]
    assert tc["iterations"] == 30_518
    assert tc["time_s"] == pytest.approx(30_518 * doc["iter_time_s"], rel=1e-12)
    assert tc["cost_usd"] is None and tc["cost_interval_usd"] is None  # no price given


def test_mixed_cluster_prices_each_gpu_type(capsys, tmp_path):
    # 8 A100 at $1.5 and 8 H100 at $2.5 per GPU-hour: the cluster costs 8 x 1.5 + 8 x 2.5 = $32
    # per hour of wall clock; 8 x 10**5 iterations of t s; GPU-hours over all 16 GPUs. The interval:
    # the same formulas at the ends of the plan's trust interval (cost/trust.plan_trust)
    path = with_job(MIXED_RAW, tmp_path, train_tokens=2.62144e10,  # 8 x 10**5 x 32,768 tokens
                    usd_per_gpu_hour={A100: 1.5, H100: 2.5})
    doc = plan_json(capsys, path)
    assert not validate(doc, "plan")
    t = doc["iter_time_s"]
    tc = doc["train_cost"]
    N = 8 * 10**5
    assert tc["iterations"] == N and tc["num_gpus"] == 16
    assert tc["time_s"] == pytest.approx(N * t, rel=1e-12)
    assert tc["gpu_hours"] == pytest.approx(N * t * 16 / HOUR_S, rel=1e-12)
    assert tc["cost_usd"] == pytest.approx(N * t * 32.0 / HOUR_S, rel=1e-12)
    lo, hi = doc["trust"]["interval_s"]
    assert tc["time_interval_s"] == pytest.approx([N * lo, N * hi], rel=1e-12)
    assert tc["cost_interval_usd"] == pytest.approx([N * lo * 32.0 / HOUR_S, N * hi * 32.0 / HOUR_S], rel=1e-12)
    out, _ = run(capsys, ["plan", path, "--quiet"])
    assert "train       2.621e+10 tokens = 800,000 iterations of 32,768 tokens" in out
    gpu_hours = N * t * 16 / HOUR_S  # about 89 at 25 ms (10**6 iterations before the dense refit made it 111)
    assert 10 <= gpu_hours < 100 and N * t * 32.0 / HOUR_S >= 100  # 3 digits; whole dollars
    assert f"on 16 GPUs: GPU-hours {gpu_hours:#.3g} (" in out  # (its interval's ends)
    assert f", cost ${N * t * 32.0 / HOUR_S:,.0f} ($" in out


def test_without_the_keys_nothing_is_shown(capsys):
    tiny = str(INSTANCES / "tiny-gpt-8xA100.yaml")
    mixed = str(INSTANCES / "mixed" / "tiny-2types.yaml")
    for path in (tiny, mixed):
        assert plan_json(capsys, path)["train_cost"] is None
        out, _ = run(capsys, ["plan", path, "--quiet"])
        assert "train " not in out and "GPU-hours" not in out


# --- refusals: one line naming the field and the fix -------------------------------------------

def refusal(capsys, path) -> str:
    out, err = run(capsys, ["plan", path, "--quiet"], code=2)
    assert out == "" and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("raw, job, field, fix", [
    (TINY_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {H100: 2.5}},
     f"job.usd_per_gpu_hour.{H100}", "price the cluster's GPU types only"),
    (TINY_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {A100: 0}},
     f"job.usd_per_gpu_hour.{A100}", "must be > 0"),
    (TINY_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {A100: -1.5}},
     f"job.usd_per_gpu_hour.{A100}", "must be > 0"),
    (TINY_RAW, {"usd_per_gpu_hour": {A100: 2.0}}, "job.usd_per_gpu_hour", "add train_tokens"),
    (TINY_RAW, {"train_tokens": 0}, "job.train_tokens", "must be > 0"),
    (TINY_RAW, {"train_tokens": -1e9}, "job.train_tokens", "must be > 0"),
    (TINY_RAW, {"train_tokens": "15.0e12"}, "job.train_tokens", "write 15.0e+12"),
    (TINY_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {}}, "job.usd_per_gpu_hour", "names no GPU type"),
    (MIXED_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {A100: 1.5}}, "job.usd_per_gpu_hour",
     f"add '{H100}: <USD per GPU-hour>'"),
    (MIXED_RAW, {"train_tokens": 1e9, "usd_per_gpu_hour": {A100: 1.5, H100: 2.5, "B200": 5.0}},
     "job.usd_per_gpu_hour.B200", "price the cluster's GPU types only"),
], ids=["type-not-in-cluster", "zero", "negative", "price-without-tokens", "zero-tokens",
        "negative-tokens", "yaml-text-exponent", "empty", "mixed-type-unpriced", "mixed-type-absent"])
def test_refusals(capsys, tmp_path, raw, job, field, fix):
    err = refusal(capsys, with_job(raw, tmp_path, **job))
    assert f": {field}: " in err and fix in err, err


# --- compare, report and sweep show it where they show a plan ---------------------------------

def test_plan_file_carries_the_keys_and_compare_shows_both_plans(capsys, tmp_path):
    # plan -o writes the job's keys into the instance it carries; compare prices each plan at
    # its own iteration time: 10**6 iterations x t_A and x t_B, GPU-hours x 8 / 3,600, $2 each
    path = with_job(TINY_RAW, tmp_path, train_tokens=3.2768e10, usd_per_gpu_hour={A100: 2.0})
    best = tmp_path / "best.yaml"
    run(capsys, ["plan", path, "-o", best, "--quiet"])
    job = yaml.safe_load(best.read_text())["instance"]["job"]
    assert job["train_tokens"] == 3.2768e10 and job["usd_per_gpu_hour"] == {A100: 2.0}
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"plan": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                              "recompute": "selective"}}), encoding="utf-8")
    out, _ = run(capsys, ["compare", best, other, "--instance", path, "--json"])
    doc = json.loads(out)
    assert not validate(doc, "compare")
    for p in doc["plans"]:
        t, tc = p["iter_time_s"], p["train_cost"]
        assert tc["time_s"] == pytest.approx(10**6 * t, rel=1e-12)
        assert tc["cost_usd"] == pytest.approx(10**6 * t * 8 / HOUR_S * 2.0, rel=1e-12)
        assert tc["time_interval_s"] is not None
    out, _ = run(capsys, ["compare", best, other, "--instance", path])
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert {"time to train", "GPU-hours", "cost"} <= set(rows)
    t_a, t_b = (p["iter_time_s"] for p in doc["plans"])
    assert f"{10**6 * t_a / HOUR_S:,.1f} h" in rows["time to train"]
    assert f"{10**6 * t_b / HOUR_S:,.1f} h" in rows["time to train"]
    # without the keys compare shows no such row, and its JSON carries null
    plain = str(INSTANCES / "tiny-gpt-8xA100.yaml")
    out, _ = run(capsys, ["compare", best, other, "--instance", plain])
    assert "time to train" not in out and "GPU-hours" not in out
    out, _ = run(capsys, ["compare", best, other, "--instance", plain, "--json"])
    assert [p["train_cost"] for p in json.loads(out)["plans"]] == [None, None]


@pytest.mark.parametrize("raw", [TINY_RAW, MIXED_RAW], ids=["one-group", "mixed"])
def test_report_shows_the_time_and_cost_to_train(capsys, tmp_path, raw):
    import html
    path = with_job(raw, tmp_path, train_tokens=3.2768e10,
                    usd_per_gpu_hour={A100: 2.0} if raw is TINY_RAW else {A100: 1.5, H100: 2.5})
    doc = plan_json(capsys, path)
    page = tmp_path / "r.html"
    run(capsys, ["report", path, "-o", page, "--quiet"])
    text = html.unescape(page.read_text())
    # the plan's own text lines, as `plan` prints them (the same planner, the same plan)
    out, _ = run(capsys, ["plan", path, "--quiet"])
    lines = out.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("train "))
    for line in lines[first:first + 2]:
        assert line[12:] in text
    assert "time to train" in text and f"{doc['train_cost']['cost_usd']:,.0f}" in text
    plain = tmp_path / "plain.html"
    run(capsys, ["report", str(INSTANCES / ("tiny-gpt-8xA100.yaml" if raw is TINY_RAW
                                            else "mixed/tiny-2types.yaml")), "-o", plain, "--quiet"])
    assert "time to train" not in plain.read_text()


def test_sweep_writes_the_columns(tmp_path):
    # a sweep of the priced tiny instance and the bundled one: the priced row's columns are its
    # 10**6 iterations x iter_time_s (and the interval's ends), x 8 / 3,600 GPU-hours, x $2;
    # the bundled one's are empty
    import csv
    from paraplan.solver.sweep import run as sweep
    priced = with_job({**TINY_RAW, "name": "tiny-priced"}, tmp_path, train_tokens=3.2768e10,
                      usd_per_gpu_hour={A100: 2.0})
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({"name": "train-cost", "instances": [
        priced, str(INSTANCES / "tiny-gpt-8xA100.yaml")]}), encoding="utf-8")
    out = tmp_path / "out.csv"
    jsonl = tmp_path / "out.jsonl"
    sweep.run_sweep(sweep.load_sweep(spec), csv_path=str(out), jsonl_path=str(jsonl), workers=1)
    with open(out, newline="", encoding="utf-8") as fh:
        rows = {r["instance"]: r for r in csv.DictReader(fh)}
    records = {json.loads(x)["instance"]: json.loads(x) for x in jsonl.read_text().splitlines()}
    row, t = rows["tiny-priced"], float(rows["tiny-priced"]["iter_time_s"])
    trust = records["tiny-priced"]["result"]["train_cost"]["time_interval_s"]
    assert float(row["train_time_s"]) == pytest.approx(10**6 * t, rel=1e-12)
    assert [float(row["train_time_low_s"]), float(row["train_time_high_s"])] == pytest.approx(trust, rel=1e-12)
    assert float(row["gpu_hours"]) == pytest.approx(10**6 * t * 8 / HOUR_S, rel=1e-12)
    assert float(row["cost_usd"]) == pytest.approx(10**6 * t * 8 / HOUR_S * 2.0, rel=1e-12)
    assert float(row["cost_high_usd"]) == pytest.approx(trust[1] * 8 / HOUR_S * 2.0, rel=1e-12)
    plain = rows["tiny-gpt-8xA100"]
    assert all(plain[c] == "" for c in sweep.COLUMNS if "train" in c or "gpu_hours" in c or "cost" in c)


def test_plan_top_prices_every_listed_plan(capsys, tmp_path):
    # each of --top's plans at its own iteration time: 10**6 iterations x t, cost x 8 / 3,600 x $2
    path = with_job(TINY_RAW, tmp_path, train_tokens=3.2768e10, usd_per_gpu_hour={A100: 2.0})
    out, _ = run(capsys, ["plan", path, "--top", "2", "--json"])
    doc = json.loads(out)
    assert not validate(doc, "plan --top")
    for p in doc["plans"]:
        assert p["train_cost"]["time_s"] == pytest.approx(10**6 * p["iter_time_s"], rel=1e-12)
        assert p["train_cost"]["cost_usd"] == pytest.approx(10**6 * p["iter_time_s"] * 8 / HOUR_S * 2.0,
                                                            rel=1e-12)
    out, _ = run(capsys, ["plan", path, "--top", "2"])
    assert "time to train" in out.splitlines()[1] and "cost" in out.splitlines()[1]
    out, _ = run(capsys, ["plan", str(INSTANCES / "tiny-gpt-8xA100.yaml"), "--top", "2"])
    assert "time to train" not in out


def test_prices_are_checked_against_the_final_cluster_of_part_files(capsys, tmp_path):
    # the instance prices its A100s; --cluster replaces them with H100s: refused, naming the
    # price the new cluster has no GPU for
    path = with_job(TINY_RAW, tmp_path, train_tokens=1e9, usd_per_gpu_hour={A100: 2.0})
    cluster = tmp_path / "h100.yaml"
    cluster.write_text(yaml.safe_dump({"cluster": {"gpu": H100, "nodes": 1, "gpus_per_node": 8,
                                                   "intra_node_gbytes_per_s": 900,
                                                   "nic_gbit_per_s": 400}}), encoding="utf-8")
    out, err = run(capsys, ["plan", path, "--cluster", cluster, "--quiet"], code=2)
    assert f"job.usd_per_gpu_hour.{A100}: prices {A100}, which the cluster does not have" in err
    assert len(err.strip().splitlines()) == 1
