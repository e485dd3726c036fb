"""FFModel builds the right PCG: shapes, parameter counts, names, shared weights, errors; training
calls wait for the runtime; scripts load in capture mode."""

import numpy as np
import pytest

from flexrt.errors import ConfigError, FlexrtError, ShapeError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.model import (ActiMode, AdamOptimizer, AggrMode, DataType, FFConfig, FFModel, GlorotUniformInitializer,
                          LossType, MetricsType, NormInitializer, PoolType, SGDOptimizer, UniformInitializer,
                          ZeroInitializer, load_model, zoo_models)


@pytest.fixture
def m():
    return FFModel(FFConfig([]))


def weight_nodes(model):
    return {n.name: n.attrs.shape.dims for n in model.pcg.nodes if n.op_type is OpType.WEIGHT}


def test_ffmodel_mlp_shapes_names_and_parameters(m):
    x = m.create_tensor([64, 784], DataType.DT_FLOAT)
    h = m.dense(x, 512, ActiMode.AC_MODE_RELU)
    y = m.softmax(m.dense(h, 10))
    assert (x.dims, h.dims, y.dims) == ((64, 784), (64, 512), (64, 10))
    assert (y.num_dims, y.data_type, y.owner_layer) == (2, DataType.DT_FLOAT, "softmax_1")
    assert m.num_parameters() == 784 * 512 + 512 + 512 * 10 + 10 == 407050
    assert [l.name for l in m.get_layers().values()] == ["dense_1", "dense_2", "softmax_1"]
    assert weight_nodes(m) == {"dense_1.kernel": (784, 512), "dense_1.bias": (512,), "dense_2.kernel": (512, 10),
                               "dense_2.bias": (10,)}
    dense_1 = m.pcg.node_by_name("dense_1")
    assert [m.pcg.node(r.node).name for r in dense_1.inputs] == ["input_1", "dense_1.kernel", "dense_1.bias"]
    assert dense_1.attrs.activation is ActiMode.AC_MODE_RELU
    assert all(s.is_unpartitioned for n in m.pcg.nodes for s in m.pcg.output_shapes(n.id))
    assert h.owner_op is m.get_layer_by_name("dense_1") and m.get_layer_by_id(1).name == "dense_2"


def test_ffmodel_cnn_shapes_and_parameters(m):
    x = m.create_tensor([8, 3, 32, 32])
    t = m.conv2d(x, 16, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG)
    t = m.batch_norm(t)
    f = m.flat(t)
    y = m.dense(f, 10, use_bias=False)
    assert (t.dims, f.dims, y.dims) == ((8, 16, 16, 16), (8, 4096), (8, 10))
    assert m.num_parameters() == (16 * 3 * 9 + 16) + (16 + 16) + 4096 * 10
    assert weight_nodes(m)["conv2d_1.kernel"] == (16, 3, 3, 3) and "dense_1.bias" not in weight_nodes(m)


def test_ffmodel_split_count_and_sizes(m):
    x = m.create_tensor([4, 12])
    parts = m.split(x, 3, 1)
    assert isinstance(parts, list) and [p.dims for p in parts] == [(4, 4)] * 3
    assert [p.ref.index for p in parts] == [0, 1, 2] and len(m.get_layers()[0].outputs) == 3
    a, b = m.split(x, [2, 10], axis=1)
    assert (a.dims, b.dims) == ((4, 2), (4, 10))
    assert m.concat([a, b, parts[0]], 1).dims == (4, 16)
    with pytest.raises(ShapeError, match=r"split: 5 equal pieces do not divide dimension 1 of size 12 .*valid "
                                         r"counts: 1, 2, 3, 4, 6, 12"):
        m.split(x, 5, 1)


def test_ffmodel_shape_layers(m):
    x = m.create_tensor([2, 3, 4])
    assert m.reshape(x, [6, 4]).dims == (6, 4)
    assert m.transpose(x, [0, 2, 1]).dims == (2, 4, 3)
    assert m.reduce_sum(x, [1]).dims == (2, 4)
    assert m.mean(x, [2], keepdims=True).dims == (2, 3, 1)
    assert m.dropout(x, 0.5, 7).dims == (2, 3, 4)
    assert m.layer_norm(x, [2]).dims == (2, 3, 4) and weight_nodes(m)["layer_norm_1.gamma"] == (4,)
    assert m.cast(x, DataType.DT_DOUBLE).data_type is DataType.DT_DOUBLE
    idx = m.create_tensor([2, 3, 4], DataType.DT_INT64)
    assert m.gather(x, idx, 1).dims == (2, 3, 4)
    b = m.create_tensor([2, 4, 5])
    assert m.batch_matmul(x, b).dims == (2, 3, 5)


