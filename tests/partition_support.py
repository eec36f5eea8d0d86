"""Small instances and sites shared by tests/partition/ (tests/ is on sys.path)."""

from paraplan.cost.coefficients import homogeneous_placement
from paraplan.cost.specs import (Cluster, NodeGroup, GpuSpec, Instance, JobSpec, Link, Mlp, ModelSpec, Outer,
                        SearchSpace)


def small_instance(*, nodes=2, gpus_per_node=4, layers=4, hidden=1024, heads=16, kv_heads=16,
                   ffn=4096, seq_len=1024, mlp=Mlp.GELU, global_batch=16, hbm_gib=32,
                   search=None) -> Instance:
    gpu = GpuSpec(name="TestGPU", peak_flops_per_s=125e12, hbm_bytes=hbm_gib * 2**30,
                  hbm_bw_bytes_per_s=900e9)
    cl = NodeGroup(gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node,
                   intra_node=Link(bw_bytes_per_s=150e9, latency_s=5e-6),
                   inter_node=Link(bw_bytes_per_s=3.125e9, latency_s=10e-6))
    m = ModelSpec(name="test", layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                  ffn=ffn, vocab=32000, seq_len=seq_len, mlp=mlp)
    return Instance(name="test", model=m, cluster=Cluster.of(cl), job=JobSpec(global_batch=global_batch),
                    search=search or SearchSpace())


def instance_and_site(tp=4, **kw):
    inst = small_instance(**kw)
    n = inst.cluster.num_gpus
    o = Outer(tp=tp, pp=1, dp=n // tp, micro_batch=1,
              num_micro_batches=inst.job.global_batch // (n // tp))
    return inst, o, homogeneous_placement(inst.cluster.one_group, o).sites[0]
