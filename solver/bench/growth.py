"""`paraplan bench --hetero`'s growth rows: how the mixed-cluster planner's work grows with the
number of GPU types (issue 33). Llama-3 70B (instances/hetero/llama3-70b-32xA100-32xH100.yaml's
model, job and narrowed space: micro-batch 1 or 2, cp 1, no interleaving) on 1 to 4 groups of
4 DGX-class nodes, one GPU type each, added in the order H100, A100-80GB, H200, A100-40GB
(node links as the bundled files give them: NVLink 900 GB/s and a 400 Gbit/s NIC per GPU on
Hopper, 600 GB/s and 200 Gbit/s on Ampere, one site). Each row is one search, its CPU time
(time.process_time: the machine is shared, so wall time says less) and what it did with
the outer configurations: priced (built), proved infeasible by memory, pruned by bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from paraplan.cost.loader import instance_from_mapping
from paraplan.cost.loader import read_yaml
from paraplan.solver.search import search

BASE = Path(__file__).resolve().parents[2] / "instances" / "hetero" / "llama3-70b-32xA100-32xH100.yaml"
# (group name, GPU type, NVLink GB/s per GPU, NIC Gbit/s per GPU): NVIDIA DGX H100 / H200 and
# DGX A100 user guides, as instances/hetero/*.yaml cite them
GPU_TYPES = (("h100", "H100-SXM5-80GB", 900, 400), ("a100-80g", "A100-SXM4-80GB", 600, 200),
             ("h200", "H200-SXM-141GB", 900, 400), ("a100-40g", "A100-SXM4-40GB", 600, 200))
NODES_PER_GROUP = 4


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


def growth_instance(types: int, nodes: int = NODES_PER_GROUP):
    """The base file's model, job and space on the first `types` GPU types of GPU_TYPES."""
    data = read_yaml(BASE)
    data["name"] = f"llama3-70b-{types}types-{nodes}nodes"
    data["cluster"] = {"groups": [
        {"name": name, "site": "dc", "gpu": gpu, "nodes": nodes, "gpus_per_node": 8,
         "intra_node_link": "nvlink", "intra_node_gbytes_per_s": nvlink, "nic_gbit_per_s": nic}
        for name, gpu, nvlink, nic in GPU_TYPES[:types]]}
    return instance_from_mapping(data, f"<{data['name']}>")


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
