"""flexrt.keras beyond FlexFlow's channels-first layers: channels-last images (``data_format`` and
``backend.set_image_data_format``), global poolings, Keras 2's ``Embedding(input_length=...)`` as a
first layer, and ``binary_crossentropy``.

Laws: a channels-last model computes what the channels-first model with the same weights computes
on the transposed images (float64, 1e-12), under data parallelism too; global poolings are NumPy's
means and maxima; a binary model trains to one device's weights (float64, 1e-10)."""

import numpy as np
import pytest

from flexrt.errors import ConfigError, ShapeError
from flexrt.keras import backend as K
from flexrt.keras import optimizers
from flexrt.keras.layers import (Activation, BatchNormalization, Conv2D, Dense, Embedding, Flatten,
                                 GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalMaxPooling1D,
                                 GlobalMaxPooling2D, Input, MaxPooling2D)
from flexrt.keras.models import Model, Sequential
from flexrt.model import DataType, FFConfig
from flexrt.runtime.executor import optimizer_step
from flexrt.runtime.reference import ReferenceTrainer

BATCH = 4


@pytest.fixture
def channels_last():
    K.set_image_data_format("channels_last")
    yield
    K.set_image_data_format("channels_first")


def _image_model(fmt, pooling, argv=(), bn_axis=True):
    """bn_axis: True, the channel axis given (1 or 3); False, Keras' default (-1)."""
    shape = (3, 8, 8) if fmt == "channels_first" else (8, 8, 3)
    x = Input(shape=shape, dtype="float64")
    t = Conv2D(4, (3, 3), padding="same", activation="relu", data_format=fmt, name="conv")(x)
    t = MaxPooling2D((2, 2), data_format=fmt)(t)
    t = BatchNormalization(axis=1 if fmt == "channels_first" else 3)(t) if bn_axis else BatchNormalization()(t)
    t = pooling(data_format=fmt)(t)
    y = Activation("softmax")(Dense(3, name="fc")(t))
    m = Model(x, y, ffconfig=FFConfig(["-b", str(BATCH), *argv]))
    m.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"])
    return m


@pytest.mark.parametrize("pooling", [GlobalAveragePooling2D, GlobalMaxPooling2D])
@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_channels_last_model_equals_channels_first_on_transposed_images(pooling, argv):
    first, last = _image_model("channels_first", pooling, argv), _image_model("channels_last", pooling, argv)
    for name in ("conv", "fc"):
        last.get_layer(name).set_weights(last.ffmodel, *first.get_layer(name).get_weights())
    nchw = np.random.default_rng(0).standard_normal((BATCH * 2, 3, 8, 8))
    np.testing.assert_allclose(last.predict(nchw.transpose(0, 2, 3, 1)), first.predict(nchw), rtol=1e-12,
                               atol=1e-14)
    assert last.get_layer("conv").nodes[0].outputs[0].batch_shape == (None, 8, 8, 4)


@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_default_axis_batch_norm_after_a_channels_last_layer_normalizes_its_channels(argv):
    """BatchNormalization() (Keras' axis -1) on the output of a layer given data_format='channels_last'
    normalizes the last axis, the channels, whatever the backend's format: it normalized the height."""
    first, last = _image_model("channels_first", GlobalAveragePooling2D, argv), \
        _image_model("channels_last", GlobalAveragePooling2D, argv, bn_axis=False)
    assert [w.shape for w in last.get_layer("batch_normalization").get_weights()] == [(4,), (4,)]
    for name in ("conv", "fc"):
        last.get_layer(name).set_weights(last.ffmodel, *first.get_layer(name).get_weights())
    nchw = np.random.default_rng(1).standard_normal((BATCH * 2, 3, 8, 8))
    np.testing.assert_allclose(last.predict(nchw.transpose(0, 2, 3, 1)), first.predict(nchw), rtol=1e-12,
                               atol=1e-14)


def test_backend_image_data_format_is_the_default_of_later_layers(channels_last):
    assert K.image_data_format() == "channels_last"
    m = Sequential([Conv2D(2, (3, 3), input_shape=(6, 6, 1)), MaxPooling2D((2, 2)), Flatten(), Dense(2)],
                   ffconfig=FFConfig(["-b", "2"]))
    assert m.layers[2].nodes[0].outputs[0].batch_shape == (None, 2 * 2 * 2)     # Flatten of (2, 2, 2)
    assert m.layers[0].nodes[0].outputs[0].batch_shape == (None, 4, 4, 2)
    with pytest.raises(ConfigError, match="set_image_data_format: 'nhwc'; valid: 'channels_first', 'channels_last'"):
        K.set_image_data_format("nhwc")


def test_channels_first_layer_on_channels_last_looking_data_says_so():
    with pytest.raises(ShapeError, match=r"Conv2D 'conv2d' called on \(None, 28, 28, 1\).*looks channels-last.*"
                                         r"data_format='channels_last'.*set_image_data_format"):
        Sequential([Input(shape=(28, 28, 1)), Conv2D(8, (3, 3))])


