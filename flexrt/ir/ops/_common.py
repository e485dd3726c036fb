"""Small helpers shared by the operator modules (axis builders, element counts)."""

from __future__ import annotations

import math
from typing import Sequence

from flexrt.errors import ShapeError
from flexrt.ir.registry import COPY, SUM, AxisKind, ParallelAxis, shard
from flexrt.ir.tensor_shape import TensorShape


def numel(shape: TensorShape) -> int:
    return math.prod(shape.dims)


def sum_numel(shapes: Sequence[TensorShape]) -> int:
    return sum(numel(s) for s in shapes)


def dim_kind(d: int) -> AxisKind:
    """Dimension 0 is the sample dimension; other activation dimensions are attributes."""
    return AxisKind.SAMPLE if d == 0 else AxisKind.ATTRIBUTE


def elementwise_axes(rank: int, n_operands: int, n_outputs: int = 1, dims: Sequence[int] | None = None,
                     linear: bool = False) -> tuple[ParallelAxis, ...]:
    """Axes of an operator that maps each position of same-shaped operands to the same position of
    its outputs: one axis per dimension in ``dims``, a replica axis (copies in, copies out) and, when
    the operator is linear in all its operands, a partial-sum axis (partial sums in, partial sums out)."""
    dims = range(rank) if dims is None else dims
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), tuple((i, shard(d)) for i in range(n_operands)),
                         tuple((k, shard(d)) for k in range(n_outputs))) for d in dims]
    axes.append(ParallelAxis("replica", AxisKind.REPLICA, tuple((i, COPY) for i in range(n_operands)),
                             tuple((k, COPY) for k in range(n_outputs))))
    if linear:
        axes.append(ParallelAxis("partial", AxisKind.REDUCTION, tuple((i, SUM) for i in range(n_operands)),
                                 tuple((k, SUM) for k in range(n_outputs))))
    return tuple(axes)


def check_rank(op: str, shape: TensorShape, ranks: Sequence[int], what: str = "input") -> None:
    if shape.rank not in ranks:
        raise ShapeError(f"{op}: {what} {shape} has rank {shape.rank}; valid ranks: "
                         f"{', '.join(map(str, ranks))}")


def activation_flops(activation, out: TensorShape) -> int:
    from flexrt.ir.enums import ActiMode
    return 0 if activation is ActiMode.AC_MODE_NONE else numel(out)