@pytest.mark.parametrize("method", ["add", "subtract", "multiply", "divide", "max", "min"])
def test_ffmodel_binary_layers_broadcast(m, method):
    x, y = m.create_tensor([4, 1, 6]), m.create_tensor([5, 1])
    out = getattr(m, method)(x, y)
    assert out.dims == (4, 5, 6) and m.get_layers()[0].name == f"{method}_1"


@pytest.mark.parametrize("method", ["relu", "gelu", "elu", "sigmoid", "tanh", "exp", "sin", "cos", "rsqrt",
                                    "identity", "scalar_add", "scalar_sub", "scalar_multiply", "scalar_true_divide",
                                    "pow"])
def test_ffmodel_unary_layers_keep_shape(m, method):
    x = m.create_tensor([4, 6])
    args = (2.0,) if method.startswith("scalar") or method == "pow" else ()
    out = getattr(m, method)(x, *args)
    assert out.dims == (4, 6)
    node = m.pcg.node(out.ref.node)
    assert node.attrs.scalar == (2.0 if args else 0.0)


def test_ffmodel_embedding_and_attention(m):
    idx = m.create_tensor([4, 6], DataType.DT_INT64)
    assert m.embedding(idx, 100, 8, AggrMode.AGGR_MODE_SUM).dims == (4, 8)
    assert m.embedding(idx, 100, 8, AggrMode.AGGR_MODE_NONE).dims == (4, 6, 8)
    q = m.create_tensor([2, 5, 16])
    kv = m.create_tensor([2, 7, 16])
    assert m.multihead_attention(q, kv, kv, 16, 4).dims == (2, 5, 16)
    assert m.num_parameters() == 2 * 100 * 8 + 4 * 16 * 16 + 4 * 16


def test_ffmodel_shared_op_reuses_weight_nodes(m):
    x = m.create_tensor([4, 8])
    a = m.dense(x, 8, name="d1")
    b = m.dense(a, 8, shared_op=m.get_layer_by_name("d1"))
    c = m.dense(b, 8, shared_op=a)          # a tensor names its owner layer
    d = m.dense(c, 8, shared_op="d1")        # and so does a layer name
    layers = m.get_layers()
    assert [w.node for w in layers[1].weights] == [w.node for w in layers[0].weights] == \
           [w.node for w in layers[3].weights]
    assert layers[2].shares_weights and not layers[0].shares_weights
    assert m.num_parameters() == 8 * 8 + 8 and d.dims == (4, 8)
    assert len(weight_nodes(m)) == 2


def test_ffmodel_shared_op_with_other_shapes_is_an_error(m):
    x = m.create_tensor([4, 8])
    m.dense(x, 8, name="d1")
    with pytest.raises(ShapeError, match=r"dense 'dense_1': shared_op 'd1' has weights kernel \[8, 8\] f32, bias "
                                         r"\[8\] f32; this layer needs kernel \[8, 16\] f32, bias \[16\] f32"):
        m.dense(x, 16, shared_op="d1")
    assert len(m.pcg) == 4  # nothing half-added
    with pytest.raises(ConfigError, match="no layer named 'nope'"):
        m.dense(x, 8, shared_op="nope")


def test_ffmodel_lstm_unrolled_shares_weights(m):
    x1, x2 = m.create_tensor([4, 16]), m.create_tensor([4, 16])
    h0, c0 = m.create_tensor([4, 32]), m.create_tensor([4, 32])
    h1, c1 = m.lstm(x1, h0, c0, 32)
    h2, c2 = m.lstm(x2, h1, c1, 32, shared_op=h1)
    assert (h2.dims, c2.dims) == ((4, 32), (4, 32)) and (h1.ref.index, c1.ref.index) == (0, 1)
    assert m.num_parameters() == 16 * 128 + 32 * 128 + 128


