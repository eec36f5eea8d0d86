"""What a user takes to the cluster (issue 34, round 2): `paraplan export` never exits 0 with a
configuration paraplan itself predicts will not run as planned; DualPipe plans and mixed-cluster
plans are refused with their true reason; a proved-infeasible instance has its own exit code;
`--help` documents every option.

The export cases are the bundled instances' golden plans (tests/goldens/bundled.json), written
as `paraplan plan -o` writes them, through each exporter. The numbers the refusals must name are
those the issue measured before the fix (issue 34, "Exports"): DeepSeek-V3 / 2,048 H800 to
Megatron at 84.8 of 80 GiB, its DualPipe plan 81.2 GiB and 65% slower as 1F1B, Llama-3.1 405B
to DeepSpeed 141% slower and over 80 GiB, Llama-3 70B to DeepSpeed 125 GiB, Llama-3 8B / 64 H100
to torchtitan 80.9 of 80 GiB, and the PrimePar BLOOM and OPT plans to Megatron.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from export_support import GOLDENS, ROOT, export, golden_plan_file, mean_plan_file
from paraplan.solver.commands.cli import main
from paraplan.solver.export import MAX_SLOWDOWN
# the one-group instances: a mixed cluster's plan is refused before any exporter (below)
BUNDLED = sorted(k.split(":")[0] for k in GOLDENS if "/mixed/" not in k)
TARGETS = ("megatron", "torchtitan", "deepspeed")


# --- no export that exits 0 hands over what paraplan predicts will not run ---------------------

@pytest.mark.parametrize("instance", BUNDLED)
def test_every_bundled_export_that_exits_0_fits_and_keeps_the_plans_speed(instance, tmp_path, capsys):
    # --json gives both predictions; an export that exits 0 without --force must fit memory and
    # run at most MAX_SLOWDOWN slower than the plan; one that is refused for that reason (not
    # for a model the target has no layers for) must be written under --force, flagged
    path = golden_plan_file(tmp_path, instance)
    for to in TARGETS:
        code, out, err = export(capsys, path, "--to", to, "--json")
        if code == 0:
            doc = json.loads(out)
            assert doc["emitted"]["fits"], (instance, to)
            assert doc["emitted"]["iter_time_s"] <= (1 + MAX_SLOWDOWN) * doc["plan"]["iter_time_s"]
            assert doc["will_not_run"] is None
            continue
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (instance, to, err)
        if "will not run as planned" not in err:
            continue  # the target has no such layers (latent attention, GELU): refused with --force too
        code, out, err = export(capsys, path, "--to", to, "--json", "--force")
        doc = json.loads(out)
        assert code == 0 and doc["force"] and doc["will_not_run"]
        slowdown = doc["emitted"]["iter_time_s"] / doc["plan"]["iter_time_s"] - 1
        assert not doc["emitted"]["fits"] or slowdown > MAX_SLOWDOWN
        assert "written under --force" in err


# (instance, target, what the one line must say): the issue's measurements before the fix, on
# the plans it measured: the optimum of the predicted time (mean_plan_file) where the default p90
# objective now chooses another plan (Llama-3 70B / 512 H100, Llama-3 8B / 64 H100)
MEAN_PLANNED = {"instances/llama3-70b-512xH100.yaml", "instances/llama3-8b-64xH100.yaml",
                "instances/gpt3-175b-1024xA100.yaml"}
WILL_NOT_RUN = [
    # DeepSeek-V3-shaped / 2,048 H800 to Megatron left out since DeepEP's single-peer rate
    # (cost/moe.DEEPEP_PEER_BYTES_PER_S, issue 31) re-planned it from tp 1, pp 16, ep 16 (refused
    # at 93.6 GiB of 78.0 usable) to tp 2, pp 8, vpp 2, ep 32, whose export exits 0
    # (test_every_bundled_export_that_exits_0_fits_and_keeps_the_plans_speed checks that)
    # +141.0% before the dense refit of the scale-terms merge (the plan's own time moved);
    # +139.9% on the plan before the embedding/loss slots (v 2), +154.0% on its v 4 one (116.0 GiB);
    # +151.6% since the dense refit moved matmul_half_flops off its 1e8 FLOP bound (the plan 6.322 s);
    # +162.2% since the plan's Megatron attention runs at cuDNN's benchmark (the plan 6.103 s, the
    # emitted DeepSpeed configuration, at the fitted 0.58 of FlashAttention-2's, 16.0 s: 2.622x);
    # +162.4% since the refit that Megatron-LM's release-dated gradient reduction brought (H100
    # matmul_eff_max 0.6300, memory_eff 0.7299: the plan 6.129 s, the emitted 16.08 s, 2.624x)
    ("instances/llama3-405b-16384xH100.yaml", "deepspeed", ["of 78.0 GiB usable", "+162.4%"]),
    # 125.2 GiB before the 2 GiB default planning reserve (search.memory_reserve_gib) moved the
    # mean-objective plan; the capacities below are the GPU's less that reserve ("usable");
    # 117.0 GiB before Megatron's one --recompute-num-layers was the rule (issue 34: the plan,
    # [1, 0, 0, 0] recomputed at v 5, is now cp 4 at v 10 without recompute)
    ("instances/llama3-70b-512xH100.yaml", "deepspeed", ["125.2 GiB per GPU of 78.0 GiB usable"]),
    ("instances/llama3-8b-64xH100.yaml", "torchtitan", ["80.9 GiB per GPU of 78.0 GiB usable"]),
    # PrimePar BLOOM left out since the default reserve re-planned it (micro_batch 4 -> 2): its
    # Megatron export now fits (30.0 of 30.0 GiB usable) at 2.3% slower and exits 0
    # (test_every_bundled_export_that_exits_0_fits_and_keeps_the_plans_speed checks that)
    # 32.05 of 32.00 GiB before the default reserve
    ("instances/primepar/primepar-opt-175b-32xV100.yaml", "megatron", ["32.0 GiB per GPU of 30.0 GiB usable"]),
]


@pytest.mark.parametrize("instance, to, says", WILL_NOT_RUN,
                         ids=[f"{Path(i).stem}-{t}" for i, t, _ in WILL_NOT_RUN])
def test_the_issues_exports_are_refused_in_one_line_with_both_numbers(instance, to, says, tmp_path, capsys):
    path = (mean_plan_file if instance in MEAN_PLANNED else golden_plan_file)(tmp_path, instance)
    out_file = tmp_path / "out.cfg"
    code, out, err = export(capsys, path, "--to", to, "-o", out_file)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert not out_file.exists()  # nothing written
    assert "will not run as planned" in err and "--force" in err
    for text in says:
        assert text in err, (text, err)
    assert "the plan" in err  # the planned number beside the emitted one


def test_force_writes_the_reason_and_both_predictions_into_the_file(tmp_path, capsys):
    # Llama-3 8B / 64 H100, planned for Megatron, to torchtitan: 80.9 of 80 GiB (issue 34)
    path = mean_plan_file(tmp_path, "instances/llama3-8b-64xH100.yaml")
    target = tmp_path / "job.toml"
    code, out, err = export(capsys, path, "--to", "torchtitan", "--force", "-o", target)
    assert code == 0 and out == ""
    text = target.read_text()
    forced = [line for line in text.splitlines() if line.startswith("# paraplan: forced:")]
    assert len(forced) == 3 and "80.9 GiB per GPU of 78.0 GiB usable" in forced[0]
    assert "the plan as planned (megatron)" in forced[1] and "DOES NOT FIT" in forced[2]
    import tomllib
    tomllib.loads(text)  # the comments keep it a valid TOML file


def test_the_slowdown_gate_is_five_percent(tmp_path, capsys):
    # A slower export under 5% is kept, one over it refused. Under: PrimePar's Llama 2 70B / 32 V100
    # golden plan to torchtitan, +1.3% (V100 has no published FlashAttention-2 benchmark, so its
    # attention is priced alike under every framework). tiny-gpt to DeepSpeed, +4.3% when written,
    # is +9.2% since Megatron's attention runs at the benchmark of Transformer Engine's kernel
    # (FlashAttention-2's 175 TFLOP/s on A100) and DeepSpeed's at the fitted 0.58 of it: refused.
    # Over: GPT-3 175B / 1,024 A100 to DeepSpeed, +8.5% (its 6 virtual stages become 1, a larger
    # bubble) before the fix, +8.4% after the dense refit of the scale-terms merge, +10.1% with the
    # attention change (19.54 s against the plan's 17.75 s), on the optimum for the mean
    assert MAX_SLOWDOWN == 0.05
    code, out, err = export(capsys, golden_plan_file(tmp_path, "instances/primepar/primepar-llama2-70b-32xV100.yaml"),
                            "--to", "torchtitan", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["emitted"]["fits"] and 1.01 < doc["emitted"]["iter_time_s"] / doc["plan"]["iter_time_s"] < 1.02
    code, _, err = export(capsys, mean_plan_file(tmp_path, "instances/tiny-gpt-8xA100.yaml"), "--to", "deepspeed")
    assert code == 2 and "more than 5% slower" in err
    code, _, err = export(capsys, mean_plan_file(tmp_path, "instances/gpt3-175b-1024xA100.yaml"),
                          "--to", "deepspeed")
    assert code == 2 and "+10.1%, more than 5% slower" in err and "virtual_stages" in err


def test_strict_and_force_exclude_each_other(tmp_path, capsys):
    path = golden_plan_file(tmp_path, "instances/tiny-gpt-8xA100.yaml")
    with pytest.raises(SystemExit) as info:
        main(["export", str(path), "--to", "megatron", "--strict", "--force"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# --- DualPipe -------------------------------------------------------------------------------

DUALPIPE = {"name": "tiny-dualpipe",
            "model": {"name": "tiny-moe", "layers": 8, "hidden": 1024, "heads": 16, "ffn": 4096,
                      "vocab": 32000, "seq_len": 1024, "mlp": "gelu",
                      "moe": {"experts": 8, "top_k": 2, "expert_ffn": 2048, "shared_ffn": 1024,
                              "dense_layers": 1}},
            "cluster": {"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8,
                        "intra_node_link": "nvlink", "intra_node_gbytes_per_s": 600, "nic_gbit_per_s": 200},
            "job": {"global_batch": 32, "pipeline_schedule": "dualpipe"}}


def test_a_dualpipe_plan_is_refused_by_every_exporter_even_with_force(tmp_path, capsys):
    # no framework we export to runs DeepSeek's DualPipe; before, Megatron got 1F1B and exit 0
    # (on DeepSeek-V3 / 2,048 H800: 81.2 GiB of 80 and 65% slower than the plan, issue 34)
    inst = tmp_path / "dualpipe.yaml"
    inst.write_text(yaml.safe_dump(DUALPIPE))
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(inst), "--quiet", "-o", str(plan)]) == 0
    capsys.readouterr()
    for to in TARGETS:
        for force in ([], ["--force"]):
            code, out, err = export(capsys, plan, "--to", to, *force)
            assert code == 2 and out == "" and len(err.splitlines()) == 1, (to, err)
            assert "job.pipeline_schedule dualpipe" in err and "does not run DeepSeek's DualPipe" in err
            assert "pipeline_schedule: 1f1b" in err  # the fix


# --- mixed clusters -------------------------------------------------------------------------

HETERO = ROOT / "instances" / "mixed" / "tiny-2types.yaml"  # 8 A100 + 8 H100, two node groups


def test_a_mixed_cluster_plan_gets_the_true_reason(tmp_path, capsys):
    # before: "the plan file carries no instance" right after `plan -o` wrote it, and with
    # --instance "report, export and sweep take one GPU type"
    plan = tmp_path / "plan.yaml"
    assert main(["plan", str(HETERO), "--quiet", "-o", str(plan)]) == 0
    capsys.readouterr()
    for to in TARGETS:
        for extra in ([], ["--instance", HETERO], ["--instance", HETERO, "--force"]):
            code, out, err = export(capsys, plan, "--to", to, *extra)
            assert code == 2 and out == "" and len(err.splitlines()) == 1
            # named where it is first seen: the plan's classes, or the --instance's node groups
            assert ("cluster.groups" if extra else "plan.classes") in err
            assert "different GPU types with different layouts" in err
            assert "carries no instance" not in err and "take one GPU type" not in err
            assert "--to layout" in err  # the fix: what can be written
    # a one-class plan file against the mixed-cluster instance: the instance is named
    one = golden_plan_file(tmp_path, "instances/tiny-gpt-8xA100.yaml")
    code, _, err = export(capsys, one, "--to", "megatron", "--instance", HETERO)
    assert code == 2 and "cluster.groups" in err and "different GPU types" in err


def check_layout(layout: dict, plan: dict, inst: dict) -> None:
    """What any layout must satisfy, derived from the plan and the instance files alone: every
    GPU of every group numbered once, groups in order; each stage on its group's ranks with
    tp * cp of them; no rank used twice; a group's used count the ranks its stages take; the
    layers of each class the model's, in order; the micro-batches the global batch."""
    groups = {g["name"]: g for g in inst["cluster"]["groups"]}
    first = 0
    for g in layout["groups"]:
        n = groups[g["name"]]["nodes"] * groups[g["name"]]["gpus_per_node"]
        assert g["gpus"] == n and g["ranks"] == [first, first + n - 1]
        first += n
    by_group = {g["name"]: g for g in layout["groups"]}
    tp = plan["tp"]
    taken, batch = [], 0
    for c, planned in zip(layout["classes"], plan["classes"]):
        assert c["replicas"] == planned["replicas"] and len(c["ranks"]) == c["replicas"]
        assert [s["group"] for s in c["stages"]] == planned["stages"]
        assert [s["layers"] for s in c["stages"]] == planned["layers_per_stage"]
        assert [s["first_layer"] for s in c["stages"]] == [sum(planned["layers_per_stage"][:i])
                                                            for i in range(len(c["stages"]))]
        assert sum(s["layers"] for s in c["stages"]) == inst["model"]["layers"]
        for replica in c["ranks"]:
            for stage, (lo, hi) in zip(c["stages"], replica):
                width = (tp[stage["group"]] if isinstance(tp, dict) else tp) * plan.get("cp", 1)
                assert hi - lo + 1 == width == stage["tp"] * plan.get("cp", 1)
                g = by_group[stage["group"]]
                assert g["ranks"][0] <= lo and hi <= g["ranks"][1] - (0 if g["idle"] is None
                                                                      else g["idle"][1] - g["idle"][0] + 1)
                taken += range(lo, hi + 1)
        batch += c["replicas"] * c["num_micro_batches"] * layout["micro_batch"]
    assert len(taken) == len(set(taken)) == sum(g["used"] for g in layout["groups"])
    assert batch == inst["job"]["global_batch"] == layout["global_batch"]


