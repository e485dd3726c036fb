"""``Transpose``: permute dimensions by ``perm`` (output dimension i is input dimension perm[i]).

Parallel axes: every input dimension d, cut together with its output position perm.index(d);
replicas pass through, and partial sums pass through (transposition is linear).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class TransposeAttrs:
    """``perm``: a permutation of 0..rank-1."""

    op_type: ClassVar[OpType] = OpType.TRANSPOSE
    perm: tuple[int, ...]

    def __post_init__(self):
        try:
            perm = tuple(self.perm)
        except TypeError:
            raise ShapeError(f"transpose: perm must be a sequence of ints, got {self.perm!r}") from None
        object.__setattr__(self, "perm", perm)
        if any(not isinstance(p, int) or isinstance(p, bool) for p in perm) or sorted(perm) != list(range(len(perm))):
            raise ShapeError(f"transpose: perm {list(perm)} is not a permutation of 0..{len(perm) - 1}; "
                             f"each of 0..{len(perm) - 1} must appear exactly once")


def _check(attrs: TransposeAttrs, x: TensorShape) -> None:
    if len(attrs.perm) != x.rank:
        raise ShapeError(f"transpose: perm {list(attrs.perm)} has {len(attrs.perm)} entries but input "
                         f"{list(x.dims)} has rank {x.rank}; perm needs one entry per dimension")


def output_shapes(attrs: TransposeAttrs, inputs):
    (x,) = inputs
    _check(attrs, x)
    return (TensorShape(tuple(x.dims[p] for p in attrs.perm), x.dtype),)


def parallel_axes(attrs: TransposeAttrs, inputs):
    (x,) = inputs
    _check(attrs, x)
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)),), ((0, shard(attrs.perm.index(d))),))
            for d in range(x.rank)]
    axes.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY),), ((0, COPY),)))
    axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ((0, SUM),), ((0, SUM),)))
    return tuple(axes)


def flops(attrs, ins, outs):
    return 0  # data movement only


register_op(OpDef(OpType.TRANSPOSE, TransposeAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops))
