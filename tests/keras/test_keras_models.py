"""flexrt.keras models: Sequential, functional and nested models build the same FFModel graph; shared
layers share weights; layer order and lookup as FlexFlow's Keras; bad models and calls raise ours."""

import numpy as np
import pytest

from flexrt.errors import ConfigError, GraphError, NotYetAvailableError, ShapeError
from flexrt.keras import optimizers
from flexrt.keras.layers import (Activation, BatchNormalization, Concatenate, Conv2D, Dense, Flatten, Input,
                                 MaxPooling2D)
from flexrt.keras.models import Model, Sequential
from flexrt.model import FFConfig

CFG = FFConfig(["-b", "8"])


def _compiled(model):
    model.compile(optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    return model


def _cnn_layers():
    return [Conv2D(4, input_shape=(1, 8, 8), kernel_size=(3, 3), padding=(1, 1), activation="relu"),
            MaxPooling2D((2, 2)), Flatten(), Dense(16, activation="relu"), Dense(3), Activation("softmax")]


def test_sequential_functional_and_nested_models_build_the_same_graph():
    seq = _compiled(Sequential(_cnn_layers(), ffconfig=CFG))
    ls = _cnn_layers()
    x = Input(shape=(1, 8, 8))
    t = x
    for layer in ls:
        t = layer(t)
    func = _compiled(Model(x, t, ffconfig=CFG))
    # nested: a functional front inside a Sequential, and a Sequential back called as a layer
    ls = _cnn_layers()
    xi = Input(shape=(1, 8, 8))
    front = Model(xi, ls[2](ls[1](ls[0](xi))))
    back = Sequential([Input(shape=(64,))] + ls[3:], ffconfig=CFG)
    outer = Sequential(ffconfig=CFG)
    outer.add(front)
    outer.add(back)
    nested = _compiled(outer)
    xo = Input(shape=(1, 8, 8))
    called = _compiled(Model(xo, back(front(xo)), ffconfig=CFG))
    hashes = {m.ffmodel.pcg.structural_hash() for m in (seq, func, nested, called)}
    assert len(hashes) == 1
    assert [layer.name for layer in nested.layers] == ["conv2d", "maxpool2d", "flat", "dense", "dense", "softmax"]
    assert seq.ffmodel.num_parameters() == nested.count_params() == (4 * 9 + 4) + (64 * 16 + 16) + (16 * 3 + 3)
    other = _compiled(Sequential(_cnn_layers()[:4] + [Dense(4), Activation("softmax")], ffconfig=CFG))
    assert other.ffmodel.pcg.structural_hash() not in hashes


def test_functional_order_and_get_layer_follow_flexflow():
    a, b = Input(shape=(6,), name="a"), Input(shape=(5,), name="b")
    ta = Dense(4, name="da")(a)
    tb = Dense(4, name="db")(b)
    y = Activation("softmax")(Dense(3, name="out")(Concatenate(axis=1)([ta, tb])))
    m = Model([a, b], y, ffconfig=CFG)
    assert [layer.name for layer in m.layers] == ["da", "db", "concatenate", "out", "softmax"]
    assert m.get_layer(index=3).name == "out" and m.get_layer(name="db").units == 4
    flat = m.get_layer(name="concatenate")
    assert flat.input_tensors == [ta, tb] and flat.output_tensors[0].to_layers == [m.get_layer(name="out")]
    assert ta.from_layer.name == "da" and m.input == [a, b] and m.output is y
    with pytest.raises(ConfigError, match="no layer named 'nope'; layers: da, db, concatenate, out, softmax"):
        m.get_layer(name="nope")
    with pytest.raises(ConfigError, match=r"no layer at index 5; the model has 5 \(0..4\)"):
        m.get_layer(index=5)
    text = m.summary()
    assert "concatenate (Concatenate)" in text and "da, db" in text and f"Total params: {m.count_params()}" in text


def test_a_layer_called_twice_shares_its_weights():
    x1, x2 = Input(shape=(6,)), Input(shape=(6,))
    shared = Dense(5, activation="relu")
    y = Activation("softmax")(Dense(3)(Concatenate(axis=1)([shared(x1), shared(x2)])))
    m = _compiled(Model([x1, x2], y, ffconfig=CFG))
    assert m.ffmodel.num_parameters() == (6 * 5 + 5) + (10 * 3 + 3)
    second = m.ffmodel.get_layer_by_name("dense_1")
    assert second.shares_weights and {w.owner for w in second.weights} == {"dense"}
    kernel, bias = shared.get_weights(m.ffmodel)
    assert kernel.shape == (6, 5) and bias.shape == (5,)


def test_shared_layer_on_incompatible_inputs_is_refused_at_compile():
    shared = Dense(5)
    x1, x2 = Input(shape=(6,)), Input(shape=(7,))
    y = Activation("softmax")(Concatenate(axis=1)([shared(x1), shared(x2)]))
    with pytest.raises(ShapeError, match="compile: Dense 'dense': .*shared weights must have the same names and shapes"):
        _compiled(Model([x1, x2], y, ffconfig=CFG))
    bn = BatchNormalization()
    z = Input(shape=(4,))
    with pytest.raises(NotYetAvailableError, match="BatchNormalization 'batch_normalization' is called more than once"):
        _compiled(Model(z, Activation("softmax")(bn(bn(z))), ffconfig=CFG))


def test_flexflow_nested_model_rewiring_builds_the_last_call():
    """FlexFlow's func_mnist_mlp_concat2: a model made on 256 features applied to 784 (its layers are
    built where the compiled model calls them)."""
    i11 = Input(shape=(256,))
    m11 = Model(i11, Dense(32, activation="relu", name="dense1")(i11))
    i12 = Input(shape=(256,))
    m1 = Model(i12, Dense(32, activation="relu", name="dense12")(m11(i12)))
    x = Input(shape=(784,))
    m = _compiled(Model(x, Activation("softmax")(Dense(10)(m1(x))), ffconfig=CFG))
    assert m.ffmodel.get_layer_by_name("dense1").weights[0].shape.dims == (784, 32)
    assert m.count_params() == (784 * 32 + 32) + (32 * 32 + 32) + (32 * 10 + 10)


def test_bad_models_raise_our_errors():
    x, other = Input(shape=(4,)), Input(shape=(4,))
    y = Dense(2)(x)
    with pytest.raises(GraphError, match="depends on input 'input'.*not among the model's inputs"):
        Model(other, y)
    with pytest.raises(GraphError, match="do not reach the output"):
        Model([x, other], y)
    with pytest.raises(ConfigError, match="is a layer's output"):
        Model(y, Dense(2)(y))
    with pytest.raises(NotYetAvailableError, match="2 outputs"):
        Model(x, [y, Dense(3)(x)])
    with pytest.raises(ConfigError, match="the first layer .* needs input_shape"):
        Sequential([Dense(3)])
    with pytest.raises(ConfigError, match="takes 1 input\\(s\\), called on 2"):
        Model(x, y)([other, other])
    with pytest.raises(ConfigError, match="ffconfig must be an FFConfig"):
        Model(x, y, ffconfig=["-b", "8"])


def test_compile_refuses_bad_names_and_options():
    def model():
        x = Input(shape=(4,))
        return Model(x, Activation("softmax")(Dense(3)(x)), ffconfig=CFG)
    with pytest.raises(ConfigError, match="unknown optimizer 'lamb'; valid: SGD\\(...\\), Adam\\(...\\), RMSprop"
                                          "\\(...\\), Adagrad\\(...\\) or one of 'sgd', 'adam', 'rmsprop', 'adagrad'"):
        model().compile("lamb", "sparse_categorical_crossentropy")
    with pytest.raises(ConfigError, match="unknown loss 'hinge'; valid: .*'sparse_categorical_crossentropy'"):
        model().compile("sgd", "hinge")
    with pytest.raises(ConfigError, match=r"metrics\[1\]: unknown metric 'auc'"):
        model().compile("sgd", "mse", metrics=["accuracy", "auc"])
    with pytest.raises(ConfigError, match="loss is required"):
        model().compile("sgd")
    with pytest.raises(NotYetAvailableError, match="loss_weights"):
        model().compile("sgd", "mse", loss_weights=[1.0])
    with pytest.raises(NotYetAvailableError, match="amsgrad"):
        optimizers.Adam(amsgrad=True)
    with pytest.raises(ConfigError, match="learning_rate must be a number > 0"):
        optimizers.SGD(learning_rate=-1)


def test_compile_checks_an_input_batch_size_against_the_config():
    x = Input(shape=(4,), batch_size=16)
    with pytest.raises(ConfigError, match="batch_size=16, but the config's batch is 8"):
        _compiled(Model(x, Activation("softmax")(Dense(3)(x)), ffconfig=CFG))


def test_fit_and_evaluate_refuse_bad_data():
    x = Input(shape=(4,))
    m = Model(x, Activation("softmax")(Dense(3)(x)), ffconfig=CFG)
    xs, ys = np.zeros((32, 4), np.float32), np.zeros((32, 1), np.int32)
    with pytest.raises(ConfigError, match=r"fit: call compile\(optimizer, loss, metrics\) first"):
        m.fit(xs, ys)
    _compiled(m)
    with pytest.raises(ShapeError, match=r"fit: x\[0\] has shape \(32, 5\); input 'input' takes \(None, 4\)"):
        m.fit(np.zeros((32, 5), np.float32), ys)
    with pytest.raises(ConfigError, match=r"different numbers of samples \(x\[0\]: 32, y: 30\)"):
        m.fit(xs, ys[:30])
    with pytest.raises(ConfigError, match="x has 2 array\\(s\\); the model has 1 input"):
        m.fit([xs, xs], ys)
    with pytest.raises(ShapeError, match=r"y has shape \(32, 3\); the loss SparseCategoricalCrossentropy"):
        m.fit(xs, np.zeros((32, 3), np.int32))
    with pytest.raises(ConfigError, match="4 sample\\(s\\) is less than one batch of 8"):
        m.fit(xs[:4], ys[:4])
    for bad in (0, 2.5, True):
        with pytest.raises(ConfigError, match=f"fit: batch_size must be an integer >= 1, got {bad}"):
            m.fit(xs, ys, batch_size=bad)
    with pytest.raises(ConfigError, match=r"validation_split=0.2 leaves 26 training and 6 validation samples; each "
                                          r"needs at least one batch of 8"):
        m.fit(xs, ys, validation_split=0.2)
    with pytest.raises(ConfigError, match="give validation_split or validation_data, not both"):
        m.fit(xs, ys, validation_split=0.5, validation_data=(xs, ys))
    with pytest.raises(ConfigError, match="epochs must be an integer >= 1"):
        m.fit(xs, ys, epochs=0)
    with pytest.raises(ConfigError, match="callbacks must be a list of Callback"):
        m.fit(xs, ys, callbacks=[print])
    m.fit(xs, ys.astype(np.float32))                  # class ids as whole floats: cast, as Keras does
    with pytest.raises(ConfigError, match="holds .*ids.* values that are not whole numbers"):
        m.fit(xs, ys.astype(np.float32) + 0.5)


def test_get_layer_numbers_repeated_names_as_keras_and_the_ffmodel_do():
    """Layers keep FlexFlow's unnumbered names; ``get_layer('dense_1')`` is the second ``dense`` (what
    Keras and ``flexrt show`` call it), and a name that matches nothing lists the numbered names."""
    m = Sequential([Dense(8, input_shape=(4,)), Dense(6, name="hidden"), Dense(3), Dense(2)], ffconfig=CFG)
    assert [m.get_layer(n).units for n in ("dense", "dense_1", "dense_2", "hidden")] == [8, 3, 2, 6]
    with pytest.raises(ConfigError, match=r"no layer named 'dense_3'; layers: dense, hidden, dense_1, dense_2"):
        m.get_layer("dense_3")
    with pytest.raises(ConfigError, match="no layer named 'dense_01'"):
        m.get_layer("dense_01")


def test_freezing_subclassing_and_mismatched_metrics_are_refused_when_written():
    """Transfer learning's ``layer.trainable = False`` was silently ignored (the layer trained); a
    subclassed Model or Layer failed with a Python TypeError; a metric wanting other labels than the
    loss failed inside the runtime. Each is now refused where it is written, naming it."""
    d = Dense(8, input_shape=(4,))
    m = Sequential([d, Dense(2)], ffconfig=CFG)
    with pytest.raises(NotYetAvailableError, match=r"Dense 'dense': trainable=False: frozen layers are not available"):
        d.trainable = False
    with pytest.raises(NotYetAvailableError, match=r"model 'sequential': trainable=False"):
        m.trainable = False
    assert d.trainable and m.trainable
    d.trainable = True

    class Sub(Model):
        def __init__(self):
            super().__init__()

    with pytest.raises(NotYetAvailableError, match=r"Sub: a Model made without inputs and outputs .*functional API"):
        Sub()
    from flexrt.keras.layers import Layer

    class Scale(Layer):
        def call(self, x):
            return x

    class Bare(Layer):
        def __init__(self):
            pass

    with pytest.raises(NotYetAvailableError, match=r"Scale: custom layers .* are not available"):
        Scale()
    with pytest.raises(NotYetAvailableError, match=r"Bare: custom layers"):
        Bare()(Input(shape=(3,)))
    with pytest.raises(ConfigError, match=r"compile: metric mean_absolute_error wants labels of the output shape, "
                                          r"but loss sparse_categorical_crossentropy takes integer class ids"):
        Sequential([Dense(2, input_shape=(4,))], ffconfig=CFG).compile("sgd", "sparse_categorical_crossentropy",
                                                                       ["mae"])
    with pytest.raises(ConfigError, match=r"metric sparse_categorical_crossentropy wants integer class ids"):
        Sequential([Dense(2, input_shape=(4,))], ffconfig=CFG).compile("sgd", "mean_squared_error",
                                                                       ["sparse_categorical_crossentropy"])


def test_concatenate_joins_the_channels_of_images_and_the_last_axis_of_other_tensors():
    """Keras' ``concatenate`` joins the last axis; FlexFlow's joins axis 1, the channels of its
    channels-first images. Without an axis: the channels of image batches as their layout has them,
    the last axis of anything else (it joined (N, 3, 4) tensors along the 3)."""
    from flexrt.keras.layers import concatenate
    a, b = Input(shape=(3, 4)), Input(shape=(3, 4))
    assert concatenate([a, b]).shape == Concatenate()([a, b]).shape == [None, 3, 8]
    x = Input(shape=(3, 8, 8))
    assert concatenate([Conv2D(4, (3, 3))(x), Conv2D(2, (3, 3))(x)]).shape == [None, 6, 6, 6]
    x = Input(shape=(8, 8, 3))
    last = [Conv2D(4, (3, 3), data_format="channels_last")(x), Conv2D(2, (3, 3), data_format="channels_last")(x)]
    assert concatenate(last).shape == [None, 6, 6, 6]
    assert concatenate([last[0], last[0]], axis=1).shape == [None, 12, 6, 4]   # an axis given is kept
    assert concatenate([Input(shape=(5,)), Input(shape=(7,))]).shape == [None, 12]
