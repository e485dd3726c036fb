"""``Linear`` (FlexFlow ``dense``): y = act(x @ W + b), x of shape [..., in], W [in, out], b [out].

Parallel axes (FlexFlow Table 2 "matrix multiplication: sample, channel"; Unity §2.1):
- sample / attribute: every leading dimension of x; W and b are replicated across it;
- parameter (``out``): W and b cut along out; x is replicated (its copy degree);
- reduction (``in``): x and W cut along in; the output holds partial sums (sum degree);
  only without a fused activation (act(a + b) != act(a) + act(b));
- partial sums of x pass through (x @ W is linear in x), again only without activation.
The bias is added by the pieces at reduction coordinate 0 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import activation_flops, dim_kind, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class LinearAttrs:
    op_type: ClassVar[OpType] = OpType.LINEAR
    out_channels: int
    use_bias: bool = True
    activation: ActiMode = ActiMode.AC_MODE_NONE

    def __post_init__(self):
        if self.out_channels < 1:
            raise ShapeError(f"linear: out_channels must be >= 1, got {self.out_channels}")


def _check(attrs, inputs):
    (x,) = inputs
    if x.rank < 2:
        raise ShapeError(f"linear: input {x} has rank {x.rank}; valid ranks: 2 or more ([batch, ..., in])")


def output_shapes(attrs: LinearAttrs, inputs):
    _check(attrs, inputs)
    (x,) = inputs
    return (TensorShape(x.dims[:-1] + (attrs.out_channels,), x.dtype),)


def weight_shapes(attrs: LinearAttrs, inputs):
    _check(attrs, inputs)
    (x,) = inputs
    w = (TensorShape((x.dims[-1], attrs.out_channels), x.dtype),)
    return w + ((TensorShape((attrs.out_channels,), x.dtype),) if attrs.use_bias else ())


def weight_names(attrs: LinearAttrs):
    return ("kernel", "bias") if attrs.use_bias else ("kernel",)


def parallel_axes(attrs: LinearAttrs, inputs):
    (x,) = inputs
    r = x.rank
    b = attrs.use_bias

    def ops(x_slot, w_slot, b_slot):
        return ((0, x_slot), (1, w_slot)) + (((2, b_slot),) if b else ())

    axes = [ParallelAxis(f"dim{d}", dim_kind(d), ops(shard(d), COPY, COPY), ((0, shard(d)),)) for d in range(r - 1)]
    axes.append(ParallelAxis("out", AxisKind.PARAMETER, ops(COPY, shard(1), shard(0)), ((0, shard(r - 1)),)))
    if attrs.activation is ActiMode.AC_MODE_NONE:
        axes.append(ParallelAxis("in", AxisKind.REDUCTION, ops(shard(r - 1), shard(0), COPY), ((0, SUM),)))
        axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ops(SUM, COPY, COPY), ((0, SUM),)))
    return tuple(axes)


def piece_call(attrs: LinearAttrs, coords, degrees):
    if attrs.use_bias and (coords.get("in", 0) or coords.get("partial", 0)):
        return attrs, frozenset({2})  # this piece's partial sum must not add the bias again
    return attrs, frozenset()


def flops(attrs: LinearAttrs, ins, outs):
    x = ins[0]
    y = outs[0]
    return 2 * numel(y) * x.dims[-1] + (numel(y) if len(ins) > 2 else 0) + activation_flops(attrs.activation, y)


def backward_flops(attrs, ins, outs):
    y = outs[0]
    return 4 * numel(y) * ins[0].dims[-1] + (numel(y) if len(ins) > 2 else 0) + activation_flops(attrs.activation, y)


register_op(OpDef(OpType.LINEAR, LinearAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names, parallel_axes=parallel_axes,
                  backward_flops=backward_flops, piece_call=piece_call, piece_call_axes=("in", "partial")))
