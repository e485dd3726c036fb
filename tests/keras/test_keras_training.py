"""flexrt.keras training: a Keras model trained under data parallelism and under random (hybrid)
strategies reaches one device's weights (float64, 1e-10); fit learns; callbacks, evaluate, predict
and weight access behave as FlexFlow's Keras (flexrt.keras.models.base_model, _loop)."""

import numpy as np
import pytest

from flexrt.errors import ConfigError

from flexrt.keras import callbacks, optimizers
from flexrt.keras.callbacks import AccuracyCheckError, EpochVerifyMetrics, LearningRateScheduler, VerifyMetrics
from flexrt.keras.layers import Activation, Concatenate, Conv2D, Dense, Flatten, Input, MaxPooling2D
from flexrt.keras.models import Model, Sequential
from flexrt.keras.models._loop import epoch_order
from flexrt.machine import load_machine
from flexrt.model import FFConfig
from flexrt.runtime.executor import optimizer_step
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.strategy import random_strategy, save_strategy

BATCH = 8


def mlp(argv, lr=0.1):
    x = Input(shape=(6,), dtype="float64")
    y = Activation("softmax")(Dense(4, name="fc2")(Dense(12, activation="relu", name="fc1")(x)))
    m = Model(x, y, ffconfig=FFConfig(["-b", str(BATCH), *argv]))
    m.compile(optimizers.SGD(learning_rate=lr), "sparse_categorical_crossentropy", ["accuracy"])
    return m


def cnn(argv, lr=0.05):
    """Two branches (one of them a shared conv called twice), concatenated: a graph with fan-out and fan-in."""
    a, b = Input(shape=(2, 6, 6), dtype="float64"), Input(shape=(2, 6, 6), dtype="float64")
    conv = Conv2D(3, kernel_size=(3, 3), padding=(1, 1), activation="relu")
    t = Concatenate(axis=1)([conv(a), conv(b)])
    t = Flatten()(MaxPooling2D((2, 2))(t))
    y = Activation("softmax")(Dense(3)(t))
    m = Model([a, b], y, ffconfig=FFConfig(["-b", str(BATCH), *argv]))
    m.compile(optimizers.SGD(learning_rate=lr), "sparse_categorical_crossentropy", ["accuracy"])
    return m


def blobs(n=32, d=6, classes=4, seed=1, shape=None):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centers = rng.standard_normal((classes, d)) * 3
    x = centers[labels] + rng.standard_normal((n, d))
    if shape is not None:
        x = x.reshape((n, *shape))
    return x, labels.reshape(n, 1).astype(np.int32)


def reference(m, initial, batches, lr):
    """One device, no strategy: the same batches from the same initial weights."""
    ref = ReferenceTrainer(m.ffmodel.pcg, initial, optimizer_step("sgd", lr=lr), "sparse_categorical_crossentropy")
    names = [t.ffhandle.owner_layer for t in m.input]
    for xs, y in batches:
        ref.step(dict(zip(names, xs)), y)
    return ref.weights


def batches_of(xs, y, orders):
    for order in orders:
        for lo in range(0, len(y) - BATCH + 1, BATCH):
            idx = order[lo:lo + BATCH]
            yield [x[idx] for x in xs], y[idx]


def devices_used(m) -> set:
    return {t.device for t in m.ffmodel.session.plan.tasks if t.device < m.ffmodel.machine.num_devices}


def assert_same_weights(m, ref, what):
    got = m.ffmodel.get_weights()
    assert set(got) == set(ref)
    for name, w in got.items():
        np.testing.assert_allclose(w, ref[name], rtol=0, atol=1e-10, err_msg=f"{what}: {name}")


def random_strategy_file(tmp_path, build, seed):
    base = build([])
    path = tmp_path / f"random{seed}.json"
    machine = load_machine("local")
    save_strategy(str(path), random_strategy(base.ffmodel.pcg, machine, seed), machine)
    return str(path)


@pytest.mark.parametrize("shuffle", [False, True])
def test_mlp_trains_like_one_device_under_data_parallelism_and_a_random_strategy(tmp_path, shuffle):
    x, y = blobs()
    for argv in (["-ll:gpu", "4"], ["--import", random_strategy_file(tmp_path, mlp, 3)]):
        m = mlp(argv)
        assert devices_used(m) == {0, 1, 2, 3}
        initial = m.ffmodel.get_weights()
        m.fit(x, y, epochs=2, shuffle=shuffle, verbose=0)
        orders = [epoch_order(m, e, len(y)) if shuffle else np.arange(len(y)) for e in range(2)]
        assert_same_weights(m, reference(m, initial, batches_of([x], y, orders), 0.1), f"{argv}, shuffle={shuffle}")
        assert len(m.ffmodel.history) == 2 * len(y) // BATCH


