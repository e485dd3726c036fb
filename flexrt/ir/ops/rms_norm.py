"""``RMSNorm`` (FlexFlow's RMSNorm, Zhang and Sennrich 2019): scales the last dimension by its root mean square.

y = x / sqrt(mean(x^2 over the last dimension) + eps) * gamma, gamma a weight of shape (dim,).
FlexFlow's ``dim`` is the size of the normalized (last) dimension, which is gamma's length; its
kernel always normalizes the last dimension, so ``dim`` must equal it.

Parallel axes: every dimension but the last (sample / attribute; gamma replicated) and ``replica``.
The last dimension cannot be cut: each piece would use the root mean square of its own slice; nor
do partial sums pass through (the operator is not linear).

Entry point: ``RMSNormAttrs``; the rules register on import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

# FLOPs per element: square and sum (2), scale by the inverse root mean square (1), gamma (1).
_FORWARD_FLOPS_PER_ELEMENT = 4
# dx = r * (dy * gamma) - x * r^3 * mean(dy * gamma * x), dgamma = sum(dy * x * r).
_BACKWARD_FLOPS_PER_ELEMENT = 8


@dataclass(frozen=True, slots=True)
class RMSNormAttrs:
    """``eps`` is added to the mean square; ``dim`` is the size of the last dimension (gamma's length).

    Example: ``RMSNormAttrs(1e-6, 4096)`` normalizes a [batch, seq, 4096] activation (LLaMA's RMSNorm).
    """

    op_type: ClassVar[OpType] = OpType.RMS_NORM
    eps: float
    dim: int

    def __post_init__(self):
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or not self.eps > 0:
            raise ShapeError(f"rms_norm: eps must be a number > 0, got {self.eps!r}")
        object.__setattr__(self, "eps", float(self.eps))
        if not isinstance(self.dim, int) or isinstance(self.dim, bool) or self.dim < 1:
            raise ShapeError(f"rms_norm: dim must be an int >= 1 (the size of the last dimension), got {self.dim!r}")


def _check(attrs: RMSNormAttrs, x: TensorShape) -> None:
    if not x.dtype.is_floating:
        raise ShapeError(f"rms_norm: input {x} has dtype {x.dtype.name}; valid: a floating type")
    if x.dims[-1] != attrs.dim:
        raise ShapeError(f"rms_norm: dim {attrs.dim} must equal the size of the last (normalized) dimension of "
                         f"input {x}, which is {x.dims[-1]}; valid: dim={x.dims[-1]}")


def output_shapes(attrs: RMSNormAttrs, inputs):
    (x,) = inputs
    _check(attrs, x)
    return (x,)


def weight_shapes(attrs: RMSNormAttrs, inputs):
    (x,) = inputs
    _check(attrs, x)
    return (TensorShape((attrs.dim,), x.dtype),)


def weight_names(attrs: RMSNormAttrs):
    return ("gamma",)


def parallel_axes(attrs: RMSNormAttrs, inputs):
    (x,) = inputs
    gamma = ((1, COPY),)
    result = [ParallelAxis(f"dim{d}", dim_kind(d), ((0, shard(d)),) + gamma, ((0, shard(d)),))
              for d in range(x.rank - 1)]
    result.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY),) + gamma, ((0, COPY),)))
    return tuple(result)


def flops(attrs: RMSNormAttrs, ins, outs):
    return _FORWARD_FLOPS_PER_ELEMENT * numel(outs[0])


def backward_flops(attrs: RMSNormAttrs, ins, outs):
    return _BACKWARD_FLOPS_PER_ELEMENT * numel(outs[0])


def extra_memory_bytes(attrs: RMSNormAttrs, ins, outs) -> int:
    """The saved inverse root mean square of each row of this piece."""
    x = ins[0]
    return numel(x) // x.dims[-1] * x.dtype.size_bytes


register_op(OpDef(OpType.RMS_NORM, RMSNormAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  weight_shapes=weight_shapes, weight_names=weight_names,
                  weight_inits=lambda attrs: ("one",), parallel_axes=parallel_axes,
                  backward_flops=backward_flops, extra_memory_bytes=extra_memory_bytes))
