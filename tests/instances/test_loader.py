"""cost/readers/: bundled files load, unit conversions, plan defaults, and one fixture per error.

Expected numbers are the vendors' datasheet figures converted by hand (see cost/gpus.yaml).
"""

from pathlib import Path

import pytest
import yaml

from paraplan import instances
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.gpus import CATALOGUE_PATH, gpu_from_mapping, load_catalogue
from paraplan.cost.readers.plan_reader import default_layer_split, load_plan, plan_from_mapping
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_writer import plan_to_mapping
from paraplan.cost.specs import GpuSpec, Recompute
from paraplan.cost.plan_specs import Plan

INSTANCES = Path(instances.__file__).parent
BAD = Path(__file__).parent / "bad"
TINY = INSTANCES / "tiny-gpt-8xA100.yaml"

CATALOGUE_NAMES = {"V100-SXM-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB",
                   "H100-SXM5-96GB", "H200-SXM-141GB", "MI300X", "L40S", "B200-SXM-180GB",
                   "GB200-186GB", "GB300-288GB"}

# fixture in tests/instances/bad -> (the dotted field the error must name, a word of the problem).
# Files named plan_* are loaded as plans for TINY; the rest as instances.
BAD_FIXTURES = {
    "malformed_yaml": ("line 6, column 10", "malformed YAML"),
    "empty": ("<file>", "empty"),
    "top_level_list": ("<top level>", "expected a mapping"),
    "section_not_mapping": ("model", "expected a mapping"),
    "duplicate_key": ("line 6, column 3", "duplicate key 'layers'"),
    "missing_key": ("model.layers", "missing required key"),
    "unknown_key": ("cluster.nic_gbps", "did you mean 'nic_gbit_per_s'?"),
    "unknown_gpu_key": ("gpu_types.MyGPU.hbm_gb", "did you mean 'hbm_gib'?"),
    "bool_as_int": ("model.layers", "expected an integer, got the boolean true"),
    "float_as_int": ("cluster.gpus_per_node", "without the decimal point"),
    "string_as_number": ("cluster.nic_gbit_per_s", "remove the quotes"),
    "exponent_string": ("cluster.intra_node_gbytes_per_s", "write 6.0e+2"),  # PyYAML needs the sign
    "null_value": ("cluster.nodes", "expected an integer, got nothing"),
    "nan": ("cluster.intra_node_gbytes_per_s", "not a finite number"),
    "inf": ("cluster.nic_gbit_per_s", "not a finite number"),
    "zero_size": ("model.hidden", "must be >= 1"),
    "negative_bandwidth": ("cluster.intra_node_gbytes_per_s", "must be > 0"),
    "negative_latency": ("cluster.inter_node_latency_us", "must be >= 0"),
    "kv_heads_not_dividing": ("model.kv_heads", "not divisible by kv_heads=6"),
    "hidden_not_divisible": ("model.heads", "hidden=1000 is not divisible by heads=16"),
    "unknown_gpu": ("cluster.gpu", "did you mean 'A100-SXM4-80GB'?"),
    "unknown_enum": ("model.mlp", "unknown value 'relu' (fix: use one of: gelu, swiglu)"),
    "unknown_precision": ("job.precision", "use one of: bf16, fp16, fp8"),
    # cost/releases.py: the known Megatron-core / Megatron-LM / NeMo releases, oldest first
    "unknown_framework_version": ("job.framework_version", "use one of: v1.0, v2.0, v2.6, 23.04,"
                                  " nemo-24.07, core_v0.12.0, core_v0.19.0"),
    "framework_version_of_another_framework": ("job.framework_version", "not a torchtitan release"),
    "gpu_type_clash": ("gpu_types.A100-SXM4-80GB", "clashes with the bundled catalogue"),
    "efficiency_above_one": ("gpu_types.MyGPU.memory_eff", "larger than 1"),
    "absurd_layers": ("model.layers", "absurdly large"),
    "absurd_nodes": ("cluster.nodes", "absurdly large"),
    "search_not_mapping": ("search", "expected a mapping"),
    "plan_gpu_count": ("plan", "tp*pp*dp*cp = 4 but the cluster has 8 GPUs"),
    "plan_layers_sum": ("plan", "layers_per_stage sums to 6"),
    "plan_list_length": ("plan.layers_per_stage", "has 3 entries but pp = 2"),
    "plan_batch_not_divisible": ("plan.num_micro_batches", "not divisible by dp*micro_batch=6"),
    "plan_unknown_key": ("plan.virtual_stage", "did you mean 'virtual_stages'?"),
    "plan_recompute_enum": ("plan.recompute", "use one of: none, selective, full"),
    "plan_zero_range": ("plan.zero", "must be <= 3"),
    "plan_too_many_stages": ("plan.pp", "exceed the model's 8 layers"),
    "plan_recompute_exceeds": ("plan", "recomputed layers <= layers"),
    "plan_sequence_parallel_tp1": ("plan", "sequence_parallel needs tp > 1"),
    "plan_not_mapping": ("plan", "expected a mapping, got a list"),
}


