"""Losses, metrics, optimizer updates and initializers (flexrt.kernels) against torch and by hand."""

import math

import numpy as np
import pytest
from flexrt.kernels import run_backward, run_forward
from flexrt.kernels.initializers import fans, initialize
from flexrt.kernels.losses import (
    LOSSES,
    LossType,
    loss_backward,
    loss_forward,
    softmax_cross_entropy_backward,
)
from flexrt.kernels.metrics import MetricsAccumulator, MetricsType, compute_metrics
from flexrt.kernels.optimizers import (
    OptimizerKind,
    adam_update,
    allocated_state_bytes,
    sgd_update,
    state_bytes,
    state_factor,
)

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.ops import SoftmaxAttrs

try:
    import torch
    TORCH_MISSING = None
except Exception as e:  # torch is only a cross-check, never a dependency
    torch, TORCH_MISSING = None, f"needs torch for the cross-check ({type(e).__name__}: {e})"

needs_torch = pytest.mark.skipif(TORCH_MISSING is not None, reason=TORCH_MISSING or "")
TOL = {np.float64: 1e-12, np.float32: 1e-5}
CCE, SCCE = LossType.LOSS_CATEGORICAL_CROSSENTROPY, LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
BCE = LossType.LOSS_BINARY_CROSSENTROPY


def _metrics(*names):
    return [MetricsType.parse(n) for n in names]


def _probs(rng, shape, dtype):
    x = rng.standard_normal(shape)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(dtype)


def _case(loss, dtype, rng, shape=(6, 5)):
    """(outputs, labels) for ``loss``: probabilities for the cross-entropies."""
    if loss is SCCE:
        return _probs(rng, shape, dtype), rng.integers(0, shape[-1], size=shape[:-1] + (1,)).astype(np.int32)
    if loss is CCE:
        ids = rng.integers(0, shape[-1], size=shape[:-1])
        return _probs(rng, shape, dtype), np.eye(shape[-1], dtype=dtype)[ids]
    if loss is BCE:   # sigmoid probabilities, 0/1 labels
        return (1 / (1 + np.exp(-2 * rng.standard_normal(shape)))).astype(dtype), rng.integers(0, 2, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)


def _torch_loss(loss, o, t):
    """torch's value for our loss on torch tensors ``o`` (outputs) and ``t`` (labels)."""
    if loss is SCCE:
        return torch.nn.functional.nll_loss(torch.log(o), t.reshape(-1).long())
    if loss is CCE:
        # cross_entropy log-softmaxes its input, the identity on log-probabilities for the value but
        # not for the gradient (it projects out the sum-to-one direction): differentiate -sum(t log p)
        return -(t * torch.log(o)).sum() / o.shape[0]
    if loss is LossType.LOSS_IDENTITY:
        return o.sum() / o.shape[0]
    if loss is BCE:
        return torch.nn.functional.binary_cross_entropy(o, t)
    return torch.nn.functional.mse_loss(o, t, reduction="mean" if loss.short_name.endswith("avg") else "sum")


# --- losses ---------------------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_loss_forward_and_backward_match_torch(loss, dtype):
    out, labels = _case(loss, dtype, np.random.default_rng(1))
    value = loss_forward(np, loss, out, labels)
    grad = loss_backward(np, loss, out, labels)
    assert value.dtype == dtype and grad.dtype == dtype and grad.shape == out.shape
    o, t = torch.from_numpy(out.copy()).requires_grad_(True), torch.from_numpy(labels)
    ref = _torch_loss(loss, o, t)
    ref.backward()
    tol = TOL[dtype]
    np.testing.assert_allclose(float(value), ref.item(), rtol=tol, atol=tol)
    np.testing.assert_allclose(grad, o.grad.numpy(), rtol=tol, atol=tol)
    if loss is CCE:
        ce = torch.nn.functional.cross_entropy(torch.log(torch.from_numpy(out)), t)
        np.testing.assert_allclose(float(value), ce.item(), rtol=tol, atol=tol)


