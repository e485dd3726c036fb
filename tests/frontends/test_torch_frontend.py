"""flexrt.torch: PyTorch modules traced into FFModels. Laws: parameter counts equal torch's; the
forward pass with torch's weights equals torch's under data parallelism and a hybrid strategy on
several devices; one SGD step equals torch's SGD step; torch_to_file -> file_to_ff builds the same
graph; what cannot map raises our error naming the node and its source line."""

import copy

import numpy as np
import pytest

from flexrt.errors import ConfigError, FrontendWarning, ShapeError
from flexrt.model import DataType, FFConfig, FFModel
from flexrt.torch import PyTorchModel, file_to_ff
from tests.frontends._models import (
    BATCH,
    MODELS,
    build,
    compiled,
    hybrid_strategy_file,
    make,
    nn,
    torch,
    torch_sgd_step,
)

F = torch.nn.functional
FAST = ["mlp", "cnn", "encoder", "scaled", "vit", "unet"]
# float32 forward tolerance: 1e-5 (ResNet-18 on 32x32 images: its last BatchNorms take statistics
# over 4 values a channel on each of 2 devices; on 16x16 images, over 1, float32 rounding grows to 2e-5)
TOL = {"mlp": 1e-5, "cnn": 1e-5, "encoder": 1e-5, "scaled": 1e-5, "vit": 1e-5, "unet": 1e-5, "resnet18": 1e-5}
ALL = FAST + [pytest.param("resnet18", marks=pytest.mark.slow)]


def _strategies(name, pm, shape, tmp_path):
    return [["-ll:gpu", "2"], ["--import", hybrid_strategy_file(pm, shape, tmp_path)]]


def _reference_forward(model, name, x, argv):
    """torch's output; with BatchNorm under data parallelism each device normalizes its own slice
    (FlexFlow's and DDP's per-device statistics), so torch runs on each slice."""
    with torch.no_grad():
        if name == "resnet18" and argv[0] == "-ll:gpu":
            k = int(argv[1])
            return np.concatenate([model(torch.from_numpy(p)).numpy() for p in np.split(x, k)])
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("name", ["mlp", "cnn", "encoder", "unet", "resnet18"])
def test_parameter_counts_equal_torch(name):
    model, _, _ = make(name)
    pm = PyTorchModel(model)
    ff, _, _ = build(pm, MODELS[name][1])
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())
    assert set(pm.ff_weights()) == {n.name for n in ff.pcg.nodes if n.op_type.name == "WEIGHT"}


@pytest.mark.parametrize("name", ALL)
def test_forward_with_torch_weights_equals_torch_under_dp_and_hybrid(name, tmp_path):
    model, x, _ = make(name)
    pm = PyTorchModel(model)
    shape = MODELS[name][1]
    for argv in _strategies(name, pm, shape, tmp_path):
        ff, xt, out = compiled(pm, shape, argv)
        assert len({t.device for t in ff.session.plan.tasks if t.device < ff.machine.num_devices}) >= 2
        xt.set_tensor(ff, x)
        ff.forward()
        want = _reference_forward(model, name, x, argv)
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=TOL[name], err_msg=f"{name} {argv}")


