"""PrimePar's evaluation setting (ASPLOS 2024, Sec. 6) reproduced with paraplan's cost model.

For OPT-175B, Llama2-70B and BLOOM-176B on 4-32 V100-SXM2-32GB (4 per node, NVLink inside,
100 Gbit/s InfiniBand per node; instances/primepar/), paraplan plans each case twice over the
same declared space (data x tensor parallel, no pipeline, as the paper's Megatron baseline),
once with Megatron 1-D tensor parallelism only (no sequence parallelism, the paper's
baseline) and once with per-operator partitions (search.tensor_partitions: [megatron,
spatial_temporal]) whose residual stream may also be split (sequence_parallel: [false, true]:
replicated, Megatron's sequence split, or PrimePar's partitioned norms, the block layouts),
both proved optimal, and reports the predicted speedup and peak-memory ratio next to the
paper's Fig. 7/8 numbers, plus Megatron with sequence parallelism allowed, so that the
sequence split's own share of the gain can be read off. Then the
32-GPU 3D-parallel case (pipeline allowed, Fig. 10), the DP-vs-MILP cross-check of the
per-layer partition problem on every case, and the joint solve time of Llama-3 70B on 512 H100s.

Nothing here is fitted to the paper: V100 efficiencies are the catalogue's unfitted defaults.

    python bench/primepar.py [--quick] [-o bench/results/primepar.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paraplan.cost import partition as P  # noqa: E402
from paraplan.cost.coefficients import homogeneous_placement  # noqa: E402
from paraplan.cost.comm import NetEfficiency  # noqa: E402
from paraplan.cost.readers.instance import load_instance  # noqa: E402
from paraplan.cost.simulate import simulate  # noqa: E402
from paraplan.cost.specs import Cluster  # noqa: E402
from paraplan.formulations.partition import solve_partition_milp  # noqa: E402
from paraplan.formulations.partition_dp import min_time, pareto_front  # noqa: E402
from paraplan.solver import partition_plans  # noqa: E402
from paraplan.solver.plan_text import describe_partitions  # noqa: E402
from paraplan.solver.solve import solve  # noqa: E402

MODELS = ("opt-175b", "llama2-70b", "bloom-176b")
GPUS = (4, 8, 16, 32)
# PrimePar Fig. 7 (throughput / Megatron) and Fig. 8 (peak memory / Megatron, %)
PAPER_SPEEDUP = {"opt-175b": (1.11, 1.35, 1.38, 1.39), "llama2-70b": (1.15, 1.21, 1.24, 1.26),
                 "bloom-176b": (1.11, 1.43, 1.68, 1.60)}
PAPER_MEM_PCT = {"opt-175b": (92, 80, 80, 79), "llama2-70b": (91, 88, 91, 89),
                 "bloom-176b": (92, 78, 69, 68)}
PAPER_3D = {"opt-175b": 1.46, "llama2-70b": 1.27, "bloom-176b": 1.40}  # Fig. 10, 32 GPUs
MEGATRON_ONLY = ("megatron",)
SPLIT_STREAM = (False, True)  # the spatial-temporal space may split the residual stream
DISCUSSION = """## Why the predictions differ from the paper (no parameter was tuned to close the gap)

