"""``flexrt.onnx``: ONNX graphs into FFModels (FlexFlow's ``flexflow.onnx``), through the builder
``flexrt.torch`` uses. The ``onnx`` package is imported only when an ``ONNXModel`` is made.

Entry points: ``ONNXModel``, ``ONNXModelKeras``.
"""

from flexrt.onnx.model import ONNXModel, ONNXModelKeras

__all__ = ["ONNXModel", "ONNXModelKeras"]
