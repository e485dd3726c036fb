"""``MaxPooling2D`` and ``AveragePooling2D`` of channels-first ``(N, C, H, W)`` tensors (or
channels-last with ``data_format``, as ``Conv2D``), and the global poolings: ``GlobalAveragePooling2D``
/ ``GlobalMaxPooling2D`` (``(N, C)`` out) and ``GlobalAveragePooling1D`` / ``GlobalMaxPooling1D`` of
``(N, steps, features)`` sequences (``(N, features)`` out).

``strides`` defaults to ``pool_size`` (Keras). ``padding``: 'valid', 'same' or an explicit pair,
as ``Conv2D``'s. An average over padding counts the padded zeros (FlexFlow's, cuDNN's
INCLUDE_PADDING); Keras' 'same' average leaves them out, so ``AveragePooling2D(padding='same')``
where it pads raises ``NotYetAvailableError`` (explicit padding keeps FlexFlow's meaning).

Entry points: ``Pooling2D``, ``MaxPooling2D``, ``AveragePooling2D``, ``GlobalAveragePooling2D``,
``GlobalMaxPooling2D``, ``GlobalAveragePooling1D``, ``GlobalMaxPooling1D``.
"""

from __future__ import annotations

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.keras.layers._common import data_format_of, lower_image, padding_of, pair
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras.layers.convolutional import resolve_padding
from flexrt.model import PoolType


class Pooling2D(Layer):
    """Max or average pooling (``pool_type``)."""

    shares_weights = False

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", default_name="pool2d",
                 pool_type=PoolType.POOL_MAX, layer_type="MaxPooling2D", data_format=None, **kwargs) -> None:
        super().__init__(default_name, layer_type, **kwargs)
        where = f"{layer_type} '{self.name}'"
        self.pool_size = self.kernel_size = pair(where, "pool_size", pool_size)
        self.strides = self.stride = self.pool_size if strides is None else pair(where, "strides", strides)
        self.padding = padding_of(where, padding)
        self.data_format = data_format_of(where, data_format)
        self.pool_type = pool_type

    def lower(self, ffmodel, inputs, name, shared):
        return lower_image(f"{self.layer_type} '{self.name}'", ffmodel, inputs[0], self.data_format, name,
                           lambda x: self._lower_nchw(ffmodel, x, name))

    def _lower_nchw(self, ffmodel, x, name, padding=None):
        """The pooling of channels-first ``x``; ``padding``: the layer's unless given (resolved by a 1-D one)."""
        padding = self.padding if padding is None else padding
        pad = resolve_padding(f"{self.layer_type} '{self.name}'", padding, x.dims, self.pool_size, self.strides)
        if padding == "same" and self.pool_type is PoolType.POOL_AVG and any(pad):
            raise NotYetAvailableError(
                f"padding='same' pads {pad} here; Keras' average leaves the padding out of each window's count, "
                f"flexrt's pool2d counts it (cuDNN's INCLUDE_PADDING, FlexFlow's); give explicit padding={pad} "
                f"for that meaning")
        return ffmodel.pool2d(x, self.pool_size[0], self.pool_size[1], self.strides[0], self.strides[1], pad[0], pad[1],
                              self.pool_type, name=name)


class MaxPooling2D(Pooling2D):
    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(pool_size, strides, padding, "maxpool2d", PoolType.POOL_MAX, "MaxPooling2D", data_format,
                         **kwargs)


class AveragePooling2D(Pooling2D):
    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(pool_size, strides, padding, "averagepool2d", PoolType.POOL_AVG, "AveragePooling2D",
                         data_format, **kwargs)