@pytest.mark.parametrize("loss", list(LOSSES))
def test_loss_backward_matches_finite_differences(loss):
    rng = np.random.default_rng(2)
    out, labels = _case(loss, np.float64, rng, shape=(3, 4))
    grad = loss_backward(np, loss, out, labels)
    h = 1e-6
    for i in np.ndindex(out.shape):
        plus, minus = out.copy(), out.copy()
        plus[i] += h
        minus[i] -= h
        fd = (float(loss_forward(np, loss, plus, labels)) - float(loss_forward(np, loss, minus, labels))) / (2 * h)
        assert abs(fd - grad[i]) <= 1e-6 * max(1.0, abs(fd)), (i, fd, grad[i])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_binary_cross_entropy_through_a_sigmoid_is_the_logit_gradient(dtype):
    """Keras' binary_crossentropy on a Dense(1, sigmoid) output: the loss gradient pushed through the
    sigmoid (a dense layer's fused activation) is (p - t) / size, the gradient of the sigmoid
    cross-entropy of the logits, also for confident predictions (|logit| up to 12); the value is
    Keras' clipped one."""
    rng = np.random.default_rng(3)
    z = np.concatenate([rng.standard_normal(6) * 3, [12.0, -12.0]]).reshape(-1, 1).astype(dtype)
    p = (1 / (1 + np.exp(-z))).astype(dtype)
    t = np.array([[1], [0], [1], [1], [0], [0], [0], [1]], dtype=dtype)
    g = loss_backward(np, BCE, p, t) * p * (1 - p)
    np.testing.assert_allclose(g, (p - t) / p.size, rtol=TOL[dtype] * 10, atol=0)
    eps = max(1e-7, float(np.finfo(dtype).eps))
    pc = np.clip(p.astype(np.float64), eps, 1 - eps)
    want = -np.mean(t * np.log(pc) + (1 - t) * np.log(1 - pc))
    assert float(loss_forward(np, BCE, p, t)) == pytest.approx(want, rel=TOL[dtype] * 10)
    assert float(loss_forward(np, BCE, np.array([[1.0], [0.0]], dtype), np.array([[0], [1]], dtype))) == \
        pytest.approx(-np.log(eps), rel=1e-3)    # a confident wrong answer costs -log(eps), not inf


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("loss", [CCE, SCCE])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 4)])
def test_fused_softmax_cross_entropy_equals_softmax_backward_of_loss_gradient(loss, dtype, shape):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(shape).astype(dtype)
    attrs = SoftmaxAttrs(-1)
    (p,) = run_forward(np, attrs, [logits])
    _, labels = _case(loss, dtype, rng, shape)
    (through,) = run_backward(np, attrs, [logits], [p], [loss_backward(np, loss, p, labels)])
    fused = softmax_cross_entropy_backward(np, loss, p, labels)
    assert fused.dtype == dtype
    np.testing.assert_allclose(fused, through, rtol=0, atol=1e-14 if dtype == np.float64 else 1e-6)
    rows = fused.reshape(-1, shape[-1])
    np.testing.assert_allclose(rows.sum(axis=1), 0.0, atol=1e-6)  # each row of (p - onehot) sums to zero
    assert np.all(rows.min(axis=1) < 0)  # the label's entry is p - 1 < 0


def test_sparse_cross_entropy_by_hand():
    p = np.array([[0.25, 0.75], [0.5, 0.5]])
    value = loss_forward(np, SCCE, p, np.array([1, 0]))
    assert float(value) == pytest.approx(-(math.log(0.75) + math.log(0.5)) / 2, abs=1e-15)
    g = loss_backward(np, SCCE, p, np.array([[1], [0]]))
    np.testing.assert_allclose(g, [[0.0, -1 / 0.75 / 2], [-1 / 0.5 / 2, 0.0]], atol=1e-15)


def test_unknown_loss_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown loss 'hinge'.*categorical_crossentropy.*mean_squared_error_sum"):
        LossType.parse("hinge")
    with pytest.raises(ConfigError, match="'mean_squared_error_avg' is not a cross-entropy"):
        softmax_cross_entropy_backward(np, LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE, np.ones((2, 2)),
                                       np.ones((2, 2)))


@pytest.mark.parametrize("loss, labels, message", [
    (CCE, np.ones((4, 3)), r"output's shape \[4, 5\], got \[4, 3\]"),
    (LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE, np.ones((5, 4)), r"\[4, 5\], got \[5, 4\]"),
    (SCCE, np.zeros((4, 2), np.int32), r"\[4\] or \[4, 1\].*got \[4, 2\]"),
    (SCCE, np.zeros(4), "integer class ids, got dtype float64"),
    (SCCE, np.full(4, 5), r"in \[0, 5\), got range \[5, 5\]"),
])
def test_loss_label_mismatch_is_shape_error(loss, labels, message):
    out = np.full((4, 5), 0.2)
    with pytest.raises(ShapeError, match=message):
        loss_forward(np, loss, out, labels)
    with pytest.raises(ShapeError, match=message):
        loss_backward(np, loss, out, labels)


