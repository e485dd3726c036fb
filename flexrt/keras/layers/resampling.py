"""``UpSampling2D``, ``ZeroPadding2D`` and ``Conv2DTranspose`` on channels-first ``(N, C, H, W)``
image batches (or channels-last ones with ``data_format='channels_last'`` / the backend's
``set_image_data_format``, transposed around the operators), built from FFModel's layers as the
PyTorch and ONNX front ends build F.interpolate, F.pad and ConvTranspose2d
(``flexrt.torch._composites``: constant resampling matrices, then a convolution).

- ``UpSampling2D(size, interpolation)``: each row and column repeated ``size`` times (nearest), or
  bilinear with half-pixel centers (TensorFlow's ``tf.image.resize``).
- ``ZeroPadding2D(padding)``: an int, a pair (rows, columns) or ((top, bottom), (left, right)).
- ``Conv2DTranspose(filters, kernel_size, strides, padding, output_padding)``: Keras' output sizes
  (``valid``: in * stride + max(kernel - stride, 0); ``same``: in * stride). Its kernel is FFModel's
  conv2d kernel (filters, C, kh, kw) of the equivalent stride-1 convolution over the dilated input
  (the transposed kernel, flipped), as this Keras' Conv2D keeps FlexFlow's (filters, C, kh, kw).
  A 'same' padding split unevenly is refused, as for Conv2D.

Entry points: ``UpSampling2D``, ``ZeroPadding2D``, ``Conv2DTranspose``.
"""

from __future__ import annotations

import numbers

from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras.layers._common import data_format_of, lower_fused, lower_image, one_of, pair
from flexrt.keras.layers.base_layer import Layer
from flexrt.keras.layers.convolutional import Conv2D
from flexrt.torch._build import apply_op


class UpSampling2D(Layer):
    shares_weights = False

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs) -> None:
        super().__init__("upsampling2d", "UpSampling2D", **kwargs)
        where = f"UpSampling2D '{self.name}'"
        self.size = pair(where, "size", size)
        self.data_format = data_format_of(where, data_format)
        if not one_of(interpolation, ("nearest", "bilinear")):
            raise ConfigError(f"{where}: interpolation={interpolation!r}; valid: 'nearest', 'bilinear'")
        self.interpolation = str(interpolation)

    def lower(self, ffmodel, inputs, name, shared):
        nearest = self.interpolation == "nearest"
        keywords = (("scale", tuple(float(s) for s in self.size)), ("mode", "nearest" if nearest else "linear"),
                    ("coords", "asymmetric" if nearest else "half_pixel"), ("rounding", "floor"))
        return lower_image(f"UpSampling2D '{self.name}'", ffmodel, inputs[0], self.data_format, name,
                           lambda x: apply_op(ffmodel, "INTERPOLATE", [x], (), keywords, name))


def _padding_pairs(where: str, padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """Keras' ZeroPadding2D padding as ((top, bottom), (left, right))."""
    def count(v):
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0
    if count(padding):
        return (int(padding), int(padding)), (int(padding), int(padding))
    if isinstance(padding, (list, tuple)) and len(padding) == 2:
        if all(count(v) for v in padding):
            return (int(padding[0]),) * 2, (int(padding[1]),) * 2
        if all(isinstance(p, (list, tuple)) and len(p) == 2 and all(count(v) for v in p) for p in padding):
            return (int(padding[0][0]), int(padding[0][1])), (int(padding[1][0]), int(padding[1][1]))
    raise ConfigError(f"{where}: padding must be an int >= 0, a pair (rows, columns) or ((top, bottom), (left, "
                      f"right)), got {padding!r}")


class ZeroPadding2D(Layer):
    shares_weights = False

    def __init__(self, padding=(1, 1), data_format=None, **kwargs) -> None:
        super().__init__("zeropadding2d", "ZeroPadding2D", **kwargs)
        where = f"ZeroPadding2D '{self.name}'"
        self.padding = _padding_pairs(where, padding)
        self.data_format = data_format_of(where, data_format)

    def lower(self, ffmodel, inputs, name, shared):
        (top, bottom), (left, right) = self.padding
        return lower_image(f"ZeroPadding2D '{self.name}'", ffmodel, inputs[0], self.data_format, name,
                           lambda x: apply_op(ffmodel, "PAD", [x], ((left, right, top, bottom),), (), name))


class Conv2DTranspose(Conv2D):
    """2-D transposed convolution (channels first)."""

    def __init__(self, filters, kernel_size=0, strides=(1, 1), padding="valid", output_padding=None, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate, 1, activation, use_bias,
                         kernel_initializer, bias_initializer, **kwargs)
        self._layer_type = "Conv2DTranspose"
        where = f"Conv2DTranspose '{self.name}'"
        if self.padding not in ("same", (0, 0)):
            raise ConfigError(f"{where}: padding must be 'valid' or 'same', got {padding!r}")
        self.output_padding = None
        if output_padding is not None:
            zero = output_padding in (0, (0, 0), [0, 0])
            self.output_padding = (0, 0) if zero else pair(where, "output_padding", output_padding)
        if self.output_padding is not None and any(o >= s for o, s in zip(self.output_padding, self.strides)):
            raise ConfigError(f"{where}: output_padding {self.output_padding} must be smaller than the strides "
                              f"{self.strides}")

    def _pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(padding, output padding) per axis giving Keras' output size (conv_utils.deconv_output_length)."""
        where = f"Conv2DTranspose '{self.name}'"
        pads, extra = [], []
        for i, (k, s) in enumerate(zip(self.kernel_size, self.strides)):
            if self.output_padding is not None:
                pads.append(k // 2 if self.padding == "same" else 0)
                extra.append(self.output_padding[i])
            elif self.padding != "same":
                pads.append(0)
                extra.append(max(s - k, 0))          # in * s + max(k - s, 0) positions
            elif (k - s) % 2 and k > s:
                raise NotYetAvailableError(f"{where}: padding='same' with kernel {k} and stride {s} crops {k - s} "
                                           f"positions, split unevenly; give padding='valid' or output_padding")
            else:
                pads.append(max(k - s, 0) // 2)
                extra.append(max(s - k, 0))          # in * s positions
        return tuple(pads), tuple(extra)

    def _lower_nchw(self, ffmodel, x, name, shared):
        (ph, pw), extra = self._pads()
        kh, kw = self.kernel_size
        sh, sw = self.strides
        keywords = (("output_padding", extra),) + ((("shares", shared),) if shared else ())

        def build(mode):
            fields = (self.filters, kh, kw, sh, sw, ph, pw, mode.value, 1, int(self.use_bias))
            return apply_op(ffmodel, "CONV_TRANSPOSE2D", [x], fields, keywords, name)
        return lower_fused(ffmodel, self.activation, build, name)


__all__ = ["Conv2DTranspose", "UpSampling2D", "ZeroPadding2D"]
