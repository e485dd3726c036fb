"""Element-wise unary operators: relu, sigmoid, tanh, gelu, elu, exp, log, sin, cos, identity, rsqrt,
pow (``scalar`` is the exponent) and the scalar ops add / sub / multiply / true_divide.

Parallel axes: every dimension (sample / attribute), replicas pass through, and partial sums pass
through for the operators linear in their input (identity; x*s: (a1 + a2)*s = a1*s + a2*s;
x/s likewise). scalar_add is not linear: (a1 + s) + (a2 + s) != (a1 + a2) + s.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.ir.op_type import ELEMENT_UNARY, LINEAR_UNARY, OpType
from flexrt.ir.ops._common import elementwise_axes, numel
from flexrt.ir.registry import OpDef, register_op

# Cost of one element in FLOPs (transcendentals counted as a few operations).
_FLOPS_PER_ELEMENT = {
    OpType.RELU: 1, OpType.IDENTITY: 0, OpType.SCALAR_ADD: 1, OpType.SCALAR_SUB: 1, OpType.SCALAR_MUL: 1,
    OpType.SCALAR_TRUE_DIV: 1, OpType.SIGMOID: 4, OpType.TANH: 4, OpType.GELU: 8, OpType.ELU: 4,
    OpType.EXP: 4, OpType.SIN: 4, OpType.COS: 4, OpType.RSQRT: 2, OpType.POW: 4, OpType.LOG: 4,
}


@dataclass(frozen=True, slots=True)
class ElementUnaryAttrs:
    """``op_type`` selects the function; ``scalar`` is the constant of scalar ops and pow's exponent."""

    op_type: OpType
    scalar: float = 0.0

    def __post_init__(self):
        if self.op_type not in ELEMENT_UNARY:
            raise ShapeError(f"{self.op_type} is not an element-wise unary operator; valid: "
                             f"{', '.join(sorted(t.value for t in ELEMENT_UNARY))}")
        if not isinstance(self.scalar, (int, float)) or isinstance(self.scalar, bool):
            raise ShapeError(f"{self.op_type.value}: scalar must be a number, got {self.scalar!r}")
        object.__setattr__(self, "scalar", float(self.scalar))


def output_shapes(attrs, inputs):
    (x,) = inputs
    return (x,)


def parallel_axes(attrs, inputs):
    return elementwise_axes(inputs[0].rank, 1, linear=attrs.op_type in LINEAR_UNARY)


def flops(attrs, ins, outs):
    return _FLOPS_PER_ELEMENT[attrs.op_type] * numel(outs[0])


for _t in sorted(ELEMENT_UNARY, key=lambda t: t.value):
    register_op(OpDef(_t, ElementUnaryAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                      parallel_axes=parallel_axes))