HETERO_GOLDENS = sorted(k for k in GOLDENS if "/mixed/" in k)


@pytest.mark.parametrize("key", HETERO_GOLDENS)
def test_every_bundled_mixed_cluster_plan_exports_its_layout(key, tmp_path, capsys):
    instance = ROOT / key.split(":")[0]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"plan": GOLDENS[key]["plan"]}))
    out_file = tmp_path / "layout.yaml"
    code, out, err = export(capsys, plan, "--to", "layout", "--instance", instance, "-o", out_file)
    assert code == 0 and out == "" and err == ""
    layout = yaml.safe_load(out_file.read_text())
    check_layout(layout, GOLDENS[key]["plan"], yaml.safe_load(instance.read_text()))


def test_the_tiny_mixed_layout_by_hand(tmp_path, capsys):
    # the golden tiny-2types plan: tp 4, 2 replicas of [a100: 3 layers, h100: 5 layers], 8
    # micro-batches of 2 each. a100 holds ranks 0-7, h100 8-15; replica 0 takes the first 4 of
    # each group (tp 4), replica 1 the next 4
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"plan": GOLDENS["instances/mixed/tiny-2types.yaml:nominal"]["plan"]}))
    code, out, _ = export(capsys, plan, "--to", "layout", "--instance", HETERO, "--json")
    layout = json.loads(out)["layout"]
    assert code == 0 and layout["classes"][0]["ranks"] == [[[0, 3], [8, 11]], [[4, 7], [12, 15]]]
    assert [(s["first_layer"], s["layers"]) for s in layout["classes"][0]["stages"]] == [(0, 3), (3, 5)]


