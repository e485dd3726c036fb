"""DisCo's two clusters as presets (``disco_a``, ``disco_b``): sizes, vendor numbers, routes, and a
100 MB ring AllReduce whose simulated time is checked against the hand computation from the presets'
effective bandwidths (PCIe 3.0 x16 12 GB/s, 100 GbE 11.5 GB/s)."""

from __future__ import annotations

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.machine import LinkType, load_machine, preset_names, preset_spec
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.task_graph import Category, TaskKind
from flexrt.strategy import data_parallel

COST = AnalyticCostModel()
PCIE_BW, NET_BW = 12e9, 11.5e9           # the presets' effective PCIe 3.0 x16 and 100 GbE figures
ALLREDUCE_BYTES = 100_000_000            # one float32 weight of 5000 x 5000
CLUSTERS = {  # name -> (nodes, GPUs per node, device kind)
    "disco_a": (6, 2, "GTX-1080Ti-11GB"),
    "disco_b": (8, 8, "T4-16GB"),
}


def _types(m, src, dst):
    return [t.value for t in m.route_types(src, dst)]


def _one_weight(batch: int):
    """One dense layer with a 5000 x 5000 float32 kernel (100 MB) and no bias: data parallel, its
    weight sync is a single ring AllReduce of 100 MB over every device."""
    ff = FFModel(FFConfig(["-b", str(batch)]))
    t = ff.create_tensor([batch, 5000], DataType.DT_FLOAT)
    ff.dense(t, 5000, ActiMode.AC_MODE_NONE, use_bias=False, name="dense")
    return ff.pcg


def _convnet(batch: int, dtype: DataType):
    """Four 3x3 convolutions of 64 channels on 56 x 56: about 290 FLOP per byte moved, compute bound
    on both clusters' GPUs in both dtypes."""
    ff = FFModel(FFConfig(["-b", str(batch)]))
    t = ff.create_tensor([batch, 64, 56, 56], dtype)
    for i in range(4):
        t = ff.conv2d(t, 64, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, name=f"conv{i}")
    return ff.pcg


def _ring(machine):
    """Simulate the 100 MB AllReduce over all of ``machine``'s devices; returns (weight-sync hops,
    time from the first hop's start to the last ring sum's end)."""
    sim = Simulator(machine, COST)
    r = sim.full(data_parallel(_one_weight(machine.num_devices), machine))
    assert r.moved_bytes["weight_sync"] == 2 * (machine.num_devices - 1) * ALLREDUCE_BYTES
    tl = r.timeline
    start = dict(zip(tl["ids"].tolist(), tl["start"].tolist()))
    end = dict(zip(tl["ids"].tolist(), tl["end"].tolist()))
    tasks = sim.lowering.graph.tasks.values()
    hops = [t for t in tasks if t.kind is TaskKind.TRANSFER and t.category is Category.WEIGHT_SYNC]
    sums = [t for t in tasks if t.kind is TaskKind.REDUCE]
    return hops, max(end[t.id] for t in sums) - min(start[t.id] for t in hops)


def _per_gpu_time(name: str, dtype: DataType) -> float:
    m = load_machine(name, nodes=1)
    return Simulator(m, COST).time_full(data_parallel(_convnet(64, dtype), m, 1))


def test_disco_presets_are_listed_with_their_cluster_in_the_description():
    assert {"disco_a", "disco_b"} <= set(preset_names())
    assert preset_spec("disco_a").description.startswith("DisCo's cluster A")
    assert preset_spec("disco_b").description.startswith("DisCo's cluster B")


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_disco_preset_loads_with_the_papers_device_count(name):
    nodes, per_node, kind = CLUSTERS[name]
    m = load_machine(name)
    assert (m.num_nodes, m.devices_per_node, m.num_devices) == (nodes, per_node, nodes * per_node)
    assert {d.spec.name for d in m.devices} == {kind}


def test_disco_device_counts_are_12_and_64():
    assert (load_machine("disco_a").num_devices, load_machine("disco_b").num_devices) == (12, 64)


def test_gtx_1080ti_vendor_numbers():
    spec = load_machine("disco_a").devices[0].spec
    assert spec.memory_bytes == 11 * 2**30 and spec.memory_bandwidth == 484e9
    assert spec.flops(DataType.DT_FLOAT) == pytest.approx(11.34e12)
    # no tensor cores; frameworks run half tensors with float32 math on GP102 (native FP16 is 1/64)
    assert spec.flops(DataType.DT_HALF) == spec.flops(DataType.DT_FLOAT)
    assert spec.flops(DataType.DT_DOUBLE) == pytest.approx(11.34e12 / 32, rel=0.01)


def test_tesla_t4_vendor_numbers():
    spec = load_machine("disco_b").devices[0].spec
    assert spec.memory_bytes == 16 * 2**30 and spec.memory_bandwidth == 320e9
    assert (spec.flops(DataType.DT_FLOAT), spec.flops(DataType.DT_HALF)) == (pytest.approx(8.1e12), 65e12)
    assert spec.flops(DataType.DT_BFLOAT16) == spec.flops(DataType.DT_FLOAT)  # Turing has no bfloat16 units


