"""Source operators: ``Input`` (a model input) and ``Weight`` (a trainable parameter tensor).

Weights are nodes of their own (Unity, flexflow-train) so that parallelization operators act on
them like on any tensor: data parallelism is a Replicate on the weight, and weight-gradient
synchronization is that Replicate's back-propagation partner, a Reduction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import GraphError, ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.serialize import OMIT_DEFAULT
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class InputAttrs:
    op_type: ClassVar[OpType] = OpType.INPUT
    shape: TensorShape


def _folded(default=()):
    return dataclasses.field(default=default, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True)
class WeightAttrs:
    """A parameter tensor. A *folded* weight is the concatenation along ``part_axis`` of the model's
    weights ``parts`` (``part_sizes`` rows each; ``part_ids``: their node ids in the model, which fix
    their initial values' order), made by a rewrite that concatenated them (TASO's merged kernels;
    ``flexrt.strategy.weights``). Training it is training its parts: SGD and Adam act element-wise."""
    op_type: ClassVar[OpType] = OpType.WEIGHT
    shape: TensorShape
    parts: tuple[str, ...] = _folded()
    part_sizes: tuple[int, ...] = _folded()
    part_ids: tuple[int, ...] = _folded()
    part_axis: int = _folded(0)

    def __post_init__(self):
        if not (self.parts or self.part_sizes or self.part_ids or self.part_axis):
            return
        n, rank = len(self.parts), len(self.shape.dims)
        where = f"folded weight of {', '.join(map(repr, self.parts[:4]))}"
        if n < 2 or len(self.part_sizes) != n or len(self.part_ids) != n:
            raise GraphError(f"{where}: parts, part_sizes and part_ids must list the same 2 or more weights; "
                             f"got {n}, {len(self.part_sizes)} and {len(self.part_ids)}")
        if len(set(self.parts)) != n:
            raise GraphError(f"{where}: a weight is listed twice in parts")
        if not 0 <= self.part_axis < rank:
            raise GraphError(f"{where}: part_axis {self.part_axis} is not a dimension of its shape {self.shape.dims}")
        if any(s < 1 for s in self.part_sizes) or sum(self.part_sizes) != self.shape.dims[self.part_axis]:
            raise GraphError(f"{where}: part_sizes {list(self.part_sizes)} must be >= 1 and add up to dimension "
                             f"{self.part_axis} of its shape {self.shape.dims}")


def _source_shapes(attrs, inputs):
    if inputs:
        raise ShapeError(f"{attrs.op_type.value} takes no inputs, got {len(inputs)}")
    return (attrs.shape,)


def _source_parallel(attrs, inputs):
    return (ParallelTensorShape.from_tensor_shape(attrs.shape),)


for _t, _cls in ((OpType.INPUT, InputAttrs), (OpType.WEIGHT, WeightAttrs)):
    register_op(OpDef(_t, _cls, output_shapes=_source_shapes, flops=lambda a, i, o: 0, num_inputs=0,
                      parallel_rule=_source_parallel, backward_flops=lambda a, i, o: 0))
