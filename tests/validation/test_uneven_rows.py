"""Published rows whose layer split is uneven as Megatron runs it (the embedding and loss counted
as layers, first/last stage counts), and `paraplan accuracy` on a file with a bad row: the row is
reported (id, field, reason), the rest priced, and the exit status says a row was refused."""

import copy
import json
from pathlib import Path

import yaml

from paraplan.cost.calibration import load_rows, predict_rows, row_to_instance_plan
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.solver.commands.cli import main
from paraplan.solver.commands.exit_codes import EXIT_ROWS_REFUSED
from paraplan.solver.commands.inputs import read_calibration_files

ROOT = Path(__file__).resolve().parents[2]
BRIDGE_405B = ROOT / "tests" / "data" / "published" / "megatron-bridge-405b.yaml"


def test_every_bundled_row_is_read_priced_and_fits_memory():
    rows, _, refused = read_calibration_files(None, keep_going=True)
    assert refused == []
    results = predict_rows(rows)
    assert [r.id for r in results if r.predicted_iter_time_s is None] == []
    # every bundled run ran, so none may be predicted out of memory
    assert [r.id for r in results if not r.fits_memory] == []


def test_megatron_bridge_405b_pp8_vp8_row_is_read_and_priced():
    # 126 layers on pp 8 with 8 virtual stages, embedding and loss counted: 128 slots, 16 per
    # rank (tests/data/published/megatron-bridge-405b.yaml cites the recipe that sets it)
    (row,) = load_rows(str(BRIDGE_405B))
    inst, plan = row_to_instance_plan(row, load_catalogue())
    assert plan.layers_per_stage == (15, 16, 16, 16, 16, 16, 16, 15)
    assert plan.chunk_layers[0][0] == 1 and plan.chunk_layers[7][7] == 1
    (res,) = predict_rows([row])
    assert res.reason is None and res.predicted_iter_time_s > 0
    # 1536 x 8192 tokens / (326 tokens/s/GPU x 1024 GPUs), the table's throughput
    assert res.measured_iter_time_s == 37.693


def test_one_bad_row_is_reported_and_the_rest_priced(capsys, tmp_path):
    (good,) = load_rows(str(BRIDGE_405B))
    bad = copy.deepcopy(good)
    bad["id"] = "same-run-without-the-accounting"
    for key in ("embedding_in_split", "loss_in_split"):
        del bad["config"][key]  # 126 layers do not split into 8 x 8 equal chunks
    path = tmp_path / "rows.yaml"
    path.write_text(yaml.safe_dump([good, bad], sort_keys=False))

    assert main(["accuracy", str(path), "--json"]) == EXIT_ROWS_REFUSED
    report = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in report["rows"]] == [good["id"]]
    assert report["rows_refused"] == [bad["id"]]
    (refused,) = [r for r in report["not_modelled"] if r["id"] == bad["id"]]
    assert refused["field"] == "[1].config.virtual_stages"
    assert "do not divide the 126 layers" in refused["reason"] and "embedding_in_split" in refused["reason"]

    assert main(["accuracy", str(path)]) == EXIT_ROWS_REFUSED
    out = capsys.readouterr().out
    assert f"not read: {bad['id']} ({path}): [1].config.virtual_stages:" in out
    assert good["id"] in out  # priced in the table


def test_a_file_of_good_rows_exits_zero(capsys):
    assert main(["accuracy", str(BRIDGE_405B), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_refused"] == []
