"""``Conv2D``: 2-D convolution of channels-first ``(N, C, H, W)`` tensors (FlexFlow's layout), or of
channels-last ``(N, H, W, C)`` ones with ``data_format='channels_last'`` (or the backend's
``set_image_data_format``): transposed to channels-first around the FFModel convolution.

Kernel ``(filters, C / groups, kh, kw)``, bias ``(filters,)``. ``padding`` is 'valid', 'same'
(Keras' output size ceil(H / stride); see ``_common.same_padding``) or FlexFlow's explicit pair.
``input_shape`` is ``(C, H, W)`` (or FlexFlow's ``(N, C, H, W)``, whose batch is ignored).

Entry point: ``Conv2D``.
"""

from __future__ import annotations

import numbers

from flexrt.errors import ConfigError
from flexrt.keras.layers._common import (activation_of, check_regularizer, data_format_of, initializer_handle,
                                         lower_fused, lower_image, padding_of, pair, refuse, same_padding)
from flexrt.keras.layers.base_layer import Layer


def _image_input_shape(input_shape):
    """FlexFlow accepts (N, C, H, W) too; Keras' form is (C, H, W)."""
    if isinstance(input_shape, (list, tuple)) and len(input_shape) == 4:
        return tuple(input_shape[1:])
    return input_shape


class Conv2D(Layer):
    """2-D convolution (channels first)."""

    def __init__(self, filters, kernel_size=0, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, input_shape=None, **kwargs) -> None:
        # Keras' positional order (filters, kernel_size, strides, ...); FlexFlow's scripts name every
        # argument, and its positional (filters, input_shape, kernel_size) is read too: an image shape
        # has 3 dimensions, a kernel size 1 or 2
        if input_shape is None and isinstance(kernel_size, (list, tuple)) and len(kernel_size) == 3:
            input_shape, kernel_size, strides = kernel_size, strides, (1, 1)
        super().__init__("conv2d", "Conv2D", input_shape=_image_input_shape(input_shape), **kwargs)
        where = f"Conv2D '{self.name}'"
        if isinstance(filters, bool) or not isinstance(filters, numbers.Integral) or filters < 1:
            raise ConfigError(f"{where}: filters must be a positive integer, got {filters!r}")
        self.filters = self.out_channels = int(filters)
        self.kernel_size = pair(where, "kernel_size", kernel_size)
        self.strides = self.stride = pair(where, "strides", strides)
        self.padding = padding_of(where, padding)
        self.data_format = data_format_of(where, data_format)
        if pair(where, "dilation_rate", dilation_rate) != (1, 1):
            refuse(where, dilation_rate=(dilation_rate, (1, 1)))
        if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
            raise ConfigError(f"{where}: groups must be a positive integer, got {groups!r}")
        self.groups = int(groups)
        self.activation = activation_of(where, activation)
        if not isinstance(use_bias, bool):
            raise ConfigError(f"{where}: use_bias must be True or False, got {use_bias!r}")
        self.use_bias = use_bias
        self.kernel_initializer = initializer_handle(where, "kernel_initializer", kernel_initializer)
        self.bias_initializer = initializer_handle(where, "bias_initializer", bias_initializer)
        for arg, value in (("kernel_regularizer", kernel_regularizer), ("bias_regularizer", bias_regularizer),
                           ("activity_regularizer", activity_regularizer)):
            check_regularizer(where, arg, value)
        refuse(where, kernel_constraint=(kernel_constraint, None), bias_constraint=(bias_constraint, None))

    def lower(self, ffmodel, inputs, name, shared):
        where = f"Conv2D '{self.name}'"
        return lower_image(where, ffmodel, inputs[0], self.data_format, name,
                           lambda x: self._lower_nchw(ffmodel, x, name, shared))

    def _lower_nchw(self, ffmodel, x, name, shared):
        pad = resolve_padding(f"Conv2D '{self.name}'", self.padding, x.dims, self.kernel_size, self.strides)
        kh, kw = self.kernel_size
        sh, sw = self.strides

        def build(mode):
            return ffmodel.conv2d(x, self.filters, kh, kw, sh, sw, pad[0], pad[1], mode, self.groups, self.use_bias,
                                  shared, self.kernel_initializer, self.bias_initializer, name=name)
        return lower_fused(ffmodel, self.activation, build, name)


def resolve_padding(where: str, padding, dims, kernel, strides) -> tuple[int, int]:
    if padding != "same":
        return padding
    return (same_padding(where, "height", dims[2], kernel[0], strides[0]),
            same_padding(where, "width", dims[3], kernel[1], strides[1]))