# --- metrics --------------------------------------------------------------------------------------

def test_metrics_by_hand_sparse_and_one_hot_labels():
    out = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.4, 0.1], [0.2, 0.2, 0.6]])
    ids = np.array([0, 2, 1, 2])
    m = compute_metrics(np, _metrics("accuracy", "sparse_categorical_crossentropy"), out, ids)
    assert m["accuracy"] == pytest.approx(75.0)
    assert m["sparse_categorical_crossentropy"] == pytest.approx(
        -(math.log(0.7) + math.log(0.6) + math.log(0.4) + math.log(0.6)) / 4)
    onehot = np.eye(3)[ids]
    m2 = compute_metrics(np, _metrics("accuracy", "categorical_crossentropy"), out, onehot)
    assert m2["accuracy"] == pytest.approx(75.0)
    assert m2["categorical_crossentropy"] == pytest.approx(m["sparse_categorical_crossentropy"])
    assert compute_metrics(np, _metrics("accuracy"), out, ids.reshape(4, 1))["accuracy"] == pytest.approx(75.0)


def test_regression_metrics_by_hand():
    out = np.array([[1.0, 2.0], [0.0, 0.0]])
    target = np.array([[1.0, 4.0], [3.0, -1.0]])
    m = compute_metrics(np, _metrics("mean_squared_error", "root_mean_squared_error", "mean_absolute_error"), out,
                        target)
    assert m["mean_squared_error"] == pytest.approx((2.0 + 5.0) / 2)       # rows: (0+4)/2, (9+1)/2
    assert m["root_mean_squared_error"] == pytest.approx((math.sqrt(2.0) + math.sqrt(5.0)) / 2)
    assert m["mean_absolute_error"] == pytest.approx((1.0 + 2.0) / 2)      # rows: (0+2)/2, (3+1)/2


def test_metrics_accumulator_averages_over_samples_of_every_batch():
    acc = MetricsAccumulator(_metrics("accuracy", "mean_absolute_error"))
    acc.update(np, np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    acc.update(np, np.array([[0.1, 0.9]]), np.array([[1.0, 0.0]]))
    assert acc.samples == 4
    assert acc.get_accuracy() == pytest.approx(50.0)
    assert acc.result()["mean_absolute_error"] == pytest.approx((0.1 + 0.2 + 0.6 + 0.9) / 4)
    acc.reset()
    assert acc.result() == {"accuracy": 0.0, "mean_absolute_error": 0.0}
    with pytest.raises(ConfigError, match="accuracy is not among"):
        MetricsAccumulator(_metrics("mean_squared_error")).get_accuracy()


def test_unknown_metric_and_bad_labels_raise():
    valid = ", ".join(m.short_name for m in MetricsType)
    with pytest.raises(ConfigError, match=f"unknown metric 'f1'; valid: {valid}"):
        MetricsType.parse("f1")
    with pytest.raises(ShapeError, match=r"\[2\] or \[2, 1\].*got \[3\]"):
        compute_metrics(np, _metrics("accuracy"), np.ones((2, 2)), np.zeros(3, np.int32))


# --- optimizers -----------------------------------------------------------------------------------

def _torch_steps(opt_cls, kwargs, w0, grads):
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    return p.detach().numpy()


SGD_CASES = [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True),
             dict(lr=0.1, weight_decay=0.01), dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.001)]


@needs_torch
@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_sgd_matches_torch_over_five_steps(kw):
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) for _ in range(5)]
    w, state = w0.copy(), {}
    for g in grads:
        sgd_update(np, w, g, state, **kw)
    ref = _torch_steps(torch.optim.SGD, dict(kw, foreach=False), w0, grads)
    np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-12)
    assert allocated_state_bytes(state) == (w.nbytes if kw.get("momentum") else 0)


RMSPROP_CASES = [dict(lr=0.01), dict(lr=0.005, alpha=0.9, eps=1e-6, weight_decay=0.01)]
ADAGRAD_CASES = [dict(lr=0.1), dict(lr=0.05, lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.1, eps=1e-7)]


@needs_torch
@pytest.mark.parametrize("kind, kw", [("rmsprop", kw) for kw in RMSPROP_CASES]
                         + [("adagrad", kw) for kw in ADAGRAD_CASES],
                         ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()))
