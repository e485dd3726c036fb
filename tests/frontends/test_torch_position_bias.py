"""Relative position bias tables (MaxViT's, Swin's): a 2-D parameter read at the positions a buffer
holds, ``table[index.view(-1)]``, becomes an embedding whose table is the parameter. Laws: the forward
equals torch's (the text format, which holds no buffer values, refuses the index by name); one SGD step (the table's rows gathering the
gradients of every position that reads them) equals torch's on one device, two devices and a random
strategy. A table read both whole and by rows is refused naming the node. Also torch.swapaxes /
swapdims (MaxViT's), as transposes."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402

from flexrt.errors import ConfigError  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.strategy import random_strategy, save_strategy  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402

from tests.frontends._models import compare_forward, torch_sgd_step  # noqa: E402

B, W, D, H, CLASSES = 4, 3, 8, 2, 5     # batch, window side, width, heads
N = W * W


def _relative_index() -> torch.Tensor:
    """The (N, N) index of each query-key offset in the (2W-1)^2 table (Swin's and MaxViT's)."""
    coords = torch.stack(torch.meshgrid(torch.arange(W), torch.arange(W), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (W - 1)
    return rel[:, :, 0] * (2 * W - 1) + rel[:, :, 1]


class WindowAttention(nn.Module):
    def __init__(self, whole_too: bool = False):
        super().__init__()
        self.whole_too = whole_too
        self.qkv, self.proj, self.head = nn.Linear(D, 3 * D), nn.Linear(D, D), nn.Linear(N * D, CLASSES)
        self.table = nn.Parameter(torch.randn((2 * W - 1) ** 2, H) * 0.5)
        self.register_buffer("index", _relative_index())

    def forward(self, x):                          # x: (B, N, D)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, N, H, D // H).swapaxes(1, 2) for t in (q, k, v))
        bias = self.table[self.index.view(-1)].view(N, N, -1).permute(2, 0, 1)
        if self.whole_too:
            bias = bias + self.table.sum()
        att = (q @ k.transpose(-2, -1) + bias.unsqueeze(0)).softmax(dim=-1)
        y = torch.swapdims(att @ v, 1, 2).reshape(B, N, D)
        return self.head(self.proj(y).flatten(1))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((B, N, D)).astype(np.float32), rng.integers(0, CLASSES, (B, 1)).astype(np.int32)


def _build(pm, argv=()):
    ff = FFModel(FFConfig(["-b", str(B), *argv]))
    x = ff.create_tensor([B, N, D], DataType.DT_FLOAT)
    out = pm.torch_to_ff(ff, [x])[0]
    ff.softmax(out, name="prob")
    return ff, x, out


def test_position_bias_forward_equals_torch(tmp_path):
    torch.manual_seed(0)
    model = WindowAttention().eval()
    compare_forward(model, _data()[0])
    with pytest.raises(ConfigError, match="text format does not hold"):
        compare_forward(model, _data()[0], tmp_path)
    ff, _, _ = _build(PyTorchModel(model))
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())
    assert sum(1 for n in ff.pcg.nodes if n.op_type.name == "EMBEDDING") == 1


@pytest.mark.parametrize("how", ["one", "two", "random"])
def test_position_bias_sgd_step_equals_torch(how, tmp_path):
    torch.manual_seed(1)
    model = WindowAttention().eval()
    x, y = _data(1)
    pm = PyTorchModel(model)
    argv = {"one": [], "two": ["-ll:gpu", "2"]}.get(how)
    if argv is None:
        base, _, _ = _build(pm)
        path = str(tmp_path / "random.json")
        save_strategy(path, random_strategy(base.pcg, load_machine("local"), 3), load_machine("local"))
        argv = ["--import", path]
    ff, xt, _ = _build(pm, argv)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="sparse_categorical_crossentropy")
    pm.load_weights(ff)
    ff.fit(x=x, y=y, epochs=1)
    loss = torch_sgd_step(model, x, y)
    assert ff.history[0]["loss"] == pytest.approx(loss, rel=1e-5)
    got = ff.get_weights()
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-6, err_msg=name)


def test_table_read_whole_and_by_rows_is_refused():
    with pytest.raises(ConfigError, match="read one way only"):
        _build(PyTorchModel(WindowAttention(whole_too=True).eval()))
