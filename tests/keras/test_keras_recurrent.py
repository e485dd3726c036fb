"""Keras' LSTM, GRU and SimpleRNN: NumPy's recurrences (float64, 1e-12) from zero states, every step's
output or the last, forwards or backwards; Keras' weight layouts and parameter counts; training under
data parallelism equals one device; options they cannot honour are refused by name."""

import numpy as np
import pytest

from flexrt.errors import ConfigError, NotYetAvailableError, ShapeError
from flexrt.keras.layers import GRU, LSTM, Bidirectional, Dense, Embedding, Input, SimpleRNN
from flexrt.keras.models import Model
from flexrt.model import FFConfig

N, T, F, H = 4, 5, 3, 6


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _lstm(x, w, u, b):
    h, c, outs = np.zeros((len(x), H)), np.zeros((len(x), H)), []
    for t in range(x.shape[1]):
        z = x[:, t] @ w + h @ u + b
        i, f, g, o = _sigmoid(z[:, :H]), _sigmoid(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), _sigmoid(z[:, 3 * H:])
        c = f * c + i * g
        h = o * np.tanh(c)
        outs.append(h)
    return np.stack(outs, 1)


def _rnn(x, w, b, act):
    h, outs = np.zeros((len(x), H)), []
    for t in range(x.shape[1]):
        h = act(np.concatenate([x[:, t], h], 1) @ w + b)
        outs.append(h)
    return np.stack(outs, 1)


def _run(layer, x, argv=()):
    inp = Input(shape=x.shape[1:], dtype="float64")
    m = Model(inp, layer(inp), ffconfig=FFConfig(["-b", str(len(x)), *argv]))
    m.compile("sgd", "mean_squared_error")
    return m, np.asarray(m.predict(x))


@pytest.mark.parametrize("sequences", [True, False])
@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_lstm_is_numpys_recurrence_with_keras_weights(sequences, backwards, argv):
    x = np.random.default_rng(0).standard_normal((N, T, F))
    layer = LSTM(H, return_sequences=sequences, go_backwards=backwards)
    m, got = _run(layer, x, argv)
    w, u, b = layer.get_weights()
    assert (w.shape, u.shape, b.shape) == ((F, 4 * H), (H, 4 * H), (4 * H,))      # Keras' layout
    assert layer.count_params() == 4 * H * (F + H) + 4 * H                          # Keras' count
    want = _lstm(x[:, ::-1] if backwards else x, w.astype(np.float64), u.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want if sequences else want[:, -1], rtol=1e-12, atol=1e-12)


def _gru(x, w, u, b):
    """Keras' GRU (reset_after=True), gates z, r, n."""
    h, outs = np.zeros((len(x), H)), []
    for t in range(x.shape[1]):
        xi, hi = x[:, t] @ w + b[0], h @ u + b[1]
        z = _sigmoid(xi[:, :H] + hi[:, :H])
        r = _sigmoid(xi[:, H:2 * H] + hi[:, H:2 * H])
        n = np.tanh(xi[:, 2 * H:] + r * hi[:, 2 * H:])
        h = z * h + (1 - z) * n
        outs.append(h)
    return np.stack(outs, 1)


@pytest.mark.parametrize("sequences, backwards", [(True, False), (False, True)])
@pytest.mark.parametrize("argv", [(), ("-ll:gpu", "2")])
def test_gru_is_keras_recurrence_with_keras_weights(sequences, backwards, argv):
    x = np.random.default_rng(3).standard_normal((N, T, F))
    layer = GRU(H, return_sequences=sequences, go_backwards=backwards)
    m, _ = _run(layer, x, argv)
    rng = np.random.default_rng(4)
    keras_weights = [rng.standard_normal((F, 3 * H)), rng.standard_normal((H, 3 * H)), rng.standard_normal((2, 3 * H))]
    layer.set_weights(keras_weights)
    got = [a.astype(np.float64) for a in layer.get_weights()]
    for a, b in zip(got, keras_weights):
        np.testing.assert_array_equal(a, b)
    assert layer.weight_shapes() == ((F, 3 * H), (H, 3 * H), (2, 3 * H))
    assert layer.count_params() == 3 * H * (F + H) + 2 * 3 * H                     # Keras' count (reset_after)
    want = _gru(x[:, ::-1] if backwards else x, *keras_weights)
    np.testing.assert_allclose(m.predict(x), want if sequences else want[:, -1], rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match=r"GRU 'gru' takes Keras' 3 arrays"):
        layer.set_weights(keras_weights[:2] + [keras_weights[2][0]])


