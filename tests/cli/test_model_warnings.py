"""What a model's plan does not price exactly is one line each in `plan` and `simulate`, in text
and in --json (`model_warnings`), never silent (cost/model_notes.py)."""

import json
from pathlib import Path

import yaml

from paraplan import instances
from paraplan.solver.commands.cli import main

INSTANCES = Path(instances.__file__).parent
HF = Path(__file__).resolve().parents[1] / "data" / "hf"
GEMMA = ["--hf-config", str(HF / "gemma-2-9b"),
         "--cluster", str(INSTANCES / "clusters" / "dgx-h100-32nodes.yaml"),
         "--job", str(INSTANCES / "jobs" / "pretrain-4m-tokens.yaml"), "--seq-len", "8192"]


def _plan_file(tmp_path, **plan) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return str(path)


def test_simulate_shows_the_unpriced_fields(tmp_path, capsys):
    # Gemma 2 9B on 256 H100: 42 layers in 2 stages of 21, tp 8, dp 16, batch 512 = 16 x 32
    plan = _plan_file(tmp_path, tp=8, pp=2, dp=16, micro_batch=1, recompute="selective")
    assert main(["simulate", *GEMMA, "--plan", plan, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lines = out["model_warnings"]
    # the two soft-cappings, and the sliding layers (even layers) split over two stages
    assert len(lines) == 3
    assert lines[0].startswith("attn_logit_softcapping 50") and lines[1].startswith("final_logit")
    assert lines[2].startswith("21 of 42 layers attend to a 4096-token window")
    assert main(["simulate", *GEMMA, "--plan", plan]) == 0
    text = capsys.readouterr().out
    assert text.count("warning     model: ") == 3


def test_plan_json_has_model_warnings(tmp_path, capsys):
    raw = yaml.safe_load((INSTANCES / "tiny-gpt-8xA100.yaml").read_text())
    raw["model"].update(parallel_blocks=True, norms_per_layer=1)
    raw["search"] = {"tp": [2]}  # tensor parallel, so the all-reduce line applies
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["plan", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = ["parallel attention/MLP blocks: tensor-parallel all-reduces are priced as two"
                " per direction, as Megatron-LM issues them (GPT-NeoX sums the two branches"
                " before one forward all-reduce)"]
    assert out["plan"]["tp"] == 2 and out["model_warnings"] == expected
    assert main(["plan", str(INSTANCES / "tiny-gpt-8xA100.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_warnings"] == []
