"""The framework release as part of the instance (cost/releases.py): its default, what it narrows,
where the plan names it, and how a published row's release enters its prediction and its band.

Expected values come from the release table's documented facts (each release's tag and date)
and from hand-made inputs, never from running the code under test.
"""

import json
from pathlib import Path

import pytest
import yaml

from paraplan.cost.calibration import load_rows, row_ran
from paraplan.cost.errors import InstanceError
from paraplan.cost.readers.instance import instance_from_mapping, load_instance
from paraplan.cost.readers.instance_writer import instance_to_mapping
from paraplan.cost.releases import current_release, find_release
from paraplan.cost.specs import Framework, JobSpec, SearchSpace
from paraplan.solver.commands.cli import main

TINY = Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml"


def _tiny_with(tmp_path, job: dict, search: dict | None = None) -> Path:
    raw = yaml.safe_load(TINY.read_text())
    raw["job"].update(job)
    if search is not None:
        raw["search"] = search
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_default_is_the_current_release_and_the_plan_json_names_it(capsys):
    # the latest tag of each project read for cost/releases.py: Megatron-core core_v0.19.0
    # (NVIDIA/Megatron-LM, 2026-08-19), DeepSpeed v0.19.5 (2026-08-09), torchtitan v0.2.2
    # (2026-02-20), Composer v0.32.1 (2025-07-25)
    assert [current_release(f).version for f in (Framework.MEGATRON, Framework.DEEPSPEED,
                                                 Framework.TORCHTITAN, Framework.COMPOSER)] == [
        "core_v0.19.0", "v0.19.5", "v0.2.2", "v0.32.1"]
    inst = load_instance(TINY)  # states no framework_version
    assert inst.job.framework_version is None and inst.job.release.version == "core_v0.19.0"
    assert main(["plan", str(TINY), "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["framework"], doc["framework_version"]) == ("megatron", "core_v0.19.0")
    # no bundled row ran the current release: the plan says so beside its band
    assert doc["trust"]["release"].startswith("megatron core_v0.19.0 (2026-08, the current release")
    assert doc["trust"]["release_rows"] == 0


def test_a_stated_release_is_named_and_counted(tmp_path, capsys):
    # cost/published/ran.yaml: the 12 NeMo 24.07 rows of published-fp8.yaml state nemo-24.07
    path = _tiny_with(tmp_path, {"framework_version": "nemo-24.07"})
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("release     the time is for megatron nemo-24.07 (2024-07, job.framework_version);"
            " 12 published rows ran it") in out


def test_the_release_narrows_the_space(tmp_path):
    # framework_rules.MEGATRON_FEATURE_YEARS: Megatron-FSDP (ZeRO-2/3) came with core_v0.12.0
    # (2025); NeMo 24.07 (2024) had the distributed optimizer: ZeRO 0 and 1 only. Megatron-LM
    # v1.0 (2020) had no pipeline, no interleaving, no sequence parallelism, no selective
    # recomputation and no distributed optimizer.
    assert load_instance(_tiny_with(tmp_path, {"framework_version": "nemo-24.07"})).search.zero == (0, 1)
    old = load_instance(_tiny_with(tmp_path, {"framework_version": "v1.0"})).search
    assert (old.pp, old.virtual_stages, old.sequence_parallel, old.zero) == ((1,), (1,), (False,), (0,))
    assert [r.value for r in old.recompute] == ["none"]
    # the current release, stated or not, narrows nothing
    assert load_instance(_tiny_with(tmp_path, {"framework_version": "core_v0.19.0"})).search == SearchSpace()
    # a listed value the release cannot run is refused, naming the key and the release
    with pytest.raises(InstanceError, match=r"search\.zero: megatron nemo-24\.07 cannot run zero 3"):
        load_instance(_tiny_with(tmp_path, {"framework_version": "nemo-24.07"}, {"zero": [1, 3]}))


def test_the_release_survives_the_plan_file_round_trip(tmp_path):
    inst = load_instance(_tiny_with(tmp_path, {"framework_version": "23.04"}))
    again = instance_from_mapping(instance_to_mapping(inst), "<plan file>")
    assert again.job == inst.job and again.job.framework_version == "23.04"
    assert instance_to_mapping(load_instance(TINY))["job"].get("framework_version") is None


def test_a_job_record_refuses_an_unknown_release():
    with pytest.raises(Exception, match="not a known deepspeed release"):
        JobSpec(global_batch=8, framework=Framework.DEEPSPEED, framework_version="core_v0.19.0")


def _row(**ran) -> dict:
    # an 8-GPU Megatron-LM run in the calibration schema (the toy row of
    # tests/validation/test_crossval.py), at 4,096 tokens so that stored scores cost time
    return {"id": "x", "source": "a paper", "precision": "bf16",
            "model": dict(layers=24, hidden=2048, heads=16, ffn=8192, vocab=50304, seq_len=4096, mlp="gelu"),
            "cluster": dict(gpu="A100-SXM4-80GB", num_gpus=8, gpus_per_node=8, intra_node_GBps_per_gpu=600),
            "config": dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, recompute="none"),
            "measured": dict(iter_time_s=3.0), **({"ran": ran} if ran else {})}


def test_a_rows_release_enters_its_prediction_as_stated(tmp_path, capsys):
    # Megatron-LM v2.0 is dated 2021-01 (its tag), before fused attention came to Megatron-LM
    # (2023: framework_rules.MEGATRON_FEATURE_YEARS), so a v2.0 row that does not state its
    # attention kernel may have stored the scores: it is priced fused (a) and unfused (b) and
    # predicted at sqrt(a * b) (cost/calibration.predict_rows). 23.04 (2023-05) ran
    # FlashAttention: priced fused only, as the row that states flash.
    rows = [dict(_row(attention="flash"), id="fused"), dict(_row(attention="standard"), id="unfused"),
            dict(_row(framework_version="v2.0"), id="v2.0"), dict(_row(framework_version="23.04"), id="23.04")]
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump(rows))
    assert main(["accuracy", str(path), "--json"]) == 0
    a, b, old, new = (r["predicted_iter_time_s"] for r in json.loads(capsys.readouterr().out)["rows"])
    assert b > a * 1.01  # the stored scores cost time
    assert old == pytest.approx((a * b) ** 0.5, rel=1e-12)
    assert new == a
    # the row's release, and the year it gives
    ran = row_ran(rows[2])
    assert (ran.framework_version, ran.release_year) == ("v2.0", 2021)
    assert find_release(Framework.MEGATRON, "v2.0").date == "2021-01"


