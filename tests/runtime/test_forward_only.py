"""A forward pass on its own (``Session.forward``), reading whole tensors back, and the rest of the
iteration after it (``finish``).

Laws, for an MLP and a CNN under every named strategy kind and random valid strategies on a
4-device machine, in the serial and threaded executors (and across MPI ranks):

- every operator's output gathered after a forward-only pass equals the single-device forward;
- forward + finish computes bitwise what one ``step`` computes (losses, weights);
- a weight written with ``set_weight`` is what the next step trains from (the reference with that
  weight); ``weight`` reads what ``weights`` reads;
- the forward phase holds no loss, backward or update task and is closed under predecessors.

A cross-entropy over an output that is not a softmax trains with FlexFlow's gradient
``(output - onehot) / batch`` and warns once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import TensorRef
from flexrt.kernels.registry import run_forward
from flexrt.machine import local_machine
from flexrt.runtime import mpi
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from flexrt.simulator.actions import Backward, Loss, Update
from flexrt.strategy import random_strategy
from tests.runtime.test_central_law import MODELS, SGD, batch, strategy_of, weights_for

MACHINE = local_machine(4)
KINDS = ["data", "model", "parameter", "attribute", "reduction", "hybrid", "random0", "random1", "random2"]


def _strategy(kind: str, pcg):
    if kind.startswith("random"):
        return random_strategy(pcg, MACHINE, int(kind[len("random"):]))
    return strategy_of(kind, pcg, MACHINE)


def reference_outputs(pcg, weights: dict, inputs: dict) -> dict:
    """Every compute operator's outputs on one device, by (name, output index)."""
    values, out = {}, {}
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type is OpType.INPUT:
            values[TensorRef(nid, 0)] = inputs[node.name]
        elif node.op_type is OpType.WEIGHT:
            values[TensorRef(nid, 0)] = weights[node.name]
        else:
            for k, o in enumerate(run_forward(np, node.attrs, [values[r] for r in node.inputs])):
                values[TensorRef(nid, k)] = o
                out[(node.name, k)] = o
    return out


def _session(model: str, kind: str, mode: str = "serial", **kw):
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    w0 = weights_for(m.pcg, DataType.DT_DOUBLE)
    s = Session(_strategy(kind, m.pcg), MACHINE, loss=loss, weights=w0, mode=mode, **SGD, **kw)
    return m, loss, w0, s


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("kind", KINDS)
def test_forward_only_outputs_equal_one_device(model, kind):
    m, loss, w0, s = _session(model, kind)
    inputs, _ = batch(m.pcg, loss)
    s.forward(inputs)
    want = reference_outputs(m.pcg, w0, inputs)
    for (name, k), ref in want.items():
        got = s.output(name, k)
        assert got.shape == ref.shape and relative_error(got, ref) <= 1e-10, (kind, name)


@pytest.mark.parametrize("mode", ["serial", "threads"])
@pytest.mark.parametrize("kind", ["data", "hybrid", "reduction", "random1"])
def test_forward_then_finish_is_one_step(mode, kind):
    m, loss, _w0, whole = _session("mlp", kind, mode)
    _, _, _, split = _session("mlp", kind, mode)
    for seed in range(3):
        inputs, labels = batch(m.pcg, loss, seed)
        a = whole.step(inputs, labels)
        split.forward(inputs)
        out = split.output(split.loss_output)   # reading between the phases changes nothing
        b = split.finish(labels)
        assert out.shape == (16, 6)
        assert a.loss == b.loss and a.metrics == b.metrics
    for name, w in whole.weights().items():
        np.testing.assert_array_equal(split.weights()[name], w, err_msg=name)


@pytest.mark.parametrize("mode", ["serial", "threads"])
@pytest.mark.parametrize("kind", ["data", "parameter", "random2"])
def test_set_weight_is_what_the_next_step_trains(mode, kind):
    m, loss, w0, s = _session("cnn", kind, mode)
    inputs, labels = batch(m.pcg, loss)
    ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", **SGD), loss)
    s.step(inputs, labels)
    ref.step(inputs, labels)
    new = np.random.default_rng(5).standard_normal(ref.weights["fc.kernel"].shape)
    s.set_weight("fc.kernel", new)
    ref.weights["fc.kernel"][...] = new   # the reference keeps its momentum too
    np.testing.assert_array_equal(s.weight("fc.kernel"), new)
    for _ in range(2):
        want = ref.step(inputs, labels)
        got = s.step(inputs, labels).loss
        assert abs(got - want) <= 1e-10 * max(1.0, abs(want))
    got_w = s.weights()
    for name, w in ref.weights.items():
        assert relative_error(got_w[name], w) <= 1e-10, name
        np.testing.assert_array_equal(s.weight(name), got_w[name])


