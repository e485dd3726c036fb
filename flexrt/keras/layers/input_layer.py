"""``Input`` and ``InputLayer``: a model input of a given sample shape and element type.

``Input(shape=(784,))`` is a float32 tensor of shape ``(None, 784)``: the batch comes from the
config (``-b``) at ``compile``. ``batch_size=N`` fixes it; ``compile`` then requires ``-b N``.

Example:
    >>> Input(shape=(3, 32, 32), dtype="float32").batch_shape
    (None, 3, 32, 32)

Entry points: ``Input``, ``InputLayer``.
"""

from __future__ import annotations

import numbers

from typing import Optional

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras.layers._common import same
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras._tensor import Tensor, dtype_of


class InputLayer(Layer):
    """The layer an ``Input`` tensor comes from (no operator; compile makes it an FFModel input)."""

    shares_weights = False

    def __init__(self, shape=None, batch_size=None, dtype=None, sparse=False, tensor=None, ragged=False,
                 name: Optional[str] = None, batch_shape=None) -> None:
        super().__init__("input", "InputLayer", name=name)
        where = f"Input '{self.name}'"
        for arg, value, default in (("sparse", sparse, False), ("tensor", tensor, None), ("ragged", ragged, False)):
            if not same(value, default):
                raise NotYetAvailableError(f"{where}: {arg}={value!r} is not available (dense tensors only)")
        if batch_shape is not None:
            if shape is not None:
                raise ConfigError(f"{where}: give shape or batch_shape, not both")
            if not isinstance(batch_shape, (list, tuple)) or len(batch_shape) < 2:
                raise ConfigError(f"{where}: batch_shape must be (batch, d1, ...), got {batch_shape!r}")
            batch_size, shape = batch_shape[0], tuple(batch_shape[1:])
        if shape is None:
            raise ConfigError(f"{where}: shape is required, e.g. Input(shape=(784,))")
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, (list, tuple)) or not shape or \
                any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in shape):
            raise ConfigError(f"{where}: shape must be a tuple of positive integers without the batch dimension, "
                              f"e.g. (784,), got {shape!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                       or batch_size < 1):
            raise ConfigError(f"{where}: batch_size must be a positive integer or None, got {batch_size!r}")
        self.batch_size = None if batch_size is None else int(batch_size)
        out = Tensor((None,) + tuple(int(d) for d in shape), dtype_of(where, dtype), self, None, name=self.name)
        self._output = out

    @property
    def output_tensors(self) -> list:
        return [self._output]

    @property
    def input_tensors(self) -> list:
        return []

    @property
    def output_shape(self):
        return self._output.batch_shape

    @property
    def input_shape(self):
        return None

    def __call__(self, inputs):
        raise ConfigError(f"InputLayer '{self.name}' cannot be called; use its tensor (Input(...)) as a layer's input")


def Input(shape=None, batch_size=None, dtype=None, sparse=False, tensor=None, ragged=False, name=None,
          batch_shape=None) -> Tensor:
    """A model input tensor (Keras' ``Input``)."""
    return InputLayer(shape, batch_size, dtype, sparse, tensor, ragged, name=name, batch_shape=batch_shape)._output
