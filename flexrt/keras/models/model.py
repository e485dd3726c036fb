"""``Model``: the functional API: a model from its input tensor(s) to its output tensor.

Example:
    >>> from flexrt.keras.layers import Input, Dense, Activation
    >>> from flexrt.model import FFConfig
    >>> x = Input(shape=(784,))
    >>> y = Activation("softmax")(Dense(10)(Dense(512, activation="relu")(x)))
    >>> m = Model(x, y, ffconfig=FFConfig(["-b", "64"]))
    >>> [layer.name for layer in m.layers], m.count_params()
    (['dense', 'dense', 'softmax'], 407050)

Entry point: ``Model``.
"""

from __future__ import annotations

from typing import Optional

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras.models.base_model import BaseModel
from flexrt.keras._tensor import Tensor
from flexrt.model import FFConfig


class Model(BaseModel):
    """The layers computing ``outputs`` from ``inputs`` (a tensor or a list of tensors)."""

    def __init__(self, inputs=None, outputs=None, name: Optional[str] = None, *, ffconfig: Optional[FFConfig] = None,
                 **kwargs) -> None:
        if inputs is None and outputs is None:
            raise NotYetAvailableError(
                f"{type(self).__name__}: a Model made without inputs and outputs (a subclass of Model whose call() "
                f"computes the outputs) is not available; build it with the functional API, "
                f"Model(inputs=Input(...), outputs=...), or Sequential([...])")
        if inputs is None or outputs is None:
            raise ConfigError(f"Model: give both inputs and outputs (got only {'outputs' if inputs is None else 'inputs'})")
        if kwargs:
            raise ConfigError(f"Model: unknown argument(s) {', '.join(sorted(kwargs))}; Model takes inputs, outputs "
                              f"and name")
        super().__init__(name, ffconfig)
        ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if not ins:
            raise ConfigError("Model: inputs must be a tensor or a non-empty list of tensors")
        for i, t in enumerate(ins):
            if not isinstance(t, Tensor):
                raise ConfigError(f"Model: inputs[{i}] must be a Keras tensor (Input(...)), got {t!r:.80}")
            if t.node is not None:
                raise ConfigError(f"Model: inputs[{i}] ({t!r}) is a layer's output; a model's inputs are Input(...) "
                                  f"tensors")
        if len({id(t) for t in ins}) != len(ins):
            raise ConfigError("Model: the same input tensor is listed twice")
        if isinstance(outputs, (list, tuple)):
            if len(outputs) != 1:
                raise NotYetAvailableError(f"Model: {len(outputs)} outputs; FFModel trains one output with one loss")
            outputs = outputs[0]
        if not isinstance(outputs, Tensor):
            raise ConfigError(f"Model: outputs must be a Keras tensor, got {outputs!r:.80}")
        self._input_tensors, self._output_tensor = ins, outputs
        self._nodes()  # checks the graph now: every output reachable from the inputs, every input used
