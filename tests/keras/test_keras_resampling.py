"""Keras' UpSampling2D, ZeroPadding2D, Conv2DTranspose and LayerNormalization (built from FFModel's
layers as the PyTorch front end builds interpolation, padding and transposed convolution):
each equals a reference computed independently (NumPy's repeat and pad, torch's interpolate and
conv_transpose2d with Keras' output sizes), channels first and channels last."""

import numpy as np
import pytest

from flexrt import keras
from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.keras import layers

X = np.random.default_rng(0).standard_normal((4, 3, 5, 6)).astype(np.float32)


def _predict(layer, x=X):
    inp = keras.Input(shape=x.shape[1:])
    model = keras.Model(inp, layer(inp))
    model.compile(optimizer="sgd", loss="mean_squared_error")
    return model, model.predict(x, batch_size=x.shape[0])


def test_upsampling_and_zero_padding_equal_numpy_and_torch():
    torch = pytest.importorskip("torch")
    _, got = _predict(layers.UpSampling2D((2, 3)))
    np.testing.assert_array_equal(got, np.repeat(np.repeat(X, 2, 2), 3, 3))
    _, got = _predict(layers.UpSampling2D(2, interpolation="bilinear"))      # tf.image.resize: half-pixel centers
    want = torch.nn.functional.interpolate(torch.from_numpy(X), scale_factor=2, mode="bilinear").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, got = _predict(layers.ZeroPadding2D(((1, 2), (0, 3))))
    np.testing.assert_array_equal(got, np.pad(X, ((0, 0), (0, 0), (1, 2), (0, 3))))
    _, got = _predict(layers.ZeroPadding2D(2, data_format="channels_last"), X.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(got, np.pad(X.transpose(0, 2, 3, 1), ((0, 0), (2, 2), (2, 2), (0, 0))))


def test_layer_normalization_equals_numpy():
    _, got = _predict(layers.LayerNormalization(axis=[2, 3], epsilon=1e-3))
    mean, var = X.mean((2, 3), keepdims=True), X.var((2, 3), keepdims=True)
    np.testing.assert_allclose(got, (X - mean) / np.sqrt(var + 1e-3), rtol=1e-5, atol=1e-5)
    with pytest.raises(NotYetAvailableError, match=r"center=True with scale=False"):
        layers.LayerNormalization(scale=False)


@pytest.mark.parametrize("padding, stride, kernel, output_padding, size", [
    ("valid", 2, 3, None, (11, 13)), ("valid", 3, 2, None, (15, 18)), ("same", 2, 4, None, (10, 12)),
    ("same", 2, 2, None, (10, 12)), ("same", 2, 3, 1, (10, 12)), ("valid", 1, 3, None, (7, 8))])
def test_conv2d_transpose_has_keras_sizes_and_equals_torch(padding, stride, kernel, output_padding, size):
    """Keras' output sizes; the values equal torch's conv_transpose2d with the transposed kernel
    (flexrt keeps the equivalent convolution's kernel, flipped), its padding and output padding."""
    torch = pytest.importorskip("torch")
    model, got = _predict(layers.Conv2DTranspose(4, kernel, strides=stride, padding=padding,
                                                 output_padding=output_padding, activation="relu"))
    assert got.shape == (4, 4, *size)
    layer = next(lay for lay in model.layers if isinstance(lay, layers.Conv2DTranspose))
    kernel_c, bias = layer.get_weights()
    w = np.ascontiguousarray(np.asarray(kernel_c).transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    pad = (kernel // 2 if padding == "same" else 0) if output_padding is not None else \
        (max(kernel - stride, 0) // 2 if padding == "same" else 0)
    extra = output_padding if output_padding is not None else max(stride - kernel, 0)
    want = torch.nn.functional.conv_transpose2d(torch.from_numpy(X), torch.from_numpy(w),
                                                torch.from_numpy(np.asarray(bias)), stride, pad, extra).relu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"UpSampling2D .*interpolation='bicubic'; valid: 'nearest', 'bilinear'"):
        layers.UpSampling2D(interpolation="bicubic")
    with pytest.raises(ConfigError, match=r"ZeroPadding2D .*padding must be an int >= 0"):
        layers.ZeroPadding2D(-1)
    with pytest.raises(ConfigError, match=r"output_padding \(2, 2\) must be smaller than the strides"):
        layers.Conv2DTranspose(2, 3, strides=2, output_padding=2)
    with pytest.raises(NotYetAvailableError, match=r"padding='same' with kernel 3 and stride 2 crops 1"):
        _predict(layers.Conv2DTranspose(2, 3, strides=2, padding="same"))
