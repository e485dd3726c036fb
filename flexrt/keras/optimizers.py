"""Keras optimizers (``SGD``, ``Adam``, and flexrt's ``RMSprop``, ``Adagrad``), each becoming a ``flexrt.model`` optimizer of the compiled
model (``ffhandle``). ``set_learning_rate`` changes the rate of the next updates, as FlexFlow's.

Example:
    >>> opt = SGD(learning_rate=0.01, momentum=0.9)
    >>> opt.lr, opt.momentum
    (0.01, 0.9)

Entry points: ``SGD``, ``Adam``, ``RMSprop``, ``Adagrad``, ``get``.
"""

from __future__ import annotations

from typing import Any

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.model import AdagradOptimizer, AdamOptimizer, RMSpropOptimizer, SGDOptimizer, _check


def _rate(where: str, value: Any) -> float:
    return _check.number(where, "learning_rate", value, low=0.0, low_open=True)


def _learning_rate(where: str, learning_rate: Any, kwargs: dict) -> float:
    """``learning_rate``, or Keras 2's older name ``lr`` for it (not both)."""
    if "lr" in kwargs:
        lr = kwargs.pop("lr")
        if learning_rate is not None:
            raise ConfigError(f"{where}: give learning_rate or lr (its older Keras name), not both")
        learning_rate = lr
    return _rate(where, learning_rate)


def _no_extras(where: str, kwargs: dict) -> None:
    if kwargs:
        raise NotYetAvailableError(f"{where}: {', '.join(sorted(kwargs))} not available (decay, clipping and "
                                   f"schedules other than LearningRateScheduler are not implemented)")


class Optimizer:
    """Base class: ``lr`` and ``ffhandle`` (the FFModel optimizer of the last compile)."""

    lr: float

    def __init__(self) -> None:
        self._ffhandle = None

    @property
    def ffhandle(self):
        return self._ffhandle

    @property
    def learning_rate(self) -> float:
        return self.lr

    def create_ffhandle(self, ffmodel):
        raise NotImplementedError

    def set_learning_rate(self, learning_rate) -> None:
        """The rate of the next updates (FlexFlow's)."""
        self.lr = _rate(f"{type(self).__name__}.set_learning_rate", learning_rate)
        if self._ffhandle is not None:
            self._ffhandle.set_learning_rate(self.lr)


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum."""

    def __init__(self, learning_rate=None, momentum=0.0, nesterov=False, name="SGD", **kwargs) -> None:
        super().__init__()
        self.lr = _learning_rate("SGD", learning_rate, kwargs) if learning_rate is not None or "lr" in kwargs \
            else 0.01
        _no_extras("SGD", kwargs)
        self.momentum, self.nesterov, self.name = momentum, nesterov, name

    def create_ffhandle(self, ffmodel):
        self._ffhandle = SGDOptimizer(ffmodel, self.lr, self.momentum, self.nesterov)
        return self._ffhandle


class Adam(Optimizer):
    """Adam (Kingma and Ba); Keras' defaults (epsilon 1e-7)."""

    def __init__(self, learning_rate=None, beta_1=0.9, beta_2=0.999, epsilon=1e-07, amsgrad=False, name="Adam",
                 **kwargs) -> None:
        super().__init__()
        self.lr = _learning_rate("Adam", learning_rate, kwargs) if learning_rate is not None or "lr" in kwargs \
            else 0.001
        _no_extras("Adam", kwargs)
        if amsgrad is not False:
            raise NotYetAvailableError(f"Adam: amsgrad={amsgrad!r} is not available (only False)")
        self.beta1, self.beta2, self.epsilon, self.amsgrad, self.name = beta_1, beta_2, epsilon, amsgrad, name

    def create_ffhandle(self, ffmodel):
        self._ffhandle = AdamOptimizer(ffmodel, self.lr, self.beta1, self.beta2, epsilon=self.epsilon)
        return self._ffhandle


class RMSprop(Optimizer):
    """RMSprop (flexrt's ``RMSpropOptimizer``: ``torch.optim.RMSprop``'s step, ``rho`` its ``alpha``).
    ``epsilon`` is added to the root of the mean square, as torch adds it (Keras adds it under the
    root: the two differ only while the mean square is near epsilon squared)."""

    def __init__(self, learning_rate=None, rho=0.9, momentum=0.0, epsilon=1e-07, centered=False, name="RMSprop",
                 **kwargs) -> None:
        super().__init__()
        self.lr = _learning_rate("RMSprop", learning_rate, kwargs) if learning_rate is not None or "lr" in kwargs \
            else 0.001
        _no_extras("RMSprop", kwargs)
        if momentum != 0.0 or centered is not False:
            raise NotYetAvailableError(f"RMSprop: momentum={momentum!r}, centered={centered!r} are not available "
                                       f"(only momentum=0.0, centered=False)")
        self.rho = _check.number("RMSprop", "rho", rho, low=0.0, high=1.0)
        self.epsilon = _check.number("RMSprop", "epsilon", epsilon, low=0.0, low_open=True)
        self.name = name

    def create_ffhandle(self, ffmodel):
        self._ffhandle = RMSpropOptimizer(ffmodel, self.lr, self.rho, self.epsilon)
        return self._ffhandle


class Adagrad(Optimizer):
    """Adagrad (flexrt's ``AdagradOptimizer``: ``torch.optim.Adagrad``'s step), Keras' defaults
    (accumulators start at 0.1); ``epsilon`` is added as torch adds it (see ``RMSprop``)."""

    def __init__(self, learning_rate=None, initial_accumulator_value=0.1, epsilon=1e-07, name="Adagrad",
                 **kwargs) -> None:
        super().__init__()
        self.lr = _learning_rate("Adagrad", learning_rate, kwargs) if learning_rate is not None or "lr" in kwargs \
            else 0.001
        _no_extras("Adagrad", kwargs)
        self.initial_accumulator_value = _check.number("Adagrad", "initial_accumulator_value",
                                                       initial_accumulator_value, low=0.0)
        self.epsilon = _check.number("Adagrad", "epsilon", epsilon, low=0.0, low_open=True)
        self.name = name

    def create_ffhandle(self, ffmodel):
        self._ffhandle = AdagradOptimizer(ffmodel, self.lr, initial_accumulator_value=self.initial_accumulator_value,
                                          eps=self.epsilon)
        return self._ffhandle


_BY_NAME = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adagrad": Adagrad}


def get(identifier: Any) -> Optimizer:
    """An Optimizer, or a Keras name (``'sgd'``, ``'adam'``: the defaults) -> an Optimizer."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    raise ConfigError(f"compile: unknown optimizer {identifier!r}; valid: SGD(...), Adam(...), RMSprop(...), "
                      f"Adagrad(...) or one of "
                      f"{', '.join(repr(n) for n in _BY_NAME)}")