def test_a_two_class_layout_lists_the_idle_gpus(tmp_path, capsys):
    # two replica classes: 2 replicas on a100 (tp 4: all 8 A100, ranks 0-7) with 3 micro-batches
    # each, 1 on h100 (ranks 8-11) with 10; 2*3*2 + 1*10*2 = 32, the global batch; h100's ranks
    # 12-15 idle
    plan = {"tp": 4, "micro_batch": 2, "sequence_parallel": True, "recompute": "none", "zero": 1,
            "family": "replica", "classes": [
                {"replicas": 2, "stages": ["a100"], "num_micro_batches": 3, "layers_per_stage": [8],
                 "full_recompute_layers": [0]},
                {"replicas": 1, "stages": ["h100"], "num_micro_batches": 10, "layers_per_stage": [8],
                 "full_recompute_layers": [0]}]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"plan": plan}))
    code, out, _ = export(capsys, path, "--to", "layout", "--instance", HETERO)
    layout = yaml.safe_load(out)
    assert code == 0 and [c["ranks"] for c in layout["classes"]] == [[[[0, 3]], [[4, 7]]], [[[8, 11]]]]
    assert [(g["used"], g["idle"]) for g in layout["groups"]] == [(8, None), (4, [12, 15])]
    check_layout(layout, plan, yaml.safe_load(HETERO.read_text()))


