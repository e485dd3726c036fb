"""The predicted peak memory against the runtime's measured peak (issue 18).

The prediction replays the buffers' lifetimes (``flexrt.simulator.memory``: the buffers, aliases and
free rule the executor itself runs on) in the order the executor runs its tasks. The serial
executor's order is its own dispatch (``serial_times``: the ready task first in the predicted
order), and there the prediction equals the measured peak on every device, exactly: for data,
model, parameter, reduction and hybrid strategies of the zoo models, random valid strategies,
fusion plans (groups, duplicated members, element-wise chains run as one expression, gradient
buckets), weights shared by the steps of an unrolled recurrence, in the first iteration (the
optimizer's state appears at the updates) and the later ones, with SGD with momentum and with Adam.
The threaded executor's interleaving changes from run to run; its measured peak is within 10% of
the prediction along the simulated timeline (median of iterations). Every predicted peak holds at
least the weights and their optimizer state, and at most everything the iteration allocates;
``Session.memory_report`` reports it beside the measured peak, the relative error and the
simulator's older total (which is no bound: it leaves out operand copies, activation gradients and
a contribution to a gradient while it is being added). A gradient's contributions are summed as they
come: a weight read by 16 unrolled steps holds about one gradient, not 16.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.runtime.session import Session
from flexrt.simulator.memory import box_bytes, replay, serial_times
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.fusion import FusionGroup, FusionPlan

from .test_central_law import MODELS, SGD, batch, strategy_of, weights_for
from .test_fusion_central_law import LOSS as FUSED_LOSS
from .test_fusion_central_law import PLANS, pcg_of, plan_of

MACHINE = load_machine("dgx1_v100")
KINDS = ["data", "model", "parameter", "reduction", "hybrid"]


def session_of(model: str, strategy_fn, mode: str = "serial", optimizer: str = "sgd", params=SGD):
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    pcg = m.pcg
    s = Session(strategy_fn(pcg), MACHINE, optimizer=optimizer, loss=loss, weights=weights_for(pcg, DataType.DT_DOUBLE),
                mode=mode, **params)
    return s, batch(pcg, loss)


def first_iteration_peak(s: Session) -> dict:
    """The prediction for the first iteration: the optimizer's state allocated by the updates."""
    plan = s.plan
    start, end = serial_times(plan.succ, plan.num_preds, plan.buffers.ring_members)
    return replay(plan.buffers, start, end, s.simulator.state_factor(), state_held=False,
                  unmaterialized=s.executor.unmaterialized()).peak_bytes


def assert_exact(s: Session, result) -> None:
    report = s.memory_report(result)
    assert report
    for d, v in report.items():
        assert v["predicted_peak"] == v["measured_peak"], (d, v)
        assert v["relative_error"] == 0.0
    assert {d for d, p in result.peak_bytes.items() if p and d >= 0} == set(report)


def weights_and_state(s: Session) -> dict:
    out: dict = {}
    factor = 1 + s.simulator.state_factor()
    for b in s.plan.weight_instances:
        out[b.device] = out.get(b.device, 0) + factor * box_bytes(b)
    return out


def check_serial_exact(s: Session, inputs, labels) -> None:
    """First iteration, then two steady ones: each measured peak equals its prediction."""
    first = s.step(inputs, labels)
    want = first_iteration_peak(s)
    assert {d: p for d, p in first.peak_bytes.items() if p} == {d: p for d, p in want.items() if p}
    for _ in range(2):
        assert_exact(s, s.step(inputs, labels))


# ---- serial: exact ---------------------------------------------------------------------------------

@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", KINDS)
def test_serial_peak_equals_the_prediction(model, kind):
    s, (inputs, labels) = session_of(model, lambda pcg: strategy_of(kind, pcg, MACHINE))
    check_serial_exact(s, inputs, labels)


def shared_rnn(steps: int = 4, width: int = 6):
    """An unrolled recurrence: ``steps`` dense cells sharing one weight (``shared_op``), then a head."""
    m = FFModel(FFConfig([]))
    h = m.dense(m.create_tensor([8, width], DataType.DT_DOUBLE), width, ActiMode.AC_MODE_TANH, name="step0")
    cell = h.owner_op
    for t in range(1, steps):
        h = m.dense(h, width, ActiMode.AC_MODE_TANH, shared_op=cell, name=f"step{t}")
    m.softmax(m.dense(h, 3, name="head"), name="softmax")
    return m


