"""Leave-one-source-family-out cross-validation (cost/crossval.py), the stored result the trust
interval is built from, and `paraplan accuracy`'s out-of-sample report."""

import json
import pytest
import yaml

from paraplan.cost.calibration import load_published, predict_rows, source_family
from paraplan.cost.crossval import UNFITTED, fit_fold, load_stored, stale_rows, unfitted_catalogue
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.trust import coverage, coverage_report, published_residuals
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.exit_codes import EXIT_ROWS_REFUSED


def test_the_stored_cross_validation_is_the_current_models():
    # crossval.yaml records each row's in-sample prediction when it was written: if the cost
    # model moved since, its out-of-sample predictions belong to another model (rerun
    # `paraplan accuracy --cv --write`)
    rows = load_published()
    stored = load_stored()
    assert [s.id for s in stored] == [r["id"] for r in rows]
    assert stale_rows(stored, predict_rows(rows)) == []
    assert all(s.out_of_sample_s is not None for s in stored)
    # and each row's memory fill, which the band reads from here (cost/trust.published_memory_fills),
    # is the memory model's pricing of the row as it ran, float for float
    from paraplan.cost.trust import row_memory_fill
    assert [s.memory_fill for s in stored] == [row_memory_fill(r) for r in rows]
    # a family's rows were predicted by a fit that never saw them: its fold trained on every
    # other row, and where the fold's fitted values differ from those in force, the in-sample
    # and out-of-sample predictions differ for every family of 6 rows or more. (A fold can land
    # on the fit of all rows: without the 6 ZeRO-3 rows the fit takes the same grid point.)
    from paraplan.cost.crossval import CROSSVAL_FILE
    from paraplan.cost.readers.strict_yaml import read_yaml
    folds = {f["family"]: f for f in read_yaml(CROSSVAL_FILE)["folds"]}
    _, adopted = _adopted_fit()
    by_family = {}
    for s in stored:
        by_family.setdefault(s.family, []).append(s)
    assert sum(not same_fit for same_fit in
               (all(adopted[k] == pytest.approx(v, rel=1e-3) for k, v in folds[f]["values"].items())
                for f in by_family if len(by_family[f]) >= 6)) >= 5
    for fam, ss in by_family.items():
        assert folds[fam]["rows"] == len(ss) and folds[fam]["train_rows"] == len(rows) - len(ss)
        same_fit = all(adopted[k] == pytest.approx(v, rel=1e-3) for k, v in folds[fam]["values"].items())
        if len(ss) >= 6 and not same_fit:
            assert any(abs(s.out_of_sample_s / s.in_sample_s - 1) > 1e-3 for s in ss), fam


def test_no_fold_fits_a_parameter_onto_its_bound():
    # A fitted value on its physical range's bound is the model missing something the parameter
    # absorbs (cost/fit.py). Until Narayanan et al.'s Table 1 rows were priced with the
    # micro-batches their script ran (cost/published/ran.yaml `configs`), seven of the eight
    # folds put matmul_half_flops on its 1e8 FLOP lower bound, all but the fold without those
    # rows; with Transformer Engine's attention priced at its kernel's benchmark, the folds
    # without MosaicML and without those rows did again, and matmul_half_flops is now held at
    # cuBLAS's measured size curve (cost/fit.py), fitted by no fold; every fold fits every other
    # parameter inside its range.
    from paraplan.cost.crossval import CROSSVAL_FILE
    from paraplan.cost.readers.strict_yaml import read_yaml
    folds = read_yaml(CROSSVAL_FILE)["folds"]
    assert len(folds) == 8
    assert {f["family"]: f["on_bound"] for f in folds if f["on_bound"]} == {}
    assert not any("matmul_half_flops" in f["values"] for f in folds)


def _adopted_fit():
    """The fitted parameters of the published rows (cost/fit.py's table) and their values in
    the catalogue the code prices with (cost/gpus.yaml)."""
    from paraplan.cost.comm import NetEfficiency
    from paraplan.cost.fit import fitted_rows, parameter_table
    params = [p for p in parameter_table([r["cluster"]["gpu"] for r in fitted_rows(load_published())]) if p.fitted]
    cat = load_catalogue()
    return params, {p.name: p.get(cat, NetEfficiency()) for p in params}


