"""Keras callbacks as FlexFlow's Keras runs them: ``Callback`` (the hooks), ``LearningRateScheduler``,
``VerifyMetrics`` (checks the accuracy when training ends), ``EpochVerifyMetrics`` (stops early once
the accuracy passes a threshold) and ``History`` (what ``fit`` returns).

An epoch ends early when any callback's ``on_epoch_end`` returns True (FlexFlow's way) or sets
``model.stop_training = True`` (Keras'). ``on_epoch_end`` is called as ``(epoch, logs)``, or as
``(epoch)`` when it takes one argument (FlexFlow's callbacks do). ``logs`` holds the epoch's mean
loss and the metrics (accuracy in percent, FlexFlow's unit).

Entry points: the classes above, ``AccuracyCheckError``.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from flexrt.errors import ConfigError, FlexrtError


class AccuracyCheckError(FlexrtError, AssertionError):
    """``VerifyMetrics``: the accuracy at the end of training is below the required one."""


def _threshold(where: str, accuracy: Any) -> float:
    value = getattr(accuracy, "value", accuracy)   # FlexFlow's examples pass an Enum member
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: accuracy must be a number (percent) or an Enum of one, got {accuracy!r}")
    return float(value)


class Callback:
    """The hooks ``fit`` calls; each does nothing here."""

    def __init__(self) -> None:
        self.validation_data = None
        self.model = None
        self.params: dict = {}

    def set_params(self, params) -> None:
        self.params = params

    def set_model(self, model) -> None:
        self.model = model

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_batch_begin(self, batch, logs=None):
        pass

    def on_batch_end(self, batch, logs=None):
        pass

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass


def call_epoch_end(callback: Callback, epoch: int, logs: dict) -> bool:
    """Run ``on_epoch_end`` in the form it takes; True when it asks to stop."""
    fn = callback.on_epoch_end
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = [None, None]
    return bool(fn(epoch, logs) if len(params) >= 2 else fn(epoch))


class LearningRateScheduler(Callback):
    """At each epoch's start, the rate ``schedule(epoch)`` (or ``schedule(epoch, lr)``)."""

    def __init__(self, schedule) -> None:
        super().__init__()
        if not callable(schedule):
            raise ConfigError(f"LearningRateScheduler: schedule must be a function of the epoch, got {schedule!r}")
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        opt = self.model.optimizer
        try:
            lr = self.schedule(epoch, opt.lr)
        except TypeError:
            lr = self.schedule(epoch)
        if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)):
            raise ConfigError(f"LearningRateScheduler: schedule({epoch}) returned {lr!r}; it must return a float")
        opt.set_learning_rate(float(lr))
        print("set learning rate ", opt.lr)


class VerifyMetrics(Callback):
    """When training ends, the last epoch's accuracy must be at least ``accuracy`` percent."""

    def __init__(self, accuracy) -> None:
        super().__init__()
        self.accuracy = _threshold("VerifyMetrics", accuracy)

    def on_train_end(self, logs=None):
        got = self.model.ffmodel.get_perf_metrics().get_accuracy()
        if got < self.accuracy:
            raise AccuracyCheckError(f"VerifyMetrics: accuracy {got:.2f}% after training is below the required "
                                     f"{self.accuracy:g}%")


class EpochVerifyMetrics(Callback):
    """Stop training after the first epoch whose accuracy exceeds ``accuracy`` percent."""

    def __init__(self, accuracy, early_stop=True) -> None:
        super().__init__()
        self.accuracy = _threshold("EpochVerifyMetrics", accuracy)
        self.early_stop = early_stop

    def on_epoch_end(self, epoch, logs=None):
        if not self.early_stop:
            return False
        return self.model.ffmodel.get_perf_metrics().get_accuracy() > self.accuracy


class History(Callback):
    """``history``: per metric (and ``loss``) its value at each epoch's end; ``epoch``: the epochs run."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict = {}
        self.epoch: list = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