@pytest.mark.parametrize("kind", ["data", "model", "hybrid"])
def test_serial_peak_equals_the_prediction_with_shared_weights(kind):
    """Each step's contribution to the shared weight's gradient is added to one sum when its backward
    ends (``flexrt.simulator.memory.Accumulation``): the prediction follows it as the executor does."""
    m, loss = shared_rnn(), "sparse_categorical_crossentropy"
    s = Session(strategy_of(kind, m.pcg, MACHINE), MACHINE, optimizer="sgd", loss=loss, **SGD)
    check_serial_exact(s, *batch(m.pcg, loss))


@pytest.mark.parametrize("kind", ["data", "parameter", "hybrid"])
def test_a_shared_weights_gradient_takes_one_buffer_however_many_steps_read_it(kind):
    """As FlexFlow's kernels accumulate into one gradient buffer, a weight read by 16 unrolled steps
    adds about one gradient's bytes to the peak, not one per step: from 2 to 16 steps the peak grows
    by the steps' activations (a few KB each), far less than 14 of the weight's 128 KB gradients
    (which every step held until the update before the contributions were summed as they came).
    Contributions that arrive from other devices (each step on its own device) are still held
    until their sum is read."""
    peaks = {}
    for steps in (2, 16):
        m, loss = shared_rnn(steps, width=128), "sparse_categorical_crossentropy"
        s = Session(strategy_of(kind, m.pcg, MACHINE), MACHINE, optimizer="sgd", loss=loss, **SGD)
        inputs, labels = batch(m.pcg, loss)
        s.step(inputs, labels)
        result = s.step(inputs, labels)
        assert_exact(s, result)
        peaks[steps] = max(result.peak_bytes.values())
    gradient = 128 * 128 * 8
    assert peaks[16] - peaks[2] < 14 * gradient / 4, peaks


@pytest.mark.parametrize("model, optimizer, params", [("mlp", "adam", {"alpha": 0.01}), ("cnn", "adam", {"alpha": 0.01}),
                                                       ("mlp", "rmsprop", {"lr": 0.01}), ("cnn", "adagrad", {"lr": 0.1})])
def test_serial_peak_equals_the_prediction_with_stateful_optimizers(model, optimizer, params):
    s, (inputs, labels) = session_of(model, lambda pcg: strategy_of("hybrid", pcg, MACHINE), optimizer=optimizer,
                                     params=params)
    check_serial_exact(s, inputs, labels)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000))
def test_serial_peak_equals_the_prediction_for_random_strategies(model, seed):
    def fn(pcg):
        try:
            return random_strategy(pcg, MACHINE, seed)
        except StrategyError:
            return data_parallel(pcg, MACHINE, 2)
    s, (inputs, labels) = session_of(model, fn)
    check_serial_exact(s, inputs, labels)


@pytest.fixture
def vml(monkeypatch):
    """numexpr as if built with VML, so that tanh chains run as one expression on any host."""
    import numexpr
    monkeypatch.setattr(numexpr, "use_vml", True, raising=False)


@pytest.mark.parametrize("model, name", [(m, n) for m, plans in PLANS.items() for n in plans])
def test_serial_peak_equals_the_prediction_under_fusion_plans(model, name, vml):
    strategy = data_parallel(pcg_of(model), MACHINE, 4)
    s = Session(strategy.with_fusion(plan_of(model, name, strategy)), MACHINE, optimizer="sgd", loss=FUSED_LOSS,
                mode="serial", **SGD)
    inputs, labels = batch(pcg_of(model), FUSED_LOSS)
    check_serial_exact(s, inputs, labels)


def test_chain_intermediates_are_not_predicted_when_the_chain_runs_as_one_expression(vml):
    """A chain evaluated as one expression never allocates its intermediates: the prediction leaves
    them out (``Executor.unmaterialized``), and is exact; counting them would over-predict."""
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    s = Session(strategy.with_fusion(FusionPlan((FusionGroup(("s1", "s2", "t1")),))), MACHINE,
                optimizer="sgd", loss=FUSED_LOSS, **SGD)
    inputs, labels = batch(pcg_of("mlp"), FUSED_LOSS)
    s.step(inputs, labels)
    r = s.step(inputs, labels)
    assert s.executor.chain_runs == 2 * 4 and s.executor.unmaterialized()
    assert_exact(s, r)
    plan = s.plan
    times = serial_times(plan.succ, plan.num_preds, plan.buffers.ring_members)
    factor = s.simulator.state_factor()
    left_out = replay(plan.buffers, *times, factor, unmaterialized=s.executor.unmaterialized())
    counted = replay(plan.buffers, *times, factor)
    internal = {}
    for bid in s.executor.unmaterialized() & {w for ws in plan.buffers.writes for w in ws}:
        internal[bid[1]] = internal.get(bid[1], 0) + plan.buffer_bytes(bid)
    assert internal and set(internal) == {0, 1, 2, 3}
    for d, p in r.peak_bytes.items():
        assert counted.peak_bytes[d] >= left_out.peak_bytes[d] == p
        assert counted.allocated_bytes[d] - left_out.allocated_bytes[d] == internal.get(d, 0)


