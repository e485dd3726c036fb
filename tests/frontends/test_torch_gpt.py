"""GPT-style PyTorch modules (nanoGPT / minGPT layout) through flexrt.torch: causal attention written
as masked_fill of a tril buffer or as scaled_dot_product_attention(is_causal=True), positions from
torch.arange, sizes read with x.size().

Laws: the forward with torch's weights equals torch's (float32, 1e-5) on one device, under data
parallelism and under random strategies (which cut the causal softmax along its rows too); one
SGD step equals torch's; FlexFlow's text format round-trips the model. Tied weights warn; masks
used any other way are refused naming the node."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, FrontendWarning  # noqa: E402
from flexrt.machine import load_machine  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.strategy import random_strategy, save_strategy  # noqa: E402
from flexrt.torch import PyTorchModel, file_to_ff  # noqa: E402
from tests.frontends._models import assert_step_like_torch  # noqa: E402

B, T, V, D, H = 2, 8, 16, 16, 4
SCCE = "sparse_categorical_crossentropy"


class Attention(nn.Module):
    def __init__(self, sdpa: bool, fill=float("-inf")):
        super().__init__()
        self.sdpa, self.fill = sdpa, fill
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        if self.sdpa == "triu":   # the hidden keys, made in forward (a constant once sizes are numbers)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        elif self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, self.fill)
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class GPT(nn.Module):
    def __init__(self, sdpa: bool, tie: bool = False, fill=float("-inf")):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = Attention(sdpa, fill)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, V, bias=False)
        if tie:
            self.head.weight = self.wte.weight

    def forward(self, idx):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (B, T)).astype(np.int64), rng.integers(0, V, (B, T, 1)).astype(np.int32)


def _build(pm, argv=(), source=None):
    ff = FFModel(FFConfig(["-b", str(B), *argv]))
    x = ff.create_tensor([B, T], DataType.DT_INT64)
    out = (file_to_ff(source, ff, [x]) if source else pm.torch_to_ff(ff, [x]))[0]
    ff.softmax(out, name="prob")
    return ff, x, out


def _strategies(pm, tmp_path):
    base, _, _ = _build(pm)
    machine = load_machine("local")
    files = []
    for seed in (1, 2, 3):
        path = str(tmp_path / f"random{seed}.json")
        save_strategy(path, random_strategy(base.pcg, machine, seed), machine)
        files.append(["--import", path])
    return [[], ["-ll:gpu", "2"], *files]


@pytest.mark.parametrize("sdpa", [False, True, "triu"], ids=["masked_fill", "sdpa", "triu"])
def test_gpt_forward_equals_torch_under_every_strategy(sdpa, tmp_path):
    torch.manual_seed(0)
    model = GPT(sdpa).eval()
    idx, _ = _data()
    pm = PyTorchModel(model)
    with torch.no_grad():
        want = model(torch.from_numpy(idx)).numpy()
    for argv in _strategies(pm, tmp_path):
        ff, x, out = _build(pm, argv)
        ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
        pm.load_weights(ff)
        x.set_tensor(ff, idx)
        ff.forward()
        np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-5, err_msg=str(argv))
    assert ff.num_parameters() == sum(p.numel() for p in model.parameters())
    causal = [n for n in ff.pcg.nodes if n.op_type.name == "SOFTMAX" and n.attrs.causal]
    assert len(causal) == 1


def test_gpt_text_file_round_trip_and_one_sgd_step_equal_torch(tmp_path):
    torch.manual_seed(1)
    model = GPT(sdpa=False).eval()
    idx, labels = _data(1)
    pm = PyTorchModel(model)
    path = str(tmp_path / "gpt.ff")
    pm.torch_to_file(path)
    ff, x, out = _build(pm, ["--import", _strategies(pm, tmp_path)[3][1]], source=path)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type=SCCE)
    pm.load_weights(ff)
    ff.fit(x=idx, y=labels, epochs=1)
    x, y = torch.from_numpy(idx), torch.from_numpy(labels).long().reshape(-1)
    assert_step_like_torch(ff, pm, model, lambda m: F.cross_entropy(m(x).reshape(-1, V), y))


def test_tied_weights_warn_and_large_negative_fills_are_masks():
    ff = FFModel(FFConfig(["-b", str(B)]))
    x = ff.create_tensor([B, T], DataType.DT_INT64)
    with pytest.warns(FrontendWarning, match=r"parameter 'head.weight' is 'wte.weight' too \(tied weights\).*"
                                             rf"{V * D} parameters more"):
        PyTorchModel(GPT(sdpa=True, tie=True)).torch_to_ff(ff, [x])
    ff = FFModel(FFConfig(["-b", str(B)]))
    PyTorchModel(GPT(sdpa=False, fill=torch.finfo(torch.float32).min)).torch_to_ff(
        ff, [ff.create_tensor([B, T], DataType.DT_INT64)])
    assert any(n.op_type.name == "SOFTMAX" and n.attrs.causal for n in ff.pcg.nodes)


class _Misuse(nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how
        mask = torch.tril(torch.ones(T, T)) if how != "full" else torch.ones(T, T)
        self.register_buffer("mask", mask.view(1, 1, T, T))

    def forward(self, x):   # x: [B, H, T, T] scores
        t = x.size(-1)
        hidden = self.mask[:, :, :t, :t] == 0
        if self.how == "fill":
            return F.softmax(x.masked_fill(hidden, -1.0), dim=-1)
        if self.how == "add":
            return x + hidden
        if self.how == "rows":
            return F.softmax(x.masked_fill(self.mask[:, :, :t, :4] == 0, float("-inf")), dim=-1)
        if self.how == "sdpa_mask":
            return F.scaled_dot_product_attention(x, x, x, attn_mask=self.mask)
        return F.softmax(x.masked_fill(hidden, float("-inf")), dim=-1)


@pytest.mark.parametrize("how, match", [
    ("fill", r"masked_fill with -1.0; valid: float\('-inf'\) or a number <= -1e\+09"),
    ("add", r"torch node 'add'.*reads 'eq', a causal mask"),
    ("rows", r"indexes a causal mask with .*; valid: mask\[:, :, :T, :T\]"),
])
def test_masks_used_otherwise_are_refused_naming_the_node(how, match):
    ff = FFModel(FFConfig(["-b", str(B)]))
    with pytest.raises(ConfigError, match=match):
        PyTorchModel(_Misuse(how)).torch_to_ff(ff, [ff.create_tensor([B, H, T, T], DataType.DT_FLOAT)])


def _equals_torch(module, x) -> None:
    ff = FFModel(FFConfig(["-b", str(B)]))
    xt = ff.create_tensor([B, H, T, T], DataType.DT_FLOAT)
    (out,) = PyTorchModel(module).torch_to_ff(ff, [xt])
    ff.compile(loss_type="mean_squared_error_avg")
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff).reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_a_keeping_mask_given_to_sdpa_is_added_as_torch_adds_a_float_mask():
    """A float tril(ones) buffer given as attn_mask is not a causal mask there (torch adds its 1s and
    0s to the scores): flexrt adds its values too."""
    _equals_torch(_Misuse("sdpa_mask"), np.random.default_rng(1).standard_normal((B, H, T, T)).astype(np.float32))


def test_a_constant_mask_that_is_not_causal_fills_exactly():
    """A buffer that is not a causal mask (all ones: nothing hidden; random: some keys hidden) compared
    with 0 is a constant boolean mask: masked_fill with -inf then softmax equals torch's."""
    x = np.random.default_rng(0).standard_normal((B, H, T, T)).astype(np.float32)
    for seed in (None, 1):
        module = _Misuse("full")
        if seed is not None:
            rng = np.random.default_rng(seed)
            keep = rng.random((T, T)) < 0.7
            keep[:, 0] = True    # every row sees a key (a row of -inf is NaN in torch too)
            module.mask.copy_(torch.from_numpy(keep.astype(np.float32)).view(1, 1, T, T))
        _equals_torch(module, x)


