"""cost/framework.py and the pipeline sends: behaviours taken from the frameworks' own code,
each expected value derived by hand in the comment above it.

Sources:
  [DS]   deepspeedai/DeepSpeed, deepspeed/runtime/zero/partitioned_param_coordinator.py
         (__params_to_release: parameters reached within stage3_max_reuse_distance = 1e9
         parameters of trace traversal stay gathered) and the ZeRO config defaults.
  [N21]  Narayanan et al., SC'21 (arXiv 2104.04473), Sec. 4.1, scatter/gather optimisation.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan import instances
from paraplan.cost import comm
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.errors import ConfigError
from paraplan.cost.framework import behaviour, recompute_regather_params
from paraplan.cost.flops import layer_weight_sizes
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Cluster, Framework, Mlp, ModelSpec

INSTANCES = Path(instances.__file__).parent


def _gpt(hidden: int, layers: int = 2) -> ModelSpec:
    return ModelSpec(name="t", layers=layers, hidden=hidden, heads=hidden // 128,
                     kv_heads=hidden // 128, ffn=4 * hidden, vocab=51200, seq_len=2048, mlp=Mlp.GELU)


def _fa2_everywhere(inst):
    """The instance with Transformer Engine's attention priced as the other frameworks' (no
    cuDNN speedup, no benchmark of its own), so that two frameworks differ only in the
    behaviour a test compares (Megatron's attention kernel is faster:
    test_transformer_engine_runs_cudnn_attention_on_hopper_only)."""
    gpu = replace(inst.cluster.gpu, cudnn_attention_speedup=1.0, fa2_benchmark_flops_per_s=None)
    return replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, gpu=gpu)))


def test_deepspeed_regathers_what_lies_beyond_the_reuse_distance():
    # GPT-3 175B, h = 12288, tp 1. Forward order: QKV 12288 x 36864 = 452,984,832;
    # out 12288^2 = 150,994,944; fc1 = fc2 = 12288 x 49152 = 603,979,776. After its recompute
    # use, a weight's backward use lies 2 x (weights after it) parameters of traversal away:
    #   fc2: 0 (kept); fc1: 2 x 603,979,776 = 1.21e9 >= 1e9 (released); out, QKV: further.
    # Re-gathered: 452,984,832 + 150,994,944 + 603,979,776 = 1,207,959,552.
    sizes = layer_weight_sizes(_gpt(12288))
    assert sizes == (452_984_832, 150_994_944, 603_979_776, 603_979_776)
    assert recompute_regather_params(behaviour(Framework.DEEPSPEED), sizes) == 1_207_959_552


def test_small_layers_and_fsdp_reuse_every_gathered_weight():
    # h = 2048: fc2 = fc1 = 2048 x 8192 = 16,777,216; 2 x (fc1 + fc2) = 6.7e7 < 1e9, so
    # DeepSpeed keeps the whole layer; FSDP gathers once before backward whatever the size.
    assert recompute_regather_params(behaviour(Framework.DEEPSPEED), layer_weight_sizes(_gpt(2048))) == 0
    for fw in (Framework.MEGATRON, Framework.TORCHTITAN, Framework.COMPOSER):
        assert recompute_regather_params(behaviour(fw), layer_weight_sizes(_gpt(12288))) == 0


def test_pipeline_sends_a_tp_slice_and_regathers_it_without_sequence_parallelism():
    # [N21] Sec. 4.1: without sequence parallelism each of the tp ranks sends 1/tp of the
    # replicated activation and the receiver all-gathers it over NVLink; with sequence
    # parallelism the slice is already the whole message. So with tp = 2, the same plan with
    # and without sp differs in its per-edge p2p time by exactly one tp all-gather of the
    # full activation (b s h x 2 bytes), per edge and micro-batch.
    inst = load_instance(INSTANCES / "small-gpt-16xA100.yaml")
    base = dict(tp=2, pp=4, dp=2, micro_batch=1)
    no_sp = simulate(inst, plan_from_mapping(base, inst))
    sp = simulate(inst, plan_from_mapping(dict(base, sequence_parallel=True), inst))
    m = inst.model
    emb_io = 1 * m.seq_len * m.hidden * 2
    link, inter = comm.group_link(inst.cluster.one_group, 2, 1)
    gather = comm.all_gather_time_s(emb_io, 2, link, inter, NetEfficiency())
    mb = inst.job.global_batch // 2  # micro-batches per replica
    # the breakdown reports the first stage's p2p: one edge (to stage 1), every micro-batch
    diff = no_sp.exposed_s["pp_p2p"] - sp.exposed_s["pp_p2p"]
    assert diff == pytest.approx(mb * gather, rel=1e-9)


def test_context_parallel_step_hides_only_behind_its_own_attention_block():
    # Ring attention with causal load balance: cp - 1 steps, each computing 1/cp of the
    # attention core while the next K,V block (2 x tokens x kv_hidden x 2 bytes) arrives;
    # backward sends K,V and dK,dV (twice the bytes). With NVLink slowed so that a transfer
    # outlasts its step's attention, per layer and micro-batch:
    #   exposed = (cp-1) * (p - a_f/cp) + (cp-1) * (2p - a_b/cp)
    # with p one block's p2p time, a_f the attention core forward (Megatron on A100: Transformer
    # Engine's FlashAttention-2 at its benchmark, 175 TFLOP/s at 8k keys (Dao 2023, Fig. 4), on
    # the key-length curve: causal FLOPs / (175e12 * (n / (n + 300)) / (8192 / 8492)), n =
    # seq_len / cp keys per call) and a_b = 2.5 a_f. cp = 4, tp = 1, micro-batch 1; the
    # breakdown sums it over the layers and micro-batches of the first stage.
    from paraplan.cost.coefficients import ATTENTION_HALF_KEYS, BACKWARD_FLASH_FACTOR
    from paraplan.cost.flops import layer_matmuls
    inst = load_instance(INSTANCES / "small-gpt-16xA100.yaml")
    slow = replace(inst.cluster.one_group.intra_node, bw_bytes_per_s=1e9)
    inst = replace(inst, cluster=Cluster.of(replace(inst.cluster.one_group, intra_node=slow)))
    plan = plan_from_mapping(dict(tp=1, pp=1, dp=4, cp=4, micro_batch=1), inst)
    bd = simulate(inst, plan)
    m, gpu, cp = inst.model, inst.cluster.gpu, 4
    tokens = m.seq_len / cp
    link, inter = comm.group_link(inst.cluster.one_group, cp, 1)
    p = comm.p2p_time_s(2 * tokens * m.kv_hidden * 2, link, inter, NetEfficiency())
    keys = m.seq_len / cp
    assert gpu.fa2_benchmark_flops_per_s == 175e12
    rate = 175e12 * keys / (keys + ATTENTION_HALF_KEYS) / (8192 / (8192 + 300))
    a_f = layer_matmuls(m, 1, 1, cp).attention_core / rate
    a_b = BACKWARD_FLASH_FACTOR * a_f
    assert p > a_b / cp  # the regime under test: every step is transfer-bound
    per_layer = (cp - 1) * (p - a_f / cp) + (cp - 1) * (2 * p - a_b / cp)
    n_mb = inst.job.global_batch // 4
    assert bd.exposed_s["cp_comm_exposed"] == pytest.approx(m.layers * n_mb * per_layer, rel=1e-9)


def test_attention_efficiency_follows_the_key_length_of_a_call():
    # FlashAttention-2 (Dao 2023, arXiv 2307.08691, Fig. 4 (d): A100, causal, head dim 128,
    # fwd+bwd): 99, 133, 155, 173, 182, 189 TFLOP/s at 512, 1k, 2k, 4k, 8k, 16k keys, i.e.
    # 0.639, 0.858, 1, 1.116, 1.174, 1.219 of the 2k rate. The model's n / (n + 300), scaled the
    # same way, gives 0.723, 0.887, 1, 1.068, 1.106, 1.126: within 8% from 1k to 16k keys, 13%
    # fast at 512 (cost/coefficients.py says why 300 is kept). A ring step of cp = 4 over 2,048
    # tokens calls the kernel on 512 keys, so its attention core runs at (512/812) / (2048/2348)
    # = 0.723 of the cp = 1 rate: the attention time per layer of the whole sequence is 1/0.723
    # = 1.383x longer with cp = 4 than with cp = 1 (same FLOPs).
    from paraplan.cost.coefficients import ATTENTION_HALF_KEYS
    figure = {512: 99, 1024: 133, 2048: 155, 4096: 173, 8192: 182, 16384: 189}

    def rel(keys):
        return (keys / (keys + ATTENTION_HALF_KEYS)) / (2048 / (2048 + ATTENTION_HALF_KEYS))
    for keys, tflops in figure.items():
        published = tflops / figure[2048]
        assert rel(keys) == pytest.approx(published, rel=0.14 if keys == 512 else 0.08)
    assert rel(512) / (99 / 155) == pytest.approx(1.132, abs=1e-3)  # the 512-key deviation
    ratio = (2048 / (2048 + ATTENTION_HALF_KEYS)) / (512 / (512 + ATTENTION_HALF_KEYS))
    assert ratio == pytest.approx(1.383, abs=1e-3)


def test_standard_attention_score_traffic_is_linear_in_the_micro_batch():
    # The unfused attention's score tensor is b x heads x s x s: doubling the micro-batch
    # doubles it (it once grew as b^2, which made Megatron v1's micro-batch 8 rows 8x too slow
    # in their score passes). Each of its STANDARD_ATTENTION_SCORE_PASSES traversals is 2 bytes
    # per element at memory_eff x HBM bandwidth; forward, per layer, tp = 1:
    #   score_s(b) = 6 x 2 x b x heads x s^2 / (bw x memory_eff)
    # and the forward compute of one layer is linear in b apart from matmul_half_flops' fixed
    # cost per call, so f(2) - 2 f(1) = -(calls x half_flops / (peak x eff_max)) exactly.
    from paraplan.cost.coefficients import STANDARD_ATTENTION_SCORE_PASSES, homogeneous_placement, megatron_layer
    from paraplan.cost.specs import Attention
    inst = load_instance(INSTANCES / "small-gpt-16xA100.yaml")
    inst = replace(inst, job=replace(inst.job, attention=Attention.STANDARD))
    m, gpu = inst.model, inst.cluster.gpu

    def fwd_compute(b):
        plan = plan_from_mapping(dict(tp=1, pp=1, dp=16, micro_batch=b), inst)
        o = plan.flat_outer
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        return megatron_layer(inst, o, site, NetEfficiency()).fwd_s

    assert STANDARD_ATTENTION_SCORE_PASSES == 6
    score_1 = 6 * 2 * 1 * m.heads * m.seq_len ** 2 / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)
    assert score_1 > 0.05 * fwd_compute(1)  # the score passes matter at this size
    # calls with a fixed cost: 4 linear GEMMs (gelu MLP) + the two attention-core GEMMs
    fixed = 6 * gpu.matmul_half_flops / (gpu.peak_flops_per_s * gpu.matmul_eff_max)
    assert fwd_compute(2) - 2 * fwd_compute(1) == pytest.approx(-fixed, rel=1e-6)


def test_tp_overlap_hides_all_but_one_chunk_or_what_the_gemm_cannot_cover():
    # Transformer Engine's userbuffers split each tp collective and the GEMM beside it into
    # tp chunks; the chunk at the end of the pipeline shows, and so does a transfer longer than
    # the GEMM: exposed = max(comm - gemm, comm / tp).
    from paraplan.cost.coefficients import tp_overlap_exposed
    assert tp_overlap_exposed(1.0, 2.0, 4) == pytest.approx(0.25)   # GEMM covers: one chunk of 4
    assert tp_overlap_exposed(3.0, 1.0, 4) == pytest.approx(2.0)    # transfer-bound: 3 - 1
    assert tp_overlap_exposed(1.0, 0.9, 8) == pytest.approx(0.125)  # one chunk of 8 > 1 - 0.9


def test_tp_overlap_applies_only_with_sequence_parallelism_inside_a_node():
    # Llama-3 70B on 512 H100 (tp 8 inside a node). With tp_comm_overlap on, the plan with
    # sequence parallelism exposes less tp time than without (each of the four collectives
    # per direction shows at most max(comm - gemm, comm/8)), and the hidden part appears as
    # overlapped tp_comm; without sequence parallelism nothing changes (TE refuses the overlap).
    inst = load_instance(INSTANCES / "llama3-70b-512xH100.yaml")
    on = replace(inst, job=replace(inst.job, tp_comm_overlap=True))
    base = dict(tp=8, pp=4, dp=16, micro_batch=1)
    for sp in (False, True):
        plan = plan_from_mapping(dict(base, sequence_parallel=sp), inst)
        off_bd, on_bd = simulate(inst, plan), simulate(on, plan)
        if not sp:
            assert on_bd.iter_time_s == off_bd.iter_time_s
            continue
        assert on_bd.exposed_s["tp_comm"] < 0.5 * off_bd.exposed_s["tp_comm"]
        # volume: forward 4 collectives either way; backward 4 under TE's overlap, 6 under
        # Megatron's own async path (it re-gathers each column-parallel input for its weight
        # gradient: cost/coefficients.tp_backward_exposed), so on = 8 / 10 of off in all
        on_all = on_bd.overlapped_s["tp_comm"] + on_bd.exposed_s["tp_comm"]
        off_all = off_bd.overlapped_s["tp_comm"] + off_bd.exposed_s["tp_comm"]
        assert on_all == pytest.approx(0.8 * off_all, rel=1e-9)
        assert on_bd.iter_time_s < off_bd.iter_time_s


def test_tp_overlap_is_refused_outside_megatron():
    from paraplan.cost.specs import JobSpec
    with pytest.raises(ConfigError, match="tp_comm_overlap"):
        JobSpec(global_batch=8, framework=Framework.TORCHTITAN, tp_comm_overlap=True)


def test_gemm_output_store_is_priced_once_per_output_element():
    # flops.gemm_output_elements: forward writes QKV (t x 3h / tp), attention-out (t x h),
    # MLP-in (t x 4h / tp) and MLP-out (t x h); backward the input gradients t x h (QKV),
    # t x h / tp (attention-out), t x h (MLP-in), t x 4h / tp (MLP-out). GPT, h = 4096, tp = 2,
    # t = 2048: forward 2048 x (6144 + 4096 + 8192 + 4096) = 46,137,344 elements; backward
    # 2048 x (4096 + 2048 + 4096 + 8192) = 37,748,736.
    from paraplan.cost.flops import gemm_output_elements
    m = replace(_gpt(4096), seq_len=2048)
    assert gemm_output_elements(m, 1, 2, 1) == (46_137_344, 37_748_736)


def test_torchtitan_selective_ac_recomputes_every_other_mm():
    # torchtitan's op-level SAC saves the outputs of the 1st, 3rd, ... aten.mm of a block and
    # recomputes the others (parallelize_llama._apply_ac_to_transformer_block). Llama order
    # wq, wk, wv, wo, w1, w3, w2: recomputed wk (h x kv), wo (q x h), w3 (h x f). Llama-3 8B
    # (h 4096, kv 1024, f 14336), tp 1, one sequence of 8192 tokens:
    #   2 x 8192 x (4096 x 1024 + 4096 x 4096 + 4096 x 14336) = 1,305,670,057,984 FLOPs.
    from paraplan.cost.flops import torchtitan_block_mms, torchtitan_sac_recomputed_flops
    m = ModelSpec(name="l8", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                  vocab=128256, seq_len=8192, mlp=Mlp.SWIGLU)
    assert len(torchtitan_block_mms(m, 1)) == 7
    assert sum(torchtitan_sac_recomputed_flops(m, 1, 1, 1)) == 1_305_670_057_984


def test_torchao_dynamic_scaling_casts_every_gemm_input_and_weights_twice():
    # cost/flops.fp8_cast_elements. Transformer Engine's fused modules (delayed scaling) write
    # the FP8 inputs of QKV, MLP-in and MLP-out from the norm and activation kernels: the
    # forward casts the attention output t x q alone, and the weights P once per pass.
    # torchao's dynamic tensorwise scaling adds the two norm outputs (2 t h), the MLP-out input
    # (t f) and a second weight pass (2 P).
    # GPT h = 4096 (f = 16384, q = h), tp 1, t = 2048, P = 12 h^2 + 13 h (norms and biases of
    # layer_params) -> TE forward 2048 x 4096; torchao adds 2 x 2048 x 4096 + 2048 x 16384.
    from paraplan.cost.flops import fp8_cast_elements, layer_params
    m = replace(_gpt(4096), seq_len=2048)
    p = layer_params(m)
    te_f, te_b, te_w = fp8_cast_elements(m, 1, 1, 1)
    ao_f, ao_b, ao_w = fp8_cast_elements(m, 1, 1, 1, dynamic_scaling=True)
    assert te_f == 2048 * 4096 and te_w == p
    assert ao_f - te_f == 2 * 2048 * 4096 + 2048 * 16384 and ao_w == 2 * p
    assert ao_b == te_b
    # plain te.Linear (llm-foundry's fc_type: te) casts the same inputs as torchao, weights once
    un_f, _, un_w = fp8_cast_elements(m, 1, 1, 1, fused_input_casts=False)
    assert un_f == ao_f and un_w == p


def test_fp8_weight_casts_once_per_iteration_where_megatron_caches_them():
    # Megatron-core passes is_first_microbatch to its TE modules: the FP8 weight (and its
    # transpose) is cast on the first micro-batch and reused, so the cast is a per-iteration
    # term, not a per-micro-batch one. Composer's te.Linear casts every micro-batch. Same
    # model, GPU and plan: the per-micro-batch forward differs by the weight cast plus the
    # three input casts Composer does not fuse (QKV and MLP-in inputs t x h each, MLP-out
    # input t x f),
    #   4 bytes x (P + 2 t h + t f) / (HBM bandwidth x memory_eff),
    # and Megatron's per-iteration term is 4 bytes x P / (HBM bandwidth x memory_eff).
    from paraplan.cost.coefficients import homogeneous_placement, megatron_layer
    from paraplan.cost.flops import layer_params
    from paraplan.cost.specs import Precision
    base = _fa2_everywhere(load_instance(INSTANCES / "llama3-8b-64xH100.yaml"))
    m, gpu = base.model, base.cluster.gpu
    t, h, f, p = m.seq_len, m.hidden, m.ffn, layer_params(m)
    bw = gpu.hbm_bw_bytes_per_s * gpu.memory_eff
    terms = {}
    for fw in (Framework.MEGATRON, Framework.COMPOSER):
        inst = replace(base, job=replace(base.job, framework=fw, precision=Precision.FP8))
        o = plan_from_mapping(dict(tp=1, pp=1, dp=64, micro_batch=1), inst).flat_outer
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        terms[fw] = megatron_layer(inst, o, site, NetEfficiency())
    meg, com = terms[Framework.MEGATRON], terms[Framework.COMPOSER]
    assert com.fwd_s - meg.fwd_s == pytest.approx(4 * (p + 2 * t * h + t * f) / bw, rel=1e-9)
    assert meg.per_iteration_s == pytest.approx(4 * p / bw, rel=1e-9)
    assert com.per_iteration_s == 0 and com.bwd_s == pytest.approx(meg.bwd_s, rel=1e-12)


def test_non_reentrant_checkpoint_stops_the_recompute_before_the_mlp_out_gemm():
    # torch.utils.checkpoint's non-reentrant implementation (Composer's FSDP activation
    # checkpointing as llm-foundry benchmarks it, torchtitan's full AC) stops a block's
    # recompute once every tensor saved for backward is rebuilt; the last is MLP-out's input,
    # so MLP-out is not replayed. Megatron replays the whole layer. Llama-3 8B on H100, tp 1,
    # one 8192-token sequence (t = 8192, h = 4096, f = 14336), bf16: what Composer does not
    # replay is the MLP-out GEMM, 2 t f h = 962,072,674,304 FLOPs at the matmul curve, its bf16
    # output store and the residual add after it (read 2, write 1), 2 t h + 6 t h bytes at
    # the HBM bandwidth x memory_eff. The forward itself is the same in both frameworks.
    from paraplan.cost.coefficients import homogeneous_placement, matmul_time_s, megatron_layer
    base = _fa2_everywhere(load_instance(INSTANCES / "llama3-8b-64xH100.yaml"))
    m, gpu = base.model, base.cluster.gpu
    t, h, f = m.seq_len, m.hidden, m.ffn
    assert 2 * t * f * h == 962_072_674_304
    stopped = matmul_time_s(2 * t * f * h, gpu) + 8 * t * h / (gpu.hbm_bw_bytes_per_s * gpu.memory_eff)
    terms = {}
    for fw in (Framework.MEGATRON, Framework.COMPOSER):
        inst = replace(base, job=replace(base.job, framework=fw))
        o = plan_from_mapping(dict(tp=1, pp=1, dp=64, micro_batch=1), inst).flat_outer
        terms[fw] = megatron_layer(inst, o, homogeneous_placement(inst.cluster.one_group, o).sites[0], NetEfficiency())
    meg, com = terms[Framework.MEGATRON], terms[Framework.COMPOSER]
    assert meg.rc_fwd_s == meg.fwd_s and com.fwd_s == pytest.approx(meg.fwd_s, rel=1e-12)
    assert com.fwd_s - com.rc_fwd_s == pytest.approx(stopped, rel=1e-9)
    assert behaviour(Framework.TORCHTITAN).recompute_early_stop
    assert not behaviour(Framework.DEEPSPEED).recompute_early_stop


def test_recompute_early_stop_follows_the_job_the_framework_and_the_pytorch_version():
    # cost/framework.recompute_stops_early: the job's own setting first (false: PyTorch before
    # 2.1, whose non-reentrant checkpoint replays whole blocks); else the framework's, except
    # Composer in FP8, whose te.Linear layers llm-foundry ran with the reentrant checkpoint.
    # A megatron or deepspeed job that asks for it is refused: they replay whole layers.
    from paraplan.cost.calibration import load_published, row_ran
    from paraplan.cost.errors import ConfigError
    from paraplan.cost.framework import recompute_stops_early
    from paraplan.cost.specs import JobSpec, Precision
    job = JobSpec(global_batch=8, framework=Framework.COMPOSER)
    assert recompute_stops_early(job)
    assert not recompute_stops_early(replace(job, recompute_early_stop=False))
    assert not recompute_stops_early(replace(job, precision=Precision.FP8))
    assert recompute_stops_early(replace(job, framework=Framework.TORCHTITAN, precision=Precision.FP8))
    assert not recompute_stops_early(replace(job, framework=Framework.MEGATRON))
    with pytest.raises(ConfigError, match="recompute_early_stop"):
        JobSpec(global_batch=8, framework=Framework.DEEPSPEED, recompute_early_stop=True)
    # calibration: llm-foundry's June 2023 sweep ran PyTorch 1.13 (the A100 40GB table and the
    # A100 80GB table's 70B rows); its October 2023 rows ran PyTorch 2.1 (ran.yaml's
    # recompute_early_stop: false before 2.1; None, the framework's default, after)
    rows = {r["id"]: row_ran(r) for r in load_published()}
    assert rows["mpt-a100-40-13b-s2048-g8"].recompute_early_stop is False
    assert rows["mpt-a100-80-70b-s2048-g64"].recompute_early_stop is False
    assert rows["mpt-a100-80-13b-s1024-g8"].recompute_early_stop is None


def test_recompute_early_stop_loads_and_round_trips(tmp_path):
    # job.recompute_early_stop in an instance file reaches the JobSpec, and instance_to_mapping
    # writes it back; left out, it stays None (the framework decides)
    import yaml
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    raw = yaml.safe_load((INSTANCES / "llama3-8b-64xH100.yaml").read_text())
    raw["job"]["framework"] = "torchtitan"
    raw["job"]["recompute_early_stop"] = False
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    assert inst.job.recompute_early_stop is False
    assert instance_to_mapping(inst)["job"]["recompute_early_stop"] is False
    assert load_instance(INSTANCES / "llama3-8b-64xH100.yaml").job.recompute_early_stop is None


def test_an_unprefetched_backward_gather_queues_behind_the_reduce_scatter():
    # ZeRO-3 backward, per layer and micro-batch: layer i's reduce-scatter (rs) is issued when
    # its backward ends, on the same data-parallel communicator as layer i-1's gather (ag); NCCL
    # runs a communicator's collectives in issue order. DeepSpeed prefetches only
    # stage3_prefetch_bucket_size = 5e7 parameters ahead, a share a = 5e7 / P of a GPT-3 175B
    # layer's P = 1.81e9 parameters, so all but a of (ag + rs) waits in front of layer i-1:
    #   exposed_b = max(ag + rs - bwd, (1 - a) (ag + rs))
    # FSDP prefetches the whole next block (a = 1): exposed_b = max(ag + rs - bwd, 0).
    # Checked on the SC'21 ZeRO-3 row at 384 GPUs (tp 1, micro-batch 4), DeepSpeed and, for the
    # same plan, torchtitan's FSDP.
    from paraplan.cost.calibration import load_published, row_to_instance_plan
    from paraplan.cost.coefficients import _layer_costs, homogeneous_placement, megatron_layer
    from paraplan.cost.flops import layer_params
    from paraplan.cost.readers.gpus import load_catalogue
    row = next(r for r in load_published() if r["id"] == "narayanan21-t2-zero3-174.6B-384gpu")
    inst, plan = row_to_instance_plan(row, load_catalogue())
    assert inst.job.framework is Framework.DEEPSPEED
    for fw, ahead in ((Framework.DEEPSPEED, 5e7 / layer_params(inst.model)), (Framework.TORCHTITAN, 1.0)):
        i = replace(inst, job=replace(inst.job, framework=fw))
        o = plan.flat_outer
        site = homogeneous_placement(i.cluster.one_group, o).sites[0]
        lc = _layer_costs(i, o, site, o.dp, NetEfficiency(), megatron_layer)
        ag, rs, fwd, bwd = lc.gather_s, lc.scatter_s, lc.terms.fwd_s, lc.terms.bwd_s
        exp_f = max(ag - fwd, (1 - ahead) * ag, 0.0)
        exp_b = max(ag + rs - bwd, (1 - ahead) * (ag + rs), 0.0)
        assert lc.parts["zero3_comm_exposed"] == pytest.approx(exp_f + exp_b, rel=1e-9), fw
    assert 5e7 / layer_params(inst.model) < 0.03  # DeepSpeed: almost nothing prefetched


def test_megatron_overlaps_backward_tp_communication_with_the_gradient_gemms():
    # cost/coefficients.tp_backward_exposed, by hand. Forward TP time 4 ms (2 all-reduces of
    # 2 ms); QKV's GEMM 1.5 ms, MLP-in's 3 ms. Without sequence parallelism the backward
    # all-reduces QKV's and MLP-in's input gradients behind their weight-gradient GEMMs:
    #   exposed = max(0, 2 - 1.5) + max(0, 2 - 3) = 0.5 ms, hidden 4 - 0.5 = 3.5 ms.
    # With it: 4 collectives of 1 ms forward; backward all-gathers the two row-parallel output
    # gradients first (2 ms exposed) and, per column-parallel linear, re-gathers its input behind
    # the input-gradient GEMM and reduce-scatters behind the weight-gradient GEMM (both hidden):
    #   exposed = 2 ms, hidden 6 - 2 = 4 ms.
    from paraplan.cost.coefficients import tp_backward_exposed
    assert tp_backward_exposed(4e-3, 1.5e-3, 3e-3, sp=False) == pytest.approx((0.5e-3, 3.5e-3))
    assert tp_backward_exposed(4e-3, 1.5e-3, 3e-3, sp=True) == pytest.approx((2e-3, 4e-3))
    # In a layer: the same GPT-3 175B plan (tp 8, sequence parallel, no recompute) priced as
    # Megatron-LM runs it and as torchtitan's DTensor TP (no backward overlap) differs in the
    # backward by exactly the forward TP time less Megatron's exposed part.
    from paraplan.cost.coefficients import homogeneous_placement, megatron_layer
    from paraplan.cost.flops import layer_matmuls
    from paraplan.cost.coefficients import _mm_time_s
    base = _fa2_everywhere(load_instance(INSTANCES / "gpt3-175b-1024xA100.yaml"))
    terms = {}
    for fw in (Framework.MEGATRON, Framework.TORCHTITAN):
        inst = replace(base, job=replace(base.job, framework=fw))
        o = plan_from_mapping(dict(tp=8, pp=8, dp=16, micro_batch=1, sequence_parallel=True), inst).flat_outer
        site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
        terms[fw] = megatron_layer(inst, o, site, NetEfficiency())
    meg, tt = terms[Framework.MEGATRON], terms[Framework.TORCHTITAN]
    tp_f = tt.parts["tp_comm"] / 2  # torchtitan: forward = backward, both exposed
    gemm = [_mm_time_s(f, base.cluster.gpu) for f in layer_matmuls(base.model, 1, 8, 1).linear_calls]
    exposed, hidden = tp_backward_exposed(tp_f, gemm[0], sum(gemm[2:-1]), sp=True)
    assert tt.bwd_s - meg.bwd_s == pytest.approx(tp_f - exposed, rel=1e-9)
    assert meg.overlapped["tp_comm"] == pytest.approx(hidden, rel=1e-9)


def test_transformer_engine_runs_cudnn_attention_on_hopper_only():
    # Transformer Engine prefers cuDNN's fused attention to FlashAttention on Hopper and newer
    # (Behaviour.te_fused_attention; Megatron/NeMo only), and calls either kernel itself, so it
    # runs at the kernel's own benchmark (cost/coefficients.attention_efficiency): H100
    # FlashAttention-2 322 TFLOP/s at 8k tokens (Shah et al. 2024, Figs. 5-6: forward 333,
    # backward 318), cuDNN 1.6x that (Figs. 5-6: 484/298 forward, 465/291 backward at 2k
    # tokens). Llama 3 8B (32 heads x 128 = 4,096, s = 8,192), tp 1, cp 1, micro-batch 1: the
    # causal core is 2 x (2 x 8192 x 8192 x 4096) / 2 = 5.498e11 FLOP forward per layer (a
    # causal kernel computes half the score blocks); at 8,192 keys, the benchmark's own length,
    # the key-length curve is 1, so FlashAttention-2 takes t_fa2 = 5.498e11 / 322e12 = 1.707 ms
    # and cuDNN saves t_fa2 x (1 - 1/1.6) = 0.640 ms of the forward. NVTE_FUSED_ATTN=0
    # (job.cudnn_attention: false) runs FlashAttention-2 whatever the GPU's speedup.
    from paraplan.cost.coefficients import homogeneous_placement, megatron_layer
    inst = load_instance(INSTANCES / "llama3-8b-64xH100.yaml")
    m, gpu = inst.model, inst.cluster.gpu
    assert (m.hidden, m.heads, m.seq_len, gpu.cudnn_attention_speedup) == (4096, 32, 8192, 1.6)
    assert gpu.fa2_benchmark_flops_per_s == 322e12

    def fwd(framework, speedup, cudnn=True):
        i = replace(inst, job=replace(inst.job, framework=framework, cudnn_attention=cudnn),
                    cluster=Cluster.of(replace(inst.cluster.one_group, gpu=replace(gpu, cudnn_attention_speedup=speedup))))
        o = plan_from_mapping(dict(tp=1, pp=1, dp=64, micro_batch=1), i).flat_outer
        return megatron_layer(i, o, homogeneous_placement(i.cluster.one_group, o).sites[0], NetEfficiency()).fwd_s

    core_flops = 2 * (2 * 8192 * 8192 * 4096) / 2
    t_fa2 = core_flops / 322e12
    assert t_fa2 == pytest.approx(1.707e-3, rel=1e-3)
    assert fwd(Framework.MEGATRON, 1.0) - fwd(Framework.MEGATRON, 1.6) == pytest.approx(
        t_fa2 * (1 - 1 / 1.6), rel=1e-9)
    assert fwd(Framework.MEGATRON, 1.6, cudnn=False) == fwd(Framework.MEGATRON, 1.0)
    # torchtitan (torch SDPA's FlashAttention-2) does not use it, and runs at the fitted
    # fraction of the benchmark: its core takes 5.498e11 / (989e12 x attention_eff x 8192 / 8492)
    assert fwd(Framework.TORCHTITAN, 1.6) == fwd(Framework.TORCHTITAN, 1.0)
    t_tt = core_flops / (989e12 * gpu.attention_eff * 8192 / (8192 + 300))
    fitted_rate = _fa2_everywhere(inst)  # Megatron at the fitted rate too
    o = plan_from_mapping(dict(tp=1, pp=1, dp=64, micro_batch=1), fitted_rate).flat_outer
    fitted = megatron_layer(fitted_rate, o, homogeneous_placement(fitted_rate.cluster.one_group, o).sites[0],
                            NetEfficiency()).fwd_s
    assert fitted - fwd(Framework.MEGATRON, 1.0) == pytest.approx(t_tt - t_fa2, rel=1e-9)


def test_transformer_engine_kernel_is_a_megatron_fact():
    # job.cudnn_attention picks Transformer Engine's kernel; no other framework runs it
    inst = load_instance(INSTANCES / "llama3-8b-64xH100.yaml")
    with pytest.raises(ConfigError, match="cudnn_attention"):
        replace(inst.job, framework=Framework.TORCHTITAN, cudnn_attention=False)


def test_a100_keeps_flashattention_under_transformer_engine():
    # Ampere: TE runs FlashAttention-2, so the catalogue gives no cuDNN speedup there.
    from paraplan.cost.readers.gpus import load_catalogue
    cat = load_catalogue()
    assert cat["A100-SXM4-80GB"].cudnn_attention_speedup == 1.0
    assert cat["H200-SXM-141GB"].cudnn_attention_speedup == cat["H100-SXM5-80GB"].cudnn_attention_speedup