def test_layout_refuses_what_it_cannot_mean(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"plan": GOLDENS["instances/mixed/tiny-2types.yaml:nominal"]["plan"]}))
    one = golden_plan_file(tmp_path, "instances/tiny-gpt-8xA100.yaml")
    for argv, says in [([plan], "--instance"),  # a group-format plan file carries no instance
                       ([one], "one replica class"),  # a one-class plan: export it to a framework
                       ([plan, "--instance", HETERO, "--force"], "--force")]:
        code, out, err = export(capsys, *argv, "--to", "layout")
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and says in err, err


# --- a proved-infeasible instance has its own exit status --------------------------------------

TINY = ROOT / "instances" / "tiny-gpt-8xA100.yaml"
# 80 GiB A100s with 79.9 GiB reserved leave 0.1 GiB usable; tiny-gpt's smallest peak need is
# 1.0 GiB per GPU (tp 8, every layer recomputed: the planner's own reason line), so no plan fits
NO_ROOM = ["--search", "memory_reserve_gib=79.9"]


@pytest.mark.parametrize("argv", [["plan", TINY], ["plan", TINY, "--json"], ["plan", TINY, "--top", "3"],
                                  ["exhaustive", TINY, "--quiet"], ["verify", TINY, "--quiet"],
                                  ["memory", TINY], ["plan", HETERO], ["exhaustive", HETERO, "--quiet"],
                                  ["verify", HETERO, "--quiet"]],
                         ids=["plan", "plan-json", "plan-top", "exhaustive", "verify", "memory",
                              "mixed-plan", "mixed-exhaustive", "mixed-verify"])
