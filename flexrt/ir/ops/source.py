"""Source operators: ``Input`` (a model input) and ``Weight`` (a trainable parameter tensor).

Weights are nodes of their own (Unity, flexflow-train) so that parallelization operators act on
them like on any tensor: data parallelism is a Replicate on the weight, and weight-gradient
synchronization is that Replicate's back-propagation partner, a Reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.registry import OpDef, register_op
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class InputAttrs:
    op_type: ClassVar[OpType] = OpType.INPUT
    shape: TensorShape


@dataclass(frozen=True, slots=True)
class WeightAttrs:
    op_type: ClassVar[OpType] = OpType.WEIGHT
    shape: TensorShape


def _source_shapes(attrs, inputs):
    if inputs:
        raise ShapeError(f"{attrs.op_type.value} takes no inputs, got {len(inputs)}")
    return (attrs.shape,)


def _source_parallel(attrs, inputs):
    return (ParallelTensorShape.from_tensor_shape(attrs.shape),)


for _t, _cls in ((OpType.INPUT, InputAttrs), (OpType.WEIGHT, WeightAttrs)):
    register_op(OpDef(_t, _cls, output_shapes=_source_shapes, flops=lambda a, i, o: 0, num_inputs=0,
                      parallel_rule=_source_parallel, backward_flops=lambda a, i, o: 0))
