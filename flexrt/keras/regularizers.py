"""Keras weight regularizers (FlexFlow's ``L1`` / ``L2``): values a layer takes as
``kernel_regularizer``.

A ``Dense`` kernel's regularizer reaches ``FFModel.dense`` as FlexFlow's (``type``, ``_lambda``), and
the runtime adds its gradient to the kernel's at every update. Keras' loss terms are followed:
``L2(l2)`` adds ``l2 * sum(w ** 2)`` (gradient ``2 l2 w``: ``_lambda = 2 l2``, where FlexFlow's Keras
passes ``l2`` and so trains with half of Keras' term), ``L1(l1)`` adds ``l1 * sum(|w|)``. Other
layers' regularizers, bias and activity regularizers are refused (``NotYetAvailableError``).

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

    @property
    def type(self):
        from flexrt.model import RegularizerMode
        return RegularizerMode.REG_MODE_L1

    @property
    def _lambda(self) -> float:
        return self.value

    def __init__(self, l1: float = 0.01) -> None:
        super().__init__(l1)


class L2(Regularizer):
    """Adds ``l2 * sum(w ** 2)`` to the loss."""

    kind = "l2"

    @property
    def type(self):
        from flexrt.model import RegularizerMode
        return RegularizerMode.REG_MODE_L2

    @property
    def _lambda(self) -> float:
        return 2.0 * self.value

    def __init__(self, l2: float = 0.01) -> None:
        super().__init__(l2)


l1 = L1
l2 = L2
