"""Keras callbacks as FlexFlow's Keras runs them: ``Callback`` (the hooks), ``LearningRateScheduler``,
``VerifyMetrics`` (checks the accuracy when training ends), ``EpochVerifyMetrics`` (stops early once
the accuracy passes a threshold) and ``History`` (what ``fit`` returns); and Keras' own
``EarlyStopping`` and ``ModelCheckpoint`` (weights only, to ``.npz``: ``Model.save_weights``).

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

    def __init__(self, schedule, verbose=None) -> None:
        """``verbose`` (Keras'): 0 silent, 1 Keras' line per epoch; not given: FlexFlow's line."""
        super().__init__()
        if not callable(schedule):
            raise ConfigError(f"LearningRateScheduler: schedule must be a function of the epoch, got {schedule!r}")
        if verbose is not None and (isinstance(verbose, bool) or verbose not in (0, 1, 2)):
            raise ConfigError(f"LearningRateScheduler: verbose must be 0, 1 or 2, got {verbose!r}")
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch, logs=None):
        opt = self.model.optimizer
        try:
            lr = self.schedule(epoch, opt.lr)
        except TypeError:
            lr = self.schedule(epoch)
        if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating)):
            raise ConfigError(f"LearningRateScheduler: schedule({epoch}) returned {lr!r}; it must return a float")
        opt.set_learning_rate(float(lr))
        if self.verbose is None:
            print("set learning rate ", opt.lr)
        elif self.verbose:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {opt.lr}.")


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


def _monitor_mode(where: str, monitor, mode) -> str:
    if not isinstance(monitor, str) or not monitor:
        raise ConfigError(f"{where}: monitor must be a metric name such as 'val_loss', got {monitor!r}")
    if mode not in ("auto", "min", "max"):
        raise ConfigError(f"{where}: mode={mode!r}; valid: 'auto', 'min', 'max'")
    if mode == "auto":   # Keras: accuracies and AUCs grow, everything else shrinks
        return "max" if "acc" in monitor or monitor.endswith("auc") else "min"
    return mode


def _monitored(where: str, monitor: str, logs) -> Any:
    value = (logs or {}).get(monitor)
    if value is None:
        import warnings
        warnings.warn(f"{where}: the monitored metric '{monitor}' is not in the epoch's logs (they hold "
                      f"{', '.join(logs or {}) or 'nothing'}); skipping", UserWarning, stacklevel=3)
    return value


class EarlyStopping(Callback):
    """Keras' ``EarlyStopping``: stop when ``monitor`` has not improved by more than ``min_delta`` for
    ``patience`` epochs (after ``start_from_epoch``); ``baseline``: it must beat that, too;
    ``restore_best_weights``: the best epoch's weights are written back when training stops early.
    Accuracies are in percent here (FlexFlow's unit), so their ``min_delta`` is too."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0) -> None:
        super().__init__()
        where = "EarlyStopping"
        self.monitor = monitor
        self.mode = _monitor_mode(where, monitor, mode)
        for arg, value in (("min_delta", min_delta), ("patience", patience), ("start_from_epoch", start_from_epoch)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or value < 0 \
                    or (arg != "min_delta" and int(value) != value):
                raise ConfigError(f"{where}: {arg} must be a number >= 0{'' if arg == 'min_delta' else ' (whole)'}, "
                                  f"got {value!r}")
        if baseline is not None and (isinstance(baseline, bool) or not isinstance(baseline, (int, float))):
            raise ConfigError(f"{where}: baseline must be a number or None, got {baseline!r}")
        self.min_delta = abs(float(min_delta))
        self.patience, self.start_from_epoch = int(patience), int(start_from_epoch)
        self.verbose, self.baseline, self.restore_best_weights = verbose, baseline, bool(restore_best_weights)
        self.on_train_begin()

    def _better(self, value, reference) -> bool:
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta

    def on_train_begin(self, logs=None):
        self.wait, self.stopped_epoch, self.best_epoch = 0, 0, 0
        self.best = np.inf if self.mode == "min" else -np.inf
        self.best_weights = None

    def on_epoch_end(self, epoch, logs=None):
        current = _monitored("EarlyStopping", self.monitor, logs)
        if current is None or epoch < self.start_from_epoch:
            return False
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
        self.wait += 1
        if self._better(current, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._better(current, self.baseline):
                self.wait = 0
                return False
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                if self.verbose:
                    print(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.")
                self.model.set_weights(self.best_weights)
        return False

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


class ModelCheckpoint(Callback):
    """Keras' ``ModelCheckpoint`` for weights: at each epoch's end (with ``save_best_only``, when
    ``monitor`` improved) ``model.save_weights(filepath)``; ``filepath`` may hold ``{epoch}`` (from 1)
    and the logs' keys (``{val_loss:.2f}``). Only ``.npz`` weights files: a whole model (Keras'
    ``save_weights_only=False`` to ``.keras``) or HDF5 needs h5py, which flexrt does not depend on."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None) -> None:
        super().__init__()
        where = "ModelCheckpoint"
        from flexrt.errors import NotYetAvailableError
        if not isinstance(filepath, str) or not filepath.endswith(".npz"):
            raise NotYetAvailableError(f"{where}: filepath {filepath!r}: only weights to .npz files are available "
                                       f"(Keras' .keras and .h5 formats need h5py, which flexrt does not depend on)")
        if save_freq != "epoch":
            raise NotYetAvailableError(f"{where}: save_freq={save_freq!r} is not available (only 'epoch')")
        self.filepath, self.monitor, self.verbose = filepath, monitor, verbose
        self.mode = _monitor_mode(where, monitor, mode)
        self.save_best_only = bool(save_best_only)
        self.best = initial_value_threshold if initial_value_threshold is not None else \
            (np.inf if self.mode == "min" else -np.inf)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        try:
            path = self.filepath.format(epoch=epoch + 1, **logs)
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(f"ModelCheckpoint: filepath {self.filepath!r} names {e} that the epoch's logs do not "
                              f"hold ({', '.join(logs) or 'none'})") from None
        if self.save_best_only:
            current = _monitored("ModelCheckpoint", self.monitor, logs)
            if current is None:
                return False
            better = current < self.best if self.mode == "min" else current > self.best
            if not better:
                return False
            if self.verbose:
                print(f"Epoch {epoch + 1}: {self.monitor} improved from {self.best:.5f} to {current:.5f}, saving "
                      f"the weights to {path}")
            self.best = current
        self.model.save_weights(path)
        return False
