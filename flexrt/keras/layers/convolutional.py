"""``Conv2D``: 2-D convolution of channels-first ``(N, C, H, W)`` tensors (FlexFlow's layout), or of
channels-last ``(N, H, W, C)`` ones with ``data_format='channels_last'`` (or the backend's
``set_image_data_format``): transposed to channels-first around the FFModel convolution.

Kernel ``(filters, C / groups, kh, kw)``, bias ``(filters,)``. ``padding`` is 'valid', 'same'
(Keras' output size ceil(H / stride); see ``_common.same_padding``) or FlexFlow's explicit pair.
``dilation_rate`` other than 1 (groups 1): the input's windows and a dense layer holding the kernel
(``flexrt.torch._windows``), whose weights read and write in the kernel's layout above.
``input_shape`` is ``(C, H, W)`` (or FlexFlow's ``(N, C, H, W)``, whose batch is ignored).

Entry point: ``Conv2D``.
"""

from __future__ import annotations

import numbers

import numpy as np

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras.layers._common import (activation_of, check_regularizer, data_format_of, initializer_handle,
                                         lower_fused, lower_image, padding_of, pair, refuse, same_padding)
from flexrt.keras.layers.base_layer import Layer
from flexrt.torch._build import apply_op
from flexrt.torch._windows import conv_weight, dense_kernel


def _image_input_shape(input_shape):
    """FlexFlow accepts (N, C, H, W) too; Keras' form is (C, H, W)."""
    if isinstance(input_shape, (list, tuple)) and len(input_shape) == 4:
        return tuple(input_shape[1:])
    return input_shape


