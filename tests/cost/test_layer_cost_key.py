"""build's shared layer costs (cost/coefficients._shared_layer_costs) are keyed by what a dense
layer's costs read: not the pipeline, except whether the data-parallel gradient reduction
overlaps the backward, which reads pp and v (framework.grad_reduce_overlaps: Megatron-LM v2.0
ran torch DDP's overlapping hooks only for pp = 1, one chunk and ZeRO-0, and reduced after the
backward otherwise). Before the key held that answer, a pipelined configuration priced after a
pipeline-free one on the same site and ring took the pipeline-free one's overlapped sync: the
price depended on the pricing order. Expected values: a fresh pricing of each configuration."""

import dataclasses

from paraplan.cost import coefficients
from paraplan.cost.framework import grad_reduce_overlaps
from paraplan.cost.specs import Outer
from test_grad_reduce_overlap import _tiny


def test_a_pipelined_layer_does_not_take_a_pipeline_free_ones_overlap(tmp_path):
    inst = _tiny(tmp_path, framework_version="v2.0")
    flat = Outer(tp=2, pp=1, dp=4, micro_batch=1, num_micro_batches=8)
    piped = dataclasses.replace(flat, pp=2, dp=2)
    site = coefficients.homogeneous_placement(inst.cluster.one_group, flat).sites[0]
    assert grad_reduce_overlaps(inst.job, 1, 1, 0) and not grad_reduce_overlaps(inst.job, 2, 1, 0)
    fresh = coefficients._layer_costs(inst, piped, site, 4, coefficients.NetEfficiency(), coefficients.megatron_layer)
    coefficients._LAYER_COSTS.clear()
    first = coefficients._shared_layer_costs(inst, flat, site, 4, coefficients.NetEfficiency(), coefficients.megatron_layer)
    then = coefficients._shared_layer_costs(inst, piped, site, 4, coefficients.NetEfficiency(), coefficients.megatron_layer)
    # v2.0 hides part of the pipeline-free layer's reduction and none of the pipelined one's
    assert first.grad_tail > 0.0 == fresh.grad_tail
    assert then.grad_tail == fresh.grad_tail and then.layer_sync == fresh.layer_sync


def test_the_kept_overlap_answer_is_each_jobs_own():
    # coefficients._reduce_overlaps keeps grad_reduce_overlaps per job identity, pp, v and
    # ZeRO: asked in turn for jobs of releases on both sides of --overlap-grad-reduce
    # (2023-08) and a job's own statement, it gives each job's fresh answer; the same
    # (pp, v, zero) gets both answers here, so a key without the job would be caught
    from test_grad_reduce_overlap import _job
    jobs = [_job("v2.0"), _job("core_v0.12.0"), _job("v2.0", grad_reduce_overlap=True), _job("23.04"), _job()]
    outers = [Outer(tp=1, pp=pp, dp=8 // pp, micro_batch=1, num_micro_batches=8, zero=zero, virtual_stages=v)
              for pp, v, zero in ((1, 1, 0), (2, 1, 0), (2, 2, 1), (4, 1, 2))]
    answers = set()
    for _ in range(2):  # the second pass reads the kept answers
        for job in jobs:
            for o in outers:
                want = grad_reduce_overlaps(job, o.pp, o.virtual_stages, o.zero)
                assert coefficients._reduce_overlaps(job, o) is want, (job.framework_version, o)
                answers.add((o.pp, o.virtual_stages, o.zero, want))
    assert (2, 1, 0, True) in answers and (2, 1, 0, False) in answers
