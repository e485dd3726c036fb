"""Add's operand axis (Unity Fig. 11b): an Add whose operands lie on separate devices adds them where
they are, leaving two partial sums, and a consumer replicated on both devices gets the sum by one
AllReduce, instead of each operand sent to one device and the result sent back.

Checked: the pieces' regions (one whole operand each, nothing of the other), the reshard plans
(operands read in place, an AllReduce into the replicated consumer), the data moved against the
Add on one device, the refused degrees, and the central law (serial, threads, subtract, random
strategies) in float64 to 1e-10.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.errors import ShapeError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops.element_binary import ElementBinaryAttrs
from flexrt.machine import load_machine
from flexrt.machine.views import view_from_device_ids
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import simulate
from flexrt.strategy import OpConfig, Strategy, all_axes, apply_single, is_compute, random_strategy
from flexrt.strategy.layout import operator_layout
from flexrt.strategy.reshard import reshard_plan
from tests.runtime.test_central_law import compare_with_one_device, weights_for

TOL = 1e-10
LOSS = "mean_squared_error_avg"


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def towers(op: str = "add", dt=DataType.DT_DOUBLE):
    """Two dense towers whose outputs are added (or subtracted), then a ReLU and a head."""
    m = FFModel(FFConfig([]))
    x1, x2 = m.create_tensor([8, 5], dt), m.create_tensor([8, 3], dt)
    a, b = m.dense(x1, 6, name="a"), m.dense(x2, 6, name="b")
    s = getattr(m, op)(a, b, name="sum")
    m.dense(m.relu(s, name="relu"), 2, name="head")
    return m.pcg


def fig11b(pcg, machine, operand_parts: bool = True, devices=(0, 1)) -> Strategy:
    """Tower a on ``devices[0]``, tower b on ``devices[1]``, the sum cut by operand there (or whole on
    the first), the ReLU replicated on both, the head's two outputs one on each (its input copied)."""
    d0, d1 = devices
    both = list(devices)
    where = {"a": ({}, [d0]), "b": ({}, [d1]), "relu": ({"replica": 2}, both), "head": ({"out": 2}, both),
             "sum": ({"operand": 2}, both) if operand_parts else ({}, [d0])}
    configs = {}
    for node in pcg.nodes:
        if not is_compute(node):
            continue
        degrees, ids = where.get(node.name, ({}, [d0]))
        axes = [a.name for a in all_axes(pcg, node)]
        configs[node.id] = OpConfig(tuple(degrees.items()),
                                    view_from_device_ids(machine, tuple(degrees.get(a, 1) for a in axes), ids))
    return Strategy.from_configs(pcg, configs)


def _layout(s, machine, name):
    return operator_layout(machine, s.wiring(), name, s.shapes(name), s.view(name))


def test_each_piece_reads_one_whole_operand_and_leaves_a_partial_sum(machine):
    s = fig11b(towers(), machine)
    lay = _layout(s, machine, "sum")
    assert lay.degree["operand"] == 2 and list(lay.devices) == [0, 1]
    for p in range(2):
        for i, regions in enumerate(lay.operand_regions):
            assert regions[p].ranges == (((0, 8), (0, 6)) if i == p else ((0, 0), (0, 0))), (p, i)
    assert s.shapes("sum").outputs[0].sum_degree == 2
    assert all(x.sum_degree == 1 and x.dims[0].degree == 1 for x in s.shapes("sum").operands)


def test_operands_are_read_in_place_and_the_replicated_consumer_gets_an_allreduce(machine):
    pcg = towers()
    s = fig11b(pcg, machine)
    w = s.wiring()
    A = _layout(s, machine, "sum")
    for i in range(2):
        plan = reshard_plan(_layout(s, machine, w.producer[("sum", i)].name), 0, A, i, 1)
        assert all(qdev == pdev for _, qdev, _, pdev, _ in plan.moves), plan.moves
    plan = reshard_plan(A, 0, _layout(s, machine, "relu"), 0, 2)  # 2 partial sums per relu operand
    assert plan.reductions, "two partial sums into two replicas: an AllReduce"
    # against the Add on device 0 (b's output sent there, the sum sent back to device 1):
    # the same elements move here (an AllReduce of 2 moves half each way, twice), in two steps
    whole = fig11b(pcg, machine, operand_parts=False)
    sim = [simulate(x, machine, AnalyticCostModel()) for x in (s, whole)]
    assert sim[0].moved_elements["activation"] <= sim[1].moved_elements["activation"]


