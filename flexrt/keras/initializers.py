"""Keras weight initializers, as FlexFlow's Keras names them, each mapped to a ``flexrt.model``
initializer (``ffhandle``; None: the runtime's default, Glorot uniform for kernels and zeros for
biases, which is what Keras' defaults ``'glorot_uniform'`` and ``'zeros'`` mean).

A ``seed`` of None draws a fixed, distinct seed per initializer object (counting from 1 in the
order they are made), so that a run is reproducible and two layers do not start equal.

Example:
    >>> GlorotUniform(123).ffhandle
    GlorotUniformInitializer(seed=123)

Entry points: ``Zeros``, ``Ones``, ``GlorotUniform``, ``RandomUniform``, ``RandomNormal``,
``DefaultInitializer``, ``get``.
"""

from __future__ import annotations

import numbers

import itertools
from typing import Any, Optional

from flexrt.errors import ConfigError
from flexrt.model import GlorotUniformInitializer, NormInitializer, UniformInitializer, ZeroInitializer

_seeds = itertools.count(1)


def _seed(where: str, seed: Any) -> int:
    if seed is None:
        return next(_seeds)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ConfigError(f"{where}: seed must be an integer or None, got {seed!r}")
    return int(seed)


class Initializer:
    """Base class; ``ffhandle`` is the ``flexrt.model`` initializer (None: the runtime's default)."""

    _ffhandle: Any = None

    @property
    def ffhandle(self):
        return self._ffhandle

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._ffhandle!r})"


class DefaultInitializer(Initializer):
    """The runtime's default: Glorot uniform for a kernel, zeros for a bias."""


class Zeros(Initializer):
    def __init__(self) -> None:
        self._ffhandle = ZeroInitializer()


class Ones(Initializer):
    def __init__(self) -> None:
        self._ffhandle = UniformInitializer(0, 1.0, 1.0)


class GlorotUniform(Initializer):
    def __init__(self, seed: Optional[int] = None) -> None:
        self.seed = _seed("GlorotUniform", seed)
        self._ffhandle = GlorotUniformInitializer(self.seed)


class RandomUniform(Initializer):
    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: Optional[int] = None) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, _seed("RandomUniform", seed)
        self._ffhandle = UniformInitializer(self.seed, minval, maxval)


class RandomNormal(Initializer):
    """Normal with ``mean`` and ``stddev`` (FlexFlow's Keras passes them to a uniform initializer by
    mistake; this is Keras' meaning)."""

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: Optional[int] = None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, _seed("RandomNormal", seed)
        self._ffhandle = NormInitializer(self.seed, mean, stddev)


# Keras' string identifiers (the defaults map to the runtime's defaults)
_BY_NAME = {"glorot_uniform": DefaultInitializer, "zeros": Zeros, "zero": Zeros, "ones": Ones, "one": Ones,
            "random_uniform": RandomUniform, "uniform": RandomUniform, "random_normal": RandomNormal,
            "normal": RandomNormal}


def get(identifier: Any, where: str = "initializer") -> Initializer:
    """An Initializer, or a Keras name (``'glorot_uniform'``, ``'zeros'``, ...) -> an Initializer."""
    if isinstance(identifier, Initializer):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ConfigError(f"{where}: unknown initializer {identifier!r}; valid: an Initializer "
                      f"(GlorotUniform(seed), Zeros(), Ones(), RandomUniform(...), RandomNormal(...)) or one of "
                      f"{', '.join(repr(n) for n in _BY_NAME)}")
