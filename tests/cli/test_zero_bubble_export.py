"""`export --to torchtitan` writes the fastest schedule torch runs for the plan's split
(cost/torch_schedules.py): a zero-bubble one where it fits, named as torchtitan 0.2's
pipeline_parallel_schedule takes it, with ZBVZeroBubble's model chunks placed as its V."""

import dataclasses
import tomllib

import pytest

from bundled_plans import bundled_instance, bundled_optimum, same_worker
from export_support import GOLDENS, ROOT, llama405_v2, zbv_split
from paraplan.cost.specs import Instance
from paraplan.cost.readers.instance import load_instance
from paraplan.cost.readers.plan_reader import plan_from_mapping
from paraplan.cost.torch_schedules import schedule_prices
from paraplan.solver.export import to_torchtitan

def golden(instance: str):
    inst = load_instance(ROOT / instance)
    return inst, plan_from_mapping(GOLDENS[f"{instance}:nominal"]["plan"], inst)


def layers_of(part: list[str]) -> list[int]:
    return [int(x.split(".")[1]) for x in part if x.startswith("layers.")]


def test_llama3_405b_v2_plan_exports_interleaved_zero_bubble():
    # the pre-slots optimum (export_support.LLAMA405_V2_PLAN) puts the output layer's stage at 2
    # layers: under ZBV's V rank 0 would hold the output beside 4 layers and pace the pipeline;
    # the interleaved zero-bubble schedule wins
    inst, plan = llama405_v2()
    par = tomllib.loads(to_torchtitan(inst, plan).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "InterleavedZeroBubble"


def test_llama3_405b_exports_zbv_with_its_chunks_as_a_v():
    # pp 32, v 2, 128 micro-batches >= 2 pp - 1: ZBV runs; rank s holds chunks s and 63 - s; on
    # the split shaped for the V (2 layers on stage 0, 4 on the last) it is the fastest
    inst, plan = llama405_v2()
    plan = zbv_split(plan)
    res = to_torchtitan(inst, plan)
    par = tomllib.loads(res.text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "ZBVZeroBubble"
    parts = par["module_fqns_per_model_part"]
    pp, n = plan.pp, res.emitted.plan.layers_per_stage
    assert len(parts) == 2 * pp
    # every layer once, in order along the chunks
    assert sum((layers_of(p) for p in parts), []) == list(range(inst.model.layers))
    for k, part in enumerate(parts):
        stage = k if k < pp else 2 * pp - 1 - k
        assert len(layers_of(part)) == n[stage] // 2
    # rank 0 holds the first chunk (embedding) and the last (norm, output: the loss on rank 0)
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    note = next(x for x in res.emitted.notes if x.startswith("pipeline_parallel_schedule"))
    assert "ZBVZeroBubble" in note and "Interleaved1F1B" in note and "torch.compile" in note


def test_llama3_70b_exports_interleaved_zero_bubble():
    # pp 4, v 10 (v 5 with [1, 0, 0, 0] recomputed before Megatron's one N was the rule): ZBV
    # needs exactly 2 stages per rank, so the interleaved zero-bubble schedule; 2 layers a chunk
    inst, plan = golden("instances/llama3-70b-512xH100.yaml")
    par = tomllib.loads(to_torchtitan(inst, plan).text)["parallelism"]
    assert plan.virtual_stages == 10
    assert par["pipeline_parallel_schedule"] == "InterleavedZeroBubble"
    assert [layers_of(p)[0] for p in par["module_fqns_per_model_part"]][:2] == [0, 2]


def test_one_stage_per_rank_keeps_1f1b():
    # torchtitan builds its multi-stage (zero-bubble) schedules with two stages per rank or more
    inst, plan = golden("instances/llama3-70b-512xH100.yaml")
    plan = dataclasses.replace(plan, virtual_stages=1)
    par = tomllib.loads(to_torchtitan(inst, plan).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "1F1B"


def test_where_no_schedule_fits_the_planned_one_is_written():
    # a reserve that leaves less than the plan's own peak: no schedule fits its split, so the
    # export writes the schedule the plan was priced with (its gate then refuses the file)
    inst, plan = llama405_v2()
    reserve = inst.cluster.gpu.hbm_bytes - 20 * 1024**3  # 20 GiB usable: its peaks are 32 to 47 GiB
    tight = dataclasses.replace(inst, search=dataclasses.replace(inst.search, memory_reserve_bytes=reserve))
    assert not any(p.fits for p in schedule_prices(tight, plan, reserve_bytes=reserve))
    par = tomllib.loads(to_torchtitan(tight, plan).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"


# --- the framework's own parser (skipped where torchtitan is not importable) -------------------

# every bundled one-group instance's golden plan (a mixed cluster's is refused before export)
BUNDLED = sorted(k.split(":")[0] for k in GOLDENS if "/mixed/" not in k)


@pytest.mark.framework
@pytest.mark.parametrize("instance", BUNDLED)
def test_torchtitan_parses_the_schedule_and_builds_its_stages(instance, tmp_path):
    config = pytest.importorskip("torchtitan.config")
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    from paraplan.solver.export import ExportRefused
    inst, plan = golden(instance)
    try:
        text = to_torchtitan(inst, plan).text
    except ExportRefused:
        return  # a model torchtitan has no layers for (test_exports_round2 checks the refusal)
    path = tmp_path / "job.toml"
    path.write_text(text)
    par = config.ConfigManager().parse_args(["--job.config_file", str(path)]).parallelism
    if par.pipeline_parallel_degree == 1:
        return
    cls = get_schedule_class(par.pipeline_parallel_schedule)
    per_rank = len(par.module_fqns_per_model_part) // par.pipeline_parallel_degree
    # torchtitan's pipeline_llm: single-stage schedules one stage per rank, others two or more
    assert per_rank == 1 if issubclass(cls, PipelineScheduleSingle) else per_rank >= 2


def test_the_proof_names_the_schedules_it_leaves_out_for_torchtitan(tmp_path):
    import yaml

    from paraplan.solver.space import ZERO_BUBBLE_NOT_COVERED, not_covered
    raw = yaml.safe_load((ROOT / "instances" / "llama3-8b-64xH100.yaml").read_text())
    assert raw["job"].get("framework", "megatron") == "megatron"
    megatron = load_instance(ROOT / "instances" / "llama3-8b-64xH100.yaml")
    assert ZERO_BUBBLE_NOT_COVERED not in not_covered(megatron)
    raw["job"]["framework"] = "torchtitan"
    path = tmp_path / "tt.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert ZERO_BUBBLE_NOT_COVERED in not_covered(load_instance(path))


@pytest.mark.slow
@same_worker("llama3-70b-512xH100")  # its optimum is test_zero_bubble_planning's too
def test_llama3_70b_planned_for_torchtitan_exports_as_planned():
    """Issue 34: planned for torchtitan on 512 H100, the optimum recomputed one layer on stage 0
    only ([1, 0, 0, 0] of [20, 20, 20, 20]), which torchtitan cannot run, so its export was
    refused as planned (mode "full", 25% slower). The planner now offers only counts torchtitan
    runs (cost/recompute_patterns.py: every k-th block of a rank), so the optimum exports with
    no deviation and its activation_checkpoint section gives the planned counts."""
    from paraplan.cost.recompute_patterns import RecomputePattern, runs
    inst = bundled_instance("llama3-70b-512xH100", torchtitan=True)  # job.framework torchtitan
    res = bundled_optimum("llama3-70b-512xH100", "dp", torchtitan=True)  # solve(inst)
    p = res.plan
    assert runs(RecomputePattern.EVERY_KTH, [p.layers_per_stage], [p.full_recompute_layers], p.virtual_stages)
    out = to_torchtitan(inst, p)
    assert out.unsupported == []
    ac = tomllib.loads(out.text)["activation_checkpoint"]
    n, r = p.layers_per_stage, p.full_recompute_layers
    if ac["mode"] == "none":
        assert not any(r)
    elif ac["mode"] == "full":
        assert r == n
    else:  # every k-th block of a rank: floor(n_s / k) on stage s
        k = int(ac["selective_ac_option"])
        assert tuple(x // k for x in n) == r