def test_ffmodel_names_are_unique(m):
    x = m.create_tensor([4, 8])
    m.relu(x, name="relu_2")
    assert m.relu(x).owner_layer == "relu_1" and m.relu(x).owner_layer == "relu_3"
    with pytest.raises(ConfigError, match="the name 'relu_1' is already used"):
        m.relu(x, name="relu_1")
    with pytest.raises(ShapeError):
        m.dense(m.create_tensor([4]), 2)  # a failed call uses up no name
    assert m.dense(x, 2).owner_layer == "dense_1" and m.create_tensor([1]).owner_layer == "input_3"


def test_ffmodel_initializers_are_kept_per_weight(m):
    x = m.create_tensor([4, 8])
    k, b = GlorotUniformInitializer(3), ZeroInitializer()
    m.dense(x, 4, kernel_initializer=k, bias_initializer=b)
    w = m.get_layers()[0].weights
    assert [(w_.name, w_.initializer, w_.node_name) for w_ in w] == [("kernel", k, "dense_1.kernel"),
                                                                     ("bias", b, "dense_1.bias")]
    with pytest.raises(ConfigError, match="kernel_initializer must be an initializer"):
        m.dense(x, 4, kernel_initializer="glorot")


@pytest.mark.parametrize("call, error, fragment", [
    (lambda m, x: m.dense(x, 0), ConfigError, "dense: out_dim must be an integer >= 1, got 0"),
    (lambda m, x: m.dense(x, 4, "relu"), ConfigError, "activation must be an ActiMode, got 'relu'; valid: "
                                                      "ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_RELU"),
    (lambda m, x: m.dense([1, 2], 4), ConfigError, "dense 'dense_1': input 0 must be a Tensor made by this FFModel"),
    (lambda m, x: m.dense(FFModel(FFConfig([])).create_tensor([4, 8]), 4), ConfigError, "belongs to another FFModel"),
    (lambda m, x: m.add(x, m.create_tensor([4, 3])), ShapeError, "add 'add_1': "),
    (lambda m, x: m.conv2d(x, 4, 3, 3, 1, 1, 0, 0), ShapeError, "conv2d 'conv2d_1': "),
    (lambda m, x: m.create_tensor([4, 0]), ConfigError, "create_tensor: dims[1] must be an integer >= 1, got 0"),
    (lambda m, x: m.dropout(x, 1.5, 0), ConfigError, "dropout: rate must be a number >= 0 and < 1, got 1.5"),
    (lambda m, x: m.concat([], 1), ConfigError, "concat: tensors must be a non-empty list"),
])
def test_ffmodel_errors_say_what_and_where(m, call, error, fragment):
    x = m.create_tensor([4, 8])
    with pytest.raises(error) as e:
        call(m, x)
    assert fragment in str(e.value)


def test_ffmodel_training_calls_need_compile_first(m):
    x = m.create_tensor([4, 8])
    m.softmax(m.dense(x, 2))
    for call in (lambda: m.fit(x=None, y=None, epochs=1), m.init_layers, m.forward, m.backward, m.zero_gradients,
                 m.update, m.get_perf_metrics, lambda: m.eval(None, None)):
        with pytest.raises(ConfigError, match=r"call compile\(\.\.\.\) first"):
            call()
    with pytest.raises(ConfigError, match="loss_type must be a LossType"):
        m.compile(loss_type="mse")
    opt = SGDOptimizer(m, 0.1, momentum=0.9)
    m.compile(optimizer=opt, loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
              metrics=[MetricsType.METRICS_ACCURACY])
    assert m.optimizer == opt and m.metrics == (MetricsType.METRICS_ACCURACY,)
    assert m.session is not None and m.strategy is not None