@pytest.mark.parametrize("degrees", [{"dim2": 2}, {"dim2": 4}, {"dim1": 2, "dim2": 2}, {"dim0": 2, "dim2": 2}])
def test_causal_softmax_cut_along_its_rows_equals_one_device(degrees):
    """A causal softmax piece cut along the rows learns its first row (piece_call): forward and one
    SGD step of scores -> causal softmax -> matmul equal one device's (float64)."""
    from flexrt.runtime.executor import optimizer_step
    from flexrt.runtime.reference import ReferenceTrainer
    from flexrt.runtime.session import Session
    from flexrt.strategy import ConfigStrategy, data_parallel
    from flexrt.strategy.space import config_at
    ff = FFModel(FFConfig(["-b", "2"]))
    x = ff.create_tensor([2, 4, 8, 8], DataType.DT_DOUBLE)
    s = ff.dense(x, 8, name="scores")
    p = ff.softmax(s, name="probs", causal=True)
    ff.dense(ff.reshape(p, [2, 4 * 8 * 8]), 3, name="out")
    machine = load_machine("local")
    node = next(n for n in ff.pcg.nodes if n.name == "probs")
    cfg = config_at(ff.pcg, node, machine, degrees)
    assert dict(cfg.degrees) == degrees
    configs = dict(data_parallel(ff.pcg, machine, 1).configs)
    configs[node.id] = cfg
    strategy = ConfigStrategy(ff.pcg, configs)
    rng = np.random.default_rng(0)
    w0 = {n.name: rng.standard_normal(n.attrs.shape.dims) * 0.3 for n in ff.pcg.nodes if n.op_type.name == "WEIGHT"}
    xs, ys = rng.standard_normal((2, 4, 8, 8)), rng.integers(0, 3, (2, 1)).astype(np.int32)
    session = Session(strategy, machine, loss=SCCE, weights=w0, lr=0.1)
    ref = ReferenceTrainer(ff.pcg, w0, optimizer_step("sgd", lr=0.1), SCCE)
    name = session.input_names[0]
    session.forward({name: xs})
    probs = session.output("probs")
    assert np.allclose(np.triu(probs[0, 0], 1), 0) and np.allclose(probs.sum(-1), 1)
    assert session.step({name: xs}, ys).loss == pytest.approx(ref.step({name: xs}, ys), rel=1e-12)
    for k, w in ref.weights.items():
        np.testing.assert_allclose(session.weights()[k], w, rtol=1e-10, atol=1e-12, err_msg=k)


