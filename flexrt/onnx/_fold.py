"""What an ONNX graph computes from constants alone, folded when the graph is read.

torch's exporter writes the sizes a model reads from its tensors (``x.size(0)``, ``view(B, -1)``,
attention's head split) as subgraphs: Shape of a tensor, then Gather, Unsqueeze, Concat, Mod ... of
those sizes, ending in a Reshape's shape. FFModel's tensors have static shapes, so every such
subgraph is a constant: ``static_shapes`` gives each tensor's shape (ONNX's shape inference on the
graph with its inputs at the FFModel tensors' sizes) and ``fold`` evaluates a node whose inputs are
all constants with ONNX's reference evaluator. Both are onnx's own code; nothing here reimplements
an operator.

Entry points: ``static_shapes``, ``shape_of``, ``fold``, ``FOLDABLE``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# Operators evaluated when all their inputs are constants: size arithmetic, masks and constant
# tensors. Layers with weights (Gemm, MatMul, Conv) keep their own handlers.
FOLDABLE = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Add", "Sub", "Mul", "Div", "Mod",
    "Neg", "Abs", "Floor", "Ceil", "Sqrt", "Pow", "Min", "Max", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "Not", "And", "Or", "Where", "Range", "ConstantOfShape", "Expand", "Reshape", "Transpose",
    "Identity", "ReduceProd", "ReduceSum", "Tile", "Trilu", "Flatten", "Reciprocal", "ScatterND", "ScatterElements",
})


def static_shapes(model, input_dims: Mapping[str, tuple], folded: Mapping[str, np.ndarray] | None = None
                  ) -> dict[str, tuple]:
    """Every tensor's shape that ONNX's shape inference finds static, with the graph's inputs at
    ``input_dims`` (the FFModel tensors': a batch dimension exported as symbolic takes its size).
    ``folded``: node outputs already computed from constants (an Expand's target shape that ONNX's
    data propagation loses at a Where), given to the inference as initializers in place of their
    nodes, so the shapes after them are static too."""
    import onnx
    from onnx import numpy_helper, shape_inference

    m = onnx.ModelProto()
    m.CopyFrom(model)
    if folded:
        keep = [n for n in m.graph.node if not n.output or not all(o in folded for o in n.output)]
        made = {o for n in m.graph.node for o in n.output} & set(folded)
        del m.graph.node[:]
        m.graph.node.extend(keep)
        m.graph.initializer.extend(numpy_helper.from_array(np.asarray(folded[o]), o) for o in sorted(made))
    for value in m.graph.input:
        dims = input_dims.get(value.name)
        if dims is None:
            continue
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for d in dims:
            shape.dim.add().dim_value = int(d)
    try:
        inferred = shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises its own errors on graphs it cannot type; shapes stay unknown
        return {}
    out = {}
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[value.name] = tuple(d.dim_value for d in dims)
    return out


def shape_of(attrs: Mapping, shape: tuple) -> np.ndarray:
    """The value of a Shape node (``start`` / ``end`` as ONNX clamps them) on a tensor of ``shape``."""
    rank = len(shape)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return np.array(shape[start:end], dtype=np.int64)


def fold(node, constants: Mapping[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """The outputs of ``node`` evaluated on ``constants`` (each of its inputs is one) by ONNX's
    reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    feeds = {i: constants[i] for i in node.input if i}
    return ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