def test_cnn_with_a_shared_layer_trains_like_one_device_under_random_strategies(tmp_path):
    x, y = blobs(n=16, d=72, classes=3, shape=(2, 6, 6))
    x2 = x[::-1].copy()
    for argv in (["-ll:gpu", "2"], ["--import", random_strategy_file(tmp_path, cnn, 5)],
                 ["--import", random_strategy_file(tmp_path, cnn, 11)]):
        m = cnn(argv)
        assert len(devices_used(m)) > 1
        initial = m.ffmodel.get_weights()
        m.fit([x, x2], y, epochs=1, shuffle=False, verbose=0)
        assert_same_weights(m, reference(m, initial, batches_of([x, x2], y, [np.arange(16)]), 0.05), str(argv))


def test_fit_learns_a_separable_problem(capsys):
    x, y = blobs(n=256, seed=4)
    m = mlp(["-ll:gpu", "2"], lr=0.2)
    history = m.fit(x, y, epochs=8)
    losses = history.history["loss"]
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0], losses
    assert history.history["accuracy"][-1] > 90.0
    out = capsys.readouterr().out
    assert "epoch 8/8: 32 iterations" in out and "THROUGHPUT" in out


def test_learning_rate_scheduler_sets_each_epochs_rate_and_training_follows_it():
    x, y = blobs()
    m = mlp([])
    initial = m.ffmodel.get_weights()
    rates = {0: 0.05, 1: 0.2}
    m.fit(x, y, epochs=2, shuffle=False, verbose=0, callbacks=[LearningRateScheduler(lambda e: rates[e])])
    assert m.optimizer.lr == 0.2 and m.ffmodel.optimizer.lr == 0.2
    ref = ReferenceTrainer(m.ffmodel.pcg, initial, optimizer_step("sgd", lr=0.05), "sparse_categorical_crossentropy")
    name = m.input[0].ffhandle.owner_layer
    for epoch in range(2):
        ref.update = optimizer_step("sgd", lr=rates[epoch])
        for xs, yb in batches_of([x], y, [np.arange(len(y))]):
            ref.step({name: xs[0]}, yb)
    assert_same_weights(m, ref.weights, "scheduled")


def test_learning_rate_scheduler_takes_keras_verbose(capsys):
    x, y = blobs()
    for verbose, printed in ((None, "set learning rate  0.05"), (1, "Epoch 1: LearningRateScheduler setting learning "
                                                                     "rate to 0.05."), (0, None)):
        m = mlp([])
        m.fit(x, y, epochs=1, verbose=0, callbacks=[LearningRateScheduler(lambda e: 0.05, verbose=verbose)])
        out = capsys.readouterr().out
        assert (printed in out) if printed else "learning rate" not in out, (verbose, out)
    with pytest.raises(ConfigError, match="verbose must be 0, 1 or 2"):
        LearningRateScheduler(lambda e: 0.1, verbose="yes")


def test_fit_says_it_leaves_out_a_last_partial_batch(capsys):
    """The runtime trains whole batches (FlexFlow's data loader): a last partial batch is left out.
    That was silent, and the summary counted the samples left out as trained."""
    x, y = blobs()
    n = len(y)
    m = mlp([])
    batch = m.ffconfig.batch_size
    k = 5
    with pytest.warns(UserWarning, match=f"fit: trains {n - batch} of the {n - batch + k} samples per epoch: {k} do "
                                         f"not fill a batch of {batch}.*the last ones"):
        m.fit(x[:n - batch + k], y[:n - batch + k], epochs=1, shuffle=False, verbose=0)
    assert f"samples {n - batch}," in capsys.readouterr().out


