"""Argument helpers shared by the Keras layers: activations, pairs, padding, unsupported options."""

from __future__ import annotations

import numbers

from typing import Any, Optional

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.model import ActiMode

# Keras activation name -> (the ActiMode a dense / conv2d fuses, or None; the FFModel method applying it alone)
ACTIVATIONS = {
    "linear": (ActiMode.AC_MODE_NONE, None),
    "relu": (ActiMode.AC_MODE_RELU, "relu"),
    "sigmoid": (ActiMode.AC_MODE_SIGMOID, "sigmoid"),
    "tanh": (ActiMode.AC_MODE_TANH, "tanh"),
    "gelu": (ActiMode.AC_MODE_GELU, "gelu"),
    "elu": (None, "elu"),
    "softmax": (None, "softmax"),
    "exponential": (None, "exp"),
}


def activation_of(where: str, activation: Any) -> str:
    """A Keras activation (None or a name) -> its name ('linear' for None)."""
    if activation is None:
        return "linear"
    if isinstance(activation, str) and activation in ACTIVATIONS:
        return activation
    raise ConfigError(f"{where}: unknown activation {activation!r}; valid: None, "
                      f"{', '.join(repr(a) for a in ACTIVATIONS)}")


def apply_activation(ffmodel, x, activation: str, name: str):
    """``x`` through ``activation`` as its own FFModel layer (named ``name``); 'linear' adds nothing."""
    method = ACTIVATIONS[activation][1]
    if method is None:
        return x
    return getattr(ffmodel, method)(x, name=name)


def lower_fused(ffmodel, activation: str, build, name: str):
    """Build an operator with ``activation`` fused where it can be (``build(acti_mode)``), else followed by
    the activation as its own layer ``{name}.{activation}``."""
    mode = ACTIVATIONS[activation][0]
    if mode is not None:
        return build(mode)
    return apply_activation(ffmodel, build(ActiMode.AC_MODE_NONE), activation, f"{name}.{activation}")


def pair(where: str, arg: str, value: Any) -> tuple[int, int]:
    """An int or a pair of positive ints (Keras' kernel_size, strides, pool_size)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in value):
        raise ConfigError(f"{where}: {arg} must be a positive integer or a pair of them, e.g. (3, 3), got {value!r}")
    return int(value[0]), int(value[1])


def padding_of(where: str, padding: Any):
    """'valid' -> (0, 0); 'same' stays 'same' (resolved against the input); a pair of ints >= 0."""
    if same(padding, "valid"):
        return (0, 0)
    if same(padding, "same"):
        return "same"
    if isinstance(padding, (list, tuple)) and len(padding) == 2 and \
            all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in padding):
        return int(padding[0]), int(padding[1])
    raise ConfigError(f"{where}: padding must be 'valid', 'same' or a pair of integers >= 0 (FlexFlow's explicit "
                      f"padding), got {padding!r}")


def same_padding(where: str, axis: str, size: int, kernel: int, stride: int) -> int:
    """The padding on each side that gives Keras' 'same' output, ceil(size / stride) positions (the
    total FlexFlow computes too). An odd total needs one more row on one side (TensorFlow pads the end),
    which the symmetric padding of flexrt's conv2d / pool2d cannot express: NotYetAvailableError."""
    total = max(kernel - stride, 0) if size % stride == 0 else max(kernel - size % stride, 0)
    if total % 2:
        raise NotYetAvailableError(
            f"{where}: padding='same' over {axis} {size} with kernel {kernel} and stride {stride} needs {total} "
            f"padding rows, split unevenly ({total // 2} before, {total - total // 2} after); conv2d and pool2d pad "
            f"both sides alike; give explicit padding=(p, p)")
    return total // 2


def same(value: Any, default: Any) -> bool:
    """Whether an option's ``value`` is ``default``; False, not an error, where ``==`` gives no plain
    truth value (a NumPy array passed for a flag or a name)."""
    if value is default:
        return True
    try:
        return bool(value == default)
    except (ValueError, TypeError):
        return False


def one_of(value: Any, choices: tuple) -> bool:
    return any(same(value, c) for c in choices)


def refuse(where: str, **given: Any) -> None:
    """NotYetAvailableError for an option given other than its default; each keyword is (value, default)."""
    for arg, (value, default) in given.items():
        if same(value, default):
            continue
        raise NotYetAvailableError(f"{where}: {arg}={value!r} is not available (only {default!r})")


def initializer_handle(where: str, arg: str, value: Any):
    from flexrt.keras import initializers
    return initializers.get(value, f"{where}: {arg}").ffhandle


def check_regularizer(where: str, arg: str, value: Optional[Any], applied: bool = False):
    """``value`` if it is a regularizer the runtime applies here (``applied``: a Dense kernel's), None
    for None; a regularizer anywhere else is refused rather than trained without."""
    if value is None:
        return None
    from flexrt.keras.regularizers import Regularizer
    if not isinstance(value, Regularizer):
        raise ConfigError(f"{where}: {arg} must be a regularizer (L1(...), L2(...)) or None, got {value!r}")
    if applied:
        return value
    raise NotYetAvailableError(f"{where}: {arg}={value!r}: flexrt applies regularizers to Dense kernels only "
                               f"(the loss would be trained without this one); leave {arg}=None")
