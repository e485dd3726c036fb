"""Dropout draws a new mask every training step (``flexrt.ir.ops.dropout.at_step``), the same in the
runtime's forward, backward and recomputation and in the reference trainer: a model with dropout
trains to the reference's weights (float64, 1e-10) under strategies that do not cut the dropout's
dimensions, recomputed or not, and the masks of two steps differ."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel, LossType
from flexrt.errors import StrategyError
from flexrt.ir.ops.dropout import DropoutAttrs, at_step
from flexrt.kernels.registry import run_forward
from flexrt.machine import load_machine
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from flexrt.strategy import data_parallel
from flexrt.strategy.config import wiring_of

from .test_central_law import strategy_of

MACHINE = load_machine("dgx1_v100")
SCCE = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY


def model():
    m = FFModel(FFConfig(["-b", "8"]))
    x = m.create_tensor([8, 6], DataType.DT_DOUBLE)
    h = m.dropout(m.dense(x, 16, ActiMode.AC_MODE_RELU, name="fc1"), 0.5, 7, name="drop")
    m.softmax(m.dense(h, 4, name="fc2"), name="sm")
    return m.pcg


def test_each_step_draws_its_own_mask():
    attrs = DropoutAttrs(0.5, 7)
    assert at_step(attrs, 0) is attrs
    seeds = {at_step(attrs, k).seed for k in range(50)}
    assert len(seeds) == 50
    x = np.ones((64, 64))
    a, b = (run_forward(np, at_step(attrs, k), [x])[0] for k in (0, 1))
    assert not np.array_equal(a, b) and abs((a > 0).mean() - 0.5) < 0.05 and abs((b > 0).mean() - 0.5) < 0.05


@pytest.mark.parametrize("kind, recompute", [("one", False), ("model", False), ("model", True), ("one", True)])
def test_dropout_trains_like_the_reference_step_after_step(kind, recompute):
    pcg = model()
    rng = np.random.default_rng(0)
    w0 = {n.name: rng.standard_normal(n.attrs.shape.dims) * 0.3 for n in pcg.nodes if n.op_type.value == "weight"}
    x, y = rng.standard_normal((8, 6)), rng.integers(0, 4, (8, 1)).astype(np.int32)
    s = data_parallel(pcg, MACHINE, 1) if kind == "one" else strategy_of(kind, pcg, MACHINE)
    if recompute:
        s = s.with_recompute(["drop", "fc1"])
    session = Session(s, MACHINE, loss=SCCE, weights=w0, lr=0.1)
    ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", lr=0.1), SCCE)
    name = session.input_names[0]
    losses = []
    for _ in range(4):
        want = ref.step({name: x}, y)
        got = session.step({name: x}, y).loss
        assert got == pytest.approx(want, rel=1e-12)
        losses.append(got)
    got = session.weights()
    assert max(relative_error(got[k], ref.weights[k]) for k in got) <= 1e-10
    assert len(set(losses)) == 4


def _no_dropout_forward(w: dict, x):
    h = np.maximum(x @ w["fc1.kernel"] + w["fc1.bias"], 0)
    logits = h @ w["fc2.kernel"] + w["fc2.bias"]
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_inference_forward_passes_dropout_through_and_does_not_advance_the_step():
    """``forward(training=False)``: every dropout passes its input through (the one-device forward
    with rate 0, under any strategy), ``finish`` refuses to complete it, and the training step does
    not advance: training with inference passes between the steps draws the same masks and reaches
    the same weights as training without them."""
    pcg = model()
    rng = np.random.default_rng(1)
    w0 = {n.name: rng.standard_normal(n.attrs.shape.dims) * 0.3 for n in pcg.nodes if n.op_type.value == "weight"}
    x, y = rng.standard_normal((8, 6)), rng.integers(0, 4, (8, 1)).astype(np.int32)
    for kind in ("one", "model", "data"):
        s = data_parallel(pcg, MACHINE, 1) if kind == "one" else strategy_of(kind, pcg, MACHINE)
        plain = Session(s, MACHINE, loss=SCCE, weights=w0, lr=0.1)
        probed = Session(s, MACHINE, loss=SCCE, weights=w0, lr=0.1)
        name = plain.input_names[0]
        for step in range(3):
            probed.forward({name: x}, training=False)
            assert relative_error(probed.output("sm"), _no_dropout_forward(probed.weights(), x)) <= 1e-12
            if step == 0:
                with pytest.raises(StrategyError, match="no training forward pass to complete"):
                    probed.finish(y)
            assert probed.step({name: x}, y).loss == plain.step({name: x}, y).loss
        assert all(np.array_equal(probed.weights()[k], w) for k, w in plain.weights().items())
