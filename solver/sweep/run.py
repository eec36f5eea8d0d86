"""`paraplan sweep`: plan many instances, fanned out over local processes or a Dask cluster.

    paraplan sweep instances/sweeps/example.yaml -o results.csv
    paraplan sweep study.yaml --workers 8 --json results.jsonl
    paraplan sweep study.yaml --dask-scheduler tcp://scheduler-host:8786 -o results.csv --resume

Sweep file (paths relative to the sweep file; "required" unless a default is given)::

    name: capacity-study            # string; the default CSV is <name>.csv
    backend: cpsat                  # cpsat | milp, default cpsat
    time_limit_s: 60                # per solve, default 60
    threads: 1                      # solver threads per solve, default 1
    instances:                      # full instance YAMLs: one job each
      - ../tiny-gpt-8xA100.yaml
    models:                         # models x clusters x jobs: one job per triple. A model is an
      - ../small-gpt-16xA100.yaml   #   instance YAML (its model: section is used) or a Hugging
      - path/to/Meta-Llama-3-8B     #   Face config.json or the directory holding one
    clusters: [../clusters/dgx-a100-16nodes.yaml]   # cluster files (instances/clusters/)
    jobs: [../jobs/pretrain-4m-tokens.yaml]         # job files (instances/jobs/)
    seq_len: 4096                   # optional; replaces the cross product's models' seq_len
    runs:                           # explicit jobs, each the inputs of one `paraplan plan`
      - {instance: ../llama3-8b-64xH100.yaml, cluster: ../clusters/h200-16nodes.yaml}
      - {model: path/to/config.json, cluster: c.yaml, job: j.yaml, seq_len: 8192, name: my-run}

At least one of `instances`, the cross product (`models`, `clusters` and `jobs`, all three) or
`runs` is needed. A "job" of the sweep is one solve; the `jobs:` key lists job *files* (the
training job: global batch, precision), as `paraplan plan --job` does. Every instance is loaded,
and so checked, before anything is solved: a bad sweep exits 2 with one line naming the file
and field (cost/errors.py, `InstanceError`). Instances travel to the workers as objects, so
Dask workers need paraplan installed but not the YAML files.

Job id: the first 16 hex digits of the SHA-256 of the canonical JSON (sorted keys, no spaces)
of {"sweep_job": 1, "inputs": [[role, path, sha256], ...], "seq_len", "backend",
"time_limit_s", "threads"}, where role is instance | model | cluster | job, path is the input's
path as written in the sweep file, normalised (relative to the sweep file's directory, so
the id does not depend on the working directory), and sha256 is that of the file's bytes
(config.json's for a Hugging Face directory). Editing an input, or the solve settings, makes a
new job; a job's display `name` does not count. paraplan's own catalogue and cost model are not
hashed: after upgrading paraplan, start a new CSV rather than --resume an old one.

Results: one row per job, appended to the CSV as each job finishes and flushed at once; the
columns are `COLUMNS`: the solve's status, time (with the low and high ends of its 80%
interval, cost/trust.py, as `plan` prints it), bound and gap, then the plan's degrees (tp, pp,
dp, cp, micro_batch, zero), tokens_per_s, mfu and peak_mem_gib (the most loaded stage's memory
per GPU), then with job.train_tokens the time to train, GPU-hours and (with job.usd_per_gpu_hour)
cost, each with the low and high ends of the plan's trust interval (cost/train_cost.py),
floats at full precision, absent values empty. status is the planner's (optimal |
feasible | infeasible | timeout; `paraplan plan` explains each) or failed, with the error in
`error`. --json also appends one JSON object per job: job_id, instance, inputs, attempts,
status, error, and result (`solver.result_json.result_json`, with the whole plan; null if failed).
Both outputs must be regular files or absent; their directory is checked before anything is
solved. Without --resume an existing output file is an error, not overwritten: a sweep may hold
hours of results. With --resume the done rows are kept, failed rows are dropped, and every job
without a done row runs again; with --json, a job counts as done only when both files record it
(after a full disk one of them may have lost its last record), and both are rewritten to the
same jobs. A JSON lines file that does not exist yet is started afresh. A write that fails (a
full disk) stops the sweep with one line (exit 2); run the same command with --resume.

Failures. A job whose solve raises, or whose worker process dies (os._exit, a signal, the OOM
killer), is retried once, then recorded as failed; the other jobs are not affected. Locally each
worker is its own single-process `ProcessPoolExecutor` (a "lane"), so a dead process is charged
to exactly the job it was running and only that lane is restarted; one shared pool would break
as a whole and fail every job in flight. Lanes start with the "spawn" method: forking a parent
that runs executor threads is unsafe. On Dask, the scheduler itself re-runs a task whose worker
died, up to its `distributed.scheduler.allowed-failures` (default 3), and then raises
`KilledWorker`; that counts as the retry, so the job is recorded failed at once. The exit code
is 1 if any job failed, else 0.

Why Dask and not Ray: `dask[distributed]` is a pure-Python pip install that starts in about a
second; `LocalCluster` runs a real scheduler and worker processes on a laptop or a 2-core CI
box; and any machine with paraplan installed joins with `dask worker ADDRESS`. Ray brings a
large native wheel, a per-node raylet and object store sized for GPU clusters, and more start
time and memory than paraplan's CPU-bound, kilobyte-sized tasks need. Dask is imported only for
--dask-scheduler, so paraplan works without it (`pip install 'paraplan[cluster]'` adds it).

Test hook: when the environment variable PARAPLAN_TEST_CRASH holds a job's instance name, the
worker solving that job exits at once via os._exit(TEST_CRASH_EXIT_CODE), as a killed worker
would; tests/robustness/test_sweep.py uses it. Nothing else reads the variable.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import multiprocessing
import os
import stat
import uuid
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.fields import Section
from paraplan.cost.readers.instance import load_instance_parts
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.cost.specs import Instance
from paraplan.cost.units import bytes_to_gib
from paraplan.solver.outputs import check_output_path
from paraplan.solver.result_json import json_safe, result_json

BACKENDS = ("cpsat", "milp")
DONE_STATUSES = ("optimal", "feasible", "infeasible", "timeout")
FAILED = "failed"
COLUMNS = ("job_id", "instance", "inputs", "status", "iter_time_s", "iter_time_low_s", "iter_time_high_s",
           "bound_s", "gap",
           "solve_time_s", "backend", "tp", "pp", "dp", "cp", "micro_batch", "zero",
           "tokens_per_s", "mfu", "peak_mem_gib", "train_time_s", "train_time_low_s",
           "train_time_high_s", "gpu_hours", "gpu_hours_low", "gpu_hours_high", "cost_usd",
           "cost_low_usd", "cost_high_usd", "reason", "attempts", "error")
# the plan's own columns, from result_json's plan and breakdown (empty without a plan)
_PLAN_COLUMNS = ("tp", "pp", "dp", "cp", "micro_batch", "zero")
MAX_LINE_BYTES = 2**20  # a JSON-lines record is a few KiB; longer lines are not paraplan's
MAX_ATTEMPTS = 2  # the first try and one retry
MAX_JOBS = 100_000
TEST_CRASH_ENV = "PARAPLAN_TEST_CRASH"
TEST_CRASH_EXIT_CODE = 86

_SWEEP_KEYS = ("name", "backend", "time_limit_s", "threads", "instances", "models", "clusters",
               "jobs", "seq_len", "runs")
_RUN_KEYS = ("name", "instance", "model", "cluster", "job", "seq_len")
_CROSS_KEYS = ("models", "clusters", "jobs")
_YAML_SUFFIXES = (".yaml", ".yml")
_ID_HEX_DIGITS = 16
_ID_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepJob:
    """One solve: an instance and the settings it is solved with. Sent to a worker by pickle."""
    job_id: str
    name: str
    inputs: str  # the input paths, relative to the sweep file, joined by " + "
    instance: Instance
    backend: str
    time_limit_s: float
    threads: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    name: str
    source: str
    jobs: tuple[SweepJob, ...]


@dataclass(frozen=True, slots=True)
class _Input:
    role: str    # instance | model | cluster | job
    rel: str     # as written in the sweep file, normalised, '/'-separated
    path: Path   # where it lies
    digest: str  # SHA-256 of the bytes that are read


# --- the sweep file --------------------------------------------------------------------------

def _cross_product(top: Section, inputs) -> list[tuple[str, tuple[_Input, ...], int | None, None]]:
    """The models x clusters x jobs jobs of a sweep (none without those keys), each with the
    sweep's seq_len; `inputs(key, role)` reads one key's paths."""
    specs = []
    given = [k for k in _CROSS_KEYS if top.has(k)]
    if given and len(given) < len(_CROSS_KEYS):
        missing = next(k for k in _CROSS_KEYS if not top.has(k))
        raise top.error(missing, f"missing, but {', '.join(given)} given",
                        "models, clusters and jobs form a cross product: give all three, or"
                        " list the jobs under 'instances:' or 'runs:'")
    seq_len = top.integer("seq_len", None)
    if seq_len is not None and not given:
        raise top.error("seq_len", "applies to the models x clusters x jobs cross product,"
                                   " which is absent", "give seq_len inside each 'runs:' entry")
    if given:
        models = inputs("models", "model")
        clusters = inputs("clusters", "cluster")
        jobs = inputs("jobs", "job")
        count = len(models) * len(clusters) * len(jobs)
        if count > MAX_JOBS:
            raise top.error("models", f"the cross product has {count:,} jobs",
                            f"split it into sweeps of at most {MAX_JOBS:,} jobs")
        for (i, m), (j, c), (k, jb) in itertools.product(
                enumerate(models), enumerate(clusters), enumerate(jobs)):
            specs.append((f"models[{i}] x clusters[{j}] x jobs[{k}]", (m, c, jb), seq_len, None))
    return specs


def load_sweep(path: str | Path) -> Sweep:
    """The sweep `path` describes, every instance loaded; raises `InstanceError`."""
    source = str(path)
    top = Section(read_yaml(source), source, "", _SWEEP_KEYS)
    name = top.string("name")
    backend = top.choice("backend", BACKENDS, "cpsat")
    time_limit_s = top.number("time_limit_s", 60.0)
    threads = top.integer("threads", 1)
    base = Path(source).parent

    def inputs(key: str, role: str) -> tuple[_Input, ...]:
        return top.list_of(key, lambda v, f: _input(v, f, role, base, source), f"{role} paths")

    # (field, inputs, seq_len, display name or None)
    specs: list[tuple[str, tuple[_Input, ...], int | None, str | None]] = []
    if top.has("instances"):
        specs += [(f"instances[{i}]", (inp,), None, None)
                  for i, inp in enumerate(inputs("instances", "instance"))]
    specs += _cross_product(top, inputs)
    if top.has("runs"):
        specs += top.list_of("runs", lambda v, f: _run(v, f, base, source), "mappings")
    if not specs:
        raise InstanceError(source, "<top level>", "no jobs",
                            "list 'instances:', or 'models:', 'clusters:' and 'jobs:', or 'runs:'")

    settings = {"backend": backend, "time_limit_s": time_limit_s, "threads": threads}
    jobs_out: list[SweepJob] = []
    seen: dict[str, str] = {}
    for field, parts, seq, display in specs:
        job_id = job_id_of(parts, seq, settings)
        if job_id in seen:
            raise InstanceError(source, field, f"same inputs and settings as {seen[job_id]}",
                                "drop one of the two")
        seen[job_id] = field
        paths = {p.role: p.path for p in parts}
        model = paths.pop("model", None)
        if model is not None and model.suffix in _YAML_SUFFIXES:
            paths["instance"] = model  # its model: section; the parts replace the rest
        elif model is not None:
            paths["hf_config"] = model
        inst = load_instance_parts(paths.get("instance"), hf_config=paths.get("hf_config"),
                                   cluster=paths.get("cluster"), job=paths.get("job"),
                                   seq_len=seq)
        if display is None and field.startswith("models["):
            display = f"{inst.model.name}:{paths['cluster'].stem}:{paths['job'].stem}"
        if display is not None:
            inst = replace(inst, name=display)
        jobs_out.append(SweepJob(job_id=job_id, name=inst.name,
                                 inputs=" + ".join(p.rel for p in parts), instance=inst,
                                 **settings))
    return Sweep(name=name, source=source, jobs=tuple(jobs_out))


def _input(value, field: str, role: str, base: Path, source: str) -> _Input:
    if not isinstance(value, str) or not value.strip():
        raise InstanceError(source, field, f"expected a path, got {value!r}",
                            "write the path of the file, relative to the sweep file")
    rel = Path(os.path.normpath(value)).as_posix()
    path = base / value
    read = path
    if role == "model" and path.is_dir():
        read = path / "config.json"
    if not read.is_file():
        what = ("no config.json in the directory" if read is not path
                else "is a directory, not a file" if path.is_dir() else "file not found")
        raise InstanceError(source, field, f"{what}: {read}",
                            "paths are relative to the sweep file's directory")
    try:
        digest = hashlib.sha256(read.read_bytes()).hexdigest()
    except OSError as e:
        raise InstanceError(source, field, f"cannot read {read} ({e.strerror})",
                            "check its permissions") from None
    return _Input(role, rel, path, digest)


def _run(raw, field: str, base: Path, source: str):
    sec = Section(raw, source, field, _RUN_KEYS)
    parts = tuple(_input(sec.raw[role], sec.field(role), role, base, source)
                  for role in ("instance", "model", "cluster", "job") if sec.has(role))
    roles = {p.role: p for p in parts}
    yaml_model = "model" in roles and roles["model"].path.suffix in _YAML_SUFFIXES
    if "instance" in roles and yaml_model:
        raise sec.error("model", "is an instance YAML, and 'instance:' is given too",
                        "give one instance file; 'model:' may then be a Hugging Face config")
    if "instance" not in roles and not yaml_model:
        absent = [r for r in ("model", "cluster", "job") if r not in roles]
        if absent:
            raise InstanceError(source, field, f"no 'instance:', and {', '.join(absent)} missing",
                                "give 'instance:', or all of 'model:', 'cluster:' and 'job:'")
    return field, parts, sec.integer("seq_len", None), sec.string("name", None)


def job_id_of(parts, seq_len: int | None, settings: dict) -> str:
    """The job id described in the module docstring."""
    doc = {"sweep_job": _ID_SCHEMA_VERSION, "inputs": [[p.role, p.rel, p.digest] for p in parts],
           "seq_len": seq_len, **settings}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:_ID_HEX_DIGITS]


# --- the worker ------------------------------------------------------------------------------

def run_job(job: SweepJob) -> dict:
    """Solve one job (in a worker process): `result_json` of the plan."""
    if os.environ.get(TEST_CRASH_ENV) == job.name:
        os._exit(TEST_CRASH_EXIT_CODE)
    from paraplan.solver.solve import solve

    res = solve(job.instance, backend=job.backend, time_limit_s=job.time_limit_s,
                threads=job.threads)
    return {"result": result_json(res, job.instance)}


# Linux prctl(2): PR_SET_PDEATHSIG asks the kernel to send a signal when the parent dies.
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Worker initializer: the worker gets SIGKILL when the sweep process dies, even by
    SIGKILL (which runs no cleanup), so no orphan keeps solving; once the workers are gone, the
    multiprocessing resource tracker sees its pipe close and exits too. Linux only (prctl via
    ctypes); elsewhere a thread polls the parent's pid once a second instead."""
    import signal
    import threading
    import time

    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


