"""The central law where a producer of partial sums (an Add cut by operand) feeds several readers
that sum it differently: one by a ring AllReduce among its partials' devices, another by sending the
partials to one device. The ring sums in place; its buffer may be the producer's output itself only
where nothing else reads that output. It was aliased whenever no other *part* read it, though a
transfer sent the same partial elsewhere: the other reader then summed a partial sum twice (a GRU
under a random strategy, found by a front-end sweep: outputs off by up to 2.4)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.config import ConfigStrategy
from flexrt.strategy.space import config_at
from tests.runtime.test_central_law import TOL, compare_with_one_device, machine, weights_for

__all__ = ["machine"]  # the fixture
F64 = DataType.DT_DOUBLE


def fanout(dt=F64):
    """x -> a, b -> add -> (l, concat(l, add)) -> out: the add's output read by two operators."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 12], dt)
    h = m.add(m.dense(x, 12, name="a"), m.dense(x, 12, name="b"), name="add")
    t = m.concat([m.dense(h, 12, name="l"), h], 1, name="cat")
    m.dense(t, 6, name="out")
    return m, "mean_squared_error_avg"


def _pinned(pcg, machine, add: dict, reader: dict):
    configs = dict(data_parallel(pcg, machine, 1).configs)
    for n in pcg.nodes:
        if n.name == "add":
            configs[n.id] = config_at(pcg, n, machine, add)
        if n.name == "l":
            configs[n.id] = config_at(pcg, n, machine, reader)
    return ConfigStrategy(pcg, configs)


@pytest.mark.parametrize("add, reader", [
    ({"dim0": 2, "operand": 2}, {"dim0": 2, "out": 2}),     # the failing case: ring for l, a sum on device 0 for cat
    ({"operand": 2}, {"out": 2}),
    ({"dim0": 2, "operand": 2}, {"dim0": 2}),
])
def test_an_add_cut_by_operand_read_twice_trains_like_one_device(add, reader, machine):
    m, loss = fanout()
    compare_with_one_device(f"add {add} l {reader}", m.pcg, _pinned(m.pcg, machine, add, reader), machine, loss,
                            TOL[F64], weights_for(m.pcg, F64))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_random_strategies_of_the_fanout_train_like_one_device(seed, machine):
    m, loss = fanout()
    compare_with_one_device(f"seed {seed}", m.pcg, random_strategy(m.pcg, machine, seed), machine, loss, TOL[F64],
                            weights_for(m.pcg, F64), mode="threads" if seed % 2 else "serial")
