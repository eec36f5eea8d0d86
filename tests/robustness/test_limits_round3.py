"""Issue 35, "Memory and time", as properties of the whole command, each run in a fresh
process (its time and peak RSS are the command's, imports included; its time is its own, the
waits for a core on a loaded machine left out: _own_s):

- under a small --time-limit-s, `plan` on the largest bundled instances, on a million-layer
  model and on a global batch of 2^24 returns within the limit plus the command's own start
  (imports, loading, printing: PROCESS_SLACK_S), and never claims "optimal" unless it proved it;
- the million-layer probes (1,000,000 layers on 1,024 A100s, pp pinned to 1,024 and to 512)
  stay within a few hundred MiB (they took 3.8 GiB to more than 23 GB before);
- exhaustive search streams: its peak memory does not grow with the plans it enumerates, and
  on deep class shapes it lists splits in blocks (the same answer), so it stops at its limit
  and says it was cut short;
- CP-SAT and the MILP keep to what is left of the command's limit (million-layer probes);
- verify and sweep under 10 ms on the largest bundled instances end near the limit, and
  verify of a proved-infeasible instance says the methods agree it is infeasible.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "instances" / "tiny-gpt-8xA100.yaml"
# the command's own start and finish around the search: Python, numpy, OR-Tools and the
# published tables imported, the instance loaded, the plan re-simulated and printed (measured
# 1.5-2.5 s on this 2-core machine with other runs beside it)
PROCESS_SLACK_S = 4.0
# the million-layer probes measured 110 MiB peak RSS after the fix (3,872 MiB to > 23 GB before);
# a fresh interpreter with paraplan imported is ~120 MiB
PROBE_RSS_LIMIT_MIB = 600


# a child's timeout_s is the hang guard of an idle machine; a loaded one stretches wall time by
# the jobs per core (seven other jobs on two cores took a 5 s probe past 60 s of wall)
LOAD_ROOM = 10


def _run(code: str, timeout_s: float) -> dict:
    """Run `code` in a fresh interpreter under a 4 GB address-space cap; it prints one JSON line."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4_000_000_000, 4_000_000_000))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s * LOAD_ROOM,
                          cwd=ROOT, preexec_fn=cap, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _own_s(got: dict) -> float:
    """The command's own time: its wall time less its waits for a core. Every command here runs
    on one thread (threads=1, CP-SAT num_workers 1) and waits only on its children (CBC, a
    sweep's worker), whose CPU counts once they end; so on an idle machine its wall time is its
    CPU time (cpu_s), and on a loaded one the wall time adds the waits, which are the machine's:
    seven other jobs on two cores made the start alone take 10 s of wall."""
    return got["cpu_s"]


def _search_own_s(got: dict) -> float:
    """The search's own time: its solve_time_s (a wall time) less the
    command's waits for a core (wall_s - cpu_s, an upper bound of the search's own waits; 0 on
    an idle machine)."""
    return got["solve_s"] - max(0.0, got["wall_s"] - got["cpu_s"])


def _plan_code(path: str, argv: list[str]) -> str:
    """The CLI's `plan --json` in-process, timed from before its imports, with its CPU time and
    peak RSS. The peak is the process's own (VmHWM of /proc/self/status): Linux carries a forked
    child's ru_maxrss over from its parent's size at the fork (the pre-exec copy of its memory),
    so under xdist ru_maxrss reported the test worker's size, 724 MiB in one CI run against
    this command's own 47 MiB."""
    return f"""
import contextlib, io, json, resource, time
def peak_mib():
    try:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
from paraplan.solver.commands.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    code = main(["plan", {path!r}, "--json", "--quiet", *{argv!r}])
wall = time.perf_counter() - t0
got = json.loads(out.getvalue()) if code in (0, 3) else {{}}
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{"code": code, "wall_s": wall, "status": got.get("status"), "solve_s": got.get("solve_time_s"),
                  "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
                  "rss_mib": peak_mib()}}))
"""


