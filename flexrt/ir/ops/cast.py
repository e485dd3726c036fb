"""``Cast`` to another element type (same shape).

Parallel axes: every dimension, replicas pass through, and partial sums pass through only for a
float -> float cast (up to rounding, cast(a1 + a2) = cast(a1) + cast(a2)); casts to or from integer
and boolean types truncate or saturate, so partial sums must be reduced first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes, numel
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class CastAttrs:
    op_type: ClassVar[OpType] = OpType.CAST
    dtype: DataType

    def __post_init__(self):
        if not isinstance(self.dtype, DataType) or self.dtype is DataType.DT_NONE:
            valid = ", ".join(t.name for t in DataType if t is not DataType.DT_NONE)
            raise ShapeError(f"cast: dtype must be a DataType other than DT_NONE, got {self.dtype!r}; valid: {valid}")


def output_shapes(attrs: CastAttrs, inputs):
    (x,) = inputs
    return (TensorShape(x.dims, attrs.dtype),)


def parallel_axes(attrs: CastAttrs, inputs):
    (x,) = inputs
    return elementwise_axes(x.rank, 1, linear=x.dtype.is_floating and attrs.dtype.is_floating)


def flops(attrs, ins, outs):
    return numel(outs[0])


register_op(OpDef(OpType.CAST, CastAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops))