@pytest.mark.parametrize("name", ALL)
def test_one_sgd_step_equals_torch_sgd(name, tmp_path):
    model, x, y = make(name)
    pm = PyTorchModel(model)
    shape = MODELS[name][1]
    dtype, atol = DataType.DT_FLOAT, 2e-6
    argv = ["--import", hybrid_strategy_file(pm, shape, tmp_path, dtype=dtype)]
    ff, _, _ = compiled(pm, shape, argv, dtype=dtype)
    before = pm.ff_weights()
    ff.fit(x=x, y=y, epochs=1)
    loss = torch_sgd_step(model, x, y)
    assert ff.history[0]["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-6)
    after = pm.ff_weights()
    got = ff.get_weights()
    still = []
    for wname, want in after.items():
        np.testing.assert_allclose(got[wname], want, rtol=1e-5, atol=atol, err_msg=wname)
        if np.abs(before[wname] - want).max() <= 1e-5:
            still.append(wname)
    # every weight moved by more than the tolerance, so the comparison can fail; the key bias alone
    # has a zero gradient (it adds the same score to every key of a query)
    assert all(w.endswith(".bk") for w in still), still


def test_file_round_trip_builds_the_same_graph(tmp_path):
    model, _, _ = make("cnn")
    pm = PyTorchModel(model)
    path = tmp_path / "cnn.ff"
    pm.torch_to_file(str(path))
    lines = path.read_text().splitlines()
    assert lines[0].endswith("; INPUT") and lines[-1].endswith("; OUTPUT")
    assert "conv1; x,; relu,; CONV2D; 6; 3; 3; 1; 1; 1; 1; 10; 1; 1; in_channels=3" in lines
    a, _, _ = build(pm, MODELS["cnn"][1])
    b = FFModel(FFConfig(["-b", str(BATCH)]))
    xb = b.create_tensor([BATCH, 3, 8, 8], DataType.DT_FLOAT)
    b.softmax(file_to_ff(path, b, [xb])[0], name="prob")
    sig = lambda m: [(n.name, n.attrs, str(m.pcg.shape(r)) if (r := None) else None) for n in m.pcg.nodes]
    assert sig(a) == sig(b)
    assert [layer.outputs[0].dims for layer in a.get_layers().values()] == \
        [layer.outputs[0].dims for layer in b.get_layers().values()]


def test_module_applied_twice_shares_its_weights_through_the_file(tmp_path):
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, y):
            return torch.cat((self.fc(x), self.fc(y)), 1)

    pm = PyTorchModel(Twice())
    path = tmp_path / "twice.ff"
    pm.torch_to_file(str(path))
    assert "fc_1; y,; cat,; LINEAR; 4; 10; 1; in_features=4; shares=fc" in path.read_text()
    ff = FFModel(FFConfig(["-b", "2"]))
    xs = [ff.create_tensor([2, 4], DataType.DT_FLOAT) for _ in range(2)]
    out = file_to_ff(str(path), ff, xs)[0]
    assert out.dims == (2, 8) and ff.num_parameters() == 20


def test_reads_flexflow_written_lines(tmp_path):
    """Lines as FlexFlow's own torch_to_file writes them (no flexrt keywords)."""
    path = tmp_path / "mlp.ff"
    path.write_text("x; ; linear1,; INPUT\nlinear1; x,; relu,; LINEAR; 512; 10; 1\nrelu; linear1,; linear2,; RELU\n"
                    "linear2; relu,; softmax,; LINEAR; 10; 10; 0\nsoftmax; linear2,; output,; SOFTMAX\n"
                    "output; softmax,; ; OUTPUT\n")
    ff = FFModel(FFConfig(["-b", "8"]))
    x = ff.create_tensor([8, 784], DataType.DT_FLOAT)
    (out,) = PyTorchModel.file_to_ff(str(path), ff, [x])
    assert out.dims == (8, 10) and ff.num_parameters() == 784 * 512 + 512 + 512 * 10


@pytest.mark.parametrize("line, match", [
    ("linear1; x,; output,; LINEAR; 16; 10; ab", r"node 'linear1' \(LINEAR\).*use_bias \(the third field\) must be 0 or 1 "
                                                 r"\(False or True\), got str 'ab'"),
    ("linear1; x,; output,; LINEAR; 16; 10; 99999", r"use_bias \(the third field\) must be 0 or 1.*got int 99999"),
    ("linear1; x,x,x,; output,; MULTIHEAD_ATTENTION; 16; 2; 16; 16; 0.0; 1; batch_first=None",
     r"node 'linear1' \(MULTIHEAD_ATTENTION\).*batch_first must be 0 or 1 \(False or True\), got NoneType None"),
])
def test_yes_no_fields_of_a_text_file_must_be_0_or_1(tmp_path, line, match):
    """A use_bias or batch_first that is not 0 / 1 was taken as its truth value (batch_first=None
    transposed the attention's inputs silently); it is refused naming the node."""
    path = tmp_path / "bad.ff"
    path.write_text(f"x; ; linear1,; INPUT\n{line}\noutput; linear1,; ; OUTPUT\n")
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=match):
        file_to_ff(str(path), ff, [ff.create_tensor([2, 4, 16], DataType.DT_FLOAT)])


