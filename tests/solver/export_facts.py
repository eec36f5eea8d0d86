"""Fact tables of each framework's configuration names, read from the frameworks' own parsers
(never from solver/export/), so that a misspelt, invented or out-of-range setting in an export
fails a test. Each table names the version it was read from.

- Megatron-LM main, commit d98e8a64ddf3 (2026-08-22): megatron/training/arguments.py and the
  TransformerConfig / ModelParallelConfig / TrainingConfig / TokenizerConfig / CheckpointConfig
  fields its ArgumentGroupFactory turns into flags (field `foo_bar` -> `--foo-bar`, unless the
  field's argparse_meta names the flag, e.g. add_bias_linear -> `--disable-bias-linear`,
  fp8 -> `--fp8-format`).
- torchtitan v0.2.0: torchtitan/config/job_config.py (dataclass fields and Literal values).
- DeepSpeed v0.19: deepspeed/runtime/config.py and deepspeed/runtime/zero/config.py
  (DeepSpeedZeroConfig fields and aliases; its pydantic model forbids unknown keys).
"""

# flag -> None (store_true, no value) | type | tuple of allowed values
MEGATRON_MAIN_D98E8A6 = {
    # network size (TransformerConfig fields and _add_network_size_args)
    "--num-layers": int, "--hidden-size": int, "--ffn-hidden-size": int,
    "--num-attention-heads": int, "--kv-channels": int, "--group-query-attention": None,
    "--num-query-groups": int, "--seq-length": int, "--max-position-embeddings": int,
    "--swiglu": None, "--untie-embeddings-and-output-weights": None,
    "--normalization": ("LayerNorm", "RMSNorm"),
    "--position-embedding-type": ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"),
    "--disable-bias-linear": None, "--hidden-dropout": float, "--attention-dropout": float,
    "--vocab-size": int, "--make-vocab-size-divisible-by": int,
    # multi-head latent attention (TransformerConfig.multi_latent_attention and qk_layernorm,
    # store_true; _add_mla_args: the widths)
    "--multi-latent-attention": None, "--qk-layernorm": None, "--q-lora-rank": int,
    "--kv-lora-rank": int, "--qk-head-dim": int, "--qk-pos-emb-head-dim": int, "--v-head-dim": int,
    # parallelism (ModelParallelConfig, _add_distributed_args)
    "--tensor-model-parallel-size": int, "--pipeline-model-parallel-size": int,
    "--context-parallel-size": int, "--cp-comm-type": ("p2p", "a2a", "allgather", "a2a+p2p"),
    "--sequence-parallel": None,
    "--tp-comm-overlap": None,  # _add_training_args (store_true); needs --sequence-parallel
    "--num-layers-per-virtual-pipeline-stage": int, "--num-virtual-stages-per-pipeline-rank": int,
    "--decoder-first-pipeline-num-layers": int, "--decoder-last-pipeline-num-layers": int,
    "--pipeline-model-parallel-layout": str,
    # TransformerConfig.account_for_embedding/loss_in_pipeline_split (store_true through
    # ArgumentGroupFactory: a bool field defaulting to False)
    "--account-for-embedding-in-pipeline-split": None, "--account-for-loss-in-pipeline-split": None,
    # batch (TrainingConfig)
    "--micro-batch-size": int, "--global-batch-size": int,
    # recompute (TransformerConfig)
    "--recompute-granularity": ("full", "selective"), "--recompute-method": ("uniform", "block"),
    "--recompute-num-layers": int,
    # TransformerConfig.recompute_modules through ArgumentGroupFactory (argument_utils.py: a
    # list field becomes nargs "+"); the choices TransformerConfig.__post_init__ allows
    "--recompute-modules": ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                            "shared_experts"),
    # data parallel (_add_distributed_args, _add_mixed_precision_args, CheckpointConfig)
    "--use-distributed-optimizer": None, "--use-megatron-fsdp": None,
    "--data-parallel-sharding-strategy": ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    "--ckpt-format": ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"),
    "--overlap-grad-reduce": None, "--overlap-param-gather": None, "--ddp-bucket-size": int,
    "--accumulate-allreduce-grads-in-fp32": None,
    # --grad-reduce-in-bf16 (_add_mixed_precision_args, store_true) and Megatron-FSDP's
    # main-gradient dtype (_add_distributed_args' Megatron-FSDP group)
    "--grad-reduce-in-bf16": None,
    "--megatron-fsdp-main-grads-dtype": ("fp32", "bf16", "fp16", "auto"),
    # precision and kernels (ModelParallelConfig, TransformerConfig)
    "--bf16": None, "--fp16": None, "--fp8-format": ("e4m3", "hybrid"),
    # _add_training_args' precision-aware optimizer group (arguments.py)
    "--use-precision-aware-optimizer": None,
    "--exp-avg-dtype": ("fp32", "fp16", "bf16", "fp8"), "--exp-avg-sq-dtype": ("fp32", "fp16", "bf16", "fp8"),
    "--fp8-recipe": ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
    "--attention-backend": ("flash", "fused", "unfused", "local", "auto"),
}
# validate_args: at most one of these (arguments.py, "Uneven virtual pipeline parallelism")
# flags that take one or more values (argparse nargs "+")
MEGATRON_NARGS = ("--recompute-modules",)
MEGATRON_EXCLUSIVE = ("--num-layers-per-virtual-pipeline-stage",
                      "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout")

