"""The AllReduce's latency (``collectives.allreduce_latency``): NCCL's model of a ring's steps and
of a double binary tree across nodes, the faster one taken, and the lowering's rings paying it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.ir.datatype import DataType
from flexrt.ir.enums import ActiMode
from flexrt.machine import load_machine
from flexrt.model import FFConfig, FFModel
from flexrt.simulator.collectives import TREE_BANDWIDTH, allreduce_latency
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel

COST = AnalyticCostModel()


def _route_latency(machine, a, b):
    return sum(machine.links[l].latency_s for l in machine.route(a, b))


def _kinds(machine, order):
    """(slowest route between members of a node, slowest between nodes) of the ring ``order``."""
    n, intra, inter = len(order), 0.0, 0.0
    for i in range(n):
        a, b = order[i], order[(i + 1) % n]
        lat = _route_latency(machine, a, b)
        if machine.devices[a].node == machine.devices[b].node:
            intra = max(intra, lat)
        else:
            inter = max(inter, lat)
    return intra, inter


def test_summit_values_by_hand():
    """Summit: a ring within a node crosses the X-Bus (2.4 us a step); between nodes a route costs
    5 us. 4 KiB over 16 nodes (96 GPUs) takes NCCL's tree: 2 (5 x 2.4 + log2(16) x 5) = 64 us, plus
    what the tree's 0.9 bandwidth adds to 8,106 bytes at 12.5 GB/s (0.08 us); the ring would pay
    2 (96 - 16) x 2.4 + 2 x 15 x 5 = 534 us. 64 MiB takes the ring."""
    one = load_machine("summit", nodes=1)
    order = one.ring_channels(list(range(6)))[0]
    got = allreduce_latency(one, COST, order, 4096)
    assert got.algorithm == "ring" and got.seconds == pytest.approx(2 * 5 * 2.4e-6)
    big = load_machine("summit", nodes=16)
    order = big.ring_channels(list(range(96)))[0]
    small = allreduce_latency(big, COST, order, 4096)
    per_send = 2 * 95 * 4096 // 96
    extra = per_send / 12.5e9 * (96 / (TREE_BANDWIDTH * 95) - 1)
    assert small.algorithm == "tree"
    assert small.seconds == pytest.approx(2 * (5 * 2.4e-6 + 4 * 5e-6) + extra, rel=1e-9)
    large = allreduce_latency(big, COST, order, 64 << 20)
    assert large.algorithm == "ring" and large.seconds == pytest.approx(2 * 80 * 2.4e-6 + 2 * 15 * 5e-6)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["summit", "dgx_a100", "dgx1_v100", "flexflow_k80"]), st.integers(1, 8),
       st.integers(0, 28), st.data())
def test_the_faster_of_ring_and_tree(preset, nodes, log_bytes, data):
    """On any preset, node count, member set and size: within a node the ring's 2(n-1) steps at
    the slowest route (the model before trees); across nodes never more than the ring's
    2(n-N) intra + 2(N-1) inter steps, a tree only where it is faster, and the latency grows with
    the bytes (a tree's bandwidth term) but never past the ring's."""
    machine = load_machine(preset, nodes=nodes)
    members = data.draw(st.lists(st.integers(0, machine.num_devices - 1), min_size=2, max_size=machine.num_devices,
                                 unique=True))
    order = machine.ring_channels(sorted(members))[0]
    n, span = len(order), len({machine.devices[d].node for d in order})
    intra, inter = _kinds(machine, order)
    ring = 2 * (n - span) * intra + 2 * (span - 1) * inter
    got = allreduce_latency(machine, COST, order, 1 << log_bytes)
    bigger = allreduce_latency(machine, COST, order, 2 << log_bytes)
    if span == 1:
        assert got.algorithm == "ring"
        worst = max(_route_latency(machine, order[i], order[(i + 1) % n]) for i in range(n))
        assert got.seconds == pytest.approx(2 * (n - 1) * worst, rel=1e-12)
    assert got.seconds <= ring * (1 + 1e-12)
    assert (got.algorithm == "tree") == (got.seconds < ring)
    assert got.seconds <= bigger.seconds * (1 + 1e-12)


def _mlp(batch: int, width: int):
    m = FFModel(FFConfig(["-b", str(batch)]))
    t = m.create_tensor([batch, width], DataType.DT_FLOAT)
    m.dense(t, width, ActiMode.AC_MODE_NONE, name="fc", use_bias=False)
    return m.pcg


def test_the_simulated_ring_pays_the_trees_latency():
    """One small data-parallel layer over 16 summit nodes: its gradient AllReduce (16 KiB) pays the
    tree's 64 us, not the 950 us a ring paying its slowest route at each of its 190 steps would; the
    iteration is the forward, the backward, that latency and the sums (a few us each)."""
    machine = load_machine("summit", nodes=16)
    pcg = _mlp(96 * 2, 64)
    sim = Simulator(machine, COST).full(data_parallel(pcg, machine)).iteration_time_s
    order = machine.ring_channels(list(range(96)))[0]
    tree = allreduce_latency(machine, COST, order, 64 * 64 * 4 // 2)
    assert tree.algorithm == "tree"
    assert tree.seconds < sim < tree.seconds + 100e-6
    assert sim < 2 * 95 * 5e-6
