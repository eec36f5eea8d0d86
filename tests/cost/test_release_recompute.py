"""Partial recomputation as a feature of the framework release (cost/framework_rules.py,
MEGATRON_FEATURE_MONTHS): Megatron-LM recomputed only some layers of a stage from v2.5 on
(--activations-checkpoint-method block, commit c1e0689d92 of 2021-08-10); before it
--checkpoint-activations recomputed every layer. A release without it runs every layer or none.

Expected values are the dates of the tags and commits (read in NVIDIA/Megatron-LM: v2.0 is
2021-01-12, v2.6 2021-08-27) and hand-built plans, never the code under test's output.
"""

from pathlib import Path

import pytest
import yaml

from paraplan.cost.calibration import load_published, load_rows, row_ran
from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.framework_rules import recompute_pattern, release_has, release_space
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.plan_specs import Plan
from paraplan.cost.recompute_patterns import RecomputePattern
from paraplan.cost.specs import Framework, Recompute

TINY = Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml"


def _tiny(tmp_path, version: str):
    raw = yaml.safe_load(TINY.read_text())
    raw["job"]["framework_version"] = version
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_instance(path)


def test_partial_recompute_came_in_august_2021():
    assert not release_has("partial_recompute", 2021, 7)
    assert release_has("partial_recompute", 2021, 8)
    # a release known by its year alone counts as that year's last month
    assert release_has("partial_recompute", 2021, None)
    assert not release_space(Framework.MEGATRON, 2021, 4).partial_recompute
    assert release_space(Framework.MEGATRON, 2022).partial_recompute
    # DeepSpeed runs of the time trained Megatron's model code (framework_rules.release_space)
    assert not release_space(Framework.DEEPSPEED, 2021, 4).partial_recompute
    assert release_space(Framework.DEEPSPEED, None).partial_recompute


def test_a_release_without_it_runs_every_layer_or_none(tmp_path):
    old = _tiny(tmp_path, "v2.0")  # 2021-01
    assert not old.search.partial_recompute
    # no search key states it: a plan file's instance gets it from its release again
    assert instance_from_mapping(instance_to_mapping(old), "<plan file>").search == old.search
    assert _tiny(tmp_path, "v2.6").search.partial_recompute  # 2021-08
    assert load_instance(TINY).search.partial_recompute  # the current release
    assert recompute_pattern(Framework.MEGATRON, Recompute.NONE, False) is RecomputePattern.ALL_OR_NONE
    assert recompute_pattern(Framework.MEGATRON, Recompute.NONE) is RecomputePattern.FIRST_PER_CHUNK
    # tiny-gpt: 8 layers on 2 stages of 4. One layer of each stage recomputed is Megatron's
    # --recompute-num-layers 1 (the first of each chunk): v2.6 runs it, v2.0 cannot; every
    # layer recomputed, v2.0 runs.
    def plan(full):
        return Plan.flat(tp=1, pp=2, dp=4, micro_batch=1, num_micro_batches=8, layers_per_stage=(4, 4),
                         full_recompute_layers=full)
    plan((1, 1)).check_against(_tiny(tmp_path, "v2.6"))
    plan((4, 4)).check_against(old)
    plan((0, 0)).check_against(old)
    with pytest.raises(ConfigError, match="every layer or of none"):
        plan((1, 1)).check_against(old)


def test_the_2021_rows_are_dated_before_it():
    # cost/published/ran.yaml: Narayanan et al.'s runs (Table 1, Table 2's PTD-P and ZeRO-3 rows)
    # are reported in arXiv 2104.04473's first version, April 2021
    rows = [r for r in load_published() if r["id"].startswith("narayanan21-")]
    assert len(rows) == 22
    assert {(row_ran(r).release_year, row_ran(r).release_month) for r in rows} == {(2021, 4)}


def _row(**ran) -> dict:
    return {"id": "x", "source": "a paper", "precision": "bf16",
            "model": dict(layers=24, hidden=2048, heads=16, ffn=8192, vocab=50304, seq_len=2048, mlp="gelu"),
            "cluster": dict(gpu="A100-SXM4-80GB", num_gpus=8, gpus_per_node=8, intra_node_GBps_per_gpu=600),
            "config": dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, recompute="none"),
            "measured": dict(iter_time_s=3.0), "ran": ran}


@pytest.mark.parametrize("ran, match", [
    (dict(release_month=4), r"\[0\]\.ran\.release_month.*without its year"),
    (dict(release_year=2021, release_month=13), r"\[0\]\.ran\.release_month"),
    (dict(framework_version="v2.0", release_month=4), r"\[0\]\.ran\.release_month.*dates the release"),
])
def test_a_bad_release_month_is_refused_naming_the_field(tmp_path, ran, match):
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([_row(**ran)]))
    with pytest.raises(InstanceError, match=match):
        load_rows(str(path))