def _with_lines(tmp_path: Path, name: str, replace: dict[str, str]) -> str:
    text = TINY.read_text(encoding="utf-8")
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _million_layers(tmp_path: Path) -> str:
    # a narrow GPT (hidden 256) so that a million layers fit on 1,024 A100s at pp 512 and 1,024
    return _with_lines(tmp_path, "deep.yaml", {"layers: 8\n": "layers: 1000000\n", "nodes: 1\n": "nodes: 128\n",
                                               "hidden: 1024\n": "hidden: 256\n", "heads: 16\n": "heads: 4\n",
                                               "ffn: 4096\n": "ffn: 1024\n"})


@pytest.mark.slow
@pytest.mark.parametrize("pp", [1024, 512])
def test_million_layer_probes_keep_time_and_memory(tmp_path, pp):
    limit_s = 5.0
    got = _run(_plan_code(_million_layers(tmp_path), ["--search", f"pp={pp}", "--time-limit-s", str(limit_s)]),
               timeout_s=60)
    assert got["code"] == 0
    assert _own_s(got) <= limit_s + PROCESS_SLACK_S, got
    assert got["rss_mib"] <= PROBE_RSS_LIMIT_MIB, got
    # its split (a million layers) is beyond the exact DP: bounded, not proved
    assert got["status"] == "feasible", got


LARGEST = ["instances/deepseek-v3-shaped-2048xH800.yaml", "instances/llama3-405b-16384xH100.yaml",
           "instances/qwen3-235b-a22b-256xH100.yaml", "instances/deepseek-v3-shaped-1152xGB200.yaml"]
SMALL_LIMITS = [(path, 0.01) for path in LARGEST]
# the search's own time past a limit (solve_time_s): the bound before pricing runs at least
# search.FLOOR_AT_LEAST_S (0.25 s), pricing goes on at most FIRST_PLAN_ALLOWANCE_S
# (0.5 s) past the limit for a first plan, plus listing and counting the outers and a chunk's
# pricing. Listing is what grew: Qwen3-235B's space is 167,326 outers since the embedding and
# loss slots widened it (42,314 before), which a MoE search lists whole (solver/search.py
# _lists_partials) in 1.0-1.4 s alone on this machine, as at 4fbec60; its whole solve at 0.01 s
# measured 1.1-1.6 s alone and 1.9 s beside the suite's other worker. 0.25 + 0.5 + 1.4, with a
# loaded core's ~15%: 2.5 s (it was 1.5 s, set when listing took ~0.3 s)
SEARCH_SLACK_S = 2.5


@pytest.mark.slow
@pytest.mark.parametrize("path,limit_s", SMALL_LIMITS, ids=lambda x: str(x).split("/")[-1])
def test_a_small_limit_bounds_the_largest_bundled_instances(path, limit_s):
    got = _run(_plan_code(str(ROOT / path), ["--time-limit-s", str(limit_s)]), timeout_s=60)
    assert got["code"] in (0, 3), got  # 3: no plan within the allowance (status timeout)
    assert _search_own_s(got) <= limit_s + SEARCH_SLACK_S, got
    assert _own_s(got) <= limit_s + PROCESS_SLACK_S, got
    assert got["status"] in ("feasible", "timeout"), got  # 10 ms proves none of them


@pytest.mark.slow
def test_a_huge_batch_is_answered_within_its_limit(tmp_path):
    # global_batch 2^24, the edge of the batch range: deciding which micro-batch counts split
    # between replicas took minutes (one shift per count) before any limit was read
    path = _with_lines(tmp_path, "batch.yaml", {"global_batch: 32\n": "global_batch: 16777216\n"})
    for limit_s in (0.01, 2.0):
        got = _run(_plan_code(path, ["--time-limit-s", str(limit_s)]), timeout_s=60)
        assert got["code"] == 0 and _own_s(got) <= limit_s + PROCESS_SLACK_S, got


