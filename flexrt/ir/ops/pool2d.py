"""``Pool2D``: NCHW max or average pooling (average counts padding, as cuDNN in FlexFlow).

y = act(pool(x)) with x [N, C, H, W] and y [N, C, Ho, Wo], Ho = (H + 2 * padding_h - kernel_h) //
stride_h + 1. Average pooling divides by kernel_h * kernel_w everywhere, padding included
(cuDNN's CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING); max pooling never selects padding. Padding
is at most half the kernel (as in cuDNN and PyTorch), so no window lies wholly in the padding.

Parallel axes (FlexFlow Table 2 "2D pooling: sample, attribute (channel, height, width)"):
- ``sample`` and ``channel``: x and y cut along N (C);
- ``height`` / ``width``: y cut along Ho (Wo), each piece reading its input window (``halo``, the
  cells outside the tensor filled with ``halo_fill``: -inf for max, 0 for average) and running
  without padding on that dimension (``piece_call``);
- ``partial``: partial sums pass through average pooling without activation (it is linear);
- ``replica``: copies in, copies out.

Entry point: ``Pool2DAttrs``; the rules register on import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.enums import ActiMode, PoolType
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import activation_flops, numel
from flexrt.ir.ops.conv2d import check_int, check_nchw, halo, window_output_size
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class Pool2DAttrs:
    """Example: ``Pool2DAttrs(3, 3, 2, 2, 1, 1)`` is ResNet's stem max pooling."""

    op_type: ClassVar[OpType] = OpType.POOL2D
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    padding_h: int = 0
    padding_w: int = 0
    pool_type: PoolType = PoolType.POOL_MAX
    activation: ActiMode = ActiMode.AC_MODE_NONE

    def __post_init__(self):
        for name, minimum in (("kernel_h", 1), ("kernel_w", 1), ("stride_h", 1), ("stride_w", 1),
                              ("padding_h", 0), ("padding_w", 0)):
            check_int("pool2d", name, getattr(self, name), minimum)
        for p, k, what in ((self.padding_h, self.kernel_h, "h"), (self.padding_w, self.kernel_w, "w")):
            if p > k // 2:
                raise ShapeError(f"pool2d: padding_{what} {p} is more than half of kernel_{what} {k}; "
                                 f"valid: 0..{k // 2}")
        if not isinstance(self.pool_type, PoolType):
            raise ShapeError(f"pool2d: pool_type must be a PoolType, got {self.pool_type!r}")
        if not isinstance(self.activation, ActiMode):
            raise ShapeError(f"pool2d: activation must be an ActiMode, got {self.activation!r}")


def output_shapes(attrs: Pool2DAttrs, inputs):
    (x,) = inputs
    check_nchw("pool2d", x)
    n, c, h, w = x.dims
    ho = window_output_size("pool2d", "height", h, attrs.kernel_h, attrs.stride_h, attrs.padding_h)
    wo = window_output_size("pool2d", "width", w, attrs.kernel_w, attrs.stride_w, attrs.padding_w)
    return (TensorShape((n, c, ho, wo), x.dtype),)


def _linear(attrs: Pool2DAttrs) -> bool:
    return attrs.pool_type is PoolType.POOL_AVG and attrs.activation is ActiMode.AC_MODE_NONE


def parallel_axes(attrs: Pool2DAttrs, inputs):
    axes = [
        ParallelAxis("sample", AxisKind.SAMPLE, ((0, shard(0)),), ((0, shard(0)),)),
        ParallelAxis("channel", AxisKind.ATTRIBUTE, ((0, shard(1)),), ((0, shard(1)),)),
        ParallelAxis("height", AxisKind.ATTRIBUTE, ((0, shard(2, halo=True)),), ((0, shard(2)),)),
        ParallelAxis("width", AxisKind.ATTRIBUTE, ((0, shard(3, halo=True)),), ((0, shard(3)),)),
        ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY),), ((0, COPY),)),
    ]
    if _linear(attrs):
        axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ((0, SUM),), ((0, SUM),)))
    return tuple(axes)


def halo_fill(attrs: Pool2DAttrs) -> float:
    return float("-inf") if attrs.pool_type is PoolType.POOL_MAX else 0.0


def piece_call(attrs: Pool2DAttrs, coords, degrees):
    changes = {}
    if degrees.get("height", 1) > 1:
        changes["padding_h"] = 0  # the halo holds the padding
    if degrees.get("width", 1) > 1:
        changes["padding_w"] = 0
    return (dataclasses.replace(attrs, **changes) if changes else attrs), frozenset()


def flops(attrs: Pool2DAttrs, ins, outs):
    y = outs[0]
    window = attrs.kernel_h * attrs.kernel_w  # a comparison or an addition per window element
    avg = numel(y) if attrs.pool_type is PoolType.POOL_AVG else 0
    return numel(y) * window + avg + activation_flops(attrs.activation, y)


def backward_flops(attrs: Pool2DAttrs, ins, outs):
    y = outs[0]
    return numel(y) * attrs.kernel_h * attrs.kernel_w + activation_flops(attrs.activation, y)


register_op(OpDef(OpType.POOL2D, Pool2DAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=backward_flops, halo=halo, halo_fill=halo_fill,
                  piece_call=piece_call, piece_call_axes=()))