# section -> key -> type | tuple of Literal values
TORCHTITAN_V0_2_0 = {
    "model": {"name": str, "flavor": str, "converters": list},
    "training": {"local_batch_size": int, "global_batch_size": int, "seq_len": int,
                 "mixed_precision_param": ("bfloat16", "float32"),
                 "mixed_precision_reduce": ("float32",)},
    "parallelism": {"data_parallel_replicate_degree": int, "data_parallel_shard_degree": int,
                    "fsdp_reshard_after_forward": ("default", "always", "never"),
                    "tensor_parallel_degree": int, "context_parallel_degree": int,
                    "context_parallel_rotate_method": ("allgather", "alltoall"),
                    "pipeline_parallel_degree": int, "pipeline_parallel_schedule": str,
                    "pipeline_parallel_microbatch_size": int, "module_fqns_per_model_part": list},
    "activation_checkpoint": {"mode": ("selective", "full", "memory_budget", "none"),
                              "selective_ac_option": str},
    "quantize.linear.float8": {"recipe_name": ("tensorwise", "rowwise", "rowwise_with_gw_hp"),
                               "enable_fsdp_float8_all_gather": bool,
                               "precompute_float8_dynamic_scale_for_fsdp": bool},
}
# torchtitan v0.2.0 registries: model names with their flavors (torchtitan/models/*/__init__.py),
# model converters (register_model_converter), pipeline schedules used
TORCHTITAN_V0_2_0_LLAMA3_FLAVORS = ("debugmodel", "debugmodel_flex_attn", "8B", "70B", "405B")
TORCHTITAN_V0_2_0_CONVERTERS = ("quantize.linear.float8", "quantize.grouped_mm.float8",
                                "quantize.linear.mx", "quantize.grouped_mm.mx")
# torch.distributed.pipelining schedule names torchtitan 0.2 takes (schedules.py __all__ and
# get_schedule_class, read at 00722e648b), of those paraplan prices
TORCHTITAN_SCHEDULES = ("1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble")

# key -> type | nested table
DEEPSPEED_V0_19 = {
    "train_batch_size": int, "train_micro_batch_size_per_gpu": int,
    "gradient_accumulation_steps": int,
    "zero_optimization": {"stage": (0, 1, 2, 3), "overlap_comm": bool, "contiguous_gradients": bool,
                          "reduce_scatter": bool, "reduce_bucket_size": int,
                          "allgather_bucket_size": int, "stage3_prefetch_bucket_size": int,
                          "stage3_max_reuse_distance": int},
    "bf16": {"enabled": bool}, "fp16": {"enabled": bool},
    "communication_data_type": ("fp16", "bf16", "fp32"),
    "activation_checkpointing": {"partition_activations": bool, "cpu_checkpointing": bool,
                                 "contiguous_memory_optimization": bool,
                                 "number_checkpoints": int,
                                 "synchronize_checkpoint_boundary": bool, "profile": bool},
}


def check_value(kind, value, where: str) -> None:
    if isinstance(kind, tuple):
        assert value in kind, f"{where}: {value!r} not one of {kind}"
    elif kind is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), where
    else:
        assert isinstance(value, kind) and not (kind is int and isinstance(value, bool)), \
            f"{where}: {value!r} is not {kind.__name__}"
