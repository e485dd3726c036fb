"""Weight initializers with FlexFlow's names and arguments: configuration values the runtime reads.

Example:
    >>> UniformInitializer(7, -0.1, 0.1)
    UniformInitializer(seed=7, minv=-0.1, maxv=0.1)

Entry points: ``GlorotUniformInitializer``, ``ZeroInitializer``, ``UniformInitializer``, ``NormInitializer``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexrt.errors import ConfigError
from flexrt.model import _check


class Initializer:
    """Base class of every initializer (``isinstance`` checks in the layer methods use it)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class GlorotUniformInitializer(Initializer):
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010)."""

    seed: int

    def __post_init__(self):
        _check.integer("GlorotUniformInitializer", "seed", self.seed, low=0)


@dataclass(frozen=True, slots=True)
class ZeroInitializer(Initializer):
    """All zeros."""


@dataclass(frozen=True, slots=True)
class UniformInitializer(Initializer):
    """Uniform in [minv, maxv) (FlexFlow's names; ``min`` and ``max`` read the same values)."""

    seed: int
    minv: float
    maxv: float

    def __post_init__(self):
        _check.integer("UniformInitializer", "seed", self.seed, low=0)
        lo = _check.number("UniformInitializer", "minv", self.minv)
        hi = _check.number("UniformInitializer", "maxv", self.maxv, low=lo)
        if not math.isfinite(hi - lo):
            raise ConfigError(f"UniformInitializer: the range maxv - minv must be finite, got {hi!r} - {lo!r}")
        object.__setattr__(self, "minv", lo)
        object.__setattr__(self, "maxv", hi)

    @property
    def min(self) -> float:
        return self.minv

    @property
    def max(self) -> float:
        return self.maxv


@dataclass(frozen=True, slots=True)
class NormInitializer(Initializer):
    """Normal with ``mean`` and ``stddev``."""

    seed: int
    mean: float
    stddev: float

    def __post_init__(self):
        _check.integer("NormInitializer", "seed", self.seed, low=0)
        object.__setattr__(self, "mean", _check.number("NormInitializer", "mean", self.mean))
        # + 0.0: a stddev of -0.0 is 0 (NumPy refuses its sign)
        object.__setattr__(self, "stddev", _check.number("NormInitializer", "stddev", self.stddev, low=0.0) + 0.0)
