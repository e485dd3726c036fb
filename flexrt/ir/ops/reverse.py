"""``Reverse``: reverse the order of the elements along one ``axis`` (FlexFlow's Reverse; ``np.flip``).

Parallel axes: every dimension except ``axis`` (a piece reverses its own slice, with the output
cut the same way); replicas pass through, and partial sums pass through (reversal is linear). The
reversed dimension is not an axis: piece i of the output would come from piece degree-1-i of the
input, and a parallel axis maps pieces one to one at the same coordinate.

Entry point: ``ReverseAttrs``; the rules register on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape, normalize_axis


@dataclass(frozen=True, slots=True)
class ReverseAttrs:
    """``axis``: the dimension reversed (negative counts from the end). Example: ``ReverseAttrs(1)``."""

    op_type: ClassVar[OpType] = OpType.REVERSE
    axis: int

    def __post_init__(self):
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise ShapeError(f"reverse: axis must be an int, got {self.axis!r}")


def reversed_dim(attrs: ReverseAttrs, x: TensorShape) -> int:
    """The reversed dimension of ``x`` in 0..rank-1; ShapeError when ``axis`` is out of range."""
    return normalize_axis(attrs.axis, x.rank, f"reverse (input {x}): axis")


def output_shapes(attrs: ReverseAttrs, inputs):
    (x,) = inputs
    reversed_dim(attrs, x)
    return (x,)


def parallel_axes(attrs: ReverseAttrs, inputs):
    (x,) = inputs
    axis = reversed_dim(attrs, x)
    return elementwise_axes(x.rank, 1, dims=[d for d in range(x.rank) if d != axis], linear=True)


def flops(attrs, ins, outs):
    return 0  # data movement only


register_op(OpDef(OpType.REVERSE, ReverseAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops))
