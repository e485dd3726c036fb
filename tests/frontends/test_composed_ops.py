"""Operators FFModel has no layer for, built from its layers (``flexrt.torch._composites``): the
transposed convolution, interpolation, group and instance norms, bags of embeddings, var/std,
F.normalize, clamp, log-softmax, logsumexp, softplus, mish, abs, padding (F.pad, the padding modules,
Conv2d's padding_mode), PReLU, tensors made in forward, Unflatten. Laws: each equals torch's forward on
random configurations (float32, 1e-5) through the module, FlexFlow's text format and ONNX; the
ones with weights train like torch (one SGD step); what cannot map raises our error naming it."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, FrontendWarning, ShapeError  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402
from tests.frontends._models import SCCE, Fn, compare_forward, compare_onnx, torch_sgd_step  # noqa: E402

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _image(n, c, h, w, seed=0):
    return np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(np.float32)


@st.composite
def _conv_transposes(draw):
    groups = draw(st.sampled_from([1, 2]))
    k, s = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    p = draw(st.integers(0, k))                  # padding up to the kernel: crops past kernel - 1
    op = draw(st.integers(0, s - 1))
    h, w = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    if (h - 1) * s + k - 2 * p + op < 1 or (w - 1) * s + k - 2 * p + op < 1:
        p = 0
    return groups, k, s, p, op, h, w, draw(st.booleans())


@SETTINGS
@given(_conv_transposes())
def test_conv_transpose2d_equals_torch(tmp_path, cfg):
    groups, k, s, p, op, h, w, bias = cfg
    torch.manual_seed(0)
    m = nn.Sequential(nn.ConvTranspose2d(2 * groups, 3 * groups, k, s, p, output_padding=op, groups=groups, bias=bias))
    compare_forward(m, _image(2, 2 * groups, h, w), tmp_path)


@st.composite
def _interpolations(draw):
    rank = draw(st.sampled_from([3, 4]))
    mode = draw(st.sampled_from(["nearest", "nearest-exact"] + (["linear"] if rank == 3 else ["bilinear", "bicubic"])))
    corners = draw(st.booleans()) if mode in ("linear", "bilinear", "bicubic") else None
    sizes = [draw(st.integers(1, 6)) for _ in range(rank - 2)]
    if draw(st.booleans()):
        return rank, sizes, {"size": tuple(draw(st.integers(1, 9)) for _ in sizes)}, mode, corners
    scale = draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]))
    recompute = draw(st.booleans())
    return rank, sizes, {"scale_factor": scale, "recompute_scale_factor": recompute}, mode, corners


@SETTINGS
@given(_interpolations())
def test_interpolation_equals_torch(tmp_path, cfg):
    rank, sizes, how, mode, corners = cfg
    x = np.random.default_rng(1).standard_normal((2, 3, *sizes)).astype(np.float32)
    if "scale_factor" in how and any(int(d * how["scale_factor"]) < 1 for d in sizes):
        return
    fn = Fn(lambda t: F.interpolate(t, mode=mode, align_corners=corners, **how) * 2.0)   # an operator after it
    # bicubic sums 16 terms of both signs: float32 sums in another order differ by a few 1e-6
    compare_forward(fn, x, tmp_path, atol=1e-5 if mode == "bicubic" else 1e-6)


@pytest.mark.parametrize("kind", ["upsample", "upsample_bilinear", "corners", "size", "bicubic", "bicubic_corners"])
def test_interpolation_through_onnx_resize(tmp_path, kind):
    module = {"upsample": nn.Upsample(scale_factor=2), "upsample_bilinear": nn.Upsample(scale_factor=2, mode="bilinear"),
              "corners": nn.UpsamplingBilinear2d(scale_factor=3),
              "size": Fn(lambda t: F.interpolate(t, size=(7, 3), mode="bilinear")),
              "bicubic": Fn(lambda t: F.interpolate(t, size=(9, 2), mode="bicubic")),
              "bicubic_corners": nn.Upsample(scale_factor=1.5, mode="bicubic", align_corners=True)}[kind]
    compare_onnx(module, _image(2, 3, 4, 5), tmp_path / "m.onnx", ["Resize"])


def _affine(m, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
        m.bias.copy_(torch.rand(m.bias.shape, generator=g) - 0.5)
    return m


@pytest.mark.parametrize("norm", ["group1", "group2", "group4", "group_plain", "instance", "instance_affine"])
def test_group_and_instance_norms_equal_torch(tmp_path, norm):
    module = {"group1": _affine(nn.GroupNorm(1, 4)), "group2": _affine(nn.GroupNorm(2, 4, eps=1e-3)),
              "group4": _affine(nn.GroupNorm(4, 4)), "group_plain": nn.GroupNorm(2, 4, affine=False),
              "instance": nn.InstanceNorm2d(4), "instance_affine": _affine(nn.InstanceNorm2d(4, affine=True))}[norm]
    m = nn.Sequential(module)
    x = _image(2, 4, 3, 5)
    compare_forward(m, x, tmp_path)
    compare_onnx(m, x, tmp_path / "m.onnx", ["InstanceNormalization"])


def test_instance_norm_1d_running_statistics_and_a_refusal():
    compare_forward(nn.Sequential(_affine(nn.InstanceNorm1d(3, affine=True))), _image(2, 3, 6, 1)[..., 0])
    tracked = nn.InstanceNorm2d(3, affine=True, track_running_stats=True)
    with torch.no_grad():
        tracked.running_mean.uniform_(-1, 1)
        tracked.running_var.uniform_(0.5, 2)
    compare_forward(nn.Sequential(_affine(tracked)).eval(), _image(2, 3, 4, 4))   # eval: the running statistics
    ff = FFModel(FFConfig(["-b", "2"]))     # an InstanceNorm1d given a 4-D tensor: torch refuses too
    with pytest.raises(ShapeError, match=r"needs \[N, C, \*\] of rank 3, got \[2, 3, 4, 4\]"):
        PyTorchModel(nn.Sequential(nn.InstanceNorm1d(3))).torch_to_ff(ff, [ff.create_tensor([2, 3, 4, 4],
                                                                                             DataType.DT_FLOAT)])


class _Bags(nn.Module):
    """DLRM's sparse side: bags of embeddings summed and averaged, concatenated, a top MLP."""

    def __init__(self):
        super().__init__()
        self.sum, self.mean = nn.EmbeddingBag(20, 6, mode="sum"), nn.EmbeddingBag(20, 6, mode="mean")
        self.top = nn.Linear(12, 5)

    def forward(self, ids):
        return self.top(torch.relu(torch.cat([self.sum(ids), self.mean(ids)], dim=1)))


