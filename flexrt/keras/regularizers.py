"""Keras weight regularizers (FlexFlow's ``L1`` / ``L2``): values a layer takes as
``kernel_regularizer``.

flexrt's runtime has no per-weight regularization term yet, so a layer given one refuses it with
``NotYetAvailableError`` at the layer's construction (rather than training without it).

Entry points: ``L1``, ``L2``, ``Regularizer``.
"""

from __future__ import annotations

from flexrt.errors import ConfigError


class Regularizer:
    """Base class: ``kind`` ('l1' or 'l2') and its factor ``value``."""

    kind = ""

    def __init__(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"{type(self).__name__}: the factor must be a number >= 0, got {value!r}")
        self.value = float(value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class L1(Regularizer):
    """Adds ``l1 * sum(|w|)`` to the loss."""

    kind = "l1"

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1)


class L2(Regularizer):
    """Adds ``l2 * sum(w ** 2)`` to the loss."""

    kind = "l2"

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2)


l1 = L1
l2 = L2
