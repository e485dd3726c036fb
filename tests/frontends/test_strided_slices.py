"""Slices with a step (``x[:, 1::2]``, Swin's patch merging ``x[:, 0::2, 1::2, :]``) through the torch
front end and ONNX Slice: the forward equals torch's, and one SGD step of the Linear before the slice
equals torch's (the gradient reaches only the positions taken), on one device, two and a random
strategy. ONNX ScatterND of constants (Swin's shifted-window mask, written by slice assignment) is
folded. Negative steps are refused naming the node. nn.Unfold / F.unfold (im2col) from the same strided
slices, and convolutions with dilation as a dense layer over those windows (depthwise ones: each
channel's windows times its weights, summed)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, ShapeError  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.strategy import random_strategy, save_strategy  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402

from tests.frontends._models import Fn, compare_forward, compare_onnx  # noqa: E402


def _merge(t):     # Swin's PatchMerging on (B, H, W, C)
    return torch.cat([t[:, 0::2, 0::2, :], t[:, 1::2, 0::2, :], t[:, 0::2, 1::2, :], t[:, 1::2, 1::2, :]], -1)


SLICES = {
    "every_second": lambda t: t[..., ::2],              # 5 -> 3: the last element past the whole pairs
    "odd_start": lambda t: t[:, :, 1::2],                # 4 -> 2 from position 1
    "exact_pairs": lambda t: t[:, :, ::2] * 2.0,         # 4 -> 2: whole pairs, no cut
    "step_three": lambda t: t[:, :, 0:4:3],              # positions 0 and 3
    "bounded": lambda t: t[:, 1:3, 1:4:2, 0:5:4],        # three axes at once
    "patch_merging": _merge,                             # (4, 4, 4, 5) -> (4, 2, 2, 20)
}
SHAPES = {"patch_merging": (4, 4, 4, 5)}


def _x(form, seed=5):
    return np.random.default_rng(seed).standard_normal(SHAPES.get(form, (4, 3, 4, 5))).astype(np.float32)


@pytest.mark.parametrize("form", list(SLICES))
def test_strided_slices_equal_torch_through_module_and_onnx(form, tmp_path):
    torch.manual_seed(0)
    module = Fn(SLICES[form], width=5)
    compare_forward(module, _x(form))
    compare_onnx(module, _x(form), tmp_path / "m.onnx", ["Slice"])


def _mse_step_equals_torch(make, x, argv, seed=8):
    """One SGD step of an MSE loss on ``make()``'s module under FlexFlow's ``argv`` equals torch's:
    the same weights after it (and flexrt counts torch's parameters)."""
    torch.manual_seed(0)
    module = make()
    pm = PyTorchModel(module)
    ff = FFModel(FFConfig(["-b", str(x.shape[0]), *argv]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    out = pm.torch_to_ff(ff, [xt])[0]
    assert ff.num_parameters() == sum(p.numel() for p in module.parameters())
    target = np.random.default_rng(seed).standard_normal(out.dims).astype(np.float32)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    ff.fit(x=x, y=target, epochs=1)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    F.mse_loss(module(torch.from_numpy(x)), torch.from_numpy(target)).backward()
    opt.step()
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{name} {argv}")


@pytest.mark.parametrize("argv", [[], ["-ll:gpu", "2"], "random"], ids=["one", "two", "random"])
@pytest.mark.parametrize("form", ["every_second", "patch_merging"])
def test_strided_slices_train_as_torch_does(form, argv, tmp_path):
    x = _x(form)
    if argv == "random":
        torch.manual_seed(0)
        ff = FFModel(FFConfig(["-b", str(x.shape[0])]))
        PyTorchModel(Fn(SLICES[form], width=5)).torch_to_ff(ff, [ff.create_tensor(list(x.shape), DataType.DT_FLOAT)])
        machine, path = load_machine("local"), str(tmp_path / "random.json")
        save_strategy(path, random_strategy(ff.pcg, machine, 4), machine)
        argv = ["--import", path]
    _mse_step_equals_torch(lambda: Fn(SLICES[form], width=5), x, argv, seed=6)


def test_onnx_scatter_of_constants_is_folded():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from flexrt.onnx import ONNXModel
    mask = np.zeros((3, 4), np.float32)
    idx = np.array([[0, 1], [2, 3]], np.int64)
    upd = np.array([5.0, -2.0], np.float32)
    nodes = [helper.make_node("ScatterND", ["mask", "idx", "upd"], ["m"], name="scatter"),
             helper.make_node("Add", ["x", "m"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                              [numpy_helper.from_array(a, n) for a, n in ((mask, "mask"), (idx, "idx"), (upd, "upd"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 3, 4], DataType.DT_FLOAT)
    out = ONNXModel(model).apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    xt.set_tensor(ff, x)
    ff.forward()
    want = mask.copy()
    want[0, 1], want[2, 3] = 5.0, -2.0
    np.testing.assert_allclose(out.get_tensor(ff), x + want, rtol=1e-6)


def test_negative_steps_are_refused_naming_the_node():
    ff = FFModel(FFConfig(["-b", "4"]))
    xt = ff.create_tensor([4, 3, 4, 5], DataType.DT_FLOAT)
    with pytest.raises(ConfigError, match=r"getitem.*slices with a positive step"):
        PyTorchModel(Fn(lambda t: t[:, ::-1])).torch_to_ff(ff, [xt])


UNFOLDS = {
    "k3_pad1": lambda: nn.Unfold(3, padding=1),
    "k2_stride2": lambda: nn.Unfold(2, stride=2),
    "dilated_rect": lambda: nn.Unfold((2, 3), dilation=(2, 1), padding=(1, 0), stride=(1, 2)),
    "function": lambda: Fn(lambda t: F.unfold(t * 2.0, kernel_size=(3, 2), stride=(2, 1))),
}


class _Patches(nn.Module):
    """TNT's pixel embedding: a convolution, then nn.Unfold of its output into patches."""

    def __init__(self, unfold):
        super().__init__()
        self.conv, self.unfold = nn.Conv2d(2, 3, 1), unfold

    def forward(self, x):
        return self.unfold(self.conv(x)).flatten(1)


@pytest.mark.parametrize("form", list(UNFOLDS))
def test_unfold_equals_torch_forward_and_gradient(form):
    """nn.Unfold / F.unfold (im2col) from strided slices, reshapes and a concat: torch's forward, and
    one SGD step of the convolution before it (overlapping windows add their gradients) on one and
    two devices."""
    torch.manual_seed(0)
    x = np.random.default_rng(7).standard_normal((4, 2, 5, 6)).astype(np.float32)
    compare_forward(_Patches(UNFOLDS[form]()), x)
    for argv in ([], ["-ll:gpu", "2"]):
        _mse_step_equals_torch(lambda: _Patches(UNFOLDS[form]()), x, argv)


class _FnConv(nn.Conv2d):
    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


DILATED = {
    "d2_pad2": lambda: nn.Conv2d(2, 3, 3, padding=2, dilation=2),
    "same_rect": lambda: nn.Conv2d(2, 3, (3, 2), padding="same", dilation=(1, 2), bias=False),
    "stride2": lambda: nn.Conv2d(2, 4, 2, stride=2, dilation=(2, 1)),
    "function": lambda: _FnConv(2, 3, 3, padding=1, dilation=(2, 1)),
    "depthwise": lambda: nn.Conv2d(2, 2, 3, padding=2, dilation=2, groups=2, bias=False),   # DeepLab-MobileNet's
    "depthwise_function": lambda: _FnConv(2, 2, (2, 3), stride=(1, 2), dilation=(2, 1), groups=2, bias=False),
}


@pytest.mark.parametrize("form", list(DILATED))
def test_dilated_convolutions_equal_torch_forward_and_gradient(form, tmp_path):
    """A convolution with dilation (FFModel.conv2d has none): the input's windows (unfold with the
    dilation) and a dense layer holding the convolution's weight. Torch's forward through the module
    and ONNX (Conv with dilations), and one SGD step on one and two devices."""
    x = np.random.default_rng(9).standard_normal((4, 2, 6, 7)).astype(np.float32)
    torch.manual_seed(0)
    compare_forward(nn.Sequential(DILATED[form]()), x, tmp_path)
    if form != "same_rect":     # torch's exporter writes 'same' as explicit pads, unevenly here
        compare_onnx(nn.Sequential(DILATED[form]()), x, tmp_path / "m.onnx", ["Conv"])
    for argv in ([], ["-ll:gpu", "2"]):
        _mse_step_equals_torch(lambda: nn.Sequential(DILATED[form](), nn.Flatten()), x, argv, seed=10)


def test_grouped_dilated_convolutions_are_refused_naming_the_node():
    ff = FFModel(FFConfig(["-b", "4"]))
    with pytest.raises(ConfigError, match=r"Conv2d with dilation=\(2, 2\), groups=2.*groups=1, or depthwise without "
                                          r"a bias, and zero padding"):
        PyTorchModel(nn.Sequential(nn.Conv2d(2, 2, 3, dilation=2, groups=2))).torch_to_ff(
            ff, [ff.create_tensor([4, 2, 6, 7], DataType.DT_FLOAT)])


class _TwiceDilated(nn.Module):
    """One dilated convolution module applied twice: one set of weights, as torch's."""

    def __init__(self, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=2, dilation=2, groups=groups, bias=False)

    def forward(self, x):
        return self.conv(torch.relu(self.conv(x))).flatten(1)


@pytest.mark.parametrize("groups", [1, 2], ids=["dense", "depthwise"])
def test_a_dilated_convolution_used_twice_shares_its_weights(groups):
    x = np.random.default_rng(11).standard_normal((4, 2, 6, 7)).astype(np.float32)
    torch.manual_seed(0)
    compare_forward(_TwiceDilated(groups), x)
    _mse_step_equals_torch(lambda: _TwiceDilated(groups), x, [], seed=12)


CUMSUMS = {
    "last": lambda t: torch.cumsum(t, dim=-1),
    "middle_method": lambda t: t.cumsum(1) * 0.5,
    "detr_positions": lambda t: torch.cumsum(torch.ones_like(t), 2) / t.size(2) + t,   # DETR-style
}


@pytest.mark.parametrize("form", list(CUMSUMS))
def test_cumulative_sums_equal_torch_forward_and_gradient(form, tmp_path):
    """torch.cumsum / x.cumsum along a non-batch dimension: a constant triangular matrix along it.
    Torch's forward through the module, the text format and ONNX (CumSum), and one SGD step of the
    Linear before it on one and two devices."""
    x = _x("last", 13)
    torch.manual_seed(0)
    compare_forward(Fn(CUMSUMS[form], width=5), x, tmp_path)
    compare_onnx(Fn(CUMSUMS[form], width=5), x, tmp_path / "m.onnx", ["CumSum"])
    for argv in ([], ["-ll:gpu", "2"]):
        _mse_step_equals_torch(lambda: Fn(CUMSUMS[form], width=5), x, argv, seed=14)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_onnx_cumsum_exclusive_and_reverse(exclusive, reverse):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from flexrt.onnx import ONNXModel
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"], name="c", exclusive=exclusive, reverse=reverse)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], [numpy_helper.from_array(np.array(1), "axis")])
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, 5], DataType.DT_FLOAT)
    out = ONNXModel(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])).apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    x = np.arange(10, dtype=np.float32).reshape(2, 5) + 1
    xt.set_tensor(ff, x)
    ff.forward()
    v = x[:, ::-1] if reverse else x
    want = np.cumsum(v, axis=1) - (v if exclusive else 0)
    np.testing.assert_allclose(out.get_tensor(ff), want[:, ::-1] if reverse else want, rtol=1e-6)


def test_a_cumulative_sum_along_the_batch_is_refused():
    ff = FFModel(FFConfig(["-b", "4"]))
    with pytest.raises(ShapeError, match=r"cumulative sum along dimension 0 \(the batch\)"):
        PyTorchModel(Fn(lambda t: t.cumsum(0))).torch_to_ff(ff, [ff.create_tensor([4, 3], DataType.DT_FLOAT)])
