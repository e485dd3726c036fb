"""``Gather`` with torch.gather semantics along ``dim``: the index has the input's rank and an
integer dtype, index.size(d) <= input.size(d) for every d != dim, and the output has the index's
shape and the input's dtype. For dim = 0 and rank 2: out[i][j] = input[index[i][j]][j].

Parallel axes (input is operand 0, index operand 1):
- every dimension d != dim where index and input have the same size: both cut alike, output too
  (where the index is smaller than the input, the pieces would not line up);
- ``index``: the index (and output) cut along ``dim``; the input replicated (each piece may read any
  position along ``dim``);
- replicas pass through.
Gather is linear in the input ((a1 + a2)[idx] = a1[idx] + a2[idx]), but a partial-sum axis would
need the index's copy slot, and the ``index`` and replica axes already share the input's: with all
three, the replica axis would have no slot of its own to read its degree from. ``index`` is kept
(with dim = 0 it is the sample axis of an embedding-style lookup); reduce partial sums first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind
from flexrt.ir.registry import COPY, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape, normalize_axis

_INDEX_TYPES = (DataType.DT_INT32, DataType.DT_INT64)


@dataclass(frozen=True, slots=True)
class GatherAttrs:
    """``dim`` may be negative."""

    op_type: ClassVar[OpType] = OpType.GATHER
    dim: int

    def __post_init__(self):
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise ShapeError(f"gather: dim must be an int, got {self.dim!r}")


def gather_dim(attrs: GatherAttrs, inputs) -> int:
    """``dim`` in 0..rank-1, after checking the index against the input."""
    x, index = inputs
    if index.rank != x.rank:
        raise ShapeError(f"gather: index {index} has rank {index.rank} but input {x} has rank {x.rank}; "
                         f"they must be equal")
    dim = normalize_axis(attrs.dim, x.rank, "gather: dim")
    if index.dtype not in _INDEX_TYPES:
        raise ShapeError(f"gather: index {index} has dtype {index.dtype.name}; valid index dtypes: "
                         f"{', '.join(t.name for t in _INDEX_TYPES)}")
    for d, (a, b) in enumerate(zip(x.dims, index.dims)):
        if d != dim and b > a:
            raise ShapeError(f"gather: index {list(index.dims)} is larger than input {list(x.dims)} in "
                             f"dimension {d} ({b} > {a}); outside dim {dim} it may not exceed the input")
    return dim


def output_shapes(attrs: GatherAttrs, inputs):
    gather_dim(attrs, inputs)
    x, index = inputs
    return (TensorShape(index.dims, x.dtype),)


def parallel_axes(attrs: GatherAttrs, inputs):
    dim = gather_dim(attrs, inputs)
    x, index = inputs
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)), (1, shard(d))), ((0, shard(d)),))
            for d in range(x.rank) if d != dim and x.dims[d] == index.dims[d]]
    axes += [
        ParallelAxis("index", dim_kind(dim), ((0, COPY), (1, shard(dim))), ((0, shard(dim)),)),
        ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY), (1, COPY)), ((0, COPY),)),
    ]
    return tuple(axes)


def flops(attrs, ins, outs):
    return 0  # indexed reads only


register_op(OpDef(OpType.GATHER, GatherAttrs, output_shapes=output_shapes, flops=flops, num_inputs=2,
                  parallel_axes=parallel_axes, backward_flops=flops))
