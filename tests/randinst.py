"""Seeded random small planning instances shared by the cross-check tests.

Small models on 1-2 nodes of a GPU whose memory is small enough that memory binds (capacity is
drawn around the model-state size), so recompute counts, non-uniform splits and infeasibility
all occur. `variant` also varies the declared space (uniform split only, no full recompute).
"""

from __future__ import annotations

import random

from dataclasses import replace
from functools import partial

from paraplan.cost.specs import Cluster, NodeGroup, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec, SearchSpace

# The agreement tests check that the formulations, exhaustive search and the simulator agree
# exactly on each configuration's time: they plan the predicted time (`mean`). The quantile
# objective only scales each configuration's times by a factor (cost/trust.objective_factor);
# tests/solver/test_objective.py checks the planner and exhaustive search agree under it.
# Their toy GPUs hold 0.7 to 2.75 GiB: no planning reserve unless a generator draws one
# (search.memory_reserve_gib's 2 GiB default would leave nothing).
Space = partial(SearchSpace, objective="mean", memory_reserve_bytes=0.0)


def toy_model(name: str, layers: int) -> ModelSpec:
    """The mixed-cluster tests' toy transformer: 8 heads of 64, a 4x GELU MLP, an 8,000-word
    vocabulary and 512-token sequences, `layers` deep."""
    heads = 8
    hidden = heads * 64
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                     ffn=4 * hidden, vocab=8000, seq_len=512, mlp=Mlp.GELU)


def drawn_between(rng: random.Random, groups: list) -> tuple:
    """The links between `groups` (a Cluster's `between`): each group's own inter-node link on
    the diagonal, and a link of 5 or 25 GB/s drawn from `rng` for each pair."""
    G = len(groups)
    pair = {(a, b): Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
            for a in range(G) for b in range(a + 1, G)}
    return tuple(tuple(groups[a].inter_node if a == b else pair[min(a, b), max(a, b)]
                       for b in range(G)) for a in range(G))


def random_instance(seed: int, variant: bool = False) -> Instance:
    """Small models on 1-2 nodes of a GPU whose memory is small enough that memory binds:
    capacity is drawn around the model-state size, so recompute and splits matter."""
    rng = random.Random(seed)
    heads = rng.choice([4, 8])
    hidden = heads * rng.choice([32, 64])
    layers = rng.randint(2, 8)
    seq = rng.choice([128, 256, 512])
    model = ModelSpec(name=f"rand{seed}", layers=layers, hidden=hidden, heads=heads,
                      kv_heads=rng.choice([heads, heads // 2]), ffn=4 * hidden,
                      vocab=rng.choice([1000, 8000]), seq_len=seq,
                      mlp=rng.choice([Mlp.GELU, Mlp.SWIGLU]), tied_embeddings=rng.random() < 0.3)
    gpu = GpuSpec(name="toy", peak_flops_per_s=rng.choice([50e12, 300e12]),
                  hbm_bytes=rng.choice([0.72, 0.95, 1.25, 2.75]) * 2**30,
                  hbm_bw_bytes_per_s=1e12)
    gpn = rng.choice([2, 4])
    nodes = rng.choice([1, 2])
    cluster = NodeGroup(gpu=gpu, nodes=nodes, gpus_per_node=gpn,
                        intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                        inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5))
    gb = gpn * nodes * rng.choice([1, 2, 4])
    space = Space(micro_batch=(1, 2), virtual_stages=(1, 2), cp=(1, 2),
                        memory_reserve_bytes=0.0)
    if variant:
        space = Space(micro_batch=(1, 2), virtual_stages=(1,), cp=(1,),
                            uniform_split=rng.random() < 0.3, full_recompute=rng.random() < 0.7,
                            zero=tuple(sorted(rng.sample([0, 1, 2, 3], 2))),
                            memory_reserve_bytes=rng.choice([0.0, 2**26]))
    return Instance(name=f"rand{seed}", model=model, cluster=Cluster.of(cluster),
                    job=JobSpec(global_batch=gb), search=space)




def random_cluster_instance(seed: int):
    """Two node groups of different toy GPUs (speed, memory, links drawn per group), a group
    link, and a degraded-network scenario with a probability: small enough for exhaustive search
    of the heterogeneous space (solver/exhaustive.py)."""
    from paraplan.cost.specs import Cluster, NodeGroup, Scenario

    rng = random.Random(10_000 + seed)
    base = random_instance(seed)
    model = ModelSpec(name=f"hrand{seed}", layers=rng.randint(2, 4), hidden=base.model.hidden,
                      heads=base.model.heads, kv_heads=base.model.kv_heads, ffn=base.model.ffn,
                      vocab=base.model.vocab, seq_len=base.model.seq_len, mlp=base.model.mlp,
                      tied_embeddings=base.model.tied_embeddings)
    groups = []
    for g in range(2):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.77, 0.79, 0.83, 1.25]) * 2**30,
                      hbm_bw_bytes_per_s=rng.choice([0.5e12, 1e12]))
        gpn = rng.choice([1, 2])
        groups.append(NodeGroup(name=f"g{g}", site=f"s{g}",
                                gpu=gpu, nodes=rng.choice([1, 2]), gpus_per_node=gpn,
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5)))
    link = Link(bw_bytes_per_s=rng.choice([1e9, 5e9, 12.5e9]), latency_s=rng.choice([1e-5, 1e-3]))
    slow = Link(bw_bytes_per_s=link.bw_bytes_per_s * rng.choice([0.05, 0.25]), latency_s=2 * link.latency_s)

    def cluster(between: Link) -> Cluster:
        return Cluster(groups=tuple(groups), between=(
            (groups[0].inter_node, between), (between, groups[1].inter_node)))

    p = rng.choice([0.1, 0.3, 0.5])
    nominal = cluster(link)
    gpus = sum(g.num_gpus for g in groups)
    space = Space(micro_batch=(1, 2), full_recompute=rng.random() < 0.8,
                        zero=(0, 1), memory_reserve_bytes=rng.choice([0.0, 2**26]))
    return Instance(
        name=f"hrand{seed}", model=model, cluster=nominal,
        job=JobSpec(global_batch=rng.choice([2, 4]) * gpus), search=space,
        scenarios=(Scenario(name="nominal", cluster=nominal, probability=1 - p),
                   Scenario(name="degraded", cluster=cluster(slow), probability=p)))