def test_the_adopted_fit_has_no_parameter_on_its_bound():
    # As for every fold: the values in force sit inside their physical ranges. Before Table 1
    # was priced as its script ran, the adopted matmul_half_flops sat on its 1e8 FLOP lower bound.
    params, values = _adopted_fit()
    assert {p.name for p in params} >= {"attention_of_fa2_benchmark", "memory_eff", "H100.matmul_eff_max"}
    assert {p.name: p.on_bound(values[p.name]) for p in params if p.on_bound(values[p.name])} == {}


@pytest.mark.slow
def test_the_adopted_values_are_the_fit_of_every_row():
    # cost/gpus.yaml holds the fit of all published rows made as each fold's is (cost/crossval.py:
    # from the unfitted defaults, CV_SWEEPS sweeps), rounded to 4 significant digits there; refit
    # now, the fit lands on them again and on no bound (about 30 s)
    from paraplan.cost.crossval import CV_SWEEPS
    from paraplan.cost.fit import fit
    result = fit(load_published(), unfitted_catalogue(load_catalogue()), sweeps=CV_SWEEPS, log=lambda m: None)
    params, adopted = _adopted_fit()
    assert result.on_bound() == {}
    assert set(result.values) == set(adopted)
    for name, v in result.values.items():
        assert adopted[name] == pytest.approx(float(f"{v:.4g}"), rel=1e-3), name


def test_unfitted_catalogue_resets_every_fitted_efficiency():
    # GpuSpec's defaults, the values cost/gpus.yaml gives a die without published rows
    assert UNFITTED == {"matmul_eff_max": 0.75, "memory_eff": 0.7, "attention_eff": 0.4,
                        "fp8_matmul_eff_max": 0.6}
    cat = unfitted_catalogue(load_catalogue())
    assert {(g.matmul_eff_max, g.memory_eff, g.attention_eff) for g in cat.values()} == {(0.75, 0.7, 0.4)}


@pytest.mark.slow
def test_one_fold_recomputed_equals_the_stored_one():
    # Leave MosaicML's 181 rows out, refit on the other 58 and predict them: the stored fold's
    # fitted values and out-of-sample predictions (6 significant digits) come out again. The
    # fold with the fewest training rows, so the cheapest refit (fit_fold measured 3.7 s of
    # CPU; the NeMo-Megatron-Launcher fold this test refitted before, 233 training rows: 11.1 s,
    # issue 32), and no less discriminating: it fits all four parameters away from their
    # unfitted defaults (A100 matmul 0.755, not 0.75 as in the NeMo-Launcher fold, where a fit
    # that skipped the A100 would go unseen) and checks 181 predictions rather than 6
    from paraplan.cost.crossval import CROSSVAL_FILE
    from paraplan.cost.readers.strict_yaml import read_yaml
    rows = load_published()
    preds, fold = fit_fold(rows, "mosaicml", load_catalogue())
    stored = {s.id: s.out_of_sample_s for s in load_stored()}
    assert fold.rows == 181 and fold.train_rows == 58
    want = next(f for f in read_yaml(CROSSVAL_FILE)["folds"] if f["family"] == "mosaicml")["values"]
    assert fold.values == pytest.approx(want, rel=1e-5)
    # not vacuous: each die's matmul efficiency is fitted off its unfitted start
    assert all(v != UNFITTED["matmul_eff_max"] for k, v in want.items() if k.endswith("matmul_eff_max"))
    ids = [r["id"] for r in rows if source_family(r).name == "mosaicml"]
    for i, p in zip(ids, preds, strict=True):
        assert p.predicted_iter_time_s == pytest.approx(stored[i], rel=1e-5)