# --- executors -------------------------------------------------------------------------------

class _LocalLanes:
    """`workers` single-process executors, each running one job at a time."""

    def __init__(self, workers: int):
        self._context = multiprocessing.get_context("spawn")
        self._idle = [self._lane() for _ in range(workers)]
        self._busy: dict = {}  # future -> its lane

    def _lane(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=self._context,
                                   initializer=_die_with_parent, initargs=(os.getpid(),))

    def has_room(self) -> bool:
        return bool(self._idle)

    def submit(self, job: SweepJob):
        lane = self._idle.pop()
        future = lane.submit(run_job, job)
        self._busy[future] = lane
        return future

    def finished(self) -> list:
        done, _ = wait(list(self._busy), return_when=FIRST_COMPLETED)
        for future in done:
            lane = self._busy.pop(future)
            if isinstance(future.exception(), BrokenProcessPool):
                lane.shutdown(wait=False)
                lane = self._lane()
            self._idle.append(lane)
        return list(done)

    @staticmethod
    def failure(error: BaseException) -> tuple[str, bool]:
        """(message, final): `final` means no retry is left to try."""
        if isinstance(error, BrokenProcessPool):
            return "the worker process died (killed, crashed or out of memory)", False
        return _one_line(error), False

    def close(self, interrupted: bool) -> None:
        for lane in self._idle + list(self._busy.values()):
            lane.shutdown(wait=not interrupted, cancel_futures=True)