def test_functional_and_method_forms_match_torch():
    class Ops(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.attn = nn.MultiheadAttention(6, 2)         # sequence first
            self.ln = nn.LayerNorm(6)

        def forward(self, ids):
            h = self.emb(ids)                                # [N, L, 6]
            t = h.transpose(0, 1)                            # [L, N, 6]
            a, _ = self.attn(t, t, t, need_weights=False)
            h = self.ln(h + a.permute(1, 0, 2))
            q, k = h.chunk(2, dim=-1)                        # [N, L, 3] each
            s = torch.softmax(torch.matmul(q, k.transpose(1, 2)) / 2.0, dim=-1)
            h = torch.bmm(s, k).reshape(h.shape[0], -1)      # [N, L*3]
            h = 1.0 - torch.sigmoid(h[:, 1:])
            return h.unsqueeze(1).squeeze(1).sum(dim=-1, keepdim=True) + h.pow(2).mean(-1, keepdim=True)

    torch.manual_seed(0)
    model = Ops()
    pm = PyTorchModel(model)
    ff = FFModel(FFConfig(["-b", "4", "-ll:gpu", "2"]))
    ids = ff.create_tensor([4, 5], DataType.DT_INT32)
    (out,) = pm.torch_to_ff(ff, [ids])
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    x = np.random.default_rng(0).integers(0, 10, (4, 5)).astype(np.int32)
    ids.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = model(torch.from_numpy(x).long()).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-5)


def test_unsupported_function_names_the_node_and_source_line():
    class Bad(nn.Module):
        def forward(self, x):
            return torch.cumprod(x, 1)

    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3], DataType.DT_FLOAT)
    with pytest.raises(ConfigError) as e:
        PyTorchModel(Bad()).torch_to_ff(ff, [x])
    msg = str(e.value)
    assert "torch node 'cumprod'" in msg and "torch.cumprod" in msg and "test_torch_frontend.py:" in msg
    assert "return torch.cumprod(x, 1)" in msg and "supported functions" in msg


def test_unsupported_module_and_arguments_raise_ours(tmp_path):
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3, 8], DataType.DT_FLOAT)
    with pytest.raises(ConfigError, match=r"torch node 'conv_1d'.*module torch.nn.modules.conv.Conv3d has no FFModel"):
        PyTorchModel(_Named(nn.Conv3d(3, 3, 1))).torch_to_ff(ff, [x])
    with pytest.raises(ConfigError, match="dilation"):   # dilated convolutions map with groups=1 only
        PyTorchModel(_Named(nn.Conv2d(3, 3, 3, dilation=2, groups=3))).torch_to_string()
    with pytest.raises(ConfigError, match=r"node 'idx' \(ATTRIBUTE\).*whose values FlexFlow's text format does "
                                          r"not hold"):
        file_to_ff(_written(PyTorchModel(_Buffer()), tmp_path), ff, [x])


def test_declared_input_size_mismatch_warns_and_builds_from_the_input_as_flexflow_does():
    """FlexFlow's front ends ignore a layer's declared in_features / in_channels (FFModel's dense and
    conv2d take their input size from the input); flexrt builds the same layer, warns at the
    caller's line, and refuses the source's weights for it by name."""
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 3, 8], DataType.DT_FLOAT)
    pm = PyTorchModel(_Named(nn.Linear(5, 2), "fc"))               # 8 features, not 5
    with pytest.warns(FrontendWarning, match=r"node 'fc' \(LINEAR\) at call_module fc.*: declares in_features=5, "
                                             r"but its input \[2, 3, 8\] has 8") as caught:
        (out,) = pm.torch_to_ff(ff, [x])
    assert [w.filename for w in caught] == [__file__]
    assert list(out.dims) == [2, 3, 2]
    assert list(ff.get_layer_by_name("fc").get_parameter_by_id(0).dims) == [8, 2]
    ff.compile(loss_type="mean_squared_error_avg")
    with pytest.raises(ShapeError, match=r"layer 'fc': weight kernel is \[8, 2\] in the FFModel, the source gives \[5, 2\]"):
        pm.load_weights(ff)


class _Named(nn.Module):
    def __init__(self, m, name="conv_1d"):
        super().__init__()
        self.add_module(name, m)
        self.name = name

    def forward(self, x):
        return getattr(self, self.name)(x)


class _Buffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.arange(8.0))

    def forward(self, x):
        return x * self.idx


def _written(pm, folder) -> str:
    path = str(folder / "model.ff")
    pm.torch_to_file(path)
    return path


def test_a_buffer_read_directly_is_a_constant():
    """A tensor buffer read in forward (RoPE's cos/sin, position ids) is a constant of the model."""
    ff = FFModel(FFConfig(["-b", "2", "-ll:gpu", "2"]))
    x = ff.create_tensor([2, 3, 8], DataType.DT_FLOAT)
    (out,) = PyTorchModel(_Buffer()).torch_to_ff(ff, [x])
    ff.compile(loss_type="mean_squared_error_avg")
    data = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    x.set_tensor(ff, data)
    ff.forward()
    np.testing.assert_allclose(out.get_tensor(ff), data * np.arange(8.0), rtol=1e-6)


