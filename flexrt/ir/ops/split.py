"""``Split`` a tensor along ``axis`` into pieces of the given sizes (one output per size; FlexFlow
``split(input, sizes, axis)`` with a list of sizes).

Parallel axes: every dimension other than ``axis`` (the input and every output cut alike), replicas
pass through, and partial sums pass through (split is linear: split(a1 + a2) = split(a1) + split(a2)).
Cutting along ``axis`` is not offered: a piece of the input would feed parts of several outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape, normalize_axis


@dataclass(frozen=True, slots=True)
class SplitAttrs:
    """``sizes``: the size of each output along ``axis`` (each >= 1; they sum to the input's size)."""

    op_type: ClassVar[OpType] = OpType.SPLIT
    sizes: tuple[int, ...]
    axis: int

    def __post_init__(self):
        try:
            sizes = tuple(self.sizes)
        except TypeError:
            raise ShapeError(f"split: sizes must be a sequence of ints, got {self.sizes!r}") from None
        object.__setattr__(self, "sizes", sizes)
        if not sizes:
            raise ShapeError("split: sizes is empty; give at least one output size")
        for i, s in enumerate(sizes):
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ShapeError(f"split: size {i} is {s!r}; every size must be an int >= 1 (sizes {list(sizes)})")
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise ShapeError(f"split: axis must be an int, got {self.axis!r}")


def split_axis(attrs: SplitAttrs, x: TensorShape) -> int:
    axis = normalize_axis(attrs.axis, x.rank, "split: axis")
    if sum(attrs.sizes) != x.dims[axis]:
        raise ShapeError(f"split: sizes {list(attrs.sizes)} sum to {sum(attrs.sizes)} but dimension {axis} of "
                         f"input {list(x.dims)} has size {x.dims[axis]}; the sizes must sum to it")
    return axis


def output_shapes(attrs: SplitAttrs, inputs):
    (x,) = inputs
    axis = split_axis(attrs, x)
    return tuple(TensorShape(x.dims[:axis] + (s,) + x.dims[axis + 1:], x.dtype) for s in attrs.sizes)


def parallel_axes(attrs: SplitAttrs, inputs):
    (x,) = inputs
    axis = split_axis(attrs, x)
    return elementwise_axes(x.rank, 1, len(attrs.sizes), dims=[d for d in range(x.rank) if d != axis],
                            linear=True)


def flops(attrs, ins, outs):
    return 0  # pure data movement


register_op(OpDef(OpType.SPLIT, SplitAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=flops))
