"""BiasAdd's forward and backward (y = x + b, b along the last dimension), array-module generic."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.elementwise import unbroadcast
from flexrt.kernels.registry import register_backward, register_forward


@register_forward(OpType.BIAS_ADD)
def bias_add_forward(xp, attrs, operands):
    x, bias = operands
    return (x + bias,)


@register_backward(OpType.BIAS_ADD)
def bias_add_backward(xp, attrs, operands, outputs, grad_outputs):
    x, bias = operands
    (dy,) = grad_outputs
    return dy.copy(), unbroadcast(xp, dy, bias.shape)
