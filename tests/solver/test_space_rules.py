"""The declared space (solver/space.py, a homogeneous instance as one group): it holds every published configuration, its
micro-batch cap comes from a memory lower bound, and it follows each framework's rules."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from paraplan.cost.calibration import load_rows, row_to_instance_plan
from paraplan.cost.errors import InstanceError
from paraplan.cost.framework_rules import release_space
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.readers.instance import load_instance, load_instance_parts
from paraplan.cost.specs import (Cluster, Attention, NodeGroup, Framework, GpuSpec, Instance, JobSpec, Link,
                        ModelSpec, Recompute, SearchSpace)
from paraplan.cost.plan_specs import ClassShape
from paraplan.solver.space import micro_batch_values
from paraplan.solver.space import one_group_outers as outer_configs

CALIBRATION = Path(__file__).resolve().parents[3] / "shared" / "calibration"
FILES = ("published.yaml", "published-fp8.yaml")


def _rows():
    if not CALIBRATION.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"{CALIBRATION} is absent: the published rows live outside this repository"))]
    catalogue = load_catalogue()
    out = []
    for name in FILES:
        for row in load_rows(str(CALIBRATION / name)):
            out.append(pytest.param(row_to_instance_plan(row, catalogue), id=row["id"]))
    return out


def row_ran_by_id(row_id: str):
    from paraplan.cost.calibration import load_published, row_ran
    return row_ran(next(r for r in load_published() if r["id"] == row_id))


def _modulo_flash(inst: Instance, outer):
    # With FlashAttention no score matrix is stored, so the base modes `none` and `selective`
    # cost exactly the same and the space keeps only the first one listed (solver/space.py);
    # row_to_instance_plan maps a published 'selective' to Recompute.SELECTIVE. The two are one
    # configuration to the cost model, so outers are compared with that field identified.
    if inst.job.attention is Attention.FLASH:
        return dataclasses.replace(outer, recompute=Recompute.NONE)
    return outer


@pytest.mark.parametrize("inst_plan", _rows())
def test_published_outer_is_in_the_default_space(inst_plan):
    # the space of the run's own framework release (cost/framework_rules.release_space: the
    # whole default space for a row that states no release) holds what the run ran
    inst, plan = inst_plan
    ran = row_ran_by_id(inst.name)
    assert inst.search == release_space(ran.framework, ran.release_year, ran.release_month)
    assert ran.release_year is not None or inst.search == SearchSpace()
    space = {_modulo_flash(inst, o) for o in outer_configs(inst)}
    assert _modulo_flash(inst, plan.flat_outer) in space


# --- the micro-batch cap from memory ---------------------------------------------------------

def _one_gpu(hbm_mib: float, framework=Framework.MEGATRON, **search) -> Instance:
    model = ModelSpec(name="m", layers=2, hidden=1024, heads=8, kv_heads=8, ffn=4096, vocab=1000,
                      seq_len=1024)
    gpu = GpuSpec(name="toy", peak_flops_per_s=1e14, hbm_bytes=hbm_mib * 2**20,
                  hbm_bw_bytes_per_s=1e12)
    link = Link(bw_bytes_per_s=1e11, latency_s=1e-6)
    cluster = NodeGroup(gpu=gpu, nodes=1, gpus_per_node=1, intra_node=link, inter_node=link)
    return Instance(name="one-gpu", model=model, cluster=Cluster.of(cluster),
                    job=JobSpec(global_batch=8, framework=framework),
                    # a GPU of about 1 GiB, derived by hand below: no planning reserve
                    search=SearchSpace(**{"memory_reserve_bytes": 0.0, **search}))


# Hand derivation, 1 GPU (tp = pp = dp = cp = 1, so ZeRO-0 and no sequence parallel), s = 1024,
# h = 1024, ffn 4096 (GELU), vocab 1000, 2 layers; MiB = 2**20 bytes:
#   layer params = h(h + 2h) + h^2 + 2hf + 2h = 12,584,960; state 18 B/param = 216.035 MiB
#   ckpt(b)      = 2 b s h              = 2 b MiB
#   workspace(b) = 2 * 2 b s max(f, 3h) = 16 b MiB
#   logits(b)    = b s V (2 + 4)        = 5.859 b MiB
#   runtime      = 512 MiB CUDA context, no NCCL communicator (every degree is 1)
#   f            = 1.05 (allocator fragmentation on transient and activation bytes)
#   LB(b) = 512 + 1.05*16b + max(1.05*5.859b + 216.035 + 1.05*2b,  2 (216.035 + 1.05*2b))
#         = 944.07 + 21 b MiB for b <= 53 (the fullest stage, both layers, dominates)
#   b = 1: 965.07, 2: 986.07, 4: 1028.07, 8: 1112.07 MiB.
# With 1100 MiB of HBM the divisors 1, 2, 4 of the batch 8 stay and 8 goes.
def test_micro_batch_cap_from_memory_lower_bound():
    inst = _one_gpu(1100)
    one = (ClassShape(replicas=1, stage_groups=(0,)),)  # tp = pp = dp = cp = 1
    assert micro_batch_values(inst, {0: 1}, 1, one) == [1, 2, 4]
    assert sorted({o.micro_batch for o in outer_configs(inst)}) == [1, 2, 4]
    assert sorted({o.micro_batch for o in outer_configs(_one_gpu(1120))}) == [1, 2, 4, 8]


def test_max_micro_batch_narrows_and_the_smallest_always_stays():
    assert sorted({o.micro_batch for o in outer_configs(_one_gpu(1600, max_micro_batch=2))}) == [1, 2]
    # 900 MiB is below LB(1) = 965 MiB: no plan fits, but micro-batch 1 is kept so that the
    # planner reports the memory need rather than an empty space
    assert sorted({o.micro_batch for o in outer_configs(_one_gpu(900))}) == [1]


def test_no_fixed_caps_by_default():
    s = SearchSpace()
    assert (s.max_micro_batch, s.max_pp, s.max_cp, s.virtual_stages) == (None, None, None, None)


# --- framework rules ------------------------------------------------------------------------

def _eight_gpus(framework: Framework) -> Instance:
    """tiny-gpt (8 layers, 16 heads, seq 1024) on one 8-GPU node, batch 32."""
    inst = load_instance(Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml")
    return dataclasses.replace(inst, job=dataclasses.replace(inst.job, framework=framework),
                               search=SearchSpace(micro_batch=(1,)))


def test_megatron_rules():
    outs = outer_configs(_eight_gpus(Framework.MEGATRON))
    assert all(o.pp == 1 for o in outs if o.zero >= 2)  # FSDP2 path: no pipeline
    assert {o.zero for o in outs if o.pp > 1} == {0, 1}  # distributed optimizer with any pp
    assert any(o.cp > 1 for o in outs) and any(o.virtual_stages > 1 for o in outs)
    assert {o.sequence_parallel for o in outs if o.tp > 1} == {False, True}


def test_deepspeed_rules():
    outs = outer_configs(_eight_gpus(Framework.DEEPSPEED))
    assert {o.zero for o in outs if o.pp == 1} == {0, 1, 2, 3}
    assert {o.zero for o in outs if o.pp > 1} == {0, 1}  # PipelineEngine: ZeRO < 2
    assert all(o.cp == 1 and o.virtual_stages == 1 for o in outs)


def test_torchtitan_rules():
    outs = outer_configs(_eight_gpus(Framework.TORCHTITAN))
    assert 1 not in {o.zero for o in outs}
    # FSDP inside a pipeline is ZeRO-3 (gathered once per step, cost/memory.gathered_per_step);
    # ZeRO-2 ("never" resharding) with pp > 1 runs the same steps and is not offered twice
    assert all(o.pp == 1 for o in outs if o.zero == 2)
    assert any(o.pp > 1 and o.dp > 1 for o in outs if o.zero == 3)
    assert all(o.sequence_parallel for o in outs if o.tp > 1)
    # DDP (ZeRO-0 over several ranks) only as the sole parallelism
    assert all(o.tp == o.pp == o.cp == 1 for o in outs if o.zero == 0 and o.dp * o.cp > 1)
    assert any(o.cp > 1 for o in outs) and any(o.virtual_stages > 1 for o in outs)


def test_composer_rules():
    outs = outer_configs(_eight_gpus(Framework.COMPOSER))
    # data parallel only: 8 GPUs -> dp = 8; FSDP NO_SHARD / SHARD_GRAD_OP / FULL_SHARD
    assert {(o.tp, o.pp, o.cp, o.dp, o.virtual_stages, o.sequence_parallel) for o in outs} == \
        {(1, 1, 1, 8, 1, False)}
    assert sorted(o.zero for o in outs) == [0, 2, 3]


def test_default_virtual_stages_are_every_even_chunking():
    # 8 layers, pp = 2, 16 micro-batches (batch 32 / dp, micro-batch 1; a multiple of pp):
    # v | 8 and 2v <= 8 -> v in {1, 2, 4}; Megatron-core (current release) may count the
    # embedding and/or loss as a layer slot: v | 9 with 2v <= 9 adds 3, v | 10 with 2v <= 10 adds 5
    outs = outer_configs(_eight_gpus(Framework.MEGATRON))
    assert {o.virtual_stages for o in outs if o.pp == 2 and o.dp == 1} == {1, 2, 3, 4, 5}
    # the slots each v needs: 3 one (either), 5 both; 2 none or both (8 or 10 slots), 4 none
    modes = {(o.virtual_stages, o.embedding_in_split, o.loss_in_split) for o in outs if o.pp == 2}
    assert {m for m in modes if m[0] in (3, 5)} == {(3, True, False), (3, False, True), (5, True, True)}
    assert {m for m in modes if m[0] == 2} == {(2, False, False), (2, True, True)}
    assert {m for m in modes if m[0] == 4} == {(4, False, False)}
    # pp = 8: 8 layers (10 slots) -> one layer per stage, v = 1 only
    assert {o.virtual_stages for o in outs if o.pp == 8} == {1}


# --- load-time refusals ---------------------------------------------------------------------

TINY = yaml.safe_load((Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml").read_text())


def _write(tmp_path, framework: str, search: dict) -> Path:
    data = dict(TINY, job=dict(TINY["job"], framework=framework), search=search)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("framework, search, field", [
    ("deepspeed", {"cp": [1, 2]}, "search.cp"),
    ("deepspeed", {"zero": [3], "pp": [2, 4]}, "search.zero"),
    ("megatron", {"zero": [0, 2], "pp": [2]}, "search.zero"),
    ("deepspeed", {"virtual_stages": [1, 2]}, "search.virtual_stages"),
    ("torchtitan", {"zero": [1]}, "search.zero"),
    ("torchtitan", {"tp": [2, 4], "sequence_parallel": [False]}, "search.sequence_parallel"),
    ("composer", {"tp": [1, 2]}, "search.tp"),
    ("composer", {"pp": [2]}, "search.pp"),
    ("composer", {"sequence_parallel": [True]}, "search.sequence_parallel"),
])
def test_unrunnable_search_value_is_refused(tmp_path, framework, search, field):
    path = _write(tmp_path, framework, search)
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    assert info.value.field == field and framework in info.value.problem
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("framework, search", [
    ("deepspeed", {"zero": [3], "pp": [1, 2]}),  # ZeRO-3 runs with pp = 1: filtered, not refused
    ("torchtitan", {"sequence_parallel": [False]}),  # fine with tp = 1
    ("composer", {"zero": [0, 2, 3]}),
])
def test_runnable_search_values_load(tmp_path, framework, search):
    inst = load_instance(_write(tmp_path, framework, search))
    assert outer_configs(inst)


def test_refusal_uses_the_framework_of_the_job_file(tmp_path):
    # the instance's search lists cp 2 (fine under its default megatron); a job file that
    # switches to deepspeed makes it unrunnable, and the error names the instance file
    inst_path = _write(tmp_path, "megatron", {"cp": [1, 2]})
    load_instance(inst_path)
    job_path = tmp_path / "job.yaml"
    job_path.write_text(yaml.safe_dump({"job": dict(TINY["job"], framework="deepspeed")}))
    with pytest.raises(InstanceError) as info:
        load_instance_parts(inst_path, hf_config=None, cluster=None, job=job_path)
    assert info.value.path == str(inst_path) and info.value.field == "search.cp"


def test_unfused_attention_has_no_context_parallelism(tmp_path):
    # Megatron-core's unfused DotProductAttention asserts "Context parallelism is only supported
    # by TEDotProductAttention!": with attention: standard the default space keeps cp = 1 (the
    # SC'21 530B workload on 560 A100s re-planned to tp 2, cp 4 before), and a listed cp > 1 is
    # refused with the fix.
    inst = _eight_gpus(Framework.MEGATRON)
    flash_cps = {o.cp for o in outer_configs(inst)}
    std = dataclasses.replace(inst, job=dataclasses.replace(inst.job, attention=Attention.STANDARD))
    assert flash_cps > {1} and {o.cp for o in outer_configs(std)} == {1}
    data = dict(TINY, job=dict(TINY["job"], attention="standard"), search={"cp": [1, 2]})
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    assert info.value.field == "search.cp" and "attention: flash" in str(info.value)


def test_pp_beyond_the_layers_is_refused_on_node_groups_too(tmp_path):
    # the several-group row of SEARCH_RULES' pp (_group_pp_rule): tiny-2types' model has 8
    # layers (its model section), so a listed pp of 16 leaves a stage without a layer
    path = Path(__file__).resolve().parents[2] / "instances" / "mixed" / "tiny-2types.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["model"]["layers"] == 8
    out = tmp_path / "inst.yaml"
    out.write_text(yaml.safe_dump(dict(data, search=dict(data.get("search") or {}, pp=[2, 16]))))
    with pytest.raises(InstanceError) as info:
        load_instance(out)
    assert info.value.field == "search.pp" and "pp=16 stages exceed the model's 8 layers" in str(info.value)