def test_out_of_sample_accuracy_and_coverage():
    # The figures the README quotes, read from the stored cross-validation: every one of the
    # 239 rows predicted out of sample; the family-weighted 80% interval built from the other
    # families' residuals (their levels and fitted dies judged without the row's family too:
    # cost/trust.band_pool) holds about 80% of the rows (cost/trust.coverage). How close 239
    # rows can tell: a calibrated band's coverage is binomial, sd sqrt(0.8 x 0.2 / 239) = 2.59
    # points, so 99% of calibrated samples read 80 +- 2.576 x 2.59 = 73.3-86.7%. (The team's
    # working target is 75-85%; it reads 84.9%, 203 of 239, with the scale axis's slow end on 256+
    # GPUs (cost/trust.scale_slow_log_quantile; 84.5% without, 85.4% were its tau read with
    # Student t), and a memory fill beyond every row
    # of its scale a distance feature (84.1% without; 87.4% were it beyond fewer than 3 rows,
    # outside the target); 82.8%, 198 of 239, before Megatron-LM's release-dated gradient
    # reduction and its refit; 84.1% before Transformer Engine's attention was priced at its
    # kernel's benchmark.)
    res = published_residuals()
    assert len(res) == 239
    cv_mape = sum(abs(r.error) for r in res) / len(res)
    assert 0.04 < cv_mape < 0.09
    assert 0.733 <= coverage(res) <= 0.867
    rep = coverage_report(res)
    # At scale, where the optimum of a cluster plan lands: the 33 rows on 256+ GPUs (20 on
    # 256-1023, 13 on 1024+). Binomial again, sd sqrt(0.8 x 0.2 / 33) = 6.96 points, 99% of
    # calibrated samples in 80 +- 17.9 = 62.1-97.9% (it reads 78.8%, 26 of 33; 75.8% without the
    # scale axis; 78.8% before the memory fill): a
    # band that holds about half the runs at scale, as it held of the held-back runs before the scale
    # terms, fails here.
    at_scale = [(n, share) for band, n, share in rep.by_band if band in ("256-1023", ">= 1024")]
    assert sum(n for n, _ in at_scale) == 33
    assert 0.621 <= sum(n * share for n, share in at_scale) / 33 <= 0.979
    # Counted per family (the mean of the 8 families' shares): were every row independent, a
    # calibrated band's family mean would have sd (1/8) sqrt(sum 0.8 x 0.2 / n_f) over the
    # families' 10, 2, 181, 16, 6, 12, 6 and 6 rows = (1/8) sqrt(0.16 x 1.267) = 5.63 points,
    # 99% in 80 +- 14.5 = 65.5-94.5%. Rows of one family share an offset, so the true spread is
    # wider and this range is the strict one; it reads 69.9%, the ZeRO-3 baseline's 384-GPU row
    # held by the scale axis (67.8% without it; 66.7% without the memory fill as
    # a distance feature; 67.5% before Megatron-LM's release-dated gradient reduction and its
    # refit, MosaicML's share 83.4% -> 85.6%; 68.8% before Transformer Engine's attention was priced at its
    # kernel's benchmark; 61.7% with each level's own rows, which this range refuses). Its
    # ceiling on these rows: the band holds none of the two V100 rows (+16%, +25%) and one of the
    # DeepSpeed ZeRO-3 baseline's six (-16% to +13%; its scale axis, read without it, reaches
    # only 5.0% slow: the other five families at scale differ less), so the mean of 8 families is
    # at most (6 + 1/6) / 8 = 77%.
    assert [n for _, n, _ in rep.by_family] == [10, 2, 181, 16, 6, 12, 6, 6]
    assert 0.655 <= rep.family_weighted <= 0.945


