"""``CostModelWrapper``: one way every cost model over a base (learned fused costs, measured costs,
measured collectives, analytic fusion, gradient synchronization after the backward pass) answers as its base and keeps the base's linear transfers."""

from __future__ import annotations

import pickle

import pytest

from flexrt.ir import TensorShape
from flexrt.machine import local_machine
from flexrt.simulator.collectives import MeasuredComm
from flexrt.simulator.cost_model import AnalyticCostModel, CostModelWrapper, ScaledFusion, has_linear_transfers
from flexrt.simulator.measured_costs import MeasuredCostModel, MeasuredTimes
from flexrt.simulator.sync_lowering import SyncAfterBackward

SPEC = local_machine(2).devices[0].spec


class _NotLinear(AnalyticCostModel):
    def transfer_time(self, link, num_bytes):
        return 2 * super().transfer_time(link, num_bytes)


def _linear():
    from flexrt.ir.ops import LinearAttrs
    return LinearAttrs(64), [TensorShape((8, 32)), TensorShape((32, 64))], [TensorShape((8, 64))]


def _wrappers(base):
    times = MeasuredTimes("numpy")
    return [ScaledFusion(base), MeasuredComm(base), MeasuredCostModel(base, times), SyncAfterBackward(base)]


@pytest.mark.parametrize("base, linear", [(AnalyticCostModel(), True), (_NotLinear(), False)])
def test_a_wrapper_is_linear_exactly_when_its_base_is(base, linear):
    for w in _wrappers(base):
        assert isinstance(w, CostModelWrapper) and has_linear_transfers(w) is linear, type(w).__name__
        w2 = pickle.loads(pickle.dumps(w))
        assert type(w2).__name__ == type(w).__name__ and has_linear_transfers(w2) is linear


def test_a_wrapper_answers_as_its_base():
    base = AnalyticCostModel()
    shape = TensorShape((256, 256))
    for w in _wrappers(base):     # (the measured model with an empty table and no fitted times: the base's)
        assert w.update_time(shape, SPEC) == base.update_time(shape, SPEC)
        assert w.reduce_time(shape, 2, SPEC) == base.reduce_time(shape, 2, SPEC)
        assert w.op_times(*_linear(), SPEC).forward_s == base.op_times(*_linear(), SPEC).forward_s
    with pytest.raises(AttributeError):
        ScaledFusion(base).fused_time                      # not delegated: the analytic scaling applies


def test_a_time_per_message_makes_transfers_not_linear():
    times = MeasuredTimes("numpy")
    times.message_s = 5e-6
    assert not has_linear_transfers(MeasuredCostModel(AnalyticCostModel(), times))