class _DaskCluster:
    """Jobs as tasks of a running dask.distributed scheduler; all submitted at once."""

    def __init__(self, address: str):
        try:
            from distributed import Client, KilledWorker, as_completed
        except ImportError:
            raise InstanceError("<arguments>", "--dask-scheduler", "needs dask.distributed, which is not"
                                " installed", "pip install 'paraplan[cluster]'") from None
        if address.endswith(_YAML_SUFFIXES) or os.path.isfile(address):
            raise InstanceError("<arguments>", "--dask-scheduler", f"{address!r} is a file;"
                                " sweep's --dask-scheduler is a Dask scheduler address",
                                "give e.g. tcp://host:8786; list cluster files under 'clusters:'"
                                " in the sweep file")
        try:
            self._client = Client(address, set_as_default=False)
        except (OSError, TimeoutError, ValueError, TypeError) as e:
            raise InstanceError("<arguments>", "--dask-scheduler", f"cannot reach a Dask scheduler at"
                                f" {address!r} ({_one_line(e)})",
                                "start one with `dask scheduler` and workers with `dask worker"
                                " ADDRESS`, or check the address") from None
        self._killed = KilledWorker
        self._completed = as_completed(loop=self._client.loop)
        self._pending: set = set()

    def has_room(self) -> bool:
        return True

    def submit(self, job: SweepJob):
        future = self._client.submit(run_job, job, key=f"paraplan-sweep-{job.job_id}-"
                                                        f"{uuid.uuid4().hex[:8]}")
        self._completed.add(future)
        self._pending.add(future)
        return future

    def finished(self) -> list:
        future = next(self._completed)
        self._pending.discard(future)
        return [future]

    def failure(self, error: BaseException) -> tuple[str, bool]:
        if isinstance(error, self._killed):
            return ("the worker process died on every try the scheduler allowed"
                    f" ({_one_line(error)})", True)
        return _one_line(error), False

    def close(self, interrupted: bool) -> None:
        if self._pending:
            self._client.cancel(list(self._pending))
        self._client.close()


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# --- results ---------------------------------------------------------------------------------