@pytest.mark.parametrize("comp_mode", [None, "inference"])
def test_forward_training_flag_and_inference_compile_mode(comp_mode):
    """forward(training=False) is an inference forward (dropout passes through); backward cannot
    follow it. A model compiled with COMP_MODE_INFERENCE runs inference forwards by default and
    refuses training=True."""
    from flexrt.model import CompMode
    m = FFModel(FFConfig(["-b", "4"]))
    x = m.create_tensor([4, 8])
    out = m.softmax(m.dropout(m.dense(x, 3, name="fc"), 0.5, 3, name="drop"))
    mode = CompMode.COMP_MODE_INFERENCE if comp_mode else None
    m.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, comp_mode=mode)
    x.set_tensor(m, np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    m.forward(training=False)
    np.testing.assert_array_equal(m.get_layer_by_name("drop").get_output_tensor().get_tensor(m),
                                  m.get_layer_by_name("fc").get_output_tensor().get_tensor(m))
    probs = out.get_tensor(m)
    with pytest.raises(ConfigError, match=r"backward: the (last forward\(\) ran in inference mode|model was "
                                          r"compiled with comp_mode=COMP_MODE_INFERENCE)"):
        m.backward()
    if comp_mode:
        m.forward()
        np.testing.assert_array_equal(out.get_tensor(m), probs)
        with pytest.raises(ConfigError, match="forward: training=True, but the model was compiled with "
                                              "comp_mode=COMP_MODE_INFERENCE"):
            m.forward(training=True)
    with pytest.raises(ConfigError, match="forward: training must be True, False or None"):
        m.forward(training=1)


def test_optimizers_and_initializers_validate():
    m = FFModel(FFConfig([]))
    assert SGDOptimizer(m) == SGDOptimizer(m, 0.01, 0.0, False, 0.0)
    assert AdamOptimizer(m, alpha=0.01).alpha == 0.01
    with pytest.raises(ConfigError, match="SGDOptimizer: lr must be a number > 0, got -1"):
        SGDOptimizer(m, -1)
    with pytest.raises(ConfigError, match="nesterov=True needs momentum > 0"):
        SGDOptimizer(m, nesterov=True)
    with pytest.raises(ConfigError, match="the first argument must be the FFModel"):
        SGDOptimizer(0.01)
    with pytest.raises(ConfigError, match="beta1 must be a number >= 0 and < 1"):
        AdamOptimizer(m, beta1=1.0)
    with pytest.raises(ConfigError, match="UniformInitializer: maxv must be a number >= 1"):
        UniformInitializer(0, 1.0, 0.5)
    with pytest.raises(ConfigError, match="stddev must be a number >= 0"):
        NormInitializer(0, 0.0, -1.0)
    assert NormInitializer(1, 0, 2).stddev == 2.0


def test_ffmodel_summary_prints_table_and_totals(m, capsys):
    x = m.create_tensor([64, 784])
    m.dense(m.dense(x, 512), 10)
    m.summary()
    out = capsys.readouterr().out
    assert "dense_1" in out and "401.9 k" in out and "parameters: 407.1 k (407,050)" in out
    assert "operators: 2" in out


# ---- loading scripts -------------------------------------------------------------------------

FLEXFLOW_SCRIPT = '''"""A FlexFlow MLP, as FlexFlow's examples are written."""
from flexrt.core import *

def top_level_task():
    ffconfig = FFConfig()
    print("Python API batchSize(%d) workersPerNodes(%d)" % (ffconfig.batch_size, ffconfig.workers_per_node))
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 784], DataType.DT_FLOAT)
    t = ffmodel.dense(x, 512, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 10)
    t = ffmodel.softmax(t)
    ffoptimizer = SGDOptimizer(ffmodel, 0.01)
    ffmodel.compile(optimizer=ffoptimizer, loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY])
    label = ffmodel.label_tensor
    dl_x = ffmodel.create_data_loader(x, None)
    ffmodel.init_layers()
    ffmodel.fit(x=dl_x, y=None, epochs=ffconfig.epochs)
    raise RuntimeError("not reached: compile ends the capture")

if __name__ == "__main__":
    top_level_task()
'''


def test_load_flexflow_script_captures_model_at_compile(tmp_path, capsys):
    path = tmp_path / "ff_mlp.py"
    path.write_text(FLEXFLOW_SCRIPT)
    loaded = load_model(str(path), ["-b", "32", "-ll:gpu", "2"])
    assert capsys.readouterr().out == ""  # the script's prints are dropped
    assert loaded.name == "ff_mlp" and loaded.source == str(path)
    assert loaded.config.batch_size == 32 and loaded.config.workers_per_node == 2
    assert loaded.model.num_parameters() == 407050
    assert loaded.model.loss_type is LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
    assert loaded.model.get_layers()[2].outputs[0].dims == (32, 10)


def test_load_script_with_build_model_calls_it(tmp_path):
    path = tmp_path / "built.py"
    path.write_text("from flexrt.core import *\n"
                    "def build_model(ffconfig):\n"
                    "    m = FFModel(ffconfig)\n"
                    "    m.relu(m.create_tensor([ffconfig.batch_size, 3]))\n"
                    "    return m\n"
                    "if __name__ == '__main__':\n"
                    "    raise SystemExit('must not run as __main__ when loaded')\n")
    loaded = load_model(str(path), ["-b", "5"])
    assert loaded.model.inputs[0].dims == (5, 3)


def test_load_script_without_compile_takes_last_model(tmp_path):
    path = tmp_path / "nocompile.py"
    path.write_text("from flexrt.core import *\n"
                    "FFModel(FFConfig()).create_tensor([1, 1])\n"
                    "m = FFModel(FFConfig())\n"
                    "m.dense(m.create_tensor([2, 3]), 4)\n")
    assert load_model(str(path)).model.num_parameters() == 16


@pytest.mark.parametrize("body, error, fragment", [
    ("from flexflow.core import *\n", ConfigError, "imports flexflow.core; import flexrt.core instead"),
    ("from flexflow.keras.datasets import mnist\n", ConfigError,
     "imports flexflow.keras.datasets; import flexrt.keras.datasets instead"),
    ("import flexflow.serve as ff\n", ConfigError,
     "imports flexflow.serve, which flexrt does not provide (flexrt.serve does not exist)"),
    ("x = 1\n", ConfigError, "made no FFModel"),
    ("import sys\nfrom flexrt.core import *\nm = FFModel(FFConfig())\nm.create_tensor([2, 3])\nsys.exit('bye')\n",
     ConfigError, "has no operators (only 1 input(s): ['input_1']); the script exited (status 'bye', "),
    ("def f(:\n", ConfigError, "bad.py:1: syntax error"),
    ("from flexrt.core import *\nm = FFModel(FFConfig())\n1 / 0\n", ConfigError,
     "bad.py:3: the script raised ZeroDivisionError: division by zero"),
    ("from flexrt.core import *\nm = FFModel(FFConfig())\nx = m.create_tensor([4, 8])\n"
     "m.add(x, m.create_tensor([4, 3]))\n", ShapeError, "bad.py:4): add 'add_1': add: shapes [4, 8] and [4, 3]"),
])
def test_load_bad_scripts_say_where(tmp_path, body, error, fragment):
    path = tmp_path / "bad.py"
    path.write_text(body)
    with pytest.raises(error) as e:
        load_model(str(path))
    assert fragment in str(e.value)


@pytest.mark.parametrize("body, line", [
    ("from flexrt.core import *\nm = FFModel(FFConfig())\nwhile True:\n    try:\n        pass\n"
     "    except Exception:\n        pass\n", 3),                                    # swallows what it can
    ("def build_model(ffconfig):\n    while True:\n        pass\n", 2),             # build_model loops
    ("import time\nwhile True:\n    time.sleep(0.01)\n", 3)])                       # top level of a build_model script
def test_a_script_that_never_hands_over_a_model_is_stopped_at_its_line(tmp_path, monkeypatch, body, line):
    """No hang: a script running past $FLEXRT_SCRIPT_TIMEOUT is stopped with the line it was running."""
    path = tmp_path / "loop.py"
    path.write_text(body + ("def build_model(ffconfig):\n    pass\n" if "time.sleep" in body else ""))
    monkeypatch.setenv("FLEXRT_SCRIPT_TIMEOUT", "0.3")
    with pytest.raises(ConfigError, match=rf"loop.py:{line}: the script ran 0.3 s without handing over a model"):
        load_model(str(path))
    monkeypatch.setenv("FLEXRT_SCRIPT_TIMEOUT", "-1")
    with pytest.raises(ConfigError, match=r"\$FLEXRT_SCRIPT_TIMEOUT must be a number of seconds >= 0"):
        load_model(str(path))


@pytest.mark.parametrize("head", [b"# -*- coding: latin-1 -*-\n", b"\xef\xbb\xbf"], ids=["pep263", "bom"])
def test_load_script_decodes_as_python_does(tmp_path, head):
    """A PEP 263 coding line is honoured (and a UTF-8 byte order mark skipped), as `python m.py` would."""
    name = "caf\xe9".encode("latin-1" if b"coding" in head else "utf-8")
    path = tmp_path / "coded.py"
    path.write_bytes(head + b"from flexrt.core import *\nm = FFModel(FFConfig())\n"
                     b"m.relu(m.create_tensor([2, 3]), name='" + name + b"')\n")
    assert [n.name for n in load_model(str(path)).model.pcg.nodes][-1] == "caf\xe9"


def test_load_script_that_is_not_a_file(tmp_path):
    (tmp_path / "d.py").mkdir()
    with pytest.raises(ConfigError, match=r"model script .*d\.py is a directory, not a file"):
        load_model(str(tmp_path / "d.py"))
    (tmp_path / "bad.py").write_bytes(b"x = 1\ny = '\xe9'\n")
    with pytest.raises(ConfigError, match=r"bad\.py:2: not valid UTF-8 text: byte 0xe9 at offset 11"):
        load_model(str(tmp_path / "bad.py"))


def test_load_unknown_model_names_valid_models():
    with pytest.raises(ConfigError) as e:
        load_model("no_such_model")
    names = [z.name for z in zoo_models()]
    assert "unknown model 'no_such_model'; valid models: " in str(e.value)
    assert all(n in str(e.value) for n in names)
    with pytest.raises(ConfigError, match="does not exist"):
        load_model("missing/model.py")


def test_zoo_models_have_names_and_descriptions():
    from importlib import resources
    zoo = zoo_models()
    root = resources.files("flexrt.examples")
    for z in zoo:
        assert z.name.isidentifier() and z.description
        assert root.joinpath(z.name + ".py").is_file()


@pytest.mark.parametrize("name", ["arg_top_k", "argmax", "beam_top_k", "sampling", "inc_multihead_self_attention",
                                  "spec_inc_multiquery_self_attention", "groupquery_self_attention"])
def test_flexflow_serve_methods_are_refused_saying_so(m, name):
    from flexrt.errors import NotYetAvailableError
    with pytest.raises(NotYetAvailableError, match=rf"FFModel.{name} is FlexFlow Serve's .*does not have it"):
        getattr(m, name)
    assert not hasattr(m, name)        # as in a FlexFlow without Serve


def test_an_unknown_method_is_pythons_attribute_error_with_a_suggestion(m):
    """Python's own error, with the name and object its "Did you mean: 'dense'?" is computed from."""
    with pytest.raises(AttributeError, match="'FFModel' object has no attribute 'denes'") as e:
        m.denes
    assert type(e.value) is AttributeError and e.value.name == "denes" and e.value.obj is m


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "nul\x00"])
def test_a_layer_name_with_a_control_character_is_refused(name):
    """A newline would cut the name in FlexFlow's text strategy files (written, then unreadable)."""
    m = FFModel(FFConfig([]))
    with pytest.raises(ConfigError, match="holds a control character; give a printable name"):
        m.relu(m.create_tensor([2, 3]), name=name)
    m.relu(m.create_tensor([2, 3]), name="spaces and é are fine")


