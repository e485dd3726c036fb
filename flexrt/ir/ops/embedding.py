"""``Embedding`` (and EmbeddingBag): integer indices -> rows of a [num_entries, out_channels] table;
aggregation none keeps one row per index, sum / avg reduce the last index dimension (a bag).

Shapes: indices [N, ...] (DT_INT32 or DT_INT64), weight "table" [num_entries, out_channels]
(DT_FLOAT); output (DT_FLOAT) [N, ..., out_channels] with ``AGGR_MODE_NONE``, and for
``AGGR_MODE_SUM`` / ``AGGR_MODE_AVG`` the last index dimension (the bag, of length L) is
reduced: [N, ..., L] -> [N, ..., out_channels].

Parallel axes (FlexFlow's embedding: sample and parameter):
- every index dimension but the bag (sample / attribute): the table is replicated;
- ``out`` (parameter): the table cut along out_channels, the output along its last dimension; the
  indices are replicated (their copy slot), so there is no separate replica axis (a replicated
  index tensor means parameter parallelism, as for linear);
- ``bag`` (reduction, sum aggregation only): the bag cut, each piece summing its part of it into a
  partial sum. Average aggregation cannot: a piece would divide by its own part's length.
- ``entries`` (reduction, every aggregation): the table cut along its rows (Megatron-LM's
  vocabulary-parallel embedding, DLRM's row-wise sharding), the indices replicated. A piece looks
  up the indices that fall in its rows and gives zeros for the others, so the pieces' outputs are
  partial sums of the whole (an average divides by the whole bag's length, which every piece
  sees). The indices' copies cannot tell this axis from ``out``, so the attributes hold its degree
  (``entries_degree``, as a part axis's), and ``piece_call`` tells a piece its row block
  (``entries_piece``). Unity's mapping DP leaves it out (``mapped=False``): its costs misjudge
  the packings the larger space leads it to (DLRM at 12 summit GPUs: a mapping estimated at 0.86
  of its simulation, 13% slower than without the axis); MCMC, which simulates every candidate,
  and explicit strategies (Megatron-LM's) use it.

Entry point: ``EmbeddingAttrs``; the rules register on import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.enums import AggrMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.ops.conv2d import check_int
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.serialize import OMIT_DEFAULT
from flexrt.ir.tensor_shape import TensorShape

_INDEX_TYPES = (DataType.DT_INT32, DataType.DT_INT64)


@dataclass(frozen=True, slots=True)
class EmbeddingAttrs:
    """Example: ``EmbeddingAttrs(10000, 64, AggrMode.AGGR_MODE_SUM)`` is a DLRM-style bag of 64-wide rows."""

    op_type: ClassVar[OpType] = OpType.EMBEDDING
    num_entries: int
    out_channels: int
    aggr: AggrMode = AggrMode.AGGR_MODE_NONE
    data_type: DataType = DataType.DT_FLOAT   # of the table and the output
    entries_degree: int = dataclasses.field(default=1, metadata=OMIT_DEFAULT)  # the "entries" axis's degree
    entries_piece: int = dataclasses.field(default=0, metadata=OMIT_DEFAULT)   # a piece's row block (per piece)

    def __post_init__(self):
        if not isinstance(self.data_type, DataType) or not self.data_type.is_floating:
            raise ShapeError(f"embedding: data_type must be a floating DataType, got {self.data_type!r}")
        check_int("embedding", "num_entries", self.num_entries, 1)
        check_int("embedding", "out_channels", self.out_channels, 1)
        if not isinstance(self.aggr, AggrMode):
            raise ShapeError(f"embedding: aggr must be an AggrMode, got {self.aggr!r}")
        check_int("embedding", "entries_degree", self.entries_degree, 1)
        check_int("embedding", "entries_piece", self.entries_piece, 0)
        if self.num_entries % self.entries_degree or self.entries_piece >= self.entries_degree:
            raise ShapeError(f"embedding: entries_degree {self.entries_degree} must divide num_entries "
                             f"{self.num_entries} and entries_piece {self.entries_piece} be below it")


def _is_bag(attrs: EmbeddingAttrs) -> bool:
    return attrs.aggr is not AggrMode.AGGR_MODE_NONE


def _check(attrs: EmbeddingAttrs, inputs) -> TensorShape:
    (idx,) = inputs
    if idx.dtype not in _INDEX_TYPES:
        raise ShapeError(f"embedding: indices {idx} have dtype {idx.dtype.name}; valid: "
                         f"{', '.join(t.name for t in _INDEX_TYPES)}")
    if _is_bag(attrs) and idx.rank < 2:
        raise ShapeError(f"embedding: indices {idx} have rank {idx.rank}; valid ranks with aggregation "
                         f"{attrs.aggr.name}: 2 or more ([N, ..., bag length])")
    return idx


def output_shapes(attrs: EmbeddingAttrs, inputs):
    idx = _check(attrs, inputs)
    lead = idx.dims[:-1] if _is_bag(attrs) else idx.dims
    return (TensorShape(lead + (attrs.out_channels,), attrs.data_type),)


def weight_shapes(attrs: EmbeddingAttrs, inputs):
    _check(attrs, inputs)
    return (TensorShape((attrs.num_entries, attrs.out_channels), attrs.data_type),)


def weight_names(attrs: EmbeddingAttrs):
    return ("table",)


def parallel_axes(attrs: EmbeddingAttrs, inputs):
    (idx,) = inputs
    out_rank = idx.rank if _is_bag(attrs) else idx.rank + 1
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)), (1, COPY)), ((0, shard(d)),))
            for d in range(out_rank - 1)]
    axes.append(ParallelAxis("out", AxisKind.PARAMETER, ((0, COPY), (1, shard(1))), ((0, shard(out_rank - 1)),)))
    if attrs.aggr is AggrMode.AGGR_MODE_SUM:
        axes.append(ParallelAxis("bag", AxisKind.REDUCTION, ((0, shard(idx.rank - 1)), (1, COPY)), ((0, SUM),)))
    axes.append(ParallelAxis("entries", AxisKind.REDUCTION, ((0, COPY), (1, shard(0))), ((0, SUM),),
                             degree_attr="entries_degree", mapped=False))
    return tuple(axes)


def piece_call(attrs: EmbeddingAttrs, coords, degrees):
    """A piece cut along ``entries`` learns which row block of the table it holds."""
    k = coords.get("entries", 0)
    return (dataclasses.replace(attrs, entries_piece=k) if k != attrs.entries_piece else attrs), frozenset()


def flops(attrs: EmbeddingAttrs, ins, outs):
    # gathering moves rows and computes nothing; a bag adds its rows (and average divides once)
    if not _is_bag(attrs):
        return 0
    y = outs[0]
    adds = numel(ins[0]) * y.dims[-1] - numel(y)
    return adds + (numel(y) if attrs.aggr is AggrMode.AGGR_MODE_AVG else 0)


def backward_flops(attrs: EmbeddingAttrs, ins, outs):
    # scatter-add of the output gradient into the table: one addition per gathered element
    return numel(ins[0]) * outs[0].dims[-1]


register_op(OpDef(OpType.EMBEDDING, EmbeddingAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names, parallel_axes=parallel_axes,
                  backward_flops=backward_flops, piece_call=piece_call, piece_call_axes=("entries",)))
