"""Linear (dense) forward."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import apply_activation
from flexrt.kernels.registry import register_forward


@register_forward(OpType.LINEAR)
def linear_forward(xp, attrs, operands):
    x, w = operands[0], operands[1]
    y = xp.matmul(x, w)
    if attrs.use_bias:
        y = y + operands[2]
    return (apply_activation(xp, attrs.activation, y),)