@pytest.mark.parametrize("fmt", ["channels_last", "channels_first"])
def test_global_poolings_1d_are_numpy_means_and_maxima(fmt):
    x = Input(shape=(5, 3) if fmt == "channels_last" else (3, 5), dtype="float64")
    steps = 1 if fmt == "channels_last" else 2
    data = np.random.default_rng(1).standard_normal((BATCH, *x.batch_shape[1:]))
    for layer, want in ((GlobalAveragePooling1D(data_format=fmt), data.mean(axis=steps)),
                        (GlobalMaxPooling1D(data_format=fmt), data.max(axis=steps))):
        m = Model(x, layer(x), ffconfig=FFConfig(["-b", str(BATCH)]))
        m.compile("sgd", "mean_squared_error")
        assert m.output.batch_shape == (None, 3)
        np.testing.assert_allclose(m.predict(data), want, rtol=1e-12)


def test_embedding_input_length_makes_an_int_input_and_binary_crossentropy_trains_like_one_device():
    """Keras' text classifier: Embedding(input_length=L) first, GlobalAveragePooling1D, a sigmoid
    output and binary_crossentropy with (N,) int labels; under data parallelism it trains to the
    one-device reference's weights, and its accuracy is binary accuracy."""
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 50, (32, 6)).astype(np.int32)
    labels = (ids[:, 0] < 25).astype(np.int32)

    def model(argv):
        m = Sequential([Embedding(50, 8, input_length=6, dtype="float64", name="emb"), GlobalAveragePooling1D(),
                        Dense(1, activation="sigmoid", name="out")], ffconfig=FFConfig(["-b", "8", *argv]))
        m.compile(optimizers.SGD(0.5), "binary_crossentropy", ["accuracy"])
        return m

    m = model(["-ll:gpu", "2"])
    assert m.input[0].dtype is DataType.DT_INT32
    initial = m.ffmodel.session.weights()
    ref = ReferenceTrainer(m.ffmodel.pcg, initial, optimizer_step("sgd", lr=0.5), "binary_crossentropy")
    history = m.fit(ids, labels, epochs=3, shuffle=False, verbose=0)
    name = m.input[0].ffhandle.owner_layer
    losses = [float(ref.step({name: ids[i:i + 8]}, labels[i:i + 8, None].astype(np.float64)))
              for _ in range(3) for i in range(0, 32, 8)]
    assert history.history["loss"] == pytest.approx([np.mean(losses[k:k + 4]) for k in (0, 4, 8)], rel=1e-10)
    got = m.ffmodel.session.weights()
    for k, w in ref.weights.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-10, atol=1e-12, err_msg=k)
    probs = m.predict(ids)
    loss, accuracy = m.evaluate(ids, labels, verbose=0)
    assert accuracy == pytest.approx(100 * np.mean((probs[:, 0] > 0.5) == labels))
    p = np.clip(probs[:, 0], 1e-7, 1 - 1e-7)
    assert loss == pytest.approx(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)), rel=1e-10)


def _binary_mlp(argv=("-b", "8"), lr=0.5):
    m = Sequential([Dense(6, input_shape=(4,), activation="relu", name="h"), Dense(1, activation="sigmoid", name="o")],
                   ffconfig=FFConfig(list(argv)))
    m.compile(optimizers.SGD(lr), "binary_crossentropy", ["accuracy"])
    return m


def _binary_data(n=32):
    x = np.random.default_rng(4).standard_normal((n, 4)).astype(np.float32)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32)


def test_early_stopping_stops_and_restores_the_best_weights():
    """patience 1 with a min_delta no epoch can reach: training stops after epoch 2 (index 1), and
    restore_best_weights writes back the weights of epoch 1 (the first, counted best)."""
    from flexrt.keras.callbacks import Callback, EarlyStopping
    x, y = _binary_data()
    m = _binary_mlp()
    seen = []

    class Record(Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(m.get_weights())

    stop = EarlyStopping(monitor="loss", min_delta=1e9, patience=1, restore_best_weights=True)
    history = m.fit(x, y, epochs=10, verbose=0, callbacks=[Record(), stop])
    assert len(history.history["loss"]) == 2 and stop.stopped_epoch == 1 and stop.best_epoch == 0
    assert not all(np.array_equal(a, b) for a, b in zip(seen[0], seen[1]))
    for got, want in zip(m.get_weights(), seen[0]):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ConfigError, match="EarlyStopping: mode='up'; valid"):
        EarlyStopping(mode="up")
    with pytest.warns(UserWarning, match="EarlyStopping: the monitored metric 'val_loss' is not in the epoch's logs"):
        _binary_mlp().fit(x, y, epochs=1, verbose=0, callbacks=[EarlyStopping()])


