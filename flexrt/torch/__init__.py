"""``flexrt.torch``: PyTorch modules into FFModels through torch.fx (FlexFlow's ``flexflow.torch``).

``PyTorchModel(module).torch_to_ff(ffmodel, inputs)`` adds the module's layers; ``torch_to_file`` /
``file_to_ff`` write and read FlexFlow's text format. PyTorch is imported only when a
``PyTorchModel`` is made. The IR and builder here are shared with ``flexrt.onnx``.

Entry points: ``PyTorchModel``, ``file_to_ff``.
"""

from flexrt.torch.model import PyTorchModel, file_to_ff

__all__ = ["PyTorchModel", "file_to_ff"]