class _OwnLayerNorm(nn.Module):
    """nanoGPT's LayerNorm: its own weight and (optional) bias through F.layer_norm."""

    def __init__(self, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(D) + 0.5)
        self.bias = nn.Parameter(torch.rand(D)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class NanoLayout(nn.Module):
    """nanoGPT's GPT.forward: reads sizes in Python (an assert), takes optional targets and returns
    (logits, loss), keeps only the last position's logits without targets, ties the head."""

    def __init__(self, bias: bool):
        super().__init__()
        self.block_size = T
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(V, D), wpe=nn.Embedding(T, D),
                                              ln_1=_OwnLayerNorm(bias), ln_f=_OwnLayerNorm(bias)))
        self.attn = Attention(sdpa=True)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"sequence of length {t} over the block size {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        x = self.transformer.ln_f(x + self.attn(self.transformer.ln_1(x)))
        if targets is not None:
            logits = self.lm_head(x)
            return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return self.lm_head(x[:, [-1], :]), None


@pytest.mark.parametrize("bias", [True, False])
def test_nanogpt_layout_traces_with_sizes_and_equals_torch(bias):
    """Sizes read in Python need their values: torch_to_ff traces such a module on meta tensors of
    its inputs' shapes, with targets held at None; F.layer_norm of a module's own weight and bias
    maps to that module's layer norm; x[:, [-1], :] keeps the last position."""
    torch.manual_seed(2)
    model = NanoLayout(bias).eval()
    idx, _ = _data(2)
    pm = PyTorchModel(model)
    ff = FFModel(FFConfig(["-b", str(B), "-ll:gpu", "2"]))
    x = ff.create_tensor([B, T], DataType.DT_INT64)
    with pytest.warns(FrontendWarning, match="tied weights"):
        (out,) = pm.torch_to_ff(ff, [x])
    assert out.dims == (B, 1, V)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    x.set_tensor(ff, idx)
    ff.forward()
    with torch.no_grad():
        want = model(torch.from_numpy(idx))[0].numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match=r"torch.fx cannot trace NanoLayout.*torch_to_ff, given the inputs, also "
                                          r"traces with their shapes"):
        PyTorchModel(model).torch_to_string()    # no inputs: no shapes to trace with
    assert len(pm.torch_to_string()) > 10            # after torch_to_ff: traced with its inputs' shapes


class _OtherNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = _OwnLayerNorm(True)
        self.gain = nn.Parameter(torch.ones(D))

    def forward(self, x):
        return F.layer_norm(x, (D,), self.gain, self.norm.bias)


def test_layer_norm_of_parameters_of_two_modules_is_refused():
    ff = FFModel(FFConfig(["-b", str(B)]))
    with pytest.raises(ConfigError, match=r"torch node 'layer_norm' \(.*test_torch_gpt.py:\d+: return F.layer_norm.*F.layer_norm "
                                          r"with weight 'gain' and bias 'norm.bias'; valid: no weights, or one "
                                          r"module's own .weight and .bias"):
        PyTorchModel(_OtherNorm()).torch_to_ff(ff, [ff.create_tensor([B, D], DataType.DT_FLOAT)])