@pytest.mark.slow
def test_exhaustive_search_streams():
    # tiny-2types with per-operator partitions and every micro-batch size: millions of plans.
    # Peak RSS after a 2 s and an 8 s run (each from the start, the second enumerating more
    # plans: at 4 s and 16 s, 1.64M and 3.28M measured on a loaded machine) stays within 40 MiB:
    # the search keeps one best per (outer, layer plans) and micro-batch vector until folded, not
    # every plan (it grew ~13 MB/s before: over the 6 s more, ~78 MB, twice the bound; the runs
    # were 4 s and 16 s, 12 s of CPU more than needed to see it, issue 32)
    code = """
import dataclasses, json, resource
from paraplan.cost.readers.instance import load_instance
from paraplan.solver.exhaustive import exhaustive
inst = load_instance("instances/mixed/tiny-2types.yaml")
inst = dataclasses.replace(inst, search=dataclasses.replace(
    inst.search, tensor_partitions=("megatron", "spatial_temporal"), micro_batch=None))
out = {}
for limit_s in (2.0, 8.0):
    r = exhaustive(inst, max_candidates=10**15, time_limit_s=limit_s)
    out[str(limit_s)] = [r.candidates, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, r.complete]
print(json.dumps(out))
"""
    got = _run(code, timeout_s=60)
    (n2, rss2, _), (n8, rss8, done8) = got["2.0"], got["8.0"]
    assert n8 > 1.5 * n2 or done8, got
    assert rss8 - rss2 <= 40, got


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_the_solver_backends_keep_to_the_limit(tmp_path, backend):
    # CP-SAT's wall clock stopped it at 4 x limit + 5 s, and its exact memory points listed
    # pp x L arrays (7.6 GiB: killed); a CBC 'infeasible' was re-checked for 1 s past the limit.
    # Measured after: cpsat 1.7 s (bounded, as the DP), milp 6.5 s whole command
    limit_s = 5.0
    got = _run(_plan_code(_million_layers(tmp_path), ["--search", "pp=1024", "--time-limit-s", str(limit_s),
                                                      "--backend", backend]), timeout_s=90)
    assert got["code"] == 0 and got["status"] == "feasible", got
    assert _search_own_s(got) <= limit_s + 1.0, got
    assert _own_s(got) <= limit_s + PROCESS_SLACK_S, got
    assert got["rss_mib"] <= PROBE_RSS_LIMIT_MIB, got


def _command(argv: list[str], timeout_s: float) -> tuple[int, str, float]:
    """A whole `paraplan` command in a fresh process: (exit status, stdout, its own seconds:
    _own_s)."""
    code = f"""
import contextlib, io, json, resource, time
t0 = time.perf_counter()
from paraplan.solver.commands.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
    code = main({argv!r})
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{"code": code, "out": out.getvalue(), "wall_s": time.perf_counter() - t0,
                  "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime}}))
"""
    got = _run(code, timeout_s)
    return got["code"], got["out"], _own_s(got)


HUGE = str(10**130)  # --max-candidates past every bundled space


@pytest.mark.slow
@pytest.mark.parametrize("path", ["instances/deepseek-v3-shaped-2048xH800.yaml",
                                  "instances/mixed/llama3-70b-3types-2sites.yaml"], ids=lambda x: x.split("/")[-1])
def test_exhaustive_stops_at_its_limit_and_says_so(path):
    # a deep class shape (61 layers on 16 stages: ~5e13 splits) was listed whole before the
    # clock was read: > 120 s under a 2 s limit; measured 2.5 s after
    limit_s = 2.0
    code, out, own_s = _command(["exhaustive", str(ROOT / path), "--time-limit-s", str(limit_s),
                                "--max-candidates", HUGE, "--quiet"], timeout_s=60)
    assert code == 3 and "STOPPED by the time limit" in out and "nothing is proved" in out, out
    assert own_s <= limit_s + PROCESS_SLACK_S, own_s


@pytest.mark.slow
@pytest.mark.parametrize("path", [LARGEST[0], LARGEST[2], "instances/mixed/llama3-70b-3types-2sites.yaml"],
                         ids=lambda x: x.split("/")[-1])
def test_verify_under_a_small_limit_ends_near_it(path):
    # every method shares the limit; measured 0.9-1.1 s whole command at 0.01 s
    limit_s = 0.01
    code, out, own_s = _command(["verify", str(ROOT / path), "--time-limit-s", str(limit_s), "--quiet"], timeout_s=60)
    assert code == 1 and "NOT VERIFIED" in out, out  # nothing proved in 10 ms
    assert own_s <= limit_s + PROCESS_SLACK_S, own_s


