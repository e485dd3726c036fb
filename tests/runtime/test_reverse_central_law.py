"""The central law for Reverse: a model with reverse layers trains to one device's losses and weights
under data parallelism, an attribute-partitioned strategy and random valid strategies."""

from __future__ import annotations

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.machine.views import enumerate_views
from flexrt.strategy import (
    OpConfig,
    Strategy,
    all_axes,
    data_parallel,
    is_compute,
    random_strategy,
)
from tests.runtime._mse_law import train_like_one_device


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def model():
    """x [8, 4, 6] -> dense -> reverse(axis 1) -> dense -> reverse(axis -1): both reversals sit between
    weights, so a wrong reversal in any piece changes the gradients."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 4, 6], DataType.DT_DOUBLE)
    t = m.dense(x, 6, ActiMode.AC_MODE_TANH, name="fc1")
    t = m.reverse(t, 1, name="rev1")
    t = m.dense(t, 4, name="fc2")
    m.reverse(t, -1, name="rev2")
    return m.pcg


def _reverse_nodes(pcg):
    return [n for n in pcg.nodes if n.op_type is OpType.REVERSE]


def attribute_strategy(pcg, machine) -> Strategy:
    """Each reverse cut in two along an attribute dimension it does not reverse, on devices 2i, 2i+1;
    every other operator whole on device 1."""
    configs = {}
    for i, node in enumerate(n for n in pcg.nodes if is_compute(n)):
        axes = all_axes(pcg, node)
        degrees = ()
        if node.op_type is OpType.REVERSE:
            axis = node.attrs.axis % 3
            degrees = ((next(a.name for a in axes if a.name in ("dim1", "dim2") and a.name != f"dim{axis}"), 2),)
        shape = tuple(dict(degrees).get(a.name, 1) for a in axes)
        start = 2 * i if degrees else 1
        configs[node.id] = OpConfig(degrees, next(v for v in enumerate_views(machine, shape) if v.start == start))
    return Strategy.from_configs(pcg, configs)


def train_and_compare(pcg, strategy, machine):
    return train_like_one_device(pcg, strategy, machine, (8, 4, 4))


def test_reverse_model_trains_like_one_device_data_parallel(machine):
    pcg = model()
    strategy = data_parallel(pcg, machine, 4)
    assert [dict(strategy.configs[n.id].degrees) for n in _reverse_nodes(pcg)] == [{"dim0": 4}, {"dim0": 4}]
    train_and_compare(pcg, strategy, machine)


def test_reverse_model_trains_like_one_device_attribute_parallel(machine):
    pcg = model()
    strategy = attribute_strategy(pcg, machine)
    assert [dict(strategy.configs[n.id].degrees) for n in _reverse_nodes(pcg)] == [{"dim2": 2}, {"dim1": 2}]
    train_and_compare(pcg, strategy, machine)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_reverse_model_trains_like_one_device_random_strategies(seed, machine):
    pcg = model()
    strategy = random_strategy(pcg, machine, seed)
    train_and_compare(pcg, strategy, machine)


def test_random_strategies_cut_the_reverses_beyond_the_sample_dimension(machine):
    pcg = model()
    cuts = {name for seed in range(6) for n in _reverse_nodes(pcg)
            for name, _ in random_strategy(pcg, machine, seed).configs[n.id].degrees}
    assert {"dim0", "dim1", "dim2"} <= cuts


def test_reverse_is_a_compute_operator():
    assert all(is_compute(n) for n in _reverse_nodes(model()))
