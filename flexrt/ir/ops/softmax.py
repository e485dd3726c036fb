"""``Softmax`` along ``axis``: y = exp(x - max) / sum(exp(x - max)), max and sum along ``axis``.

Parallel axes: every dimension but ``axis`` (sample / attribute) and ``replica``. The softmax axis
itself cannot be cut: each piece would normalize by the sum of its own slice only.

``causal`` (flexrt's, for decomposed GPT attention: ``masked_fill`` of a triangular mask, or
``scaled_dot_product_attention(is_causal=True)``): over the last axis of scores [..., L, S], row i
sees columns 0..i only (torch's top-left aligned mask); the others get probability 0. A piece cut
along the rows learns its first row (``query_offset``, the piece's index, times its row count), as
causal attention's pieces do.

Entry point: ``SoftmaxAttrs``; the rules register on import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes, numel
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import normalize_axis

# FLOPs per element: max (1), subtract (1), exp (4, as element_unary counts it), sum (1), divide (1).
_FORWARD_FLOPS_PER_ELEMENT = 8
# Backward: y * (dy - sum(y * dy)): multiply, sum, subtract, multiply.
_BACKWARD_FLOPS_PER_ELEMENT = 4


@dataclass(frozen=True, slots=True)
class SoftmaxAttrs:
    """Example: ``SoftmaxAttrs(-1)`` over the classes of [N, classes] logits."""

    op_type: ClassVar[OpType] = OpType.SOFTMAX
    axis: int = -1
    causal: bool = False          # row i of the last two dimensions sees columns 0..i (set with axis >= 1)
    query_offset: int = 0         # a causal piece cut along the rows: its index (set per piece)

    def __post_init__(self):
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise ShapeError(f"softmax: axis must be an int, got {self.axis!r}")
        if not isinstance(self.causal, bool):
            raise ShapeError(f"softmax: causal must be a bool, got {self.causal!r}")
        if self.causal and self.axis < 1:
            raise ShapeError(f"softmax: a causal softmax names its axis (the last) by its index >= 1, got "
                             f"{self.axis}")
        if not isinstance(self.query_offset, int) or isinstance(self.query_offset, bool) or self.query_offset < 0:
            raise ShapeError(f"softmax: query_offset must be an int >= 0, got {self.query_offset!r}")


def softmax_axis(attrs: SoftmaxAttrs, rank: int) -> int:
    return normalize_axis(attrs.axis, rank, "softmax: axis")


def output_shapes(attrs: SoftmaxAttrs, inputs):
    (x,) = inputs
    axis = softmax_axis(attrs, x.rank)
    if attrs.causal and axis != x.rank - 1:
        raise ShapeError(f"softmax: a causal softmax runs along the last axis of [..., rows, columns] scores; "
                         f"got axis {attrs.axis} of {x}")
    if not x.dtype.is_floating:
        raise ShapeError(f"softmax: input {x} has dtype {x.dtype.name}; valid: a floating type")
    return (x,)


def parallel_axes(attrs: SoftmaxAttrs, inputs):
    (x,) = inputs
    axis = softmax_axis(attrs, x.rank)
    return elementwise_axes(x.rank, 1, dims=[d for d in range(x.rank) if d != axis])


def piece_call(attrs: SoftmaxAttrs, coords, degrees):
    """A causal piece cut along the rows (the dimension before the axis) learns its index."""
    row = coords.get(f"dim{attrs.axis - 1}", 0) if attrs.causal else 0
    return (dataclasses.replace(attrs, query_offset=row) if row else attrs), frozenset()


def flops(attrs: SoftmaxAttrs, ins, outs):
    return _FORWARD_FLOPS_PER_ELEMENT * numel(outs[0])


def backward_flops(attrs: SoftmaxAttrs, ins, outs):
    return _BACKWARD_FLOPS_PER_ELEMENT * numel(outs[0])


register_op(OpDef(OpType.SOFTMAX, SoftmaxAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=backward_flops, piece_call=piece_call))
