"""Weight initializers with FlexFlow's kinds, deterministic for a seed, for any array module ``xp``.

Values come from ``numpy.random.Generator(PCG64(seed))`` in float64, are cast to ``dtype`` and moved
with ``xp.asarray``, so numpy and cupy give the same weights for the same seed.

Example:
    >>> import numpy as np
    >>> w = initialize(np, "glorot_uniform", (4, 3), np.float32, seed=0, fan_in=4, fan_out=3)
    >>> bool(np.all(np.abs(w) <= np.sqrt(6 / 7)))
    True

Entry points: ``initialize``, ``fans``, ``INITIALIZERS``.
"""

from __future__ import annotations

import math

import numpy as np

from flexrt.errors import ConfigError, ShapeError


def _glorot(rng, shape, fan_in, fan_out, **params):
    if fan_in is None or fan_out is None or fan_in + fan_out <= 0:
        raise ConfigError(f"glorot_uniform needs positive fan_in and fan_out, got {fan_in}, {fan_out}")
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape)


def _zero(rng, shape, fan_in, fan_out, **params):
    return np.zeros(shape)


def _uniform(rng, shape, fan_in, fan_out, min: float = 0.0, max: float = 1.0):
    if not min <= max:
        raise ConfigError(f"uniform: min must be <= max, got min={min}, max={max}")
    return rng.uniform(min, max, size=shape)


def _normal(rng, shape, fan_in, fan_out, mean: float = 0.0, stddev: float = 1.0):
    if stddev < 0:
        raise ConfigError(f"normal: stddev must be >= 0, got {stddev}")
    return rng.normal(mean, stddev, size=shape)


def _one(rng, shape, fan_in, fan_out):
    return np.ones(shape)


# kind -> (sampler, accepted keyword parameters); FlexFlow's GlorotUniformInitializer, ZeroInitializer,
# UniformInitializer(min, max) and NormInitializer(mean, stddev); "one" is the start of normalization
# scales (FlexFlow's batch and layer norm set their scale to ones).
INITIALIZERS = {
    "glorot_uniform": (_glorot, ()),
    "zero": (_zero, ()),
    "one": (_one, ()),
    "uniform": (_uniform, ("min", "max")),
    "normal": (_normal, ("mean", "stddev")),
}


def fans(shape, op: str) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight: dense ``[in, out]``, conv ``[out, in/groups, kh, kw]``."""
    shape = tuple(shape)
    if op == "dense":
        if len(shape) != 2:
            raise ShapeError(f"fans: a dense weight is [in, out], got shape {list(shape)}")
        return shape[0], shape[1]
    if op == "conv":
        if len(shape) != 4:
            raise ShapeError(f"fans: a conv weight is [out, in/groups, kh, kw], got shape {list(shape)}")
        field = shape[2] * shape[3]
        return shape[1] * field, shape[0] * field
    raise ConfigError(f"fans: unknown weight layout {op!r}; valid: dense, conv")


def initialize(xp, kind: str, shape, dtype, seed: int = 0, fan_in: int | None = None,
               fan_out: int | None = None, **params):
    """A new array of ``shape`` and ``dtype`` drawn by initializer ``kind`` from ``seed``."""
    try:
        sampler, accepted = INITIALIZERS[kind]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown initializer {kind!r}; valid: {', '.join(INITIALIZERS)}") from None
    extra = sorted(set(params) - set(accepted))
    if extra:
        raise ConfigError(f"initializer {kind!r} takes parameters ({', '.join(accepted) or 'none'}), "
                          f"got {', '.join(extra)}")
    rng = np.random.Generator(np.random.PCG64(seed))
    values = sampler(rng, tuple(shape), fan_in, fan_out, **params).astype(dtype)
    return values if xp is np else xp.asarray(values)
