"""``reduce_sum`` and ``mean`` over ``axes`` (FlexFlow ``reduce_sum(input, axes, keepdims)`` and
``mean(input, dims, keepdims)``); the output keeps the input's dtype (mean needs a floating input).

Parallel axes:
- every dimension that is not reduced (cut alike in the output, at its position there);
- replicas pass through;
- partial sums pass through: both are linear (sum(a1 + a2) = sum(a1) + sum(a2), and mean likewise);
- for ``reduce_sum`` only, each reduced dimension is a reduction axis: the input is cut along it and
  the output holds partial sums. ``mean`` does not get these axes: a piece's mean divides by the
  piece's count, so the pieces would not add up to the mean (sum them with reduce_sum and scale).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.ir.op_type import REDUCE_OPS, OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape, normalize_axis


@dataclass(frozen=True, slots=True)
class ReduceAttrs:
    """``axes``: the dimensions reduced (at least one; may be negative); ``keepdims`` keeps them as size 1."""

    op_type: OpType
    axes: tuple[int, ...]
    keepdims: bool = False

    def __post_init__(self):
        if self.op_type not in REDUCE_OPS:
            raise ShapeError(f"{self.op_type} is not a reduction; valid: "
                             f"{', '.join(sorted(t.value for t in REDUCE_OPS))}")
        name = self.op_type.value
        if isinstance(self.axes, int) and not isinstance(self.axes, bool):
            object.__setattr__(self, "axes", (self.axes,))
        try:
            axes = tuple(self.axes)
        except TypeError:
            raise ShapeError(f"{name}: axes must be a sequence of ints, got {self.axes!r}") from None
        object.__setattr__(self, "axes", axes)
        if not axes:
            raise ShapeError(f"{name}: axes is empty; name at least one dimension to reduce")
        if any(not isinstance(a, int) or isinstance(a, bool) for a in axes):
            raise ShapeError(f"{name}: axes {list(axes)} must all be ints")
        if not isinstance(self.keepdims, bool):
            raise ShapeError(f"{name}: keepdims must be a bool, got {self.keepdims!r}")


def reduced_dims(attrs: ReduceAttrs, x: TensorShape) -> tuple[int, ...]:
    """The reduced dimensions in 0..rank-1, sorted; raises on out-of-range or repeated axes."""
    name = attrs.op_type.value
    dims = [normalize_axis(a, x.rank, f"{name}: axis") for a in attrs.axes]
    if len(set(dims)) != len(dims):
        raise ShapeError(f"{name}: axes {list(attrs.axes)} name a dimension twice for input {list(x.dims)} "
                         f"(normalized: {dims})")
    return tuple(sorted(dims))


def _out_position(attrs: ReduceAttrs, reduced: tuple[int, ...], d: int) -> int:
    return d if attrs.keepdims else d - sum(r < d for r in reduced)


def output_shapes(attrs: ReduceAttrs, inputs):
    (x,) = inputs
    reduced = reduced_dims(attrs, x)
    if attrs.op_type is OpType.MEAN and not x.dtype.is_floating:
        raise ShapeError(f"mean: input {x} has dtype {x.dtype.name}; mean needs a floating dtype (cast first)")
    dims = tuple(1 if d in reduced else s for d, s in enumerate(x.dims)
                 if attrs.keepdims or d not in reduced)
    return (TensorShape(dims, x.dtype),)


def parallel_axes(attrs: ReduceAttrs, inputs):
    (x,) = inputs
    reduced = reduced_dims(attrs, x)
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)),), ((0, shard(_out_position(attrs, reduced, d))),))
            for d in range(x.rank) if d not in reduced]
    axes.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY),), ((0, COPY),)))
    axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ((0, SUM),), ((0, SUM),)))
    if attrs.op_type is OpType.REDUCE_SUM:
        axes += [ParallelAxis(f"reduce{d}", AxisKind.REDUCTION, ((0, shard(d)),), ((0, SUM),)) for d in reduced]
    return tuple(axes)


def flops(attrs: ReduceAttrs, ins, outs):
    adds = numel(ins[0]) - numel(outs[0])
    return adds + (numel(outs[0]) if attrs.op_type is OpType.MEAN else 0)


def backward_flops(attrs: ReduceAttrs, ins, outs):
    return numel(ins[0]) if attrs.op_type is OpType.MEAN else 0  # broadcast (and scale) the gradient


for _t in sorted(REDUCE_OPS, key=lambda t: t.value):
    register_op(OpDef(_t, ReduceAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                      parallel_axes=parallel_axes, backward_flops=backward_flops))
