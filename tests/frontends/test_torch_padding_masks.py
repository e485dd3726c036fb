"""Padding masks computed from the model's inputs, as HuggingFace's encoders (BERT, RoBERTa,
DistilBERT, ALBERT, ELECTRA) and hand-written transformers make them, through flexrt.torch:
comparisons (of sizes: numbers; of tensors: boolean tensors), ``~``, ``masked_fill`` by a computed
boolean mask, ``torch.tensor`` and ``torch.finfo`` made in forward, casts by method (``.bool()``,
``.long()``).

Laws: the forward equals torch's (float32, 1e-5) with rows padded differently, on one device,
under data parallelism and under random strategies; one SGD step equals torch's; the mask is used
(another mask gives another output, torch's); a mask that is not boolean, an infinite fill of a
computed mask and comparisons with no layer are refused or warned naming the node. The modules
copy the computations of transformers 4.57's ``_prepare_4d_attention_mask`` and RoBERTa's
``create_position_ids_from_input_ids`` (transformers is not a dependency)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, FrontendWarning, ShapeError  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.strategy import random_strategy, save_strategy  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402
from tests.frontends._models import assert_step_like_torch  # noqa: E402

B, T, V, D, H, C = 4, 8, 20, 16, 4, 3
PAD = 1
SCCE = "sparse_categorical_crossentropy"


def hf_attention_mask(mask, dtype, tgt_len):
    """transformers' _prepare_4d_attention_mask (sdpa path): [B, T] of 1 / 0 -> [B, 1, T, T] of 0 /
    finfo.min."""
    bsz, src_len = mask.size()
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted = torch.tensor(1.0, dtype=dtype) - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class Encoder(nn.Module):
    """A one-layer BERT-style encoder with a classifier, its mask made as HuggingFace makes it."""

    def __init__(self, roberta_positions=False):
        super().__init__()
        self.roberta_positions = roberta_positions
        self.words, self.positions = nn.Embedding(V, D), nn.Embedding(T + PAD + 1, D)
        self.register_buffer("position_ids", torch.arange(T).expand((1, -1)), persistent=False)
        self.norm, self.qkv, self.out = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ff = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.pooler, self.head = nn.Linear(D, D), nn.Linear(D, C)

    def forward(self, ids, mask):
        b, t = ids.size()
        if self.roberta_positions:   # RoBERTa: positions count the tokens that are not padding
            real = ids.ne(PAD).int()
            pos = (torch.cumsum(real, dim=1).type_as(real) * real).long() + PAD
        else:
            pos = self.position_ids[:, :t]
        h = self.norm(self.words(ids) + self.positions(pos))
        if mask.dim() == 2:          # HuggingFace checks the mask's rank: a comparison of sizes
            bias = hf_attention_mask(mask, h.dtype, t)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in self.qkv(h).split(D, dim=2))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        h = h + self.out(a.transpose(1, 2).reshape(b, t, D))
        h = h + self.ff(h)
        return self.head(torch.tanh(self.pooler(h[:, 0])))


class Annotated(nn.Module):
    """The Annotated Transformer's attention: scores.masked_fill(mask == 0, -1e9), the padding mask an
    input ([B, 1, 1, T] of 0 / 1 floats), and ~ of a comparison."""

    def __init__(self, invert=False):
        super().__init__()
        self.invert = invert
        self.qkv, self.head = nn.Linear(D, 3 * D), nn.Linear(D, C)

    def forward(self, x, mask):
        b, t, _ = x.size()
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in self.qkv(x).split(D, dim=2))
        scores = q @ k.transpose(-2, -1) / (D // H) ** 0.5
        hidden = ~(mask != 0) if self.invert else mask == 0
        p = F.softmax(scores.masked_fill(hidden, -1e9), dim=-1)
        return self.head((p @ v).transpose(1, 2).reshape(b, t, D).mean(dim=1))


def _ids_and_mask(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, V, (B, T)).astype(np.int64)
    mask = np.ones((B, T), np.int64)
    for row, length in enumerate(rng.integers(2, T + 1, B)):
        mask[row, length:] = 0
        ids[row, length:] = PAD
    return ids, mask, rng.integers(0, C, (B, 1)).astype(np.int32)


def _build(module, shapes, dtypes, argv=()):
    ff = FFModel(FFConfig(["-b", str(B), *argv]))
    ts = [ff.create_tensor(list(s), d) for s, d in zip(shapes, dtypes)]
    pm = PyTorchModel(module)
    (out,) = pm.torch_to_ff(ff, ts)
    ff.softmax(out, name="prob")
    return ff, ts, out, pm


def _argvs(module, shapes, dtypes, tmp_path):
    base, _, _, _ = _build(module, shapes, dtypes)
    machine = load_machine("local")
    files = []
    for seed in (1, 2):
        path = str(tmp_path / f"random{seed}.json")
        save_strategy(path, random_strategy(base.pcg, machine, seed), machine)
        files.append(["--import", path])
    return [[], ["-ll:gpu", "2"], *files]


def _forward(module, arrays, dtypes, argv=()):
    ff, ts, out, pm = _build(module, [a.shape for a in arrays], dtypes, argv)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
    pm.load_weights(ff)
    for t, a in zip(ts, arrays):
        t.set_tensor(ff, a)
    ff.forward()
    return out.get_tensor(ff)


def _torch(module, arrays):
    with torch.no_grad():
        return module(*[torch.from_numpy(a) for a in arrays]).numpy()


@pytest.mark.parametrize("roberta", [False, True], ids=["bert", "roberta_positions"])
def test_hf_padding_mask_forward_equals_torch_under_every_strategy(roberta, tmp_path):
    torch.manual_seed(0)
    module = Encoder(roberta).eval()
    ids, mask, _ = _ids_and_mask()
    dtypes = [DataType.DT_INT64] * 2
    want = _torch(module, [ids, mask])
    for argv in _argvs(module, [ids.shape, mask.shape], dtypes, tmp_path):
        np.testing.assert_allclose(_forward(module, [ids, mask], dtypes, argv), want, rtol=1e-5, atol=1e-6,
                                   err_msg=str(argv))
    unpadded = np.ones_like(mask)         # the mask is read: without padding, torch and flexrt both change
    other = _torch(module, [ids, unpadded])
    assert np.abs(other - want).max() > 1e-3
    np.testing.assert_allclose(_forward(module, [ids, unpadded], dtypes), other, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("argv", [[], ["-ll:gpu", "2"]], ids=["one_device", "data_parallel"])
def test_hf_padding_mask_one_sgd_step_equals_torch(argv):
    torch.manual_seed(1)
    module = Encoder().eval()
    ids, mask, labels = _ids_and_mask(1)
    ff, ts, out, pm = _build(module, [ids.shape, mask.shape], [DataType.DT_INT64] * 2, argv)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
    pm.load_weights(ff)
    ff.fit(x=[ids, mask], y=labels, epochs=1)
    xs, y = [torch.from_numpy(a) for a in (ids, mask)], torch.from_numpy(labels[:, 0]).long()
    assert_step_like_torch(ff, pm, module, lambda m: F.cross_entropy(m(*xs), y))


@pytest.mark.parametrize("invert", [False, True], ids=["eq_zero", "not_ne_zero"])
def test_annotated_transformer_padding_mask_equals_torch(invert, tmp_path):
    torch.manual_seed(2)
    module = Annotated(invert).eval()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    _, mask, _ = _ids_and_mask(2)
    mask = mask.astype(np.float32).reshape(B, 1, 1, T)
    dtypes = [DataType.DT_FLOAT] * 2
    want = _torch(module, [x, mask])
    for argv in _argvs(module, [x.shape, mask.shape], dtypes, tmp_path):
        np.testing.assert_allclose(_forward(module, [x, mask], dtypes, argv), want, rtol=1e-5, atol=1e-6,
                                   err_msg=str(argv))


class _Fill(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x, m):
        if self.how == "inf":
            return F.softmax(x.masked_fill(m != 0, float("-inf")), dim=-1)
        if self.how == "float_mask":
            return x.masked_fill(m, 0.0)
        if self.how == "less":
            return x * (x < m)
        if self.how == "orders":   # every order, against a tensor and a number (exact: relu's sign, cast)
            return (x > m) * 1.0 + (x >= 0.0) * 2.0 + (0.5 > x) * 4.0 + (x <= m) * 8.0 + (m == 1) * 16.0
        if self.how == "bitwise_not":
            return x * ~(m.long())
        if self.how == "broadcast":
            return x.masked_fill(m[:, :, None] != 0, 0.0)
        return x.masked_fill(m != 0, torch.finfo(x.dtype).tiny) + torch.tensor([[1.0, 2.0, 3.0, 4.0]])


def _fill(how, x, m):
    ff = FFModel(FFConfig(["-b", str(B)]))
    ts = [ff.create_tensor(list(a.shape), DataType.DT_FLOAT) for a in (x, m)]
    (out,) = PyTorchModel(_Fill(how)).torch_to_ff(ff, ts)
    ff.compile(loss_type="mean_squared_error_avg")
    for t, a in zip(ts, (x, m)):
        t.set_tensor(ff, a)
    ff.forward()
    return out.get_tensor(ff)


def test_fills_constants_and_infinities():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, 4)).astype(np.float32)
    m = (rng.random((B, 4)) < 0.4).astype(np.float32)
    m[:, 0] = 0                                          # every row keeps a value (-inf everywhere is NaN)
    for how in ("tiny", "inf", "less", "orders"):
        module = _Fill(how)
        want = _torch(module, [x, m])
        if how == "inf":   # an infinite fill of a computed mask is the largest finite number, said
            with pytest.warns(FrontendWarning, match=r"fills with -inf, taken as -3\.40282e\+38"):
                got = _fill(how, x, m)
        else:
            got = _fill(how, x, m)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=how)


@pytest.mark.parametrize("how, kind, match", [
    ("float_mask", ConfigError, r"node 'masked_fill' .*the condition is a DT_FLOAT tensor; valid: a boolean one"),
    ("bitwise_not", ConfigError, r"node 'invert' .*logical not of .*DT_INT64.*bitwise in torch"),
    ("broadcast", ShapeError, r"node 'masked_fill' .*the mask \[4, 4, 1\] does not broadcast to the input \[4, 4\]"),
])
def test_masks_flexrt_cannot_compute_are_refused_naming_the_node(how, kind, match):
    x = np.zeros((B, 4), np.float32)
    with pytest.raises(kind, match=match):
        _fill(how, x, x)


class _Sizes(nn.Module):
    def forward(self, x):
        n = torch.tensor(x.size(1), dtype=torch.float32)     # a 0-d tensor of a size: a number
        if x.dim() != 3:                                      # a comparison of sizes: no layer
            pass
        lo = torch.iinfo(torch.int32).min < x.size(0) <= torch.finfo(torch.float16).max
        return x * n + torch.tensor([1.0, 2.0, 3.0]) + float(lo)


def test_tensors_and_type_limits_made_in_forward_are_numbers_or_constants():
    x = np.random.default_rng(4).standard_normal((B, 2, 3)).astype(np.float32)
    ff = FFModel(FFConfig(["-b", str(B)]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    (out,) = PyTorchModel(_Sizes()).torch_to_ff(ff, [xt])
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    ff.forward()
    np.testing.assert_allclose(out.get_tensor(ff), _torch(_Sizes(), [x]), rtol=1e-6)


def test_hf_padding_mask_through_onnx_equals_torch(tmp_path):
    """The same encoder exported to ONNX (Equal, Not, Where of the computed mask; Cast to bool)."""
    pytest.importorskip("onnx")
    from flexrt.onnx import ONNXModel
    torch.manual_seed(3)
    module = Encoder(roberta_positions=True).eval()
    ids, mask, _ = _ids_and_mask(3)
    path = str(tmp_path / "encoder.onnx")
    torch.onnx.export(module, (torch.from_numpy(ids), torch.from_numpy(mask)), path, dynamo=False,
                      input_names=["ids", "mask"])
    for argv in ([], ["-ll:gpu", "2"]):
        ff = FFModel(FFConfig(["-b", str(B), *argv]))
        ts = {n: ff.create_tensor([B, T], DataType.DT_INT64) for n in ("ids", "mask")}
        om = ONNXModel(path)
        out = om.apply(ff, ts)
        ff.compile(loss_type="mean_squared_error_avg")
        om.load_weights(ff)
        for n, a in (("ids", ids), ("mask", mask)):
            ts[n].set_tensor(ff, a)
        ff.forward()
        np.testing.assert_allclose(out.get_tensor(ff), _torch(module, [ids, mask]), rtol=1e-5, atol=1e-6,
                                   err_msg=str(argv))


def test_integer_positions_simulate_under_random_strategies():
    """RoBERTa's positions are an integer cumulative sum (a batch matmul of integers): a strategy that
    cuts it into partial sums has no gradient to send back for it. The simulator lowered one anyway
    (a plan reading buffers no task wrote); every random strategy now simulates."""
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.simulator.simulate import simulate
    torch.manual_seed(0)
    ff, _, _, _ = _build(Encoder(roberta_positions=True).eval(), [(B, T), (B, T)], [DataType.DT_INT64] * 2)
    machine = load_machine("dgx1_v100")
    times = [simulate(random_strategy(ff.pcg, machine, seed), machine, AnalyticCostModel()).iteration_time_s
             for seed in range(6)]
    assert all(t > 0 for t in times)