class _FreeParams(nn.Module):
    """Parameters read directly, as ViT's class token and position embedding and ConvNeXt's layer
    scale: concatenated, added and multiplied."""

    def __init__(self):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, 1, 6))
        self.pos = nn.Parameter(torch.randn(1, 5, 6))
        self.scale = nn.Parameter(torch.rand(6) + 0.5)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):                     # x: [N, 4, 6]
        t = torch.cat([self.token.expand(x.size(0), -1, -1), x], dim=1) + self.pos
        return self.fc((t * self.scale)[:, 0])


def test_parameters_read_directly_train_like_torch(tmp_path):
    """A parameter read directly is a bias-free dense layer of the constant 1 (its kernel the values):
    the forward and one SGD step equal torch's, under data parallelism, and a parameter read twice
    shares one kernel; the parameter count is torch's."""
    torch.manual_seed(3)
    model = _FreeParams()
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((4, 4, 6)).astype(np.float32), rng.integers(0, 5, (4, 1)).astype(np.int32)
    ff = _forward_and_sgd_step_equal_torch(model, x, y)
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())


def _forward_and_sgd_step_equal_torch(model, x, y, argv=("-ll:gpu", "2")):
    """Convert ``model`` (float32, a softmax added), check its forward with torch's weights and one
    SGD step (lr 0.1, sparse cross-entropy) against torch's; the FFModel."""
    from flexrt.model import SGDOptimizer
    ff = FFModel(FFConfig(["-b", str(x.shape[0]), *argv]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    pm = PyTorchModel(model)
    (out,) = pm.torch_to_ff(ff, [xt])
    ff.softmax(out)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="sparse_categorical_crossentropy")
    pm.load_weights(ff)
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-6)
    ff.fit(x=x, y=y, epochs=1)
    assert ff.history[0]["loss"] == pytest.approx(torch_sgd_step(model, x, y), rel=1e-5)
    got = ff.get_weights()
    for name, w in pm.ff_weights().items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    return ff


def test_needs_a_module():
    with pytest.raises(ConfigError, match="must be a torch.nn.Module"):
        PyTorchModel(object())


def test_flexflows_older_api_builds_the_same_graph(tmp_path):
    """FlexFlow r21.09's form: fx.torch_to_flexflow(module, file), then PyTorchModel(file) (or
    PyTorchModel(model=module)).apply(ffmodel, inputs): the graph torch_to_ff builds."""
    from flexrt.torch import fx
    model, _, _ = make("cnn")
    path = tmp_path / "cnn.ff"
    fx.torch_to_flexflow(model, str(path))

    def applied(pm):
        m = FFModel(FFConfig(["-b", str(BATCH)]))
        x = m.create_tensor([BATCH, 3, 8, 8], DataType.DT_FLOAT)
        m.softmax(pm.apply(m, [x])[0], name="prob")
        return [(n.name, n.attrs) for n in m.pcg.nodes]
    want, _, _ = build(PyTorchModel(model), MODELS["cnn"][1])
    assert applied(PyTorchModel(str(path))) == applied(PyTorchModel(model=model)) == \
        [(n.name, n.attrs) for n in want.pcg.nodes]
    with pytest.raises(ConfigError, match="holds a file, not a module"):
        PyTorchModel(filename=str(path)).torch_to_file(str(tmp_path / "again.ff"))
    with pytest.raises(ConfigError, match="give a torch.nn.Module"):
        PyTorchModel()


class _Indexed(nn.Module):
    def forward(self, x):                       # x: [N, 3, 4, 6]
        a = x[..., :4]                          # ... before a slice of the last dimension
        b = x[0, ...]                           # an int before ...
        c = x[:, ..., 2]                        # ... between
        d = x[..., None, 1:3]                   # a new dimension after ...
        return (a.sum(-1).sum(-1).sum(-1) + b.sum() + c.sum(-1).sum(-1) + d.sum(-1).sum(-1).sum(-1).sum(-1))