def test_epoch_verify_metrics_stops_early_and_verify_metrics_checks_the_end(capsys):
    x, y = blobs()
    m = mlp([])
    history = m.fit(x, y, epochs=5, verbose=0, callbacks=[EpochVerifyMetrics(-1.0)])
    assert history.epoch == [0] and len(m.ffmodel.history) == len(y) // BATCH
    assert "early stop, epoch: 0" in capsys.readouterr().out
    with pytest.raises(AccuracyCheckError, match=r"accuracy .*% after training is below the required 101%"):
        m.fit(x, y, epochs=1, verbose=0, callbacks=[VerifyMetrics(101)])

    class Counter(callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_batch_end(self, batch, logs=None):
            self.seen.append((batch, logs["loss"]))

        def on_epoch_end(self, epoch):  # FlexFlow's one-argument form
            self.model.stop_training = epoch == 1
    c = Counter()
    m.fit(x, y, epochs=4, verbose=0, callbacks=[c])
    assert [b for b, _ in c.seen] == [0, 1, 2, 3] * 2 and all(loss > 0 for _, loss in c.seen)


def test_evaluate_and_predict_agree_with_the_host():
    x, y = blobs(n=30)
    m = mlp(["-ll:gpu", "2"])
    m.fit(x, y, epochs=2, verbose=0)
    probs = m.predict(x)
    assert probs.shape == (30, 4)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    loss, acc = m.evaluate(x, y)
    n = 30 // BATCH * BATCH   # whole batches only
    p = probs[np.arange(n), y[:n, 0]]
    assert loss == pytest.approx(float(np.mean(-np.log(p))), abs=1e-9)
    assert acc == pytest.approx(100.0 * np.mean(probs[:n].argmax(axis=1) == y[:n, 0]), abs=1e-9)
    assert m.evaluate(x, y, return_dict=True) == {"loss": loss, "accuracy": acc}


def test_layer_weights_read_and_write_through_the_compiled_model():
    x = Input(shape=(6,), dtype="float64")
    d1, d2 = Dense(5, activation="relu"), Dense(3)
    m = Model(x, Activation("softmax")(d2(d1(x))), ffconfig=FFConfig(["-b", "4", "-ll:gpu", "2"]))
    m.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"])
    kernel, bias = d2.get_weights(m.ffmodel)
    d2.set_weights(m.ffmodel, np.zeros_like(kernel), np.arange(3.0))
    got = d2.get_weights()
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_array_equal(got[1], [0.0, 1.0, 2.0])
    expect = np.exp(np.arange(3.0)) / np.exp(np.arange(3.0)).sum()
    np.testing.assert_allclose(m.predict(np.ones((4, 6))), np.tile(expect, (4, 1)), rtol=1e-12)
    d1.set_weights([np.ones((6, 5)), np.zeros(5)])
    np.testing.assert_array_equal(d1.get_weights(m.ffmodel)[0], 1.0)
    with pytest.raises(Exception, match="weight kernel has shape \\(6, 5\\), got an array of shape \\(5, 6\\)"):
        d1.set_weights(m.ffmodel, np.ones((5, 6)), np.zeros(5))
    with pytest.raises(Exception, match="not part of a compiled model"):
        Dense(2).get_weights()


def test_sequential_adam_and_mean_squared_error_fit_a_linear_map():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3))
    y = x @ np.array([[1.0], [-2.0], [0.5]])
    m = Sequential([Dense(1, input_shape=(3,))], ffconfig=FFConfig(["-b", "16", "-ll:gpu", "2"]))
    m.compile(optimizers.Adam(learning_rate=0.05), "mean_squared_error", ["mean_squared_error"])
    history = m.fit(x.astype(np.float32), y.astype(np.float32), epochs=40, verbose=0)
    assert history.history["loss"][-1] < 0.01 * history.history["loss"][0]


def test_evaluate_says_when_samples_do_not_fill_the_last_batch():
    """Keras scores every sample; flexrt runs whole batches, and says how many it left out."""
    model = Sequential([Dense(2, input_shape=(4,)), Activation("softmax")], ffconfig=FFConfig(["-b", "8"]))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    y = np.zeros((20, 1), np.int32)
    with pytest.warns(UserWarning, match="evaluate: scores 16 of the 20 samples; the last 4 do not fill a batch of 8"):
        model.evaluate(x, y, verbose=0)