def test_a_proved_infeasible_instance_exits_4(argv, capsys):
    from paraplan.solver.commands.exit_codes import EXIT_INFEASIBLE
    assert EXIT_INFEASIBLE == 4
    assert main([*map(str, argv), *NO_ROOM]) == 4  # was 0 (issue 34)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert main([*map(str, argv)]) == 0  # the same command with the memory: a plan, exit 0


def test_report_of_a_proved_infeasible_instance_is_written_and_exits_4(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["report", str(TINY), *NO_ROOM, "--quiet", "-o", str(page)]) == 4
    assert page.exists() and "infeasible" in capsys.readouterr().out


# --- --help ---------------------------------------------------------------------------------

def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's line wrapping undone


@pytest.mark.parametrize("command, options", [
    ("plan", ["--time-limit-s", "--threads", "--json", "--backend"]),
    ("exhaustive", ["--max-candidates", "--json"]),
    ("verify", ["--time-limit-s", "--max-candidates", "--json"]),
    ("calibrate", ["--sweeps"]),
    ("memory", ["--backend", "--time-limit-s", "--json"]),
    ("replan", ["--backend", "--time-limit-s", "--json"]),
    ("timeline", ["--backend", "--time-limit-s", "--json"]),
    ("simulate", ["--json"]),
    ("compare", ["--json"]),
])
def test_every_listed_option_has_help_and_shows_its_default(command, options, capsys):
    # read from the parser itself: each option's help text, and the help output's defaults
    from paraplan.solver.commands.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    helps = {o: a.help for a in sub._actions for o in a.option_strings}
    for option in options:
        assert helps[option] and len(helps[option].split()) >= 4, (command, option, helps[option])
    text = _help(capsys, command)
    if command == "plan":  # the defaults the parser holds, shown
        assert "(default: 60.0)" in text and "(default: 1)" in text and "(default: dp)" in text
    if command == "calibrate":
        assert "(default: 5)" in text


