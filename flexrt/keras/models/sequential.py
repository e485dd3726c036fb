"""``Sequential``: a chain of layers (and models), each reading the previous one's output.

The first layer needs ``input_shape`` (or ``add(Input(...))`` first); a model added is applied as a
layer. ``pop`` removes the last layer or model added.

Example:
    >>> from flexrt.keras.layers import Dense
    >>> from flexrt.model import FFConfig
    >>> m = Sequential([Dense(512, input_shape=(784,), activation="relu"), Dense(10)], ffconfig=FFConfig([]))
    >>> m.output.batch_shape
    (None, 10)

Entry point: ``Sequential``.
"""

from __future__ import annotations

from typing import Optional

from flexrt.errors import ConfigError
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras.layers.input_layer import Input, InputLayer
from flexrt.keras.models.base_model import BaseModel
from flexrt.keras._tensor import Tensor
from flexrt.model import FFConfig


class Sequential(BaseModel):
    """Layers applied one after another."""

    def __init__(self, layers=None, name: Optional[str] = None, *, ffconfig: Optional[FFConfig] = None) -> None:
        super().__init__(name, ffconfig)
        self._steps: list = []   # what add() was given, in order (for pop)
        if layers is not None:
            if not isinstance(layers, (list, tuple)):
                raise ConfigError(f"Sequential: layers must be a list, got {layers!r:.80}")
            for item in layers:
                self.add(item)

    def add(self, item) -> None:
        """Append a layer, a model, or (first) an ``Input`` tensor."""
        where = f"Sequential '{self.name}': add"
        if isinstance(item, Tensor):
            if not isinstance(item.from_layer, InputLayer):
                raise ConfigError(f"{where}: a tensor added must be an Input(...), got {item!r}")
            if self._input_tensors:
                raise ConfigError(f"{where}: the model already has its input {self._input_tensors[0]!r}")
            self._input_tensors, self._output_tensor = [item], item
            self._steps.append(item)
            return
        if isinstance(item, Layer):
            if item.multi_input:
                raise ConfigError(f"{where}: {item.layer_type} '{item.name}' takes several tensors; use the "
                                  f"functional Model for it")
            self._start(where, item.input_shape, item.input_dtype, item)
        elif isinstance(item, BaseModel):
            if len(item.input) != 1:
                raise ConfigError(f"{where}: model '{item.name}' has {len(item.input)} inputs; Sequential chains "
                                  f"single-input models")
            first = item.input[0]
            self._start(where, first.batch_shape, first.dtype, item)
        else:
            raise ConfigError(f"{where}: takes a Layer, a model or an Input tensor, got {item!r:.80}")
        self._output_tensor = item(self._output_tensor)
        self._steps.append(item)

    def _start(self, where: str, shape, dtype, item) -> None:
        if self._input_tensors:
            return
        if shape is None:
            raise ConfigError(f"{where}: the first layer ({item!r}) needs input_shape=(...), or add(Input(shape=...)) "
                              f"first")
        self._input_tensors = [Input(shape=tuple(shape[1:]), dtype=dtype)]
        self._output_tensor = self._input_tensors[0]

    def pop(self) -> None:
        """Remove the last layer or model added (its calls are rebuilt from the remaining ones)."""
        if not self._steps or isinstance(self._steps[-1], Tensor):
            raise ConfigError(f"Sequential '{self.name}': pop: there is no layer to remove")
        steps = self._steps[:-1]
        self._steps, self._input_tensors, self._output_tensor = [], [], None
        for item in steps:
            self.add(item)
