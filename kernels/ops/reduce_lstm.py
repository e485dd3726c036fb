"""Forwards and backwards of reduce_sum, mean and the LSTM cell."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import sigmoid
from flexrt.kernels.registry import register_backward, register_forward


@register_forward(OpType.REDUCE_SUM)
def reduce_sum_forward(xp, attrs, operands):
    (x,) = operands
    # dtype=x.dtype: NumPy would widen small integers to int64; the IR keeps the input's dtype
    return (xp.asarray(xp.sum(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype=x.dtype)),)


@register_forward(OpType.MEAN)
def mean_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.asarray(xp.mean(x, axis=attrs.axes, keepdims=attrs.keepdims)).astype(x.dtype, copy=False),)


def _lstm_gates(xp, operands):
    """The gates (i, f, g, o; blocks of width H in that order) and the new cell state of one step."""
    x, h, c, w_ih, w_hh, bias = operands
    hidden = h.shape[1]
    gates = xp.matmul(x, w_ih) + xp.matmul(h, w_hh) + bias
    i = sigmoid(xp, gates[:, :hidden])
    f = sigmoid(xp, gates[:, hidden:2 * hidden])
    g = xp.tanh(gates[:, 2 * hidden:3 * hidden])
    o = sigmoid(xp, gates[:, 3 * hidden:])
    c_new = f * c + i * g
    return i, f, g, o, c_new


@register_forward(OpType.LSTM)
def lstm_forward(xp, attrs, operands):
    """One LSTM step. Returns (h', c')."""
    i, f, g, o, c_new = _lstm_gates(xp, operands)
    return (o * xp.tanh(c_new), c_new)


def _expand_reduced(xp, attrs, x, g):
    """``g`` (the output's gradient) broadcast back to ``x``'s shape, as a fresh array of x's dtype."""
    axes = sorted(a % x.ndim for a in attrs.axes)
    if not attrs.keepdims:
        for a in axes:
            g = xp.expand_dims(g, a)
    return xp.zeros(x.shape, dtype=x.dtype) + g.astype(x.dtype, copy=False)


@register_backward(OpType.REDUCE_SUM)
def reduce_sum_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,) = operands
    if x.dtype.kind not in "fc":
        return (None,)
    return (_expand_reduced(xp, attrs, x, grad_outputs[0]),)


@register_backward(OpType.MEAN)
def mean_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,) = operands
    count = 1
    for a in set(a % x.ndim for a in attrs.axes):
        count *= x.shape[a]
    return (_expand_reduced(xp, attrs, x, grad_outputs[0]) / x.dtype.type(count),)


@register_backward(OpType.LSTM)
def lstm_backward(xp, attrs, operands, outputs, grad_outputs):
    """Gradients of (x, h, c, w_ih, w_hh, bias) given those of (h', c') (either may be None)."""
    x, h, c, w_ih, w_hh, bias = operands
    i, f, g, o, c_new = _lstm_gates(xp, operands)
    tc = xp.tanh(c_new)
    dh_new, dc_new = grad_outputs
    if dh_new is None:
        dh_new = xp.zeros_like(h)
    dc = xp.zeros_like(c) if dc_new is None else dc_new.astype(c.dtype, copy=True)
    dc = dc + dh_new * o * (1 - tc * tc)
    d_o = dh_new * tc * o * (1 - o)
    d_i = dc * g * i * (1 - i)
    d_f = dc * c * f * (1 - f)
    d_g = dc * i * (1 - g * g)
    dgates = xp.concatenate([d_i, d_f, d_g, d_o], axis=1)
    return (xp.matmul(dgates, w_ih.T), xp.matmul(dgates, w_hh.T), dc * f,
            xp.matmul(x.T, dgates), xp.matmul(h.T, dgates), dgates.sum(axis=0))
