"""flexrt.onnx: ONNX graphs (exported from torch in the test) into FFModels. Laws as for
flexrt.torch: parameter counts, forward with the initializers equal to torch's under data
parallelism and a hybrid strategy, one SGD step equal to torch's; bad graphs raise ours."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="flexrt.onnx tests need the onnx package (pip install onnx)")
from onnx import TensorProto, helper

from flexrt.errors import ConfigError, FrontendWarning
from flexrt.machine import load_machine
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer
from flexrt.onnx import ONNXModel, ONNXModelKeras
from flexrt.strategy import random_strategy, save_strategy
from tests.frontends._models import BATCH, MODELS, SCCE, make, torch, torch_sgd_step

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
ALL = ["mlp", "cnn", "scaled", "vit", "unet", pytest.param("resnet18", marks=pytest.mark.slow)]
TOL = {"mlp": 1e-5, "cnn": 1e-5, "scaled": 1e-5, "vit": 1e-5, "unet": 1e-5, "resnet18": 1e-5}


def export(model, x, path, params=True):
    torch.onnx.export(model, (torch.from_numpy(x),), str(path), dynamo=False, input_names=["x"],
                      export_params=params, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return str(path)


def build(om, shape, argv=()):
    ff = FFModel(FFConfig(["-b", str(BATCH), *argv]))
    x = ff.create_tensor([BATCH, *shape], DataType.DT_FLOAT)
    out = om.apply(ff, {"x": x})
    ff.softmax(out, name="prob")
    return ff, x, out


def strategies(path, shape, tmp_path):
    base, _, _ = build(ONNXModel(path), shape)
    machine = load_machine("local")
    hybrid = str(tmp_path / "random.json")
    save_strategy(hybrid, random_strategy(base.pcg, machine, 2), machine)
    return [["-ll:gpu", "2"], ["--import", hybrid]]


@pytest.mark.parametrize("name", ALL)
def test_onnx_forward_and_sgd_step_equal_torch(name, tmp_path):
    model, x, y = make(name)
    shape = MODELS[name][1]
    path = export(model, x, tmp_path / f"{name}.onnx")
    runs = strategies(path, shape, tmp_path) if name != "resnet18" else [["-ll:gpu", "2"]]
    for argv in runs:
        om = ONNXModel(path)
        ff, xt, out = build(om, shape, argv)
        assert ff.num_parameters() == sum(p.numel() for p in model.parameters())
        ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
        om.load_weights(ff)
        xt.set_tensor(ff, x)
        ff.forward()
        with torch.no_grad():
            k = 2 if name == "resnet18" else 1   # BatchNorm: per-device statistics under data parallelism
            want = np.concatenate([model(torch.from_numpy(p)).numpy() for p in np.split(x, k)])
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=TOL[name], err_msg=f"{argv}")
    if name == "resnet18":
        return
    ff.fit(x=x, y=y, epochs=1)        # the last (hybrid) model
    before = om.ff_weights()
    torch_sgd_step(model, x, y)
    after = ONNXModel(export(model, x, tmp_path / "after.onnx"))
    build(after, shape)
    for wname, want in after.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[wname], want, rtol=1e-5, atol=2e-6, err_msg=wname)
        assert np.abs(want - before[wname]).max() > 1e-5, wname


def test_export_without_params_builds_from_input_shapes(tmp_path):
    model, x, _ = make("cnn")
    om = ONNXModel(export(model, x, tmp_path / "noparams.onnx", params=False))
    ff, _, out = build(om, MODELS["cnn"][1])
    assert out.dims == (BATCH, 5) and ff.num_parameters() == sum(p.numel() for p in model.parameters())
    ff.compile(loss_type=SCCE)
    with pytest.raises(ConfigError, match="does not hold"):
        om.load_weights(ff)


def _graph(nodes, inits=(), shape=(2, 4)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(g)


def test_matmul_add_is_a_dense_layer_and_split_concat_map():
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    b = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    m = _graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
                helper.make_node("Split", ["hb"], ["s1", "s2"], axis=1, split=[1, 2], name="split"),
                helper.make_node("Concat", ["s2", "s1"], ["c"], axis=1, name="cat"),
                helper.make_node("Mul", ["c", "two"], ["y"], name="twice")],
               [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b"),
                onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    m.opset_import[0].version = 11
    om = ONNXModelKeras(m, None, None)
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 4], DataType.DT_FLOAT)
    out = om.apply(ff, {"x": xt})
    assert next(layer.kind for layer in ff.get_layers().values()) == "dense"
    ff.compile(loss_type="mean_squared_error_avg")
    om.load_weights(ff)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    xt.set_tensor(ff, x)
    ff.forward()
    h = x @ w + b
    np.testing.assert_allclose(out.get_tensor(ff), 2 * np.concatenate([h[:, 1:], h[:, :1]], 1), rtol=1e-6)


def test_unsupported_operator_and_attributes_name_the_node():
    with pytest.raises(ConfigError, match=r"ONNX node 'loop1' \(Loop\): operator Loop has no FFModel mapping"):
        ff = FFModel(FFConfig(["-b", "2"]))
        ONNXModel(_graph([helper.make_node("Loop", ["x"], ["y"], name="loop1")])).apply(
            ff, {"x": ff.create_tensor([2, 4], DataType.DT_FLOAT)})
    with pytest.raises(ConfigError, match=r"ONNX node 'pad1' \(Pad\): mode 'reflect', pads \[\]: constant, reflect"):
        ff = FFModel(FFConfig(["-b", "2"]))
        ONNXModel(_graph([helper.make_node("Pad", ["x"], ["y"], name="pad1", mode="reflect")])).apply(
            ff, {"x": ff.create_tensor([2, 4], DataType.DT_FLOAT)})
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3, 8, 8], DataType.DT_FLOAT)
    pool = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], pads=[0, 0, 1, 1])
    with pytest.raises(ConfigError, match=r"ONNX node 'mp' \(MaxPool\): pads \[0, 0, 1, 1\] are uneven"):
        ONNXModel(_graph([pool], shape=(2, 3, 8, 8))).apply(ff, {"x": x})
    with pytest.warns(FrontendWarning, match="the graph has no input 'nope'; its first input 'x' takes"):
        relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
        ONNXModel(_graph([relu], shape=(2, 3, 8, 8))).apply(ff, {"nope": x})     # torch's exporters name it apart
    two = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"], name="add")], "g",
                            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4]) for n in "xy"],
                            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])])
    ff = FFModel(FFConfig(["-b", "2"]))
    xt, yt = (ff.create_tensor([2, 4], DataType.DT_FLOAT) for _ in range(2))
    with pytest.raises(ConfigError, match="the graph has no input 'nope'; its inputs: x, y"):
        ONNXModel(helper.make_model(two)).apply(ff, {"nope": xt, "y": yt})
    with pytest.raises(ConfigError, match=r"ONNX file \(ONNXModel\) /nonexistent.onnx does not exist"):
        ONNXModel("/nonexistent.onnx")
    with pytest.raises(ConfigError, match=r"/dev/zero is not a regular file"):     # read until memory ran out
        ONNXModel("/dev/zero")


def test_empty_or_garbled_files_are_refused_by_name(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"empty.onnx \(0 bytes\) holds no graph nodes; not an ONNX model file"):
        ONNXModel(str(tmp_path / "empty.onnx"))
    (tmp_path / "garbage.onnx").write_bytes(b"\xff" * 64)
    with pytest.raises(ConfigError, match=r"cannot load .*garbage.onnx"):
        ONNXModel(str(tmp_path / "garbage.onnx"))


def test_a_name_that_is_not_utf8_is_refused_by_its_field(tmp_path):
    data = _graph([helper.make_node("Relu", ["x"], ["y"], name="relu1")]).SerializeToString()
    (tmp_path / "m.onnx").write_bytes(data.replace(b"relu1", b"rel\xff1"))   # protobuf hands it over as bytes
    with pytest.raises(ConfigError, match=r"m\.onnx: model\.graph\.node\[0\]\.name is not valid UTF-8 text "
                                          r"\(b'rel\\xff1'\); ONNX's names and text fields are UTF-8"):
        ONNXModel(str(tmp_path / "m.onnx"))


def _bias(mutate) -> onnx.ModelProto:
    """x + b of a [4] float initializer 'b', after ``mutate(b)``."""
    b = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    mutate(b)
    return _graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], [b])


@pytest.mark.parametrize("mutate, expect", [
    (lambda b: b.dims.__setitem__(0, 3), r"dims \[3\] of FLOAT make 12 bytes of raw_data, but the file holds 16"),
    (lambda b: setattr(b, "raw_data", b.raw_data[:10]), r"dims \[4\] of FLOAT make 16 bytes of raw_data, but "
                                                        r"the file holds 10; the file is damaged or was cut short"),
    (lambda b: b.dims.__setitem__(0, -4), r"dims \[-4\] has a negative size; valid: sizes >= 0"),
    (lambda b: setattr(b, "data_type", 0), r"element type 0 is not an ONNX tensor type; valid: 1 \(FLOAT\), "),
    (lambda b: setattr(b, "data_type", 99), r"element type 99 is not an ONNX tensor type"),
    (lambda b: (b.ClearField("raw_data"), b.float_data.extend([1.0, 2.0])),
     r"dims \[4\] of FLOAT make 4 values in float_data, but the file holds 2"),
])
def test_initializer_data_that_does_not_fit_its_dims_is_refused_by_name(mutate, expect):
    with pytest.raises(ConfigError, match=r"ONNXModel: the ModelProto: initializer 0 \('b'\): " + expect):
        ONNXModel(_bias(mutate))


def test_malformed_constant_and_shape_nodes_are_refused_by_name():
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 4], DataType.DT_FLOAT)
    const = helper.make_node("Constant", [], ["c"], name="c1", value_int=1)
    const.attribute[0].name = "value"                                       # an int where a tensor belongs
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    with pytest.raises(ConfigError, match=r"ONNX node 'c1' \(Constant\): its attribute 'value' must be a tensor, "
                                          r"got int 1"):
        ONNXModel(_graph([const, add])).apply(ff, {"x": x})
    short = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "value")
    short.raw_data = short.raw_data[:8]
    const = helper.make_node("Constant", [], ["c"], name="c2", value=short)
    with pytest.raises(ConfigError, match=r"ONNX node 'c2' \(Constant\): attribute 'value': dims \[4\] of FLOAT make "
                                          r"16 bytes of raw_data, but the file holds 8"):
        ONNXModel(_graph([const, add])).apply(ff, {"x": x})
    shape = helper.make_node("Shape", [], ["s"], name="shape1")
    reshape = helper.make_node("Reshape", ["x", "s"], ["y"], name="r")
    with pytest.raises(ConfigError, match=r"ONNX node 'shape1' \(Shape\): takes one input \(the tensor whose shape "
                                          r"it gives\), got none"):
        ONNXModel(_graph([shape, reshape])).apply(ff, {"x": x})



@pytest.mark.parametrize("axis, valid", [(2 ** 62, r"-2\.\.1 \(its rank is 2\)"), (-3, r"-2\.\.1")])
def test_gather_of_a_position_along_an_axis_past_the_rank_is_refused(axis, valid):
    ff = FFModel(FFConfig(["-b", "2"]))
    gather = helper.make_node("Gather", ["x", "i"], ["y"], name="g1", axis=axis)   # 2 ** 62: a tuple of that many
    index = onnx.numpy_helper.from_array(np.array(1, np.int64), "i")
    with pytest.raises(ConfigError, match=rf"ONNX node 'g1' \(Gather\): axis {axis} of 'x' is out of range; "
                                          rf"valid: {valid}"):
        ONNXModel(_graph([gather], [index])).apply(ff, {"x": ff.create_tensor([2, 4], DataType.DT_FLOAT)})

def _matches_torch(model, x, path, ops, tol=1e-5, **export_kw):
    """Export ``model`` on ``x`` to ``path`` (its graph must hold ``ops``), build it into an FFModel,
    load its initializers and check the forward equals torch's."""
    torch.onnx.export(model, (torch.from_numpy(x),), str(path), dynamo=False, input_names=["x"], **export_kw)
    assert set(ops) <= {n.op_type for n in onnx.load(str(path)).graph.node}
    with torch.no_grad():
        np.testing.assert_allclose(_onnx_forward(path, x), model(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=tol)


def _onnx_forward(path, x, argv=(), dtype=DataType.DT_FLOAT, built=None) -> np.ndarray:
    """The forward of the ONNX file at ``path`` on ``x`` with its initializers (on one device, or
    as ``argv`` says); ``built(ffmodel)`` checks the graph before it runs."""
    om = ONNXModel(str(path))
    ff = FFModel(FFConfig(["-b", str(x.shape[0]), *argv]))
    xt = ff.create_tensor(list(x.shape), dtype)
    out = om.apply(ff, {"x": xt})
    if built is not None:
        built(ff)
    ff.compile(loss_type="mean_squared_error_avg")
    om.load_weights(ff)
    xt.set_tensor(ff, x)
    ff.forward()
    return out.get_tensor(ff)


def test_equal_initializers_shared_through_identity_load_and_match_torch(tmp_path):
    """torch's exporter keeps one of equal initializers and reads it through Identity nodes (every
    freshly initialized BatchNorm, tied or equal parameters): the graph builds, its weights load."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4)).eval()
    with torch.no_grad():
        model[0].bias.fill_(0.25)
        model[2].bias.fill_(0.25)         # equal to the first: exported once
    x = np.random.default_rng(0).standard_normal((BATCH, 4)).astype(np.float32)
    _matches_torch(model, x, tmp_path / "shared.onnx", ["Identity"], tol=1e-6)

def test_relu6_clip_hardswish_hardsigmoid_equal_torch(tmp_path):
    """torch exports ReLU6 as Clip(0, 6), clamp(min=0) as Clip(0), Hardswish and Hardsigmoid as
    ONNX's own operators: each builds from FFModel's element-wise layers and computes torch's values."""
    F = torch.nn.functional

    class Acts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)

        def forward(self, x):
            h = self.fc(x) * 5.0
            return F.silu(h) + F.relu6(h) + F.hardswish(h) + F.hardsigmoid(h) + torch.clamp(h, min=0)

    torch.manual_seed(0)
    model = Acts().eval()
    x = np.random.default_rng(0).standard_normal((BATCH, 6)).astype(np.float32)
    _matches_torch(model, x, tmp_path / "acts.onnx", ["Clip", "HardSwish", "HardSigmoid"])
    clip = _graph([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                  [helper.make_tensor("lo", TensorProto.FLOAT, [], [-1.0]), helper.make_tensor("hi", TensorProto.FLOAT, [], [1.0])])
    ff = FFModel(FFConfig(["-b", "2"]))      # other bounds: max and min with constants (CLAMP)
    xt = ff.create_tensor([2, 4], DataType.DT_FLOAT)
    out = ONNXModel(clip).apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    xt.set_tensor(ff, x)
    ff.forward()
    np.testing.assert_array_equal(out.get_tensor(ff), np.clip(x, -1, 1))
    bad = _graph([helper.make_node("Clip", ["x", "lo"], ["y"])], [helper.make_tensor("lo", TensorProto.FLOAT, [], [np.nan])])
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"Clip to \[nan, inf\]: the bounds must be numbers"):
        ONNXModel(bad).apply(ff, {"x": ff.create_tensor([2, 4], DataType.DT_FLOAT)})


