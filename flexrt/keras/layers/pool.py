"""``MaxPooling2D`` and ``AveragePooling2D`` of channels-first ``(N, C, H, W)`` tensors.

``strides`` defaults to ``pool_size`` (Keras). ``padding``: 'valid', 'same' or an explicit pair,
as ``Conv2D``'s. An average over padding counts the padded zeros (FlexFlow's, cuDNN's
INCLUDE_PADDING); Keras' 'same' average leaves them out, so ``AveragePooling2D(padding='same')``
where it pads raises ``NotYetAvailableError`` (explicit padding keeps FlexFlow's meaning).

Entry points: ``Pooling2D``, ``MaxPooling2D``, ``AveragePooling2D``.
"""

from __future__ import annotations

from flexrt.errors import NotYetAvailableError, ShapeError
from flexrt.keras.layers._common import one_of, padding_of, pair, refuse
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
        if not one_of(data_format, (None, "channels_first")):
            refuse(where, data_format=(data_format, "channels_first"))
        self.pool_type = pool_type

    def lower(self, ffmodel, inputs, name, shared):
        x = inputs[0]
        if x.num_dims != 4:
            raise ShapeError(f"the input must be (N, C, H, W), got shape {x.dims}")
        pad = resolve_padding(f"{self.layer_type} '{self.name}'", self.padding, x.dims, self.pool_size, self.strides)
        if self.padding == "same" and self.pool_type is PoolType.POOL_AVG and any(pad):
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