def test_degrees_other_than_one_per_operand_are_refused():
    with pytest.raises(ShapeError, match="parts must be 1 or 2"):
        ElementBinaryAttrs(OpType.EW_ADD, parts=3)
    pcg = towers()
    add = next(n for n in pcg.nodes if n.name == "sum")
    apply_single(pcg, add, {"operand": 2})
    # a broadcast operand has no operand axis (its piece would not be the output's shape)
    m = FFModel(FFConfig([]))
    x, y = m.create_tensor([4, 6]), m.create_tensor([1, 6])
    m.add(x, y, name="bcast")
    node = next(n for n in m.pcg.nodes if n.name == "bcast")
    assert "operand" not in [a.name for a in all_axes(m.pcg, node)]
    # multiply is not linear in its operands: no operand axis either
    m.multiply(x, x, name="mul")
    node = next(n for n in m.pcg.nodes if n.name == "mul")
    assert "operand" not in [a.name for a in all_axes(m.pcg, node)]


@pytest.mark.parametrize("op", ["add", "subtract"])
@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_fig11b_trains_like_one_device(op, mode, machine):
    pcg = towers(op)
    compare_with_one_device(f"fig11b {op}", pcg, fig11b(pcg, machine), machine, LOSS, TOL,
                            weights_for(pcg, DataType.DT_DOUBLE), mode=mode)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), op=st.sampled_from(["add", "subtract"]))
def test_random_strategies_with_operand_parts_train_like_one_device(seed, op, machine):
    pcg = towers(op)
    try:
        s = random_strategy(pcg, machine, seed)
    except StrategyError:
        s = fig11b(pcg, machine)
    compare_with_one_device(f"random {seed}", pcg, s, machine, LOSS, TOL, weights_for(pcg, DataType.DT_DOUBLE))


def test_random_strategies_draw_operand_parts(machine):
    from tests.runtime.test_concat_parts import degrees_drawn
    assert degrees_drawn(towers(), machine, "sum", "operand", 60) == {1, 2}


def test_an_add_cut_by_operand_does_not_fuse(machine):
    """A fused chain evaluates one expression over whole pieces: a piece with an empty operand
    cannot join one (FusionError naming the operator)."""
    from flexrt.strategy.fusion import FusionError, FusionGroup, FusionPlan, check_fusion
    m = FFModel(FFConfig([]))
    x1, x2 = m.create_tensor([8, 6], DataType.DT_DOUBLE), m.create_tensor([8, 6], DataType.DT_DOUBLE)
    s = m.add(m.dense(x1, 6, name="a"), m.dense(x2, 6, name="b"), name="sum")
    m.add(s, s, name="twice")
    pcg = m.pcg
    st = fig11b(pcg, machine)
    node = next(n for n in pcg.nodes if n.name == "twice")
    axes = [a.name for a in all_axes(pcg, node)]
    st = st.with_config(node.id, OpConfig((("partial", 2),), view_from_device_ids(
        machine, tuple(2 if a == "partial" else 1 for a in axes), [0, 1])))
    with pytest.raises(FusionError, match="'?sum'? has pieces that read nothing of an operand"):
        check_fusion(st, FusionPlan((FusionGroup(("sum", "twice"), "forward"),)), machine)


def test_the_mapping_dp_adds_two_embeddings_where_they_lie(machine):
    """Found by the DP (Unity §5.2) without the parameter axes: two embedding tables too large to
    copy, one per device, are added by operand in place (two partial sums) and reduce-scattered
    into the ReLU, instead of one lookup's rows sent to the other's device. It simulates faster
    than the same mapping with the Add whole on device 0."""
    from flexrt.core import AggrMode
    from flexrt.ir.registry import AxisKind
    from flexrt.search.unity import LocalCosts, MappingDP
    m = FFModel(FFConfig([]))
    ids = [m.create_tensor([256, 1], DataType.DT_INT64) for _ in range(2)]
    a, b = (m.embedding(t, 100_000, 512, AggrMode.AGGR_MODE_SUM, name=n) for t, n in zip(ids, "ab"))
    m.dense(m.relu(m.add(a, b, name="sum"), name="relu"), 512, name="head")
    pcg, cost = m.pcg, AnalyticCostModel()
    kinds = frozenset({AxisKind.SAMPLE, AxisKind.ATTRIBUTE, AxisKind.REDUCTION})
    got = MappingDP(machine, LocalCosts(machine, cost, kinds), devices=2).solve(pcg)
    by_name = {pcg.node(n).name: c for n, c in got.configs.items()}
    assert dict(by_name["sum"].degrees) == {"operand": 2}
    assert {by_name["a"].view.start, by_name["b"].view.start} == {0, 1} and not by_name["a"].degrees
    found = Strategy.from_configs(pcg, got.configs)
    node = next(n for n in pcg.nodes if n.name == "sum")
    whole = found.with_config(node.id, OpConfig((), view_from_device_ids(
        machine, tuple(1 for _ in all_axes(pcg, node)), [0])))
    assert simulate(found, machine, cost).iteration_time_s < simulate(whole, machine, cost).iteration_time_s