def test_rmsprop_and_adagrad_match_torch_over_five_steps(kind, kw):
    """flexrt's RMSprop (no momentum, not centered) and Adagrad are torch.optim's, step for step,
    through the runtime's ``optimizer_step`` (which counts Adagrad's steps), with one state array."""
    from flexrt.runtime.executor import optimizer_step
    rng = np.random.default_rng(6)
    w0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(5)]
    w, state, step = w0.copy(), {}, optimizer_step(kind, **kw)
    for g in grads:
        step(np, w, g, state)
    cls = torch.optim.RMSprop if kind == "rmsprop" else torch.optim.Adagrad
    ref = _torch_steps(cls, dict(kw, foreach=False), w0, grads)
    np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-12)
    assert allocated_state_bytes(state) == w.nbytes


ADAM_CASES = [dict(alpha=0.01), dict(alpha=0.01, weight_decay=0.05), dict(alpha=0.003, beta1=0.8, beta2=0.99,
                                                                          epsilon=1e-6)]


@needs_torch
@pytest.mark.parametrize("kw", ADAM_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_adam_matches_torch_over_five_steps(kw):
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(5)]
    w, state = w0.copy(), {}
    for step, g in enumerate(grads, start=1):
        adam_update(np, w, g, state, step=step, **kw)
    tkw = dict(lr=kw["alpha"], betas=(kw.get("beta1", 0.9), kw.get("beta2", 0.999)), eps=kw.get("epsilon", 1e-8),
               weight_decay=kw.get("weight_decay", 0.0), foreach=False)
    ref = _torch_steps(torch.optim.Adam, tkw, w0, grads)
    np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-12)
    assert allocated_state_bytes(state) == 2 * w.nbytes


def test_optimizers_keep_float32_and_reject_mismatched_gradients():
    w = np.ones(3, np.float32)
    sgd_update(np, w, np.ones(3, np.float32), {}, lr=0.5, momentum=0.9)
    adam_update(np, w, np.ones(3, np.float32), {}, step=1)
    assert w.dtype == np.float32 and np.allclose(w, 0.5 - 0.001)
    with pytest.raises(ShapeError, match=r"gradient shape \[2\].*weight shape \[3\]"):
        sgd_update(np, w, np.ones(2, np.float32), {}, lr=0.1)
    with pytest.raises(ConfigError, match="step counts from 1"):
        adam_update(np, w, np.ones(3, np.float32), {}, step=0)


def test_state_factor_agrees_with_simulator():
    from flexrt.simulator.simulate import OPTIMIZER_STATE
    assert {k: state_factor(k) for k in OPTIMIZER_STATE} == OPTIMIZER_STATE
    assert state_bytes(OptimizerKind.ADAM, 1000) == 2000 and state_bytes(OptimizerKind.SGD) == 0
    with pytest.raises(ConfigError, match="unknown optimizer 'lamb'; valid: sgd, momentum, adam, rmsprop, adagrad"):
        OptimizerKind.parse("lamb")


def test_kinds_keep_flexflow_values_and_parse_members_or_names():
    from flexrt.core import LossType as CoreLossType, MetricsType as CoreMetricsType
    assert CoreLossType is LossType and CoreMetricsType is MetricsType  # re-exported, defined once
    assert SCCE.value == 51 and MetricsType.METRICS_MEAN_ABSOLUTE_ERROR.value == 1032
    assert LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE.short_name == "mean_squared_error_avg"
    for kind in (OptimizerKind, LossType, MetricsType):
        for m in kind:
            assert kind.parse(m) is m and kind.parse(m.short_name) is m
    runtime = (OptimizerKind.SGD, OptimizerKind.ADAM)
    with pytest.raises(ConfigError, match="unknown optimizer 'momentum'; valid: sgd, adam"):
        OptimizerKind.parse(OptimizerKind.MOMENTUM, runtime)
    with pytest.raises(ShapeError, match="unknown optimizer 'SGD'; valid: sgd, adam"):
        OptimizerKind.parse("SGD", runtime, ShapeError)
    with pytest.raises(ConfigError, match="unknown loss 51; valid: categorical_crossentropy"):
        LossType.parse(51)  # FlexFlow's number is not a name


