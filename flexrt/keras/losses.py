"""Keras losses by FlexFlow's names: each names a ``LossType`` (``type``).

``compile(loss=...)`` takes one of these or its name: ``'categorical_crossentropy'``,
``'sparse_categorical_crossentropy'``, ``'binary_crossentropy'`` (flexrt's: FlexFlow has none),
``'mean_squared_error'`` (``'mse'``). FlexFlow's
``'identity'`` loss is FlexFlow's ``LOSS_IDENTITY``: the output itself is the loss.

Entry points: the loss classes, ``get``.
"""

from __future__ import annotations

from typing import Any

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.model import LossType


class Loss:
    type: LossType

    def __init__(self, name=None, reduction="auto") -> None:
        if reduction not in ("auto", "sum_over_batch_size"):
            raise NotYetAvailableError(f"{type(self).__name__}: reduction={reduction!r} is not available (only "
                                       f"'auto': the mean over the batch)")
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CategoricalCrossentropy(Loss):
    """Cross-entropy of one-hot labels against softmax probabilities."""

    type = LossType.LOSS_CATEGORICAL_CROSSENTROPY

    def __init__(self, from_logits=False, label_smoothing=0, reduction="auto", name="categorical_crossentropy"):
        super().__init__(name, reduction)
        _probabilities(self, from_logits)
        if label_smoothing:
            raise NotYetAvailableError(f"CategoricalCrossentropy: label_smoothing={label_smoothing!r} is not "
                                       f"available (only 0)")


class SparseCategoricalCrossentropy(Loss):
    """Cross-entropy of class ids (int32, shape (N, 1)) against softmax probabilities."""

    type = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY

    def __init__(self, from_logits=False, reduction="auto", name="sparse_categorical_crossentropy"):
        super().__init__(name, reduction)
        _probabilities(self, from_logits)


class MeanSquaredError(Loss):
    """Mean over the batch of the squared errors (FlexFlow's average-reduced MSE)."""

    type = LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE

    def __init__(self, reduction="auto", name="mean_squared_error"):
        super().__init__(name, reduction)


class BinaryCrossentropy(Loss):
    """Cross-entropy of 0/1 labels (the output's shape; ``(N,)`` for an ``(N, 1)`` output) against
    sigmoid probabilities: a ``Dense(1, activation="sigmoid")`` output (flexrt's
    ``LOSS_BINARY_CROSSENTROPY``; FlexFlow has no binary cross-entropy)."""

    type = LossType.LOSS_BINARY_CROSSENTROPY

    def __init__(self, from_logits=False, label_smoothing=0, reduction="auto", name="binary_crossentropy"):
        super().__init__(name, reduction)
        if from_logits:
            raise NotYetAvailableError("BinaryCrossentropy: from_logits=True is not available; end the model with a "
                                       "sigmoid (the loss scores probabilities)")
        if label_smoothing:
            raise NotYetAvailableError(f"BinaryCrossentropy: label_smoothing={label_smoothing!r} is not available "
                                       f"(only 0)")


class Identity(Loss):
    """FlexFlow's identity loss: the model's output is the loss (summed over the batch, divided by
    the batch); the labels ``fit`` is given are not read."""

    type = LossType.LOSS_IDENTITY

    def __init__(self, reduction="auto", name="identity"):
        super().__init__(name, reduction)


def _probabilities(loss: Loss, from_logits) -> None:
    if from_logits:
        raise NotYetAvailableError(f"{type(loss).__name__}: from_logits=True is not available; end the model with "
                                   f"Activation('softmax') (FlexFlow's losses score probabilities)")


_BY_NAME = {"categorical_crossentropy": CategoricalCrossentropy,
            "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
            "binary_crossentropy": BinaryCrossentropy, "mean_squared_error": MeanSquaredError,
            "mse": MeanSquaredError, "identity": Identity}


def get(identifier: Any) -> Loss:
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ConfigError(f"compile: unknown loss {identifier!r}; valid: a Loss (losses.SparseCategoricalCrossentropy(), "
                      f"...) or one of {', '.join(repr(n) for n in _BY_NAME)}")