- **What crosses the nodes.** PrimePar's largest wins come from plans that stop sending weight
  gradients between nodes (its Fig. 9: Megatron's inter-node weight-gradient all-reduces take
  364 + 377 ms, fully exposed). paraplan's Megatron baseline overlaps the data-parallel
  gradient reduction with the backward pass (Megatron-LM's overlapped gradient reduce), so
  that cost is mostly hidden already and the best Megatron plan is a better baseline.
- **Ring collectives across nodes.** cost/comm.py runs a tensor-parallel ring that spans nodes
  over all NICs of a node (one channel per GPU). A `K/N@nodes, P2x2@node` composite reduces
  1/4-size blocks, but as four independent rings, one per NIC: its inter-node time falls
  by ((t-1)/t) / ((J-1)/J) for t GPUs and J nodes: 1.25x (t = 16, J = 4) to 1.75x
  (t = 8, J = 2), not 4x. A P grid that itself spans nodes
  (P4x4 on 4-GPU nodes) shifts whole blocks over one NIC per step; no case above picks it.
- **Partitioned residual stream, and what it brings.** The spatial-temporal column may keep
  the residual stream (norms, dropouts, residual adds) split between layers: Megatron's
  sequence split or PrimePar's block layout `B{q}x{q}` (token rows x hidden columns, the P
  grid's output block, so P outputs land on it without the all-gather a replicated stream
  needs; LayerNorm all-reduces 2 fp32 statistics per token over the q GPUs sharing the rows,
  forward and backward). Most chosen plans use `B2x2`. Part of the gain over the paper's
  Megatron baseline (no sequence parallelism) is the split stream itself, which Megatron gets
  from sequence parallelism too: the Megatron+SP column isolates it. Over Megatron+SP the
  predicted speedups are 1.00-1.22x (3D: 1.00-1.12x); over the paper's baseline they are
  1.02-1.45x. Before the stream was a choice (stream replicated, sp off) the speedups were
  OPT-175B 1.17/1.09/1.17x, Llama2-70B 1.00/1.13/1.09x, BLOOM-176B 1.12/1.08/1.05x at
  8/16/32 GPUs and 1.00/1.00/1.11x in 3D. Still missing against the paper's setting: the
  final norm's statistics and the embedding output are priced as with Megatron's split stream
  (cost/coefficients.build), P on the attention batched matmuls, and a choice of stream per
  sub-block (PrimePar may lay the two residual branches out differently).
- **Token splits.** Every linear operator may also split by tokens (`T`: the whole weight on
  every GPU of the group, no activation traffic, one fp32 weight-gradient all-reduce over the
  group per iteration). No case here picks it: one OPT-175B MLP matrix (12288 x 49152 =
  604 M parameters) replicated with its gradient and Adam state is 10.9 GB per layer per GPU,
  and its gradient all-reduce moves 2.4 GB over the group per iteration. It pays off for
  narrow models with long sequences (tests/partition: a 512-wide model, 4k tokens, tp = 8
  across nodes splits its MLP, or with sequence parallelism every linear op, by tokens).
- **Precision and kernel overheads.** The paper's kernel times point to FP32 GEMMs (about
  15 TFLOP/s per V100); paraplan uses the fp16 tensor-core peak (125 TFLOP/s) with the
  catalogue's unfitted V100 efficiencies, so compute per step is several times shorter and the
  neighbour shifts of W blocks are harder to hide; each of P's q GEMM calls per phase also pays
  the per-call overhead of the efficiency model.
- **Memory.** Both optimisers fill the GPUs, so the ratio of the two optimal plans' peaks
  mixes plan choices (60-109% here, with the split stream); the same-outer column (the
  spatial-temporal plan against Megatron's partitions at the same tp, dp, micro-batch and
  sequence-parallel flag, i.e. against Megatron+SP when the stream is split) is the
  like-for-like one: 101-111%. With the stream split, Megatron already stores every
  activation as a 1/tp shard (Korthikanti et al.: its column-parallel inputs as
  sequence-parallel shards, re-gathered in backward), while a P(q x q) operator stashes a
  1/q^2 block of its input and adds double buffers (one W block of each moving operator); so
  P costs memory against Megatron+SP, and the split stream's saving (the norm inputs and
  dropout masks, 6 x tokens x h bytes, shrink to 1/tp) is shared by both.
- **Layer counts and batch.** Not stated in the paper; the truncated models and batch 16 here
  are our choice (instances/primepar/).