def _classifier(model, x, argv, dtype=DataType.DT_FLOAT):
    """(PyTorchModel, FFModel) of ``model`` + softmax, compiled for SGD, its forward on ``x`` checked
    against torch's."""
    pm = PyTorchModel(model)
    ff = FFModel(FFConfig(["-b", "4", *argv]))
    xt = ff.create_tensor(list(x.shape), dtype)
    (out,) = pm.torch_to_ff(ff, [xt])
    ff.softmax(out)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
    pm.load_weights(ff)
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        np.testing.assert_allclose(out.get_tensor(ff), model(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
    return pm, ff


@pytest.mark.parametrize("argv", [[], ["-ll:gpu", "2"]])
def test_embedding_bags_forward_and_sgd_step_equal_torch(argv):
    torch.manual_seed(0)
    model = _Bags()
    ids = np.random.default_rng(0).integers(0, 20, (4, 3)).astype(np.int64)
    y = np.array([[0], [3], [1], [4]], dtype=np.int32)
    pm, ff = _classifier(model, ids, argv, DataType.DT_INT64)
    before = pm.ff_weights()
    ff.fit(x=ids, y=y, epochs=1)
    torch_sgd_step(model, ids, y)
    got, after = ff.get_weights(), pm.ff_weights()
    for name, want in after.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=2e-6, err_msg=name)
        assert np.abs(before[name] - want).max() > 1e-5, name      # every weight moved: the check can fail


@pytest.mark.parametrize("bag, call, message", [
    (nn.EmbeddingBag(9, 4, mode="max"), lambda m, t: m(t), r"mode='max'"),
    (nn.EmbeddingBag(9, 4), lambda m, t: m(t.flatten(), torch.arange(0, 6, 3)), r"offsets='given'"),
    (nn.EmbeddingBag(9, 4, padding_idx=0), lambda m, t: m(t), r"padding_idx=0"),
    (nn.EmbeddingBag(9, 4, scale_grad_by_freq=True), lambda m, t: m(t), r"scale_grad_by_freq=True"),
])
def test_embedding_bag_forms_flexrt_cannot_take_are_refused(bag, call, message):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = bag

        def forward(self, t):
            return call(self.bag, t)
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=message + r".*2-D index tensor \[batch, bag\]") as err:
        PyTorchModel(M()).torch_to_ff(ff, [ff.create_tensor([2, 3], DataType.DT_INT64)])
    assert str(err.value).startswith("torch node 'bag'") and "cannot read" not in str(err.value)   # not re-wrapped


