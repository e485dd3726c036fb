"""Optimizers with FlexFlow's names and arguments: configuration values the runtime reads.

The model is the first argument, as in FlexFlow (``SGDOptimizer(ffmodel, 0.01)``); it is kept but
takes no part in equality. ``set_learning_rate`` changes the rate, as FlexFlow's does, for the next
updates of the model's running session when this is the model's optimizer.

``RMSpropOptimizer`` and ``AdagradOptimizer`` are flexrt's (FlexFlow has neither), for Keras'
``RMSprop`` and ``Adagrad``, with ``torch.optim``'s arguments and updates.

Entry points: ``SGDOptimizer``, ``AdamOptimizer``, ``RMSpropOptimizer``, ``AdagradOptimizer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flexrt.errors import ConfigError
from flexrt.model import _check


class Optimizer:
    """Base class of every optimizer."""

    __slots__ = ()

    def _set_rate(self, field_name: str, learning_rate) -> None:
        where = f"{type(self).__name__}.set_learning_rate"
        value = _check.number(where, "learning_rate", learning_rate, low=0.0, low_open=True)
        object.__setattr__(self, field_name, value)
        model = self.ffmodel
        if getattr(model, "optimizer", None) is self:
            model.set_optimizer(self)


def _check_model(where: str, ffmodel: Any) -> None:
    from flexrt.model.ffmodel import FFModel  # the model module imports this one
    if not isinstance(ffmodel, FFModel):
        raise ConfigError(f"{where}: the first argument must be the FFModel, got {ffmodel!r} "
                          f"(FlexFlow's form: {where}(ffmodel, ...))")


@dataclass(slots=True)
class SGDOptimizer(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum and weight decay."""

    ffmodel: Any = field(repr=False, compare=False)
    lr: float = 0.01
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    def __post_init__(self):
        _check_model("SGDOptimizer", self.ffmodel)
        object.__setattr__(self, "lr", _check.number("SGDOptimizer", "lr", self.lr, low=0.0, low_open=True))
        object.__setattr__(self, "momentum", _check.number("SGDOptimizer", "momentum", self.momentum, low=0.0))
        _check.flag("SGDOptimizer", "nesterov", self.nesterov)
        if self.nesterov and self.momentum == 0.0:
            raise ConfigError("SGDOptimizer: nesterov=True needs momentum > 0, got momentum=0.0")
        object.__setattr__(self, "weight_decay",
                           _check.number("SGDOptimizer", "weight_decay", self.weight_decay, low=0.0))

    def set_learning_rate(self, learning_rate: float) -> None:
        """The rate of the next updates (FlexFlow's ``set_learning_rate``)."""
        self._set_rate("lr", learning_rate)


@dataclass(slots=True)
class AdamOptimizer(Optimizer):
    """Adam (Kingma and Ba, 2015); ``alpha`` is the learning rate."""

    ffmodel: Any = field(repr=False, compare=False)
    alpha: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    epsilon: float = 1e-8

    def __post_init__(self):
        _check_model("AdamOptimizer", self.ffmodel)
        w = "AdamOptimizer"
        object.__setattr__(self, "alpha", _check.number(w, "alpha", self.alpha, low=0.0, low_open=True))
        object.__setattr__(self, "beta1", _check.number(w, "beta1", self.beta1, low=0.0, high=1.0, high_open=True))
        object.__setattr__(self, "beta2", _check.number(w, "beta2", self.beta2, low=0.0, high=1.0, high_open=True))
        object.__setattr__(self, "weight_decay", _check.number(w, "weight_decay", self.weight_decay, low=0.0))
        object.__setattr__(self, "epsilon", _check.number(w, "epsilon", self.epsilon, low=0.0, low_open=True))

    def set_learning_rate(self, learning_rate: float) -> None:
        """The rate (``alpha``) of the next updates (FlexFlow's ``set_learning_rate``)."""
        self._set_rate("alpha", learning_rate)


@dataclass(slots=True)
class RMSpropOptimizer(Optimizer):
    """RMSprop as ``torch.optim.RMSprop`` without momentum or centering: a mean of squared gradients
    (decay ``alpha``) divides each step (flexrt's; FlexFlow has none)."""

    ffmodel: Any = field(repr=False, compare=False)
    lr: float = 0.01
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self):
        w = "RMSpropOptimizer"
        _check_model(w, self.ffmodel)
        object.__setattr__(self, "lr", _check.number(w, "lr", self.lr, low=0.0, low_open=True))
        object.__setattr__(self, "alpha", _check.number(w, "alpha", self.alpha, low=0.0, high=1.0))
        object.__setattr__(self, "eps", _check.number(w, "eps", self.eps, low=0.0, low_open=True))
        object.__setattr__(self, "weight_decay", _check.number(w, "weight_decay", self.weight_decay, low=0.0))

    def set_learning_rate(self, learning_rate: float) -> None:
        """The rate of the next updates."""
        self._set_rate("lr", learning_rate)


@dataclass(slots=True)
class AdagradOptimizer(Optimizer):
    """Adagrad as ``torch.optim.Adagrad``: the sum of squared gradients (from
    ``initial_accumulator_value``) divides each step; the rate decays as ``lr / (1 + (t - 1) lr_decay)``
    (flexrt's; FlexFlow has none)."""

    ffmodel: Any = field(repr=False, compare=False)
    lr: float = 0.01
    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10

    def __post_init__(self):
        w = "AdagradOptimizer"
        _check_model(w, self.ffmodel)
        object.__setattr__(self, "lr", _check.number(w, "lr", self.lr, low=0.0, low_open=True))
        for name in ("lr_decay", "weight_decay", "initial_accumulator_value"):
            object.__setattr__(self, name, _check.number(w, name, getattr(self, name), low=0.0))
        object.__setattr__(self, "eps", _check.number(w, "eps", self.eps, low=0.0, low_open=True))

    def set_learning_rate(self, learning_rate: float) -> None:
        """The rate of the next updates."""
        self._set_rate("lr", learning_rate)
