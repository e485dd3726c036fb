"""Element-wise unary and binary forwards and backwards (binary ops broadcast as NumPy does)."""

from __future__ import annotations

from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY, OpType
from flexrt.kernels.ops.activation import gelu, gelu_grad, sigmoid
from flexrt.kernels.registry import register_backward, register_forward

_UNARY = {
    OpType.RELU: lambda xp, x, s: xp.maximum(x, 0),
    OpType.SIGMOID: lambda xp, x, s: sigmoid(xp, x),
    OpType.TANH: lambda xp, x, s: xp.tanh(x),
    OpType.GELU: lambda xp, x, s: gelu(xp, x),
    OpType.ELU: lambda xp, x, s: xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0))),
    OpType.EXP: lambda xp, x, s: xp.exp(x),
    OpType.LOG: lambda xp, x, s: xp.log(x),
    OpType.SIN: lambda xp, x, s: xp.sin(x),
    OpType.COS: lambda xp, x, s: xp.cos(x),
    OpType.IDENTITY: lambda xp, x, s: x.copy(),
    OpType.RSQRT: lambda xp, x, s: 1.0 / xp.sqrt(x),
    OpType.POW: lambda xp, x, s: xp.power(x, x.dtype.type(s)),
    OpType.SCALAR_ADD: lambda xp, x, s: x + x.dtype.type(s),
    OpType.SCALAR_SUB: lambda xp, x, s: x - x.dtype.type(s),
    OpType.SCALAR_MUL: lambda xp, x, s: x * x.dtype.type(s),
    OpType.SCALAR_TRUE_DIV: lambda xp, x, s: x / x.dtype.type(s),
}
_BINARY = {
    OpType.EW_ADD: lambda xp, a, b: a + b,
    OpType.EW_SUB: lambda xp, a, b: a - b,
    OpType.EW_MUL: lambda xp, a, b: a * b,
    OpType.EW_DIV: lambda xp, a, b: a / b,
    OpType.EW_MAX: lambda xp, a, b: xp.maximum(a, b),
    OpType.EW_MIN: lambda xp, a, b: xp.minimum(a, b),
}
assert set(_UNARY) == ELEMENT_UNARY and set(_BINARY) == ELEMENT_BINARY


@register_forward(*sorted(ELEMENT_UNARY, key=lambda t: t.value))
def unary_forward(xp, attrs, operands):
    (x,) = operands
    return (_UNARY[attrs.op_type](xp, x, attrs.scalar),)


@register_forward(*sorted(ELEMENT_BINARY, key=lambda t: t.value))
def binary_forward(xp, attrs, operands):
    a, b = operands
    if (a.size == 0) != (b.size == 0):  # a piece of the operand axis (tensors are never empty): one operand read
        if b.size == 0:
            return (a.copy(),)
        return (b.copy() if attrs.op_type is OpType.EW_ADD else -b,)
    return (_BINARY[attrs.op_type](xp, a, b),)


# d out / d x for each unary op from (x, y = forward(x), scalar)
_UNARY_DERIV = {
    OpType.RELU: lambda xp, x, y, s: (x > 0).astype(x.dtype),
    OpType.SIGMOID: lambda xp, x, y, s: y * (1 - y),
    OpType.TANH: lambda xp, x, y, s: 1 - y * y,
    OpType.GELU: lambda xp, x, y, s: gelu_grad(xp, x),
    OpType.ELU: lambda xp, x, y, s: xp.where(x > 0, x.dtype.type(1), y + 1),
    OpType.EXP: lambda xp, x, y, s: y,
    OpType.LOG: lambda xp, x, y, s: 1 / x,
    OpType.SIN: lambda xp, x, y, s: xp.cos(x),
    OpType.COS: lambda xp, x, y, s: -xp.sin(x),
    OpType.IDENTITY: lambda xp, x, y, s: None,
    OpType.RSQRT: lambda xp, x, y, s: x.dtype.type(-0.5) * y * y * y,
    OpType.POW: lambda xp, x, y, s: x.dtype.type(s) * xp.power(x, x.dtype.type(s - 1)),
    OpType.SCALAR_ADD: lambda xp, x, y, s: None,
    OpType.SCALAR_SUB: lambda xp, x, y, s: None,
    OpType.SCALAR_MUL: lambda xp, x, y, s: x.dtype.type(s),
    OpType.SCALAR_TRUE_DIV: lambda xp, x, y, s: x.dtype.type(1.0 / s),
}
assert set(_UNARY_DERIV) == ELEMENT_UNARY


def unbroadcast(xp, g, shape: tuple):
    """Sum ``g`` (of a broadcast result's shape) back to an operand's ``shape``: over the leading
    extra dimensions and over those where the operand has size 1 and ``g`` does not."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and g.shape[d] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


@register_backward(*sorted(ELEMENT_UNARY, key=lambda t: t.value))
def unary_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,), (y,), (dy,) = operands, outputs, grad_outputs
    d = _UNARY_DERIV[attrs.op_type](xp, x, y, attrs.scalar)
    return (dy.copy() if d is None else dy * d,)


@register_backward(*sorted(ELEMENT_BINARY, key=lambda t: t.value))
def binary_backward(xp, attrs, operands, outputs, grad_outputs):
    a, b = operands
    (dy,) = grad_outputs
    t = attrs.op_type
    if (a.size == 0) != (b.size == 0):  # the operand axis: to the one operand read
        da, db = (dy.copy(), b.copy()) if b.size == 0 else (a.copy(), dy.copy() if t is OpType.EW_ADD else -dy)
        return da, db
    if t is OpType.EW_ADD:
        da, db = dy.copy(), dy.copy()
    elif t is OpType.EW_SUB:
        da, db = dy.copy(), -dy
    elif t is OpType.EW_MUL:
        da, db = dy * b, dy * a
    elif t is OpType.EW_DIV:
        da = dy / b
        db = -dy * a / (b * b)
    else:  # max / min: to the larger / smaller operand, ties to the first
        first = (a >= b) if t is OpType.EW_MAX else (a <= b)
        zero = dy.dtype.type(0)
        da, db = xp.where(first, dy, zero), xp.where(first, zero, dy)
    return unbroadcast(xp, da, a.shape), unbroadcast(xp, db, b.shape)