def _prelu(channels):
    m = nn.PReLU(channels)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(-1, 1, channels))
    return m


FORMS = {
    "var": lambda t: t.var(-1, keepdim=True, unbiased=False) + t,
    "var_dims": lambda t: torch.var(t, dim=(1, 2)),
    "std": lambda t: t.std(1),
    "std_all": lambda t: t.std() * t,
    "var_correction": lambda t: torch.var(t, 1, correction=0),
    "normalize": lambda t: F.normalize(t, dim=-1),
    "normalize_default": lambda t: F.normalize(t) * 3.0,
    "clamp": lambda t: t.clamp(-0.5, 0.7) + torch.clamp(t, min=0.1) + t.clamp_max(0.2),
    "full": lambda t: t + torch.full((t.size(0), 3, 4, 5), 2.5),
    "zeros_ones": lambda t: t * torch.ones(4, 5) + torch.zeros((5,), device=t.device),
    "unflatten": lambda t: t.flatten(1).unflatten(1, (3, -1)),
    "unflatten_module": nn.Sequential(nn.Flatten(), nn.Unflatten(1, (3, 20))),
    "log_abs": lambda t: torch.log(t.abs() + 0.1),
    "log_softmax": lambda t: F.log_softmax(t * 5.0, dim=1),
    "log_softmax_module": nn.Sequential(nn.LogSoftmax(dim=-1)),
    "logsumexp": lambda t: torch.logsumexp(t * 5.0, dim=(1, 3)),
    "logsumexp_kept": lambda t: t.logsumexp(-1, keepdim=True) * t,
    "softplus": lambda t: F.softplus(t * 5.0) + F.softplus(t, beta=2.0),
    "mish": nn.Sequential(nn.Mish()),
    "zero_pad": nn.Sequential(nn.ZeroPad2d((1, 2, 0, 3))),
    "constant_pad": nn.Sequential(nn.ConstantPad2d(2, 1.5)),
    "reflection_pad": nn.Sequential(nn.ReflectionPad2d((1, 2, 3, 1))),
    "replication_pad": nn.Sequential(nn.ReplicationPad2d(2)),
    "circular_pad": nn.Sequential(nn.CircularPad2d(1)),
    "pad_crop": lambda t: F.pad(t, (-1, 2)),
    "pad_reflect": lambda t: F.pad(t, (2, 2, 1, 1), mode="reflect"),
    "pad_value": lambda t: F.pad(t, (1, 0, 0, 1), value=-2.0),
    "pad_every_axis": lambda t: F.pad(t, (0, 0, 0, 1, 1, 0, 0, 0)),    # the batch axis' (0, 0) too (MobileBERT)
    "conv_reflect": nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")),
    "conv_circular": nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular")),
    "prelu": nn.Sequential(nn.PReLU()),
    "prelu_channels": nn.Sequential(_prelu(3)),
}


@pytest.mark.parametrize("form", FORMS)
def test_reductions_clamps_and_made_tensors_equal_torch(tmp_path, form):
    fn = FORMS[form]
    module = fn if isinstance(fn, nn.Module) else Fn(fn)
    x = _image(2, 3, 4, 5, seed=3)
    compare_forward(module, x, tmp_path if form != "zeros_ones" else None)   # its constant: a buffer, no text
    if form in ("var", "normalize", "clamp", "unflatten", "log_abs", "log_softmax", "logsumexp", "softplus", "mish",
                "zero_pad", "constant_pad", "reflection_pad", "replication_pad", "circular_pad", "pad_value",
                "conv_reflect", "prelu", "prelu_channels"):
        compare_onnx(module, x, tmp_path / "m.onnx", [])