def test_weights_round_trip_through_npz_and_checkpoints(tmp_path):
    from flexrt.errors import NotYetAvailableError
    from flexrt.keras.callbacks import ModelCheckpoint
    x, y = _binary_data()
    m = _binary_mlp()
    path = str(tmp_path / "best.npz")
    m.fit(x, y, epochs=3, verbose=0, callbacks=[ModelCheckpoint(path, monitor="loss", save_best_only=True)])
    fresh = _binary_mlp(("-b", "8", "-ll:gpu", "2"))
    fresh.load_weights(path)
    saved = np.load(path)
    assert sorted(saved.files) == ["0/h/0", "0/h/1", "1/o/0", "1/o/1"]
    for got, want in zip(fresh.get_weights(), [saved["0/h/0"], saved["0/h/1"], saved["1/o/0"], saved["1/o/1"]]):
        np.testing.assert_array_equal(got, want)
    m.save_weights(str(tmp_path / "now.npz"))
    fresh.load_weights(str(tmp_path / "now.npz"))
    np.testing.assert_allclose(fresh.predict(x), m.predict(x), rtol=1e-6)
    with pytest.raises(NotYetAvailableError, match=r"w.h5: Keras' HDF5 formats need h5py"):
        m.save_weights(str(tmp_path / "w.h5"))
    with pytest.raises(NotYetAvailableError, match="only weights to .npz files"):
        ModelCheckpoint("ckpt.keras")
    other = Sequential([Dense(3, input_shape=(4,), name="z"), Activation("softmax")], ffconfig=FFConfig(["-b", "8"]))
    other.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ConfigError, match=r"now.npz does not hold this model's weights \(missing: 0/z/0, 0/z/1; not "
                                          r"in the model: 0/h/0, 0/h/1, 1/o/0, 1/o/1\)"):
        other.load_weights(str(tmp_path / "now.npz"))
    with pytest.raises(ShapeError, match=r"set_weights: weight 0 \(layer 'h', weight 0\) has shape \(4, 6\)"):
        m.set_weights([np.zeros((6, 4))] + m.get_weights()[1:])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="bad.npz is not a weights file save_weights wrote"):
        m.load_weights(str(tmp_path / "bad.npz"))


def test_keras2_input_spellings():
    """Keras 2's input_dim=d and batch_input_shape=(None, ...) are input_shape; two at once is an error."""
    for layer in (Dense(3, input_dim=5), Dense(3, batch_input_shape=(None, 5)), Dense(3, input_shape=(5,))):
        m = Sequential([layer], ffconfig=FFConfig(["-b", "2"]))
        assert m.input[0].batch_shape == (None, 5) and m.output.batch_shape == (None, 3)
    with pytest.raises(ConfigError, match="Dense: give one of input_shape, input_dim, not several"):
        Dense(3, input_shape=(5,), input_dim=5)


@pytest.mark.parametrize("name, kind, params", [
    ("rmsprop", "rmsprop", {"lr": 0.001, "alpha": 0.9, "eps": 1e-7}),
    ("adagrad", "adagrad", {"lr": 0.001, "initial_accumulator_value": 0.1, "eps": 1e-7})])
def test_rmsprop_and_adagrad_by_name_train_like_one_device(name, kind, params):
    """compile('rmsprop' / 'adagrad') takes Keras' defaults onto flexrt's torch-style optimizers; under
    data parallelism the model trains to the one-device reference's weights."""
    x, y = _binary_data()
    m = Sequential([Dense(6, input_shape=(4,), activation="relu"), Dense(1, activation="sigmoid")],
                   ffconfig=FFConfig(["-b", "8", "-ll:gpu", "2"]))
    m.compile(name, "binary_crossentropy")
    initial = m.ffmodel.session.weights()
    ref = ReferenceTrainer(m.ffmodel.pcg, initial, optimizer_step(kind, **params), "binary_crossentropy")
    m.fit(x, y, epochs=2, shuffle=False, verbose=0)
    feed = m.input[0].ffhandle.owner_layer
    for _ in range(2):
        for i in range(0, 32, 8):
            ref.step({feed: x[i:i + 8]}, y[i:i + 8, None].astype(np.float32))
    got = m.ffmodel.session.weights()
    for k, w in ref.weights.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
    assert any(not np.allclose(got[k], initial[k]) for k in got)


def test_weights_of_layers_named_alike_round_trip(tmp_path):
    """FlexFlow's Keras names layers by kind (two Dense layers are both 'dense'): the file keys them by
    position too."""
    def model():
        m = Sequential([Dense(5, input_shape=(4,)), Dense(3)], ffconfig=FFConfig(["-b", "8"]))
        m.compile("sgd", "mse")
        return m
    a, b = model(), model()
    assert [la.name for la in a.layers] == ["dense", "dense"]
    a.save_weights(str(tmp_path / "w.npz"))
    b.load_weights(str(tmp_path / "w.npz"))
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)