@pytest.mark.parametrize("batch_first", [True, False])
def test_size_arithmetic_is_folded_and_transformer_encoders_equal_torch(tmp_path, batch_first):
    """torch exports the sizes a model reads (view(x.size(0), -1), attention's head split) as Shape,
    Gather, Mod, Concat ... subgraphs; with the FFModel inputs' static shapes they are constants, and
    a TransformerEncoder (q, k, v taken from the stacked projection by Gather) builds and computes
    torch's values. Exported without constant folding, so every such subgraph is in the file."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=batch_first)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.fc = torch.nn.Linear(5 * 16, 3)

        def forward(self, x):
            h = self.encoder(x)
            h = h if batch_first else h.transpose(0, 1)
            return self.fc(h.reshape(h.size(0), -1))

    torch.manual_seed(0)
    model = Net().eval()
    shape = (BATCH, 5, 16) if batch_first else (5, BATCH, 16)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _matches_torch(model, x, tmp_path / "encoder.onnx", ["Shape", "Gather", "Concat"], do_constant_folding=False)


def test_a_weight_input_with_a_symbolic_dimension_is_named(tmp_path):
    """export_params=False leaves weights as graph inputs; one of symbolic shape cannot size its layer."""
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, "N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"graph input 'w' is not given, so it is a weight .* symbolic dimension\(s\) N"):
        ONNXModel(helper.make_model(g)).apply(ff, {"x": ff.create_tensor([2, 4], DataType.DT_FLOAT)})


def test_slices_of_a_tensor_equal_torch(tmp_path):
    """chunk (ShuffleNet's channel split) and x[:, :, 1:, :-1] export as Slice with computed ends."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 1)

        def forward(self, x):
            a, b = self.conv(x).chunk(2, dim=1)
            return (a * 2.0 + b[:, :, 1:, :-1].mean()).flatten(1)

    torch.manual_seed(0)
    model = Net().eval()
    x = np.random.default_rng(0).standard_normal((BATCH, 4, 3, 3)).astype(np.float32)
    _matches_torch(model, x, tmp_path / "slice.onnx", ["Slice"])


def test_inference_mode_batch_norm_normalizes_with_the_files_running_statistics(tmp_path):
    """torch.onnx.export's default (eval mode) writes BatchNormalization with running statistics:
    the graph builds a BatchNorm with those statistics (constants) and a trainable scale and shift,
    and the forward equals the eval-mode module's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(3), torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    with torch.no_grad():
        model[0].weight.uniform_(0.5, 1.5)
        model[0].bias.uniform_(-1, 1)
        model[0].running_mean.uniform_(-1, 1)
        model[0].running_var.uniform_(0.5, 2)
    x = np.random.default_rng(0).standard_normal((BATCH, 3, 6, 6)).astype(np.float32)
    path = str(tmp_path / "bn_eval.onnx")
    torch.onnx.export(model.eval(), (torch.from_numpy(x),), path, dynamo=False, input_names=["x"],
                      do_constant_folding=False)
    node = next(n for n in onnx.load(path).graph.node if n.op_type == "BatchNormalization")
    assert len(node.input) == 5 and len(node.output) == 1      # inference form: running mean and var
    got = _onnx_forward(path, x)
    with torch.no_grad():
        inferred = model.eval()(torch.from_numpy(x)).numpy()
        trained = model.train()(torch.from_numpy(x)).numpy()
    model.eval()
    np.testing.assert_allclose(got, inferred, rtol=1e-5, atol=1e-5)
    assert np.abs(got - trained).max() > 1e-2     # the running statistics are used
    om = ONNXModel(path)
    ff = FFModel(FFConfig(["-b", str(BATCH)]))
    om.apply(ff, {"x": ff.create_tensor([BATCH, 3, 6, 6], DataType.DT_FLOAT)})
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("sdpa", [False, True], ids=["masked_fill", "sdpa"])
def test_gpt_exports_with_causal_masks_equal_torch(sdpa, tmp_path):
    """torch's exports of causal attention: masked_fill as Where(mask, -inf, scores), SDPA as an
    additive mask (Trilu, Equal, Where of the shapes, folded to a constant) added to the scores,
    each before a Softmax, map to FFModel's causal softmax; constant arrays (the positions' folded
    embedding rows) become model constants. The forward equals torch's."""
    from tests.frontends.test_torch_gpt import B, GPT, T, V
    torch.manual_seed(4)
    model = GPT(sdpa).eval()
    idx = np.random.default_rng(4).integers(0, V, (B, T)).astype(np.int64)
    path = str(tmp_path / "gpt.onnx")
    torch.onnx.export(model, (torch.from_numpy(idx),), path, dynamo=False, input_names=["x"])
    assert {"Where", "Softmax"} <= {n.op_type for n in onnx.load(path).graph.node}

    def causal(ff):
        assert any(n.op_type.name == "SOFTMAX" and n.attrs.causal for n in ff.pcg.nodes)
    got = _onnx_forward(path, idx, ["-ll:gpu", "2"], DataType.DT_INT64, causal)
    with torch.no_grad():
        np.testing.assert_allclose(got, model(torch.from_numpy(idx)).numpy(), rtol=1e-5, atol=1e-5)


