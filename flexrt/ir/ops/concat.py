"""``Concat`` of any number of tensors along ``axis`` (FlexFlow ``concat(tensors, axis)``).

All inputs have the same rank and dtype and equal sizes except along ``axis``; the output's size
there is the sum of theirs.

Parallel axes: every dimension other than ``axis`` (all inputs and the output cut alike), replicas
pass through, and partial sums pass through (concat is linear:
concat(a1 + a2, b1 + b2) = concat(a1, b1) + concat(a2, b2); every input must carry the same sum
degree). Cutting along ``axis`` is not offered: the pieces of the output would interleave the
inputs' pieces instead of being one contiguous block each.
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
class ConcatAttrs:
    """``axis`` may be negative (counted from the last dimension)."""

    op_type: ClassVar[OpType] = OpType.CONCAT
    axis: int

    def __post_init__(self):
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise ShapeError(f"concat: axis must be an int, got {self.axis!r}")


def concat_axis(attrs: ConcatAttrs, inputs) -> int:
    """The concat axis in 0..rank-1, after checking the inputs agree on everything else."""
    if not inputs:
        raise ShapeError("concat: needs at least one input, got none")
    first = inputs[0]
    axis = normalize_axis(attrs.axis, first.rank, "concat: axis")
    for i, t in enumerate(inputs[1:], 1):
        if t.rank != first.rank:
            raise ShapeError(f"concat: input {i} {list(t.dims)} has rank {t.rank} but input 0 "
                             f"{list(first.dims)} has rank {first.rank}; all inputs need the same rank")
        if t.dtype != first.dtype:
            raise ShapeError(f"concat: input {i} has dtype {t.dtype.name} but input 0 has {first.dtype.name}; "
                             f"all inputs need the same dtype")
        for d, (a, b) in enumerate(zip(first.dims, t.dims)):
            if d != axis and a != b:
                raise ShapeError(f"concat: input {i} {list(t.dims)} differs from input 0 {list(first.dims)} "
                                 f"in dimension {d} (not the concat axis {axis})")
    return axis


def output_shapes(attrs: ConcatAttrs, inputs):
    axis = concat_axis(attrs, inputs)
    dims = list(inputs[0].dims)
    dims[axis] = sum(t.dims[axis] for t in inputs)
    return (TensorShape(tuple(dims), inputs[0].dtype),)


def parallel_axes(attrs: ConcatAttrs, inputs):
    axis = concat_axis(attrs, inputs)
    rank = inputs[0].rank
    return elementwise_axes(rank, len(inputs), dims=[d for d in range(rank) if d != axis], linear=True)


def flops(attrs, ins, outs):
    return 0  # pure data movement


register_op(OpDef(OpType.CONCAT, ConcatAttrs, output_shapes=output_shapes, flops=flops, num_inputs=None,
                  parallel_axes=parallel_axes, backward_flops=flops))
