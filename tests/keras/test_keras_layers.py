"""flexrt.keras layers: output shapes and parameter counts equal Keras' formulas, on many inputs,
both at call time (shape inference) and in the FFModel that compile builds."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.keras import backend as K
from flexrt.keras.layers import (ELU, Activation, Add, AveragePooling2D, BatchNormalization, Concatenate, Conv2D,
                                 Dense, Dropout, Embedding, Flatten, Input, LeakyReLU, MaxPooling2D, Multiply, Permute,
                                 ReLU, Rescaling, Reshape, Softmax, Subtract, concatenate)
from flexrt.keras.models import Model
from flexrt.model import FFConfig

FAST = settings(max_examples=25, deadline=None)
dims = st.integers(1, 9)


def _ff_model(x, y, batch=4):
    """The FFModel compile builds for Model(x, y) (without training)."""
    m = Model(x, y, ffconfig=FFConfig(["-b", str(batch)]))
    m.compile("sgd", "mean_squared_error")
    return m


@FAST
@given(st.lists(dims, min_size=1, max_size=3), dims, st.booleans())
def test_dense_shape_and_params_follow_keras(shape, units, use_bias):
    x = Input(shape=tuple(shape))
    layer = Dense(units, use_bias=use_bias)
    y = layer(x)
    assert y.batch_shape == (None, *shape[:-1], units)
    assert layer.count_params() == shape[-1] * units + (units if use_bias else 0)


@FAST
@given(dims, st.integers(5, 20), st.integers(5, 20), dims, st.integers(1, 5), st.integers(1, 5),
       st.integers(1, 3), st.integers(1, 3), st.integers(0, 2))
def test_conv2d_valid_and_explicit_padding_follow_the_formula(c, h, w, filters, kh, kw, sh, sw, p):
    x = Input(shape=(c, h, w))
    if kh > h + 2 * p or kw > w + 2 * p:
        return
    layer = Conv2D(filters, kernel_size=(kh, kw), strides=(sh, sw), padding=(p, p))
    y = layer(x)
    assert y.batch_shape == (None, filters, (h + 2 * p - kh) // sh + 1, (w + 2 * p - kw) // sw + 1)
    assert layer.count_params() == filters * c * kh * kw + filters
    if p == 0:
        assert Conv2D(filters, kernel_size=(kh, kw), strides=(sh, sw), padding="valid")(x).batch_shape == y.batch_shape


@FAST
@given(st.integers(3, 20), st.integers(1, 5), st.integers(1, 3))
def test_same_padding_gives_ceil_size_over_stride_or_refuses_uneven_padding(h, k, s):
    x = Input(shape=(2, h, h))
    total = max(k - s, 0) if h % s == 0 else max(k - h % s, 0)
    if total % 2:
        with pytest.raises(NotYetAvailableError, match="split unevenly"):
            Conv2D(3, kernel_size=(k, k), strides=(s, s), padding="same")(x)
        return
    y = Conv2D(3, kernel_size=(k, k), strides=(s, s), padding="same")(x)
    assert y.batch_shape == (None, 3, math.ceil(h / s), math.ceil(h / s))
    if k >= s:
        assert MaxPooling2D((k, k), strides=(s, s), padding="same")(x).batch_shape == (None, 2, math.ceil(h / s),
                                                                                        math.ceil(h / s))


@FAST
@given(dims, st.integers(4, 16), st.integers(1, 4))
def test_pooling_defaults_strides_to_pool_size(c, h, k):
    x = Input(shape=(c, h, h))
    for cls in (MaxPooling2D, AveragePooling2D):
        layer = cls(pool_size=(k, k))
        assert layer(x).batch_shape == (None, c, (h - k) // k + 1, (h - k) // k + 1)
        assert layer.count_params() == 0


@FAST
@given(st.lists(dims, min_size=1, max_size=4), st.lists(dims, min_size=1, max_size=3))
def test_concatenate_sums_the_axis(sizes, rest):
    ts = [Input(shape=(n, *rest)) for n in sizes + [1]]
    assert Concatenate(axis=1)(ts).batch_shape == (None, sum(sizes) + 1, *rest)
    last = [Input(shape=(*rest, n)) for n in sizes + [2]]
    assert concatenate(last, axis=-1).batch_shape == (None, *rest, sum(sizes) + 2)


@FAST
@given(st.lists(dims, min_size=1, max_size=4))
def test_flatten_reshape_and_permute(shape):
    x = Input(shape=tuple(shape))
    size = math.prod(shape)
    assert Flatten()(x).batch_shape == (None, size)
    assert Reshape((-1,))(x).batch_shape == (None, size)
    assert Reshape((size, 1))(x).batch_shape == (None, size, 1)
    perm = tuple(range(len(shape), 0, -1))
    assert Permute(dims=perm)(x).batch_shape == (None, *reversed(shape))
    assert Permute((0, *perm))(x).batch_shape == (None, *reversed(shape))


@FAST
@given(st.integers(1, 50), st.integers(1, 8), st.integers(1, 6))
def test_embedding_shape_and_params(vocab, dim, length):
    x = Input(shape=(length,), dtype="int32")
    layer = Embedding(vocab, dim, input_length=length)
    assert layer(x).batch_shape == (None, length, dim)
    assert layer.count_params() == vocab * dim


@FAST
@given(st.lists(dims, min_size=1, max_size=3), st.data())
def test_elementwise_merges_broadcast(shape, data):
    ones = [data.draw(st.booleans()) for _ in shape]
    other = tuple(1 if o else d for o, d in zip(ones, shape))
    a, b = Input(shape=tuple(shape)), Input(shape=other)
    for cls in (Add, Subtract, Multiply):
        assert cls()([a, b]).batch_shape == (None, *shape)
        assert cls()([b, a]).batch_shape == (None, *shape)


def test_same_average_pooling_that_pads_is_refused():
    x = Input(shape=(2, 5, 5))
    with pytest.raises(NotYetAvailableError, match="leaves the padding out of each window's count"):
        AveragePooling2D((3, 3), strides=(1, 1), padding="same")(x)
    assert MaxPooling2D((3, 3), strides=(1, 1), padding="same")(x).batch_shape == (None, 2, 5, 5)
    assert AveragePooling2D((3, 3), strides=(1, 1), padding=(1, 1))(x).batch_shape == (None, 2, 5, 5)


def test_batch_norm_activation_dropout_keep_the_shape():
    x = Input(shape=(5, 6, 7))
    bn = BatchNormalization()
    assert bn(x).batch_shape == (None, 5, 6, 7) and bn.count_params() == 2 * 5   # gamma and beta
    for layer in (Activation("relu"), Activation("softmax"), Activation("tanh"), Dropout(0.5)):
        assert layer(x).batch_shape == (None, 5, 6, 7)


def test_backend_functions():
    a, b = Input(shape=(3, 4)), Input(shape=(4, 5))
    assert K.batch_dot(a, b).batch_shape == (None, 3, 5)
    assert (a @ b).batch_shape == (None, 3, 5)
    assert K.sum(a, axis=1).batch_shape == (None, 4)
    assert K.sum(a, axis=[1, 2], keepdims=True).batch_shape == (None, 1, 1)
    assert K.sum(a).batch_shape == (None,)
    assert K.exp(a).batch_shape == K.sin(a).batch_shape == K.pow(a, 2.0).batch_shape == (None, 3, 4)
    assert (a ** 2).batch_shape == (a + K.exp(a)).batch_shape == (None, 3, 4)
    with pytest.raises(ShapeError, match="is the batch"):
        K.sum(a, axis=0)


def test_compiled_ffmodel_has_the_inferred_shapes_and_parameters():
    x = Input(shape=(3, 12, 12))
    t = Conv2D(8, kernel_size=(3, 3), padding="same", activation="relu")(x)
    t = MaxPooling2D((2, 2))(t)
    t = Flatten()(t)
    y = Activation("softmax")(Dense(5)(Dense(16, activation="tanh")(t)))
    m = _ff_model(x, y, batch=6)
    assert m.ffmodel.num_parameters() == m.count_params() == (8 * 3 * 9 + 8) + (8 * 36 * 16 + 16) + (16 * 5 + 5)
    for layer, (name, kind) in zip(m.layers, [("conv2d", "conv2d"), ("maxpool2d", "pool2d"), ("flat", "flat"),
                                              ("dense", "dense"), ("dense_1", "dense"), ("softmax", "softmax")]):
        ff = m.ffmodel.get_layer_by_name(name)
        assert ff.kind == kind
        assert ff.outputs[0].dims == (6,) + layer.output_shape[1:]


# ---- bad layer arguments and calls ----------------------------------------------------------------

@pytest.mark.parametrize("make, error, match", [
    (lambda: Dense(4, activation="hard_sigmoid"), ConfigError,
     "unknown activation 'hard_sigmoid'; valid: None, 'linear', 'relu'"),
    (lambda: Activation("leaky"), ConfigError, "unknown activation 'leaky'"),
    (lambda: Dense(0), ConfigError, "units must be a positive integer, got 0"),
    (lambda: Dense(4, kernel_initializer="he_normal"), ConfigError, "unknown initializer 'he_normal'"),
    (lambda: Dense(4, kernel_constraint="max_norm"), NotYetAvailableError, "kernel_constraint='max_norm'"),
    (lambda: Conv2D(4, kernel_size=(3, 3), dilation_rate=(0, 2)), ConfigError, "dilation_rate"),
    (lambda: Conv2D(4, kernel_size=(3, 3), data_format="nhwc"), ConfigError, "data_format=.nhwc.; valid: None"),
    (lambda: Conv2D(4, kernel_size=(3,)), ConfigError, "kernel_size must be a positive integer or a pair"),
    (lambda: Conv2D(4, kernel_size=3, padding="full"), ConfigError, "padding must be 'valid', 'same'"),
    (lambda: Dropout(1.0), ConfigError, r"rate must be a number in \[0, 1\)"),
    (lambda: Embedding(10, 4, mask_zero=True), NotYetAvailableError, "mask_zero=True"),
    (lambda: BatchNormalization(center=False), NotYetAvailableError, "center=False"),
    (lambda: BatchNormalization(axis=2), ShapeError, "axis=2"),
    (lambda: Dense(4, frobnicate=1), ConfigError, "unknown argument"),
    (lambda: Dense(4, trainable=False), NotYetAvailableError, "frozen layers"),
    (lambda: Permute((1, 0, 2)), ShapeError, "keeping the batch"),
    (lambda: Input(shape=(3,), dtype="complex64"), ConfigError, "dtype 'complex64' is not supported"),
    (lambda: Input(), ConfigError, "shape is required"),
])
def test_bad_layer_arguments_raise_our_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_layer_called_on_incompatible_tensors_names_the_layer_and_the_shapes():
    with pytest.raises(ShapeError, match=r"Add 'add' called on \(None, 3\) float32, \(None, 4\) float32"):
        Add()([Input(shape=(3,)), Input(shape=(4,))])
    with pytest.raises(ShapeError, match=r"Conv2D 'c' called on \(None, 10\) float32: the input must be \(N, C, H, W\)"):
        Conv2D(2, kernel_size=3, name="c")(Input(shape=(10,)))
    with pytest.raises(ShapeError, match=r"declared input_shape=\(784,\) but called on a tensor of shape \(None, 100\)"):
        Dense(4, input_shape=(784,))(Input(shape=(100,)))
    with pytest.raises(ShapeError, match="Concatenate 'concatenate' called on"):
        Concatenate(axis=1)([Input(shape=(2, 3)), Input(shape=(2, 4))])
    with pytest.raises(ShapeError, match="the batch, dimension 0, cannot be joined"):
        Concatenate(axis=0)([Input(shape=(2,)), Input(shape=(2,))])
    with pytest.raises(ShapeError, match="integer ids"):
        Embedding(10, 3)(Input(shape=(4,)))
    with pytest.raises(ConfigError, match="must be a Keras tensor"):
        Dense(3)([[1.0, 2.0]])
    with pytest.raises(ConfigError, match="takes exactly 2 tensors, got 3"):
        Subtract()([Input(shape=(2,)) for _ in range(3)])
    x = Input(shape=(2,))
    assert Add()([x, x]).batch_shape == (x * x).batch_shape == (None, 2)   # Keras allows one tensor twice


def test_numpy_integers_are_sizes_too():
    """FlexFlow's seq_reuters_mlp: Dense(np.max(y_train) + 1)."""
    import numpy as np
    x = Input(shape=(np.int64(8),))
    assert Dense(np.int64(46))(x).batch_shape == (None, 46)
    assert Reshape((np.int32(2), 4))(x).batch_shape == (None, 2, 4)
    with pytest.raises(ConfigError, match="units must be a positive integer, got 2.5"):
        Dense(2.5)