def group_tp_instance(seed: int):
    """Two single-node groups of different toy GPUs (speed, memory, NVLink drawn per group) and
    a model wide enough for tensor parallelism to pay on one group and not on the other: the
    instances where a tp per group (ClassOuter.group_tp) can win. Small enough for exhaustive
    search."""
    from paraplan.cost.specs import Cluster, NodeGroup

    rng = random.Random(seed)
    heads = 8
    hidden = heads * rng.choice([64, 128])
    model = ModelSpec(name=f"gtp{seed}", layers=rng.choice([3, 4]), hidden=hidden, heads=heads,
                      kv_heads=heads, ffn=4 * hidden, vocab=8000, seq_len=rng.choice([512, 1024]),
                      mlp=Mlp.GELU)
    groups = []
    for g in range(2):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.5, 0.7, 1.0, 2.0, 4.0]) * 2**30,
                      hbm_bw_bytes_per_s=rng.choice([0.5e12, 2e12]))
        groups.append(NodeGroup(name=f"g{g}", site="s", gpu=gpu, nodes=1, gpus_per_node=rng.choice([2, 4]),
                                intra_node=Link(bw_bytes_per_s=rng.choice([50e9, 300e9]), latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5)))
    link = Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
    hc = Cluster(groups=tuple(groups), between=((groups[0].inter_node, link),
                                                       (link, groups[1].inter_node)))
    gpus = sum(g.num_gpus for g in groups)
    return Instance(name=f"gtp{seed}", model=model, cluster=hc,
                          job=JobSpec(global_batch=rng.choice([2, 4, 8]) * gpus),
                          search=Space(micro_batch=(1, 2), zero=(0, 1), virtual_stages=(1,), cp=(1,)))