def test_a_row_with_a_bad_release_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([_row(framework_version="v9")]))
    with pytest.raises(InstanceError, match=r"\[0\]\.ran\.framework_version.*use one of: v1\.0"):
        load_rows(str(path))
    path.write_text(yaml.safe_dump([_row(framework_version="v2.0", release_year=2021)]))
    with pytest.raises(InstanceError, match=r"\[0\]\.ran\.release_year.*dates the release"):
        load_rows(str(path))
    # a torchtitan row names a torchtitan release
    path.write_text(yaml.safe_dump([_row(framework="torchtitan", framework_version="core_v0.19.0")]))
    with pytest.raises(InstanceError, match=r"not a torchtitan release"):
        load_rows(str(path))


def test_report_and_export_name_the_release(tmp_path, capsys):
    # a NeMo 24.07 plan: the report says which release its time is for; exported to DeepSpeed
    # (another framework) it is priced as DeepSpeed's current release, and the note says the
    # plan's time was for nemo-24.07
    inst = _tiny_with(tmp_path, {"framework_version": "nemo-24.07"})
    plan, page = tmp_path / "plan.yaml", tmp_path / "report.html"
    assert main(["plan", str(inst), "--quiet", "-o", str(plan)]) == 0
    assert main(["report", str(inst), "-o", str(page)]) == 0
    assert "the time is for megatron nemo-24.07 (2024-07, job.framework_version)" in page.read_text()
    capsys.readouterr()
    assert main(["export", str(plan), "--to", "deepspeed"]) == 0
    err = capsys.readouterr().err
    assert ("the plan's time is for megatron nemo-24.07 (2024-07, job.framework_version); this file"
            " targets deepspeed's current release, v0.19.5") in err
