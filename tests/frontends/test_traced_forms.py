"""Forms of real PyTorch code a sweep of 69 modules found mapped wrongly or not at all: softmax
without dim, casts to a traced dtype, pooling sizes and slice bounds read from the tensor, a
reduction to a scalar; and in ONNX files Neg, Expand of a computed tensor and Gather of a
one-element index. Each converts and equals torch's forward (float32, 1e-5), through the module
and, where the module does not need its input shapes to trace, through FlexFlow's text format."""

import collections
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, ShapeError  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel  # noqa: E402
from flexrt.torch import PyTorchModel, file_to_ff  # noqa: E402
from tests.frontends._models import Fn, compare_forward, compare_onnx  # noqa: E402


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
X3 = RNG.standard_normal((2, 5, 6)).astype(np.float32)


@pytest.mark.parametrize("module, x", [
    (nn.Softmax(), X4), (Fn(lambda x: F.softmax(x)), X3), (Fn(lambda x: F.softmax(x)), X4[:, :, 0, :]),
], ids=["module_4d", "function_3d", "function_3d_b"])
def test_softmax_without_dim_takes_torchs_implicit_dim(module, x, tmp_path):
    """torch's softmax without dim normalizes dim 0 for inputs of rank 0, 1 or 3, else dim 1."""
    compare_forward(module, x, tmp_path)


@pytest.mark.parametrize("form", ["kw", "positional"])
def test_cast_to_a_traced_dtype(form, tmp_path):
    class CastInput(nn.Module):
        def forward(self, x, mask):
            m = mask.to(dtype=x.dtype) if form == "kw" else mask.to(x.dtype)
            return x + m * 0.5

    x = RNG.standard_normal((2, 4)).astype(np.float32)
    mask = np.array([[1, 0, 1, 0], [0, 0, 1, 1]], np.int64)
    ff = FFModel(FFConfig(["-b", "2"]))
    xt, mt = ff.create_tensor([2, 4], DataType.DT_FLOAT), ff.create_tensor([2, 4], DataType.DT_INT64)
    (out,) = PyTorchModel(CastInput()).torch_to_ff(ff, [xt, mt])
    assert out.data_type is DataType.DT_FLOAT
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    mt.set_tensor(ff, mask)
    ff.forward()
    np.testing.assert_allclose(out.get_tensor(ff), x + mask * 0.5, rtol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda x: F.avg_pool2d(x, x.size()[3]),
    lambda x: F.max_pool2d(x, kernel_size=x.size()[2:]),
    lambda x: F.max_pool2d(x, x.size(2)),
    lambda x: F.adaptive_avg_pool2d(x, x.size(2) // 2),
], ids=["avg_by_width", "max_by_sizes", "max_by_height", "adaptive_by_size"])
def test_pooling_sizes_read_from_the_tensor(fn, tmp_path):
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    compare_forward(Fn(fn), x, tmp_path)


def test_slice_bounds_from_traced_sizes_and_ellipsis_round_trip(tmp_path):
    """rotate_half (RoPE): x[..., : x.shape[-1] // 2]; the text format writes ... and the bounds."""
    compare_forward(Fn(lambda h: h + _rotate_half(h), 8), RNG.standard_normal((2, 3, 8)).astype(np.float32), tmp_path)
    compare_forward(Fn(lambda x: x[..., 0:1] * x[..., 1:]), RNG.standard_normal((2, 3, 4)).astype(np.float32), tmp_path)


def test_a_reduction_to_a_scalar_keeps_one_dimension():
    """x.pow(2).mean() (a scalar in torch) is [1] in FFModel; FFModel refuses a 0-d output by layer."""
    compare_forward(Fn(lambda x: x.pow(2).mean() + x.sum() * 0.1, 6), RNG.standard_normal((2, 6)).astype(np.float32))
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 6])
    with pytest.raises(ShapeError, match=r"reduce_sum.*its output would have no dimension.*keepdims=True"):
        ff.reduce_sum(x, [0, 1], keepdims=False)