def test_the_exit_statuses_are_in_the_help(capsys):
    text = _help(capsys)
    assert "exit status:" in text and "4 proved infeasible" in text and "130 interrupted" in text


# the order a user meets the commands (issue 34, "--help ... the subcommands are listed
# unordered"): plan a job, look at the plan (simulate, memory, compare, report), hand it over
# (export), check a model config, then the solver's checks, mixed clusters, per-operator and batch
# tools, and the cost model's evidence. Written out here, not read from the parser.
USER_ORDER = ["plan", "simulate", "memory", "compare", "report", "export", "model", "exhaustive",
              "verify", "replan", "timeline", "partition", "sweep", "accuracy", "calibrate", "bench"]


def test_help_lists_the_subcommands_in_the_order_users_meet_them(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    usage_choices = out.split("{", 1)[1].split("}", 1)[0].split(",")
    # the help list: one line per command, its name indented by four spaces
    listed = [line.split()[0] for line in out.splitlines()
              if line.startswith("    ") and not line.startswith("     ") and line.split()]
    assert usage_choices == USER_ORDER
    assert listed == USER_ORDER


@pytest.mark.parametrize("typed, meant", [("pln", "plan"), ("exprot", "export"), ("verfy", "verify")])
def test_a_mistyped_subcommand_gets_a_suggestion(typed, meant, capsys):
    with pytest.raises(SystemExit) as info:
        main([typed])
    assert info.value.code == 2
    assert f"(did you mean '{meant}'?)" in capsys.readouterr().err


def test_a_choice_far_from_every_one_gets_no_suggestion(capsys):
    with pytest.raises(SystemExit):
        main(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err
