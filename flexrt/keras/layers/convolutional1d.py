"""Keras' 1-D layers over sequences: ``Conv1D``, ``MaxPooling1D``, ``AveragePooling1D``.

A sequence batch is ``(N, steps, channels)`` (``data_format='channels_last'``, Keras' default for
these layers: an Embedding's output) or ``(N, channels, steps)`` (``'channels_first'``). Each runs as
the 2-D layer with a ``(1, k)`` window on the batch seen as ``(N, channels, 1, steps)``
(``lower_sequence``): the same FFModel conv2d / pool2d, so every strategy and the runtime apply.
``padding``: 'valid', 'same' (Keras' ceil(steps / stride) outputs, refused where it pads unevenly,
as for Conv2D) or an int p (FlexFlow-style explicit padding on both ends); 'causal' is refused.
The kernel is ``(filters, channels / groups, 1, k)``.

Entry points: ``Conv1D``, ``MaxPooling1D``, ``AveragePooling1D``.
"""

from __future__ import annotations

import numbers

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.keras.layers._common import one_of, same, same_padding
from flexrt.keras.layers.base_layer import InnerWeights, Layer
from flexrt.keras.layers.convolutional import Conv2D
from flexrt.keras.layers.pool import Pooling2D
from flexrt.model import PoolType

_FORMATS = ("channels_last", "channels_first")


def _int(where: str, arg: str, value) -> int:
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{where}: {arg} must be a positive integer (or a 1-tuple of one), got {value!r}")
    return int(value)


def _padding(where: str, padding):
    """'valid' / 'same' / an int p -> the 2-D form: (0, 0), 'same', (0, p)."""
    if same(padding, "causal"):
        raise NotYetAvailableError(f"{where}: padding='causal' pads the start only; flexrt's conv2d pads both "
                                   f"ends alike; give 'valid', 'same' or an explicit int")
    if same(padding, "valid"):
        return (0, 0)
    if same(padding, "same"):
        return "same"
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool) and padding >= 0:
        return (0, int(padding))
    raise ConfigError(f"{where}: padding must be 'valid', 'same' or an integer >= 0, got {padding!r}")


def _data_format(where: str, data_format) -> str:
    if data_format is None:
        return "channels_last"
    if not one_of(data_format, _FORMATS):
        raise ConfigError(f"{where}: data_format={data_format!r}; valid: 'channels_last' (the default: (N, steps, "
                          f"channels)), 'channels_first'")
    return str(data_format)


def resolved(where: str, padding, steps: int, kernel: int, stride: int) -> tuple[int, int]:
    """The 2-D padding of a (1, kernel) window: 'same' resolved over ``steps`` (an uneven split refused,
    naming the int padding to give instead)."""
    if padding != "same":
        return padding
    return (0, same_padding(where, "steps", steps, kernel, stride, "padding=p (an int, both ends)"))


def lower_sequence(where: str, ffmodel, x, data_format: str, name: str, build):
    """``build(x4)`` on the sequence batch ``x`` seen as (N, channels, 1, steps); the result
    (N, F, 1, steps') back in ``data_format``."""
    if x.num_dims != 3:
        shape = "(N, steps, channels)" if data_format == "channels_last" else "(N, channels, steps)"
        raise ShapeError(f"{where}: takes a sequence batch {shape}, got shape {list(x.dims)}")
    if data_format == "channels_last":
        x = ffmodel.transpose(x, [0, 2, 1], name=f"{name}_to_ncl")
    n, c, steps = x.dims
    y = build(ffmodel.reshape(x, [n, c, 1, steps], name=f"{name}_to_nc1l"))
    y = ffmodel.reshape(y, [y.dims[0], y.dims[1], y.dims[3]], name=f"{name}_to_ncl_out")
    return ffmodel.transpose(y, [0, 2, 1], name=f"{name}_to_nlc") if data_format == "channels_last" else y


class Conv1D(InnerWeights, Layer):
    """1-D convolution: ``Conv2D`` with a (1, kernel_size) kernel (module doc)."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1, groups=1,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, input_shape=None, **kwargs) -> None:
        super().__init__("conv1d", "Conv1D", input_shape=input_shape, **kwargs)
        where = f"Conv1D '{self.name}'"
        k, s = _int(where, "kernel_size", kernel_size), _int(where, "strides", strides)
        self.dilation_rate = (_int(where, "dilation_rate", dilation_rate),)
        self.data_format = _data_format(where, data_format)
        self.kernel_size, self.strides, self.padding = (k,), (s,), padding
        self._padding = _padding(where, padding)
        self._conv = Conv2D(filters, (1, k), (1, s), self._padding, "channels_first", (1, self.dilation_rate[0]), groups,
                            activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                            bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint,
                            name=f"{self.name}.conv2d")
        self.filters, self.activation, self.use_bias = self._conv.filters, self._conv.activation, self._conv.use_bias

    def lower(self, ffmodel, inputs, name, shared):
        where = f"Conv1D '{self.name}'"

        def build(x):
            span = (self.kernel_size[0] - 1) * self.dilation_rate[0] + 1
            pad = resolved(where, self._padding, x.dims[3], span, self.strides[0])
            return self._conv._lower_nchw(ffmodel, x, name, shared, padding=pad)
        return lower_sequence(where, ffmodel, inputs[0], self.data_format, name, build)

    def _inner(self) -> Layer:     # the weights are the Conv2D's (a dilated one's read as (filters, C, 1, k))
        return self._conv


class _Pooling1D(Layer):
    shares_weights = False

    def __init__(self, pool_size, strides, padding, data_format, default_name, layer_type, pool_type, **kwargs):
        super().__init__(default_name, layer_type, **kwargs)
        where = f"{layer_type} '{self.name}'"
        k = _int(where, "pool_size", pool_size)
        s = k if strides is None else _int(where, "strides", strides)
        self.data_format = _data_format(where, data_format)
        self.pool_size, self.strides, self._padding = (k,), (s,), _padding(where, padding)
        self._pool = Pooling2D((1, k), (1, s), self._padding, f"{default_name}.pool2d", pool_type,
                               layer_type, "channels_first", name=f"{self.name}.pool2d")

    def lower(self, ffmodel, inputs, name, shared):
        where = f"{self.layer_type} '{self.name}'"

        def build(x):
            pad = resolved(where, self._padding, x.dims[3], self.pool_size[0], self.strides[0])
            if self._padding == "same" and self._pool.pool_type is PoolType.POOL_AVG and any(pad):
                raise NotYetAvailableError(
                    f"{where}: padding='same' pads {pad[1]} step(s) at each end here; Keras' average leaves the "
                    f"padding out of each window's count, flexrt's pool2d counts it (cuDNN's INCLUDE_PADDING, "
                    f"FlexFlow's); give padding={pad[1]} for that meaning")
            return self._pool._lower_nchw(ffmodel, x, name, padding=pad)
        return lower_sequence(where, ffmodel, inputs[0], self.data_format, name, build)


class MaxPooling1D(_Pooling1D):
    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(pool_size, strides, padding, data_format, "maxpool1d", "MaxPooling1D", PoolType.POOL_MAX,
                         **kwargs)


class AveragePooling1D(_Pooling1D):
    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(pool_size, strides, padding, data_format, "averagepool1d", "AveragePooling1D",
                         PoolType.POOL_AVG, **kwargs)