def test_serial_executor_runs_in_the_order_serial_times_replays():
    """The replayed order is the executor's: sorted by its step in ``serial_times``, the measured
    start times never decrease (a ring's members share the collective's start)."""
    s, (inputs, labels) = session_of("cnn", lambda pcg: strategy_of("hybrid", pcg, MACHINE))
    r = s.step(inputs, labels)
    start, _ = serial_times(s.plan.succ, s.plan.num_preds, s.plan.buffers.ring_members)
    order = np.lexsort((np.arange(len(start)), start))
    measured = r.start[order]
    assert np.all(np.diff(measured) >= 0)
    assert len(set(start.tolist())) < len(start) or not s.plan.ring_groups  # rings share a step


# ---- threads: close --------------------------------------------------------------------------------

@pytest.mark.parametrize("model, kind", [("mlp", "data"), ("cnn", "hybrid"), ("transformer", "reduction"),
                                         ("dlrm", "model")])
def test_threaded_peak_within_10_percent_of_the_simulated_timeline(model, kind):
    s, (inputs, labels) = session_of(model, lambda pcg: strategy_of(kind, pcg, MACHINE), mode="threads")
    """The median of 7 iterations within 10% of the prediction, and no iteration more than 25% above
    it. An iteration may stay well below it: where the timeline has two transfers in flight at once
    whose contributions go to one sum (each added and freed when it lands), the threads may land
    them one after the other (a reduction-parallel transformer's device 3: 4608 bytes predicted, 3072
    measured in about 1 iteration of 10)."""
    s.step(inputs, labels)
    reports = [s.memory_report(s.step(inputs, labels)) for _ in range(7)]
    for d, v in reports[0].items():
        measured = statistics.median(r[d]["measured_peak"] for r in reports)
        assert abs(v["predicted_peak"] - measured) <= 0.10 * measured, (d, v["predicted_peak"], measured)
        assert all(r[d]["measured_peak"] <= 1.25 * v["predicted_peak"] for r in reports), [r[d] for r in reports]


# ---- bounds and the report -------------------------------------------------------------------------

@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", ["data", "hybrid"])
def test_predicted_peak_between_the_weights_and_everything_allocated(model, kind):
    s, (inputs, labels) = session_of(model, lambda pcg: strategy_of(kind, pcg, MACHINE))
    s.step(inputs, labels)
    report = s.memory_report(s.step(inputs, labels))
    plan = s.plan
    tl = replay(plan.buffers, plan.predicted_start, plan.predicted_end, s.simulator.state_factor())
    held = weights_and_state(s)
    for d, v in report.items():
        assert held.get(d, 0) <= v["predicted_peak"] <= tl.allocated_bytes[d]
        assert v["predicted_total"] == v["predicted"] == s.predicted.memory_bytes[d]["total"]
        assert held.get(d, 0) <= tl.peak_bytes[d] <= tl.allocated_bytes[d]
        assert tl.live_bytes[d][-1] == held.get(d, 0)  # every transient freed by the end
    assert s.predicted.peak_bytes == tl.peak_bytes  # the simulator's own result replays the same timeline


def test_memory_report_relative_error_and_no_iteration():
    s, (inputs, labels) = session_of("mlp", lambda pcg: data_parallel(pcg, MACHINE, 2))
    with pytest.raises(StrategyError, match="no iteration has run yet"):
        s.memory_report()
    r = s.step(inputs, labels)
    fake = type(r)(r.loss, r.metrics, r.wall_s, r.start, r.end, {d: 2 * p for d, p in r.peak_bytes.items()})
    report = s.memory_report(fake)
    for d, v in report.items():
        assert v["measured_peak"] == 2 * r.peak_bytes[d]
        assert v["relative_error"] == pytest.approx((v["predicted_peak"] - v["measured_peak"]) / v["measured_peak"])
