"""An operator output read by several operands on another device crosses once (simulator.fanout_lowering):
the bytes, the law against one device, and delta equals full."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator, timelines_equal
from flexrt.simulator.task_graph import KIND_CODE, TaskKind
from flexrt.strategy import data_parallel
from flexrt.strategy.pipeline import pipeline_strategy
from tests.runtime.test_central_law import TOL, compare_with_one_device, weights_for
from tests.simulator.delta_law import random_changes

H = [4, 6, 8]   # the shared tensor: 192 float64 elements


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def attention_block(dt=DataType.DT_DOUBLE):
    """``pre``'s output is read four times: attention's query, key and value, and the residual."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor(H, dt)
    h = m.dense(x, H[-1], name="pre")
    a = m.multihead_attention(h, h, h, H[-1], 2, name="attn")
    t = m.add(h, a, name="res")
    m.dense(t, H[-1], name="head")
    return m, "mean_squared_error_avg"


def producer_apart(pcg, machine):
    """Every operator on device 1 but ``pre``, on device 0."""
    s = data_parallel(pcg, machine, 1)
    moved = {nid: dataclasses.replace(c, view=dataclasses.replace(c.view, start=1))
             for nid, c in s.configs.items() if pcg.node(nid).name != "pre"}
    return s.with_configs(moved)


def test_a_tensor_read_four_times_on_another_device_crosses_once_and_once_back_per_task(machine):
    m, _ = attention_block()
    result = Simulator(machine, AnalyticCostModel()).full(producer_apart(m.pcg, machine))
    one_way = 4 * 6 * 8 * 8
    # the activation there once; the gradients back once per task: attention's three summed, the add's
    assert result.moved_bytes["activation"] == 3 * one_way
    sim = Simulator(machine, AnalyticCostModel())
    sim.full(producer_apart(m.pcg, machine))
    col = sim.graph.columns()
    reduce_on_1 = (col["alive"] & (col["kind"] == KIND_CODE[TaskKind.REDUCE]) & (col["device"] == 1)).sum()
    assert reduce_on_1 == 1


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_a_shared_transfer_trains_like_one_device(machine, mode):
    m, loss = attention_block()
    compare_with_one_device(f"fan-out {mode}", m.pcg, producer_apart(m.pcg, machine), machine, loss,
                            TOL[DataType.DT_DOUBLE], weights_for(m.pcg, DataType.DT_DOUBLE), mode=mode)


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "2bw"])
def test_pipeline_stages_cut_at_a_shared_tensor_train_like_one_device(machine, schedule):
    m, loss = attention_block()
    strategy = pipeline_strategy(m.pcg, machine, 2, 2, schedule)
    compare_with_one_device(f"fan-out {schedule}", m.pcg, strategy, machine, loss, TOL[DataType.DT_DOUBLE],
                            weights_for(m.pcg, DataType.DT_DOUBLE))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_delta_equals_full_with_shared_transfers(machine, seed):
    m, _ = attention_block()
    strategy = producer_apart(m.pcg, machine)
    sim = Simulator(machine, AnalyticCostModel())
    sim.full(strategy)
    for strategy, changed in random_changes(m.pcg, machine, strategy, seed, 5):
        result = sim.delta(strategy, {changed})
        fresh = Simulator(machine, AnalyticCostModel()).full(strategy)
        assert timelines_equal(result, fresh)
        assert result.moved_bytes == fresh.moved_bytes


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_random_strategies_with_shared_transfers_train_like_one_device(machine, seed):
    m, loss = attention_block()
    strategy = producer_apart(m.pcg, machine)
    for strategy, _ in random_changes(m.pcg, machine, strategy, seed, 3):
        pass
    compare_with_one_device(f"fan-out seed {seed}", m.pcg, strategy, machine, loss, TOL[DataType.DT_DOUBLE],
                            weights_for(m.pcg, DataType.DT_DOUBLE))
