"""BatchNorm (training-mode batch statistics), LayerNorm and Softmax forwards, array-module generic."""

from __future__ import annotations

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_forward


def _normalize(xp, x, axes: tuple[int, ...], eps: float):
    mean = xp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = xp.mean(centered * centered, axis=axes, keepdims=True)  # biased, as the training forward uses
    return centered / xp.sqrt(var + x.dtype.type(eps))


@register_forward(OpType.BATCH_NORM)
def batch_norm_forward(xp, attrs, operands):
    x, scale, bias = operands
    if x.ndim not in (2, 4):
        raise ShapeError(f"batch_norm: input of shape {list(x.shape)} has rank {x.ndim}; valid ranks: 2, 4")
    axes = tuple(d for d in range(x.ndim) if d != 1)
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    y = _normalize(xp, x, axes, attrs.eps) * scale.reshape(bshape) + bias.reshape(bshape)
    return (xp.maximum(y, 0) if attrs.relu else y,)


@register_forward(OpType.LAYER_NORM)
def layer_norm_forward(xp, attrs, operands):
    x = operands[0]
    r = x.ndim
    axes = tuple(sorted(a % r for a in attrs.axes))
    y = _normalize(xp, x, axes, attrs.eps)
    if attrs.elementwise_affine:
        y = y * operands[1] + operands[2]  # gamma, beta have the trailing (normalized) shape
    return (y,)


@register_forward(OpType.SOFTMAX)
def softmax_forward(xp, attrs, operands):
    (x,) = operands
    axis = attrs.axis % x.ndim
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))  # max subtraction: exp never overflows
    return (e / xp.sum(e, axis=axis, keepdims=True),)
