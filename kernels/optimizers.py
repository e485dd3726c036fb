"""Optimizer updates, in place, matching ``torch.optim.SGD``, ``torch.optim.Adam``,
``torch.optim.RMSprop`` (without momentum or centering) and ``torch.optim.Adagrad`` exactly.

Each update takes the weight ``w``, its gradient ``g`` and a per-weight ``state`` dict that it fills
lazily (no arrays until the first step that needs them), for any array module ``xp``. Weight decay is
L2 added to the gradient (torch's ``Adam``, not ``AdamW``); SGD's momentum buffer starts as the
first gradient, without dampening, and Nesterov steps by ``g + momentum * buf``.

Example:
    >>> import numpy as np
    >>> w, state = np.ones(2), {}
    >>> sgd_update(np, w, np.full(2, 0.5), state, lr=0.1)
    >>> w
    array([0.95, 0.95])

Mixed precision (``flexrt.ir.precision``): a float16 weight is updated through a float32 master
copy (``master_step``: the gradient cast up and unscaled, the step taken on the master and its
float32 state, the weight set to the master rounded), and ``LossScaler`` scales the loss so that
small float16 gradients do not flush to zero, backing off when a step overflows (the defaults of
``torch.cuda.amp.GradScaler``).

A weight may carry a penalty (FlexFlow's ``kernel_regularizer``): ``penalized`` adds its gradient,
``factor * w`` (L2) or ``factor * sign(w)`` (L1), to the weight's gradient before the step, once per
weight whatever the strategy.

Entry points: ``OptimizerKind``, ``sgd_update``, ``adam_update``, ``rmsprop_update``, ``adagrad_update``,
``state_factor``, ``state_bytes``,
``master_step``, ``LossScaler``, ``penalized``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from flexrt.errors import ConfigError, ShapeError
from flexrt.kernels.kinds import NamedKind


class OptimizerKind(NamedKind):
    """What the simulator costs and the memory model counts: plain SGD, SGD with momentum (one
    buffer per weight), Adam (two moments per weight), RMSprop (a mean of squared gradients) and
    Adagrad (a sum of them). ``OptimizerKind.parse("adam")`` converts a name. FlexFlow has SGD and
    Adam; RMSprop and Adagrad are flexrt's, for Keras' optimizers of those names."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"
    RMSPROP = "rmsprop"
    ADAGRAD = "adagrad"

    @classmethod
    def noun(cls) -> str:
        return "optimizer"


# Optimizer-state arrays per weight, as multiples of the weight (simulator.simulate.OPTIMIZER_STATE).
STATE_FACTOR = {OptimizerKind.SGD: 0, OptimizerKind.MOMENTUM: 1, OptimizerKind.ADAM: 2, OptimizerKind.RMSPROP: 1,
                OptimizerKind.ADAGRAD: 1}


def state_factor(kind: OptimizerKind) -> int:
    """How many weight-sized arrays optimizer ``kind`` keeps per weight: SGD 0, MOMENTUM 1, ADAM 2,
    RMSPROP 1, ADAGRAD 1."""
    return STATE_FACTOR[kind]


def state_bytes(kind: OptimizerKind, weight_bytes: int = 1) -> int:
    """Bytes of optimizer state for ``weight_bytes`` bytes of weights (the factor when 1)."""
    return state_factor(kind) * weight_bytes


def state_bytes_of(kind_factor: int, elements: int, itemsize: int) -> int:
    """Bytes of optimizer state a weight of ``elements`` of ``itemsize`` bytes holds: ``kind_factor``
    weight-sized arrays, and for a 16-bit weight a float32 master copy with float32 state."""
    if itemsize == 2:
        return (kind_factor + 1) * elements * 4
    return kind_factor * elements * itemsize


def allocated_state_bytes(state: dict) -> int:
    """Bytes held by the arrays of one weight's ``state`` dict."""
    return sum(int(v.nbytes) for v in state.values() if hasattr(v, "nbytes"))