@pytest.mark.parametrize("fn, message", [
    (lambda t: F.interpolate(t, scale_factor=2, mode="trilinear"), r"mode 'trilinear' is not supported; valid: nearest"),
    (lambda t: F.interpolate(t, size=(3, 3), mode="bilinear", antialias=True), r"antialias=True is not supported"),
    (lambda t: F.normalize(t, p=1.0), r"only p=2 maps"),
    (lambda t: F.interpolate(t[:, 0], scale_factor=2, mode="bicubic"), r"needs \[N, C, H, W\], got \[2, 4, 5\]"),
    (lambda t: t.clamp(min=t.mean()), r"clamp with a traced bound is not supported"),
    (lambda t: F.pad(t, (0, 0, 0, 0, 0, 0, 1, 0)), r"pads \[0, 0, 0, 0, 0, 0, 1, 0\].*for at most 3 axes \(not the batch\)"),
    (lambda t: t.var(0, unbiased=True, correction=1), r"give unbiased or correction, not both"),
])
def test_forms_flexrt_cannot_take_name_the_node(fn, message):
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises((ConfigError, ShapeError), match=message):
        (out,) = PyTorchModel(Fn(fn)).torch_to_ff(ff, [ff.create_tensor([2, 3, 4, 5], DataType.DT_FLOAT)])


def test_transposed_convolution_refusals():
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 2, 3, 3], DataType.DT_FLOAT)
    with pytest.raises(ConfigError, match=r"dilation=\(2, 2\).*only dilation 1 and zero padding map"):
        PyTorchModel(nn.Sequential(nn.ConvTranspose2d(2, 2, 3, dilation=2))).torch_to_ff(ff, [x])

    class Sized(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(2, 2, 3, 2)

        def forward(self, t):
            return self.up(t, output_size=[8, 8])
    with pytest.raises(ConfigError, match=r"output_size= is not supported; give the module its output_padding"):
        PyTorchModel(Sized()).torch_to_ff(FFModel(FFConfig(["-b", "2"])), [x])


class _Recurrent(nn.Module):
    """An LSTM classifier: two layers, batch first, the last step's hidden state to a Linear."""

    def __init__(self, batch_first=True):
        super().__init__()
        self.batch_first = batch_first
        self.lstm = nn.LSTM(3, 6, 2, batch_first=batch_first)
        self.fc = nn.Linear(6 + 6, 5)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        last = out[:, -1] if self.batch_first else out[-1]
        return self.fc(torch.cat([last, c[0]], dim=1))


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_unrolls_to_torchs_forward_and_sgd_step(batch_first):
    """nn.LSTM as FFModel's LSTM cells, unrolled: forward equal to torch's on one device and under
    data parallelism; one SGD step moves the weights as torch's, and the one bias (torch's
    bias_ih + bias_hh) by one of torch's two equal steps."""
    torch.manual_seed(0)
    model = _Recurrent(batch_first)
    shape = (4, 5, 3) if batch_first else (5, 4, 3)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = np.array([[0], [3], [1], [4]], dtype=np.int32)
    for argv in ([], ["-ll:gpu", "2"]):
        with pytest.warns(FrontendWarning, match=r"one bias, torch's bias_ih \+ bias_hh"):
            pm, ff = _classifier(model, x, argv)
    if not batch_first:      # the SGD step once: [T, N, F] batches are not FFModel's sample-first data
        return
    before = pm.ff_weights()
    ff.fit(x=x, y=y, epochs=1)
    steps = {k: v.detach().clone() for k, v in model.named_parameters()}
    torch_sgd_step(model, x, y)
    got, after = ff.get_weights(), pm.ff_weights()
    for layer in range(2):
        step_ih = (model.get_parameter(f"lstm.bias_ih_l{layer}") - steps[f"lstm.bias_ih_l{layer}"]).detach().numpy()
        name = f"lstm.l{layer}.bias"
        np.testing.assert_allclose(got[name], before[name] + step_ih, rtol=1e-5, atol=2e-6)
        for w in ("w_ih", "w_hh"):
            key = f"lstm.l{layer}.{w}"
            np.testing.assert_allclose(got[key], after[key], rtol=1e-5, atol=2e-6, err_msg=key)
            assert np.abs(before[key] - after[key]).max() > 1e-5, key


class _WeightEinsum(nn.Module):
    def __init__(self, equation, shape):
        super().__init__()
        self.equation = equation
        self.w = nn.Parameter(torch.linspace(-1, 1, int(np.prod(shape))).reshape(shape))

    def forward(self, t):
        return torch.einsum(self.equation, t, self.w)


EINSUMS = {
    "scores": lambda t: torch.einsum("bhid,bhjd->bhij", t, t),
    "attention": lambda t: torch.einsum("bhij,bhjd->bhid", torch.einsum("bhid,bhjd->bhij", t, t).softmax(-1), t),
    "permute": lambda t: torch.einsum("abcd->adbc", t),
    "sum": lambda t: torch.einsum("abcd->ad", t),
    "ellipsis": lambda t: torch.einsum("...ij,...kj->...ik", t, t),
    "implicit_output": lambda t: torch.einsum("abij,abjk", t, t.transpose(-1, -2)),
    "operand_list": lambda t: torch.einsum("abcd,abce->abde", [t, t]),
    "full_sum": lambda t: torch.einsum("abcd->", t) + t,
    "inner": lambda t: torch.einsum("abcd,abcd->", t, t) * t,
}


@pytest.mark.parametrize("form", list(EINSUMS) + ["weight", "weight_channels"])
def test_einsum_equals_torch_through_module_file_and_onnx(tmp_path, form):
    module = {"weight": _WeightEinsum("bcij,jk->bcik", (5, 6)),
              "weight_channels": _WeightEinsum("bcij,ck->bkij", (3, 7))}.get(form) or Fn(EINSUMS[form])
    x = _image(2, 3, 4, 5, seed=4)
    compare_forward(module, x, tmp_path)
    compare_onnx(module, x, tmp_path / "m.onnx", ["Einsum"] if form not in ("permute", "full_sum", "sum") else [])


@pytest.mark.parametrize("fn, message", [
    (lambda t: torch.einsum("abii->abi", t[:, :, :4, :4]), r"repeated indices, diagonals, are not supported"),
    (lambda t: torch.einsum("abcd,abcd->abd", t, t[:, :1]), r"index 'b' is 3 and 1 \(broadcasting is not supported"),
])
def test_einsum_forms_flexrt_cannot_take(fn, message):
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ShapeError, match=message):
        PyTorchModel(Fn(fn)).torch_to_ff(ff, [ff.create_tensor([2, 3, 4, 5], DataType.DT_FLOAT)])