def test_keras_positional_order_top_level_names_and_lr_are_accepted():
    """keras.io's forms: keras.Sequential / keras.Input, Conv2D(32, (3, 3)), Conv2D(8, 3, (2, 2)),
    Dense(16, "relu"), Permute((2, 1)) and Adam(lr=...); FlexFlow's positional (filters, input_shape,
    kernel_size) and (units, input_shape) still read the same."""
    from flexrt import keras
    model = keras.Sequential([Conv2D(8, (3, 3), input_shape=(3, 16, 16), activation="relu"), Conv2D(4, 3, (2, 2)),
                              keras.layers.Flatten(), Dense(16, "relu"), Dense(3, activation="softmax")],
                             ffconfig=FFConfig(["-b", "8"]))
    model.compile(optimizer=keras.optimizers.Adam(lr=1e-3), loss="sparse_categorical_crossentropy")
    assert model.ffmodel.num_parameters() == (8 * 27 + 8) + (4 * 72 + 4) + (4 * 6 * 6 * 16 + 16) + (16 * 3 + 3)
    assert keras.Input is keras.layers.Input and keras.Model is Model
    flexflow_order = Conv2D(4, (3, 7, 7), (2, 2))
    assert (flexflow_order.kernel_size, flexflow_order.strides) == ((2, 2), (1, 1))
    assert keras.layers.Permute((2, 1)).perm == (0, 2, 1) and keras.layers.Permute((0, 2, 1)).perm == (0, 2, 1)
    assert keras.optimizers.SGD(lr=0.5).lr == 0.5 and keras.optimizers.SGD().lr == 0.01
    with pytest.raises(ConfigError, match="give learning_rate or lr"):
        keras.optimizers.Adam(learning_rate=0.1, lr=0.2)


