"""``Flat``: [N, d1, ..., dk] -> [N, d1*...*dk] (every dimension after the first folded into one;
rank >= 2).

Parallel axes: the sample dimension; dimension 1 (a piece [N, d1/p, d2, ...] folds into the
contiguous block [N, d1*...*dk/p] of the output, so the output is cut along dimension 1 with the same
degree); replicas pass through, and partial sums pass through (flattening is linear). Dimensions 2
and later are not axes: their pieces interleave in the output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class FlatAttrs:
    op_type: ClassVar[OpType] = OpType.FLAT


def _check(x: TensorShape) -> None:
    if x.rank < 2:
        raise ShapeError(f"flat: input {x} has rank {x.rank}; valid ranks: 2 or more ([N, d1, ..., dk])")


def output_shapes(attrs: FlatAttrs, inputs):
    (x,) = inputs
    _check(x)
    return (TensorShape((x.dims[0], math.prod(x.dims[1:])), x.dtype),)


def parallel_axes(attrs: FlatAttrs, inputs):
    (x,) = inputs
    _check(x)
    return elementwise_axes(2, 1, linear=True)


def flops(attrs, ins, outs):
    return 0  # a view; no arithmetic


register_op(OpDef(OpType.FLAT, FlatAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops))
