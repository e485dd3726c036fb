"""Ring AllReduces across nodes run one channel per network adapter, as NCCL does
(``Machine.ring_channels``): the rings' orders, every adapter port carrying an equal share in both
directions, the step latencies paid once, delta equal to full, and Unity's ring cost following."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.machine import load_machine
from flexrt.machine.machine import LinkType, Machine
from flexrt.model import load_model
from flexrt.search.unity import LocalCosts
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.strategy import SearchSpace, data_parallel
from tests.simulator.delta_law import random_changes

COST = AnalyticCostModel()


def test_summit_channels_enter_and_leave_every_node_through_each_adapter():
    m = load_machine("summit", nodes=2)
    got = m.ring_channels(range(12))
    assert got == (tuple(range(12)), (3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8))


@pytest.mark.parametrize("name, nics", [("summit", 2), ("dgx_a100", 8), ("dgx1_v100", 4), ("dgx2h", 8)])
@pytest.mark.parametrize("nodes", [2, 3])
def test_one_channel_per_adapter_each_a_rotation_of_every_node(name, nics, nodes):
    m = load_machine(name, nodes=nodes)
    per = m.devices_per_node
    channels = m.ring_channels(range(m.num_devices))
    assert len(channels) == nics
    assert channels[0] == tuple(range(m.num_devices))
    entries, exits = set(), set()
    for ring in channels:
        assert sorted(ring) == list(range(m.num_devices))
        for node in range(nodes):
            run = ring[node * per:(node + 1) * per]
            assert sorted(run) == list(range(node * per, (node + 1) * per))
            s = run.index(node * per)
            assert run[s:] + run[:s] == tuple(range(node * per, (node + 1) * per))  # cyclic order kept
        entries.add(m._adapter_of(ring[0]))
        exits.add(m._adapter_of(ring[per - 1]))
    assert len(entries) == len(exits) == nics          # every adapter in and out once


def test_one_channel_where_a_ring_cannot_use_more():
    m = load_machine("summit", nodes=2)
    assert m.ring_channels([0, 1, 2, 3, 4, 5]) == ((0, 1, 2, 3, 4, 5),)      # one node
    assert m.ring_channels([0, 6]) == ((0, 6),)                              # one member per node
    assert m.ring_channels([0, 1, 6, 7]) == ((0, 1, 6, 7),)                  # one adapter per node
    assert m.ring_channels([0, 1, 6, 9]) == ((0, 1, 6, 9),)                  # nodes unlike
    assert m.ring_channels([0, 3, 6, 9]) == ((0, 3, 6, 9), (3, 0, 9, 6))
    assert load_machine("flexflow_p100", nodes=2).ring_channels(range(8)) == (tuple(range(8)),)


def _network_bytes(sim: Simulator, machine: Machine) -> dict[str, int]:
    col = sim.graph.columns()
    nc = sim.graph.num_compute_devices
    hops = np.flatnonzero(col["alive"] & (col["transfer"] >= 0) & (col["device"] >= nc))
    per = np.bincount(col["device"][hops] - nc, weights=col["xfer_bytes"][col["transfer"][hops]],
                      minlength=len(machine.links))
    return {f"{l.src}->{l.dst}": int(per[l.id]) for l in machine.links if l.type is LinkType.NETWORK}


def _single_channel(monkeypatch, machine):
    """From now on every ring is one channel (the lowering as it was)."""
    monkeypatch.setattr(Machine, "_ring_channels", lambda self, devs: (devs,))
    machine._cache.clear()


@pytest.mark.parametrize("name, nodes", [("summit", 2), ("summit", 4), ("dgx1_v100", 2)])
def test_data_parallel_gradients_load_every_adapter_port_alike(name, nodes, monkeypatch):
    machine = load_machine(name, nodes=nodes)
    pcg = load_model("mlp", ["-b", str(8 * machine.num_devices)]).model.pcg
    sim = Simulator(machine, COST, detail=False)
    sim.full(data_parallel(pcg, machine))
    channels = _network_bytes(sim, machine)
    assert min(channels.values()) > 0
    assert max(channels.values()) - min(channels.values()) <= 0.01 * max(channels.values())
    fast = sim.iteration_time()
    _single_channel(monkeypatch, machine)
    sim = Simulator(machine, COST, detail=False)
    sim.full(data_parallel(pcg, machine))
    single = _network_bytes(sim, machine)
    used = [b for b in single.values() if b]
    assert len(used) == 2 * nodes                                 # one port out and one in per node
    assert sum(channels.values()) == pytest.approx(sum(used), rel=0.01)   # the same bytes, spread
    assert fast < sim.iteration_time()


@pytest.mark.parametrize("seed", range(3))
def test_delta_equals_full_with_channels(seed):
    machine = load_machine("summit", nodes=2)
    base = load_model("mlp", ["-b", str(4 * machine.num_devices)]).model.pcg
    sim = Simulator(machine, COST)
    sim.full(data_parallel(base, machine))
    for strategy, changed in random_changes(base, machine, data_parallel(base, machine), seed, 5):
        result = sim.delta(strategy, {changed})
        fresh = Simulator(machine, COST).full(strategy)
        assert timelines_equal(result, fresh)
        assert result.moved_elements == fresh.moved_elements


def test_unity_ring_cost_and_loads_follow_the_channels(monkeypatch):
    machine = load_machine("summit", nodes=2)
    costs = LocalCosts(machine, COST, SearchSpace.full().kinds)
    devices, nbytes = list(range(12)), 64 << 20
    t, loads = costs.ring(devices, nbytes), costs.ring_loads(devices, nbytes)
    network = [i for i, l in enumerate(costs.shared) if machine.links[l].type in (LinkType.NETWORK, LinkType.NIC)]
    _single_channel(monkeypatch, machine)
    one = LocalCosts(machine, COST, SearchSpace.full().kinds)
    t1, loads1 = one.ring(devices, nbytes), one.ring_loads(devices, nbytes)
    assert t < 0.6 * t1                          # half the bytes through each port
    assert np.count_nonzero(loads[network]) == 2 * np.count_nonzero(loads1[network])
    assert loads[network].sum() == pytest.approx(loads1[network].sum(), rel=0.05)


def _one_weight(n: int, width: int):
    """One dense layer of width x width (its gradient ring dominates) at a batch of one row per device."""
    from flexrt.core import DataType, FFConfig, FFModel
    m = FFModel(FFConfig([]))
    m.dense(m.create_tensor([n, width], DataType.DT_FLOAT), width, use_bias=False, name="fc")
    return m.pcg


def _ring_seconds(sim: Simulator) -> float:
    """From the first gradient-ring transfer's start to the last one's end (the sums after them are
    the reduction's own time, not the network's)."""
    from flexrt.simulator.task_graph import CATEGORY_CODE, Category
    ids, _, _, start, end = sim.engine.timeline()
    col = sim.graph.columns()
    x = col["transfer"][ids]
    ring = (x >= 0) & (col["xfer_category"][np.maximum(x, 0)] == CATEGORY_CODE[Category.WEIGHT_SYNC])
    return float(end[ring].max() - start[ring].min())


@pytest.mark.parametrize("nodes", [2, 4])
def test_allreduce_bus_bandwidth_across_dgx_a100_nodes_is_every_adapter_at_once(nodes, monkeypatch):
    # nccl-tests' bus bandwidth of an AllReduce, 2(n-1)/n S / t: a flat ring runs at its slowest
    # link; NCCL's channels cross every node through all 8 HDR adapters (8 x 25 GB/s; nccl-tests
    # report about 180-190 GB/s on DGX A100 clusters), one ring through one adapter's port (25 GB/s)
    machine = load_machine("dgx_a100", nodes=nodes)
    n = machine.num_devices
    pcg = _one_weight(n, 8192)                                  # 256 MiB of float32 gradient
    size = 8192 * 8192 * 4
    sim = Simulator(machine, COST, detail=False)
    sim.full(data_parallel(pcg, machine))
    busbw = 2 * (n - 1) / n * size / _ring_seconds(sim)
    assert 0.9 * 8 * 25e9 < busbw <= 8 * 25e9
    _single_channel(monkeypatch, machine)
    sim = Simulator(machine, COST, detail=False)
    sim.full(data_parallel(pcg, machine))
    one = 2 * (n - 1) / n * size / _ring_seconds(sim)
    assert 0.9 * 25e9 < one <= 25e9
