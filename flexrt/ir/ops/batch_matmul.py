"""``BatchMatmul``: A [..., m, k] x B [..., k, n] -> [..., m, n] (FlexFlow ``batch_matmul``).

Both operands have rank >= 3 (as in FlexFlow), the same batch dimensions (no broadcasting) and the
same dtype. ``a_seq_length_dim`` / ``b_seq_length_dim`` are FlexFlow's hints for incremental
decoding; they are kept as attributes and do not change the result.

Parallel axes (A is operand 0, B operand 1):
- every batch dimension: A, B and the output cut alike;
- ``m``: A cut along m, B replicated (its copy slot), output cut along m;
- ``n``: A replicated, B cut along n, output cut along n;
- ``k`` (reduction): A and B cut along k, the output holds partial sums;
- ``partial_a`` / ``partial_b``: partial sums of one operand pass through (the product is linear in
  each operand: (A1 + A2) B = A1 B + A2 B); the other operand is replicated. Both at once is valid
  too: (A1 + A2)(B1 + B2) is the sum of the four products.
A and B's copy slots are taken by these axes (A's by ``n`` and ``partial_b``, B's by ``m`` and
``partial_a``), so there is no separate replica axis: combine replicas before a batch matmul.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class BatchMatmulAttrs:
    op_type: ClassVar[OpType] = OpType.BATCH_MATMUL
    a_seq_length_dim: Optional[int] = None
    b_seq_length_dim: Optional[int] = None

    def __post_init__(self):
        for name in ("a_seq_length_dim", "b_seq_length_dim"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise ShapeError(f"batch_matmul: {name} must be an int or None, got {v!r}")


def _check(inputs) -> None:
    a, b = inputs
    for what, t in (("A", a), ("B", b)):
        if t.rank < 3:
            raise ShapeError(f"batch_matmul: operand {what} {t} has rank {t.rank}; valid ranks: 3 or more "
                             f"([batch..., rows, cols])")
    if a.rank != b.rank or a.dims[:-2] != b.dims[:-2]:
        raise ShapeError(f"batch_matmul: batch dimensions differ: A {list(a.dims)} has {list(a.dims[:-2])}, "
                         f"B {list(b.dims)} has {list(b.dims[:-2])}; they must be equal (no broadcasting)")
    if a.dims[-1] != b.dims[-2]:
        raise ShapeError(f"batch_matmul: A {list(a.dims)} has k = {a.dims[-1]} columns but B {list(b.dims)} has "
                         f"{b.dims[-2]} rows; A [..., m, k] x B [..., k, n] needs them equal")
    if a.dtype != b.dtype:
        raise ShapeError(f"batch_matmul: operand dtypes differ ({a.dtype.name} vs {b.dtype.name})")


def output_shapes(attrs: BatchMatmulAttrs, inputs):
    _check(inputs)
    a, b = inputs
    return (TensorShape(a.dims[:-1] + (b.dims[-1],), a.dtype),)


def parallel_axes(attrs: BatchMatmulAttrs, inputs):
    _check(inputs)
    r = inputs[0].rank
    m, k = r - 2, r - 1
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)), (1, shard(d))), ((0, shard(d)),))
            for d in range(r - 2)]
    axes += [
        ParallelAxis("m", AxisKind.ATTRIBUTE, ((0, shard(m)), (1, COPY)), ((0, shard(m)),)),
        ParallelAxis("n", AxisKind.ATTRIBUTE, ((0, COPY), (1, shard(k))), ((0, shard(k)),)),
        ParallelAxis("k", AxisKind.REDUCTION, ((0, shard(k)), (1, shard(m))), ((0, SUM),)),
        ParallelAxis("partial_a", AxisKind.REDUCTION, ((0, SUM), (1, COPY)), ((0, SUM),)),
        ParallelAxis("partial_b", AxisKind.REDUCTION, ((0, COPY), (1, SUM)), ((0, SUM),)),
    ]
    return tuple(axes)


def flops(attrs, ins, outs):
    return 2 * numel(outs[0]) * ins[0].dims[-1]


def backward_flops(attrs, ins, outs):
    return 2 * flops(attrs, ins, outs)  # dA = dY B^T and dB = A^T dY


register_op(OpDef(OpType.BATCH_MATMUL, BatchMatmulAttrs, output_shapes=output_shapes, flops=flops, num_inputs=2,
                  parallel_axes=parallel_axes, backward_flops=backward_flops))
