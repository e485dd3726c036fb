"""Forwards of reduce_sum, mean and the LSTM cell."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import sigmoid
from flexrt.kernels.registry import register_forward


@register_forward(OpType.REDUCE_SUM)
def reduce_sum_forward(xp, attrs, operands):
    (x,) = operands
    # dtype=x.dtype: NumPy would widen small integers to int64; the IR keeps the input's dtype
    return (xp.asarray(xp.sum(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype=x.dtype)),)


@register_forward(OpType.MEAN)
def mean_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.asarray(xp.mean(x, axis=attrs.axes, keepdims=attrs.keepdims)).astype(x.dtype, copy=False),)


@register_forward(OpType.LSTM)
def lstm_forward(xp, attrs, operands):
    """One LSTM step; gate blocks of width H in the order i, f, g, o. Returns (h', c')."""
    x, h, c, w_ih, w_hh, bias = operands
    hidden = h.shape[1]
    gates = xp.matmul(x, w_ih) + xp.matmul(h, w_hh) + bias
    i = sigmoid(xp, gates[:, :hidden])
    f = sigmoid(xp, gates[:, hidden:2 * hidden])
    g = xp.tanh(gates[:, 2 * hidden:3 * hidden])
    o = sigmoid(xp, gates[:, 3 * hidden:])
    c_new = f * c + i * g
    return (o * xp.tanh(c_new), c_new)
