"""cost/trust.py and `paraplan accuracy`: the accuracy tables, the ranking score, a plan's
prediction interval and its validation warnings.

The expected values are derived by hand in the comments from the hand-made inputs, never by
running the code under test.
"""

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from paraplan.cost.specs import Cluster
from paraplan.cost.calibration import BUNDLED_FILES, RowResult, load_rows
from paraplan.cost.trust import (FEATURE_CUTS, Features, Residual, log_quantile_interval, ranking_pairs, scale_band,
                        trust_for, validation_warnings, coverage, coverage_report)
from paraplan.solver.commands.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT.parent / "shared" / "calibration"
TINY = REPO_ROOT / "instances" / "tiny-gpt-8xA100.yaml"


def _no_nan(token):
    raise AssertionError(f"JSON carries {token}")


# --- the bundled data --------------------------------------------------------------------------

@pytest.mark.parametrize("path", BUNDLED_FILES, ids=lambda p: p.name)
def test_bundled_copies_equal_the_shared_files(path):
    shared = SHARED / path.name
    if not shared.is_file():
        pytest.skip(f"{shared} is absent (a clone without ../shared): the bundled copy is used")
    assert path.read_bytes() == shared.read_bytes()


def test_bundled_files_have_the_published_rows():
    # shared/calibration/README.md: 214 bf16/fp16 rows and 25 FP8 rows
    assert [len(load_rows(str(p))) for p in BUNDLED_FILES] == [214, 25]


# --- paraplan accuracy -------------------------------------------------------------------------

