"""`paraplan bench`: CP-SAT, MILP and exhaustive search on a ladder of growing instances, timed
in one run, with the ratio exhaustive / solver. Rungs whose exhaustive search is estimated to
exceed --max-exhaustive-s are solved by the solvers only (the estimate is printed).

The ladder scales a GPT-style model and an A100 cluster together; the bundled production
instances (GPT-3 175B on 1,024 A100, Llama-3 70B on 512 H100, Llama-3.1 405B on 16,384 H100)
and the bundled mixture-of-experts instances (Mixtral 8x7B on 64 H100, Qwen3-235B on 256 H100,
DeepSeek-V3 on 2,048 H800 and on 1,152 GB200; the MoE issue asks the 2,048-GPU one proved in
at most 10 s on 2 cores) close the run as solver-only rungs, since their spaces hold 10^20+
plans.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from paraplan.cost import units
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.specs import Cluster, NodeGroup, Instance, JobSpec, Link, ModelSpec, Mlp, SearchSpace
from paraplan.solver.exhaustive import ESTIMATED_RATE_PER_S, exhaustive
from paraplan.solver.format import count, table
from paraplan.solver.solve import solve
from paraplan.solver.space import one_group_summary

INSTANCES = Path(__file__).resolve().parents[2] / "instances"
# (GPUs, layers) of the ladder; hidden 2048, 16 heads, seq 2048, 8-GPU A100-80GB nodes
LADDER = [(8, 8), (16, 8), (16, 12), (32, 12), (32, 16), (64, 16), (64, 17), (64, 24), (128, 32)]
QUICK_LADDER = LADDER[:3]
BUNDLED = ["gpt3-175b-1024xA100", "llama3-70b-512xH100", "llama3-405b-16384xH100",
           "mixtral-8x7b-64xH100", "qwen3-235b-a22b-256xH100", "deepseek-v3-shaped-2048xH800",
           "deepseek-v3-shaped-1152xGB200"]
# the MoE instances planned again under DualPipe (job.pipeline_schedule: dualpipe; their
# overlap options off: DualPipe overlaps the all-to-alls itself), named "<instance>-dualpipe"
DUALPIPE_BUNDLED = ["qwen3-235b-a22b-256xH100", "deepseek-v3-shaped-2048xH800", "deepseek-v3-shaped-1152xGB200"]


def dualpipe_instance(name: str) -> Instance:
    """Bundled instance `name` with job.pipeline_schedule: dualpipe."""
    from dataclasses import replace

    from paraplan.cost.specs import PipelineSchedule
    inst = load_instance(INSTANCES / f"{name}.yaml")
    job = replace(inst.job, pipeline_schedule=PipelineSchedule.DUALPIPE, moe_a2a_overlap=False,
                  moe_shared_expert_overlap=False)
    return replace(inst, name=f"{name}-dualpipe", job=job)


@dataclass
class Rung:
    name: str
    gpus: int
    layers: int
    outer_configs: int
    candidates: int
    cpsat_s: float
    cpsat_status: str
    milp_s: float | None
    milp_status: str
    exhaustive_s: float | None
    optimum_s: float | None
    agree: bool | None

    @property
    def ratio(self) -> float | None:
        return None if self.exhaustive_s is None else self.exhaustive_s / self.cpsat_s


def ladder_instance(gpus: int, layers: int) -> Instance:
    from paraplan.cost.readers.gpus import load_catalogue
    gpu = load_catalogue()["A100-SXM4-80GB"]
    model = ModelSpec(name=f"gpt-{layers}L-2048h", layers=layers, hidden=2048, heads=16, kv_heads=16,
                      ffn=8192, vocab=51200, seq_len=2048, mlp=Mlp.GELU)
    group = NodeGroup(
        gpu=gpu, nodes=max(1, gpus // 8), gpus_per_node=min(8, gpus),
        intra_node=Link(bw_bytes_per_s=units.gbytes_per_s_to_bytes_per_s(600) / 2, latency_s=units.us_to_s(5)),
        inter_node=Link(bw_bytes_per_s=units.gbit_per_s_to_bytes_per_s(200), latency_s=units.us_to_s(10)))
    # a space small enough to enumerate: the structure of the full one, fewer batch choices
    space = SearchSpace(micro_batch=(1, 2), cp=(1,), virtual_stages=(1, 2), zero=(0, 1, 3))
    return Instance(name=f"ladder-{gpus}gpu-{layers}L", model=model, cluster=Cluster.of(group),
                    job=JobSpec(global_batch=4 * gpus), search=space)


def _run(inst: Instance, max_exhaustive_s: float, log) -> Rung:
    space = one_group_summary(inst)  # the space `plan` searches (solver/solve.py)
    total = space.plans_total
    t = time.perf_counter()
    rc = solve(inst, backend="cpsat", time_limit_s=600)
    cpsat_s = time.perf_counter() - t
    milp_s, milp_status, rm = None, "skipped", None
    if total < 1e30:  # the big production rungs: CP-SAT only, to keep the run short
        t = time.perf_counter()
        rm = solve(inst, backend="milp", time_limit_s=600)
        milp_s, milp_status = time.perf_counter() - t, rm.status
    ex_s = agree = None
    if total <= max_exhaustive_s * ESTIMATED_RATE_PER_S:
        log(f"{inst.name}: exhaustive over {total:,} candidates")
        ex = exhaustive(inst, max_candidates=int(total) + 1, progress=sys.stderr.isatty())
        ex_s = ex.wall_time_s
        vals = [rc.iter_time_s, ex.iter_time_s] + ([rm.iter_time_s] if rm else [])
        ref = ex.iter_time_s
        agree = all((v is None) == (ref is None) and (v is None or abs(v - ref) <= 1e-6 * ref) for v in vals)
    return Rung(name=inst.name, gpus=inst.cluster.num_gpus, layers=inst.model.layers,
                outer_configs=space.outer_configs, candidates=int(total), cpsat_s=cpsat_s,
                cpsat_status=rc.status, milp_s=milp_s, milp_status=milp_status,
                exhaustive_s=ex_s, optimum_s=rc.iter_time_s, agree=agree)


# Scale rungs (issue "Trustworthy under load"): each runs `paraplan plan` in a child process so
# its peak resident memory can be read from the OS (RUSAGE_CHILDREN), under a time limit.
SCALE = {
    "scale-100k-gpus": ("{layers: 126, hidden: 16384, heads: 128, kv_heads: 8, ffn: 53248,"
                        " vocab: 128256, seq_len: 8192, mlp: swiglu}", 12500, 16000),
    "scale-1000-layers": ("{layers: 1000, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672,"
                          " vocab: 128256, seq_len: 4096, mlp: swiglu}", 128, 1024),
}
SCALE_TIME_LIMIT_S = 60.0


def run_scale(log) -> list[list[str]]:
    import resource
    import subprocess
    import tempfile

    rows = []
    for name, (model, nodes, batch) in SCALE.items():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(f"name: {name}\nmodel: {model}\ncluster: {{gpu: H100-SXM5-80GB, nodes: {nodes},"
                            f" gpus_per_node: 8, intra_node_gbytes_per_s: 900, nic_gbit_per_s: 400}}\n"
                            f"job: {{global_batch: {batch}}}\n")
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "paraplan.solver.commands.cli", "plan", str(path), "--json",
                                  "--time-limit-s", str(SCALE_TIME_LIMIT_S)],
                                 capture_output=True, text=True)
            wall = time.perf_counter() - t
            peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if out.returncode not in (0, 3):
            rows.append([name, "error", "-", f"{wall:.1f}", "-", out.stderr.strip()[-120:]])
            continue
        res = json.loads(out.stdout)
        gap = "-" if res["gap"] is None else f"{100 * res['gap']:.2f}%"
        # ru_maxrss of children is the largest child so far; report it only if this one raised it
        rss = f"{peak_kib / 1024:.0f} MiB" if peak_kib > before else f"<= {peak_kib / 1024:.0f} MiB"
        rows.append([name, res["status"], gap, f"{wall:.1f}", rss, f"{res['space']['outer_configs']:,} outer"])
        log(f"  {name}: {res['status']} in {wall:.1f} s, peak RSS {rss}")
    return rows


def ratio_text(ratio: float) -> str:
    """exhaustive / CP-SAT time: whole numbers when the solver wins by 10x or more, else three
    significant digits, so that an exhaustive search faster than the solver shows as 0.42x,
    never 0x."""
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.3g}x"


def run_bench(args) -> int:
    log = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    rungs: list[Rung] = []
    # the scale cases first: a child's peak RSS counts the pages it shares with this process
    # when forked, and exhaustive search on the large rungs leaves this process gigabytes large
    # (a 100,000-GPU plan of 117 MiB read as 14 GiB when measured after the ladder)
    scale = None if args.quick else run_scale(log)
    for gpus, layers in (QUICK_LADDER if args.quick else LADDER):
        rungs.append(_run(ladder_instance(gpus, layers), args.max_exhaustive_s, log))
        log(f"  {rungs[-1].name}: cpsat {rungs[-1].cpsat_s:.2f} s, exhaustive {rungs[-1].exhaustive_s}")
    if not args.quick:
        for name in BUNDLED:
            rungs.append(_run(load_instance(INSTANCES / f"{name}.yaml"), 0.0, log))
        for name in DUALPIPE_BUNDLED:
            rungs.append(_run(dualpipe_instance(name), 0.0, log))
    rows = [[r.name, str(r.gpus), str(r.layers), f"{r.outer_configs:,}", count(r.candidates),
             f"{r.cpsat_s:.2f} ({r.cpsat_status})",
             "-" if r.milp_s is None else f"{r.milp_s:.2f} ({r.milp_status})",
             "-" if r.exhaustive_s is None else f"{r.exhaustive_s:.2f}",
             "-" if r.ratio is None else ratio_text(r.ratio),
             "-" if r.agree is None else ("yes" if r.agree else "NO")] for r in rungs]
    print(table(["instance", "GPUs", "layers", "outer", "plans", "CP-SAT s", "MILP s",
                 "exhaustive s", "exh/CP-SAT", "same optimum"], rows))
    if not args.quick:
        print()
        print(table(["scale case", "status", "gap", "wall s", "peak RSS", "space"], scale))
    records = [dict(asdict(r), ratio=r.ratio) for r in rungs]
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(records[0]))
            w.writeheader()
            w.writerows(records)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"status": "agree" if all(r.agree is not False for r in rungs) else "disagree",
                       "rungs": records}, fh, indent=2)
    return 0 if all(r.agree is not False for r in rungs) else 1