def _load_fixture(path: Path) -> None:
    if path.name.startswith("plan_"):
        load_plan(path, load_instance(TINY))
    else:
        load_instance(path)


def test_every_fixture_has_a_row_and_every_row_a_fixture():
    assert {p.stem for p in BAD.glob("*.yaml")} == set(BAD_FIXTURES)


@pytest.mark.parametrize("stem", sorted(BAD_FIXTURES))
def test_bad_fixture_fails_with_its_message(stem):
    field, keyword = BAD_FIXTURES[stem]
    path = BAD / f"{stem}.yaml"
    with pytest.raises(InstanceError) as info:
        _load_fixture(path)
    err = info.value
    message = str(err)
    assert err.path == str(path)
    assert err.field == field, message
    assert keyword in message
    assert message.startswith(f"{path}: {field}: ")
    assert "(fix: " in message and "\n" not in message


def test_missing_file():
    with pytest.raises(InstanceError, match="not found"):
        load_instance(BAD / "no-such-file.yaml")


def test_directory_instead_of_file():
    with pytest.raises(InstanceError, match="is a directory"):
        load_instance(BAD)


def test_unreadable_bytes(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InstanceError, match="cannot be read"):
        load_instance(path)


def test_yaml_merge_keys_may_override_without_counting_as_duplicates(tmp_path):
    text = TINY.read_text().replace("model:\n", "base: &base {layers: 4}\nmodel:\n  <<: *base\n")
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    with pytest.raises(InstanceError, match="unknown key 'base'"):
        load_instance(path)  # the anchor's own key is rejected, not the '<<' override


@pytest.mark.parametrize("path", sorted(INSTANCES.glob("*.yaml")), ids=lambda p: p.stem)
def test_bundled_instance_loads(path):
    inst = load_instance(path)
    assert inst.name == path.stem
    assert inst.source == str(path)


def test_bundled_instances_are_the_documented_set():
    assert {p.stem for p in INSTANCES.glob("*.yaml")} == {
        "gpt3-175b-1024xA100", "llama3-70b-512xH100", "llama3-405b-16384xH100",
        "llama3-8b-64xH100", "tiny-gpt-8xA100", "small-gpt-16xA100", "llama3-8b-128xH200",
        "gpt3-175b-256xH100", "mixtral-8x7b-64xH100", "qwen3-235b-a22b-256xH100",
        "deepseek-v3-shaped-2048xH800", "deepseek-v3-shaped-1152xGB200"}


def test_catalogue_has_all_types_with_positive_numbers():
    catalogue = load_catalogue()
    assert set(catalogue) == CATALOGUE_NAMES
    for name, gpu in catalogue.items():
        assert gpu.name == name
        assert gpu.peak_flops_per_s > 0 and gpu.hbm_bytes > 0 and gpu.hbm_bw_bytes_per_s > 0
        assert 0 < gpu.matmul_eff_max <= 1 and 0 < gpu.memory_eff <= 1
        assert gpu.matmul_half_flops > 0


def test_catalogue_conversions_from_datasheet_units():
    gpus = load_catalogue(CATALOGUE_PATH)
    h100 = gpus["H100-SXM5-80GB"]
    assert h100.peak_flops_per_s == pytest.approx(989e12)
    assert h100.hbm_bytes == 80 * 2**30
    assert h100.hbm_bw_bytes_per_s == pytest.approx(3.35e12)
    assert h100.matmul_half_flops == pytest.approx(6.05e9)  # matmul_half_gflops: 6.05
    assert gpus["A100-SXM4-40GB"].hbm_bw_bytes_per_s == pytest.approx(1555e9)
    assert gpus["A100-SXM4-80GB"].hbm_bw_bytes_per_s == pytest.approx(2039e9)
    assert gpus["MI300X"].peak_flops_per_s == pytest.approx(1307.4e12)
    # GB300 NVL72: FP16/BF16 360 PFLOPS with sparsity over 72 GPUs, dense half: 2.5 PFLOPS
    # each; FP8 720 / 72 / 2 = 5 PFLOPS; 288 GB HBM3e at 8 TB/s (NVIDIA's Blackwell Ultra blog)
    gb300 = gpus["GB300-288GB"]
    assert gb300.peak_flops_per_s == pytest.approx(360e15 / 72 / 2)
    assert gb300.peak_fp8_flops_per_s == pytest.approx(720e15 / 72 / 2)
    assert gb300.hbm_bytes == 288 * 2**30 and gb300.hbm_bw_bytes_per_s == pytest.approx(8e12)