def _through(layer_fn, x, merge=False):
    """``layer_fn`` applied to Input(s) of x's sample shape, predicted on float64 x (one device)."""
    inputs = [Input(shape=x.shape[1:], dtype="float64") for _ in range(3 if merge else 1)]
    out = layer_fn(inputs if merge else inputs[0])
    m = Model(inputs if merge else inputs[0], out, ffconfig=FFConfig(["-b", str(len(x))]))
    m.compile("sgd", "mean_squared_error")
    return np.asarray(m.predict([x, 2 * x, x - 1] if merge else x))


@pytest.mark.parametrize("make, want", [
    (lambda: ReLU(), lambda x: np.maximum(x, 0)),
    (lambda: ReLU(max_value=1.5),
     lambda x: np.clip(x, 0, 1.5)),
    (lambda: ReLU(negative_slope=0.1),
     lambda x: np.where(x > 0, x, 0.1 * x)),
    (lambda: LeakyReLU(),
     lambda x: np.where(x > 0, x, 0.3 * x)),
    (lambda: LeakyReLU(alpha=0.05),
     lambda x: np.where(x > 0, x, 0.05 * x)),
    (lambda: LeakyReLU(negative_slope=0.2),
     lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda: ELU(),
     lambda x: np.where(x > 0, x, np.expm1(x))),
    (lambda: ELU(alpha=0.4),
     lambda x: np.where(x > 0, x, 0.4 * np.expm1(x))),
    (lambda: Softmax(axis=1),
     lambda x: np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)),
    (lambda: Activation("relu6"), lambda x: np.clip(x, 0, 6)),
    (lambda: Rescaling(1 / 255), lambda x: x / 255),
    (lambda: Rescaling(2.0, offset=-1.0),
     lambda x: 2 * x - 1),
    (lambda: Activation("swish"), lambda x: x / (1 + np.exp(-x))),
    (lambda: Activation("softplus"), lambda x: np.logaddexp(0, x)),
    (lambda: Activation("softsign"), lambda x: x / (1 + abs(x))),
    (lambda: Activation("leaky_relu"), lambda x: np.where(x > 0, x, 0.2 * x)),
])
def test_activation_layers_and_names_compute_keras_formulas(make, want):
    x = np.random.default_rng(3).standard_normal((4, 3, 5)) * 4
    np.testing.assert_allclose(_through(make(), x), want(x), rtol=1e-12, atol=1e-12)