@pytest.mark.parametrize("merge", ["concat", "sum", "mul", "ave"])
@pytest.mark.parametrize("sequences", [True, False])
def test_bidirectional_runs_the_layer_both_ways_as_keras(merge, sequences):
    """The forward layer and the layer read backwards (its sequence put back in the steps' order),
    merged; weights as Keras' Bidirectional lists them: forward's arrays, then backward's."""
    x = np.random.default_rng(11).standard_normal((N, T, F))
    layer = Bidirectional(LSTM(H, return_sequences=sequences), merge_mode=merge)
    m, _ = _run(layer, x, ("-ll:gpu", "2"))
    rng = np.random.default_rng(12)
    w = [rng.standard_normal(s) for s in ((F, 4 * H), (H, 4 * H), (4 * H,))] * 2
    w = [a * (1 + i // 3) for i, a in enumerate(w)]                 # the two directions differ
    layer.set_weights(w)
    assert layer.weight_shapes() == ((F, 4 * H), (H, 4 * H), (4 * H,)) * 2 and layer.count_params() == 2 * (
        4 * H * (F + H) + 4 * H)
    fwd, bwd = _lstm(x, *w[:3]), _lstm(x[:, ::-1], *w[3:])[:, ::-1]
    if not sequences:
        fwd, bwd = fwd[:, -1], bwd[:, 0]                             # each direction's last step
    want = {"concat": lambda: np.concatenate([fwd, bwd], -1), "sum": lambda: fwd + bwd, "mul": lambda: fwd * bwd,
            "ave": lambda: (fwd + bwd) / 2}[merge]()
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-12, atol=1e-12)


def test_bidirectional_gru_text_classifier_trains_alike_on_one_and_two_devices():
    rng = np.random.default_rng(13)
    x = rng.integers(0, 20, (32, T)).astype(np.int32)
    y = (x[:, -1] >= 10).astype(np.int32).reshape(-1, 1)
    models = []
    for argv in ([], ["-ll:gpu", "2"]):
        inp = Input(shape=(T,), dtype="int32")
        t = Bidirectional(GRU(H))(Embedding(20, F)(inp))
        m = Model(inp, Dense(2, activation="softmax")(t), ffconfig=FFConfig(["-b", "8", *argv]))
        m.compile("sgd", "sparse_categorical_crossentropy")
        models.append(m)
    models[1].set_weights(models[0].get_weights())
    h = [m.fit(x, y, epochs=2, shuffle=False, verbose=0).history["loss"] for m in models]
    np.testing.assert_allclose(h[0], h[1], rtol=1e-5)
    with pytest.raises(ConfigError, match="wraps an LSTM, GRU or SimpleRNN"):
        Bidirectional(Dense(3))
    with pytest.raises(NotYetAvailableError, match="merge_mode=None"):
        Bidirectional(LSTM(3), merge_mode=None)


@pytest.mark.parametrize("activation, act", [("tanh", np.tanh), ("relu", lambda z: np.maximum(z, 0))])
def test_simple_rnn_is_numpys_recurrence(activation, act):
    x = np.random.default_rng(1).standard_normal((N, T, F))
    layer = SimpleRNN(H, activation=activation, return_sequences=True)
    m, got = _run(layer, x)
    w, u, b = layer.get_weights()                                                  # Keras' three arrays
    assert (w.shape, u.shape, b.shape) == ((F, H), (H, H), (H,)) and layer.count_params() == F * H + H * H + H
    np.testing.assert_allclose(got, _rnn(x, np.concatenate([w, u]).astype(np.float64), b.astype(np.float64), act),
                               rtol=1e-12, atol=1e-12)
    rng = np.random.default_rng(9)
    keras_weights = [rng.standard_normal((F, H)), rng.standard_normal((H, H)), rng.standard_normal(H)]
    layer.set_weights(keras_weights)                        # as Keras takes them
    np.testing.assert_allclose(m.predict(x), _rnn(x, np.concatenate(keras_weights[:2]), keras_weights[2], act),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match=r"takes Keras' 3 arrays"):
        layer.set_weights([np.concatenate(keras_weights[:2]), keras_weights[2]])


def _text_model(argv, cell=LSTM):
    inp = Input(shape=(T,), dtype="int32")
    t = cell(H)(Embedding(20, F)(inp))
    m = Model(inp, Dense(2, activation="softmax")(t), ffconfig=FFConfig(["-b", "8", *argv]))
    m.compile("sgd", "sparse_categorical_crossentropy", ["accuracy"])
    return m


@pytest.mark.parametrize("cell", [LSTM, GRU, SimpleRNN])
def test_a_recurrent_text_classifier_trains_alike_on_one_and_two_devices(cell):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 20, (32, T)).astype(np.int32)
    y = (x[:, 0] >= 10).astype(np.int32).reshape(-1, 1)
    one, two = _text_model([], cell), _text_model(["-ll:gpu", "2"], cell)
    two.set_weights(one.get_weights())
    h1 = one.fit(x, y, epochs=3, shuffle=False, verbose=0).history["loss"]
    h2 = two.fit(x, y, epochs=3, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, rtol=1e-5)
    for a, b in zip(one.get_weights(), two.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_what_the_layers_cannot_honour_is_refused():
    with pytest.raises(NotYetAvailableError, match=r"LSTM 'lstm': return_state=True is not available"):
        LSTM(4, return_state=True)
    with pytest.raises(NotYetAvailableError, match=r"dropout=0.2 is not available"):
        LSTM(4, dropout=0.2)
    with pytest.raises(NotYetAvailableError, match=r"activation='relu' is not available"):
        LSTM(4, activation="relu")
    with pytest.raises(NotYetAvailableError, match=r"stateful=True"):
        SimpleRNN(4, stateful=True)
    with pytest.raises(NotYetAvailableError, match=r"GRU 'gru': reset_after=False is not available"):
        GRU(4, reset_after=False)
    with pytest.raises(ConfigError, match=r"units must be a positive integer"):
        LSTM(0)
    with pytest.raises(ShapeError, match=r"takes a sequence batch \(N, steps, features\)"):
        LSTM(4)(Input(shape=(6,)))
    LSTM(4, unroll=True)     # flexrt always unrolls


def test_time_distributed_dense_is_dense_at_every_step():
    """TimeDistributed(Dense) over an LSTM's sequence (Keras' seq2seq head): x @ W + b at every step;
    a layer that acts on more than each position's last axis is refused."""
    from flexrt.keras.layers import Conv2D, TimeDistributed
    x = np.random.default_rng(14).standard_normal((N, T, F))
    td = TimeDistributed(Dense(7, activation="tanh"))
    m, got = _run(td, x)
    w, b = (a.astype(np.float64) for a in td.get_weights())
    assert td.count_params() == F * 7 + 7
    np.testing.assert_allclose(got, np.tanh(x @ w + b), rtol=1e-12, atol=1e-12)
    with pytest.raises(NotYetAvailableError, match=r"TimeDistributed 'time_distributed': over Conv2D"):
        TimeDistributed(Conv2D(3, (3, 3)))