def test_instance_unit_conversions():
    inst = load_instance(INSTANCES / "llama3-70b-512xH100.yaml")
    c = inst.cluster.one_group
    assert c.intra_node.bw_bytes_per_s == pytest.approx(450e9)  # 900 GB/s both ways, halved
    assert c.inter_node.bw_bytes_per_s == pytest.approx(50e9)  # 400 Gbit/s / 8
    assert c.intra_node.latency_s == pytest.approx(5e-6)  # default 5 us
    assert c.inter_node.latency_s == pytest.approx(10e-6)  # default 10 us
    assert c.gpu.hbm_bytes == 80 * 2**30
    assert c.num_gpus == 512 and c.intra_node_kind == "nvlink"
    assert inst.model.kv_heads == 8 and inst.model.mlp.value == "swiglu"
    assert inst.job.precision.value == "bf16" and inst.job.optimizer.value == "adam"


def _instance_with(tmp_path, extra: dict, **cluster):
    raw = yaml.safe_load(TINY.read_text())
    raw["cluster"].update(cluster)
    raw.update(extra)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_instance_defaults(tmp_path):
    path = _instance_with(tmp_path, {})
    raw = yaml.safe_load(path.read_text())
    del raw["model"]["name"]
    path.write_text(yaml.safe_dump(raw))
    inst = load_instance(path)
    assert inst.model.name == inst.name == "tiny-gpt-8xA100"
    assert inst.model.kv_heads == inst.model.heads  # multi-head attention by default
    assert inst.model.tied_embeddings is False
    assert inst.cluster.one_group.intra_node_kind == "nvlink"


def test_user_gpu_type(tmp_path):
    path = _instance_with(tmp_path, {"gpu_types": {"MyGPU": {
        "peak_tflops_bf16": 100, "hbm_gib": 48, "hbm_gbytes_per_s": 1000, "memory_eff": 0.5}}},
        gpu="MyGPU")
    gpu = load_instance(path).cluster.gpu
    assert gpu.name == "MyGPU"
    assert gpu.peak_flops_per_s == pytest.approx(100e12)
    assert gpu.hbm_bytes == 48 * 2**30
    assert gpu.memory_eff == 0.5
    defaults = GpuSpec(name="d", peak_flops_per_s=1, hbm_bytes=1, hbm_bw_bytes_per_s=1)
    assert gpu.matmul_eff_max == defaults.matmul_eff_max  # absent efficiencies keep the defaults
    assert gpu.matmul_half_flops == defaults.matmul_half_flops


def test_gpu_from_mapping_names_its_prefix():
    with pytest.raises(InstanceError) as info:
        gpu_from_mapping("X", {"peak_tflops_bf16": 1, "hbm_gib": 1}, "f.yaml", "gpu_types.X")
    assert info.value.field == "gpu_types.X.hbm_gbytes_per_s"


def test_search_section_is_parsed_and_validated(tmp_path):
    path = _instance_with(tmp_path, {"search": {"tp": [2, 4], "zero": [0, 1], "recompute": ["none"],
                                                "memory_reserve_gib": 2, "full_recompute": False}})
    space = load_instance(path).search
    assert space.tp == (2, 4) and space.zero == (0, 1) and not space.full_recompute
    assert space.memory_reserve_bytes == 2 * 2**30
    bad = _instance_with(tmp_path, {"search": {"backend": "cp-sat"}})
    with pytest.raises(InstanceError) as info:
        load_instance(bad)
    assert info.value.field == "search.backend"
    bad = _instance_with(tmp_path, {"search": {"zero": [0, 5]}})
    with pytest.raises(InstanceError) as info:
        load_instance(bad)
    assert "search" in info.value.field


@pytest.mark.parametrize("layers, pp, virtual_stages, expected", [
    (80, 4, 1, (20, 20, 20, 20)),
    (10, 4, 1, (2, 3, 3, 2)),  # remainder to the middle stages
    (7, 4, 1, (2, 2, 2, 1)),  # remainder pp-1: the one left over goes to stage 0
    (9, 2, 1, (5, 4)),
    (8, 1, 1, (8,)),
    (30, 4, 3, (6, 9, 9, 6)),  # in chunks of virtual_stages layers
])
def test_default_layer_split(layers, pp, virtual_stages, expected):
    assert default_layer_split(layers, pp, virtual_stages) == expected


