"""Runtime laws beyond training equality: memory is freed after last use and matches the simulator's
persistent prediction, traces share the simulator's layout, bad input and oversized strategies get
clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import ShapeError, StrategyError
from flexrt.machine import load_machine
from flexrt.runtime.executor import TaskFailed
from flexrt.runtime.session import Session
from flexrt.simulator.actions import BufKind
from flexrt.strategy import data_parallel

from .test_central_law import MODELS, batch, strategy_of


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("kind", ["data", "parameter", "reduction", "hybrid"])
def test_transients_freed_and_persistent_memory_as_predicted(model, kind, machine):
    """After an iteration only weights and optimizer state remain on every device, and their bytes
    are exactly what the simulator predicts (weights + momentum buffers)."""
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    session = Session(strategy_of(kind, m.pcg, machine), machine, loss=loss, optimizer="sgd", lr=0.1, momentum=0.9)
    inputs, labels = batch(m.pcg, loss)
    result = session.step(inputs, labels)
    ex = session.executor
    for dev, buffers in ex.mem.items():
        if dev < 0:
            continue
        assert all(key.kind is BufKind.WEIGHT for key in buffers), f"device {dev} still holds {sorted(buffers)}"
        predicted = session.predicted.memory_bytes.get(dev, {})
        expected = predicted.get("weights", 0) + predicted.get("optimizer_state", 0)
        assert ex.live[dev] == expected, (dev, ex.live[dev], predicted)
        assert result.peak_bytes[dev] >= ex.live[dev]
    report = session.memory_report()
    assert all(v["measured_peak"] > 0 for v in report.values())


def test_runtime_trace_has_the_simulators_layout(machine):
    m, loss = MODELS["cnn"](DataType.DT_DOUBLE)
    session = Session(strategy_of("hybrid", m.pcg, machine), machine, loss=loss, lr=0.1)
    session.step(*batch(m.pcg, loss))
    measured = json.loads(json.dumps(session.chrome_trace()))
    predicted = session.simulator.chrome_trace(session.predicted)

    def tracks(trace):
        return sorted((e["pid"], e["tid"], e["args"]["name"]) for e in trace["traceEvents"]
                      if e["ph"] == "M" and e["name"] == "thread_name")

    def names(trace):
        return sorted(e["name"] for e in trace["traceEvents"] if e["ph"] == "X")

    assert tracks(measured) == tracks(predicted)
    assert names(measured) == names(predicted)
    # the serial executor runs one task at a time: no two measured tasks overlap (the members of a
    # ring AllReduce share the collective's span)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in measured["traceEvents"]
                   if e["ph"] == "X" and " ring " not in e["name"])
    assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert measured["otherData"]["source"] == "runtime"


def _big_model(machine):
    m = FFModel(FFConfig([]))
    t = m.create_tensor([64, 16384], DataType.DT_DOUBLE)
    for i in range(9):  # 9 x 2 GiB of float64 weights on one device: more than a V100's 16 GiB
        t = m.dense(t, 16384, ActiMode.AC_MODE_RELU, use_bias=False, name=f"fc{i}")
    m.softmax(t, name="softmax")
    return m


def test_strategy_over_device_memory_is_refused_before_running(machine):
    m = _big_model(machine)
    with pytest.raises(StrategyError, match=r"does not fit: device 0 needs .* MiB .* but has .* MiB"):
        Session(data_parallel(m.pcg, machine, 1), machine, weights={})


def test_bad_batch_and_failing_task_are_named(machine):
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    session = Session(data_parallel(m.pcg, machine, 2), machine, loss=loss, lr=0.1)
    inputs, labels = batch(m.pcg, loss)
    name = session.input_names[0]
    with pytest.raises(ShapeError, match=rf"input '{name}': batch of shape \[16, 11\], expected \[16, 12\]"):
        session.step({name: np.zeros((16, 11))}, labels)
    with pytest.raises(StrategyError, match="no batch for input"):
        session.step({}, labels)
    with pytest.raises(TaskFailed, match=r"task 'loss softmax\[0\]' \(device 0\) failed: .*integer class ids"):
        session.step(inputs, labels.astype(np.float64))


def test_threads_and_serial_give_identical_results(machine):
    m, loss = MODELS["transformer"](DataType.DT_DOUBLE)
    inputs, labels = batch(m.pcg, loss)
    results = {}
    for mode in ("serial", "threads"):
        s = Session(strategy_of("hybrid", m.pcg, machine), machine, loss=loss, lr=0.1, mode=mode, seed=3)
        losses = [s.step(inputs, labels).loss for _ in range(2)]
        results[mode] = (losses, s.weights())
    assert results["serial"][0] == results["threads"][0]
    for k, w in results["serial"][1].items():
        np.testing.assert_array_equal(w, results["threads"][1][k])