def _run_graph(nodes, inits, x):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, list(x.shape))], initializer=inits)
    ff = FFModel(FFConfig(["-b", str(x.shape[0])]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    out = ONNXModel(helper.make_model(graph)).apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    ff.forward()
    return out.get_tensor(ff)


def _softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_where_by_a_constant_mask_that_is_not_causal_selects_exactly():
    """Where(constant mask, fill, x) that is not a causal mask: the selection, exactly."""
    cond = helper.make_tensor("c", TensorProto.BOOL, [2, 2], [True, False, False, True])
    fill = helper.make_tensor("f", TensorProto.FLOAT, [], [-1e10])
    nodes = [helper.make_node("Where", ["c", "f", "x"], ["y"], name="w"),
             helper.make_node("Softmax", ["y"], ["z"], name="s", axis=-1)]
    x = np.random.default_rng(0).standard_normal((2, 2)).astype(np.float32)
    want = _softmax(np.where([[True, False], [False, True]], np.float32(-1e10), x))
    np.testing.assert_allclose(_run_graph(nodes, [cond, fill], x), want, rtol=1e-6)


def test_where_by_a_computed_mask_equals_numpy():
    """A padding mask computed from the input (Equal, Not), selecting between the input and a fill
    (HuggingFace's BERT exported: Where(Equal(...), finfo.min, scores))."""
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    fill = helper.make_tensor("f", TensorProto.FLOAT, [], [-3.4028234663852886e38])
    nodes = [helper.make_node("Equal", ["x", "zero"], ["e"], name="eq"),
             helper.make_node("Not", ["e"], ["ne"], name="not"),
             helper.make_node("Where", ["ne", "x", "f"], ["y"], name="w"),
             helper.make_node("Softmax", ["y"], ["z"], name="s", axis=-1)]
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    x[0, 1:3] = 0
    x[1, 4] = 0
    want = _softmax(np.where(x != 0, x, np.float32(-3.4028234663852886e38)))
    np.testing.assert_allclose(_run_graph(nodes, [zero, fill], x), want, rtol=1e-6, atol=1e-7)


def test_min_and_max_of_tensors_and_constants_equal_numpy():
    """ONNX Min / Max of two operands (MPNet's relative positions): a tensor and a constant, two
    tensors; of constants alone, folded."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    low = helper.make_tensor("low", TensorProto.FLOAT, [3], [-0.2, 0.0, 0.2])
    nodes = [helper.make_node("Min", ["x", "half"], ["a"], name="min"),
             helper.make_node("Max", ["half", "low"], ["c"], name="folded"),
             helper.make_node("Max", ["a", "c"], ["z"], name="max")]
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    want = np.maximum(np.minimum(x, 0.5), np.maximum(0.5, np.float32([-0.2, 0.0, 0.2])))
    np.testing.assert_allclose(_run_graph(nodes, [half, low], x), want, rtol=1e-6)


def test_scatter_nd_of_a_region_and_where_of_two_constants_equal_torch(tmp_path):
    """torch's slice writes exported (ScatterND of computed data at constant indices listing a box cut
    along one axis, OPT's and BART's masks) and a Where between two constants by a computed
    condition: the forward equals torch's."""
    class Writes(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y[:, 1:3] = x[:, :2] + 1
            z = torch.where(x > 0, 1.0, -1.0)
            return y * z

    x = np.random.default_rng(3).standard_normal((2, 4, 3)).astype(np.float32)
    path = str(tmp_path / "writes.onnx")
    torch.onnx.export(Writes(), (torch.from_numpy(x),), path, dynamo=False, input_names=["x"])
    assert {"ScatterND", "Where"} <= {n.op_type for n in onnx.load(path).graph.node}
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 4, 3], DataType.DT_FLOAT)
    out = ONNXModel(path).apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = Writes()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-6)