@pytest.mark.parametrize("train", [False, True])
def test_dropout_follows_the_module_mode_and_ellipsis_indexes_as_torch(train):
    """nn.Dropout in eval mode passes its input through (as F.dropout(training=False) does); in
    training mode it is FFModel's dropout. Indexes with ... select what torch selects."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.Linear(6, 6))
    model.train(train)
    ops = [line.split("; ")[3] for line in PyTorchModel(model).torch_to_string()]
    assert ("DROPOUT" in ops) == train and ("IDENTITY" in ops) == (not train)
    if train:
        return
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 3, 4, 6], DataType.DT_FLOAT)
    pm = PyTorchModel(nn.Sequential(model, _Indexed()))
    (out,) = pm.torch_to_ff(ff, [xt])
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 6)).astype(np.float32)
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = nn.Sequential(model, _Indexed())(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-4)


class _Activations(nn.Module):
    """SiLU, ReLU6, Hardswish, Hardsigmoid as modules and functions (MobileNet, EfficientNet)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.acts = nn.ModuleList([nn.SiLU(), nn.ReLU6(), nn.Hardswish(), nn.Hardsigmoid()])

    def forward(self, x):
        h = self.fc(x) * 5.0                      # spans every piece of ReLU6 (below 0, 0..6, above 6)
        out = F.silu(h) + F.relu6(h) + F.hardswish(h) + F.hardsigmoid(h)
        for act in self.acts:
            out = out + act(h)
        return out


def test_composite_activations_equal_torch_through_the_model_and_its_file(tmp_path):
    torch.manual_seed(0)
    model = _Activations()
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    pm = PyTorchModel(model)
    path = tmp_path / "acts.ff"
    pm.torch_to_file(str(path))
    for via_file in (False, True):
        ff = FFModel(FFConfig(["-b", "4"]))
        xt = ff.create_tensor([4, 6], DataType.DT_FLOAT)
        (out,) = file_to_ff(str(path), ff, [xt]) if via_file else pm.torch_to_ff(ff, [xt])
        ff.compile(loss_type="mean_squared_error_avg")
        pm.load_weights(ff)
        xt.set_tensor(ff, x)
        ff.forward()
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-5, err_msg=f"file: {via_file}")


def test_batch_norm_eps_is_the_modules(tmp_path):
    """BatchNorm2d(eps=1e-3) (Inception-v3, GoogLeNet) normalizes with its eps, in training mode as FFModel does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, eps=1e-1), nn.ReLU()).train()
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32) * 0.1   # variance near eps
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 3, 6, 6], DataType.DT_FLOAT)
    pm = PyTorchModel(model)
    (out,) = pm.torch_to_ff(ff, [xt])
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    xt.set_tensor(ff, x)
    ff.forward()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("content, message", [
    (b"", r"empty.ff: the file holds no nodes"),
    (b"input1; ; r,; INPUT\nr; input1,; ; RELU\n", r"empty.ff:2: the file has no OUTPUT line"),
    (b"input1; ; r,; INPUT\n\xff\xfe\n", r"empty.ff:2: not valid UTF-8 text: byte 0xff"),
])
def test_bad_model_files_are_refused_with_file_and_line(tmp_path, content, message):
    path = tmp_path / "empty.ff"
    path.write_bytes(content)
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=message):
        file_to_ff(str(path), ff, [ff.create_tensor([2, 3], DataType.DT_FLOAT)])
    with pytest.raises(ConfigError, match=r"/dev/zero is not a regular file"):
        file_to_ff("/dev/zero", ff, [])


def stochastic_depth(input, p, mode, training=True):    # torchvision.ops' signature; flexrt maps it by name
    return input


stochastic_depth.__module__ = "torchvision.ops.stochastic_depth"
torch.fx.wrap("stochastic_depth")


class _Residual(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc, self.p = nn.Linear(4, 4), p

    def forward(self, x):
        return x + stochastic_depth(self.fc(x), self.p, "row", self.training)


def test_stochastic_depth_is_the_identity_outside_training_and_refused_in_it():
    """EfficientNet's torchvision.ops.stochastic_depth, mapped by name (flexrt does not import torchvision)."""
    model = _Residual(0.2).eval()
    ops = [line.split("; ")[3] for line in PyTorchModel(model).torch_to_string()]
    assert "IDENTITY" in ops and "DROPOUT" not in ops
    with pytest.raises(ConfigError, match=r"stochastic_depth\(p=0.2, mode='row'\) in training drops whole samples"):
        PyTorchModel(_Residual(0.2).train()).torch_to_string()


