"""``Conv2D``: NCHW convolution with groups; weights kernel [out, in/groups, kh, kw] and bias [out].

y = act(conv(x, kernel) + bias) with x [N, C, H, W] and y [N, out, Ho, Wo],
Ho = (H + 2 * padding_h - kernel_h) // stride_h + 1 (likewise Wo).

Parallel axes (FlexFlow Table 2 "2D convolution: sample, attribute (height, width), parameter
(channel)"; Unity §2.1 for reduction and replica):
- ``sample``: x and y cut along N; kernel and bias replicated;
- ``height`` / ``width`` (attribute): y cut along Ho (Wo); each piece reads the input window its
  output rows need (``halo``), which may reach into the padding; the piece then runs without
  padding on that dimension (``piece_call``), the halo already holding the padding's zeros;
- ``out`` (parameter): kernel and bias cut along out, y along channels. With groups == 1 x is
  replicated (its copy slot). With groups > 1 a piece owns whole groups, so x is cut along its
  channels too, and the piece runs with groups / degree; the degree must divide groups
  (``check_degrees``), e.g. ResNeXt's C = out = 128, groups = 32 takes degrees 1, 2, 4, 8, 16, 32;
- ``in`` (reduction): x cut along C, kernel along its in-channel dimension, y holds partial sums;
  only with groups == 1 and without a fused activation (act(a + b) != act(a) + act(b));
- ``partial``: partial sums of x pass through (the convolution is linear in x; zero padding of a
  partial sum is a partial sum of the padding), again only without activation;
- ``replica``: copies in, copies out; only when ``out`` does not already use x's copy slot
  (groups > 1), for the reason linear has no replica axis.
The bias is added by the pieces at coordinate 0 of ``in`` and ``partial`` only.

Entry point: ``Conv2DAttrs``; the rules register on import. ``window_output_size`` and
``halo`` (with ``window_halo``) are shared with ``pool2d``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import activation_flops, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


def check_int(op: str, name: str, value, minimum: int) -> None:
    """Raise a ShapeError unless ``value`` is an int (not a bool) >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ShapeError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")


def window_output_size(op: str, what: str, size: int, kernel: int, stride: int, padding: int) -> int:
    """Number of window positions along one dimension; ShapeError if the window does not fit."""
    if size + 2 * padding < kernel:
        raise ShapeError(f"{op}: kernel {what} {kernel} is larger than the padded input {what} "
                         f"{size} + 2 * {padding} = {size + 2 * padding}; valid: kernel <= padded size")
    return (size + 2 * padding - kernel) // stride + 1


def window_halo(kernel: int, stride: int, padding: int, out_range: tuple[int, int]) -> tuple[int, int]:
    """The input rows [start, stop) that output rows ``out_range`` read (may leave the tensor: padding)."""
    lo, hi = out_range
    return lo * stride - padding, (hi - 1) * stride - padding + kernel


@dataclass(frozen=True, slots=True)
class Conv2DAttrs:
    """Example: ``Conv2DAttrs(64, 3, 3, padding_h=1, padding_w=1)`` keeps H and W with stride 1."""

    op_type: ClassVar[OpType] = OpType.CONV2D
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    padding_h: int = 0
    padding_w: int = 0
    groups: int = 1
    use_bias: bool = True
    activation: ActiMode = ActiMode.AC_MODE_NONE

    def __post_init__(self):
        for name, minimum in (("out_channels", 1), ("kernel_h", 1), ("kernel_w", 1), ("stride_h", 1),
                              ("stride_w", 1), ("padding_h", 0), ("padding_w", 0), ("groups", 1)):
            check_int("conv2d", name, getattr(self, name), minimum)
        if self.out_channels % self.groups:
            raise ShapeError(f"conv2d: groups {self.groups} does not divide out_channels {self.out_channels}; "
                             f"groups must divide both the input channels and out_channels")
        if not isinstance(self.activation, ActiMode):
            raise ShapeError(f"conv2d: activation must be an ActiMode, got {self.activation!r}")


def check_nchw(op: str, x: TensorShape) -> None:
    """A convolution or pooling input: rank 4 ([N, C, H, W]) and a floating type."""
    if x.rank != 4:
        raise ShapeError(f"{op}: input {x} has rank {x.rank}; valid ranks: 4 ([N, C, H, W])")
    if not x.dtype.is_floating:
        raise ShapeError(f"{op}: input {x} has dtype {x.dtype.name}; valid: a floating type")


def _check(attrs: Conv2DAttrs, inputs) -> tuple[int, int]:
    """Validate the input; returns (Ho, Wo)."""
    (x,) = inputs
    check_nchw("conv2d", x)
    _, c, h, w = x.dims
    if c % attrs.groups:
        raise ShapeError(f"conv2d: groups {attrs.groups} does not divide the input channels {c} (input {x}); "
                         f"valid groups: divisors of both {c} and out_channels {attrs.out_channels}")
    ho = window_output_size("conv2d", "height", h, attrs.kernel_h, attrs.stride_h, attrs.padding_h)
    wo = window_output_size("conv2d", "width", w, attrs.kernel_w, attrs.stride_w, attrs.padding_w)
    return ho, wo


