"""Lowering: strategy -> task graph. Hop times computed in the compiled core from routes equal the
cost model's own transfer times; a one-shot build simulates what an incremental one does. (That an
updated graph's tasks, owners and memory equal a fresh lowering's is in test_simulate.py.)"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel, has_linear_transfers
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.strategy import is_compute, random_config, random_strategy

MACHINE = load_machine("flexflow_p100", nodes=2)


class _OwnTransfers(AnalyticCostModel):
    """The analytic model with transfer_time overridden (to the same formula): lowering must ask it."""

    def transfer_time(self, link, num_bytes):
        return link.latency_s + num_bytes / link.bandwidth


class _SlowLinks(AnalyticCostModel):
    def transfer_time(self, link, num_bytes):
        return 2 * (link.latency_s + num_bytes / link.bandwidth)


@pytest.fixture(scope="module")
def alexnet():
    return load_model("alexnet", ["-b", "64"]).model.pcg


def test_which_cost_models_have_linear_transfers():
    assert has_linear_transfers(AnalyticCostModel())
    assert has_linear_transfers(ProfiledCostModel.__new__(ProfiledCostModel))
    assert not has_linear_transfers(_OwnTransfers())
    assert not has_linear_transfers(object())


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_core_hop_times_equal_the_cost_models(alexnet, seed):
    """Routes priced in the core (linear transfers) give the timeline the cost model's own
    transfer_time gives, bit for bit, and the same data moved."""
    s = random_strategy(alexnet, MACHINE, seed)
    a = Simulator(MACHINE, AnalyticCostModel()).full(s)
    b = Simulator(MACHINE, _OwnTransfers()).full(s)
    assert timelines_equal(a, b)
    assert a.moved_bytes == b.moved_bytes and a.link_bytes == b.link_bytes


def test_a_custom_transfer_time_is_used(alexnet):
    s = random_strategy(alexnet, MACHINE, 3)
    a = Simulator(MACHINE, AnalyticCostModel()).full(s)
    b = Simulator(MACHINE, _SlowLinks()).full(s)
    assert b.communication_time_s > a.communication_time_s and b.compute_time_s == a.compute_time_s


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_one_shot_build_equals_incremental(alexnet, seed):
    """A one-shot build (no owner bookkeeping, layouts released as lowering goes) simulates what an
    incremental one does; its ``delta`` is a full simulation."""
    s = random_strategy(alexnet, MACHINE, seed)
    a = Simulator(MACHINE, AnalyticCostModel(), detail=False).full(s)
    one = Simulator(MACHINE, AnalyticCostModel(), detail=False, incremental=False)
    b = one.full(s)
    assert timelines_equal(a, b) and a.memory_bytes == b.memory_bytes and a.moved_bytes == b.moved_bytes
    assert len(one.lowering._layouts) == 0
    node = next(n for n in alexnet.nodes if is_compute(n))
    s2 = s.with_config(node.id, random_config(alexnet, node, MACHINE, random.Random(seed)))
    assert timelines_equal(one.delta(s2, {node.name}), Simulator(MACHINE, AnalyticCostModel()).full(s2))


def test_one_shot_graph_refuses_to_drop():
    from flexrt.simulator.task_graph import TaskGraph, TaskKind
    g = TaskGraph(1, 0, incremental=False)
    o = g.owner(("op", "a"), 0)
    a = g.add_task(o, TaskKind.FORWARD, 0, 1.0, "a")
    b = g.add_task(o, TaskKind.BACKWARD, 0, 1.0, "b")
    g.add_edge(o, a, b)
    g.add_edge(o, a, b)  # repeated: one edge
    assert [x.tolist() for x in g._edge_arrays()] == [[a], [b]]
    with pytest.raises(ValueError, match="incremental"):
        g.drop(o)