def test_forward_phase_is_closed_and_label_free():
    _m, _loss, _w0, s = _session("cnn", "hybrid")
    plan = s.plan
    fwd = plan.forward_phase
    assert any(fwd) and not all(fwd)
    for t in plan.tasks:
        if fwd[t.index]:
            assert not isinstance(t.action, (Loss, Backward, Update)), t.name
        for succ in plan.succ[t.index]:
            assert fwd[t.index] or not fwd[succ], (t.name, plan.tasks[succ].name)
    assert all(fwd[t.index] for t in plan.tasks if t.kind.value == "forward")


def test_reading_before_a_forward_pass_and_unknown_operators_fail():
    m, loss, _w0, s = _session("mlp", "data")
    with pytest.raises(StrategyError, match="read before a forward pass"):
        s.output("fc1")
    inputs, labels = batch(m.pcg, loss)
    s.forward(inputs)
    with pytest.raises(StrategyError, match="operator 'nope' has no output 0.*operators: fc1, fc2"):
        s.output("nope")
    s.finish(labels)
    np.testing.assert_array_equal(s.output("fc1").shape, (16, 16))   # kept until the next pass
    with pytest.raises(StrategyError, match="no training forward pass to complete"):
        s.finish(labels)
    with pytest.raises(StrategyError, match="no weight 'fc9.kernel'"):
        s.set_weight("fc9.kernel", np.zeros(3))


def _no_softmax(name: str, dt=DataType.DT_DOUBLE):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 5], dt)
    m.dense(x, 4, ActiMode.AC_MODE_NONE, name=name)
    return m


@pytest.mark.parametrize("kind", ["data", "parameter", "random0"])
def test_cross_entropy_without_softmax_trains_with_flexflows_gradient(kind, capsys):
    fc = f"fc_{kind}"   # the warning names the operator: one message per case
    m = _no_softmax(fc)
    loss = "sparse_categorical_crossentropy"
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 5))
    y = rng.integers(0, 4, (8, 1)).astype(np.int32)
    kernel_dims = m.pcg.node_by_name(f"{fc}.kernel").attrs.shape.dims
    kernel = rng.standard_normal((5, 4)) * 0.3
    w0 = {f"{fc}.kernel": kernel if kernel_dims == (5, 4) else kernel.T.copy(),
          f"{fc}.bias": rng.standard_normal(4) * 0.1}
    s = Session(_strategy(kind, m.pcg), MACHINE, loss=loss, weights=w0, lr=0.5)
    err = capsys.readouterr().err
    assert "not a softmax" in err and "(output - onehot) / batch" in err
    Session(_strategy(kind, m.pcg), MACHINE, loss=loss, weights=w0, lr=0.5)
    assert "not a softmax" not in capsys.readouterr().err   # once per process
    s.step({"input_1": x}, y)
    # by hand: out = x W + b; d out = (out - onehot) / batch; W -= lr x^T d out
    out = x @ kernel + w0[f"{fc}.bias"]
    g = (out - np.eye(4)[y[:, 0]]) / 8
    got = s.weights()
    got_k = got[f"{fc}.kernel"] if kernel_dims == (5, 4) else got[f"{fc}.kernel"].T
    np.testing.assert_allclose(got_k, kernel - 0.5 * x.T @ g, atol=1e-12)
    np.testing.assert_allclose(got[f"{fc}.bias"], w0[f"{fc}.bias"] - 0.5 * g.sum(0), atol=1e-12)
    ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", lr=0.5), loss)
    ref.step({"input_1": x}, y)
    for name, w in ref.weights.items():
        assert relative_error(got[name], w) <= 1e-12


def test_set_optimizer_changes_the_rate_of_the_next_updates():
    m, loss, w0, s = _session("mlp", "hybrid")
    inputs, labels = batch(m.pcg, loss)
    ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", **SGD), loss)
    s.step(inputs, labels)
    ref.step(inputs, labels)
    s.set_optimizer("sgd", **{**SGD, "lr": 0.01})
    ref.update = optimizer_step("sgd", **{**SGD, "lr": 0.01})
    s.step(inputs, labels)
    ref.step(inputs, labels)
    got = s.weights()
    for name, w in ref.weights.items():
        assert relative_error(got[name], w) <= 1e-10, name


@pytest.mark.mpi
@pytest.mark.parametrize("n, model, kinds", [(2, "mlp", "data,reduction,hybrid"), (4, "cnn", "data,hybrid")])
def test_forward_outputs_and_weights_are_gathered_across_ranks(n, model, kinds):
    case = Path(__file__).with_name("mpi_forward_case.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_"))}
    r = subprocess.run([mpi.find_mpiexec(), "-n", str(n), sys.executable, str(case), model, kinds],
                       cwd=case.parents[2], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    done = {line.split()[2] for line in r.stdout.splitlines() if line.startswith("OK ")}
    assert done == set(kinds.split(",")), r.stdout
