"""``BiasAdd``: y = x + b, a learned bias b of shape (features,) = x's last dimension, broadcast over
the others (the attention bias of FlexFlow's ``add_bias_residual_layer_norm``).

Parallel axes: every leading dimension (sample / attribute; b replicated); the last dimension
(parameter: x, b and y cut alike, each piece adds its slice of b); ``replica``; and partial sums of
x (y = sum of the pieces' x, plus b once: the pieces at partial coordinate > 0 add zeros instead of
b, as Linear's bias does).

Entry point: ``BiasAddAttrs``; the rules register on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class BiasAddAttrs:
    """No attributes: the bias's length is the input's last dimension. Example: ``BiasAddAttrs()``."""

    op_type: ClassVar[OpType] = OpType.BIAS_ADD


def _check(x: TensorShape) -> None:
    if x.rank < 2:
        raise ShapeError(f"bias_add: input {x} has rank {x.rank}; valid ranks: 2 or more ([batch, ..., features])")
    if not x.dtype.is_floating:
        raise ShapeError(f"bias_add: input {x} has dtype {x.dtype.name}; valid: a floating type")


def output_shapes(attrs: BiasAddAttrs, inputs):
    (x,) = inputs
    _check(x)
    return (x,)


def weight_shapes(attrs: BiasAddAttrs, inputs):
    (x,) = inputs
    _check(x)
    return (TensorShape((x.dims[-1],), x.dtype),)


def weight_names(attrs: BiasAddAttrs):
    return ("bias",)


def parallel_axes(attrs: BiasAddAttrs, inputs):
    (x,) = inputs
    last = x.rank - 1
    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)), (1, COPY)), ((0, shard(d)),)) for d in range(last)]
    axes.append(ParallelAxis(f"dim{last}", AxisKind.PARAMETER, ((0, shard(last)), (1, shard(0))),
                             ((0, shard(last)),)))
    axes.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY), (1, COPY)), ((0, COPY),)))
    axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ((0, SUM), (1, COPY)), ((0, SUM),)))
    return tuple(axes)


def piece_call(attrs: BiasAddAttrs, coords, degrees):
    if coords.get("partial", 0):
        return attrs, frozenset({1})  # this piece's partial sum must not add the bias again
    return attrs, frozenset()


def flops(attrs: BiasAddAttrs, ins, outs):
    return numel(outs[0])


def backward_flops(attrs: BiasAddAttrs, ins, outs):
    return numel(outs[0])  # db: one sum over the leading dimensions; dx is dy itself


register_op(OpDef(OpType.BIAS_ADD, BiasAddAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names, parallel_axes=parallel_axes,
                  backward_flops=backward_flops, piece_call=piece_call, piece_call_axes=("partial",)))