def test_default_layer_split_is_balanced_and_the_last_stage_never_heavier():
    for layers in range(1, 41):
        for pp in range(1, layers + 1):
            split = default_layer_split(layers, pp)
            assert sum(split) == layers and max(split) - min(split) <= 1
            assert split[-1] == min(split)


def test_plan_defaults_and_derived_micro_batches():
    inst = load_instance(INSTANCES / "llama3-70b-512xH100.yaml")
    plan = plan_from_mapping({"tp": 8, "pp": 4, "dp": 16, "micro_batch": 1}, inst)
    assert plan.num_micro_batches == 1024 // 16
    assert plan.layers_per_stage == (20, 20, 20, 20)
    assert plan.full_recompute_layers == (0, 0, 0, 0)
    assert (plan.cp, plan.zero, plan.virtual_stages) == (1, 0, 1)
    assert plan.recompute is Recompute.NONE and plan.sequence_parallel is False


def test_plan_uniform_split_with_remainder():
    inst = load_instance(INSTANCES / "llama3-405b-16384xH100.yaml")  # 126 layers
    plan = plan_from_mapping({"tp": 8, "pp": 16, "dp": 128, "micro_batch": 1}, inst)
    assert plan.layers_per_stage == (7,) + (8,) * 14 + (7,)


def test_recompute_full_maps_to_none_plus_every_layer():
    inst = load_instance(TINY)
    plan = plan_from_mapping({"plan": {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                                       "recompute": "full"}}, inst)
    assert plan.recompute is Recompute.NONE
    assert plan.full_recompute_layers == plan.layers_per_stage == (4, 4)
    assert plan_to_mapping(plan)["recompute"] == "full"


def test_recompute_full_with_explicit_layer_counts():
    inst = load_instance(TINY)
    # [2, 2] of [4, 4]: Megatron-LM's --recompute-num-layers 2 (cost/recompute_patterns.py)
    plan = plan_from_mapping({"tp": 2, "pp": 2, "dp": 2, "micro_batch": 2,
                              "recompute": "full", "full_recompute_layers": [2, 2]}, inst)
    assert plan.recompute is Recompute.NONE and plan.full_recompute_layers == (2, 2)


ROUND_TRIP_PLANS = [
    Plan.flat(tp=2, pp=2, dp=2, micro_batch=1, num_micro_batches=16, layers_per_stage=(4, 4),
         full_recompute_layers=(0, 0)),
    # v = 2 chunks of 1 and 3 layers: --recompute-num-layers 1 recomputes 2 on each stage
    Plan.flat(tp=2, pp=2, dp=2, micro_batch=2, num_micro_batches=8, sequence_parallel=True,
         zero=1, virtual_stages=2, layers_per_stage=(2, 6), full_recompute_layers=(2, 2)),
    Plan.flat(tp=1, pp=2, dp=4, micro_batch=1, num_micro_batches=8, layers_per_stage=(5, 3),
         full_recompute_layers=(5, 3)),  # every layer fully recomputed: written as 'full'
    Plan.flat(tp=1, pp=2, dp=4, micro_batch=1, num_micro_batches=8, recompute=Recompute.SELECTIVE,
         layers_per_stage=(5, 3), full_recompute_layers=(5, 3)),  # not 'full': mode differs
]


@pytest.mark.parametrize("plan", ROUND_TRIP_PLANS)
def test_plan_round_trip(plan, tmp_path):
    inst = load_instance(TINY)
    mapping = plan_to_mapping(plan)
    assert plan_from_mapping(mapping, inst) == plan
    for i, document in enumerate((mapping, {"plan": mapping})):
        path = tmp_path / f"plan{i}.yaml"
        path.write_text(yaml.safe_dump(document))
        assert load_plan(path, inst) == plan


def test_plan_error_names_the_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("plan: {tp: 8, pp: 1, dp: 1, micro_batch: 1.0}\n")
    with pytest.raises(InstanceError) as info:
        load_plan(path, load_instance(TINY))
    assert info.value.path == str(path) and info.value.field == "plan.micro_batch"