def test_average_is_the_mean_of_its_inputs():
    from flexrt.keras.layers import Average, average
    x = np.random.default_rng(4).standard_normal((4, 6))
    np.testing.assert_allclose(_through(lambda ts: Average()(ts), x, merge=True), (x + 2 * x + x - 1) / 3, rtol=1e-12)
    np.testing.assert_allclose(_through(average, x, merge=True), (4 * x - 1) / 3, rtol=1e-12)


def test_keras_layers_flexrt_lacks_and_unsupported_options_are_refused_by_name():
    import flexrt.keras.layers as layers
    with pytest.raises(NotYetAvailableError, match=r"flexrt.keras.layers has no Lambda: .*its layers: Activation"):
        layers.Lambda(lambda t: t)
    with pytest.raises(NotYetAvailableError, match=r"has no Conv3D"):
        exec("from flexrt.keras.layers import Conv3D")
    with pytest.raises(AttributeError, match="no attribute 'NoSuchLayer'"):
        layers.NoSuchLayer
    with pytest.raises(NotYetAvailableError, match=r"threshold=0.5: only threshold 0"):
        ReLU(threshold=0.5)
    with pytest.raises(ConfigError, match=r"give alpha \(Keras 2\) or negative_slope \(Keras 3\), not both"):
        layers.LeakyReLU(alpha=0.1, negative_slope=0.1)
    with pytest.raises(ConfigError, match=r"unknown activation 'hard_sigmoid'"):
        Activation("hard_sigmoid")