class _Interaction(nn.Module):
    """DLRM's dot interaction: pairwise dots of the features by torch.bmm, the lower triangle read
    by index lists built from the traced sizes (torch.fx's meta trace makes them numbers)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 8)

    def forward(self, x):                          # x: [N, 3, 5]
        t = self.fc(x)
        z = torch.bmm(t, t.transpose(1, 2))
        _, ni, nj = z.shape
        li = torch.tensor([i for i in range(ni) for j in range(i)])
        lj = torch.tensor([j for i in range(nj) for j in range(i)])
        return z[:, li, lj]


GATHERS = {
    "pairs": lambda t: t[:, [2, 0, 1, 1], [0, 1, 3, 2]],
    "permute_channels": lambda t: t[:, [2, 0, 1]] * 2.0,
    "middle_axis": lambda t: t[:, :, [3, 0, 0]],
    "repeated_rows": lambda t: t[:, 1, [3, 3, 0]],
    "mask": lambda t: t[:, torch.tensor([True, False, True])],
}


@pytest.mark.parametrize("form", list(GATHERS) + ["interaction"])
def test_gathers_by_constant_indices_equal_torch_forward_and_gradient(form):
    """Advanced indexing by constant integer or bool arrays equals torch's forward and, through an
    SGD step of the Linear before it, its gradient (repeated positions add)."""
    torch.manual_seed(0)
    if form == "interaction":
        module, x = _Interaction(), np.random.default_rng(5).standard_normal((4, 3, 5)).astype(np.float32)
    else:
        module, x = Fn(GATHERS[form], width=5), _image(4, 3, 4, 5, seed=5)
    compare_forward(module, x)
    ff = FFModel(FFConfig(["-b", "4"]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    pm = PyTorchModel(module)
    (out,) = pm.torch_to_ff(ff, [xt])
    target = np.random.default_rng(6).standard_normal(out.dims).astype(np.float32)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    ff.fit(x=x, y=target, epochs=1)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    loss = F.mse_loss(module(torch.from_numpy(x)), torch.from_numpy(target))
    loss.backward()
    opt.step()
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_onnx_exports_equal_torch(tmp_path, batch_first):
    """torch's ONNX export of a 2-layer LSTM (two LSTM nodes, gate blocks i, o, f, c, initial states
    made by Expand of zeros) builds FFModel's unrolled cells and equals torch's forward."""
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    model = _Recurrent(batch_first).eval()
    x = np.random.default_rng(0).standard_normal((4, 5, 3) if batch_first else (5, 4, 3)).astype(np.float32)
    compare_onnx(model, x, tmp_path / "lstm.onnx", ["LSTM"])


ONE_D = {
    "conv1d": nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv1d(6, 5, 5, stride=2)),
    "conv1d_groups": nn.Sequential(nn.Conv1d(4, 8, 3, groups=2, bias=False)),
    "conv1d_same_reflect": nn.Sequential(nn.Conv1d(4, 4, 5, padding="same", padding_mode="reflect")),
    "pools": nn.Sequential(nn.MaxPool1d(2), nn.AvgPool1d(3, stride=1, padding=1), nn.AdaptiveAvgPool1d(1)),
    "batch_norm_1d": nn.Sequential(nn.Conv1d(4, 6, 3), nn.BatchNorm1d(6), nn.ReLU(), nn.AdaptiveMaxPool1d(2)),
    "norm": Fn(lambda t: t / t.norm(dim=1, keepdim=True) + torch.norm(t)),
}


@pytest.mark.parametrize("form", ONE_D)
def test_one_dimensional_convolutions_pools_and_norms_equal_torch(tmp_path, form):
    """Conv1d, the 1-D pools (adaptive too) and BatchNorm1d of [N, C, L] as FFModel's 2-D operators over
    [N, C, 1, L]; Tensor.norm as the L2 reduction. Through the module, the text format and ONNX
    (BatchNorm in train mode is exported in training form)."""
    torch.manual_seed(0)
    module, x = ONE_D[form], np.random.default_rng(0).standard_normal((2, 4, 12)).astype(np.float32)
    compare_forward(module, x, tmp_path)
    if form != "batch_norm_1d":
        compare_onnx(module, x, tmp_path / "m.onnx", [])


class _Clip(nn.Module):
    """CLIP's head: a 0-d logit scale parameter, exp'd; features normalized by Tensor.norm."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 6)
        self.logit_scale = nn.Parameter(torch.tensor(0.7))

    def forward(self, x):
        f = self.proj(x)
        return f / f.norm(dim=1, keepdim=True) * self.logit_scale.exp()


