"""DeepEP's network rate over few NVLink domains (cost/moe.DEEPEP_PEER_BYTES_PER_S, issue 31):
a rank's network copies flow at min(NIC, remote domains x the single-peer rate). Each number is
derived by hand in the comments from DeepEP's published V1 benchmark (deepseek-ai/DeepEP
docs/legacy.md, "Normal kernels with NVLink and RDMA forwarding": H800, one CX7 400 Gbit/s NIC a
GPU, 4,096 tokens, hidden 7,168, top-8 experts, FP8 dispatch and BF16 combine)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from paraplan.cost import moe
from paraplan.cost.comm import NetEfficiency
from paraplan.cost.readers.instance import load_instance

ROOT = Path(__file__).resolve().parents[2]
# H800 nodes of 8 GPUs with one 400 Gbit/s NIC each: DeepEP's own benchmark hardware
DEEPSEEK = ROOT / "instances" / "deepseek-v3-shaped-2048xH800.yaml"
NET = NetEfficiency()
# DeepEP's benchmark: 4,096 tokens of hidden 7,168, the BF16 combine's 2 bytes an element
TOKEN_BYTES = 4096 * 7168 * 2


def h800(max_nodes_per_token=None):
    inst = load_instance(DEEPSEEK)
    m = replace(inst.model, moe=replace(inst.model.moe, top_k=8, max_nodes_per_token=max_nodes_per_token))
    return m, inst.cluster.one_group


def test_the_nic_is_400_gbit():
    # the rates below assume 50 GB/s a NIC, 0.95 of it achieved (cost/comm.NetEfficiency)
    _, group = h800()
    assert group.inter_node.bw_bytes_per_s == pytest.approx(50e9)
    assert group.domain_gpus == 8


@pytest.mark.parametrize("ep, rate", [
    (16, 21.5e9),  # 2 nodes: 1 remote domain, 1 x 21.5 GB/s < 0.95 x 50 = 47.5: window-bound
    (24, 43.0e9),  # 3 nodes: 2 x 21.5 = 43 < 47.5: still window-bound
    (32, 47.5e9),  # 4 nodes: 3 x 21.5 = 64.5 > 47.5: the NIC binds
    (64, 47.5e9),  # 8 nodes: the NIC
])
def test_network_rate_by_remote_domains(ep, rate):
    _, group = h800()
    links = moe.ep_links(group, ep, 1)
    assert moe.deepep_network_bytes_per_s(ep, links, NET) == pytest.approx(rate, rel=1e-12)


@pytest.mark.parametrize("ep, nodes_limit, measured_logical_gbps, logical_copies", [
    # DeepEP's test (tests/test_internode.py) routes within min(nodes, 4) groups and counts a
    # token once per node it reaches, its own included (num_rdma_token_sent): uniform top-8
    # over N nodes reaches N (1 - (1 - 1/N)^8) of them, at most 4 with the group limit.
    # EP16, 2 nodes: 2 (1 - 1/256) = 1.9922 nodes a token; measured 43 GB/s logical
    (16, None, 43e9, 2 * (1 - 0.5 ** 8)),
    # EP32, 4 nodes: 4 (1 - 0.75^8) = 3.5996; measured 58 GB/s
    (32, None, 58e9, 4 * (1 - 0.75 ** 8)),
    # EP64, 8 nodes limited to 4: 8 (1 - 0.875^8) = 5.25 capped at 4; measured 51 GB/s
    (64, 4, 51e9, 4.0),
])
def test_deepep_benchmark_combine_times(ep, nodes_limit, measured_logical_gbps, logical_copies):
    # The measured kernel time is logical bytes over the logical rate: EP16 1.9922 x 58.72 MB /
    # 43 GB/s = 2.721 ms; EP32 3.5996 x 58.72 MB / 58 GB/s = 3.644 ms; EP64 4 x 58.72 MB / 51
    # GB/s = 4.605 ms. Priced (deepep_time_s, network copies N (1 - (1 - 1/N)^8) (N - 1)/N):
    # EP16 0.9961 x 58.72 MB / 21.5 GB/s = 2.720 ms (+ 2 latencies), EP32 2.6997 x 58.72 MB /
    # 47.5 GB/s = 3.337 ms (8% fast), EP64 3.5 x 58.72 / 47.5 = 4.327 ms (6% fast). Before the
    # single-peer rate EP16's network was priced at 47.5 GB/s, 1.231 ms, and H800's NVLink side
    # set the time: 5.63 NVLink copies x 58.72 MB / (200 GB/s x 0.8) = 2.07 ms, 23% fast (on
    # H100's NVLink the 1.231 ms would bind: 2.2 times fast). That H800's NVLink is not what
    # holds the measured 2.72 ms back: 2 nodes of H200, NVLink as H100's, measured the same
    # 38.2-44.4 GB/s logical at 125-145 GB/s of NVLink traffic (deepseek-ai/DeepEP issue 493).
    m, group = h800(nodes_limit)
    links = moe.ep_links(group, ep, 1)
    measured_s = logical_copies * TOKEN_BYTES / measured_logical_gbps
    priced_s = moe.deepep_time_s(TOKEN_BYTES, m, ep, links, NET)
    assert priced_s == pytest.approx(measured_s, rel=0.10)


def test_two_node_rate_is_the_measured_single_peer_share():
    # the constant is the EP16 row read back: of 1.9922 logical copies a token 0.9961 crossed
    # the wire (N = 2: (N - 1)/N = 1/2 of them), so 43 GB/s logical is 21.5 GB/s on the wire
    m, group = h800()
    network, _ = moe.deepep_copies(m, 16, 8)
    logical = 2 * (1 - 0.5 ** 8)
    assert network / logical == pytest.approx(0.5, rel=1e-12)
    assert moe.DEEPEP_PEER_BYTES_PER_S == pytest.approx(43e9 * network / logical, rel=1e-12)