class _Results:
    """The CSV and the optional JSON lines file, one record per finished job.

    Both outputs must be regular files (or absent): a sweep re-reads them on --resume, and a
    device such as /dev/zero would never end (or, replaced on resume, be overwritten). A write
    that fails (a full disk, a quota) is one InstanceError line; what was written before stays,
    and --resume then keeps exactly the jobs that both files record as done, so the CSV and the
    JSON lines agree again."""

    def __init__(self, csv_path: str, jsonl_path: str | None, resume: bool):
        self.done_ids: set[str] = set()
        for path in filter(None, (csv_path, jsonl_path)):
            flag = "--json" if path == jsonl_path else "-o"
            if not resume and os.path.lexists(path):
                raise InstanceError("<arguments>", flag, f"{path} already exists",
                                    "pass --resume to continue that sweep, or remove the file")
            check_output_path(path, flag, regular_only=True)
        if resume:
            csv_rows = _done_csv_rows(csv_path)
            done = set(csv_rows)
            records = None
            if jsonl_path and os.path.exists(jsonl_path):
                records = _done_jsonl_records(jsonl_path)
                done &= set(records)  # a record one file lost (a full disk) runs again
            self.done_ids = done
            if os.path.exists(csv_path):
                _guard("-o", csv_path, lambda: _replace_file(csv_path, lambda fh: _write_rows(
                    fh, [r for i, r in csv_rows.items() if i in done]), newline=""))
            if records is not None:
                _guard("--json", jsonl_path, lambda: _replace_file(jsonl_path, lambda fh: fh.writelines(
                    line for i, line in records.items() if i in done)))
        self._csv_path, self._jsonl_path = csv_path, jsonl_path
        self._csv_file = self._jsonl = None

    def open(self) -> None:
        """Open the files for appending; the CSV gets its header if it is new."""
        csv_path, jsonl_path = self._csv_path, self._jsonl_path

        def opened():
            new_csv = not os.path.exists(csv_path) or os.path.getsize(csv_path) == 0
            self._csv_file = open(csv_path, "a", newline="", encoding="utf-8")
            self._csv = csv.writer(self._csv_file)
            if new_csv:
                self._csv.writerow(COLUMNS)
                self._csv_file.flush()
        _guard("-o", csv_path, opened)
        if jsonl_path:
            self._jsonl = _guard("--json", jsonl_path,
                                 lambda: open(jsonl_path, "a", encoding="utf-8"))

    def write(self, job: SweepJob, attempts: int, outcome: dict | None, error: str) -> dict:
        result = outcome["result"] if outcome else None
        row = {c: None for c in COLUMNS}
        row.update({"job_id": job.job_id, "instance": job.name, "inputs": job.inputs,
                    "status": result["status"] if result else FAILED, "backend": job.backend,
                    "attempts": attempts, "error": error})
        if result:
            row.update({k: result[k] for k in ("iter_time_s", "bound_s", "gap", "solve_time_s",
                                               "reason")})
            if result.get("plan"):
                row.update({k: result["plan"].get(k) for k in _PLAN_COLUMNS})
            band = (result.get("trust") or {}).get("interval_s")
            if band:  # the predicted time's 80% interval, as `plan` prints it (cost/trust.py)
                row.update({"iter_time_low_s": band[0], "iter_time_high_s": band[1]})
            bd = result.get("breakdown")
            if bd:
                row.update({"tokens_per_s": bd["tokens_per_s"], "mfu": bd["mfu"],
                            "peak_mem_gib": bytes_to_gib(max(s["mem_bytes"]
                                                             for s in bd["stages"]))})
            row.update(_train_cost_columns(result.get("train_cost")))
        line = ["" if row[c] is None else row[c] for c in COLUMNS]
        _guard("-o", self._csv_path, lambda: self._csv.writerow(line), self._csv_file.flush)
        if self._jsonl:
            record = {"job_id": job.job_id, "instance": job.name, "inputs": job.inputs,
                      "attempts": attempts, "status": row["status"], "error": error or None,
                      "result": result}
            text = json.dumps(json_safe(record), allow_nan=False) + "\n"
            _guard("--json", self._jsonl_path, lambda: self._jsonl.write(text), self._jsonl.flush)
        return row

    def close(self) -> None:
        """Close both files; after a failed write the buffered rest is dropped quietly (the
        error has been reported, and --resume recovers)."""
        for fh in (self._csv_file, self._jsonl):
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass


def _train_cost_columns(tc: dict | None) -> dict:
    """The CSV's time, GPU-hours and cost to train, each with the low and high ends of the
    plan's trust interval, from result_json's train_cost (empty without job.train_tokens, the
    cost empty without job.usd_per_gpu_hour)."""
    if tc is None:
        return {}
    out = {}
    for value, ends, names in ((tc["time_s"], tc["time_interval_s"], ("train_time_s", "train_time_low_s",
                                                                      "train_time_high_s")),
                               (tc["gpu_hours"], tc["gpu_hours_interval"], ("gpu_hours", "gpu_hours_low",
                                                                            "gpu_hours_high")),
                               (tc["cost_usd"], tc["cost_interval_usd"], ("cost_usd", "cost_low_usd",
                                                                          "cost_high_usd"))):
        out.update(zip(names, (value, *(ends or (None, None)))))
    return out


def _guard(flag: str, path: str, *actions):
    """Each action() in turn, the last one's value returned, an OSError (full disk, no
    permission) as one InstanceError line."""
    try:
        for action in actions:
            value = action()
        return value
    except OSError as e:
        raise InstanceError("<arguments>", flag, f"cannot write {path}"
                            f" ({e.strerror or type(e).__name__})", "free some space or fix the"
                            " permissions, then run the same command with --resume: done jobs"
                            " are kept") from None


