"""Writes in place and constants made in forward, as HuggingFace's seq2seq models (BART) write them,
through flexrt.torch: ``x[index] = value`` (SETITEM: the parts of x and the value concatenated),
``x.masked_fill_``, ``x.new_zeros`` / ``clone``, ``F.embedding`` of a module's table, a decoder's
causal-and-padding mask built of ``torch.full(.., finfo.min)``, ``triu``, ``arange`` comparisons and
writes (constants folded), and code whose value no output needs (dead: no layer, even one with none).

Laws: the forward equals torch's (float32, 1e-6) on one device and under data parallelism; one SGD
step equals torch's; writes flexrt cannot express are refused naming the node."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, ShapeError  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402
from tests.frontends._models import assert_step_like_torch  # noqa: E402

B, T, V, D = 3, 6, 20, 8


class Shift(nn.Module):
    """BART's shift_tokens_right, then writes into the embeddings."""

    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, 4)
        self.pos = nn.Parameter(torch.randn(T + 2, D))

    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 2
        shifted.masked_fill_(shifted == 5, 1)
        h = self.emb(shifted) + F.embedding(torch.arange(2, ids.size(1) + 2, device=ids.device), self.pos)
        h[..., 0] = 0.5
        h[:, -1] = h[:, 0] * 2
        spare = ids.argmax(dim=1) * 2   # read by nothing: dead code, no layer (argmax has none)
        del spare
        return self.head(h.mean(dim=1))


class CausalPadded(nn.Module):
    """A decoder's additive mask as transformers 4.57's BART builds it: causal and padded."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, 4)

    def forward(self, x, mask):
        b, t, _ = x.shape
        low = torch.finfo(x.dtype).min
        causal = torch.full((t, t), fill_value=low, dtype=x.dtype, device=x.device)
        causal = torch.triu(causal, diagonal=1)
        causal *= torch.arange(t, device=x.device) > torch.arange(t, device=x.device).reshape(-1, 1)
        causal = causal[None, None, :, :].expand(b, 1, -1, -1).clone()
        padding = causal[:, :, :, :t] + mask[:, None, None, :]
        causal[:, :, :, :t] = causal[:, :, :, :t].masked_fill(padding == 0, low)
        q, k, v = (z.view(b, t, 2, D // 2).transpose(1, 2) for z in self.qkv(x).split(D, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return self.out(a.transpose(1, 2).reshape(b, t, D)[:, -1])


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (B, T)).astype(np.int64)
    ids[0, 2] = 5
    mask = np.ones((B, T), np.float32)
    mask[1, 4:] = 0
    return ids, rng.standard_normal((B, T, D)).astype(np.float32), mask, rng.integers(0, 4, (B, 1)).astype(np.int32)


def _build(module, arrays, dtypes, argv=()):
    ff = FFModel(FFConfig(["-b", str(B), *argv]))
    ts = [ff.create_tensor(list(a.shape), d) for a, d in zip(arrays, dtypes)]
    pm = PyTorchModel(module)
    (out,) = pm.torch_to_ff(ff, ts)
    ff.softmax(out, name="prob")
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="sparse_categorical_crossentropy")
    pm.load_weights(ff)
    return ff, ts, out, pm


@pytest.mark.parametrize("form", ["shift", "causal_padded"])
def test_writes_and_folded_masks_equal_torch(form):
    torch.manual_seed(0)
    ids, x, mask, _ = _arrays()
    module, arrays, dtypes = (Shift(), [ids], [DataType.DT_INT64]) if form == "shift" else \
        (CausalPadded(), [x, mask], [DataType.DT_FLOAT] * 2)
    with torch.no_grad():
        want = module(*[torch.from_numpy(a) for a in arrays]).numpy()
    for argv in ([], ["-ll:gpu", "2"]):
        ff, ts, out, _ = _build(module, arrays, dtypes, argv)
        for t, a in zip(ts, arrays):
            t.set_tensor(ff, a)
        ff.forward()
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-6, err_msg=str(argv))
    if form == "causal_padded":   # the causal mask and the padding are both read
        masks = {n for n in (node.op_type.name for node in ff.pcg.nodes)}
        assert "CAST" in masks
        with torch.no_grad():
            other = module(torch.from_numpy(x), torch.ones(B, T)).numpy()
        assert np.abs(other - want).max() > 1e-4


def test_writes_train_like_torch():
    torch.manual_seed(1)
    ids, _, _, labels = _arrays(1)
    module = Shift()
    ff, ts, out, pm = _build(module, [ids], [DataType.DT_INT64])
    ff.fit(x=ids, y=labels, epochs=1)
    x, y = torch.from_numpy(ids), torch.from_numpy(labels[:, 0]).long()
    assert_step_like_torch(ff, pm, module, lambda m: F.cross_entropy(m(x), y))


class _Write(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        y = x.clone()
        if self.how == "two_axes":
            y[0:1, 1:2] = 0.0
        elif self.how == "step":
            y[:, ::2] = 0.0
        elif self.how == "too_big":
            y[:, 0] = x
        return y + 1


@pytest.mark.parametrize("how, kind, match", [
    ("two_axes", ShapeError, r"node 'setitem' \(SETITEM\).*writes a region cut along one axis"),
    ("step", ShapeError, r"node 'setitem' \(SETITEM\).*valid: a position in range, or a slice of step 1"),
    ("too_big", ShapeError, r"node 'setitem' \(SETITEM\).*the value \[2, 4\] does not broadcast to the written "
                            r"region \[2\]"),
])
def test_writes_flexrt_cannot_express_are_refused_naming_the_node(how, kind, match):
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises((ConfigError, ShapeError), match=match) as e:
        PyTorchModel(_Write(how)).torch_to_ff(ff, [ff.create_tensor([2, 4], DataType.DT_FLOAT)])
    assert isinstance(e.value, kind)


class _FourierPositions(nn.Module):
    """XCiT's and EdgeNeXt's positional encoding: constants made in forward (arange, a cast, a floor
    division, a number raised to them, sin and cos of strided slices, a cumulative sum of a mask)
    fold; a convolution reads them."""

    def __init__(self, hidden=8, dim=6, temperature=10000):
        super().__init__()
        self.hidden, self.temperature = hidden, temperature
        self.proj = nn.Conv2d(hidden * 2, dim, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        mask = torch.zeros(b, h, w, device=x.device).bool()
        y = (~mask).cumsum(1, dtype=torch.float32)
        xs = torch.arange(1, w + 1, device=x.device).to(torch.float32).repeat(1, h, 1)
        dim_t = torch.arange(self.hidden, device=x.device).to(torch.float32)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.hidden)
        py, px = y[:, :, :, None] / dim_t, xs[:, :, :, None] / dim_t
        py = torch.stack([py[:, :, :, 0::2].sin(), py[:, :, :, 1::2].cos()], dim=4).flatten(3)
        px = torch.stack([px[:, :, :, 0::2].sin(), px[:, :, :, 1::2].cos()], dim=4).flatten(3)
        return x + self.proj(torch.cat((py, px.repeat(b, 1, 1, 1)), dim=3).permute(0, 3, 1, 2))


def test_positional_encodings_made_in_forward_fold_and_equal_torch():
    from tests.frontends._models import compare_forward
    torch.manual_seed(2)
    compare_forward(_FourierPositions(), np.random.default_rng(2).standard_normal((2, 6, 3, 4)).astype(np.float32))
