"""Keras' activation layers: ``ReLU``, ``LeakyReLU``, ``ELU``, ``Softmax``, built from FFModel's
element-wise layers where it has none (``flexrt.model.composites``).

- ``ReLU(max_value=None, negative_slope=0.0, threshold=0.0)``: relu, capped at ``max_value``
  (relu(x) - relu(x - max_value)), leaky below 0 with ``negative_slope``; a nonzero ``threshold``
  is refused.
- ``LeakyReLU``: Keras 2's ``alpha`` (default 0.3) or Keras 3's ``negative_slope`` (default 0.3).
- ``ELU(alpha=1.0)``: FFModel's elu, or for another alpha relu(x) + alpha (exp(min(x, 0)) - 1).
- ``Softmax(axis=-1)``.
- ``Rescaling(scale, offset=0.0)`` (Keras' preprocessing layer): x * scale + offset.

Entry points: the classes above.
"""

from __future__ import annotations

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras.layers.base_layer import Layer
from flexrt.model import composites


def _number(where: str, arg: str, value, low=None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (low is not None and value < low):
        raise ConfigError(f"{where}: {arg} must be a number{'' if low is None else f' >= {low:g}'}, got {value!r}")
    return float(value)


class ReLU(Layer):
    shares_weights = False

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs) -> None:
        super().__init__("re_lu", "ReLU", **kwargs)
        where = f"ReLU '{self.name}'"
        self.max_value = None if max_value is None else _number(where, "max_value", max_value, 0.0)
        self.negative_slope = _number(where, "negative_slope", negative_slope, 0.0)
        if _number(where, "threshold", threshold) != 0.0:
            raise NotYetAvailableError(f"{where}: threshold={threshold!r}: only threshold 0 is available")
        if self.max_value is not None and self.negative_slope:
            raise NotYetAvailableError(f"{where}: max_value with a negative_slope: give one of them")

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if self.max_value is not None:
            return composites.capped_relu(ffmodel, x, self.max_value, name)
        if self.negative_slope:
            return composites.leaky_relu(ffmodel, x, self.negative_slope, name)
        return ffmodel.relu(x, name=name)


class LeakyReLU(Layer):
    shares_weights = False

    def __init__(self, alpha=None, negative_slope=None, **kwargs) -> None:
        super().__init__("leaky_re_lu", "LeakyReLU", **kwargs)
        where = f"LeakyReLU '{self.name}'"
        if alpha is not None and negative_slope is not None:
            raise ConfigError(f"{where}: give alpha (Keras 2) or negative_slope (Keras 3), not both")
        slope = alpha if alpha is not None else negative_slope if negative_slope is not None else 0.3
        self.negative_slope = _number(where, "negative_slope", slope, 0.0)

    def lower(self, ffmodel, inputs, name, shared):
        return composites.leaky_relu(ffmodel, inputs[0], self.negative_slope, name)


class ELU(Layer):
    shares_weights = False

    def __init__(self, alpha=1.0, **kwargs) -> None:
        super().__init__("elu", "ELU", **kwargs)
        self.alpha = _number(f"ELU '{self.name}'", "alpha", alpha)

    def lower(self, ffmodel, inputs, name, shared):
        return composites.elu(ffmodel, inputs[0], self.alpha, name)


class Softmax(Layer):
    shares_weights = False

    def __init__(self, axis=-1, **kwargs) -> None:
        super().__init__("softmax", "Softmax", **kwargs)
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise ConfigError(f"Softmax '{self.name}': axis must be an integer, got {axis!r}")
        self.axis = axis

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if not -x.num_dims < self.axis < x.num_dims or self.axis % x.num_dims == 0:
            raise ConfigError(f"Softmax '{self.name}': axis {self.axis} of a rank-{x.num_dims} tensor; valid: "
                              f"1..{x.num_dims - 1} or -{x.num_dims - 1}..-1 (not the batch)")
        return ffmodel.softmax(x, self.axis, name=name)


class Rescaling(Layer):
    """Keras' preprocessing ``Rescaling(scale, offset=0.0)``: x * scale + offset (``Rescaling(1 / 255)``
    on images), element-wise."""

    shares_weights = False

    def __init__(self, scale, offset=0.0, **kwargs) -> None:
        super().__init__("rescaling", "Rescaling", **kwargs)
        where = f"Rescaling '{self.name}'"
        self.scale, self.offset = _number(where, "scale", scale), _number(where, "offset", offset)

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if self.offset == 0.0:
            return ffmodel.scalar_multiply(x, self.scale, name=name)
        return ffmodel.scalar_add(ffmodel.scalar_multiply(x, self.scale, name=f"{name}.scale"), self.offset, name=name)
