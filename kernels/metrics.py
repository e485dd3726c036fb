"""Training metrics with FlexFlow's names and its PerfMetrics accounting, for any array module ``xp``.

Every metric is a per-sample quantity summed over samples and reported as the mean over the samples
seen (accuracy in percent, as FlexFlow's ``get_accuracy()`` prints it). A sample is one row of the
``[batch..., classes]`` output; the regression metrics average over a sample's features first, so
RMSE is the mean over samples of each sample's root mean squared error, as FlexFlow computes it.
Labels are one-hot (the output's shape) or sparse integer class ids (``[batch...]`` or
``[batch..., 1]``); the cross-entropies read ``outputs`` as softmax probabilities.

Example:
    >>> import numpy as np
    >>> out = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    >>> compute_metrics(np, [MetricsType.METRICS_ACCURACY], out, np.array([0, 1, 1]))["accuracy"]
    66.66666666666667

Entry points: ``MetricsType``, ``compute_metrics``, ``MetricsAccumulator``, ``METRICS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flexrt.kernels.kinds import NamedKind
from flexrt.kernels.losses import _dense_labels, _sparse_labels, safe_log

from flexrt.errors import ConfigError, ShapeError


class MetricsType(NamedKind):
    """FlexFlow's metrics enum, with its names and values. ``short_name`` is the member's name without
    ``METRICS_``, in lower case (``"accuracy"``): what ``Session(metrics=...)`` takes and what results
    are keyed by."""

    METRICS_ACCURACY = 1001
    METRICS_CATEGORICAL_CROSSENTROPY = 1002
    METRICS_SPARSE_CATEGORICAL_CROSSENTROPY = 1004
    METRICS_MEAN_SQUARED_ERROR = 1008
    METRICS_ROOT_MEAN_SQUARED_ERROR = 1016
    METRICS_MEAN_ABSOLUTE_ERROR = 1032

    @classmethod
    def noun(cls) -> str:
        return "metric"

    @property
    def short_name(self) -> str:
        return self.name[len("METRICS_"):].lower()


def _rows(out):
    return out.reshape(-1, out.shape[-1]) if out.ndim else out.reshape(1, 1)


def _class_ids(xp, where: str, out, labels):
    """Sparse labels as ``[batch]`` ids; one-hot labels (the output's shape) by their argmax."""
    if tuple(labels.shape) == tuple(out.shape) and not (out.shape and out.shape[-1] == 1 and labels.dtype.kind in "iu"):
        return xp.argmax(_rows(_dense_labels(xp, where, out, labels)), axis=1)
    return _sparse_labels(xp, where, out, labels)


def _accuracy(xp, out, labels):
    rows = _rows(out)
    if rows.shape[1] == 1:   # one probability per sample (a sigmoid): Keras' binary accuracy, both sides at 0.5
        truth = labels.reshape(-1)
        if truth.shape[0] != rows.shape[0]:
            raise ShapeError(f"accuracy: labels {list(labels.shape)} do not give one value per sample of the output "
                             f"{list(out.shape)}")
        return xp.sum((rows[:, 0] > 0.5) == (truth > 0.5)) * 100.0
    ids = _class_ids(xp, "accuracy", out, labels)
    return xp.sum(xp.argmax(rows, axis=1) == ids) * 100.0


def _cce(xp, out, labels):
    t = _dense_labels(xp, "categorical_crossentropy", out, labels)
    return -xp.sum(t * safe_log(xp, out))


def _scce(xp, out, labels):
    ids = _sparse_labels(xp, "sparse_categorical_crossentropy", out, labels)
    p = _rows(out)
    return -xp.sum(safe_log(xp, p[xp.arange(p.shape[0]), ids]))


def _sq(xp, where, out, labels):
    d = _rows(out) - _rows(_dense_labels(xp, where, out, labels))
    return d * d


def _mse(xp, out, labels):
    return xp.sum(xp.mean(_sq(xp, "mean_squared_error", out, labels), axis=1))


def _rmse(xp, out, labels):
    return xp.sum(xp.sqrt(xp.mean(_sq(xp, "root_mean_squared_error", out, labels), axis=1)))


def _mae(xp, out, labels):
    d = _rows(out) - _rows(_dense_labels(xp, "mean_absolute_error", out, labels))
    return xp.sum(xp.mean(xp.abs(d), axis=1))


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: ``batch_sum(xp, outputs, labels)`` sums the per-sample values of a batch."""

    kind: MetricsType
    batch_sum: Callable


# One row per FlexFlow MetricsType, keyed by the member.
METRICS: dict[MetricsType, Metric] = {m.kind: m for m in (
    Metric(MetricsType.METRICS_ACCURACY, _accuracy),                        # percent of argmax == label
    Metric(MetricsType.METRICS_CATEGORICAL_CROSSENTROPY, _cce),
    Metric(MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY, _scce),
    Metric(MetricsType.METRICS_MEAN_SQUARED_ERROR, _mse),
    Metric(MetricsType.METRICS_ROOT_MEAN_SQUARED_ERROR, _rmse),
    Metric(MetricsType.METRICS_MEAN_ABSOLUTE_ERROR, _mae),
)}


_DENSE_LABELS = frozenset({MetricsType.METRICS_CATEGORICAL_CROSSENTROPY, MetricsType.METRICS_MEAN_SQUARED_ERROR,
                           MetricsType.METRICS_ROOT_MEAN_SQUARED_ERROR, MetricsType.METRICS_MEAN_ABSOLUTE_ERROR})


def check_metrics_for_loss(loss, metrics, where: str = "compile") -> None:
    """One label array feeds the loss and every metric: a ConfigError where they want different
    labels, class ids (sparse categorical cross-entropy) against the output's shape (the others;
    accuracy takes either)."""
    from flexrt.kernels.losses import LossType
    if loss is LossType.LOSS_IDENTITY:
        return
    sparse = loss is LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
    clash = _DENSE_LABELS if sparse else {MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY}
    wrong = [m for m in metrics if m in clash]
    if wrong:
        fits = [m.short_name for m in MetricsType if m not in clash]
        raise ConfigError(f"{where}: metric {', '.join(m.short_name for m in wrong)} wants "
                          f"{'labels of the output shape' if sparse else 'integer class ids'}, but loss "
                          f"{loss.short_name} takes {'integer class ids' if sparse else 'labels of the output shape'}"
                          f" (one label array feeds both); metrics that fit this loss: {', '.join(fits)}")


def _samples(out) -> int:
    return _rows(out).shape[0]


@dataclass(slots=True)
class MetricsAccumulator:
    """FlexFlow's PerfMetrics: per-metric sums over the samples of every batch seen; ``result()`` is
    keyed by each metric's ``short_name``.

    Example:
        >>> import numpy as np
        >>> acc = MetricsAccumulator([MetricsType.METRICS_ACCURACY])
        >>> acc.update(np, np.array([[0.9, 0.1]]), np.array([0]))
        >>> acc.update(np, np.array([[0.9, 0.1]]), np.array([1]))
        >>> acc.get_accuracy()
        50.0
    """

    names: list[MetricsType]
    sums: dict[MetricsType, float] = field(default_factory=dict)
    samples: int = 0

    def __post_init__(self):
        self.names = list(self.names)
        self.sums = {n: 0.0 for n in self.names}

    def update(self, xp, outputs, labels) -> None:
        """Add one batch."""
        for n in self.names:
            self.sums[n] += float(METRICS[n].batch_sum(xp, outputs, labels))
        self.samples += _samples(outputs)

    def result(self) -> dict[str, float]:
        """Mean of every metric over the samples seen (0.0 before any)."""
        return {n.short_name: (s / self.samples if self.samples else 0.0) for n, s in self.sums.items()}

    def get_accuracy(self) -> float:
        """Accuracy in percent, as FlexFlow's ``get_perf_metrics().get_accuracy()``."""
        if MetricsType.METRICS_ACCURACY not in self.sums:
            raise ConfigError(f"get_accuracy: accuracy is not among the metrics {[n.short_name for n in self.names]}")
        return self.result()["accuracy"]

    def reset(self) -> None:
        self.sums = {n: 0.0 for n in self.names}
        self.samples = 0


def compute_metrics(xp, names: Iterable[MetricsType], outputs, labels) -> dict[str, float]:
    """Every given metric of one batch, averaged over its samples (keyed by ``short_name``)."""
    acc = MetricsAccumulator(list(names))
    acc.update(xp, outputs, labels)
    return acc.result()