class _GlobalPooling(Layer):
    """A pooling over every spatial position (2-D: H and W; 1-D: the steps)."""

    shares_weights = False

    def __init__(self, pool_type: PoolType, layer_type: str, default_name: str, data_format=None, keepdims=False,
                 **kwargs) -> None:
        super().__init__(default_name, layer_type, **kwargs)
        where = f"{layer_type} '{self.name}'"
        if not isinstance(keepdims, bool):
            raise ConfigError(f"{where}: keepdims must be True or False, got {keepdims!r}")
        if keepdims:
            raise NotYetAvailableError(f"{where}: keepdims=True is not available (only False)")
        self.pool_type = pool_type
        self.data_format = data_format


class _GlobalPooling2D(_GlobalPooling):
    def __init__(self, pool_type, layer_type, default_name, data_format=None, keepdims=False, **kwargs) -> None:
        super().__init__(pool_type, layer_type, default_name, None, keepdims, **kwargs)
        self.data_format = data_format_of(f"{layer_type} '{self.name}'", data_format)

    def lower(self, ffmodel, inputs, name, shared):
        def build(x):   # (N, C, H, W) -> (N, C)
            if self.pool_type is PoolType.POOL_AVG:
                return ffmodel.mean(x, [2, 3], name=name)
            h, w = x.dims[2], x.dims[3]
            return ffmodel.flat(ffmodel.pool2d(x, h, w, h, w, 0, 0, PoolType.POOL_MAX, name=f"{name}_pool"), name=name)
        return lower_image(f"{self.layer_type} '{self.name}'", ffmodel, inputs[0], self.data_format, name, build)


class GlobalAveragePooling2D(_GlobalPooling2D):
    def __init__(self, data_format=None, keepdims=False, **kwargs) -> None:
        super().__init__(PoolType.POOL_AVG, "GlobalAveragePooling2D", "global_average_pooling2d", data_format,
                         keepdims, **kwargs)


class GlobalMaxPooling2D(_GlobalPooling2D):
    def __init__(self, data_format=None, keepdims=False, **kwargs) -> None:
        super().__init__(PoolType.POOL_MAX, "GlobalMaxPooling2D", "global_max_pooling2d", data_format, keepdims,
                         **kwargs)


class _GlobalPooling1D(_GlobalPooling):
    def __init__(self, pool_type, layer_type, default_name, data_format="channels_last", keepdims=False,
                 **kwargs) -> None:
        super().__init__(pool_type, layer_type, default_name, None, keepdims, **kwargs)
        where = f"{layer_type} '{self.name}'"
        if data_format not in ("channels_last", "channels_first"):
            raise ConfigError(f"{where}: data_format={data_format!r}; valid: 'channels_last' ((N, steps, features), "
                              f"Keras' default), 'channels_first' ((N, features, steps))")
        self.data_format = data_format

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if x.num_dims != 3:
            raise ShapeError(f"the input must be (N, steps, features) or, channels-first, (N, features, steps); "
                             f"got shape {x.dims}")
        steps = 1 if self.data_format == "channels_last" else 2
        if self.pool_type is PoolType.POOL_AVG:
            return ffmodel.mean(x, [steps], name=name)
        if steps == 1:   # (N, L, D) -> (N, D, L)
            x = ffmodel.transpose(x, [0, 2, 1], name=f"{name}_to_nfs")
        n, d, length = x.dims
        image = ffmodel.reshape(x, [n, d, length, 1], name=f"{name}_image")
        return ffmodel.flat(ffmodel.pool2d(image, length, 1, length, 1, 0, 0, PoolType.POOL_MAX, name=f"{name}_pool"),
                            name=name)


class GlobalAveragePooling1D(_GlobalPooling1D):
    def __init__(self, data_format="channels_last", keepdims=False, **kwargs) -> None:
        super().__init__(PoolType.POOL_AVG, "GlobalAveragePooling1D", "global_average_pooling1d", data_format,
                         keepdims, **kwargs)


class GlobalMaxPooling1D(_GlobalPooling1D):
    def __init__(self, data_format="channels_last", keepdims=False, **kwargs) -> None:
        super().__init__(PoolType.POOL_MAX, "GlobalMaxPooling1D", "global_max_pooling1d", data_format, keepdims,
                         **kwargs)
