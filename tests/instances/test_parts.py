"""cost/readers/instance.py `load_instance_parts` and solver/commands/inputs.py: instances assembled from an
instance file, a Hugging Face config, a cluster file and a job file; overrides; and errors that
name the file they come from.
"""

import argparse
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paraplan import instances
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import load_instance, load_instance_parts
from paraplan.cost.specs import SearchSpace
from paraplan.solver.commands.inputs import add_instance_args, read_instance

INSTANCES = Path(instances.__file__).parent
CLUSTERS = INSTANCES / "clusters"
JOBS = INSTANCES / "jobs"
HF = Path(__file__).resolve().parents[1] / "data" / "hf"

TINY = INSTANCES / "tiny-gpt-8xA100.yaml"
H200 = CLUSTERS / "h200-16nodes.yaml"
DGX_H100 = CLUSTERS / "dgx-h100-32nodes.yaml"
DGX_A100 = CLUSTERS / "dgx-a100-16nodes.yaml"
JOB_4M = JOBS / "pretrain-4m-tokens.yaml"
JOB_GPT3 = JOBS / "gpt3-3m-tokens.yaml"
LLAMA3_8B = HF / "llama-3-8b"


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_bundled_part_files_are_the_documented_set():
    assert {p.name for p in CLUSTERS.glob("*.yaml")} == {
        "dgx-a100-16nodes.yaml", "dgx-h100-32nodes.yaml", "h200-16nodes.yaml", "v100-8x4.yaml"}
    assert {p.name for p in JOBS.glob("*.yaml")} == {
        "pretrain-4m-tokens.yaml", "pretrain-16m-tokens.yaml", "gpt3-3m-tokens.yaml"}