def _conv1d_reference(x, kernel, bias, stride, pad, dilation=1):
    """x (N, C, L), kernel (F, C, 1, k): NumPy's 1-D cross-correlation (taps ``dilation`` apart)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    k = kernel.shape[-1]
    span = (k - 1) * dilation + 1
    steps = (x.shape[2] - span) // stride + 1
    windows = np.stack([x[:, :, i * stride:i * stride + span:dilation] for i in range(steps)], axis=2)   # N, C, L', k
    return np.einsum("nclk,fck->nfl", windows, kernel[:, :, 0, :]) + bias[None, :, None]


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
@pytest.mark.parametrize("k, stride, padding, pad, dilation", [
    (3, 1, "valid", 0, 1), (3, 1, "same", 1, 1), (5, 2, "valid", 0, 1), (3, 2, 2, 2, 1),
    (3, 1, "same", 2, 2), (2, 1, "valid", 0, 4), (3, 2, 1, 1, 3)])     # dilated: WaveNet / TCN layers
@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_conv1d_is_numpys_cross_correlation(fmt, k, stride, padding, pad, dilation, argv):
    from flexrt.keras.layers import Conv1D
    rng = np.random.default_rng(5)
    ncl = rng.standard_normal((4, 3, 11))
    x = Input(shape=(11, 3) if fmt == "channels_last" else (3, 11), dtype="float64")
    layer = Conv1D(5, k, strides=stride, padding=padding, data_format=fmt, dilation_rate=dilation)
    m = Model(x, layer(x), ffconfig=FFConfig(["-b", "4", *argv]))
    m.compile("sgd", "mean_squared_error")
    kernel, bias = (w.astype(np.float64) for w in layer.get_weights())
    assert kernel.shape == (5, 3, 1, k) and bias.shape == (5,)
    bias = bias + rng.standard_normal(5)
    layer.set_weights(m.ffmodel, kernel, bias)
    want = _conv1d_reference(ncl, kernel, bias, stride, pad, dilation)
    got = m.predict(ncl.transpose(0, 2, 1) if fmt == "channels_last" else ncl)
    np.testing.assert_allclose(got, want.transpose(0, 2, 1) if fmt == "channels_last" else want, rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("kind", ["max", "average"])
def test_pooling1d_over_steps(kind):
    from flexrt.keras.layers import AveragePooling1D, MaxPooling1D
    nlc = np.random.default_rng(6).standard_normal((4, 10, 3))
    x = Input(shape=(10, 3), dtype="float64")
    layer = (MaxPooling1D if kind == "max" else AveragePooling1D)(pool_size=3, strides=2)
    m = Model(x, layer(x), ffconfig=FFConfig(["-b", "4"]))
    m.compile("sgd", "mean_squared_error")
    windows = np.stack([nlc[:, i * 2:i * 2 + 3, :] for i in range(4)], axis=1)   # N, 4, 3, C
    want = windows.max(axis=2) if kind == "max" else windows.mean(axis=2)
    np.testing.assert_allclose(m.predict(nlc), want, rtol=1e-12)


def test_conv1d_options_it_cannot_honour_are_refused():
    from flexrt.keras.layers import Conv1D
    with pytest.raises(NotYetAvailableError, match="padding='causal' pads the start only"):
        Conv1D(4, 3, padding="causal")
    with pytest.raises(NotYetAvailableError, match=r"dilation_rate=\(1, 2\) with groups=3 .*available with groups=1"):
        y = Conv1D(3, 3, dilation_rate=2, groups=3)
        Model(x := Input(shape=(8, 3), dtype="float64"), y(x), ffconfig=FFConfig(["-b", "4"]))
    with pytest.raises(ShapeError, match=r"takes a sequence batch \(N, steps, channels\), got shape"):
        Conv1D(4, 3)(Input(shape=(3, 8, 8)))


@pytest.mark.parametrize("axis, fmt", [(-1, "channels_last"), (1, "channels_first")])
def test_batch_norm_of_a_sequence_batch_normalizes_its_channels(axis, fmt):
    """(N, steps, C) (axis -1, what Conv1D, LSTM(return_sequences) and Embedding give) or (N, C, steps)
    (axis 1): the batch statistics of each channel over the samples and steps (it was refused)."""
    x = np.random.default_rng(10).standard_normal((8, 6, 3)) * 2 + 1
    data = x if fmt == "channels_last" else x.transpose(0, 2, 1)
    bn = BatchNormalization(axis=axis, epsilon=1e-3)
    got = _through(bn, data)
    want = (x - x.mean(axis=(0, 1))) / np.sqrt(x.var(axis=(0, 1)) + 1e-3)
    np.testing.assert_allclose(got, want if fmt == "channels_last" else want.transpose(0, 2, 1), rtol=1e-12,
                               atol=1e-12)
    assert [w.shape for w in bn.get_weights()] == [(3,), (3,)]


def test_one_d_same_padding_that_cannot_be_honoured_names_the_int_to_give():
    from flexrt.keras.layers import AveragePooling1D, Conv1D
    with pytest.raises(NotYetAvailableError, match=r"over steps 8 with kernel 4 .* give explicit padding=p \(an int"):
        Conv1D(4, 4, padding="same")(Input(shape=(8, 3)))
    with pytest.raises(NotYetAvailableError, match=r"pads 1 step\(s\) at each end.*give padding=1"):
        AveragePooling1D(3, 1, padding="same")(Input(shape=(8, 3)))


def _depthwise_reference(x, kernel, multiplier):
    """x (N, C, H, W), kernel (C * m, 1, kh, kw): channel c's m outputs from channel c alone ('valid')."""
    n, c, h, w = x.shape
    kh, kw = kernel.shape[2:]
    out = np.zeros((n, c * multiplier, h - kh + 1, w - kw + 1))
    for o in range(c * multiplier):
        for i in range(h - kh + 1):
            for j in range(w - kw + 1):
                out[:, o, i, j] = (x[:, o // multiplier, i:i + kh, j:j + kw] * kernel[o, 0]).sum(axis=(1, 2))
    return out


@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_depthwise_and_separable_convolutions_follow_keras(argv):
    """DepthwiseConv2D (groups = channels) and SeparableConv2D (depthwise, then a 1 x 1 convolution
    with the bias): NumPy's, and Keras' parameter counts."""
    from flexrt.keras.layers import DepthwiseConv2D, SeparableConv2D
    x = np.random.default_rng(15).standard_normal((4, 3, 6, 7))
    dw = DepthwiseConv2D((3, 2), depth_multiplier=2)
    i = Input(shape=(3, 6, 7), dtype="float64")
    m = Model(i, dw(i), ffconfig=FFConfig(["-b", "4", *argv]))
    m.compile("sgd", "mean_squared_error")
    kernel, bias = (a.astype(np.float64) for a in dw.get_weights())
    assert kernel.shape == (6, 1, 3, 2) and dw.count_params() == 3 * 2 * 3 * 2 + 6
    want = _depthwise_reference(x, kernel, 2) + bias[None, :, None, None]
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-12, atol=1e-12)
    sep = SeparableConv2D(5, (3, 3), activation="relu")
    i = Input(shape=(3, 6, 7), dtype="float64")
    m = Model(i, sep(i), ffconfig=FFConfig(["-b", "4", *argv]))
    m.compile("sgd", "mean_squared_error")
    dk, pk, pb = (a.astype(np.float64) for a in sep.get_weights())
    assert (dk.shape, pk.shape, pb.shape) == ((3, 1, 3, 3), (5, 3, 1, 1), (5,))
    assert sep.count_params() == 27 + 15 + 5
    depth = _depthwise_reference(x, dk, 1)
    want = np.maximum(np.einsum("nchw,fc->nfhw", depth, pk[:, :, 0, 0]) + pb[None, :, None, None], 0)
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_dilated_conv2d_weights_in_keras_layout_and_forward(argv):
    """Conv2D(dilation_rate=...): the windows and a dense layer; its kernel reads and writes as
    (filters, C, kh, kw), and the forward is the dilated cross-correlation (float64, 1e-12)."""
    rng = np.random.default_rng(7)
    nchw = rng.standard_normal((4, 2, 7, 8))
    x = Input(shape=(2, 7, 8), dtype="float64")
    layer = Conv2D(3, (3, 2), padding="same", dilation_rate=2)
    m = Model(x, layer(x), ffconfig=FFConfig(["-b", "4", *argv]))
    m.compile("sgd", "mean_squared_error")
    assert layer.count_params() == 3 * 2 * 3 * 2 + 3
    kernel = rng.standard_normal((3, 2, 3, 2))
    bias = rng.standard_normal(3)
    layer.set_weights(m.ffmodel, kernel, bias)
    got_kernel, got_bias = layer.get_weights()
    np.testing.assert_array_equal(got_kernel, kernel)
    padded = np.pad(nchw, ((0, 0), (0, 0), (2, 2), (1, 1)))      # 'same': spans 5 and 3
    want = np.zeros((4, 3, 7, 8))
    for i in range(3):
        for j in range(2):
            want += np.einsum("nchw,fc->nfhw", padded[:, :, i * 2:i * 2 + 7, j * 2:j * 2 + 8], kernel[:, :, i, j])
    want += bias[None, :, None, None]
    np.testing.assert_allclose(m.predict(nchw), want, rtol=1e-12, atol=1e-12)
