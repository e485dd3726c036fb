"""FlexFlow's ``kernel_regularizer`` (a weight penalty added to the kernel's gradient at every
update, once whatever the strategy) and its identity loss (the model's output is the loss), in the
FFModel API, the Keras API, the runtime and the reference trainer."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flexrt.core import (ActiMode, DataType, FFConfig, FFModel, LossType, RegularizerMode, SGDOptimizer)
from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras import layers, models, regularizers
from flexrt.kernels.losses import loss_backward, loss_forward
from flexrt.machine import load_machine
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from flexrt.strategy import data_parallel, random_strategy

MACHINE = load_machine("dgx1_v100")
F64 = DataType.DT_DOUBLE


class FlexFlowL2:
    """FlexFlow's regularizer object: a ``type`` and a ``_lambda``."""

    def __init__(self, lam, mode=RegularizerMode.REG_MODE_L2):
        self.type, self._lambda = mode, lam


def model(reg, loss_output_rank=2):
    m = FFModel(FFConfig(["-b", "8"]))
    x = m.create_tensor([8, 6], F64)
    h = m.dense(x, 5, ActiMode.AC_MODE_RELU, kernel_regularizer=reg, name="fc1")
    out = m.dense(h, 3, kernel_regularizer=FlexFlowL2(0.3, RegularizerMode.REG_MODE_L1), name="fc2")
    if loss_output_rank == 1:
        out = m.reduce_sum(out, [1], name="total")
    return m


def penalties(m):
    return {l.weights[0].node_name: l.option("kernel_regularizer") for l in m._layers
            if l.option("kernel_regularizer") is not None}


@pytest.mark.parametrize("kind", ["one", "data", "random"])
@pytest.mark.parametrize("loss", [LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE, LossType.LOSS_IDENTITY])
def test_penalties_and_identity_loss_train_like_the_reference(kind, loss):
    m = model(FlexFlowL2(0.5), 1 if loss is LossType.LOSS_IDENTITY else 2)
    pcg = m.pcg
    assert penalties(m) == {"fc1.kernel": ("l2", 0.5), "fc2.kernel": ("l1", 0.3)}
    rng = np.random.default_rng(0)
    w0 = {n.name: rng.standard_normal(n.attrs.shape.dims) for n in pcg.nodes if n.op_type.value == "weight"}
    x = rng.standard_normal((8, 6))
    y = rng.standard_normal((8,) if loss is LossType.LOSS_IDENTITY else (8, 3))
    strategy = {"one": data_parallel(pcg, MACHINE, 1), "data": data_parallel(pcg, MACHINE, 4),
                "random": random_strategy(pcg, MACHINE, 3)}[kind]
    s = Session(strategy, MACHINE, loss=loss, weights=w0, lr=0.05, penalties=penalties(m))
    ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", lr=0.05), loss, penalties=penalties(m))
    plain = ReferenceTrainer(pcg, w0, optimizer_step("sgd", lr=0.05), loss)
    name = s.input_names[0]
    for _ in range(3):
        assert s.step({name: x}, y).loss == pytest.approx(ref.step({name: x}, y), rel=1e-12)
        plain.step({name: x}, y)
    got = s.weights()
    assert max(relative_error(got[k], ref.weights[k]) for k in got) <= 1e-10
    assert relative_error(got["fc1.kernel"], plain.weights["fc1.kernel"]) > 1e-3   # the penalty did act


def test_penalty_gradient_is_flexflows_lambda_times_w_and_l1_sign():
    w = np.array([[1.0, -2.0], [0.5, 0.0]])
    m = FFModel(FFConfig(["-b", "4"]))
    x = m.create_tensor([4, 2], F64)
    m.dense(x, 2, use_bias=False, kernel_regularizer=FlexFlowL2(0.1), name="fc")
    pcg = m.pcg
    ref = ReferenceTrainer(pcg, {"fc.kernel": w}, optimizer_step("sgd", lr=1.0), LossType.LOSS_IDENTITY,
                           penalties={"fc.kernel": ("l2", 0.1)})
    ref.step({next(n.name for n in pcg.nodes if n.op_type.value == "input"): np.zeros((4, 2))}, np.zeros(4))
    # zero data: the loss gradient is zero, the step is the penalty's alone
    assert np.allclose(ref.weights["fc.kernel"], w - 0.1 * w)


def test_identity_loss_is_the_output_over_the_batch():
    out = np.arange(6.0).reshape(3, 2)
    assert float(loss_forward(np, LossType.LOSS_IDENTITY, out, None)) == pytest.approx(15.0 / 3)
    assert np.array_equal(loss_backward(np, LossType.LOSS_IDENTITY, out, None), np.full((3, 2), 1 / 3))
    assert LossType.parse("identity") is LossType.LOSS_IDENTITY


def test_keras_l2_is_keras_loss_term_and_other_regularizers_are_refused(monkeypatch):
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])
    r = regularizers.L2(0.01)
    assert r.type is RegularizerMode.REG_MODE_L2 and r._lambda == pytest.approx(0.02)   # d/dw of l2 * w^2
    assert regularizers.L1(0.3)._lambda == pytest.approx(0.3)
    x = layers.Input(shape=(4,))
    mdl = models.Model(x, layers.Dense(2, kernel_regularizer=r, name="d")(x))
    mdl.compile(optimizer="sgd", loss="identity")
    assert any(l.option("kernel_regularizer") == ("l2", pytest.approx(0.02)) for l in mdl.ffmodel._layers)
    with pytest.raises(NotYetAvailableError, match="Dense kernels only"):
        layers.Dense(2, bias_regularizer=regularizers.L2(0.1))
    with pytest.raises(NotYetAvailableError, match="Dense kernels only"):
        layers.Conv2D(filters=2, kernel_size=(3, 3), kernel_regularizer=regularizers.L2(0.1))


@pytest.mark.parametrize("bad, fragment", [(3, "must be None or a regularizer"),
                                           (FlexFlowL2(-1.0), "_lambda must be a number >= 0")])
def test_bad_regularizers_are_named(bad, fragment):
    m = FFModel(FFConfig(["-b", "4"]))
    with pytest.raises(ConfigError, match=fragment):
        m.dense(m.create_tensor([4, 2], F64), 2, kernel_regularizer=bad)
