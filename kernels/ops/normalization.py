"""BatchNorm (training-mode batch statistics), LayerNorm, RMSNorm and Softmax forwards and backwards,
array-module generic."""

from __future__ import annotations

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.elementwise import unbroadcast
from flexrt.kernels.ops.matmul_attention import causal_masked
from flexrt.kernels.registry import register_backward, register_forward


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
        y = y * operands[1]  # gamma (and beta) have the trailing (normalized) shape
        if attrs.use_bias:
            y = y + operands[2]
    return (y,)


def _inverse_rms(xp, x, eps: float):
    """1 / sqrt(mean(x^2 over the last dimension) + eps), one per row (kept as a trailing size-1 axis)."""
    return 1.0 / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps))


@register_forward(OpType.RMS_NORM)
def rms_norm_forward(xp, attrs, operands):
    x, gamma = operands
    return (x * _inverse_rms(xp, x, attrs.eps) * gamma,)


@register_forward(OpType.SOFTMAX)
def softmax_forward(xp, attrs, operands):
    (x,) = operands
    axis = attrs.axis % x.ndim
    x = causal_masked(xp, attrs, x)   # a causal softmax: -inf above the diagonal (exp gives 0)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))  # max subtraction: exp never overflows
    return (e / xp.sum(e, axis=axis, keepdims=True),)


def _normalize_backward(xp, x, axes: tuple[int, ...], eps: float, dxhat):
    """Gradient of x given that of ``_normalize(x)``; also returns the normalized x."""
    mean = xp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = xp.mean(centered * centered, axis=axes, keepdims=True)
    inv_std = 1.0 / xp.sqrt(var + x.dtype.type(eps))
    xhat = centered * inv_std
    dx = inv_std * (dxhat - xp.mean(dxhat, axis=axes, keepdims=True)
                    - xhat * xp.mean(dxhat * xhat, axis=axes, keepdims=True))
    return dx, xhat


@register_backward(OpType.BATCH_NORM)
def batch_norm_backward(xp, attrs, operands, outputs, grad_outputs):
    x, scale, bias = operands
    (dy,) = grad_outputs
    if attrs.relu:
        dy = dy * (outputs[0] > 0)
    axes = tuple(d for d in range(x.ndim) if d != 1)
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    dx, xhat = _normalize_backward(xp, x, axes, attrs.eps, dy * scale.reshape(bshape))
    return dx, (dy * xhat).sum(axis=axes).reshape(scale.shape), dy.sum(axis=axes).reshape(bias.shape)


@register_backward(OpType.LAYER_NORM)
def layer_norm_backward(xp, attrs, operands, outputs, grad_outputs):
    x = operands[0]
    (dy,) = grad_outputs
    axes = tuple(sorted(a % x.ndim for a in attrs.axes))
    if not attrs.elementwise_affine:
        return (_normalize_backward(xp, x, axes, attrs.eps, dy)[0],)
    gamma = operands[1]
    dx, xhat = _normalize_backward(xp, x, axes, attrs.eps, dy * gamma)
    dgamma = unbroadcast(xp, dy * xhat, gamma.shape)
    if not attrs.use_bias:
        return dx, dgamma
    return dx, dgamma, unbroadcast(xp, dy, operands[2].shape)


@register_backward(OpType.RMS_NORM)
def rms_norm_backward(xp, attrs, operands, outputs, grad_outputs):
    """With r = 1 / sqrt(mean(x^2) + eps) and g = dy * gamma: dx = r * g - x * r^3 * mean(g * x)
    (r depends on every x of the row), dgamma = sum of dy * x * r over every row."""
    x, gamma = operands
    (dy,) = grad_outputs
    r = _inverse_rms(xp, x, attrs.eps)
    g = dy * gamma
    dx = r * g - x * (r * r * r) * xp.mean(g * x, axis=-1, keepdims=True)
    return dx, unbroadcast(xp, dy * (x * r), gamma.shape)


@register_backward(OpType.SOFTMAX)
def softmax_backward(xp, attrs, operands, outputs, grad_outputs):
    (y,), (dy,) = outputs, grad_outputs
    axis = attrs.axis % y.ndim
    return (y * (dy - xp.sum(dy * y, axis=axis, keepdims=True)),)