def test_accuracy_json_without_file_reads_both_bundled_files(capsys):
    assert main(["accuracy", "--json"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    assert len(report["rows"]) + len(report["not_modelled"]) == 214 + 25
    assert set(report["by_feature"]) == set(FEATURE_CUTS)
    # every source family of the bundled rows has its line, and the per-family rows add up
    families = report["by_feature"]["source family"]
    assert {"mosaicml", "narayanan21", "narayanan21-zero3", "korthikanti22", "nemo", "nemo-launcher",
            "torchtitan", "megatron-v1"} == set(families)
    for cut, groups in report["by_feature"].items():
        assert sum(g["rows"] for g in groups.values()) == len(report["rows"]), cut
        for g in groups.values():
            assert g["mape"] >= abs(g["bias"]) - 1e-12  # |mean e| <= mean |e|
    assert set(report["by_feature"]["scale band"]) <= {f"{b} GPUs" for b in
                                                      ("1-8", "9-64", "65-255", "256-1023", ">= 1024")}
    rk = report["ranking"]
    assert 0 <= rk["right"] <= rk["total"] and len(rk["wrong"]) == rk["total"] - rk["right"]


def test_accuracy_json_has_no_nan_when_nothing_is_modelled(capsys, tmp_path):
    # one row whose global batch 3 does not divide into dp 2 x micro-batch 1: not modelled, so
    # MAPE is undefined and must be null, not NaN
    row = copy.deepcopy(load_rows(str(BUNDLED_FILES[0]))[0])
    row["config"].update(global_batch=3, dp=2, tp=1, pp=1, cp=1, micro_batch=1)
    row["cluster"].update(num_gpus=2, gpus_per_node=2)
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([row]))
    assert main(["accuracy", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    assert report["mape"] is None and report["bias"] is None and len(report["not_modelled"]) == 1


@pytest.mark.parametrize("path, floor", [(BUNDLED_FILES[0], 0.730), (BUNDLED_FILES[1], 0.594)],
                         ids=lambda x: getattr(x, "name", str(x)))
def test_a_file_read_alone_keeps_its_nested_coverage(capsys, path, floor):
    # `paraplan accuracy FILE --json`, key cv_interval_coverage_nested: each row's band built
    # from that file's other families' residuals alone (cost/trust.covered), where the pools are
    # thin. A calibrated 80% band's coverage of n independent rows is binomial, sd
    # sqrt(0.16 / n), 99% of samples above 80 - 2.576 sd: 73.0% for the 214 bf16 rows (sd 2.73
    # points), 59.4% for the 25 FP8 rows (sd 8.0). The bound is one-sided: 174 of the 214 are
    # MosaicML's, whose errors share one offset, so the figure moves in steps of their share
    # (a band holds about half of them or nearly all) and reads above the binomial upper end,
    # 87.9% (159 of 174 MosaicML rows), while the regression this guards against, a band drawn
    # from 21 rows of 3 families at MosaicML's distance level, read 54.2% (cost/trust.py,
    # MIN_POOL_ROWS). The FP8 file reads 68.0%: every band there is the file's other rows.
    assert main(["accuracy", str(path), "--json"]) == 0
    nested = json.loads(capsys.readouterr().out, parse_constant=_no_nan)["cv_interval_coverage_nested"]
    assert floor <= nested < 1.0


# --- ranking -----------------------------------------------------------------------------------

def _row(id_, tp, pp, dp, measured_s, batch=8):
    return {"id": id_, "source": "mosaicml/llm-foundry test", "precision": "bf16",
            "model": {"layers": 4, "hidden": 64, "heads": 8, "ffn": 256, "vocab": 128, "seq_len": 32,
                      "mlp": "gelu"},
            "cluster": {"gpu": "A100-SXM4-80GB", "num_gpus": 8, "gpus_per_node": 8,
                        "intra_node_GBps_per_gpu": 600},
            "config": {"tp": tp, "pp": pp, "dp": dp, "global_batch": batch},
            "measured": {"iter_time_s": measured_s}}


def test_ranking_pairs_on_three_rows():
    # Rows a, b, c train one workload (same model, GPU, 8 GPUs, batch 8, bf16); d differs in
    # global batch, so it pairs with nobody. Measured: a 1.00 s, b 1.03 s, c 2.00 s.
    #   (a, b): 1.03 / 1.00 - 1 = 3% <= 5%  -> no pair
    #   (a, c): 2.00 / 1.00 - 1 = 100%      -> pair, a faster; predicted a 1.1 < c 1.5: right
    #   (b, c): 2.00 / 1.03 - 1 = 94%       -> pair, b faster; predicted b 1.6 > c 1.5: wrong
    # so 2 pairs, 1 right, and the wrong one is (b, c).
    rows = [_row("a", 8, 1, 1, 1.00), _row("b", 1, 1, 8, 1.03), _row("c", 2, 4, 1, 2.00),
            _row("d", 1, 1, 8, 9.0, batch=16)]
    predicted = {"a": 1.1, "b": 1.6, "c": 1.5, "d": 9.0}
    results = [RowResult(id=r["id"], gpu="A100-SXM4-80GB", source=r["source"],
                         measured_iter_time_s=r["measured"]["iter_time_s"],
                         predicted_iter_time_s=predicted[r["id"]]) for r in rows]
    pairs = ranking_pairs(rows, results)
    assert [(p.first, p.second, p.right) for p in pairs] == [("a", "c", True), ("b", "c", False)]


def test_ranking_through_the_cli(capsys, tmp_path):
    rows = [_row("a", 8, 1, 1, 1.00), _row("b", 1, 1, 8, 1.03), _row("c", 2, 4, 1, 2.00)]
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump(rows))
    assert main(["accuracy", str(path), "--json"]) == 0
    rk = json.loads(capsys.readouterr().out)["ranking"]
    assert rk["total"] == 2  # (a, c) and (b, c), as derived above; the model's order may vary


# --- a plan's interval and warnings ------------------------------------------------------------

def _features(**kw):
    # every row and plan of one release (cost/releases.py) unless a test says otherwise
    base = dict(family="", framework="megatron", framework_version="core_v0.19.0", gpu="H100-SXM5-80GB", num_gpus=64, zero=1, cp=1, pp=2,
                precision="bf16", activations="stored")
    return Features(**{**base, **kw})


def test_log_quantile_interval_on_hand_made_residuals():
    # log errors 0.0, 0.1, 0.2, 0.3, 0.4, 0.5 (n = 6). numpy's linear quantile sits at position
    # q*(n-1): q=0.1 -> 0.5, between 0.0 and 0.1 -> 0.05; q=0.9 -> 4.5, between 0.4 and 0.5 -> 0.45.
    # measured = predicted / exp(r): interval [10 / e^0.45, 10 / e^0.05] = [6.3763, 9.5123] s
    lo, hi = log_quantile_interval(10.0, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert lo == pytest.approx(10 / math.exp(0.45)) and lo == pytest.approx(6.3763, abs=1e-4)
    assert hi == pytest.approx(10 / math.exp(0.05)) and hi == pytest.approx(9.5123, abs=1e-4)


def test_trust_weighs_each_source_family_the_same():
    # Family A: 3 residuals of log error 0.1; family B: 1 of 0.3. Weights 1/3/2 = 1/6 each for
    # A, 1/2 for B; sorted, the cumulative midpoints are 1/12, 3/12, 5/12 (A) and 9/12 (B).
    # q = 0.1 lies between A's points: 0.1; q = 0.9 lies past B's 0.75: clamped to 0.3. So the
    # interval is [10 / e^0.3, 10 / e^0.1] = [7.4082, 9.0484] s, where unweighted quantiles
    # (0.1 and 0.24) would let A's three rows outvote B.
    res = ([Residual(id=f"a{i}", features=_features(family="A"), error=math.expm1(0.1)) for i in range(3)]
           + [Residual(id="b", features=_features(family="B"), error=math.expm1(0.3))])
    t = trust_for(_features(), 10.0, res)
    assert t.rows == 4 and "2 source families" in t.group
    assert t.interval_s == pytest.approx((10 / math.exp(0.3), 10 / math.exp(0.1)))
    assert t.interval_s == pytest.approx((7.4082, 9.0484), abs=1e-4)
    # leaving family B out (a B row's own interval) leaves A's residuals alone: [10 / e^0.1] twice
    t = trust_for(_features(), 10.0, res, exclude_family="B")
    assert t.rows == 3 and t.interval_s == pytest.approx((10 / math.exp(0.1),) * 2)


def test_coverage_counts_rows_inside_the_other_families_band():
    # Three families of two residuals each, log errors A: 0.0, 0.0; B: 0.0, 0.0; C: 0.5, 0.5.
    # An A row's band comes from B and C (weights 1/4 each; midpoints 1/8, 3/8 at 0.0 and 5/8,
    # 7/8 at 0.5): q = 0.1 -> 0.0 (clamped), q = 0.9 -> 0.5: [0.0, 0.5] holds 0.0. Likewise B.
    # A C row's band from A and B is [0.0, 0.0], which 0.5 misses: coverage 4 / 6.
    res = [Residual(id=f"{f}{i}", features=_features(family=f), error=math.expm1(e))
           for f, e in (("A", 0.0), ("B", 0.0), ("C", 0.5)) for i in range(2)]
    assert coverage(res) == pytest.approx(4 / 6)


def test_coverage_report_weighs_rows_families_and_scale_bands():
    # A and B: two rows each on 8 GPUs, log error 0.0; C: four rows on 1024 GPUs, log error 0.5.
    # Every row sits at distance level 3: judged against the other families, its band holds
    # fewer than 3 rows of its scale (2 for A and B, 0 for C), so its ZeRO stage, pp, die,
    # framework and release are all unvalidated; the pools are therefore the other families'.
    # An A row's band from B (weights 1/4, 1/4) and C (1/8 x 4): midpoints 1/8, 3/8 at 0.0 and
    # 9/16 .. 15/16 at 0.5: q = 0.1 -> 0.0 (clamped), q = 0.9 -> 0.5: [0.0, 0.5] holds 0.0.
    # Likewise B. A C row's band from A and B is [0.0, 0.0], which 0.5 misses.
    # Row-weighted 4 / 8; family-weighted (1 + 1 + 0) / 3; by band 1-8: 4 rows, all held;
    # >= 1024: 4 rows, none held.
    res = [Residual(id=f"{f}{i}", features=_features(family=f, num_gpus=n), error=math.expm1(e))
           for f, n, e, k in (("A", 8, 0.0, 2), ("B", 8, 0.0, 2), ("C", 1024, 0.5, 4)) for i in range(k)]
    rep = coverage_report(res)
    assert rep.row_weighted == pytest.approx(0.5) == coverage(res)
    assert rep.family_weighted == pytest.approx(2 / 3)
    assert rep.by_family == (("A", 2, 1.0), ("B", 2, 1.0), ("C", 4, 0.0))
    assert rep.by_band == (("1-8", 4, 1.0), (">= 1024", 4, 0.0))
    # Widths over the prediction (cost/trust.relative_width): A's and B's band [0.0, 0.5] is
    # e^0 - e^-0.5 = 0.393469 wide, C's [0.0, 0.0] none (C's rows on 1024 GPUs take no scale
    # axis: no other family runs on 256+ GPUs). Of the eight, four 0 and four 0.393469: the
    # median is their midpoint, 0.196735
    assert rep.median_width == pytest.approx(0.196735, abs=1e-6)


def test_warning_when_fewer_than_three_rows_validate_a_feature_at_the_plan_scale():
    # Plan: zero=3, pp=2 on 1024 GPUs (band ">= 1024"). Residuals: two ZeRO-3 rows at 1536 GPUs
    # (2 < 3: warn) and three pp > 1 rows at 2048 GPUs (3: no warning), plus ZeRO-3 rows at 64 GPUs
    # that are in another band and do not count.
    res = ([Residual(id=f"z{i}", features=_features(zero=3, pp=1, num_gpus=1536), error=0.0) for i in range(2)]
           + [Residual(id=f"p{i}", features=_features(zero=0, pp=4, num_gpus=2048), error=0.0) for i in range(3)]
           + [Residual(id=f"s{i}", features=_features(zero=3, num_gpus=64), error=0.0) for i in range(9)])
    assert validation_warnings(_features(zero=3, pp=2, num_gpus=1024), res) == [
        "zero=3 on 1024 GPUs: 2 published rows validate ZeRO-3 at >= 1024 GPUs"]
    assert scale_band(1023) == "256-1023" and scale_band(1024) == ">= 1024"


def test_plan_json_carries_trust(capsys):
    assert main(["plan", str(TINY), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    trust = out["trust"]
    assert {"interval_s", "group", "rows", "warnings"} <= trust.keys()
    lo, hi = trust["interval_s"]
    assert 0 < lo <= hi and trust["rows"] >= 5 and isinstance(trust["warnings"], list)


def test_mfu_record_warning_above_the_published_record_only():
    # GPT-3 175B on 1,024 A100 (the README's headline instance). With MFU = tokens/s x model
    # FLOPs per token / (GPUs x peak), a predicted time T gives MFU m exactly when
    # T = global batch x seq x FLOPs per token / (m x GPUs x peak). A made-up record of 50% on
    # A100 bf16: a time for 51% warns "1.0 points above ... (50.0%, row-x)", one for 49.9%
    # does not, and the same instance cut to 128 GPUs (below the 256-GPU records) never does.
    # The plan: its frozen optimum (tests/goldens/bundled.json), one class on every GPU.
    from dataclasses import replace

    from paraplan.cost.flops import model_flops_per_token
    from paraplan.cost.readers.instance import load_instance
    from paraplan.cost.readers.plan_reader import plan_from_mapping
    from paraplan.cost.trust import mfu_record_warning

    rel = "instances/gpt3-175b-1024xA100.yaml"
    inst = load_instance(REPO_ROOT / rel)
    golden = json.loads((REPO_ROOT / "tests" / "goldens" / "bundled.json").read_text())
    plan = plan_from_mapping(golden[f"{rel}:nominal"]["plan"], inst)
    assert plan.num_gpus == inst.cluster.num_gpus
    cl = inst.cluster.one_group
    work = inst.job.global_batch * inst.model.seq_len * model_flops_per_token(inst.model)

    def time_for(mfu, gpus=cl.num_gpus):
        return work / (mfu * gpus * cl.gpu.peak_flops_per_s)
    records = {("A100", "bf16"): (0.50, "row-x")}
    (line,) = mfu_record_warning(inst, plan, time_for(0.51), records)
    assert line.startswith("MFU 51.0% is 1.0 points above the best MFU published on A100 (bf16)")
    assert "(50.0%, row-x)" in line
    assert mfu_record_warning(inst, plan, time_for(0.499), records) == []
    assert mfu_record_warning(inst, plan, time_for(0.51), {}) == []  # no record for the die
    small = replace(inst, cluster=Cluster.of(replace(cl, nodes=16)))
    assert small.cluster.num_gpus == 128
    assert mfu_record_warning(small, plan, time_for(0.9, 128), records) == []


def test_mfu_records_are_the_published_bests():
    # The A100 bf16 record at 256+ GPUs is Korthikanti et al.'s 1T model on 512 A100s with
    # sequence parallelism and selective recompute: the paper reports 56.3% MFU for it (Table
    # 5; the row's `mfu` field), and paraplan's model-FLOPs definition gives the same.
    from paraplan.cost.trust import mfu_records
    mfu, row = mfu_records()[("A100", "bf16")]
    assert row == "korthikanti22-t5-1T-sp-selective"
    assert mfu == pytest.approx(0.563, abs=0.002)


# --- mixture-of-experts plans: the interval from the MoE anchors -------------------------------

def test_moe_interval_comes_from_the_anchors_on_the_plans_die():
    """An MoE plan's interval is read from MoE anchors, not from dense rows. Seven GB200 anchors
    erring by +24.1, +19.2, +19.1, +15.2, +15.1, -6.3 and -26.6% (model TFLOP/s predicted /
    measured - 1 = measured time / predicted time - 1), beside one host-bound row and two on
    another die, have log errors r = -ln(1 + e), sorted: -0.21592, -0.17563, -0.17479,
    -0.14150, -0.14063, +0.06507, +0.30925. numpy's linear quantiles over 7 values:
      r_10 at position 0.6: -0.21592 + 0.6 x 0.04029 = -0.19175
      r_90 at position 5.4: +0.06507 + 0.4 x 0.24418 = +0.16274
    interval = [10 s x exp(-0.16274), 10 s x exp(+0.19175)] = [8.498 s, 12.114 s]."""
    from paraplan.cost.trust import moe_trust
    rows = [("GB200", e, False) for e in (24.1, 19.2, 19.1, 15.2, 15.1, -6.3, -26.6)]
    rows += [("GB200", 110.0, True), ("H100-SXM5-80GB", 50.0, False), ("H100-SXM5-80GB", -50.0, False)]
    t = moe_trust("GB200-186GB", 10.0, anchors=rows)
    assert t.rows == 7 and "on GB200" in t.group
    assert t.interval_s == pytest.approx((8.498, 12.114), abs=1e-3)


def test_moe_interval_falls_back_to_every_anchor_below_five_on_the_die():
    # B200 with fewer than five anchors of its own: the interval takes every one not bound by
    # host-side work (here 2 + 2)
    from paraplan.cost.trust import moe_trust
    rows = [("B200", 10.0, False), ("B200", 20.0, False), ("B200", 30.0, True),
            ("H100-SXM5-80GB", -10.0, False), ("H100-SXM5-80GB", 0.0, False)]
    t = moe_trust("B200-SXM-180GB", 10.0, anchors=rows)
    assert t.rows == 4 and "(2 on B200)" in t.group


def test_moe_plans_print_the_anchor_interval(capsys):
    from paraplan.cost.trust import _moe_anchor_rows
    h100 = sum(1 for g, _, host in _moe_anchor_rows() if g.startswith("H100") and not host)
    assert main(["plan", str(REPO_ROOT / "instances" / "mixtral-8x7b-64xH100.yaml"), "--quiet"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("trust"))
    assert "mixture-of-experts anchors on H100" in line and f"{h100} published rows" in line


def test_compare_prints_each_plans_own_interval(tmp_path, capsys):
    # issue 31: every command that prints a predicted time prints its interval. compare's
    # interval for a plan is the one simulate prints for it (the same plan_trust), and the upper
    # end of a plan planned at p90 is its p90 objective (the planner minimised that end)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert main(["plan", str(TINY), "--json", "--quiet", "-o", str(a)]) == 0
    planned = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    assert main(["plan", str(TINY), "--objective", "mean", "--quiet", "-o", str(b)]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--instance", str(TINY), "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    assert main(["simulate", str(TINY), "--plan", str(a), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out, parse_constant=_no_nan)
    assert cmp["plans"][0]["interval_s"] == pytest.approx(sim["interval_s"], rel=1e-12)
    assert cmp["plans"][0]["interval_s"][1] == pytest.approx(planned["quantile_s"], rel=1e-9)
    assert main(["compare", str(a), str(b), "--instance", str(TINY)]) == 0
    assert "likely measured (80%)" in capsys.readouterr().out


def test_memory_headroom_warning_when_fewer_than_three_rows_of_the_scale_fill_memory_as_far(monkeypatch):
    # The rule alone, on hand-made fractions: a plan whose fullest stage holds 95% of HBM, on
    # the tiny instance's 8 GPUs (band 1-8). Rows of that band at 97%, 96% and 90%: 2 reach
    # 95% (< MIN_VALIDATING_ROWS = 3) -> one line naming 2 rows and the fullest, 97.0%. A third
    # row at 95% (>= counts: the plan is no fuller than it) -> 3 -> no line.
    from paraplan.cost import trust
    from paraplan.cost.readers.instance import load_instance
    inst = load_instance(TINY)
    rows = ((0.97, "r1"), (0.96, "r2"), (0.90, "r3"))
    monkeypatch.setattr(trust, "published_memory_fractions", lambda band: rows if band == "1-8" else ())
    (line,) = trust.memory_headroom_warning(inst, 0.95)
    assert line.startswith("peak memory 95.0% of HBM on 8 GPUs: 2 published rows at 1-8 GPUs fill memory as far;"
                           " the fullest 97.0% (r1)")
    rows = ((0.97, "r1"), (0.96, "r2"), (0.95, "r4"), (0.90, "r3"))
    assert trust.memory_headroom_warning(inst, 0.95) == []