def test_onnx_neg_expand_of_a_computed_tensor_and_last_position(tmp_path):

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)
            self.gate = nn.Linear(4, 4)

        def forward(self, x):
            y = self.conv(x)
            s = torch.sigmoid(self.gate(y.mean((2, 3)))).view(y.size(0), 4, 1, 1)
            z = (y * s.expand_as(y)).flatten(2).transpose(1, 2)          # [N, HW, C]
            return -z[:, [-1], :] * math.pi

    torch.manual_seed(0)
    model = Net().eval()
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    compare_onnx(model, x, tmp_path / "net.onnx", ["Neg", "Expand", "Gather"])


class _HFStyle(nn.Module):
    """HuggingFace-style code: sizes as tuples (x.size()[:-1] + (h, d)), GPT-2's Conv1D (addmm of
    parameters), a 3-D @ 2-D product with a parameter, torch.stack, softmax(dtype=...), .t(), and an
    Embedding with padding_idx (same forward; torch gives that row no gradient, with a warning)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.w, self.b = nn.Parameter(torch.randn(8, 6)), nn.Parameter(torch.randn(6))
        self.emb = nn.Embedding(10, 8, padding_idx=0)

    def forward(self, ids):
        x = self.emb(ids)
        h = self.q(x).view(x.size()[:-1] + (2, 4))
        y = torch.addmm(self.b, x.view(-1, x.size(-1)), self.w)
        z = torch.softmax(torch.stack([h[..., 0, :], h[..., 1, :]], dim=1), dim=-1, dtype=torch.float32)
        return ((z.sum(1) @ self.w[:4]).sum(-1) + y.view(x.size()[:-1] + (6,)).mean(-1)
                + (x.view(-1, 8) @ self.w).t().mean())


def test_hf_style_size_tuples_addmm_stack_and_matrix_parameters():
    from flexrt.errors import FrontendWarning
    torch.manual_seed(0)
    model = _HFStyle()
    ids = RNG.integers(0, 10, (2, 5)).astype(np.int64)
    with pytest.warns(FrontendWarning, match=r"Embedding\(padding_idx=0\).*the forward is the same"):
        compare_forward(model, ids, dtype=DataType.DT_INT64)


def test_an_integer_mask_times_float_states_is_promoted():
    """torch promotes int64 * float32 to float32 (sentence-BERT's mean pooling by an attention mask)."""
    class Pool(nn.Module):
        def forward(self, x, mask):
            return (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)

    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.int64)
    ff = FFModel(FFConfig(["-b", "2"]))
    xt, mt = ff.create_tensor([2, 4, 3], DataType.DT_FLOAT), ff.create_tensor([2, 4], DataType.DT_INT64)
    (out,) = PyTorchModel(Pool()).torch_to_ff(ff, [xt, mt])
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    mt.set_tensor(ff, mask)
    ff.forward()
    with torch.no_grad():
        want = Pool()(torch.from_numpy(x), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-6)


def test_leaky_relu_equals_torch_through_module_function_file_and_onnx(tmp_path):
    """LeakyReLU (nn.LeakyReLU, F.leaky_relu, ONNX LeakyRelu) = relu(x) - slope * relu(-x)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = nn.Linear(6, 6), nn.LeakyReLU(0.2)

        def forward(self, x):
            return F.leaky_relu(self.act(self.fc(x)), 0.05)

    torch.manual_seed(0)
    model = Net()
    x = RNG.standard_normal((2, 6)).astype(np.float32) * 3
    compare_forward(model, x, tmp_path)
    compare_onnx(model, x, tmp_path / "leaky.onnx", ["LeakyRelu"])


Outputs = collections.namedtuple("Outputs", ["logits", "aux"])


class _TwoHeads(nn.Module):
    """torchvision's GoogLeNet in training mode: a named tuple of the main and auxiliary logits."""

    def __init__(self, read=None):
        super().__init__()
        self.read = read
        self.body, self.main, self.side = nn.Linear(6, 8), nn.Linear(8, 3), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        out = Outputs(self.main(h), aux=self.side(h))
        if self.read == "index":
            return out[1] * 2.0
        if self.read == "field":
            return out.logits + 1.0
        if self.read == "whole":
            return torch.cat(out, dim=1)
        return out


