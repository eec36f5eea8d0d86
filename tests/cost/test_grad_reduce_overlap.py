"""Megatron-LM's data-parallel gradient reduction as its release ran it (cost/framework.
grad_reduce_overlaps): after the backward before --overlap-grad-reduce (commit 2d5220a424,
2023-08-16), except through torch DDP, which Megatron-LM ran only with pp = 1, one model chunk
and no sharded optimizer (megatron/training.py at v2.6: local DDP asserted for pp > 1 or several
chunks).

Expected values are the release dates of cost/releases.py (v2.0 2021-01, 23.04 2023-05,
core_v0.12.0 2025-05) against that commit's date, and hand-built plans.
"""

from pathlib import Path

import pytest
import yaml

from paraplan.cost.calibration import load_published, row_to_instance_plan
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.framework import grad_reduce_overlaps
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.plan_specs import Plan
from paraplan.cost.simulate import simulate
from paraplan.cost.specs import Framework, JobSpec, Optimizer

TINY = Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml"


def _job(version=None, **kw):
    return JobSpec(global_batch=32, framework_version=version, **kw)


@pytest.mark.parametrize("job, pp, v, zero, want", [
    (_job("v2.0"), 2, 1, 0, False),  # pipelined: local DDP, reduced after the backward
    (_job("v2.0"), 1, 2, 0, False),  # interleaved chunks: local DDP too
    (_job("v2.0"), 1, 1, 0, True),  # pp 1, one chunk, no ZeRO: torch DDP's hooks overlap
    (_job("23.04"), 1, 1, 1, False),  # 2023-05: the distributed optimizer reduces after it
    (_job("23.04"), 4, 1, 0, False),
    (_job("core_v0.12.0"), 4, 1, 1, True),  # 2025-05: --overlap-grad-reduce
    (_job(), 4, 1, 1, True),  # the current release
    (_job("v2.0", grad_reduce_overlap=True), 4, 1, 0, True),  # the job's own statement
    (_job(grad_reduce_overlap=False), 4, 1, 0, False),
    (_job("nemo-24.07", optimizer=Optimizer.APEX_DISTRIBUTED_ADAM), 4, 1, 1, True),  # Apex's own
    (JobSpec(global_batch=32, framework=Framework.DEEPSPEED, framework_version="v0.3.12"), 4, 1, 1, True),
])
def test_the_release_decides_whether_the_reduction_hides(job, pp, v, zero, want):
    assert grad_reduce_overlaps(job, pp, v, zero) is want


def test_the_statement_is_megatrons_own_reduction():
    with pytest.raises(ConfigError, match="grad_reduce_overlap"):
        JobSpec(global_batch=32, framework=Framework.DEEPSPEED, grad_reduce_overlap=False)
    with pytest.raises(ConfigError, match="grad_reduce_overlap"):
        _job(optimizer=Optimizer.APEX_DISTRIBUTED_ADAM, grad_reduce_overlap=False)


def _tiny(tmp_path, **job):
    raw = yaml.safe_load(TINY.read_text())
    raw["job"].update(job)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_instance(path)


def test_a_pipelined_plan_of_v2_0_hides_none_of_it(tmp_path):
    old, new = _tiny(tmp_path, framework_version="v2.0"), load_instance(TINY)
    piped = Plan.flat(tp=1, pp=2, dp=4, micro_batch=1, num_micro_batches=8, layers_per_stage=(4, 4),
                      full_recompute_layers=(0, 0))
    a, b = simulate(old, piped), simulate(new, piped)
    assert a.overlapped_s["dp_grad_sync"] == 0.0 < b.overlapped_s["dp_grad_sync"]
    assert a.iter_time_s > b.iter_time_s
    # pp 1 without ZeRO ran torch DDP in v2.0: priced as the current release's
    flat = Plan.flat(tp=2, pp=1, dp=4, micro_batch=1, num_micro_batches=8, layers_per_stage=(8,),
                     full_recompute_layers=(0,))
    assert simulate(old, flat).iter_time_s == simulate(new, flat).iter_time_s
    # the job may say otherwise, and the plan file keeps it
    stated = _tiny(tmp_path, framework_version="v2.0", grad_reduce_overlap=True)
    assert simulate(stated, piped).iter_time_s == b.iter_time_s
    assert instance_from_mapping(instance_to_mapping(stated), "<plan file>").job == stated.job
    with pytest.raises(InstanceError, match="grad_reduce_overlap"):
        _tiny(tmp_path, framework="deepspeed", grad_reduce_overlap=True)


def test_the_dated_published_rows_reduce_as_their_release_did():
    # Narayanan et al. (April 2021) and Korthikanti et al. (2022) ran Megatron-LM's own Adam
    # before 2023-08; NeMo's rows ran Apex's optimizer (its own overlap), MosaicML's Composer
    rows = {r["id"]: r for r in load_published()}
    cat = load_catalogue()
    want = {"narayanan21-t1-39.1B": False, "korthikanti22-t5-175B-sp-selective": False,
            "nemo2407-GPT3-175B-512gpu": None, "mpt-h100bf16-large-7b-s2048-g256": None}
    assert {k: row_to_instance_plan(rows[k], cat)[0].job.grad_reduce_overlap for k in want} == want
