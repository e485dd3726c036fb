"""FlexFlow's older ``flexflow.torch.fx`` (r21.09 and before): ``torch_to_flexflow(model, filename)``
writes a ``torch.nn.Module``'s trace in FlexFlow's text format, which ``PyTorchModel(filename)``
then ``apply``s to an FFModel. Today's form is ``PyTorchModel(model).torch_to_file(filename)``.

Entry points: ``torch_to_flexflow``.
"""

from __future__ import annotations

from flexrt.torch.model import PyTorchModel


def torch_to_flexflow(model, filename: str) -> None:
    """Write ``model``'s trace to ``filename`` in FlexFlow's format (``PyTorchModel.torch_to_file``)."""
    PyTorchModel(model).torch_to_file(filename)