class _MadeInForward(nn.Module):
    """Tensors made in forward and read by an index (HF's default attention mask) or with a dtype
    read from a tensor."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        h = self.fc(x)
        mask = torch.ones(x.size(0), x.size(1), device=x.device)
        bias = torch.full((x.size(0), 1, h.size(-1)), 0.5, dtype=h.dtype)
        return h * (1.0 - mask[:, :, None]) + bias + h


@pytest.mark.parametrize("module", [_Clip, _MadeInForward])
def test_zero_dim_parameters_and_tensors_made_in_forward_read_by_indexes(tmp_path, module):
    torch.manual_seed(0)
    model, x = module(), np.random.default_rng(1).standard_normal((2, 3, 5)).astype(np.float32)
    compare_forward(model, x)
    compare_onnx(model, x, tmp_path / "m.onnx", [])
    if module is _Clip:
        ff = FFModel(FFConfig(["-b", "2"]))
        PyTorchModel(model).torch_to_ff(ff, [ff.create_tensor([2, 3, 5], DataType.DT_FLOAT)])
        assert ff.num_parameters() == sum(p.numel() for p in model.parameters())


class _Prototypes(nn.Module):
    """A cosine classifier: features and a parameter table each normalized, compared by einsum (the
    table's ONNX initializer is read by a ReduceL2 first and a Div later)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 8)
        self.prototypes = nn.Parameter(torch.randn(4, 8))

    def forward(self, x):
        f = F.normalize(torch.relu(self.fc(x)), dim=-1)
        return 10.0 * torch.einsum("bd,cd->bc", f, F.normalize(self.prototypes, dim=-1))


def test_a_parameter_read_twice_equals_torch_through_onnx(tmp_path):
    torch.manual_seed(0)
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    compare_forward(_Prototypes(), x)
    compare_onnx(_Prototypes(), x, tmp_path / "m.onnx", ["ReduceL2", "Einsum"])


AVERAGES = {
    "exclude_padding": nn.Sequential(nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
    "exclude_padding_rectangular": nn.Sequential(nn.AvgPool2d((3, 2), (1, 2), (1, 1), count_include_pad=False)),
    "exclude_padding_function": Fn(lambda t: F.avg_pool2d(t, 3, 1, 1, count_include_pad=False)),
    "divisor_override": nn.Sequential(nn.AvgPool2d(2, divisor_override=3)),
    # torch's positional order: (input, kernel, stride, padding, ceil_mode, count_include_pad), as
    # timm's AvgPool2dSame passes them (bound once as max_pool2d's, dilation first)
    "positional": Fn(lambda t: F.avg_pool2d(t, 3, 2, 1, False, False)),
    "positional_max": Fn(lambda t: F.max_pool2d(t, 3, 2, 1, 1, False)),
}


@pytest.mark.parametrize("form", AVERAGES)
def test_average_pools_dividing_by_other_than_the_window_equal_torch(tmp_path, form):
    """count_include_pad=False (ONNX AveragePool's default) divides each window by its positions
    inside the input, divisor_override by a number: the window average rescaled by a constant."""
    module, x = AVERAGES[form], _image(2, 3, 7, 8, seed=7)
    compare_forward(module, x, tmp_path)
    if form not in ("divisor_override", "positional_max"):      # torch's exporter drops divisor_override
        compare_onnx(module, x, tmp_path / "m.onnx", ["AveragePool"])


class _GatedRecurrent(nn.Module):
    """A GRU classifier: two layers, batch first, the last step and the final state to a Linear."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 6, 2, batch_first=True)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        out, h = self.gru(x)
        return self.fc(torch.cat([out[:, -1], h[0]], dim=1))


@pytest.mark.parametrize("argv", [[], ["-ll:gpu", "2"]])
def test_gru_unrolls_to_torchs_forward_and_sgd_step(argv):
    """nn.GRU as dense and element-wise layers per step (each layer's two dense layers carry torch's
    two biases): parameter counts, forward and one SGD step equal torch's."""
    torch.manual_seed(0)
    model = _GatedRecurrent()
    x = np.random.default_rng(0).standard_normal((4, 5, 3)).astype(np.float32)
    y = np.array([[0], [3], [1], [4]], dtype=np.int32)
    pm, ff = _classifier(model, x, argv)
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())
    before = pm.ff_weights()
    ff.fit(x=x, y=y, epochs=1)
    torch_sgd_step(model, x, y)
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[name], want, rtol=1e-5, atol=2e-6, err_msg=name)
        assert np.abs(before[name] - want).max() > 1e-5, name