def test_search_override_is_checked_like_the_files_search():
    """--search tp=3 on 8 GPUs was planned as an empty space ("no plan fits"); it is refused
    naming the value, as `search: {tp: [3]}` in the file is."""
    from paraplan.cost.readers.search import override_search

    inst = load_instance(TINY)
    with pytest.raises(InstanceError) as e:
        override_search(inst, {"tp": [3]}, "<--search>")
    assert e.value.field == "search.tp" and "tp=3" in str(e.value)
    assert override_search(inst, {"tp": [1, 2]}).search.tp == (1, 2)


def _my_gpu(tmp_path, **keys) -> str:
    """An instance on a user GPU type "MyGPU" (100 TFLOP/s, 48 GiB, 1 TB/s) with `keys` added."""
    gpu_type = {"peak_tflops_bf16": 100, "hbm_gib": 48, "hbm_gbytes_per_s": 1000, **keys}
    return _instance_with(tmp_path, {"gpu_types": {"MyGPU": gpu_type}}, gpu="MyGPU")


def test_user_gpu_type_gives_its_cudnn_attention_speedup_within_range(tmp_path):
    # cost/ranges.py: cudnn_attention_speedup lies in 0.5-3 (1.6 on H100); absent, it is 1
    # (no faster cuDNN path priced)
    assert load_instance(_my_gpu(tmp_path)).cluster.gpu.cudnn_attention_speedup == 1.0
    assert load_instance(_my_gpu(tmp_path, cudnn_attention_speedup=1.4)).cluster.gpu.cudnn_attention_speedup == 1.4
    with pytest.raises(InstanceError, match="gpu_types.MyGPU.cudnn_attention_speedup"):
        load_instance(_my_gpu(tmp_path, cudnn_attention_speedup=16))


def test_user_gpu_type_gives_its_cudnn_attention_curve(tmp_path):
    # cudnn_attention_tflops: {keys: TFLOP/s}, read as (keys, FLOP/s) in increasing keys; absent,
    # none (the one speedup holds); a value outside cost/ranges.py's 1-100,000 TFLOP/s, above the
    # GPU's own peak (100 here), a length that is not a whole count, or a list is refused
    # naming the key
    assert load_instance(_my_gpu(tmp_path)).cluster.gpu.cudnn_attention_flops_per_s_by_keys == ()
    gpu = load_instance(_my_gpu(tmp_path, cudnn_attention_tflops={8192: 60, 2048: 30})).cluster.gpu
    assert gpu.cudnn_attention_flops_per_s_by_keys == ((2048, 30e12), (8192, 60e12))
    # a plan file carries the user GPU (instance_to_mapping) and reads back the same curve
    import yaml
    from paraplan.cost.readers.instance import instance_from_mapping
    from paraplan.cost.readers.instance_writer import instance_to_mapping
    inst = load_instance(_my_gpu(tmp_path, cudnn_attention_tflops={8192: 60, 2048: 30}))
    back = instance_from_mapping(yaml.safe_load(yaml.safe_dump(instance_to_mapping(inst))), "p.yaml")
    assert back.cluster.gpu == gpu
    for bad in ({8192: 0}, {8192: 140}, {"8k": 60}, {2048.5: 30}, [[8192, 60]], {}):
        with pytest.raises(InstanceError, match="gpu_types.MyGPU"):
            load_instance(_my_gpu(tmp_path, cudnn_attention_tflops=bad))


def test_user_gpu_type_gives_its_fa2_benchmark_and_a_job_its_attention_kernel(tmp_path):
    # fa2_benchmark_tflops: the speed Transformer Engine's attention runs at (absent: None, the
    # fitted attention_eff holds); above the GPU's own peak it is refused naming the key
    assert load_instance(_my_gpu(tmp_path)).cluster.gpu.fa2_benchmark_flops_per_s is None
    assert load_instance(_my_gpu(tmp_path, fa2_benchmark_tflops=40)).cluster.gpu.fa2_benchmark_flops_per_s == 40e12
    with pytest.raises(InstanceError, match="gpu_types.MyGPU"):
        load_instance(_my_gpu(tmp_path, fa2_benchmark_tflops=140))
    # job.cudnn_attention: true by default (TE's NVTE_FUSED_ATTN=1); false only under megatron
    assert load_instance(TINY).job.cudnn_attention is True
    path = _instance_with(tmp_path, {"job": {"global_batch": 16, "cudnn_attention": False}})
    assert load_instance(path).job.cudnn_attention is False
    path = _instance_with(tmp_path, {"job": {"global_batch": 16, "cudnn_attention": False,
                                             "framework": "torchtitan"}})
    with pytest.raises(InstanceError, match="cudnn_attention"):
        load_instance(path)
