"""cost/calibration.py against published measurements (../shared/calibration/published.yaml,
or the bundled copy cost/published/published.yaml in a clone without ../shared).

The rows are transcribed from public papers and repositories (schema and sources:
shared/calibration/README.md); the simulator's few physical parameters were fitted once to
them (cost/fit.py), never per row. Targets: MAPE <= 10% overall (the issue's target) and
within the MosaicML rows; no row silently dropped.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost.errors import ConfigError

from paraplan.cost.calibration import PUBLISHED_DIR, load_rows, mape, predict_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "calibration" / "published.yaml"
PUBLISHED = SHARED if SHARED.is_file() else PUBLISHED_DIR / "published.yaml"
MAPE_TARGET = 0.10


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load_rows(str(PUBLISHED))


@pytest.fixture(scope="module")
def results(rows):
    return predict_rows(rows)


def test_every_row_is_predicted_or_has_a_reason(rows, results):
    assert len(results) == len(rows)
    assert [r.id for r in results] == [row["id"] for row in rows]
    for r in results:
        # exactly one of: a prediction, or the reason there is none
        assert (r.predicted_iter_time_s is None) == (r.reason is not None), r.id
        if r.predicted_iter_time_s is not None:
            assert r.predicted_iter_time_s > 0, r.id


def test_overall_mape_meets_target(results):
    assert mape(results) <= MAPE_TARGET


def test_mosaicml_rows_mape_meets_target(results):
    mosaic = [r for r in results if r.source.startswith("mosaicml")]
    assert mosaic, "published.yaml has no MosaicML rows any more"
    assert mape(mosaic) <= MAPE_TARGET


def test_narayanan_145b_row_within_25_percent(results):
    # Narayanan et al. SC'21 Table 1: 145.6 B parameters, tp 8, pp 8, dp 24 on 1,536 A100s,
    # batch 2,304; 24.8 s per iteration (derived from the table's throughput).
    (row,) = [r for r in results if r.id == "narayanan21-t1-145.6B"]
    assert row.measured_iter_time_s == pytest.approx(24.8, abs=0.05)
    assert row.predicted_iter_time_s is not None, row.reason
    assert abs(row.error) <= 0.25


def test_rows_on_unfitted_dies_stay_out_of_the_fit():
    # cost/fit.fitted_rows: a die with fewer than MIN_ROWS_PER_DIE (5) rows keeps its catalogue
    # defaults, so its rows must not move the global parameters. The bf16 file has exactly two
    # V100 rows (Megatron v1 blog, Table 1); every other die has 5 or more.
    from paraplan.cost.calibration import load_published
    from paraplan.cost.fit import MIN_ROWS_PER_DIE, fitted_rows
    rows = load_published()
    kept = fitted_rows(rows)
    dropped = [r["id"] for r in rows if r not in kept]
    assert MIN_ROWS_PER_DIE == 5
    assert sorted(dropped) == ["megatron-v1blog-1.2B-tp1", "megatron-v1blog-4.2B-tp4"]


def test_mape_over_bf16_and_fp8_rows_within_8_percent():
    # Both files together (239 rows): 8.03% before the GEMM output stores, the standard
    # attention's b x heads x s x s score tensor (it had grown as b^2) and its two GEMM passes,
    # and NeMo's tp overlap were priced; 6.72% after the refit; 6.03% once FP8 casts were priced
    # per framework and Megatron-LM's backward TP collectives behind the gradient GEMMs, with a
    # refit. 8% is the held-out target.
    from paraplan.cost.calibration import load_published
    assert mape(predict_rows(load_published())) <= 0.08


def test_mape_over_bf16_and_fp8_rows_within_5_percent():
    # issue 11's target: 5.38% before attention on Hopper was priced by kernel (Transformer
    # Engine's cuDNN fused attention for Megatron/NeMo, 1.6x FlashAttention-2: Shah et al. 2024,
    # Figs. 5-6) and memory_eff became one value for the fitted dies; 4.83% after the refit.
    from paraplan.cost.calibration import load_published
    assert mape(predict_rows(load_published())) <= 0.05


def _unknown_source_row(recompute: str) -> dict:
    # Llama 3 405B as Meta trained it on 16,384 H100 (Llama Team 2024, arXiv 2407.21783,
    # Table 4: tp 8, cp 1, pp 16, dp 128, 8,192 tokens, 16M tokens per batch); a source that
    # none of SOURCE_FAMILIES names
    return {"id": "llama3-405b-16k", "source": "Llama Team, The Llama 3 Herd of Models, Table 4",
            "precision": "bf16",
            "model": dict(layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                          vocab=128256, seq_len=8192, mlp="swiglu"),
            "cluster": dict(gpu="H100-SXM5-80GB", num_gpus=16384, gpus_per_node=8,
                            intra_node_GBps_per_gpu=900, inter_node_Gbps_per_gpu=400),
            "config": dict(tp=8, pp=16, dp=128, cp=1, micro_batch=1, global_batch=2048,
                           recompute=recompute, virtual_stages=None, sequence_parallel=True, zero=1),
            "measured": dict(iter_time_s=8.0, iter_time_kind="derived")}


def test_a_source_of_no_known_family_is_priced_not_dropped():
    # cost/calibration.RAN_DEFAULTS: a row that states nothing beyond the schema is priced with
    # Megatron-LM behaviour, no dropout, each such fact listed as unknown; with recompute
    # unknown, the least recomputation that fits. Without recomputation this row's first
    # stage holds 8 layers x 16 in-flight micro-batches of activations: over 80 GiB (the
    # simulator says 82 GiB); selective recomputation drops nothing under FlashAttention; so
    # full recomputation is what the run must have used, and the row is predicted.
    from paraplan.cost.calibration import (OTHER_FAMILY, RAN_DEFAULTS, row_ran, row_to_instance_plan,
                                           source_family)
    from paraplan.cost.readers.gpus import load_catalogue
    from paraplan.cost.simulate import simulate
    from paraplan.cost.specs import Framework
    row = _unknown_source_row("unknown")
    assert source_family(row) is OTHER_FAMILY and row_ran(row).framework is Framework.MEGATRON
    # and its framework release (cost/releases.py), which no default fills
    assert set(row_ran(row).unknown) == set(RAN_DEFAULTS) | {"framework_version"}
    cat = load_catalogue()
    inst, plan = row_to_instance_plan(row, cat)
    assert plan.full_recompute_layers == plan.layers_per_stage
    assert simulate(inst, plan).fits
    inst_none, plan_none = row_to_instance_plan(_unknown_source_row("none"), cat)
    assert not simulate(inst_none, plan_none).fits
    (res,) = predict_rows([row])
    assert res.predicted_iter_time_s is not None and res.reason is None


def test_sequence_parallel_with_tp_1_is_ignored_as_megatron_does():
    # Megatron-LM's validate_args: "Disabling sequence parallelism because tensor model
    # parallelism is disabled". A row that says sequence_parallel: true at tp 1 (NeMo's configs
    # keep the key on) is priced without it, not refused.
    from paraplan.cost.calibration import row_to_instance_plan
    from paraplan.cost.readers.gpus import load_catalogue
    row = _unknown_source_row("none")
    row["model"] = dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                        seq_len=8192, mlp="swiglu")
    row["cluster"]["num_gpus"] = 64
    row["config"] = dict(tp=1, pp=1, dp=64, cp=1, micro_batch=1, global_batch=128,
                         recompute="none", virtual_stages=None, sequence_parallel=True, zero=3)
    _, plan = row_to_instance_plan(row, load_catalogue())
    assert plan.sequence_parallel is False
    (res,) = predict_rows([row])
    assert res.reason is None


def test_a_stated_recompute_is_never_overridden_by_the_source():
    # A NeMo-Megatron-Launcher row the project does not bundle (not in cost/published/ran.yaml)
    # that states `recompute: selective` is priced with selective recomputation: the launcher's
    # 2022 default (none) belongs to the bundled rows' evidence, not to their source, and the
    # facts the row does not state are listed as unknown, priced with RAN_DEFAULTS.
    from paraplan.cost.calibration import row_ran, row_to_instance_plan, source_family
    from paraplan.cost.readers.gpus import load_catalogue
    from paraplan.cost.specs import Attention, Recompute
    row = _unknown_source_row("selective")
    row["id"], row["source"] = "nemo-launcher-unbundled", "NVIDIA/NeMo-Megatron-Launcher README"
    assert source_family(row).name == "nemo-launcher"
    _, plan = row_to_instance_plan(row, load_catalogue())
    assert plan.recompute is Recompute.SELECTIVE and not any(plan.full_recompute_layers)
    assert row_ran(row).attention is Attention.FLASH and "attention" in row_ran(row).unknown
    # the row's own `ran:` mapping states facts the same way ran.yaml does
    row["ran"] = {"attention": "standard", "dropout": 0.1}
    ran = row_ran(row)
    assert ran.attention is Attention.STANDARD and ran.dropout == 0.1
    assert "attention" not in ran.unknown and "framework" in ran.unknown


def test_every_bundled_row_states_what_it_ran():
    # cost/published/ran.yaml names each bundled row exactly once, and only bundled rows
    import collections
    from paraplan.cost.calibration import RAN_FILE, load_published
    from paraplan.cost.readers.strict_yaml import read_yaml
    named = collections.Counter(i for e in read_yaml(RAN_FILE) for i in e["rows"])
    ids = [r["id"] for r in load_published()]
    assert set(named) == set(ids) and set(named.values()) == {1}


def test_table_1_rows_are_priced_as_the_papers_scripts_ran_them():
    # Narayanan et al. SC'21 Table 1 gives no micro-batch; the paper's reproduction script
    # (NVIDIA/Megatron-LM examples/sc21/run_table_1.sh) sets MBS=8 for the 18B model and MBS=2
    # with --num-layers-per-virtual-pipeline-stage 5 for the 76B one; ran.yaml states both.
    # 18.4B: global batch 1024 over dp 32 = 32 sequences a replica, in 32 / 8 = 4 micro-batches.
    # 76.1B: 60 layers over pp 4 = 15 a stage, in chunks of 5: virtual_stages 3; global batch
    # 1792 over dp 32 = 56 a replica, in 56 / 2 = 28 micro-batches.
    from paraplan.cost.calibration import load_published, row_config, row_to_instance_plan
    from paraplan.cost.readers.gpus import load_catalogue
    rows = {r["id"]: r for r in load_published()}
    cat = load_catalogue()
    _, plan = row_to_instance_plan(rows["narayanan21-t1-18.4B"], cat)
    assert (plan.micro_batch, plan.classes[0].num_micro_batches) == (8, 4)
    _, plan = row_to_instance_plan(rows["narayanan21-t1-76.1B"], cat)
    assert (plan.micro_batch, plan.virtual_stages, plan.classes[0].num_micro_batches) == (2, 3, 28)
    assert plan.classes[0].layers_per_stage == (15, 15, 15, 15)
    # the row's own value is the row's: stated by both, the row is refused, naming ran.yaml
    both = {**rows["narayanan21-t1-18.4B"], "config": {**rows["narayanan21-t1-18.4B"]["config"], "micro_batch": 8}}
    with pytest.raises(ConfigError, match="ran.yaml"):
        row_config(both)
    # a row ran.yaml does not name keeps its own config (no other row gains a field)
    other = rows["narayanan21-t2-ptdp-529.6B-560gpu"]
    assert row_config(other) is other["config"]


def test_fsdp_inside_a_pipeline_is_refused_not_mispriced(capsys, tmp_path):
    # cost/framework_rules.unpriced_reason: ZeRO-2/3 with pp > 1 is priced only where the
    # framework runs it (torchtitan's ZeRO-3: tests/cost/test_fsdp_in_pipeline.py); Megatron-LM
    # asserts against it, so every command that reads such a plan refuses it in one line (exit
    # 2) and `accuracy` reports such a row as not modelled instead of predicting it. The tiny instance's optimum shards its state with FSDP
    # (zero 2 or 3: which one moves with the stored bands' p90 factors, so the test reads it),
    # pp 1, dp 8; the same plan cut into 2 stages of 4 layers (dp 4, 2 micro-batches of 4) is the
    # refused one.
    import yaml as _yaml
    from paraplan.solver.commands.cli import main
    inst = REPO_ROOT / "instances" / "tiny-gpt-8xA100.yaml"
    plan_path = tmp_path / "plan.yaml"
    assert main(["plan", str(inst), "--quiet", "-o", str(plan_path)]) == 0
    doc = _yaml.safe_load(plan_path.read_text())
    assert doc["plan"]["zero"] >= 2 and doc["plan"]["pp"] == 1
    doc["plan"].update(pp=2, dp=4, num_micro_batches=2, layers_per_stage=[4, 4],
                       full_recompute_layers=[0, 0])
    plan_path.write_text(_yaml.safe_dump(doc))
    capsys.readouterr()
    # refused as the plan is read: by every command that reads one
    for argv in (["simulate", str(inst), "--plan", str(plan_path)], ["memory", str(inst), "--plan", str(plan_path)],
                 ["compare", str(plan_path), str(plan_path), "--instance", str(inst)],
                 ["export", str(plan_path), "--to", "torchtitan"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"megatron does not run ZeRO-{doc['plan']['zero']} (FSDP) inside a pipeline" in err \
            and err.count("\n") == 1, (argv, err)
    row = _unknown_source_row("full")
    row["config"] = dict(row["config"], zero=3)
    (res,) = predict_rows([row])
    assert res.predicted_iter_time_s is None and "does not run ZeRO-3 (FSDP) inside a pipeline" in res.reason


def test_a_run_is_replanned_within_what_its_release_ran():
    # cost/framework_rules.release_space: Megatron-LM of 2021 (Narayanan et al., SC'21) had
    # interleaving but neither sequence parallelism, selective recomputation (Korthikanti et
    # al., 2022) nor the distributed optimizer (ZeRO-1, 2022), nor any sharding of gradients
    # or parameters (ZeRO-2/3 came with Megatron-core's FSDP, 2025): zero 0 only; of 2020 (v1)
    # no interleaving either; of 2022, ZeRO-1 and not 2/3; a row that states no release (or
    # another framework) gets the whole space
    from paraplan.cost.calibration import load_published, row_to_instance_plan
    from paraplan.cost.framework_rules import release_space
    from paraplan.cost.readers.gpus import load_catalogue
    from paraplan.cost.specs import Framework, Recompute, SearchSpace
    old = release_space(Framework.MEGATRON, 2021)
    assert (old.sequence_parallel, old.recompute, old.zero, old.virtual_stages) == (
        (False,), (Recompute.NONE,), (0,), None)
    assert release_space(Framework.MEGATRON, 2020).virtual_stages == (1,)
    assert release_space(Framework.MEGATRON, 2022) == SearchSpace(zero=(0, 1))
    assert release_space(Framework.MEGATRON, 2025) == SearchSpace()
    assert release_space(Framework.MEGATRON, None) == SearchSpace()
    # DeepSpeed of 2021 ran Megatron's model code of 2021 with its own ZeRO stages (all of them)
    assert release_space(Framework.DEEPSPEED, 2021) == SearchSpace(sequence_parallel=(False,),
                                                                   recompute=(Recompute.NONE,))
    assert release_space(Framework.TORCHTITAN, 2021) == SearchSpace()
    rows = {r["id"]: r for r in load_published()}
    cat = load_catalogue()
    # its runs predate v2.5 (2021-08), which added partial recomputation: a stage recomputes
    # all of its layers or none (framework_rules.MEGATRON_FEATURE_MONTHS; ran.yaml dates them
    # April 2021, by the paper's arXiv identifier 2104)
    inst, _ = row_to_instance_plan(rows["narayanan21-t1-18.4B"], cat)
    assert inst.search == replace(old, partial_recompute=False)
    assert release_space(Framework.MEGATRON, 2021, 4) == inst.search
    inst, _ = row_to_instance_plan(rows["korthikanti22-t5-175B-sp-selective"], cat)
    assert inst.search == SearchSpace(zero=(0, 1))


def test_nemo_2407_rows_ran_flashattention_2_through_transformer_engine():
    # NeMo-Framework-Launcher's conf/config.yaml at tag 24.07 sets env_vars NVTE_FUSED_ATTN: 0
    # (ran.yaml quotes it), so Transformer Engine ran Dao's FlashAttention-2, not cuDNN: those 12
    # H100 rows state cudnn_attention false and are priced at FlashAttention-2's benchmark (322
    # TFLOP/s, no cuDNN speedup); no other bundled row states it.
    from paraplan.cost.calibration import load_published, row_ran, row_to_instance_plan
    from paraplan.cost.coefficients import attention_efficiency
    from paraplan.cost.readers.gpus import load_catalogue
    rows = load_published()
    fa2 = [r["id"] for r in rows if not row_ran(r).cudnn_attention]
    assert len(fa2) == 12 and all(i.startswith("nemo2407-") for i in fa2)
    row = next(r for r in rows if r["id"] == "nemo2407-LLAMA3-70B-64gpu")
    inst, _ = row_to_instance_plan(row, load_catalogue())
    assert inst.job.cudnn_attention is False
    # at the benchmark's own 8,192 keys: exactly 322 / 989 of the peak
    assert attention_efficiency(inst.job, inst.cluster.gpu, 8192) == pytest.approx(322 / 989, rel=1e-12)