@pytest.mark.slow
def test_a_sweep_under_a_small_limit_ends_near_it(tmp_path):
    # four jobs, the largest bundled instances, 10 ms each, one worker: measured 2.1 s whole
    limit_s = 0.01
    sweep = tmp_path / "big.yaml"
    sweep.write_text("name: big\nbackend: cpsat\ntime_limit_s: 0.01\ninstances:\n"
                     + "".join(f"  - {ROOT / p}\n" for p in LARGEST), encoding="utf-8")
    code, _, own_s = _command(["sweep", str(sweep), "-o", str(tmp_path / "big.csv"), "--workers", "1",
                              "--quiet"], timeout_s=120)
    rows = (tmp_path / "big.csv").read_text(encoding="utf-8").splitlines()
    assert code == 0 and len(rows) == 1 + len(LARGEST)
    assert all(",optimal," not in r for r in rows[1:]), rows
    assert own_s <= len(LARGEST) * (limit_s + SEARCH_SLACK_S) + PROCESS_SLACK_S, own_s


def test_verify_of_a_proved_infeasible_instance_says_infeasible(capsys):
    # 79.9 GiB of 80 reserved: no plan fits (tests/cli/test_exports_round2.py); it said
    # "found the same optimum"
    from paraplan.solver.commands.cli import main
    assert main(["verify", str(TINY), "--quiet", "--search", "memory_reserve_gib=79.9"]) == 4
    out = capsys.readouterr().out
    assert "AGREE: dp, cpsat, milp, exhaustive agree the instance is infeasible" in out, out
    assert "optimum" not in out.splitlines()[-1]


@pytest.mark.parametrize("name", ["tiny-gpt-8xA100.yaml", "mixed/tiny-2types.yaml"])
def test_exhaustive_in_streamed_blocks_gives_the_same_answer(monkeypatch, name):
    # every class shape past ROW_BLOCK rows is listed block by block (_composition_blocks,
    # _rows_until): with blocks of a few rows the same plans are counted and the same first
    # optimum is found as in one block
    import dataclasses
    from paraplan.cost.readers.instance import load_instance
    from paraplan.solver import exhaustive
    path = ROOT / "instances" / name
    inst = load_instance(path)  # a flat file as its one group
    inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, micro_batch=(1, 2)))
    whole = exhaustive.exhaustive(inst, max_candidates=10**12)
    monkeypatch.setattr(exhaustive, "ROW_BLOCK", 7)
    monkeypatch.setattr(exhaustive, "STREAM_SPLITS", 3)
    streamed = exhaustive.exhaustive(inst, max_candidates=10**12)
    assert whole.complete and streamed.complete
    assert (streamed.candidates, streamed.feasible) == (whole.candidates, whole.feasible)
    assert (streamed.plan, streamed.objective_s) == (whole.plan, whole.objective_s)


@pytest.mark.slow
def test_top_plans_stopped_by_the_limit_do_not_claim_infeasible():
    # plan --top priced every configuration before its first solve (solver/top_k.py: 17,019 on
    # DeepSeek-V3, ~7 s), so 10 ms ended with none solved: it printed "no plan fits memory" and
    # exited 0; now it says what stopped it and exits 3, and it prices in chunks of 64 between
    # looks at the clock, so the whole command ends near the limit (measured 0.66 s)
    limit_s = 0.01
    code, out, own_s = _command(["plan", str(ROOT / LARGEST[0]), "--top", "3", "--time-limit-s", str(limit_s),
                                "--quiet"], timeout_s=120)
    assert "NOT proved (time limit)" in out and "fits memory" not in out, out
    assert code == (3 if "no plan found before the time limit" in out else 0), out
    assert own_s <= limit_s + PROCESS_SLACK_S, own_s


@pytest.mark.slow
def test_report_keeps_to_a_small_limit():
    # report built the frontier's table of every configuration (17,030 on DeepSeek-V3, 9.2 s at
    # --time-limit-s 0.01) after the plan; the table now stops at the same limit (3.5 s whole,
    # most of it drawing the figures)
    limit_s = 0.01
    code, out, own_s = _command(["report", str(ROOT / LARGEST[0]), "--time-limit-s", str(limit_s),
                                "-o", "/dev/null", "--quiet"], timeout_s=120)
    assert code in (0, 3), out
    assert own_s <= limit_s + PROCESS_SLACK_S + 2.0, own_s  # + the three figures (~1.5 s measured)
