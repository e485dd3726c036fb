"""Fused activations (FlexFlow ``ActiMode``) and the scalar functions element-wise ops share."""

from __future__ import annotations

import math

from flexrt.ir.enums import ActiMode


def gelu(xp, x):
    # exact GELU: x * Phi(x); erf through the array module when it has one (CuPy does, NumPy does not)
    erf = getattr(xp, "erf", None)
    if erf is None:
        from math import erf as _erf
        erf = xp.vectorize(_erf, otypes=[x.dtype])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def sigmoid(xp, x):
    return 1.0 / (1.0 + xp.exp(-x))


def apply_activation(xp, mode: ActiMode, y):
    if mode is ActiMode.AC_MODE_NONE:
        return y
    if mode is ActiMode.AC_MODE_RELU:
        return xp.maximum(y, 0)
    if mode is ActiMode.AC_MODE_SIGMOID:
        return sigmoid(xp, y)
    if mode is ActiMode.AC_MODE_TANH:
        return xp.tanh(y)
    if mode is ActiMode.AC_MODE_GELU:
        return gelu(xp, y)
    raise ValueError(f"unknown activation {mode}")


def gelu_grad(xp, x):
    """d gelu(x) / dx = Phi(x) + x * phi(x)."""
    cdf = gelu(xp, x) / xp.where(x == 0, 1.0, x)
    cdf = xp.where(x == 0, 0.5, cdf)
    return cdf + x * xp.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def activation_grad(xp, mode: ActiMode, y, dy, pre=None):
    """Gradient before a fused activation from its output ``y`` and the output gradient ``dy``;
    GELU needs the pre-activation values ``pre`` (a callable that recomputes them)."""
    if mode is ActiMode.AC_MODE_NONE:
        return dy
    if mode is ActiMode.AC_MODE_RELU:
        return dy * (y > 0)
    if mode is ActiMode.AC_MODE_SIGMOID:
        return dy * y * (1 - y)
    if mode is ActiMode.AC_MODE_TANH:
        return dy * (1 - y * y)
    if mode is ActiMode.AC_MODE_GELU:
        return dy * gelu_grad(xp, pre())
    raise ValueError(f"unknown activation {mode}")
