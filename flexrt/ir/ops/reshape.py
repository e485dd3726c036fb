"""``Reshape`` to ``shape`` (same number of elements, C order; one entry may be -1, inferred).

Parallel axes: every dimension of the longest leading run that the reshape keeps unchanged
(input dimension d and output dimension d have the same size for every d up to it); each index of
that run owns one contiguous block of the input and of the output, so cutting it cuts both alike.
The sample dimension is an axis exactly when the first dimension is unchanged. Replicas pass
through, and partial sums pass through (reshape is linear). A piece reshapes to ``shape`` with the
kept dimensions divided by their degrees (``piece_call``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes, numel
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class ReshapeAttrs:
    """``shape``: the output sizes, each an int >= 1 or -1 (at most one -1, inferred from the rest)."""

    op_type: ClassVar[OpType] = OpType.RESHAPE
    shape: tuple[int, ...]

    def __post_init__(self):
        try:
            shape = tuple(self.shape)
        except TypeError:
            raise ShapeError(f"reshape: shape must be a sequence of ints, got {self.shape!r}") from None
        object.__setattr__(self, "shape", shape)
        if not shape:
            raise ShapeError("reshape: shape is empty; give at least one dimension")
        for i, s in enumerate(shape):
            if not isinstance(s, int) or isinstance(s, bool) or (s < 1 and s != -1):
                raise ShapeError(f"reshape: entry {i} of shape {list(shape)} is {s!r}; valid: an int >= 1, "
                                 f"or -1 (inferred)")
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape: shape {list(shape)} has {shape.count(-1)} entries -1; at most one "
                             f"dimension can be inferred")


def resolved_shape(attrs: ReshapeAttrs, x: TensorShape) -> tuple[int, ...]:
    """``attrs.shape`` with its -1 filled in for input ``x``; raises when the element counts differ."""
    n = numel(x)
    known = math.prod(s for s in attrs.shape if s != -1)
    if -1 in attrs.shape:
        if n % known:
            raise ShapeError(f"reshape: cannot reshape input {list(x.dims)} ({n} elements) to {list(attrs.shape)}: "
                             f"{n} is not a multiple of the known sizes' product {known}")
        return tuple(n // known if s == -1 else s for s in attrs.shape)
    if known != n:
        raise ShapeError(f"reshape: cannot reshape input {list(x.dims)} ({n} elements) to {list(attrs.shape)} "
                         f"({known} elements); the element counts must be equal")
    return attrs.shape


def kept_leading_dims(attrs: ReshapeAttrs, x: TensorShape) -> int:
    """How many leading dimensions the reshape leaves unchanged."""
    out = resolved_shape(attrs, x)
    k = 0
    while k < min(x.rank, len(out)) and x.dims[k] == out[k]:
        k += 1
    return k


def output_shapes(attrs: ReshapeAttrs, inputs):
    (x,) = inputs
    return (TensorShape(resolved_shape(attrs, x), x.dtype),)


def parallel_axes(attrs: ReshapeAttrs, inputs):
    (x,) = inputs
    return elementwise_axes(x.rank, 1, dims=range(kept_leading_dims(attrs, x)), linear=True)


def piece_call(attrs: ReshapeAttrs, coords, degrees):
    shape = tuple(s if s == -1 else s // degrees.get(f"dim{d}", 1) for d, s in enumerate(attrs.shape))
    return (attrs if shape == attrs.shape else replace(attrs, shape=shape)), frozenset()


def flops(attrs, ins, outs):
    return 0  # a view or a copy; no arithmetic


register_op(OpDef(OpType.RESHAPE, ReshapeAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops, piece_call=piece_call, piece_call_axes=()))
