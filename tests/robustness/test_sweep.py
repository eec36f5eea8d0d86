"""solver/sweep/run.py: `paraplan sweep` over local worker processes and over a real Dask cluster.

Contract (solver/sweep/run.py docstring): one CSV row per job, written as it finishes; a job whose
worker dies is retried once, then recorded failed, and the others are unaffected (exit code 1);
--resume runs only the jobs without a done row; the Dask path gives the local path's results;
a bad sweep file is one InstanceError line naming the file and the field.

The jobs are the tiny GPT of instances/tiny-gpt-8xA100.yaml on 8 A100s (one node of 8, or two
of 4) with global batches 32 and 16: each solves to proved optimality in well under a second.
"""

import argparse
import csv
import os
import sys
from pathlib import Path

import pytest
import yaml

from paraplan import instances
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance
from paraplan.solver.commands import sweep as sweep_command
from paraplan.solver.sweep import run as sweep
from paraplan.solver.solve import solve as plan

INSTANCES = Path(instances.__file__).parent
TINY = INSTANCES / "tiny-gpt-8xA100.yaml"
A100 = {"gpu": "A100-SXM4-80GB", "intra_node_link": "nvlink", "intra_node_gbytes_per_s": 600,
        "nic_gbit_per_s": 200}  # as in the tiny instance: DGX A100 NVLink 3 and HDR InfiniBand
CRASHER = "crash-me"


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def write_sweep(folder: Path, **extra) -> Path:
    """Four jobs: the tiny model x {1 node of 8, 2 nodes of 4} x {global batch 32, 16}."""
    folder.mkdir(parents=True, exist_ok=True)
    write_yaml(folder / "one-node.yaml", {"cluster": {**A100, "nodes": 1, "gpus_per_node": 8}})
    write_yaml(folder / "two-nodes.yaml", {"cluster": {**A100, "nodes": 2, "gpus_per_node": 4}})
    write_yaml(folder / "batch-32.yaml", {"job": {"global_batch": 32}})
    write_yaml(folder / "batch-16.yaml", {"job": {"global_batch": 16}})
    return write_yaml(folder / "sweep.yaml", {
        "name": "tiny-study", "time_limit_s": 60, "models": [str(TINY)],
        "clusters": ["one-node.yaml", "two-nodes.yaml"], "jobs": ["batch-32.yaml", "batch-16.yaml"],
        **extra})


def run_cli(argv: list[str]) -> int:
    """`paraplan sweep ...` through the sub-command's own parser (cli.py registers the same)."""
    parser = argparse.ArgumentParser(prog="paraplan")
    sweep_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def comparable(rows: list[dict]) -> dict:
    """The rows by job id, without what depends on the run (wall time, tries)."""
    return {r["job_id"]: {k: v for k, v in r.items() if k not in ("solve_time_s", "attempts")}
            for r in rows}


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pool")
    out = folder / "results.csv"
    outcome = sweep.run_sweep(sweep.load_sweep(write_sweep(folder)), csv_path=str(out),
                              jsonl_path=str(folder / "results.jsonl"), workers=2)
    return folder, out, outcome


def test_process_pool_sweep_writes_one_optimal_row_per_job(pool_run):
    folder, out, outcome = pool_run
    with open(out, newline="", encoding="utf-8") as fh:
        assert tuple(next(csv.reader(fh))) == sweep.COLUMNS
    rows = sweep.read_csv(str(out))
    assert len(rows) == 4 and len({r["job_id"] for r in rows}) == 4
    assert {r["status"] for r in rows} == {"optimal"} and outcome.failed == []
    assert all(r["gap"] == "0.0" and r["attempts"] == "1" and r["error"] == "" for r in rows)
    # the plan's degrees use the 8 GPUs; tokens/s, MFU and memory come with every plan
    assert all(int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"]) == 8 for r in rows)
    assert all(float(r["tokens_per_s"]) > 0 and 0 < float(r["mfu"]) < 1
               and 0 < float(r["peak_mem_gib"]) <= 80 for r in rows)
    # the worker's answer is the planner's, in full precision
    one = next(r for r in rows if r["inputs"].endswith("one-node.yaml + batch-32.yaml"))
    assert one["instance"] == "tiny-gpt:one-node:batch-32"
    direct = plan(load_instance(TINY))  # the tiny instance is the same node and batch
    assert float(one["iter_time_s"]) == direct.iter_time_s
    jsonl = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(jsonl) == 4


def test_crashing_worker_is_retried_once_then_failed_alone(tmp_path, monkeypatch, capsys):
    path = write_sweep(tmp_path, runs=[{"instance": str(TINY), "name": CRASHER}])
    monkeypatch.setenv(sweep.TEST_CRASH_ENV, CRASHER)
    out = tmp_path / "results.csv"
    assert run_cli(["sweep", str(path), "-o", str(out), "--workers", "2"]) == 1
    rows = {r["instance"]: r for r in sweep.read_csv(str(out))}
    assert len(rows) == 5
    crashed = rows.pop(CRASHER)
    assert (crashed["status"], crashed["attempts"]) == ("failed", "2")
    assert "worker process died" in crashed["error"] and crashed["iter_time_s"] == ""
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("optimal", "1")}
    err = capsys.readouterr().err
    assert f"failed: {crashed['job_id']} {CRASHER} after 2 tries" in err