def read_csv(path: str) -> list[dict]:
    """The rows of a sweep CSV as dicts of strings; raises `InstanceError` if it is not one."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InstanceError(path, "<file>", "is not a regular file",
                                    "give the CSV file the sweep wrote")
            lines = list(csv.reader(fh))  # csv's field size limit bounds each line
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InstanceError(path, "<file>", f"cannot be read as CSV ({_one_line(e)})",
                            "resume with the CSV the sweep wrote, or give another -o") from None
    if not lines:
        return []
    if tuple(lines[0]) != COLUMNS:
        raise InstanceError(path, "header", "is not this paraplan version's sweep CSV",
                            "resume with the CSV the sweep wrote, or give another -o")
    # a row cut short by a kill mid-write has too few fields: that job runs again
    return [dict(zip(COLUMNS, r)) for r in lines[1:] if len(r) == len(COLUMNS)]


def _done_csv_rows(path: str) -> dict[str, dict]:
    """The CSV's done rows (the last one per job), by job id; {} when there is no CSV."""
    if not os.path.exists(path):
        return {}
    return {r["job_id"]: r for r in read_csv(path) if r["status"] in DONE_STATUSES}


def _write_rows(fh, rows) -> None:
    writer = csv.writer(fh)
    writer.writerow(COLUMNS)
    writer.writerows([r[c] for c in COLUMNS] for r in rows)