def test_validation_metrics_are_evaluate_on_those_samples_after_the_epoch():
    """Keras' validation_data / validation_split: per epoch val_loss and val_<metric> equal evaluate
    on the held-out samples with that epoch's weights; validation_split holds out the last samples."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.int32)

    def model():
        m = Sequential([Dense(8, input_shape=(4,), activation="relu"), Dense(2), Activation("softmax")],
                       ffconfig=FFConfig(["-b", "16"]))
        m.compile(optimizer=optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        return m

    a, b = model(), model()
    ha = a.fit(x, y, epochs=1, validation_split=0.25, shuffle=False, verbose=0)
    hb = b.fit(x[:48], y[:48], epochs=1, validation_data=(x[48:], y[48:]), shuffle=False, verbose=0)
    loss, accuracy = b.evaluate(x[48:], y[48:], verbose=0)
    for h in (ha, hb):
        assert h.history["val_loss"][0] == pytest.approx(loss) and h.history["val_accuracy"][0] == pytest.approx(accuracy)
    assert ha.history["loss"] == pytest.approx(hb.history["loss"])    # the same 48 samples trained


def test_predict_evaluate_and_validation_run_without_dropout():
    """Keras' inference: predict, evaluate and fit's validation pass Dropout's input through, so
    predictions are deterministic and equal those of the same model without its Dropout layer; a
    fit with validation trains the same weights (the same masks) as one without."""
    from flexrt.keras.layers import Dropout
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6))
    y = rng.integers(0, 3, (32, 1)).astype(np.int32)

    def model(dropout, argv=()):
        layers = [Dense(16, input_shape=(6,), activation="relu", name="fc1"), Dropout(0.5),
                  Dense(3, name="fc2"), Activation("softmax")]
        m = Sequential([la for la in layers if dropout or not isinstance(la, Dropout)],
                       ffconfig=FFConfig(["-b", str(BATCH), *argv]))
        m.compile(optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
        return m

    with_dropout, without = model(True, ["-ll:gpu", "2"]), model(False)
    for name in ("fc1", "fc2"):
        without.get_layer(name).set_weights(without.ffmodel, *with_dropout.get_layer(name).get_weights())
    first = with_dropout.predict(x)
    np.testing.assert_array_equal(with_dropout.predict(x), first)
    np.testing.assert_allclose(first, without.predict(x), rtol=1e-12, atol=1e-15)
    assert with_dropout.evaluate(x, y, verbose=0) == pytest.approx(without.evaluate(x, y, verbose=0), rel=1e-12)
    a, b = model(True), model(True)
    a.fit(x, y, epochs=2, shuffle=False, verbose=0, validation_data=(x[:16], y[:16]))
    b.fit(x, y, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_array_equal(a.get_layer("fc1").get_weights()[0], b.get_layer("fc1").get_weights()[0])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fit_batch_size_rebuilds_the_model_for_that_batch(optimizer):
    """Keras' fit(batch_size=B) with a config compiled for another batch (-b) rebuilds the FFModel
    for B with the current weights: it trains to the weights of a model compiled at -b B from the
    same weights (float64, same strategy kind), and evaluate / predict then run at B too. Training
    at another batch after that starts a stateful optimizer over, with a warning."""
    x, y = blobs(n=48)

    def model(b):
        i = Input(shape=(6,), dtype="float64")
        m = Model(i, Activation("softmax")(Dense(4, name="fc2")(Dense(12, activation="relu", name="fc1")(i))),
                  ffconfig=FFConfig(["-b", str(b), "-ll:gpu", "2"]))
        m.compile(optimizer, "sparse_categorical_crossentropy", ["accuracy"])
        return m

    rebuilt, native = model(8), model(16)
    for name in ("fc1", "fc2"):
        native.get_layer(name).set_weights(native.ffmodel, *rebuilt.get_layer(name).get_weights())
    h1 = rebuilt.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h2 = native.fit(x, y, epochs=2, shuffle=False, verbose=0)
    assert rebuilt.ffconfig.batch_size == 16 and rebuilt.ffmodel.ffconfig.batch_size == 16
    assert h1.history["loss"] == pytest.approx(h2.history["loss"], rel=1e-12)
    for name in ("fc1", "fc2"):
        for a, b in zip(rebuilt.get_layer(name).get_weights(), native.get_layer(name).get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(rebuilt.predict(x, batch_size=16), native.predict(x), rtol=1e-12)
    assert rebuilt.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(native.evaluate(x, y, verbose=0))
    if optimizer == "adam":
        with pytest.warns(UserWarning, match="predict: batch_size=8 after training at 16.*starts over"):
            probs = rebuilt.predict(x, batch_size=8)
    else:
        probs = rebuilt.predict(x, batch_size=8)
    np.testing.assert_allclose(probs, native.predict(x), rtol=1e-12)   # the same function of the same weights