@pytest.mark.parametrize("cluster", sorted(CLUSTERS.glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("job", sorted(JOBS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_cluster_and_job_file_combines(cluster, job):
    inst = load_instance_parts(None, hf_config=LLAMA3_8B, cluster=cluster, job=job)
    assert inst.cluster.num_gpus == 128 if "16nodes" in cluster.name else 256
    assert inst.source == f"{LLAMA3_8B} + {cluster} + {job}"


def test_parts_alone_rebuild_the_bundled_llama3_8b_on_h200():
    inst = load_instance_parts(None, hf_config=LLAMA3_8B, cluster=H200, job=JOB_4M)
    bundled = load_instance(INSTANCES / "llama3-8b-128xH200.yaml")
    # Only the names differ: the HF model is named after its directory.
    assert inst.model == replace(bundled.model, name="llama-3-8b")
    assert inst.cluster == bundled.cluster and inst.job == bundled.job
    assert inst.search == bundled.search == SearchSpace()
    assert inst.name == "llama-3-8b-128xH200-SXM-141GB"
    assert inst.job.global_batch * inst.model.seq_len == 4 * 2**20  # 512 x 8192: 4M tokens


def test_cluster_and_job_files_override_the_instance_file():
    # GPT-3 175B moved from 1,024 A100s to 256 H100s is the bundled gpt3-175b-256xH100.
    inst = load_instance_parts(INSTANCES / "gpt3-175b-1024xA100.yaml", hf_config=None,
                               cluster=DGX_H100, job=JOB_GPT3)
    bundled = load_instance(INSTANCES / "gpt3-175b-256xH100.yaml")
    assert (inst.model, inst.cluster, inst.job) == (bundled.model, bundled.cluster, bundled.job)
    assert inst.name == "gpt3-175b-1024xA100"  # the instance file's name is kept
    assert inst.source == (f"{INSTANCES / 'gpt3-175b-1024xA100.yaml'} + {DGX_H100} + {JOB_GPT3}")


def test_hf_config_overrides_the_instance_model():
    inst = load_instance_parts(TINY, hf_config=HF / "gpt2", cluster=None, job=None)
    assert (inst.model.name, inst.model.layers, inst.model.hidden) == ("gpt2", 12, 768)
    assert inst.cluster == load_instance(TINY).cluster


def test_seq_len_overrides_either_model():
    assert load_instance_parts(TINY, hf_config=None, cluster=None, job=None,
                               seq_len=2048).model.seq_len == 2048
    inst = load_instance_parts(None, hf_config=HF / "bloom-560m", cluster=DGX_A100, job=JOB_4M,
                               seq_len=2048)
    assert inst.model.seq_len == 2048 and inst.model.vocab == 250880


def test_without_parts_it_is_load_instance():
    assert load_instance_parts(TINY, hf_config=None, cluster=None, job=None) == load_instance(TINY)


def test_instance_file_may_leave_out_the_sections_parts_give(tmp_path):
    raw = yaml.safe_load(TINY.read_text())
    del raw["cluster"], raw["job"]
    raw["search"] = {"tp": [1, 2]}
    path = write_yaml(tmp_path / "model-only.yaml", raw)
    inst = load_instance_parts(path, hf_config=None, cluster=DGX_A100, job=JOB_4M)
    assert inst.cluster.num_gpus == 128 and inst.job.global_batch == 512
    assert inst.search.tp == (1, 2)  # the job file has no search: the instance file's is kept
    with pytest.raises(InstanceError) as info:
        load_instance_parts(path, hf_config=None, cluster=None, job=JOB_4M)
    assert info.value.path == str(path) and info.value.field == "cluster"
    assert "missing required key 'cluster'" in str(info.value)


def test_job_file_search_replaces_the_instance_search(tmp_path):
    raw = yaml.safe_load(TINY.read_text())
    raw["search"] = {"tp": [1, 2]}
    inst_path = write_yaml(tmp_path / "inst.yaml", raw)
    job = write_yaml(tmp_path / "job.yaml", {"job": {"global_batch": 64},
                                             "search": {"zero": [0, 1], "memory_reserve_gib": 1}})
    inst = load_instance_parts(inst_path, hf_config=None, cluster=None, job=job)
    assert inst.search.tp is None and inst.search.zero == (0, 1)
    assert inst.search.memory_reserve_bytes == 2**30
    assert inst.job.global_batch == 64


def test_cluster_file_with_its_own_gpu_type(tmp_path):
    cluster = write_yaml(tmp_path / "c.yaml", {
        "gpu_types": {"MyGPU": {"peak_tflops_bf16": 100, "hbm_gib": 48, "hbm_gbytes_per_s": 1000}},
        "cluster": {"gpu": "MyGPU", "nodes": 2, "gpus_per_node": 4,
                    "intra_node_gbytes_per_s": 64, "intra_node_link": "pcie", "nic_gbit_per_s": 100}})
    inst = load_instance_parts(TINY, hf_config=None, cluster=cluster, job=None)
    assert inst.cluster.gpu.name == "MyGPU" and inst.cluster.num_gpus == 8
    assert inst.cluster.one_group.intra_node_kind == "pcie"


# --- errors name the file they come from ---------------------------------------------------

def refusal(**kw) -> InstanceError:
    kw.setdefault("hf_config", None)
    kw.setdefault("cluster", None)
    kw.setdefault("job", None)
    instance = kw.pop("instance", TINY)
    with pytest.raises(InstanceError) as info:
        load_instance_parts(instance, **kw)
    assert "\n" not in str(info.value) and "(fix: " in str(info.value)
    return info.value


def test_error_in_the_cluster_file_names_the_cluster_file(tmp_path):
    raw = yaml.safe_load(DGX_A100.read_text())
    raw["cluster"]["nic_gbps"] = raw["cluster"].pop("nic_gbit_per_s")
    cluster = write_yaml(tmp_path / "cluster.yaml", raw)
    err = refusal(cluster=cluster)
    assert err.path == str(cluster) and err.field == "cluster.nic_gbps"
    assert str(err).startswith(f"{cluster}: cluster.nic_gbps: unknown key")


def test_cluster_file_errors(tmp_path):
    wrong_section = write_yaml(tmp_path / "c1.yaml", {"job": {"global_batch": 8}})
    err = refusal(cluster=wrong_section)
    assert (err.path, err.field) == (str(wrong_section), "job")
    no_section = write_yaml(tmp_path / "c2.yaml", {"gpu_types": {}})
    err = refusal(cluster=no_section)
    assert (err.path, err.field) == (str(no_section), "cluster")
    unknown_gpu = write_yaml(tmp_path / "c3.yaml", {"cluster": {
        "gpu": "H100", "nodes": 1, "gpus_per_node": 8, "intra_node_gbytes_per_s": 900,
        "nic_gbit_per_s": 400}})
    err = refusal(cluster=unknown_gpu)
    assert (err.path, err.field) == (str(unknown_gpu), "cluster.gpu")
    clash = write_yaml(tmp_path / "c4.yaml", {"gpu_types": {"L40S": {
        "peak_tflops_bf16": 1, "hbm_gib": 1, "hbm_gbytes_per_s": 1}},
        "cluster": yaml.safe_load(DGX_A100.read_text())["cluster"]})
    err = refusal(cluster=clash)
    assert (err.path, err.field) == (str(clash), "gpu_types.L40S")


def test_cluster_file_is_self_contained(tmp_path):
    # A GPU defined in the instance file's gpu_types is not visible from a cluster file.
    raw = yaml.safe_load(TINY.read_text())
    raw["gpu_types"] = {"MyGPU": {"peak_tflops_bf16": 100, "hbm_gib": 48, "hbm_gbytes_per_s": 1000}}
    inst_path = write_yaml(tmp_path / "inst.yaml", raw)
    cluster_raw = yaml.safe_load(DGX_A100.read_text())
    cluster_raw["cluster"]["gpu"] = "MyGPU"
    cluster = write_yaml(tmp_path / "cluster.yaml", cluster_raw)
    err = refusal(instance=inst_path, cluster=cluster)
    assert (err.path, err.field) == (str(cluster), "cluster.gpu")


def test_error_in_the_job_file_names_the_job_file(tmp_path):
    job = write_yaml(tmp_path / "job.yaml", {"job": {"global_batch": 0}})
    err = refusal(job=job)
    assert (err.path, err.field) == (str(job), "job.global_batch")
    job = write_yaml(tmp_path / "job2.yaml", {"job": {"global_batch": 8}, "search": {"tp": []}})
    err = refusal(job=job)
    assert (err.path, err.field) == (str(job), "search.tp")
    job = write_yaml(tmp_path / "job3.yaml", {"job": {"global_batch": 8}, "name": "x"})
    err = refusal(job=job)
    assert (err.path, err.field) == (str(job), "name")


def test_error_in_the_hf_config_names_the_hf_config(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}')
    err = refusal(hf_config=config)
    assert err.path == str(config) and "num_hidden_layers" in err.field


def test_overridden_sections_are_still_checked(tmp_path):
    raw = yaml.safe_load(TINY.read_text())
    raw["cluster"]["nodes"] = 0
    inst_path = write_yaml(tmp_path / "inst.yaml", raw)
    err = refusal(instance=inst_path, cluster=DGX_A100)
    assert (err.path, err.field) == (str(inst_path), "cluster.nodes")


def test_missing_file_part():
    err = refusal(cluster=CLUSTERS / "no-such-cluster.yaml")
    assert err.path == str(CLUSTERS / "no-such-cluster.yaml") and "not found" in err.problem


def test_incomplete_parts_without_an_instance():
    err = refusal(instance=None, hf_config=LLAMA3_8B, cluster=H200)
    assert (err.path, err.field) == ("<arguments>", "job")
    assert refusal(instance=None).field == "hf_config, cluster, job"
    assert refusal(seq_len=0).field == "seq_len"


# --- solver/commands/inputs.py ----------------------------------------------------------------------

def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_instance_args(parser)
    return parser.parse_args([str(a) for a in argv])


def test_args_with_an_instance_only():
    args = parse(TINY)
    assert read_instance(args) == load_instance(TINY)


def test_args_with_parts_only():
    args = parse("--hf-config", LLAMA3_8B, "--cluster", H200, "--job", JOB_4M, "--seq-len", "4096")
    inst = read_instance(args)
    assert inst.model.seq_len == 4096 and inst.cluster.num_gpus == 128


def test_args_with_an_instance_and_an_override():
    inst = read_instance(parse(TINY, "--cluster", DGX_A100))
    assert inst.name == "tiny-gpt-8xA100" and inst.cluster.num_gpus == 128


@pytest.mark.parametrize("argv, field, words", [
    ((), "INSTANCE", "no instance given"),
    (("--cluster", H200), "--hf-config, --job", "no INSTANCE, and --hf-config, --job missing"),
    ((TINY, "--seq-len", "8k"), "--seq-len", "expected an integer"),
    ((TINY, "--seq-len", "-1"), "--seq-len", "must be >= 1"),
])
def test_args_refused_in_one_line(argv, field, words):
    with pytest.raises(InstanceError) as info:
        read_instance(parse(*argv))
    err = info.value
    assert (err.path, err.field) == ("<arguments>", field)
    assert words in str(err) and "\n" not in str(err)