def test_resume_solves_only_the_jobs_without_a_done_row(pool_run, tmp_path):
    folder, out, _ = pool_run
    rows = sweep.read_csv(str(out))
    # an interrupted sweep: one job never written, one recorded failed
    kept, failed = rows[:2], {**rows[2], "status": "failed", "error": "RuntimeError: boom"}
    partial = tmp_path / "results.csv"
    with open(partial, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(sweep.COLUMNS)
        writer.writerows([r[c] for c in sweep.COLUMNS] for r in kept + [failed])
    sw = sweep.load_sweep(folder / "sweep.yaml")
    with pytest.raises(InstanceError, match="already exists"):
        sweep.run_sweep(sw, csv_path=str(partial), workers=2)
    outcome = sweep.run_sweep(sw, csv_path=str(partial), workers=2, resume=True)
    assert (outcome.skipped, sum(outcome.statuses.values())) == (2, 2)
    after = sweep.read_csv(str(partial))
    assert after[:2] == kept  # done rows are kept as they were, the failed one is dropped
    assert comparable(after) == comparable(rows)
    again = sweep.run_sweep(sw, csv_path=str(partial), workers=2, resume=True)
    assert (again.skipped, sum(again.statuses.values())) == (4, 0)


@pytest.mark.slow
def test_dask_cluster_gives_the_process_pool_results(pool_run, tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed: pip install"
                                              " 'paraplan[cluster]' (the test extra has it)")
    from distributed import LocalCluster

    folder, out, _ = pool_run
    dask_out = tmp_path / "dask.csv"
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster:
        outcome = sweep.run_sweep(sweep.load_sweep(folder / "sweep.yaml"),
                                  csv_path=str(dask_out), cluster=cluster.scheduler_address)
    assert outcome.failed == [] and sum(outcome.statuses.values()) == 4
    assert comparable(sweep.read_csv(str(dask_out))) == comparable(sweep.read_csv(str(out)))


# --- the sweep file and the arguments (no solving) -----------------------------------------

@pytest.mark.parametrize("change, field, problem", [
    ({"backend": "gurobi"}, "backend", "unknown value"),
    ({"clusters": None}, "clusters", "missing"),
    ({"jobs": ["no-such-job.yaml"]}, "jobs[0]", "file not found"),
    ({"time_limit_s": "60"}, "time_limit_s", "expected a number"),
    ({"runs": [{"cluster": "one-node.yaml"}]}, "runs[0]", "no 'instance:'"),
    ({"runs": [{"instance": str(TINY), "modle": "x"}]}, "runs[0].modle", "unknown key"),
    ({"models": [str(TINY), str(TINY)]}, "models[1] x clusters[0] x jobs[0]", "same inputs"),
    ({"tags": ["a"]}, "tags", "unknown key"),
])
def test_bad_sweep_file_names_the_file_and_field(tmp_path, change, field, problem):
    path = write_sweep(tmp_path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw.update(change)
    raw = {k: v for k, v in raw.items() if v is not None}
    write_yaml(path, raw)
    with pytest.raises(InstanceError) as e:
        sweep.load_sweep(path)
    message = str(e.value)
    assert message.startswith(f"{path}: {field}: ") and problem in message, message
    assert "\n" not in message


def test_job_id_depends_on_contents_not_on_the_working_directory(tmp_path, monkeypatch):
    path = write_sweep(tmp_path)
    ids = [j.job_id for j in sweep.load_sweep(path).jobs]
    monkeypatch.chdir(tmp_path)
    assert [j.job_id for j in sweep.load_sweep("sweep.yaml").jobs] == ids
    write_yaml(tmp_path / "batch-16.yaml", {"job": {"global_batch": 8}})
    changed = [j.job_id for j in sweep.load_sweep("sweep.yaml").jobs]
    assert sum(a != b for a, b in zip(ids, changed)) == 2  # the two jobs that use the file


def test_cluster_without_dask_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    sw = sweep.load_sweep(write_sweep(tmp_path))
    with pytest.raises(InstanceError, match=r"pip install 'paraplan\[cluster\]'"):
        sweep.run_sweep(sw, csv_path=str(tmp_path / "r.csv"), cluster="tcp://127.0.0.1:8786")
    assert not os.path.exists(tmp_path / "r.csv")