def test_embedding_options_that_change_training_are_refused():
    """``scale_grad_by_freq`` leaves the forward as it is and scales the gradient by each id's count:
    accepted, training differed from torch's (found by a sweep); refused like ``max_norm``."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(10, 4, scale_grad_by_freq=True)

        def forward(self, t):
            return self.e(t)
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"torch node 'e'.*Embedding with scale_grad_by_freq=True: FFModel.embedding "
                                          r"has no such option"):
        PyTorchModel(M()).torch_to_ff(ff, [ff.create_tensor([2, 3], DataType.DT_INT64)])


@pytest.mark.parametrize("threshold, ok", [(20.0, True), (15, True), (1, False), (14.9, False)])
@pytest.mark.parametrize("form", ["function", "module"])
def test_softplus_thresholds_that_change_the_values_are_refused(threshold, ok, form):
    """torch's softplus returns x past beta x > threshold; flexrt's is exact there. Within float32's
    resolution from 15 on (default 20): equal to torch's; below, refused (it was silently off by 0.1)."""
    fn = (lambda x: F.softplus(x, beta=2, threshold=threshold)) if form == "function" else \
        nn.Softplus(beta=2, threshold=threshold)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = fn if form == "module" else None

        def forward(self, x):
            return self.f(x) if form == "module" else F.softplus(x, beta=2, threshold=threshold)
    x = np.array([[0.0, 0.25, 0.5, 1.0, 2.0, 8.0, 9.0, 30.0]], dtype=np.float32)
    ff = FFModel(FFConfig(["-b", "1"]))
    t = ff.create_tensor([1, 8], DataType.DT_FLOAT)
    if not ok:
        with pytest.raises(ConfigError, match=f"softplus with threshold={threshold!r}.*at least 15"):
            PyTorchModel(M()).torch_to_ff(ff, [t])
        return
    (out,) = PyTorchModel(M()).torch_to_ff(ff, [t])
    ff.compile(loss_type="mean_squared_error_avg")
    t.set_tensor(ff, x)
    ff.forward()
    want = M()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-6, atol=1e-7)