def test_scatter_regions_are_boxes_in_row_major_order():
    from flexrt.onnx._composed import scatter_region
    box = np.stack(np.meshgrid(np.arange(2), np.arange(1, 3), indexing="ij"), -1)     # [2, 2, 2]: rows 0-1, cols 1-2
    assert scatter_region(box, (2, 4, 3)) == [(0, 2), (1, 3)]
    assert scatter_region(box - np.array([0, 4]), (2, 4, 3)) == [(0, 2), (1, 3)]         # counted from the end
    assert scatter_region(box[:, ::-1], (2, 4, 3)) is None                                # not row-major
    assert scatter_region(box[:, :1], (2, 4, 3)) is not None and scatter_region(box + 9, (2, 4, 3)) is None
    assert scatter_region(np.array([[0, 0], [1, 1]]), (2, 2)) is None                     # a diagonal, not a box


def test_reduce_max_equals_torch(tmp_path):
    class AmaxNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            return torch.cat([y.amax((2, 3)), y.amax(1).flatten(1)], 1)

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((BATCH, 3, 6, 6)).astype(np.float32)
    _matches_torch(AmaxNet().eval(), x, tmp_path / "amax.onnx", ["ReduceMax"], tol=1e-6)


def test_an_onnx_file_is_a_model_for_the_commands(tmp_path, capsys):
    """`flexrt show|simulate|train FILE.onnx`: the graph inputs at -b's batch (else the file's fixed
    one), built through the ONNX front end; a missing or corrupt file is one clear line."""
    import json as _json
    from flexrt.cli import main
    model, x, _ = make("cnn")
    path = export(model, x, tmp_path / "cnn.onnx")             # the file fixes the batch (BATCH)
    assert main(["show", path, "--json"]) == 0
    shown = _json.loads(capsys.readouterr().out)
    assert shown["config"]["batch_size"] == BATCH and shown["source"] == path
    assert main(["simulate", path, "-b", "8", "--machine", "dgx1_v100"]) == 0
    assert "model cnn (batch 8) on dgx1_v100" in capsys.readouterr().out
    assert main(["train", path, "--machine", "local", "--steps", "1"]) == 0
    capsys.readouterr()
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    assert main(["show", str(tmp_path / "junk.onnx")]) == 1
    assert "cannot load" in capsys.readouterr().err


