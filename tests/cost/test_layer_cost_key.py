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