def test_a_script_adding_layers_without_end_stops_at_the_limit(monkeypatch):
    import flexrt.model.ffmodel as ffmodel_module
    monkeypatch.setattr(ffmodel_module, "MAX_LAYERS", 50)
    m = FFModel(FFConfig([]))
    y = m.create_tensor([2, 3])
    with pytest.raises(ConfigError, match="already has 50 layers, flexrt's limit"):
        while True:
            y = m.relu(y)


def _api_model():
    m = FFModel(FFConfig(["-b", "4"]))
    x = m.create_tensor([4, 8])
    return m, x, m.softmax(m.dense(x, 3))


def _compile_with(init):
    m = FFModel(FFConfig(["-b", "4"]))
    m.dense(m.create_tensor([4, 8]), 3, kernel_initializer=init)
    m.compile(loss_type="mean_squared_error_avg")


@pytest.mark.parametrize("call, message", [
    (lambda: _api_model()[0].scalar_add(_api_model()[1], 10 ** 400), r"scalar must be a number \(finite\), got 1000"),
    (lambda: GlorotUniformInitializer(-1), "seed must be an integer >= 0, got -1"),
    (lambda: UniformInitializer(0, -1e308, 1e308), "the range maxv - minv must be finite"),
    (lambda: _api_model()[0].set_runtime(seed=2.5), "set_runtime: seed must be an integer >= 0, got 2.5"),
    (lambda: _api_model()[0].get_layers()[0].get_output_tensor(5), r"get_output_tensor\(5\): the layer has 1 outputs"),
    (lambda: FFConfig(3), r"FFConfig: argv must be a list of strings .* got int 3"),
    (lambda: FFConfig("-b 4"), r"FFConfig: argv must be a list of strings .* got str '-b 4'"),
    (lambda: FFConfig([], tolerant="no"), "tolerant must be True or False"),
    (lambda: _api_model()[0].compile(optimizer=SGDOptimizer(FFModel(FFConfig([])), 0.1)),
     "compile: the optimizer was made for another FFModel"),
    (lambda: _api_model()[0].lsh_self_attention(_api_model()[0].create_tensor([4, 16, 8]), 8, 2, 2 ** 63, 1, 4),
     "n_buckets must be at most 65,536"),
    (lambda: _api_model()[0].print_layers(np.array([0, 1])), r"print_layers: id must be an integer >= -1"),
    (lambda: _api_model()[0].current_batch(["input_1"]), r"no batch for \['input_1'\] yet"),
    (lambda: __import__("flexrt.keras.layers", fromlist=["x"]).Flatten(data_format=np.array([1, 2])),
     r"Flatten 'flat.*': data_format=array\(\[1, 2\]\); valid: None"),
    (lambda: __import__("flexrt.keras.optimizers", fromlist=["SGD"]).SGD(learning_rate=10 ** 400),
     r"SGD: learning_rate must be a number > 0 \(finite\)"),
    (lambda: __import__("flexrt.keras.layers", fromlist=["x"]).BatchNormalization(epsilon=float("inf")),
     r"epsilon must be a number > 0 \(finite\), got inf"),
])
def test_odd_api_arguments_raise_ours(call, message):
    """Values the API fuzz sweep found escaping as Python's or NumPy's errors (OverflowError, IndexError,
    TypeError, NumPy's 'scale < 0') or accepted silently."""
    with pytest.raises(FlexrtError, match=message):
        call()


