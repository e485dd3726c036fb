"""FlexFlow's fused normalization layers (rms_norm, residual_rms_norm, residual_layer_norm,
add_bias_residual_layer_norm, sigmoid_silu_multi): signatures, return order, layer and weight names,
initial weights, errors (all or nothing), and values after a forward pass in FlexFlow's per-operator
script pattern (compile, data loaders, init_layers, next_batch, forward, get_array) on one device and
on four (data parallelism), against NumPy's formulas."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from flexrt.core import DataType, FFConfig, FFModel, LossType, MetricsType, SGDOptimizer
from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.op_type import OpType

DEVICES = [["-ll:gpu", "1"], ["-ll:gpu", "4"]]
R = inspect.Parameter.empty
SIGNATURES = {  # FlexFlow's flexflow_cffi.py: (parameter, default) after self
    "rms_norm": [("input", R), ("eps", R), ("dim", R), ("name", None)],
    "residual_rms_norm": [("input1", R), ("input2", R), ("eps", R), ("dim", R), ("inplace_residual", False),
                          ("name", None)],
    "residual_layer_norm": [("input", R), ("residual1", R), ("residual2", R), ("use_two_residuals", R), ("axes", R),
                            ("elementwise_affine", True), ("eps", 1e-5), ("use_bias", True),
                            ("inplace_residual", False), ("name", None)],
    "add_bias_residual_layer_norm": [("input", R), ("residual", R), ("axes", R), ("elementwise_affine", True),
                                     ("eps", 1e-5), ("use_bias", True), ("inplace_residual", False), ("name", None)],
    "sigmoid_silu_multi": [("input1", R), ("input2", R), ("name", None)],
}


def rms(x, gamma, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma


def layer_norm(x, k, gamma, beta, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def run_forward_pass(argv, shapes, build, seed=0):
    """FlexFlow's per-operator script pattern: the inputs of ``shapes`` (float64), ``build(ffmodel,
    *tensors)`` -> output tensors; weights set to random values; returns (inputs, outputs, weights)."""
    ffconfig = FFConfig(["-b", str(shapes[0][0]), *argv])
    ffmodel = FFModel(ffconfig)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    tensors = [ffmodel.create_tensor(a.shape, DataType.DT_DOUBLE) for a in arrays]
    outs = build(ffmodel, *tensors)
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.001)
    ffmodel.compile(loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE,
                    metrics=[MetricsType.METRICS_MEAN_SQUARED_ERROR])
    loaders = [ffmodel.create_data_loader(t, a) for t, a in zip(tensors, arrays)]
    ffmodel.init_layers()
    for p in ffmodel.parameters():
        p.set_weights(ffmodel, rng.uniform(0.5, 1.5, p.dims))
    for dl in loaders:
        dl.reset()
        dl.next_batch(ffmodel)
    ffmodel.forward()
    got = []
    for t in outs:
        t.inline_map(ffmodel, ffconfig)
        got.append(t.get_array(ffmodel, ffconfig))
    weights = {p.name: p.get_weights(ffmodel) for p in ffmodel.parameters()}
    return arrays, got, weights


@pytest.mark.parametrize("method", sorted(SIGNATURES))
def test_fused_layer_signature_matches_flexflow(method):
    params = list(inspect.signature(getattr(FFModel, method)).parameters.values())[1:]
    assert [(p.name, p.default) for p in params] == SIGNATURES[method]


# ---- values after a forward pass ---------------------------------------------------------------

@pytest.mark.parametrize("argv", DEVICES)
def test_rms_norm_values(argv):
    (x,), (y,), w = run_forward_pass(argv, [(8, 3, 6)], lambda m, x: [m.rms_norm(x, 1e-6, 6, name="rms")])
    assert list(w) == ["rms.gamma"]
    np.testing.assert_allclose(y, rms(x, w["rms.gamma"], 1e-6), rtol=1e-12)


@pytest.mark.parametrize("argv", DEVICES)
def test_residual_rms_norm_returns_the_sum_then_its_rms_norm(argv):
    (a, b), (added, y), w = run_forward_pass(
        argv, [(8, 3, 6), (8, 3, 6)], lambda m, a, b: list(m.residual_rms_norm(a, b, 0.1, 6, name="rr")))
    np.testing.assert_array_equal(added, a + b)
    np.testing.assert_allclose(y, rms(a + b, w["rr.gamma"], 0.1), rtol=1e-12)


@pytest.mark.parametrize("argv", DEVICES)
@pytest.mark.parametrize("two", [False, True])
def test_residual_layer_norm_values(argv, two):
    def build(m, x, r1, r2):
        return list(m.residual_layer_norm(x, r1, r2 if two else None, two, [0], name="rln"))

    (x, r1, r2), (added, y), w = run_forward_pass(argv, [(8, 4, 6)] * 3, build)
    want = x + r1 + r2 if two else x + r1
    np.testing.assert_allclose(added, want, rtol=1e-15)
    np.testing.assert_allclose(y, layer_norm(want, 1, w["rln.gamma"], w["rln.beta"], 1e-5), rtol=1e-10)


@pytest.mark.parametrize("argv", DEVICES)
def test_residual_layer_norm_over_two_axes_without_bias(argv):
    def build(m, x, r1):
        return list(m.residual_layer_norm(x, r1, None, False, [0, 1], True, 1e-3, False, name="rln"))

    (x, r1), (added, y), w = run_forward_pass(argv, [(8, 2, 3, 4)] * 2, build)
    assert sorted(w) == ["rln.gamma"] and w["rln.gamma"].shape == (3, 4)
    np.testing.assert_allclose(y, layer_norm(x + r1, 2, w["rln.gamma"], 0.0, 1e-3), rtol=1e-10)


@pytest.mark.parametrize("argv", DEVICES)
def test_add_bias_residual_layer_norm_values(argv):
    def build(m, x, r):
        return list(m.add_bias_residual_layer_norm(x, r, [0], name="abr"))

    (x, r), (added, y), w = run_forward_pass(argv, [(8, 4, 6), (8, 4, 6)], build)
    assert sorted(w) == ["abr.beta", "abr.bias_add.bias", "abr.gamma"] and w["abr.bias_add.bias"].shape == (6,)
    want = x + w["abr.bias_add.bias"] + r
    np.testing.assert_allclose(added, want, rtol=1e-15)
    np.testing.assert_allclose(y, layer_norm(want, 1, w["abr.gamma"], w["abr.beta"], 1e-5), rtol=1e-10)


@pytest.mark.parametrize("argv", DEVICES)
def test_add_bias_residual_layer_norm_without_affine_keeps_the_bias(argv):
    def build(m, x, r):
        return list(m.add_bias_residual_layer_norm(x, r, [0], elementwise_affine=False, name="abr"))

    (x, r), (added, y), w = run_forward_pass(argv, [(8, 4, 6), (8, 4, 6)], build)
    assert list(w) == ["abr.bias_add.bias"]
    np.testing.assert_allclose(y, layer_norm(x + w["abr.bias_add.bias"] + r, 1, 1.0, 0.0, 1e-5), rtol=1e-10)


@pytest.mark.parametrize("argv", DEVICES)
def test_sigmoid_silu_multi_values(argv):
    (a, b), (y,), _ = run_forward_pass(argv, [(8, 5, 4, 4)] * 2, lambda m, a, b: [m.sigmoid_silu_multi(a, b)])
    np.testing.assert_allclose(y, a / (1 + np.exp(-a)) * b, rtol=1e-13)


# ---- graph: names, kinds, initial weights, options ---------------------------------------------

def _model():
    m = FFModel(FFConfig(["-b", "4"]))
    return m, m.create_tensor([4, 3, 6], DataType.DT_FLOAT), m.create_tensor([4, 3, 6], DataType.DT_FLOAT)


def _layers(m):
    return [(layer.name, layer.op_type) for layer in m.get_layers().values()]


def test_fused_layers_are_named_from_name():
    m, a, b = _model()
    m.residual_layer_norm(a, b, b, True, [0], name="ln")
    m.add_bias_residual_layer_norm(a, b, [0], name="ab")
    m.sigmoid_silu_multi(a, b, name="ssm")
    assert _layers(m) == [("ln.add", OpType.EW_ADD), ("ln.add2", OpType.EW_ADD), ("ln", OpType.LAYER_NORM),
                          ("ab.bias_add", OpType.BIAS_ADD), ("ab.add", OpType.EW_ADD), ("ab", OpType.LAYER_NORM),
                          ("ssm.sigmoid", OpType.SIGMOID), ("ssm.silu", OpType.EW_MUL), ("ssm", OpType.EW_MUL)]
    layer = m.get_layer_by_name("ln")
    assert layer.get_input_tensor().owner_layer == "ln.add2"


def test_fused_layers_default_names_are_numbered_and_unique():
    m, a, b = _model()
    out1 = m.residual_rms_norm(a, b, 1e-6, 6)
    out2 = m.residual_rms_norm(a, b, 1e-6, 6)
    m.rms_norm(a, 1e-6, 6)
    m.sigmoid_silu_multi(a, b)
    names = [n for n, _ in _layers(m)]
    assert names == ["residual_rms_norm_1.add", "residual_rms_norm_1", "residual_rms_norm_2.add",
                     "residual_rms_norm_2", "rms_norm_1", "sigmoid_silu_multi_1.sigmoid",
                     "sigmoid_silu_multi_1.silu", "sigmoid_silu_multi_1"]
    assert [t.owner_layer for t in out1 + out2] == names[:4]
    assert len(set(m.pcg.node_by_name(n).id for n in names)) == len(names)


def test_fused_layer_skips_a_default_name_whose_part_is_taken():
    m, a, b = _model()
    m.add(a, b, name="residual_rms_norm_1.add")
    m.residual_rms_norm(a, b, 1e-6, 6)
    assert _layers(m)[-1] == ("residual_rms_norm_2", OpType.RMS_NORM)


def test_rms_norm_and_attention_bias_start_at_one():
    m, a, b = _model()
    m.rms_norm(a, 1e-6, 6, name="rms")
    m.add_bias_residual_layer_norm(a, b, [0], name="ab")
    m.compile(optimizer=SGDOptimizer(m, 0.1), loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE)
    m.init_layers()
    w = {p.name: p.get_weights(m) for p in m.parameters()}
    np.testing.assert_array_equal(w["rms.gamma"], np.ones(6, np.float32))
    np.testing.assert_array_equal(w["ab.bias_add.bias"], np.ones(6, np.float32))


def test_inplace_residual_is_kept_as_an_option_and_changes_no_graph():
    graphs = []
    for inplace in (False, True):
        m, a, b = _model()
        m.residual_rms_norm(a, b, 1e-6, 6, inplace_residual=inplace, name="r")
        assert m.get_layer_by_name("r.add").option("inplace_residual") is inplace
        graphs.append([(n.name, n.attrs) for n in m.pcg.nodes])
    assert graphs[0] == graphs[1]


# ---- errors ------------------------------------------------------------------------------------

def test_rms_norm_dim_must_be_the_last_dimension():
    m, a, b = _model()
    with pytest.raises(ShapeError, match="rms_norm 'rms_norm_1': rms_norm: dim 3 must equal the size of the last "
                                         r"\(normalized\) dimension of input \[4, 3, 6\] f32, which is 6"):
        m.rms_norm(a, 1e-6, 3)
    with pytest.raises(ConfigError, match="rms_norm: eps must be a number > 0, got 0"):
        m.rms_norm(a, 0, 6)
    with pytest.raises(ConfigError, match="rms_norm: dim must be an integer >= 1"):
        m.rms_norm(a, 1e-6, 6.0)
    assert m.get_layers() == {}


def test_a_refused_part_leaves_no_layer_behind():
    m, a, b = _model()
    before = len(m.pcg)
    with pytest.raises(ShapeError, match="dim 5 must equal"):
        m.residual_rms_norm(a, b, 1e-6, 5, name="r")
    with pytest.raises(ShapeError, match="not the trailing"):
        m.add_bias_residual_layer_norm(a, b, [1], name="ab")  # dim 1 of 3: FlexFlow's [0, 1] are the last two
    assert m.get_layers() == {} and len(m.pcg) == before
    m.residual_rms_norm(a, b, 1e-6, 6, name="r")  # the names are free again
    m.add_bias_residual_layer_norm(a, b, [0], name="ab")
    assert len(m.get_layers()) == 5


def test_fused_inputs_must_have_equal_shapes():
    m, a, _ = _model()
    c = m.create_tensor([4, 1, 6], DataType.DT_FLOAT)
    d = m.create_tensor([4, 3, 6], DataType.DT_DOUBLE)
    with pytest.raises(ShapeError, match=r"sigmoid_silu_multi: input2 \[4, 1, 6\] f32 must have the shape and type "
                                         r"of input1 \[4, 3, 6\] f32"):
        m.sigmoid_silu_multi(a, c)
    with pytest.raises(ShapeError, match="residual_layer_norm: residual2 .* f64 must have the shape and type"):
        m.residual_layer_norm(a, a, d, True, [0])
    with pytest.raises(ConfigError, match="residual_rms_norm: input 1 must be a Tensor"):
        m.residual_rms_norm(a, np.zeros((4, 3, 6)), 1e-6, 6)


def test_residual_layer_norm_needs_residual2_only_with_two_residuals():
    m, a, b = _model()
    with pytest.raises(ConfigError, match="residual2 must be a Tensor when use_two_residuals is True, got None"):
        m.residual_layer_norm(a, b, None, True, [0])
    with pytest.raises(ConfigError, match="use_two_residuals must be True or False"):
        m.residual_layer_norm(a, b, None, 1, [0])
    added, _ = m.residual_layer_norm(a, b, "ignored", False, [0], name="one")
    assert added.owner_layer == "one.add" and len(m.get_layers()) == 2


def test_fused_layer_names_must_be_free():
    m, a, b = _model()
    m.relu(a, name="x.silu")
    with pytest.raises(ConfigError, match=r"sigmoid_silu_multi: name 'x' needs the layer names x.sigmoid, x.silu, "
                                          r"but 'x.silu' already exist"):
        m.sigmoid_silu_multi(a, b, name="x")
    m.rms_norm(a, 1e-6, 6, name="y")
    with pytest.raises(ConfigError, match="the name 'y' is already used"):
        m.residual_rms_norm(a, b, 1e-6, 6, name="y")
    with pytest.raises(ConfigError, match="name must be a non-empty string"):
        m.sigmoid_silu_multi(a, b, name="")
    assert [n for n, _ in _layers(m)] == ["x.silu", "y"]
