"""Cross-entropy over a softmax whose probabilities underflow: the gradient w.r.t. the logits is
taken directly, ``(p - onehot) / batch`` (FlexFlow's), in the executors and the reference trainer,
so training stays finite in float32 and float16 where ``-onehot / p`` through the softmax backward
gave inf and then NaN."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.kernels.losses import LossType, loss_backward, softmax_cross_entropy_backward
from flexrt.kernels.registry import backward_kernel
from flexrt.ir.ops import SoftmaxAttrs
from flexrt.machine import load_machine
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from flexrt.strategy import data_parallel, random_strategy

SCCE = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
NP = {DataType.DT_FLOAT: np.float32, DataType.DT_HALF: np.float16}


def _extreme_batch(dt):
    """Inputs whose logits differ by thousands, labels naming the least likely class: the target
    probability underflows to 0 in float32 and float16."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 16)) * 300).astype(NP[dt])
    w = (rng.standard_normal((16, 10)) * 3).astype(NP[dt])
    labels = np.argmin(x.astype(np.float64) @ w.astype(np.float64), axis=1).astype(np.int32).reshape(8, 1)
    return x, w, labels


def _model(dt):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 16], dt)
    m.softmax(m.dense(x, 10, use_bias=False, name="fc"), name="softmax")
    return m


@pytest.mark.parametrize("dt", [DataType.DT_FLOAT, DataType.DT_HALF])
def test_the_fused_gradient_is_finite_where_the_unfused_one_is_not(dt):
    x, w, labels = _extreme_batch(dt)
    logits = x @ w
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    assert (p[np.arange(8), labels[:, 0]] == 0).any()  # the case this guards
    with np.errstate(all="ignore"):
        unfused = backward_kernel(SoftmaxAttrs(-1).op_type)(np, SoftmaxAttrs(-1), [logits], [p],
                                                            [loss_backward(np, SCCE, p, labels)])[0]
    assert not np.isfinite(unfused).all()
    fused = softmax_cross_entropy_backward(np, SCCE, p, labels)
    assert np.isfinite(fused).all() and fused.dtype == p.dtype
    onehot = np.eye(10, dtype=np.float64)[labels[:, 0]]
    assert np.allclose(fused, (p.astype(np.float64) - onehot) / 8, atol=1e-3)


@pytest.mark.parametrize("dt", [DataType.DT_FLOAT, DataType.DT_HALF])
@pytest.mark.parametrize("strategy", ["data", "random"])
def test_training_through_an_underflowing_softmax_stays_finite_and_matches_one_device(dt, strategy):
    machine = load_machine("dgx1_v100")
    m = _model(dt)
    x, w, labels = _extreme_batch(dt)
    weight = next(n.name for n in m.pcg.nodes if n.op_type.value == "weight")
    s = data_parallel(m.pcg, machine) if strategy == "data" else random_strategy(m.pcg, machine, 3)
    session = Session(s, machine, optimizer="sgd", loss=SCCE, weights={weight: w}, lr=0.01)
    ref = ReferenceTrainer(m.pcg, {weight: w}, optimizer_step("sgd", lr=0.01), SCCE)
    for _ in range(3):
        want = ref.step({session.input_names[0]: x}, labels)
        got = session.step({session.input_names[0]: x}, labels).loss
        assert np.isfinite(got) and np.isfinite(want)
        assert abs(got - want) <= 1e-2 * max(1.0, abs(want))
    got_w = session.weights()[weight]
    assert np.isfinite(got_w).all() and np.isfinite(ref.weights[weight]).all()
    assert relative_error(got_w, ref.weights[weight]) <= (1e-4 if dt is DataType.DT_FLOAT else 1e-2)
