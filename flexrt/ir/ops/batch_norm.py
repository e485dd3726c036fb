"""``BatchNorm``: normalizes NCHW (or [N, C]) over every dimension but channel 1; weights scale, bias [C].

Training mode: y = relu?((x - mean) / sqrt(var + eps) * scale + bias), with the batch statistics
mean and (biased) var of each channel taken over every dimension but 1. ``momentum`` only updates
the running statistics, which the forward result does not use.

Parallel axes: ``channel`` (attribute: x, scale, bias and y cut along the channels), ``replica``,
and ``sample`` with ``exact=False``: a piece normalizes with the statistics of its own slice of the
batch, as FlexFlow's data-parallel BatchNorm (per-device cuDNN statistics) and PyTorch DDP without
SyncBatchNorm do; without it data parallelism of every CNN with BatchNorm would funnel each
BatchNorm through one device. Height and width cannot be cut (their statistics are not even
per-sample). Exact sample-parallel statistics (SyncBatchNorm: an AllReduce of 2 x C sums) are
left to the runtime issue.

Entry point: ``BatchNormAttrs``; the rules register on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import numel
from flexrt.ir.registry import COPY, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

# FLOPs per element: mean (1), variance (3: subtract, square, add), normalize (2), scale and shift (2).
_FORWARD_FLOPS_PER_ELEMENT = 8
# Backward: gradients of scale and bias (4) and of x through the statistics (8).
_BACKWARD_FLOPS_PER_ELEMENT = 12


@dataclass(frozen=True, slots=True)
class BatchNormAttrs:
    """Example: ``BatchNormAttrs(relu=False)`` is a plain training-mode BatchNorm."""

    op_type: ClassVar[OpType] = OpType.BATCH_NORM
    relu: bool = True
    eps: float = 1e-5
    momentum: float = 0.1

    def __post_init__(self):
        if not isinstance(self.relu, bool):
            raise ShapeError(f"batch_norm: relu must be a bool, got {self.relu!r}")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or not self.eps > 0:
            raise ShapeError(f"batch_norm: eps must be a number > 0, got {self.eps!r}")
        if (not isinstance(self.momentum, (int, float)) or isinstance(self.momentum, bool)
                or not 0.0 <= self.momentum <= 1.0):
            raise ShapeError(f"batch_norm: momentum must be a number in [0, 1], got {self.momentum!r}")
        object.__setattr__(self, "eps", float(self.eps))
        object.__setattr__(self, "momentum", float(self.momentum))


def _check(inputs) -> TensorShape:
    (x,) = inputs
    if x.rank not in (2, 4):
        raise ShapeError(f"batch_norm: input {x} has rank {x.rank}; valid ranks: 2 ([N, C]), 4 ([N, C, H, W])")
    if not x.dtype.is_floating:
        raise ShapeError(f"batch_norm: input {x} has dtype {x.dtype.name}; valid: a floating type")
    return x


def output_shapes(attrs: BatchNormAttrs, inputs):
    return (_check(inputs),)


def weight_shapes(attrs: BatchNormAttrs, inputs):
    x = _check(inputs)
    c = TensorShape((x.dims[1],), x.dtype)
    return (c, c)


def weight_names(attrs: BatchNormAttrs):
    return ("scale", "bias")


def parallel_axes(attrs: BatchNormAttrs, inputs):
    return (
        ParallelAxis("sample", AxisKind.SAMPLE, ((0, shard(0)), (1, COPY), (2, COPY)), ((0, shard(0)),),
                     exact=False),
        ParallelAxis("channel", AxisKind.ATTRIBUTE, ((0, shard(1)), (1, shard(0)), (2, shard(0))), ((0, shard(1)),)),
        ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY), (1, COPY), (2, COPY)), ((0, COPY),)),
    )


def flops(attrs: BatchNormAttrs, ins, outs):
    y = outs[0]
    return _FORWARD_FLOPS_PER_ELEMENT * numel(y) + (numel(y) if attrs.relu else 0)


def backward_flops(attrs: BatchNormAttrs, ins, outs):
    y = outs[0]
    return _BACKWARD_FLOPS_PER_ELEMENT * numel(y) + (numel(y) if attrs.relu else 0)


def extra_memory_bytes(attrs: BatchNormAttrs, ins, outs) -> int:
    """The saved mean and inverse standard deviation of each channel of this piece."""
    x = ins[0]
    return 2 * x.dims[1] * x.dtype.size_bytes


register_op(OpDef(OpType.BATCH_NORM, BatchNormAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names,
                  weight_inits=lambda attrs: ("one", "zero"), parallel_axes=parallel_axes,
                  backward_flops=backward_flops, extra_memory_bytes=extra_memory_bytes))
