"""Keras' ``TimeDistributed`` over layers that act on the last axis of every position alone:
``Dense``, ``Activation``, ``Dropout`` and the activation layers (ReLU, LeakyReLU, ELU, Softmax).
FFModel's dense (and the element-wise layers) apply to the last axis of any rank, so
``TimeDistributed(Dense(k))`` on (N, steps, features) is ``Dense(k)`` there, its weights the inner
layer's. A layer that works on more than the last axis (Conv2D over (N, steps, H, W, C), pooling,
normalization over the batch) is refused naming it.

Entry point: ``TimeDistributed``.
"""

from __future__ import annotations

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.keras.layers.activations import ELU, LeakyReLU, ReLU, Softmax
from flexrt.keras.layers.base_layer import InnerWeights, Layer
from flexrt.keras.layers.core import Activation, Dense, Dropout

_PER_POSITION = (Dense, Activation, Dropout, ReLU, LeakyReLU, ELU)


class TimeDistributed(InnerWeights, Layer):
    def __init__(self, layer, **kwargs) -> None:
        super().__init__("time_distributed", "TimeDistributed", **kwargs)
        where = f"TimeDistributed '{self.name}'"
        if not isinstance(layer, Layer):
            raise ConfigError(f"{where}: wraps a layer, got {layer!r:.80}")
        if not isinstance(layer, _PER_POSITION) and not (isinstance(layer, Softmax) and layer.axis == -1):
            raise NotYetAvailableError(
                f"{where}: over {layer.layer_type} '{layer.name}' is not available; TimeDistributed takes layers "
                f"that act on each position's last axis alone (Dense, Activation, Dropout, ReLU, LeakyReLU, ELU, "
                f"Softmax(axis=-1))")
        self.layer = layer
        self.shares_weights = layer.shares_weights

    def lower(self, ffmodel, inputs, name, shared):
        if inputs[0].num_dims < 3:
            raise ShapeError(f"TimeDistributed '{self.name}': takes (N, steps, ...) inputs, got shape "
                             f"{list(inputs[0].dims)}")
        return self.layer.lower(ffmodel, inputs, name, shared)

    def _inner(self) -> Layer:
        return self.layer