_ALPHA_ACTIVATIONS = {
    "elu2": (lambda: nn.ELU(alpha=2.0), "Elu"), "elu_fn": (lambda: Fn(lambda t: F.elu(t, alpha=0.5)), "Elu"),
    "celu": (lambda: nn.CELU(0.7), "Celu"), "selu": (lambda: nn.SELU(), "Selu"), "selu_fn": (lambda: Fn(F.selu), "Selu"),
    "softsign": (lambda: nn.Softsign(), "Div"), "hardtanh": (lambda: nn.Hardtanh(-2.0, 3.0), "Clip"),
    "hardtanh_fn": (lambda: Fn(lambda t: F.hardtanh(t, -0.5, 0.5)), "Clip"),
    "log1p": (lambda: Fn(lambda t: torch.log1p(t * t)), None), "glu": (lambda: nn.GLU(dim=1), None),
    "glu_fn": (lambda: Fn(lambda t: F.glu(t, -1)), None),
    "gelu_tanh": (lambda: nn.GELU(approximate="tanh"), None),
    "gelu_tanh_fn": (lambda: Fn(lambda t: F.gelu(t, approximate="tanh")), None),
}


@pytest.mark.parametrize("name", sorted(_ALPHA_ACTIVATIONS))
def test_activations_built_from_element_wise_layers_equal_torch(tmp_path, name):
    """ELU of any alpha, CELU, SELU, Softsign, Hardtanh, log1p, GLU and GELU's tanh approximation
    (refused before, or ELU with alpha 1 only) from FFModel's element-wise layers (``flexrt.model.composites``): torch's forward
    through the module, the text format and, where torch exports it as one node, ONNX."""
    make, onnx_op = _ALPHA_ACTIVATIONS[name]
    x = (np.random.default_rng(7).standard_normal((2, 6, 4)) * 3).astype(np.float32)
    compare_forward(make(), x, tmp_path)
    if onnx_op is not None:
        compare_onnx(make(), x, tmp_path / "m.onnx", [onnx_op])


def test_activations_train_as_torch_does():
    """One SGD step through the composed activations equals torch's."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 8)
            self.out = nn.Linear(4, 3)

        def forward(self, x):
            h = F.elu(self.fc(x), alpha=0.5) + F.selu(self.fc(x)) + F.celu(self.fc(x), 1.5) + F.softsign(self.fc(x)) \
                + F.gelu(self.fc(x), approximate="tanh")
            return self.out(F.glu(h, -1))
    torch.manual_seed(0)
    model = M()
    x = np.random.default_rng(8).standard_normal((4, 6)).astype(np.float32)
    y = np.array([[0], [1], [2], [1]], dtype=np.int32)
    ff = FFModel(FFConfig(["-b", "4"]))
    xt = ff.create_tensor([4, 6], DataType.DT_FLOAT)
    pm = PyTorchModel(model)
    (out,) = pm.torch_to_ff(ff, [xt])
    ff.softmax(out)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
    pm.load_weights(ff)
    ff.fit(x=x, y=y, epochs=1)
    torch_sgd_step(model, x, y)
    got, after = ff.get_weights(), pm.ff_weights()
    for name, want in after.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("name", ["pixel_shuffle", "pixel_shuffle_fn", "repeat", "repeat_leading", "log1p_method"])
def test_pixel_shuffle_repeat_and_methods_equal_torch(tmp_path, name):
    """nn.PixelShuffle / F.pixel_shuffle (reshape, transpose, reshape), Tensor.repeat (concatenated
    copies; extra leading sizes add dimensions) and Tensor.log1p: torch's forward through the module
    and the text format (all were refused)."""
    make, shape = {"pixel_shuffle": (lambda: nn.PixelShuffle(2), (2, 8, 3, 5)),
                   "pixel_shuffle_fn": (lambda: Fn(lambda t: F.pixel_shuffle(t, 2) * 2.0), (2, 12, 2, 3)),
                   "repeat": (lambda: Fn(lambda t: t.repeat(1, 2, 3)), (2, 3, 4)),
                   "repeat_leading": (lambda: Fn(lambda t: t.repeat(2, 1, 1, 2)), (2, 3, 4)),
                   "log1p_method": (lambda: Fn(lambda t: (t * t).log1p()), (2, 3, 4))}[name]
    x = np.random.default_rng(16).standard_normal(shape).astype(np.float32)
    compare_forward(make(), x, tmp_path)