def test_accuracy_reports_out_of_sample_first(capsys):
    assert main(["accuracy", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    res = published_residuals()
    assert doc["cv_rows"] == 239
    assert doc["cv_mape"] == pytest.approx(sum(abs(r.error) for r in res) / len(res))
    assert doc["cv_by_family"]["mosaicml"]["rows"] == 181
    # the feature cuts out of sample too: the 25 FP8 rows' mean |error| from their residuals
    fp8 = [r for r in res if r.features.precision == "fp8"]
    assert doc["cv_by_feature"]["precision"]["fp8"]["rows"] == len(fp8) == 25
    assert doc["cv_by_feature"]["precision"]["fp8"]["mape"] == pytest.approx(
        sum(abs(r.error) for r in fp8) / len(fp8))
    for row in doc["rows"]:
        lo, hi = row["interval_s"]
        assert lo < row["predicted_iter_time_s"] * 1.5 and hi > row["predicted_iter_time_s"] / 1.5
        assert lo <= hi


def _row(**over):
    row = {"id": "x", "source": "a paper", "precision": "bf16",
           "model": dict(layers=24, hidden=2048, heads=16, ffn=8192, vocab=50304, seq_len=2048,
                         mlp="gelu"),
           "cluster": dict(gpu="A100-SXM4-80GB", num_gpus=8, gpus_per_node=8,
                           intra_node_GBps_per_gpu=600),
           "config": dict(tp=1, pp=1, dp=8, micro_batch=4, global_batch=256, recompute="none"),
           "measured": dict(iter_time_s=3.0)}
    row.update(over)
    return row


def test_one_bad_row_never_refuses_the_file(capsys, tmp_path):
    # A Megatron-Bridge style row: 126 layers in 8 stages of 8 virtual chunks, without saying
    # that the run counted the embedding and loss as layers (config.embedding_in_split /
    # loss_in_split), so its chunks cannot be built; it is reported with its field, the good
    # row beside it is still predicted, and the exit status says a row was refused
    bad = _row(id="bad")
    bad["model"] = dict(bad["model"], layers=126)
    bad["config"] = dict(bad["config"], pp=8, dp=1, virtual_stages=8)
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([_row(), bad]))
    assert main(["accuracy", str(path), "--json"]) == EXIT_ROWS_REFUSED
    doc = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in doc["rows"]] == ["x"]
    (rejected,) = doc["not_modelled"]
    assert rejected["id"] == "bad" and rejected["field"] == "[1].config.virtual_stages"
    assert "embedding_in_split" in rejected["reason"]


def test_an_unknown_attention_kernel_is_priced_both_ways(capsys, tmp_path):
    # The same 2021 Megatron-LM run three times: stating FlashAttention, stating the unfused
    # kernel, and stating no kernel (cost/calibration.unknown_variants: a release before 2023
    # may have run either). The third is predicted at the geometric mean
    # of the other two (the point whose larger log error over the two possibilities is
    # smallest), and its band runs from the fused price's lower end to the unfused one's upper
    # end (the same relative band around each: cost/trust.py)
    model = dict(_row()["model"], seq_len=4096)
    config = dict(_row()["config"], micro_batch=1, global_batch=64)
    fused = _row(id="fused", ran={"attention": "flash"}, model=model, config=config)
    unfused = _row(id="unfused", ran={"attention": "standard"}, model=model, config=config)
    unknown = _row(id="unknown", ran={"release_year": 2021}, model=model, config=config)
    current = _row(id="current", model=model, config=config)  # no release: fused, nothing to hedge
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([fused, unfused, unknown, current]))
    assert main(["accuracy", str(path), "--json"]) == 0
    a, b, c, d = json.loads(capsys.readouterr().out)["rows"]
    assert d["predicted_iter_time_s"] == a["predicted_iter_time_s"] and d["interval_s"] == a["interval_s"]
    assert b["predicted_iter_time_s"] > a["predicted_iter_time_s"] * 1.01  # the scores cost time
    assert c["predicted_iter_time_s"] == pytest.approx(
        (a["predicted_iter_time_s"] * b["predicted_iter_time_s"]) ** 0.5, rel=1e-12)
    assert c["interval_s"] == pytest.approx([a["interval_s"][0], b["interval_s"][1]], rel=1e-12)


def test_simulate_prints_the_interval(capsys, tmp_path):
    # a simulated time is a prediction like a plan's: it carries the same interval
    from pathlib import Path
    inst = Path(__file__).resolve().parents[2] / "instances" / "tiny-gpt-8xA100.yaml"
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(inst), "--quiet", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(inst), "--plan", str(plan), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lo, hi = doc["interval_s"]
    assert lo < doc["iter_time_s"] < hi * 1.5 and doc["trust"]["interval_s"] == [lo, hi]
    assert main(["simulate", str(inst), "--plan", str(plan)]) == 0
    assert "measured time likely in" in capsys.readouterr().out
