"""Keras metrics by FlexFlow's names: each names a ``MetricsType`` (``type``).

``compile(metrics=[...])`` takes these or their names: ``'accuracy'``, ``'categorical_crossentropy'``,
``'sparse_categorical_crossentropy'``, ``'mean_squared_error'``, ``'root_mean_squared_error'``,
``'mean_absolute_error'``.

Entry points: the metric classes, ``get``.
"""

from __future__ import annotations

from typing import Any

from flexrt.errors import ConfigError
from flexrt.model import MetricsType


class Metric:
    type: MetricsType
    default_name = ""

    def __init__(self, name=None, dtype=None, **kwargs) -> None:
        self.name = name or self.default_name
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Accuracy(Metric):
    type, default_name = MetricsType.METRICS_ACCURACY, "accuracy"


class CategoricalCrossentropy(Metric):
    type, default_name = MetricsType.METRICS_CATEGORICAL_CROSSENTROPY, "categorical_crossentropy"


class SparseCategoricalCrossentropy(Metric):
    type, default_name = MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY, "sparse_categorical_crossentropy"


class MeanSquaredError(Metric):
    type, default_name = MetricsType.METRICS_MEAN_SQUARED_ERROR, "mean_squared_error"


class RootMeanSquaredError(Metric):
    type, default_name = MetricsType.METRICS_ROOT_MEAN_SQUARED_ERROR, "root_mean_squared_error"


class MeanAbsoluteError(Metric):
    type, default_name = MetricsType.METRICS_MEAN_ABSOLUTE_ERROR, "mean_absolute_error"


_BY_NAME = {c.default_name: c for c in (Accuracy, CategoricalCrossentropy, SparseCategoricalCrossentropy,
                                         MeanSquaredError, RootMeanSquaredError, MeanAbsoluteError)}
_BY_NAME.update({"acc": Accuracy, "mse": MeanSquaredError, "mae": MeanAbsoluteError})


def get(identifier: Any, where: str = "compile: metrics") -> Metric:
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ConfigError(f"{where}: unknown metric {identifier!r}; valid: a Metric (metrics.Accuracy(), ...) or one of "
                      f"{', '.join(repr(n) for n in _BY_NAME)}")