def test_an_undeclared_weight_names_the_exporter_option():
    """torch's dynamo exporter with export_params=False reads weights no node makes and the graph
    does not declare: refused naming the tensor and the export options that declare it."""
    conv = helper.make_node("Conv", ["x", "conv.weight"], ["y"], name="node_conv2d", kernel_shape=[3, 3])
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"'node_conv2d' \(Conv\): the shape of 'conv.weight' is unknown .*"
                                          r"export_params=True, or dynamo=False"):
        ONNXModel(_graph([conv], shape=(2, 3, 8, 8))).apply(ff, {"x": ff.create_tensor([2, 3, 8, 8], DataType.DT_FLOAT)})


def test_gelu_tanh_approximation_equals_torch():
    """ONNX Gelu with approximate="tanh" (opset 20) is GELU's tanh approximation, built of
    element-wise layers; other approximations are refused naming the node."""
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32) * 3
    for approximate, ok in (("tanh", True), ("erf", False)):
        g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="g1", approximate=approximate)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
        ff = FFModel(FFConfig(["-b", "2"]))
        xt = ff.create_tensor([2, 4], DataType.DT_FLOAT)
        if not ok:
            with pytest.raises(ConfigError, match=r"'g1' \(Gelu\): Gelu approximate='erf'; valid: none, tanh"):
                ONNXModel(model).apply(ff, {"x": xt})
            continue
        out = ONNXModel(model).apply(ff, {"x": xt})
        ff.compile(loss_type="mean_squared_error_avg")
        xt.set_tensor(ff, x)
        ff.forward()
        want = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-6)