@pytest.mark.parametrize("argv", [[], ["-ll:gpu", "2"]])
def test_eval_mode_batch_norm_normalizes_with_the_running_statistics_as_torch(argv):
    """A BatchNorm module in eval mode normalizes with its running statistics (constants of the
    model), its scale and shift trainable: the forward equals the eval-mode module's on one device
    and under data parallelism (no per-device statistics), and one SGD step equals torch's SGD step
    in eval mode (the statistics stay; the scale, shift and conv move)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(64),
                          nn.Linear(64, 5))
    with torch.no_grad():
        for bn in (model[1], model[4]):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    model.eval()
    x = np.random.default_rng(0).standard_normal((BATCH, 3, 6, 6)).astype(np.float32)
    y = np.array([[0], [3], [1], [4]], dtype=np.int32)
    pm = PyTorchModel(model)
    ff, xt, out = compiled(pm, (3, 6, 6), argv)
    assert not any(n.op_type.name == "BATCH_NORM" for n in ff.pcg.nodes)
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
        trained = copy.deepcopy(model).train()(torch.from_numpy(x)).numpy()   # a copy: train mode updates stats
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-6)
    assert np.abs(want - trained).max() > 1e-2          # the running statistics differ from the batch's
    ff.fit(x=x, y=y, epochs=1)
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    torch_sgd_step(model, x, y)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats.items())
    for name, w in pm.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[name], w, rtol=1e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("k, s, p, hw", [(3, 2, 0, (13, 14)), (3, 2, 1, (8, 9)), (2, 2, 0, (7, 7))])
def test_max_pool_ceil_mode_equals_torch_forward_and_sgd_step(k, s, p, hw):
    """MaxPool2d(ceil_mode=True) (SqueezeNet, GoogLeNet): windows past the padded input read the
    dtype's lowest number (a constant concatenated at the bottom and right), which no max takes:
    the forward and one SGD step equal torch's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.MaxPool2d(k, s, p, ceil_mode=True), nn.Flatten(),
                          nn.LazyLinear(4))
    x = np.random.default_rng(0).standard_normal((2, 2, *hw)).astype(np.float32)
    y = np.array([[1], [3]], np.int32)
    with torch.no_grad():
        model(torch.from_numpy(x))          # materializes the lazy linear
    _forward_and_sgd_step_equal_torch(model, x, y)


class _Amax(nn.Module):
    def __init__(self, dims, keepdim):
        super().__init__()
        self.dims, self.keepdim = dims, keepdim
        self.conv, self.fc = nn.Conv2d(2, 3, 1), nn.LazyLinear(4)

    def forward(self, x):
        return self.fc(torch.flatten(torch.amax(self.conv(x), self.dims, keepdim=self.keepdim), 1))


@pytest.mark.parametrize("dims, keepdim", [((2, 3), False), ((1,), True), ((1, 3), False), ((3,), False)])
def test_amax_equals_torch_forward_and_sgd_step(dims, keepdim):
    """torch.amax (and ONNX ReduceMax) over any dimensions: the reduced dimensions moved last and
    max-pooled by one window; the forward and one SGD step equal torch's."""
    torch.manual_seed(0)
    model = _Amax(dims, keepdim)
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 6)).astype(np.float32)
    with torch.no_grad():
        model(torch.from_numpy(x))
    _forward_and_sgd_step_equal_torch(model, x, np.array([[0], [3]], np.int32))


@pytest.mark.parametrize("hw, out", [((1, 1), 6), ((2, 3), 7), ((5, 7), (3, 2))])
def test_adaptive_average_pooling_with_uneven_windows_equals_torch(hw, out):
    """AdaptiveAvgPool2d where windows do not tile the input (AlexNet's and VGG's on small images):
    two batch matmuls with constant window matrices; forward and SGD step equal torch's. Adaptive
    max pooling there is refused (not linear)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.AdaptiveAvgPool2d(out), nn.Flatten(), nn.LazyLinear(4))
    x = np.random.default_rng(2).standard_normal((2, 2, *hw)).astype(np.float32)
    with torch.no_grad():
        model(torch.from_numpy(x))
    _forward_and_sgd_step_equal_torch(model, x, np.array([[2], [1]], np.int32))
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ShapeError, match=r"adaptive max pooling to 7x7 of a 2x3 input has uneven windows"):
        PyTorchModel(nn.AdaptiveMaxPool2d(7)).torch_to_ff(ff, [ff.create_tensor([2, 2, 2, 3], DataType.DT_FLOAT)])
