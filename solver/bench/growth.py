"""`paraplan bench --mixed`'s growth rows: how the mixed-cluster planner's work grows with the
number of GPU types (issue 33). Llama-3 70B (instances/mixed/llama3-70b-32xA100-32xH100.yaml's
model, job and narrowed space: micro-batch 1 or 2, cp 1, no interleaving) on 1 to 4 groups of
4 DGX-class nodes, one GPU type each, added in the order H100, A100-80GB, H200, A100-40GB
(node links as the bundled files give them: NVLink 900 GB/s and a 400 Gbit/s NIC per GPU on
Hopper, 600 GB/s and 200 Gbit/s on Ampere, one site). Each row is one search, its CPU time
(time.process_time: the machine is shared, so wall time says less) and what it did with
the outer configurations: priced (built), proved infeasible by memory, pruned by bound.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.strict_yaml import read_yaml
from paraplan.solver.partition_plans import SPATIAL_TEMPORAL
from paraplan.solver.search import search

BASE = Path(__file__).resolve().parents[2] / "instances" / "mixed" / "llama3-70b-32xA100-32xH100.yaml"
# (group name, GPU type, NVLink GB/s per GPU, NIC Gbit/s per GPU): NVIDIA DGX H100 / H200 and
# DGX A100 user guides, as instances/mixed/*.yaml cite them
GPU_TYPES = (("h100", "H100-SXM5-80GB", 900, 400), ("a100-80g", "A100-SXM4-80GB", 600, 200),
             ("h200", "H200-SXM-141GB", 900, 400), ("a100-40g", "A100-SXM4-40GB", 600, 200))
NODES_PER_GROUP = 4
# issue 33's larger rows: the 4 types above on 16 nodes each with cp and interleaving open, and
# the catalogue's 8 NVIDIA types of 8-GPU nodes (cost/gpus.yaml, in its order) on 8 nodes each.
# (intra-node link, GB/s per GPU; NIC Gbit/s per GPU): NVIDIA DGX-1 V100 (NVLink 300 GB/s, four
# 100 Gbit/s InfiniBand ports for 8 GPUs), DGX A100 / H100 / H200 as above (the 96 GB H100 in
# the H100's node), DGX B200 (NVLink 1.8 TB/s, eight 400 Gbit/s ConnectX-7); the L40S, which
# has no NVLink, on PCIe Gen4 x16 (64 GB/s both directions) with 100 Gbit/s per GPU (an
# assumed server: the catalogue names no L40S node)
EIGHT_TYPES = (("v100", "V100-SXM-32GB", "nvlink", 300, 50), ("a100-40g", "A100-SXM4-40GB", "nvlink", 600, 200),
               ("a100-80g", "A100-SXM4-80GB", "nvlink", 600, 200), ("h100", "H100-SXM5-80GB", "nvlink", 900, 400),
               ("h100-96g", "H100-SXM5-96GB", "nvlink", 900, 400), ("h200", "H200-SXM-141GB", "nvlink", 900, 400),
               ("l40s", "L40S", "pcie", 64, 100), ("b200", "B200-SXM-180GB", "nvlink", 1800, 400))


@dataclass
class GrowthRow:
    types: int
    gpus: int
    status: str
    objective_s: float | None
    outer_configs: int
    priced: int
    pruned_by_memory: int
    pruned_by_bound: int
    cpu_s: float
    # the process's peak resident memory after the row (ru_maxrss: a high-water mark of the
    # whole bench process so far, so an upper bound of the row's own)
    peak_rss_gib: float | None = None


def growth_instance(types: int, nodes: int = NODES_PER_GROUP, gpu_types=None, full: bool = False):
    """The base file's model, job and space on the first `types` GPU types of GPU_TYPES (or of
    `gpu_types`: (name, GPU, link, GB/s, Gbit/s) each), `nodes` each; `full`: cp and
    interleaving over every value the planner admits (mixed.full_space)."""
    data = read_yaml(BASE)
    data["name"] = f"llama3-70b-{types}types-{nodes}nodes"
    kinds = gpu_types if gpu_types is not None else [(n, g, "nvlink", nv, nic) for n, g, nv, nic in GPU_TYPES]
    data["cluster"] = {"groups": [
        {"name": name, "site": "dc", "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
         "intra_node_link": link, "intra_node_gbytes_per_s": gbytes, "nic_gbit_per_s": nic}
        for name, gpu, link, gbytes, nic in kinds[:types]]}
    if full:
        data["search"] = {k: v for k, v in data["search"].items() if k not in ("cp", "virtual_stages")}
    return instance_from_mapping(data, f"<{data['name']}>")


def bundled_full(name: str, partitions: bool, options: bool):
    """instances/mixed/NAME.yaml with cp and interleaving open (mixed.full_space), with
    per-operator (spatial-temporal) partitions beside Megatron's and with the three layout
    options (classes_per_group 2, idle_gpus, mixed_families) where asked."""
    inst = load_instance(BASE.parent / f"{name}.yaml")
    extra = {"cp": None, "virtual_stages": None}
    if partitions:
        extra["tensor_partitions"] = ("megatron", SPATIAL_TEMPORAL)
    if options:
        extra.update(classes_per_group=2, idle_gpus=True, mixed_families=True)
    return replace(inst, search=replace(inst.search, **extra))


# issue 33's rows (row name, instance): each is one search, proved within 10 s of CPU on its bar
ISSUE_ROWS = (("4 types x 16 nodes, full space", lambda: growth_instance(4, 16, full=True)),
              ("8 NVIDIA types x 8 nodes", lambda: growth_instance(8, 8, EIGHT_TYPES)),
              ("32 A100 + 32 H100, full space, the three layout options",
               lambda: bundled_full("llama3-70b-32xA100-32xH100", False, True)),
              ("32 A100 + 32 H100, full space, partitions, the three layout options",
               lambda: bundled_full("llama3-70b-32xA100-32xH100", True, True)),
              ("three types on two sites, full space, partitions",
               lambda: bundled_full("llama3-70b-3types-2sites", True, False)))


def issue_rows(time_limit_s: float = 120.0, log=print, rows=ISSUE_ROWS) -> list[tuple[str, GrowthRow]]:
    """`rows` (ISSUE_ROWS), each searched once (CPU seconds as growth_rows)."""
    out = []
    for name, make in rows:
        inst = make()
        t0 = time.process_time()
        try:
            res = search(inst, time_limit_s=time_limit_s)
        except InstanceError as e:  # a space the planner refuses to list (class_layouts.MAX_LAYOUTS)
            res = SimpleNamespace(status="refused", objective_s=None, outer_configs=0, priced=0,
                                  pruned_by_memory=0, pruned_by_bound=0)
            log(f"{name}: refused ({e})")
        cpu_s = time.process_time() - t0
        out.append((name, GrowthRow(types=len(inst.cluster.groups), gpus=inst.cluster.num_gpus, status=res.status,
                                    objective_s=res.objective_s, outer_configs=res.outer_configs,
                                    priced=res.priced, pruned_by_memory=res.pruned_by_memory,
                                    pruned_by_bound=res.pruned_by_bound, cpu_s=cpu_s,
                                    peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
        log(f"{name}: {res.outer_configs} outer configs counted, {res.priced} priced,"
            f" {res.status} {res.objective_s} s in {cpu_s:.2f} s of CPU")
    return out


def growth_rows(max_types: int = len(GPU_TYPES), time_limit_s: float = 300.0, log=print) -> list[GrowthRow]:
    rows = []
    for types in range(1, max_types + 1):
        inst = growth_instance(types)
        t0 = time.process_time()
        res = search(inst, time_limit_s=time_limit_s)
        cpu_s = time.process_time() - t0
        rows.append(GrowthRow(types=types, gpus=inst.cluster.num_gpus, status=res.status,
                              objective_s=res.objective_s, outer_configs=res.outer_configs,
                              priced=res.priced, pruned_by_memory=res.pruned_by_memory,
                              pruned_by_bound=res.pruned_by_bound, cpu_s=cpu_s))
        log(f"growth: {types} GPU types, {res.outer_configs} outer configs, {res.priced} priced,"
            f" {res.status} {res.objective_s} s in {cpu_s:.2f} s of CPU")
    return rows