def _capped_lines(fh):
    """The lines of a text file, each read with a cap: a line longer than MAX_LINE_BYTES is
    skipped in chunks, so a file without newlines costs no more memory than the cap."""
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES:
            yield line
            continue
        while line and not line.endswith("\n"):
            line = fh.readline(MAX_LINE_BYTES)


def _done_jsonl_records(path: str) -> dict[str, str]:
    """The JSON lines file's done records (the last one per job), as lines, by job id."""
    kept: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in _capped_lines(fh):
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, RecursionError, ValueError):
                    continue  # a line cut short by a kill or a full disk
                if isinstance(record, dict) and isinstance(record.get("job_id"), str) \
                        and record.get("status") in DONE_STATUSES:
                    kept[record["job_id"]] = line if line.endswith("\n") else line + "\n"
    except OSError as e:
        raise InstanceError(path, "<file>", f"cannot be read ({e.strerror})",
                            "resume with the JSON lines file the sweep wrote") from None
    return kept


def _replace_file(path: str, write, newline: str | None = None) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", newline=newline, encoding="utf-8") as fh:
            write(fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# --- driving ---------------------------------------------------------------------------------

@dataclass
class SweepOutcome:
    total: int
    skipped: int
    statuses: Counter
    failed: list[dict]


def run_sweep(sweep: Sweep, *, csv_path: str, jsonl_path: str | None = None,
              workers: int | None = None, cluster: str | None = None, resume: bool = False,
              progress=None) -> SweepOutcome:
    """Run the sweep's jobs not already done, writing each result as it comes."""
    results = _Results(csv_path, jsonl_path, resume)
    todo = deque(j for j in sweep.jobs if j.job_id not in results.done_ids)
    outcome = SweepOutcome(total=len(sweep.jobs), skipped=len(sweep.jobs) - len(todo),
                           statuses=Counter(), failed=[])
    if not todo:
        return outcome
    if cluster is not None:
        executor = _DaskCluster(cluster)
    else:  # by default one solver thread per CPU
        threads = max(j.threads for j in todo)
        executor = _LocalLanes(min(workers or max(1, (os.cpu_count() or 1) // threads), len(todo)))
    attempts: Counter = Counter()
    running: dict = {}  # future -> job
    interrupted = True
    try:
        results.open()
        while todo or running:
            while todo and executor.has_room():
                job = todo.popleft()
                attempts[job.job_id] += 1
                running[executor.submit(job)] = job
            if progress:
                progress(outcome, len(running))
            for future in executor.finished():
                job = running.pop(future)
                error = future.exception()
                if error is None:
                    row = results.write(job, attempts[job.job_id], future.result(), "")
                else:
                    message, final = executor.failure(error)
                    if not final and attempts[job.job_id] < MAX_ATTEMPTS:
                        todo.append(job)
                        continue
                    row = results.write(job, attempts[job.job_id], None, message)
                    outcome.failed.append(row)
                outcome.statuses[row["status"]] += 1
        if progress:
            progress(outcome, 0)
        interrupted = False
    finally:
        executor.close(interrupted)
        results.close()
    return outcome