def partition_mixed_instance(seed: int):
    """Two single-node groups of catalogue GPUs (4 + 2 GPUs, GPU types and NVLink drawn), a model
    and batch where per-operator partitions can win (1,024 wide, 1-2k tokens, micro-batch 2), tp
    2 or 4 per group and partitions in the space: only the 4-GPU group can run tp 4, the least
    a spatial-temporal plan needs, so exhaustive search tries every layer plan of one group
    (768 at tp 4 without sequence parallelism) and stays quick."""
    from paraplan.cost.specs import Cluster, NodeGroup
    from paraplan.cost.readers.gpus import load_catalogue

    rng = random.Random(7000 + seed)
    catalogue = load_catalogue()
    model = ModelSpec(name=f"pm{seed}", layers=rng.choice([2, 3, 4]), hidden=1024, heads=16, kv_heads=16,
                      ffn=4096, vocab=32000, seq_len=rng.choice([1024, 2048]), mlp=Mlp.GELU)
    groups = []
    for g, gpn in enumerate((4, 2)):
        gpu = catalogue[rng.choice(["A100-SXM4-80GB", "H100-SXM5-80GB", "V100-SXM-32GB", "A100-SXM4-40GB"])]
        groups.append(NodeGroup(name=f"g{g}", site="s", gpu=gpu, nodes=1, gpus_per_node=gpn,
                                intra_node=Link(bw_bytes_per_s=rng.choice([50e9, 150e9, 300e9]), latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=25e9, latency_s=1e-5)))
    link = Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
    hc = Cluster(groups=tuple(groups), between=((groups[0].inter_node, link),
                                                       (link, groups[1].inter_node)))
    return Instance(name=f"pm{seed}", model=model, cluster=hc, job=JobSpec(global_batch=rng.choice([12, 24])),
                          search=Space(micro_batch=(2,), zero=(0, 1), virtual_stages=(1,), cp=(1,), tp=(2, 4),
                                             sequence_parallel=(False,),
                                             tensor_partitions=("megatron", "spatial_temporal")))


def mixed_family_instance(seed: int):
    """Two groups of 1 to 6 toy GPUs (1 or 2 per node; speed, memory and links drawn), one tp,
    and a global batch that their counts do not all divide: the instances where a pipeline
    across both groups beside replica classes on the GPUs it leaves (search.mixed_families)
    can win. Small enough for exhaustive search."""
    from paraplan.cost.specs import Cluster, NodeGroup

    rng = random.Random(seed)
    model = toy_model(f"mix{seed}", rng.choice([4, 6, 8]))
    groups = []
    for g in range(2):
        gpu = GpuSpec(name=f"toy{g}", peak_flops_per_s=rng.choice([50e12, 150e12, 300e12]),
                      hbm_bytes=rng.choice([0.7, 0.8, 1.0, 1.5, 3.0]) * 2**30, hbm_bw_bytes_per_s=1e12)
        groups.append(NodeGroup(name=f"g{g}", site="s",
                                gpu=gpu, nodes=rng.choice([1, 2, 3]), gpus_per_node=rng.choice([1, 2]),
                                intra_node=Link(bw_bytes_per_s=100e9, latency_s=5e-6),
                                inter_node=Link(bw_bytes_per_s=rng.choice([3e9, 25e9]), latency_s=1e-5)))
    link = Link(bw_bytes_per_s=rng.choice([5e9, 25e9]), latency_s=1e-5)
    hc = Cluster(groups=tuple(groups), between=((groups[0].inter_node, link),
                                                       (link, groups[1].inter_node)))
    return Instance(name=f"mix{seed}", model=model, cluster=hc,
                          job=JobSpec(global_batch=rng.choice([6, 8, 12, 16, 24])),
                          search=Space(micro_batch=(1, 2), zero=(0, 1), virtual_stages=(1,),
                                             cp=(1,), tp=(1,), mixed_families=True))


def slot_instance(seed: int) -> Instance:
    """random_instance's model and cluster with 5-11 layers, pipelines forced (pp 2, or 2 and 4
    on 4 GPUs or more) and two of v = 1-4 chunks per stage, Megatron-core's current release:
    where v does not divide the layers, the only interleaved splits count the embedding and/or
    the loss as a layer slot (cost/pipeline_split.py R4), and where no listed v divides them,
    every plan does."""
    rng = random.Random(seed)
    inst = random_instance(seed)
    layers = rng.randint(5, 11)
    gpus = inst.cluster.num_gpus
    space = Space(virtual_stages=tuple(sorted(rng.sample([1, 2, 3, 4], 2))), cp=(1,), micro_batch=(1,),
                  pp=(2, 4) if gpus >= 4 else (2,))
    return Instance(name=f"slots{seed}", model=replace(inst.model, name=f"slots{seed}", layers=layers),
                    cluster=inst.cluster, job=JobSpec(global_batch=gpus * rng.choice([2, 4, 8])),
                    search=space)