@pytest.mark.parametrize("read", [None, "index", "field"])
def test_named_tuples_made_in_forward_are_outputs_or_read_by_item(read, tmp_path):
    torch.manual_seed(0)
    module = _TwoHeads(read)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x))
    want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
    pm = PyTorchModel(module)
    pm.torch_to_file(str(tmp_path / "m.ff"))
    for source in ("module", "file"):
        ff = FFModel(FFConfig(["-b", "4"]))
        xt = ff.create_tensor([4, 6], DataType.DT_FLOAT)
        outs = pm.torch_to_ff(ff, [xt]) if source == "module" else file_to_ff(str(tmp_path / "m.ff"), ff, [xt])
        assert len(outs) == len(want)
        ff.compile(loss_type="mean_squared_error_avg")
        pm.load_weights(ff)
        xt.set_tensor(ff, x)
        ff.forward()
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got.get_tensor(ff), w, rtol=1e-6, err_msg=source)


def test_a_named_tuple_read_whole_is_refused_naming_the_node():
    ff = FFModel(FFConfig(["-b", "4"]))
    with pytest.raises(ConfigError, match=r"torch node 'cat'.*a named tuple made in forward"):
        PyTorchModel(_TwoHeads("whole")).torch_to_ff(ff, [ff.create_tensor([4, 6], DataType.DT_FLOAT)])


class _Conditions(nn.Module):
    """HuggingFace-style Python on sizes: conditions on x.ndim and x.dtype, and a loop over split's
    parts, which torch.fx's symbolic trace cannot take and the trace on the inputs' shapes answers."""

    def forward(self, x):
        if x.ndim < 4 and x.dtype == torch.float32:
            x = x.unsqueeze(1)
        return sum(p * (i + 1) for i, p in enumerate(x.split(2, dim=-1)))


def test_conditions_and_loops_on_sizes_are_answered_when_traced():
    compare_forward(_Conditions(), X3)


class _DataDependent(nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_a_condition_on_the_data_names_both_traces_causes():
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"torch.fx cannot trace _DataDependent: TraceError: .*; on the inputs' "
                                          r"shapes: TypeError: 'gt' is not a condition known when tracing \(it depends "
                                          r"on the data\)"):
        PyTorchModel(_DataDependent()).torch_to_ff(ff, [ff.create_tensor([2, 5, 6], DataType.DT_FLOAT)])


class _IntegerDivision(nn.Module):
    def forward(self, ids):
        return ids / 2 + ids / ids.clamp(min=1) + 3 / (ids + 1) + (ids > 3) * 0.5


def test_integer_tensors_divided_or_meeting_floats_are_float32_as_torch():
    """torch's true division of integers, and a bool or integer tensor meeting a Python float, give
    float32: flexrt casts first (an integer reciprocal failed in the kernel before)."""
    ids = np.arange(12).reshape(2, 6).astype(np.int64)
    ff = FFModel(FFConfig(["-b", "2"]))
    t = ff.create_tensor([2, 6], DataType.DT_INT64)
    (out,) = PyTorchModel(_IntegerDivision()).torch_to_ff(ff, [t])
    ff.compile(loss_type="mean_squared_error_avg")
    t.set_tensor(ff, ids)
    ff.forward()
    want = _IntegerDivision()(torch.from_numpy(ids)).numpy()
    got = out.get_tensor(ff)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-7)
