"""``Concat`` of any number of tensors along ``axis`` (FlexFlow ``concat(tensors, axis)``).

All inputs have the same rank and dtype and equal sizes except along ``axis``; the output's size
there is the sum of theirs.

Parallel axes: every dimension other than ``axis`` (all inputs and the output cut alike), replicas
pass through, and partial sums pass through (concat is linear:
concat(a1 + a2, b1 + b2) = concat(a1, b1) + concat(a2, b2); every input must carry the same sum
degree). Cutting the inputs along ``axis`` is not offered: the pieces of the output would interleave
the inputs' pieces instead of being one contiguous block each.

The ``part`` axis cuts the output along ``axis`` where its pieces' boundaries fall between inputs:
piece c concatenates the whole inputs that fill its slice, where they lie, and reads nothing of the
others (a ``PART`` slot). Placed on the devices of its inputs, the concatenation moves no data, and
a Linear cut along its input features (reduction parallelism) computes on the pieces in place: Unity
Fig. 16b's independent matrix products per embedding, with one Reduction after. Its degree is the
attribute ``parts`` (1 in a model; a configuration sets it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes
from flexrt.ir.registry import AxisKind, OpDef, ParallelAxis, part, register_op, shard
from flexrt.ir.tensor_shape import TensorShape, normalize_axis


@dataclass(frozen=True, slots=True)
class ConcatAttrs:
    """``axis`` may be negative (counted from the last dimension)."""

    op_type: ClassVar[OpType] = OpType.CONCAT
    axis: int
    parts: int = 1

    def __post_init__(self):
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise ShapeError(f"concat: axis must be an int, got {self.axis!r}")
        if not isinstance(self.parts, int) or isinstance(self.parts, bool) or self.parts < 1:
            raise ShapeError(f"concat: parts must be an int >= 1, got {self.parts!r}")


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


def _starts(inputs, axis: int) -> list[int]:
    return [0, *itertools.accumulate(t.dims[axis] for t in inputs)]


def parallel_axes(attrs: ConcatAttrs, inputs):
    axis = concat_axis(attrs, inputs)
    rank = inputs[0].rank
    axes = elementwise_axes(rank, len(inputs), dims=[d for d in range(rank) if d != axis], linear=True)
    if len(inputs) < 2:
        return axes
    starts = _starts(inputs, axis)
    return axes + (ParallelAxis("part", AxisKind.ATTRIBUTE,
                                tuple((i, part(axis, at, starts[-1])) for i, at in enumerate(starts[:-1])),
                                ((0, shard(axis)),), degree_attr="parts"),)


def check_degrees(attrs: ConcatAttrs, inputs, degree) -> None:
    """The part axis's pieces must each hold whole inputs: every piece boundary between two inputs."""
    k = degree.get("part", 1)
    if k == 1:
        return
    axis = concat_axis(attrs, inputs)
    starts = _starts(inputs, axis)
    total = starts[-1]
    if total % k:
        raise ShapeError(f"part degree {k} does not divide the concatenated size {total}")
    step = total // k
    cuts = [c for c in range(step, total, step) if c not in starts]
    if cuts:
        raise ShapeError(f"part degree {k} cuts the output at {cuts}, inside an input; the inputs end at "
                         f"{starts[1:]}: valid part degrees put every cut between two inputs")


def flops(attrs, ins, outs):
    return 0  # pure data movement


register_op(OpDef(OpType.CONCAT, ConcatAttrs, output_shapes=output_shapes, flops=flops, num_inputs=None,
                  parallel_axes=parallel_axes, backward_flops=flops, check_degrees=check_degrees))