class Conv2D(Layer):
    """2-D convolution (channels first)."""

    kind = ("conv2d", "Conv2D")       # (default name, layer type): a subclass's own

    def __init__(self, filters, kernel_size=0, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, input_shape=None, **kwargs) -> None:
        # Keras' positional order (filters, kernel_size, strides, ...); FlexFlow's scripts name every
        # argument, and its positional (filters, input_shape, kernel_size) is read too: an image shape
        # has 3 dimensions, a kernel size 1 or 2
        if input_shape is None and isinstance(kernel_size, (list, tuple)) and len(kernel_size) == 3:
            input_shape, kernel_size, strides = kernel_size, strides, (1, 1)
        super().__init__(*self.kind, input_shape=_image_input_shape(input_shape), **kwargs)
        where = f"{self.layer_type} '{self.name}'"
        if isinstance(filters, bool) or not isinstance(filters, numbers.Integral) or filters < 1:
            raise ConfigError(f"{where}: filters must be a positive integer, got {filters!r}")
        self.filters = self.out_channels = int(filters)
        self.kernel_size = pair(where, "kernel_size", kernel_size)
        self.strides = self.stride = pair(where, "strides", strides)
        self.padding = padding_of(where, padding)
        self.data_format = data_format_of(where, data_format)
        self.dilation_rate = pair(where, "dilation_rate", dilation_rate)
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
        where = f"{self.layer_type} '{self.name}'"
        return lower_image(where, ffmodel, inputs[0], self.data_format, name,
                           lambda x: self._lower_nchw(ffmodel, x, name, shared))

    def _lower_nchw(self, ffmodel, x, name, shared, padding=None, filters=None, groups=None):
        """The convolution of channels-first ``x``; ``padding``, ``filters``, ``groups``: the layer's unless
        given (Conv1D's resolved padding, a depthwise convolution's channels)."""
        where = f"{self.layer_type} '{self.name}'"
        kh, kw = self.kernel_size
        (dh, dw), (sh, sw) = self.dilation_rate, self.strides
        pad = resolve_padding(where, self.padding if padding is None else padding, x.dims,
                              ((kh - 1) * dh + 1, (kw - 1) * dw + 1), self.strides)
        filters, groups = filters or self.filters, groups or self.groups
        if (dh, dw) != (1, 1) and groups != 1:
            raise NotYetAvailableError(f"{where}: dilation_rate={self.dilation_rate} with groups={groups} (a grouped "
                                       f"or depthwise convolution); dilation is available with groups=1")

        def build(mode):
            if (dh, dw) != (1, 1):    # the windows and a dense layer (flexrt.torch._windows)
                fields = (filters, kh, kw, sh, sw, pad[0], pad[1], mode.value, 1, int(self.use_bias))
                keywords = (("dilation", (dh, dw)),) + ((("shares", shared),) if shared else ())
                return apply_op(ffmodel, "CONV2D_DILATED", [x], fields, keywords, name)
            return ffmodel.conv2d(x, filters, kh, kw, sh, sw, pad[0], pad[1], mode, groups, self.use_bias,
                                  shared, self.kernel_initializer, self.bias_initializer, name=name)
        return lower_fused(ffmodel, self.activation, build, name)

    # a dilated convolution's dense kernel [C kh kw, filters] is read and written as (filters, C, kh, kw)
    def _dilated(self) -> bool:
        return tuple(self.dilation_rate) != (1, 1)

    def _keras_shapes(self, shapes: tuple) -> tuple:
        if not self._dilated() or not shapes:
            return shapes
        (rows, out), kh, kw = shapes[0], *self.kernel_size
        return ((out, rows // (kh * kw), kh, kw),) + tuple(shapes[1:])

    def _keras_arrays(self, arrays: tuple) -> tuple:
        if not self._dilated() or not arrays:
            return arrays
        return (conv_weight(np.asarray(arrays[0]), *self.kernel_size),) + tuple(arrays[1:])

    def _ff_arrays(self, arrays: tuple) -> tuple:
        if not self._dilated() or not arrays:
            return arrays
        return (dense_kernel(np.asarray(arrays[0])),) + tuple(arrays[1:])


def resolve_padding(where: str, padding, dims, kernel, strides) -> tuple[int, int]:
    if padding != "same":
        return padding
    return (same_padding(where, "height", dims[2], kernel[0], strides[0]),
            same_padding(where, "width", dims[3], kernel[1], strides[1]))


class DepthwiseConv2D(Conv2D):
    """Keras' depthwise convolution: each input channel convolved with its own ``depth_multiplier``
    kernels (FFModel's conv2d with ``groups`` = the input's channels); kernel ``(C * depth_multiplier,
    1, kh, kw)`` in FlexFlow's layout, as Conv2D's."""

    kind = ("depthwise_conv2d", "DepthwiseConv2D")

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, depthwise_constraint=None, bias_constraint=None, **kwargs) -> None:
        if isinstance(depth_multiplier, bool) or not isinstance(depth_multiplier, numbers.Integral) or \
                depth_multiplier < 1:
            raise ConfigError(f"DepthwiseConv2D: depth_multiplier must be a positive integer, got {depth_multiplier!r}")
        super().__init__(int(depth_multiplier), kernel_size, strides, padding, data_format, dilation_rate, 1,
                         activation, use_bias, depthwise_initializer, bias_initializer, depthwise_regularizer,
                         bias_regularizer, activity_regularizer, depthwise_constraint, bias_constraint, **kwargs)
        self.depth_multiplier = int(depth_multiplier)

    def _lower_nchw(self, ffmodel, x, name, shared, padding=None, filters=None, groups=None):
        channels = x.dims[1]
        return super()._lower_nchw(ffmodel, x, name, shared, padding, channels * self.depth_multiplier, channels)


class SeparableConv2D(Layer):
    """Keras' separable convolution: a depthwise convolution (``depth_multiplier`` kernels per input
    channel, no bias) then a 1 x 1 convolution to ``filters`` with the bias and the activation. Its
    weights: the depthwise kernel (``{name}``), the pointwise kernel and bias (``{name}.pointwise``)."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1),
                 depth_multiplier=1, activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 pointwise_initializer="glorot_uniform", bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, pointwise_constraint=None, bias_constraint=None, **kwargs) -> None:
        super().__init__("separable_conv2d", "SeparableConv2D", **kwargs)
        self._depthwise = DepthwiseConv2D(kernel_size, strides, padding, depth_multiplier, "channels_first",
                                          dilation_rate, None, False, depthwise_initializer,
                                          depthwise_regularizer=depthwise_regularizer,
                                          depthwise_constraint=depthwise_constraint, name=f"{self.name}.depthwise")
        self._pointwise = Conv2D(filters, (1, 1), (1, 1), "valid", "channels_first", (1, 1), 1, activation, use_bias,
                                 pointwise_initializer, bias_initializer, pointwise_regularizer, bias_regularizer,
                                 activity_regularizer, pointwise_constraint, bias_constraint,
                                 name=f"{self.name}.pointwise")
        self.data_format = data_format_of(f"SeparableConv2D '{self.name}'", data_format)
        self.filters, self.kernel_size, self.strides = self._pointwise.filters, self._depthwise.kernel_size, \
            self._depthwise.strides

    def lower(self, ffmodel, inputs, name, shared):
        def build(x):
            y = self._depthwise._lower_nchw(ffmodel, x, name, shared)
            return self._pointwise._lower_nchw(ffmodel, y, f"{name}.pointwise",
                                               f"{shared}.pointwise" if shared else None)
        return lower_image(f"SeparableConv2D '{self.name}'", ffmodel, inputs[0], self.data_format, name, build)

    def _weight_layers(self, ffmodel, first) -> list:
        return [first, ffmodel.get_layer_by_name(f"{first.name}.pointwise")]