def output_shapes(attrs: Conv2DAttrs, inputs):
    ho, wo = _check(attrs, inputs)
    x = inputs[0]
    return (TensorShape((x.dims[0], attrs.out_channels, ho, wo), x.dtype),)


def weight_shapes(attrs: Conv2DAttrs, inputs):
    _check(attrs, inputs)
    x = inputs[0]
    k = TensorShape((attrs.out_channels, x.dims[1] // attrs.groups, attrs.kernel_h, attrs.kernel_w), x.dtype)
    return (k,) + ((TensorShape((attrs.out_channels,), x.dtype),) if attrs.use_bias else ())


def weight_names(attrs: Conv2DAttrs):
    return ("kernel", "bias") if attrs.use_bias else ("kernel",)


def check_degrees(attrs: Conv2DAttrs, inputs, degrees):
    d = degrees.get("out", 1)
    if attrs.groups > 1 and attrs.groups % d:
        valid = [k for k in range(1, attrs.groups + 1) if attrs.groups % k == 0]
        raise ShapeError(f"out-channel degree {d} does not divide groups {attrs.groups} (a piece must own whole "
                         f"groups); valid degrees: {', '.join(map(str, valid))}")


def parallel_axes(attrs: Conv2DAttrs, inputs):
    (x,) = inputs
    b = attrs.use_bias

    def ops(x_slot, k_slot, b_slot):
        return ((0, x_slot), (1, k_slot)) + (((2, b_slot),) if b else ())

    axes = [
        ParallelAxis("sample", AxisKind.SAMPLE, ops(shard(0), COPY, COPY), ((0, shard(0)),)),
        ParallelAxis("height", AxisKind.ATTRIBUTE, ops(shard(2, halo=True), COPY, COPY), ((0, shard(2)),)),
        ParallelAxis("width", AxisKind.ATTRIBUTE, ops(shard(3, halo=True), COPY, COPY), ((0, shard(3)),)),
    ]
    if attrs.groups == 1:
        axes.append(ParallelAxis("out", AxisKind.PARAMETER, ops(COPY, shard(0), shard(0)), ((0, shard(1)),)))
    else:
        axes.append(ParallelAxis("out", AxisKind.PARAMETER, ops(shard(1), shard(0), shard(0)), ((0, shard(1)),)))
    if attrs.activation is ActiMode.AC_MODE_NONE:
        if attrs.groups == 1:
            axes.append(ParallelAxis("in", AxisKind.REDUCTION, ops(shard(1), shard(1), COPY), ((0, SUM),)))
        axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ops(SUM, COPY, COPY), ((0, SUM),)))
    if attrs.groups > 1:
        axes.append(ParallelAxis("replica", AxisKind.REPLICA, ops(COPY, COPY, COPY), ((0, COPY),)))
    return tuple(axes)


def halo(attrs, operand: int, dim: int, input_shapes, out_range):
    """Input rows (columns) that output rows ``out_range`` read, for conv2d and pool2d alike."""
    if operand != 0 or dim not in (2, 3):
        raise ShapeError(f"{attrs.op_type.value}: only input 0 has a halo, along dims 2 and 3; asked for operand "
                         f"{operand} dim {dim}")
    if dim == 2:
        return window_halo(attrs.kernel_h, attrs.stride_h, attrs.padding_h, out_range)
    return window_halo(attrs.kernel_w, attrs.stride_w, attrs.padding_w, out_range)


def piece_call(attrs: Conv2DAttrs, coords, degrees):
    changes = {}
    if degrees.get("height", 1) > 1:
        changes["padding_h"] = 0  # the halo holds the padding
    if degrees.get("width", 1) > 1:
        changes["padding_w"] = 0
    d_out = degrees.get("out", 1)
    if d_out > 1:
        changes["out_channels"] = attrs.out_channels // d_out
        changes["groups"] = attrs.groups // d_out if attrs.groups > 1 else 1
    zeroed = frozenset()
    if attrs.use_bias and (coords.get("in", 0) or coords.get("partial", 0)):
        zeroed = frozenset({2})  # this piece's partial sum must not add the bias again
    return (dataclasses.replace(attrs, **changes) if changes else attrs), zeroed


def _macs(ins, outs) -> int:
    """Multiply-adds of the convolution: one per output element and kernel element it reads."""
    k = ins[1]
    return numel(outs[0]) * k.dims[1] * k.dims[2] * k.dims[3]


def flops(attrs: Conv2DAttrs, ins, outs):
    y = outs[0]
    return 2 * _macs(ins, outs) + (numel(y) if len(ins) > 2 else 0) + activation_flops(attrs.activation, y)


def backward_flops(attrs: Conv2DAttrs, ins, outs):
    # input gradient and kernel gradient each cost as much as the forward convolution
    y = outs[0]
    return 4 * _macs(ins, outs) + (numel(y) if len(ins) > 2 else 0) + activation_flops(attrs.activation, y)


register_op(OpDef(OpType.CONV2D, Conv2DAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names, parallel_axes=parallel_axes,
                  backward_flops=backward_flops, halo=halo, piece_call=piece_call, piece_call_axes=("in", "partial"),
                  check_degrees=check_degrees))
