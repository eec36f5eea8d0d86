"""Model TFLOP/s per GPU as Megatron-LM logs it (cost/flops.megatron_flops_per_token), printed
beside MFU by plan, simulate and report on every cluster kind: the metric NVIDIA's MoE tables
publish (tests/validation/test_moe_anchor.py reproduces their step-time / TFLOP/s pairs)."""

from pytest import approx

from paraplan.cost.flops import megatron_flops_per_token
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.simulate import simulate
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.plan_specs import Plan
from paraplan.solver.search import search


def test_dense_count_is_narayanans_formula_with_causal_scores():
    # Narayanan et al. 2021 (arXiv 2104.04473, Sec. 5.1), FLOPs per iteration without activation
    # recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), scores counted whole. Megatron-LM's
    # count (001b00c) takes the causal half of the scores, 6 l h s per token fewer. GPT-3 175B
    # (l 96, h 12,288, s 2,048, V 51,200), per token:
    #   72 x 96 x 12,288^2 x (1 + 2,048/73,728 + 51,200/14,155,776) = 1,076,442,955,776
    #   - 6 x 96 x 12,288 x 2,048                                     =    14,495,514,624
    #                                                                  = 1,061,947,441,152
    # (layer by layer: 6 x 96 x (12,288 x 36,864 + 12,288 x 2,048 + 12,288^2 + 2 x 12,288 x
    # 49,152) + 6 x 12,288 x 51,200, the same)
    m = load_instance("instances/gpt3-175b-1024xA100.yaml").model
    l, h, s, v = m.layers, m.hidden, m.seq_len, m.vocab
    narayanan = 72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    assert megatron_flops_per_token(m) == approx(narayanan - 6 * l * h * s, rel=1e-12)
    assert megatron_flops_per_token(m) == approx(1_061_947_441_152, rel=1e-12)


def test_breakdowns_carry_it_on_both_cluster_kinds():
    # tokens/s x FLOPs per token / every GPU of the cluster (Megatron-LM divides by its world size)
    inst = load_instance("instances/gpt3-175b-1024xA100.yaml")
    plan = Plan.flat(tp=8, pp=8, dp=16, micro_batch=1, num_micro_batches=96, zero=1,
                layers_per_stage=(12,) * 8, full_recompute_layers=(0,) * 8)
    bd = simulate(inst, plan)
    want = bd.tokens_per_s * megatron_flops_per_token(inst.model) / 1024 / 1e12
    assert bd.megatron_tflops_per_gpu == approx(want, rel=1e-12)
    het = load_instance("instances/mixed/tiny-2types.yaml")
    hbd = simulate(het, search(het).plan)
    want = hbd.tokens_per_s * megatron_flops_per_token(het.model) / het.cluster.num_gpus / 1e12
    assert hbd.megatron_tflops_per_gpu == approx(want, rel=1e-12)