def test_weights_are_drawn_after_the_memory_check_and_labels_must_fit_their_dtype():
    m = FFModel(FFConfig(["-b", "4"]))
    m.dense(m.create_tensor([4, 8]), 10 ** 12)    # 32 TB of weights: refused before any is drawn
    with pytest.raises(StrategyError, match="strategy does not fit"):
        m.compile(loss_type="mean_squared_error_avg")
    _compile_with(NormInitializer(1, 0.0, -0.0))   # a stddev of -0.0 is 0 (NumPy refused its sign)
    m, x, _ = _api_model()
    m.compile()
    with pytest.raises(ConfigError, match=r"values 4294967297\.\.4294967297 do not fit the tensor's int32"):
        m.create_data_loader(m.label_tensor, np.full((8, 1), 2 ** 32 + 1, np.int64))   # would train as 1
    with pytest.raises(ConfigError, match="not an array of one shape"):
        m.create_data_loader(x, [[0.0] * 8] * 7 + [[0.0] * 3])
    with pytest.raises(ShapeError, match=r"holds int32 ids .* int64 values 4294967297\.\.4294967297 do not fit"):
        m.label_tensor.set_tensor(m, np.full((4, 1), 2 ** 32 + 1, np.int64))   # astype(np.int32) would wrap


def test_create_constant_takes_an_array_of_its_shape():
    """create_constant(dims, array) (flexrt's: a GPT's positions) is fed as given; arrays of another
    shape, non-numbers, NaN or values the data type cannot hold exactly are refused."""
    m = FFModel(FFConfig(["-b", "2"]))
    c = m.create_constant([3], np.arange(3), DataType.DT_INT32)
    x = m.create_tensor([2, 3])
    m.add(x, m.cast(c, DataType.DT_FLOAT))
    m.compile(loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE)
    np.testing.assert_array_equal(c.get_tensor(m), [0, 1, 2])
    for value, dtype, message in [(np.zeros((2, 3)), DataType.DT_FLOAT, r"value has shape \[2, 3\]; dims are \[3\]"),
                                  (np.array([1.0, np.nan, 0]), DataType.DT_FLOAT, "NaN or inf"),
                                  (np.array(["a", "b", "c"]), DataType.DT_FLOAT, "must hold numbers"),
                                  (np.array([2 ** 40, 0, 0]), DataType.DT_INT32, "does not fit DT_INT32 exactly"),
                                  (np.array([0.5, 0, 0]), DataType.DT_INT64, "does not fit DT_INT64 exactly")]:
        with pytest.raises(ConfigError, match=message):
            FFModel(FFConfig(["-b", "2"])).create_constant([3], value, dtype)