def _check(where: str, w, g) -> None:
    if tuple(w.shape) != tuple(g.shape) or w.dtype != g.dtype:
        raise ShapeError(f"{where}: gradient shape {list(g.shape)} dtype {g.dtype} does not match "
                         f"weight shape {list(w.shape)} dtype {w.dtype}")


def sgd_update(xp, w, g, state: dict, lr: float, momentum: float = 0.0, nesterov: bool = False,
               weight_decay: float = 0.0) -> None:
    """One SGD step on ``w`` in place; ``state["momentum_buffer"]`` appears at the first step with momentum."""
    _check("sgd_update", w, g)
    if nesterov and momentum == 0.0:
        raise ConfigError("sgd_update: nesterov=True needs momentum > 0, got momentum=0.0")
    d = g + w.dtype.type(weight_decay) * w if weight_decay else g
    if momentum:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = d.copy()
        else:
            buf *= w.dtype.type(momentum)
            buf += d
        d = d + w.dtype.type(momentum) * buf if nesterov else buf
    w -= w.dtype.type(lr) * d


def adam_update(xp, w, g, state: dict, alpha: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                epsilon: float = 1e-8, weight_decay: float = 0.0, step: int = 1) -> None:
    """One Adam step on ``w`` in place; ``step`` counts from 1 (bias correction).

    ``state`` holds ``exp_avg`` and ``exp_avg_sq``, allocated as zeros at the first call.
    """
    _check("adam_update", w, g)
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        raise ConfigError(f"adam_update: step counts from 1, got {step!r}")
    t = w.dtype.type
    if weight_decay:
        g = g + t(weight_decay) * w
    if "exp_avg" not in state:
        state["exp_avg"] = xp.zeros_like(w)
        state["exp_avg_sq"] = xp.zeros_like(w)
    m, v = state["exp_avg"], state["exp_avg_sq"]
    m += (g - m) * t(1.0 - beta1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
    v *= t(beta2)
    v += t(1.0 - beta2) * g * g
    step_size = alpha / (1.0 - beta1 ** step)
    denom = xp.sqrt(v) / t(math.sqrt(1.0 - beta2 ** step)) + t(epsilon)
    w -= t(step_size) * (m / denom)


def rmsprop_update(xp, w, g, state: dict, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8,
                   weight_decay: float = 0.0) -> None:
    """One RMSprop step on ``w`` in place (``torch.optim.RMSprop`` without momentum or centering):
    ``square_avg = alpha * square_avg + (1 - alpha) * g^2`` (zeros at first), then
    ``w -= lr * g / (sqrt(square_avg) + eps)``."""
    _check("rmsprop_update", w, g)
    t = w.dtype.type
    if weight_decay:
        g = g + t(weight_decay) * w
    sq = state.get("square_avg")
    if sq is None:
        sq = state["square_avg"] = xp.zeros_like(w)
    sq *= t(alpha)
    sq += t(1.0 - alpha) * g * g
    w -= t(lr) * (g / (xp.sqrt(sq) + t(eps)))


def adagrad_update(xp, w, g, state: dict, lr: float = 0.01, lr_decay: float = 0.0, weight_decay: float = 0.0,
                   initial_accumulator_value: float = 0.0, eps: float = 1e-10, step: int = 1) -> None:
    """One Adagrad step on ``w`` in place (``torch.optim.Adagrad``): ``sum += g^2`` (starting at
    ``initial_accumulator_value``), ``w -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps)``."""
    _check("adagrad_update", w, g)
    t = w.dtype.type
    if weight_decay:
        g = g + t(weight_decay) * w
    acc = state.get("sum")
    if acc is None:
        acc = state["sum"] = xp.full_like(w, t(initial_accumulator_value))
    acc += g * g
    clr = lr / (1.0 + (step - 1) * lr_decay)
    w -= t(clr) * (g / (xp.sqrt(acc) + t(eps)))


def master_step(update, xp, w, g, state: dict, inv_scale: float = 1.0, penalty=None, rounding=None) -> None:
    """One step of ``update(xp, w, g, state)`` for a 16-bit weight ``w``: on its float32 master copy
    (``state["master"]``, made from ``w`` at the first step) with the float32 gradient ``g *
    inv_scale`` (and the master's ``penalty``, see ``penalized``); ``w`` then holds the master
    rounded to its type, or by ``rounding(xp, master)`` (bfloat16 values in a float32 ``w``:
    ``flexrt.kernels.bfloat16``)."""
    master = state.get("master")
    if master is None:
        master = state["master"] = w.astype(xp.float32)
    g32 = g.astype(xp.float32)
    if inv_scale != 1.0:
        g32 *= xp.float32(inv_scale)
    update(xp, master, penalized(xp, g32, master, penalty), state)
    w[...] = master if rounding is None else rounding(xp, master)


def delayed(update: Callable) -> Callable:
    """``update(xp, w, g, state)`` with PipeDream-2BW's one-step delay: ``g`` was computed on the
    weights ``w`` the forwards read (W(t-1)); the newest weights W(t) wait in ``state["latest"]``
    (``w`` at the first step). The step makes ``W(t+1) = W(t) - lr * g`` there (``update`` on it, its
    optimizer state as ever) and gives ``w`` W(t) for the next iteration's forwards. A 16-bit
    weight's float32 master is ``w`` here (``master_step(delayed(update), ...)``)."""
    def step(xp, w, g, state: dict) -> None:
        latest = state.get("latest")
        if latest is None:
            latest = state["latest"] = w.copy()
        w[...] = latest
        update(xp, latest, g, state)
    return step


# The loss scales a LossScaler starts from: below 2^-24 (float16's smallest subnormal) every scaled
# gradient of a well-scaled loss underflows; above 2^64 every one overflows (and 1 / scale nears
# float32's smallest normal, where unscaling loses the gradient).
MIN_LOSS_SCALE, MAX_LOSS_SCALE = 2.0 ** -24, 2.0 ** 64


class LossScaler:
    """Dynamic loss scaling: the loss's gradient is multiplied by ``scale``; a step whose gradients
    hold an inf or NaN is skipped and the scale multiplied by ``backoff_factor``; after
    ``growth_interval`` steps in a row without one it is multiplied by ``growth_factor``. A fixed
    scale: ``dynamic=False``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, dynamic: bool = True) -> None:
        if not (isinstance(init_scale, (int, float)) and math.isfinite(init_scale) and init_scale > 0):
            raise ConfigError(f"loss scale must be a finite number > 0, got {init_scale!r}")
        if not MIN_LOSS_SCALE <= init_scale <= MAX_LOSS_SCALE:
            raise ConfigError(f"loss scale {init_scale!r} is outside 2^-24 .. 2^64: below, a float16 loss gradient "
                              f"(at least 2^-24 where it is not 0) flushes to zero; above, it overflows at once")
        if not growth_factor > 1 or not 0 < backoff_factor < 1:
            raise ConfigError(f"loss scaler: growth_factor must be > 1 and backoff_factor in (0, 1), got "
                              f"{growth_factor!r} and {backoff_factor!r}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ConfigError(f"loss scaler: growth_interval must be an integer >= 1, got {growth_interval!r}")
        self.scale = float(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval, self.dynamic = growth_interval, dynamic
        self.good_steps = 0
        self.skipped = 0

    def update(self, found_inf: bool) -> None:
        """After a step: ``found_inf`` says whether its gradients overflowed (and it was skipped)."""
        if found_inf:
            self.skipped += 1
            self.good_steps = 0
            if self.dynamic:
                self.scale *= self.backoff_factor
            return
        self.good_steps += 1
        if self.dynamic and self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0


def penalized(xp, g, w, penalty):
    """``g`` plus the gradient of the weight's ``penalty`` (None, or ("l2" | "l1", factor)): FlexFlow's
    L2 adds ``factor * w`` (a loss term ``factor / 2 * sum(w ** 2)``), L1 ``factor * sign(w)``."""
    if penalty is None:
        return g
    mode, factor = penalty
    if mode == "l2":
        return g + w * w.dtype.type(factor)
    if mode == "l1":
        return g + xp.sign(w) * w.dtype.type(factor)
    raise ConfigError(f"weight penalty {mode!r}: valid: l1, l2")
