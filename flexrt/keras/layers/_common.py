"""Argument helpers shared by the Keras layers: activations, pairs, padding, unsupported options."""

from __future__ import annotations

import numbers

from typing import Any, Optional

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.model import ActiMode, composites

# Keras activation name -> (the ActiMode a dense / conv2d fuses, or None; the FFModel method applying it alone,
# or a function (ffmodel, x, name) building it from FFModel's element-wise layers: flexrt.model.composites)
ACTIVATIONS = {
    "linear": (ActiMode.AC_MODE_NONE, None),
    "relu": (ActiMode.AC_MODE_RELU, "relu"),
    "sigmoid": (ActiMode.AC_MODE_SIGMOID, "sigmoid"),
    "tanh": (ActiMode.AC_MODE_TANH, "tanh"),
    "gelu": (ActiMode.AC_MODE_GELU, "gelu"),
    "elu": (None, "elu"),
    "softmax": (None, "softmax"),
    "exponential": (None, "exp"),
    "relu6": (None, lambda ff, x, name: composites.capped_relu(ff, x, 6.0, name)),
    "swish": (None, composites.silu),
    "silu": (None, composites.silu),
    "softplus": (None, lambda ff, x, name: composites.softplus(ff, x, 1.0, name)),
    "softsign": (None, composites.softsign),
    "leaky_relu": (None, lambda ff, x, name: composites.leaky_relu(ff, x, 0.2, name)),   # Keras 3's default slope
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
    if callable(method):
        return method(ffmodel, x, name)
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


def same_padding(where: str, axis: str, size: int, kernel: int, stride: int, explicit: str = "padding=(p, p)") -> int:
    """The padding on each side that gives Keras' 'same' output, ceil(size / stride) positions (the
    total FlexFlow computes too). An odd total needs one more row on one side (TensorFlow pads the end),
    which the symmetric padding of flexrt's conv2d / pool2d cannot express: NotYetAvailableError."""
    total = max(kernel - stride, 0) if size % stride == 0 else max(kernel - size % stride, 0)
    if total % 2:
        raise NotYetAvailableError(
            f"{where}: padding='same' over {axis} {size} with kernel {kernel} and stride {stride} needs {total} "
            f"padding positions, split unevenly ({total // 2} before, {total - total // 2} after); conv2d and pool2d "
            f"pad both sides alike; give explicit {explicit}")
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


# ---- image data format ----------------------------------------------------------------------------
# FlexFlow's Keras reads images channels-first, (N, C, H, W); Keras' own default is channels-last.
# ``keras.backend.set_image_data_format`` changes the default of every layer made after it.
_FORMATS = ("channels_first", "channels_last")
_image_format = {"value": "channels_first"}


def image_data_format() -> str:
    return _image_format["value"]


_KEEP_LAYOUT = frozenset(("Activation", "Dropout", "BatchNormalization", "Add", "Subtract", "Multiply", "Maximum",
                          "Minimum", "Concatenate"))


def image_layout(t):
    """The data format ("channels_first" or "channels_last") of the layer that made Keras tensor ``t``,
    followed back through layers that keep their input's layout (activations, dropout, merges);
    None where it is unknown (an Input, a Reshape)."""
    for _ in range(10_000):
        if t is None or t.node is None:
            return None
        layer = t.from_layer
        fmt = getattr(layer, "data_format", None)
        if fmt in _FORMATS:
            return fmt
        if layer.layer_type not in _KEEP_LAYOUT or not t.node.inputs:
            return None
        t = t.node.inputs[0]
    return None


def set_image_data_format(data_format) -> None:
    if not one_of(data_format, _FORMATS):
        raise ConfigError(f"set_image_data_format: {data_format!r}; valid: {', '.join(map(repr, _FORMATS))}")
    _image_format["value"] = str(data_format)


def data_format_of(where: str, data_format) -> str:
    """A layer's ``data_format`` argument (None: the backend's ``image_data_format()``)."""
    if data_format is None:
        return image_data_format()
    if not one_of(data_format, _FORMATS):
        raise ConfigError(f"{where}: data_format={data_format!r}; valid: None (the backend's, now "
                          f"{image_data_format()!r}), {', '.join(map(repr, _FORMATS))}")
    return str(data_format)


def channels_first_input(where: str, x, data_format: str):
    """Check ``x`` is a 4-D image batch in ``data_format``; a ShapeError otherwise."""
    if x.num_dims == 4:
        return
    layout = "(N, C, H, W)" if data_format == "channels_first" else "(N, H, W, C)"
    raise ShapeError(f"the input must be {layout} ({data_format}), got shape {x.dims}")


def format_hint(x, data_format: str) -> str:
    """What to say when a channels-first image layer fails on ``x`` that looks channels-last."""
    if data_format == "channels_first" and x.num_dims == 4 and x.dims[3] in (1, 3, 4) and min(x.dims[1:3]) > 4:
        return (f" (the input {list(x.dims)} looks channels-last, (N, H, W, C): FlexFlow's Keras reads images "
                f"channels-first; pass data_format='channels_last' or call "
                f"keras.backend.set_image_data_format('channels_last') first)")
    return ""


def lower_image(where: str, ffmodel, x, data_format: str, name: str, build):
    """``build(x)`` on channels-first data (``x`` checked 4-D): for channels-last ``x``, transposed to
    (N, C, H, W) and the result (4-D) back to (N, H, W, C); a 2-D result (a global pooling's (N, C))
    stays as it is. A ShapeError of ``build`` on channels-first data that looks channels-last says so."""
    channels_first_input(where, x, data_format)
    if data_format == "channels_first":
        try:
            return build(x)
        except ShapeError as e:
            hint = format_hint(x, data_format)
            if not hint:
                raise
            raise ShapeError(f"{e}{hint}") from None
    y = build(ffmodel.transpose(x, [0, 3, 1, 2], name=f"{name}_to_nchw"))
    return ffmodel.transpose(y, [0, 2, 3, 1], name=f"{name}_to_nhwc") if y.num_dims == 4 else y
