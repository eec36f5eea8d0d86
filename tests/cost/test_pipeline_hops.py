"""The pipeline hand-offs of MegaScale's Megatron-LM baseline (285068c8, 2023-01), priced as
that release ran them: its interleaved 1F1B schedule waits on every send and receive
(megatron/p2p_communication.py at 285068c8: `batch_isend_irecv`, each request waited, then
`torch.cuda.synchronize()`), so every hop is on the critical path. The cost model prices each
stage's hops per micro-batch, exposed (cost/coefficients.py, the `pp_p2p` stage part); this
checks the figure against a hand derivation for one row of tests/data/published/megascale.yaml
(docs/limitations.md says what it leaves open: none of it is the missing second a step).
"""

from pathlib import Path

import pytest

from paraplan.cost.calibration import load_rows, row_to_instance_plan
from paraplan.cost.readers.gpus import load_catalogue
from paraplan.cost.simulate import simulate

MEGASCALE = Path(__file__).resolve().parents[2] / "tests" / "data" / "published" / "megascale.yaml"


def test_megascale_175b_at_256_gpus_waits_on_every_hop():
    # 256 A100 (32 nodes of 8), tp 8, pp 8, dp 4, v 6 chunks, batch 768: 192 micro-batches of
    # one sequence a replica. A stage's tp group is one node, so every pipeline edge crosses
    # the network. One hop (a micro-batch's activation or gradient between two chunks):
    #   the 1/tp slice of the activation, 2,048 x 12,288 x 2 bytes / 8 = 6,291,456 bytes, over
    #   one 200 Gb/s NIC (25e9 bytes/s) at NCCL's network efficiency 0.95, plus the 10 us hop
    #   latency: 6,291,456 / 23.75e9 + 10e-6 = 274.91 us;
    #   the receivers' re-gather of the whole 50,331,648-byte activation over NVLink (Narayanan
    #   et al. SC'21 Sec. 4.1; scatter_gather_tensors_in_pipeline, on by default): a ring of 8,
    #   300 GB/s a direction at 0.80, 8.4 us call latency and 7 hops of 5 us:
    #   8.4e-6 + 7 x 5e-6 + 7/8 x 50,331,648 / 240e9 = 226.90 us;
    #   501.81 us a hop.
    # Interleaved, every stage touches two edges (the wrap-around included) once per chunk, so
    # 2 x 6 = 12 hops a micro-batch, all exposed: 192 x 12 x 501.81 us = 1.1562 s a step on
    # the pacing stage, 3.0% of the 39.1 s priced without recomputation. (The fill and drain's
    # 2 (pp - 1) chunk steps carry their hops too, inside the bubble: each stage time holds
    # its 12.)
    row = next(r for r in load_rows(str(MEGASCALE)) if r["cluster"]["num_gpus"] == 256)
    row = {**row, "config": {**row["config"], "recompute": "none"}}
    inst, plan = row_to_instance_plan(row, load_catalogue())
    assert (plan.pp, plan.virtual_stages, plan.classes[0].num_micro_batches) == (8, 6, 192)
    bd = simulate(inst, plan, reserve_bytes=0.0)
    send_s = 2048 * 12288 * 2 / 8 / (25e9 * 0.95) + 10e-6
    regather_s = 8.4e-6 + 7 * 5e-6 + 7 / 8 * 2048 * 12288 * 2 / (300e9 * 0.80)
    assert send_s + regather_s == pytest.approx(501.81e-6, abs=0.01e-6)
    assert bd.exposed_s["pp_p2p"] == pytest.approx(192 * 12 * (send_s + regather_s), rel=1e-9)
    assert bd.exposed_s["pp_p2p"] / bd.iter_time_s == pytest.approx(0.030, abs=0.001)
