"""Linear (dense) forward and backward."""

from __future__ import annotations

from flexrt.ir.op_type import OpType
from flexrt.kernels.ops.activation import activation_grad, apply_activation
from flexrt.kernels.registry import register_backward, register_forward


@register_forward(OpType.LINEAR)
def linear_forward(xp, attrs, operands):
    x, w = operands[0], operands[1]
    y = xp.matmul(x, w)
    if attrs.use_bias:
        y = y + operands[2]
    return (apply_activation(xp, attrs.activation, y),)


@register_backward(OpType.LINEAR)
def linear_backward(xp, attrs, operands, outputs, grad_outputs):
    x, w = operands[0], operands[1]
    def pre():
        z = xp.matmul(x, w)
        return z + operands[2] if attrs.use_bias else z
    dy = activation_grad(xp, attrs.activation, outputs[0], grad_outputs[0], pre)
    dx = xp.matmul(dy, w.T)
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    dw = xp.matmul(x2.T, dy2)
    if attrs.use_bias:
        return dx, dw, dy2.sum(axis=0)
    return dx, dw