def test_disco_a_intra_node_is_pcie_and_cross_node_is_bounded_by_the_100gbe_port():
    m = load_machine("disco_a")
    assert _types(m, 0, 1) == ["pcie", "pcie"] and m.route_bandwidth(0, 1) == PCIE_BW
    assert _types(m, 1, 2) == ["pcie", "nic", "network", "network", "nic", "pcie"]
    slowest = min(m.route(1, 2), key=lambda i: m.links[i].bandwidth)
    assert m.links[slowest].type is LinkType.NETWORK and m.route_bandwidth(1, 2) == NET_BW


def test_disco_b_peers_share_a_socket_switch_and_reach_the_nic_through_socket_0():
    m = load_machine("disco_b")
    assert [m.links[i].dst for i in m.route(0, 3)] == ["n0.sw0", "n0.gpu3"]           # one PCIe switch
    assert _types(m, 3, 4) == ["pcie", "pcie", "xbus", "pcie", "pcie"]                 # across the sockets
    assert m.route_bandwidth(0, 3) == m.route_bandwidth(3, 4) == PCIE_BW
    assert _types(m, 7, 8) == ["pcie", "pcie", "xbus", "nic", "network", "network", "nic", "pcie", "pcie"]
    slowest = min(m.route(7, 8), key=lambda i: m.links[i].bandwidth)
    assert m.links[slowest].type is LinkType.NETWORK and m.route_bandwidth(7, 8) == NET_BW


def _ring_latency(m) -> float:
    """NCCL's ring latency over every device in order: 2(n - N) steps at the slowest route between
    neighbours of a node, 2(N - 1) at the slowest between nodes (N nodes)."""
    n, nodes = m.num_devices, m.num_nodes
    lat = [sum(m.links[link].latency_s for link in m.route(i, (i + 1) % n)) for i in range(n)]
    intra = max(x for i, x in enumerate(lat) if m.devices[i].node == m.devices[(i + 1) % n].node)
    inter = max((x for i, x in enumerate(lat) if m.devices[i].node != m.devices[(i + 1) % n].node), default=0.0)
    return 2 * (n - nodes) * intra + 2 * (nodes - 1) * inter


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_ring_allreduce_of_100mb_over_the_whole_cluster_matches_the_hand_computation(name):
    m = load_machine(name)
    n = m.num_devices
    share = 2 * (n - 1) * ALLREDUCE_BYTES // n          # what each member sends its neighbour
    # every ring crosses a node: the 100 GbE port; the ring's steps pay their routes' latencies (100 MB
    # takes the ring, not NCCL's tree)
    by_hand = share / NET_BW + _ring_latency(m)
    hops, span = _ring(m)
    # sends run at once, each directional link carries one of them (no queueing), so the slowest hop
    # is the transfer time: the network hop, plus the ring's steps' latencies
    slowest = max(hops, key=lambda t: t.exe_s)
    assert slowest.link_type == "NETWORK" and slowest.exe_s == pytest.approx(by_hand, abs=10e-6)
    assert {t.link_type for t in hops} >= {"PCIE", "NIC", "NETWORK"}
    # then one ring sum, a memory-bound pass far shorter than the transfer
    assert by_hand < span < 1.1 * by_hand
    assert span == pytest.approx({"disco_a": 16.05e-3, "disco_b": 18.98e-3}[name], rel=0.1)


def test_disco_b_node_ring_is_bounded_by_pcie_and_slower_than_dgx1_nvlink():
    node = load_machine("disco_b", nodes=1)
    hops, span = _ring(node)
    by_hand = 2 * 7 * ALLREDUCE_BYTES / 8 / PCIE_BW + _ring_latency(node)  # 175 MB per member at 12 GB/s
    assert max(t.exe_s for t in hops) == pytest.approx(by_hand, abs=10e-6)
    assert by_hand < span < 1.1 * by_hand
    _, dgx1_span = _ring(load_machine("dgx1_v100"))
    assert dgx1_span < span / 1.5                       # NVLink bricks of 25-50 GB/s against 12 GB/s


def test_conv_per_gpu_time_float32_a_faster_float16_b_faster():
    a32, b32 = _per_gpu_time("disco_a", DataType.DT_FLOAT), _per_gpu_time("disco_b", DataType.DT_FLOAT)
    a16, b16 = _per_gpu_time("disco_a", DataType.DT_HALF), _per_gpu_time("disco_b", DataType.DT_HALF)
    # float32, compute bound: the ratio of peaks, 8.1 / 11.34 = 0.71 (launch overheads pull toward 1)
    assert a32 / b32 == pytest.approx(8.1 / 11.34, rel=0.05)
    # float16: the T4's tensor cores (65) against the 1080 Ti's float32-rate math (11.34), at most 5.7x
    assert 3 < a16 / b16 <= 65 / 11.34
    assert a16 == pytest.approx(a32, rel=0.1)           # no float16 speed-up on a GTX 1080 Ti