# --- initializers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, params", [("glorot_uniform", {}), ("uniform", dict(min=-0.5, max=0.25)),
                                          ("normal", dict(mean=1.0, stddev=0.5)), ("zero", {})])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_initializers_are_deterministic_per_seed(kind, params, dtype):
    a = initialize(np, kind, (8, 6), dtype, seed=3, fan_in=8, fan_out=6, **params)
    b = initialize(np, kind, (8, 6), dtype, seed=3, fan_in=8, fan_out=6, **params)
    c = initialize(np, kind, (8, 6), dtype, seed=4, fan_in=8, fan_out=6, **params)
    assert a.dtype == dtype and a.shape == (8, 6)
    assert np.array_equal(a, b)
    assert np.array_equal(a, c) == (kind == "zero")


def test_glorot_bounds_and_variance():
    fan_in, fan_out = fans((400, 600), "dense")
    w = initialize(np, "glorot_uniform", (400, 600), np.float64, seed=1, fan_in=fan_in, fan_out=fan_out)
    limit = math.sqrt(6 / 1000)
    assert np.all(np.abs(w) <= limit) and np.abs(w).max() > 0.99 * limit
    assert w.var() == pytest.approx(2 / 1000, rel=0.05)


def test_uniform_and_normal_statistics():
    u = initialize(np, "uniform", (200_000,), np.float64, seed=2, min=-0.5, max=0.25)
    assert u.min() >= -0.5 and u.max() < 0.25 and u.mean() == pytest.approx(-0.125, abs=0.005)
    n = initialize(np, "normal", (200_000,), np.float64, seed=2, mean=1.0, stddev=0.5)
    assert n.mean() == pytest.approx(1.0, abs=0.01) and n.std() == pytest.approx(0.5, rel=0.02)
    assert not initialize(np, "zero", (3, 3), np.float32).any()


def test_fans_dense_and_conv_layouts():
    assert fans((784, 512), "dense") == (784, 512)
    assert fans((64, 3, 5, 5), "conv") == (3 * 25, 64 * 25)
    with pytest.raises(ShapeError, match=r"\[out, in/groups, kh, kw\], got shape \[64, 3\]"):
        fans((64, 3), "conv")
    with pytest.raises(ConfigError, match="valid: dense, conv"):
        fans((3, 3), "lstm")


def test_initializer_bad_names_and_parameters():
    with pytest.raises(ConfigError, match="unknown initializer 'he'; valid: glorot_uniform, zero, one, uniform, normal"):
        initialize(np, "he", (2, 2), np.float32)
    with pytest.raises(ConfigError, match=r"takes parameters \(min, max\), got stddev"):
        initialize(np, "uniform", (2, 2), np.float32, stddev=1.0)
    with pytest.raises(ConfigError, match="positive fan_in and fan_out"):
        initialize(np, "glorot_uniform", (2, 2), np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_cross_entropy_metrics_stay_finite_when_a_probability_underflows(dtype):
    """A softmax probability of exactly 0 for the true class costs -log(smallest normal), as the loss
    does (FlexFlow's mnist_mlp on uniform inputs printed an infinite metric in its first epoch)."""
    probs = np.array([[0.0, 1.0], [0.5, 0.5]], dtype=dtype)
    sparse = compute_metrics(np, [MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY], probs,
                             np.array([[0], [1]], dtype=np.int32))
    dense = compute_metrics(np, [MetricsType.METRICS_CATEGORICAL_CROSSENTROPY], probs,
                            np.array([[1, 0], [0, 1]], dtype=dtype))
    worst = -np.log(np.finfo(dtype).tiny)
    for got in (sparse["sparse_categorical_crossentropy"], dense["categorical_crossentropy"]):
        assert np.isfinite(got) and got == pytest.approx((worst + np.log(2)) / 2, rel=1e-3)


@pytest.mark.parametrize("label_dtype", [np.int32, np.float32])
def test_accuracy_of_one_probability_per_sample_is_binary_accuracy(label_dtype):
    """A sigmoid output (one column): Keras' binary accuracy, prediction and label each thresholded at
    0.5 (an argmax over one column scored every sample right)."""
    rng = np.random.default_rng(3)
    out = rng.random((64, 1)).astype(np.float32)
    labels = rng.integers(0, 2, (64, 1)).astype(label_dtype)
    want = np.mean((out[:, 0] > 0.5) == (labels[:, 0] > 0.5)) * 100.0
    assert 20.0 < want < 80.0
    assert compute_metrics(np, _metrics("accuracy"), out, labels)["accuracy"] == pytest.approx(want)
