"""Element-wise unary and binary forwards."""

from __future__ import annotations

from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY, OpType
from flexrt.kernels.ops.activation import gelu, sigmoid
from flexrt.kernels.registry import register_forward

_UNARY = {
    OpType.RELU: lambda xp, x, s: xp.maximum(x, 0),
    OpType.SIGMOID: lambda xp, x, s: sigmoid(xp, x),
    OpType.TANH: lambda xp, x, s: xp.tanh(x),
    OpType.GELU: lambda xp, x, s: gelu(xp, x),
    OpType.ELU: lambda xp, x, s: xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0))),
    OpType.EXP: lambda xp, x, s: xp.exp(x),
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
    return (_BINARY[attrs.op_type](xp, a, b),)