"""
NET = NetEfficiency()


def _case(model: str, gpus: int, layers: int, **search):
    base = load_instance(ROOT / "instances" / "primepar" / f"primepar-{model}-32xV100.yaml")
    inst = dataclasses.replace(
        base, name=f"{model}-{gpus}xV100",
        cluster=Cluster.of(dataclasses.replace(base.cluster.one_group, nodes=gpus // base.cluster.gpus_per_node)),
        model=dataclasses.replace(base.model, layers=layers))
    return dataclasses.replace(inst, search=dataclasses.replace(inst.search, **search))


def _pair(inst):
    """(Megatron, spatial-temporal, Megatron with sequence parallelism allowed, solve times)."""
    meg_inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, tensor_partitions=MEGATRON_ONLY))
    st_inst = dataclasses.replace(inst, search=dataclasses.replace(inst.search, sequence_parallel=SPLIT_STREAM))
    t0 = time.perf_counter()
    meg = solve(meg_inst)
    t1 = time.perf_counter()
    st = solve(st_inst)
    t2 = time.perf_counter()
    meg_sp = solve(dataclasses.replace(meg_inst, search=dataclasses.replace(
        meg_inst.search, sequence_parallel=SPLIT_STREAM)))
    return meg, st, meg_sp, t1 - t0, t2 - t1, st_inst


def _plan_text(res, inst) -> str:
    if res.plan is None:
        return res.status
    p = res.plan
    s = f"tp={p.tp} dp={p.dp} pp={p.pp} mb={p.micro_batch}" + (" sp" if p.sequence_parallel else "")
    if any(p.full_recompute_layers):
        s += f" rc={list(p.full_recompute_layers)}"
    lines = describe_partitions(p, inst)
    return s + ("; " + "; ".join(lines) if lines else "; Megatron 1-D")


def _same_outer_mem_ratio(inst, st) -> float | None:
    """Peak memory of the spatial-temporal plan over the same outer plan with Megatron's
    partitions (like-for-like: same tp, dp, micro-batch), when that Megatron plan fits."""
    if st.plan is None or not st.plan.partitions:
        return None
    meg_plan = dataclasses.replace(st.plan, partitions=())
    bd = simulate(inst, meg_plan)
    return st.breakdown.peak_mem_bytes / bd.peak_mem_bytes


def _cross_check(inst, res) -> tuple[int, int]:
    """DP vs MILP on the per-layer problem of the chosen plan's outer configuration: at every
    point of the DP's Pareto front, the MILP under the same caps must find the same time."""
    if res.plan is None or not P.spatial_temporal_allowed(res.plan.outer):
        return 0, 0
    o = res.plan.outer
    site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
    pb = partition_plans.problem_from_table(P.table_for(inst, o, site, NET))
    agree = total = 0
    for t, a, w, r, g, _ in pareto_front(pb):
        m = solve_partition_milp(pb, act_cap_bytes=a, ws_cap_bytes=w, params_cap=r, sync_cap_s=g)
        d = min_time(pb, act_cap_bytes=a, ws_cap_bytes=w, params_cap=r, sync_cap_s=g)
        total += 1
        agree += int(m.status == d.status == "optimal" and math.isclose(m.time_s, d.time_s, rel_tol=1e-9))
    return agree, total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 and 16 GPUs only, no 512-GPU solve")
    ap.add_argument("-o", "--output", default=str(ROOT / "bench" / "results" / "primepar.md"))
    args = ap.parse_args(argv)
    gpus_list = (8, 16) if args.quick else GPUS
    out = ["# PrimePar setting: spatial-temporal vs Megatron 1-D, predicted by paraplan", "",
           "Generated by `python bench/primepar.py`. Both columns are proved optimal over the same",
           "declared space (instances/primepar/: data x tensor parallel, no pipeline, no ZeRO,",
           "no context parallelism; the tensor-parallel group may span nodes), except that the",
           "spatial-temporal one also chooses a partition per operator and may split the residual",
           "stream (Megatron's sequence split, `sp`, or PrimePar's partitioned norms, `stream:",
           "B2x2`); the Megatron+SP column is Megatron with that sequence split allowed, to",
           "separate its share of the gain. Models are truncated to gpus/4",
           "layers (the full models' Adam state cannot fit 4-32 V100-32GB; the paper does not",
           "state its layer counts). Global batch 16 sequences.", "",
           "| model | GPUs | Megatron s/iter | Megatron+SP s/iter | spatial-temporal s/iter | speedup | over Megatron+SP | paper | peak mem ratio | same-outer mem ratio | paper mem | solve s (meg / st) | best spatial-temporal plan |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    checks = [0, 0]
    speedups = {}
    for model in MODELS:
        for k, gpus in enumerate(GPUS):
            if gpus not in gpus_list:
                continue
            inst = _case(model, gpus, layers=max(1, gpus // 4))
            meg, st, meg_sp, t_meg, t_st, st_inst = _pair(inst)
            for res in (meg, st):
                a, n = _cross_check(st_inst, res)
                checks[0] += a
                checks[1] += n
            if meg.iter_time_s and st.iter_time_s:
                sp = meg.iter_time_s / st.iter_time_s
                speedups.setdefault(gpus, []).append(sp)
                mem = st.breakdown.peak_mem_bytes / meg.breakdown.peak_mem_bytes
                same = _same_outer_mem_ratio(st_inst, st)
                row = [model, gpus, f"{meg.iter_time_s:.3f}", f"{meg_sp.iter_time_s:.3f}",
                       f"{st.iter_time_s:.3f}", f"{sp:.2f}x", f"{meg_sp.iter_time_s / st.iter_time_s:.2f}x",
                       f"{PAPER_SPEEDUP[model][k]:.2f}x", f"{100 * mem:.0f}%",
                       "-" if same is None else f"{100 * same:.0f}%", f"{PAPER_MEM_PCT[model][k]}%",
                       f"{t_meg:.1f} / {t_st:.1f}", _plan_text(st, inst)]
            else:
                row = [model, gpus, meg.status, meg_sp.status, st.status, "-", "-",
                       f"{PAPER_SPEEDUP[model][k]:.2f}x",
                       "-", "-", f"{PAPER_MEM_PCT[model][k]}%", f"{t_meg:.1f} / {t_st:.1f}", "-"]
            out.append("| " + " | ".join(str(x) for x in row) + " |")
            print(out[-1], flush=True)
    def geo(vals):
        return math.exp(sum(math.log(v) for v in vals) / len(vals))
    out.append("")
    for gpus, vals in sorted(speedups.items()):
        k = GPUS.index(gpus)
        paper = geo([PAPER_SPEEDUP[m][k] for m in MODELS])
        out.append(f"- geometric-mean speedup at {gpus} GPUs: predicted {geo(vals):.2f}x over"
                   f" {len(vals)} models; paper {paper:.2f}x over the same three"
                   + (" (1.30x over its six models)" if gpus == 32 else ""))

    if not args.quick:
        out += ["", "## 3D parallelism, 32 GPUs (paper Fig. 10)", "",
                "Pipeline allowed (pp in 1, 2, 4, 8), 16-layer truncated models, global batch 16;",
                "otherwise the same spaces as above.", "",
                "| model | Megatron s/iter | plan | Megatron+SP s/iter | spatial-temporal s/iter | plan | speedup | over Megatron+SP | paper |",
                "|---|---|---|---|---|---|---|---|---|"]
        for model in MODELS:
            inst = _case(model, 32, layers=16, pp=(1, 2, 4, 8))
            meg, st, meg_sp, _, _, st_inst = _pair(inst)
            sp = meg.iter_time_s / st.iter_time_s if meg.iter_time_s and st.iter_time_s else float("nan")
            sp_sp = meg_sp.iter_time_s / st.iter_time_s if meg_sp.iter_time_s and st.iter_time_s else float("nan")
            for res in (meg, st):
                a, n = _cross_check(st_inst, res)
                checks[0] += a
                checks[1] += n
            out.append(f"| {model} | {meg.iter_time_s or float('nan'):.3f} | {_plan_text(meg, inst)} |"
                       f" {meg_sp.iter_time_s or float('nan'):.3f} |"
                       f" {st.iter_time_s or float('nan'):.3f} | {_plan_text(st, inst)} | {sp:.2f}x |"
                       f" {sp_sp:.2f}x | {PAPER_3D[model]:.2f}x |")
            print(out[-1], flush=True)

    out += ["", f"DP vs MILP on the per-layer partition problem of every chosen outer configuration:"
            f" {checks[0]} of {checks[1]} Pareto-front points agree."]

    if not args.quick:
        inst = load_instance(ROOT / "instances" / "llama3-70b-512xH100.yaml")
        inst = dataclasses.replace(inst, search=dataclasses.replace(
            inst.search, tensor_partitions=("megatron", "spatial_temporal")))
        t0 = time.perf_counter()
        res = solve(inst)
        wall = time.perf_counter() - t0
        out += ["", "## Joint solve time, Llama-3 70B on 512 H100 (instances/llama3-70b-512xH100.yaml"
                " + tensor_partitions)", "",
                f"status {res.status}, {wall:.1f} s wall (single-threaded inner solves),"
                f" {res.outer_configs:,} (outer, layer plan) pairs: {res.pruned_by_dominance:,} dominated,"
                f" {res.pruned_by_memory:,} infeasible by memory, {res.pruned_by_bound:,} pruned by bound,"
                f" {res.solved:,} solved; iteration {res.iter_time_s:.4f} s; plan {_plan_text(res, inst)}"]
        print(out[-1], flush=True)
    out += ["", DISCUSSION]
    Path(args.output).write_text("\n".join(out) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
