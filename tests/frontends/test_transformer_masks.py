"""torch's transformer modules with causal masks: TransformerDecoderLayer / TransformerDecoder
(self-attention, cross-attention to a memory, feed-forward; post- and pre-norm; batch first or
not), encoders given a causal src_mask, and a causal mask made the ways real code makes it
(nn.Transformer.generate_square_subsequent_mask in forward or with a fixed size, a bool triu buffer)
and used as attn_mask, by F.scaled_dot_product_attention, or added to scores before a softmax.
Each equals torch's forward (float32, 1e-5) under one device and data parallelism; attention
masks that are not causal are refused naming the node. Key padding masks (src_, tgt_, memory_ and
MultiheadAttention's key_padding_mask) build the attention of its parts: forward and one SGD step
equal torch's."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError, ShapeError  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402
from tests.frontends._models import assert_step_like_torch  # noqa: E402

B, T, S, D = 2, 5, 4, 8


def _mask(how, h, batch_first=True):
    if how == "generated":     # the size read from the tensor: torch.full + torch.triu in the trace
        return nn.Transformer.generate_square_subsequent_mask(h.size(1 if batch_first else 0))
    if how == "fixed":         # a constant the trace holds
        return nn.Transformer.generate_square_subsequent_mask(T)
    return None


class Decoder(nn.Module):
    def __init__(self, how, norm_first=False, batch_first=True):
        super().__init__()
        self.how, self.batch_first = how, batch_first
        self.embed = nn.Linear(3, D)
        self.layer = nn.TransformerDecoderLayer(D, 2, 16, dropout=0.0, batch_first=batch_first, norm_first=norm_first)
        self.stack = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, 2, 16, dropout=0.0, batch_first=batch_first,
                                                                      activation="gelu"), 2, norm=nn.LayerNorm(D))
        self.register_buffer("hidden", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, x, memory):
        h = self.embed(x)
        if not self.batch_first:
            h, memory = h.transpose(0, 1), memory.transpose(0, 1)
        mask = self.hidden if self.how == "buffer" else _mask(self.how, h, self.batch_first)
        out = self.stack(self.layer(h, memory, tgt_mask=mask, tgt_is_causal=mask is not None), memory, tgt_mask=mask)
        return out if self.batch_first else out.transpose(0, 1)


def _run(module, arrays, argv=()):
    ff = FFModel(FFConfig(["-b", str(B), *argv]))
    ts = [ff.create_tensor(list(a.shape), DataType.DT_FLOAT) for a in arrays]
    pm = PyTorchModel(module)
    (out,) = pm.torch_to_ff(ff, ts)
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    for t, a in zip(ts, arrays):
        t.set_tensor(ff, a)
    ff.forward()
    with torch.no_grad():
        want = module(*[torch.from_numpy(a) for a in arrays]).numpy()
    np.testing.assert_allclose(out.get_tensor(ff).reshape(want.shape), want, rtol=1e-5, atol=1e-6, err_msg=str(argv))


RNG = np.random.default_rng(0)
X, MEMORY = RNG.standard_normal((B, T, 3)).astype(np.float32), RNG.standard_normal((B, S, D)).astype(np.float32)


@pytest.mark.parametrize("how", ["generated", "fixed", "buffer", "none"])
@pytest.mark.parametrize("norm_first, batch_first", [(False, True), (True, True), (False, False)])
def test_decoders_equal_torch(how, norm_first, batch_first):
    torch.manual_seed(0)
    module = Decoder(how, norm_first, batch_first).eval()
    for argv in ([], ["-ll:gpu", "2"]):
        _run(module, [X, MEMORY], argv)


def test_the_causal_mask_is_used():
    """The same decoder with and without its mask differ, and flexrt follows each."""
    torch.manual_seed(0)
    masked, plain = Decoder("generated").eval(), Decoder("none").eval()
    plain.load_state_dict(masked.state_dict())
    with torch.no_grad():
        a, b = (m(torch.from_numpy(X), torch.from_numpy(MEMORY)).numpy() for m in (masked, plain))
    assert np.abs(a - b).max() > 1e-2
    _run(masked, [X, MEMORY])
    _run(plain, [X, MEMORY])


class Causal(nn.Module):
    """A causal self-attention written by hand: scores + mask (or SDPA's attn_mask), softmax."""

    def __init__(self, form):
        super().__init__()
        self.form = form
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=True), 1)

    def forward(self, x):
        q, k, v = self.qkv(x).split(D, dim=2)
        mask = nn.Transformer.generate_square_subsequent_mask(x.size(1))
        if self.form == "added":
            att = F.softmax(q @ k.transpose(-2, -1) / D ** 0.5 + mask, dim=-1) @ v
        elif self.form == "sdpa":
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            att = self.encoder(x, mask=mask, is_causal=True)
        return self.proj(att)


@pytest.mark.parametrize("form", ["added", "sdpa", "encoder"])
def test_hand_written_causal_attention_equals_torch(form):
    torch.manual_seed(1)
    x = RNG.standard_normal((B, T, D)).astype(np.float32)
    _run(Causal(form).eval(), [x])
    _run(Causal(form).eval(), [x], ["-ll:gpu", "2"])


class _Masked(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.register_buffer("mask", mask)

    def forward(self, x):
        return self.attn(x, x, x, attn_mask=self.mask, need_weights=False)[0]


@pytest.mark.parametrize("mask", [
    torch.tril(torch.ones(T, T, dtype=torch.bool), -1),           # hides the past: not causal
    torch.triu(torch.ones(T, T), 1),                              # additive +1: hides nothing
    torch.zeros(T, T, dtype=torch.bool),
    torch.from_numpy(np.random.default_rng(9).standard_normal((B * 2, T, T)).astype(np.float32)),   # per head
], ids=["past", "plus_one", "none_hidden", "per_head"])
def test_attention_masks_that_are_not_causal_are_their_values(mask):
    """A mask that is not causal, given to MultiheadAttention: the attention built of its parts, the
    mask's values added to the scores (a bool one: the lowest number where True); equal to torch's."""
    torch.manual_seed(6)
    x = RNG.standard_normal((B, T, D)).astype(np.float32)
    _run(_Masked(mask).eval(), [x])
    _run(_Masked(mask).eval(), [x], ["-ll:gpu", "2"])


def test_a_mask_that_keeps_given_as_attn_mask_is_refused():
    """mask == 1 of a tril buffer is True where a query may see a key; as attn_mask True hides."""
    class Keep(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
            self.register_buffer("tril", torch.tril(torch.ones(T, T)))

        def forward(self, x):
            return self.attn(x, x, x, attn_mask=self.tril == 1)[0]
    ff = FFModel(FFConfig(["-b", str(B)]))
    with pytest.raises(ConfigError, match=r"'eq' \(True where a query may see a key\) is given as attn_mask, where "
                                          r"True hides; give its complement"):
        PyTorchModel(Keep()).torch_to_ff(ff, [ff.create_tensor([B, T, D], DataType.DT_FLOAT)])


class Padded(nn.Module):
    """Key padding masks (True where a key is padding, from a 0 / 1 input) given to the modules:
    nn.Transformer (all three), or an encoder, a decoder and a MultiheadAttention."""

    def __init__(self, form, batch_first=True, norm_first=False):
        super().__init__()
        self.form, self.batch_first = form, batch_first
        kw = dict(dropout=0.0, batch_first=batch_first, norm_first=norm_first)
        self.embed = nn.Linear(3, D)
        if form == "transformer":
            self.model = nn.Transformer(D, 2, 1, 1, 16, **kw)
        else:
            self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 2, 16, **kw), 2,
                                                 enable_nested_tensor=False)
            self.decoder = nn.TransformerDecoderLayer(D, 2, 16, **kw)
            self.attn = nn.MultiheadAttention(D, 2, batch_first=batch_first, kdim=D, vdim=D)

    def forward(self, x, memory, x_real, memory_real):
        x_pad, memory_pad = x_real == 0, memory_real == 0
        x = self.embed(x)
        if not self.batch_first:
            x, memory = x.transpose(0, 1), memory.transpose(0, 1)
        if self.form == "transformer":
            mask = nn.Transformer.generate_square_subsequent_mask(x.size(1 if self.batch_first else 0))
            out = self.model(memory, x, tgt_mask=mask, src_key_padding_mask=memory_pad, tgt_key_padding_mask=x_pad,
                             memory_key_padding_mask=memory_pad)
        else:
            memory = self.encoder(memory, src_key_padding_mask=memory_pad)
            h = self.decoder(x, memory, tgt_key_padding_mask=x_pad, memory_key_padding_mask=memory_pad)
            out = self.attn(h, memory, memory, key_padding_mask=memory_pad)[0]
        return out if self.batch_first else out.transpose(0, 1)


def _real(rows, length, seed):
    real = np.ones((rows, length), np.float32)
    for r, n in enumerate(np.random.default_rng(seed).integers(1, length + 1, rows)):
        real[r, n:] = 0
    real[0] = 1
    return real


@pytest.mark.parametrize("form", ["layers", "transformer"])
@pytest.mark.parametrize("batch_first, norm_first", [(True, False), (False, True)])
def test_key_padding_masks_equal_torch(form, batch_first, norm_first):
    """An attention given a key padding mask is built of its parts: forward equal to torch's on one
    device and under data parallelism (the rows padded differently; the padded keys change the
    output, so the mask is read)."""
    torch.manual_seed(3)
    module = Padded(form, batch_first, norm_first).eval()
    arrays = [X, MEMORY, _real(B, T, 1), _real(B, S, 2)]
    for argv in ([], ["-ll:gpu", "2"]):
        _run(module, arrays, argv)
    with torch.no_grad():
        a, b = (module(*[torch.from_numpy(v) for v in arrays[:2] + pads]).numpy()
                for pads in (arrays[2:], [np.ones_like(arrays[2]), np.ones_like(arrays[3])]))
    assert np.abs(a - b).max() > 1e-3


def test_key_padding_masks_train_like_torch():
    """One SGD step of the padded encoder, decoder and attention equals torch's."""
    from flexrt.model import SGDOptimizer
    torch.manual_seed(4)
    module = Padded("layers").train()
    arrays = [X, MEMORY, _real(B, T, 5), _real(B, S, 6)]
    ff = FFModel(FFConfig(["-b", str(B)]))
    ts = [ff.create_tensor(list(a.shape), DataType.DT_FLOAT) for a in arrays]
    pm = PyTorchModel(module)
    (out,) = pm.torch_to_ff(ff, ts)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    target = np.random.default_rng(7).standard_normal(out.dims).astype(np.float32)
    ff.fit(x=arrays, y=target, epochs=1)
    xs = [torch.from_numpy(a) for a in arrays]
    assert_step_like_torch(ff, pm, module, lambda m: F.mse_loss(m(*xs), torch.from_numpy(target)))


def test_integer_padding_masks_and_masks_of_other_sizes_are_refused():
    layer = nn.TransformerDecoderLayer(D, 2, 16, dropout=0.0, batch_first=True)

    class M(nn.Module):
        def __init__(self, kw, mask):
            super().__init__()
            self.layer, self.kw = layer, kw
            self.register_buffer("mask", mask)

        def forward(self, x, memory):
            return self.layer(x, memory, **{self.kw: self.mask})
    for kw, mask, message in (("tgt_key_padding_mask", torch.zeros(B, T, dtype=torch.int64),
                               "the key_padding_mask of DT_INT64; valid: boolean"),
                              ("memory_mask", torch.zeros(T, T, dtype=torch.bool),
                               r"the attn_mask \[5, 5\] does not fit the attention; valid: \[5, 4\] or \[4, 5, 4\]")):
        ff = FFModel(FFConfig(["-b", str(B)]))
        ts = [ff.create_tensor([B, T, D], DataType.DT_FLOAT), ff.create_tensor([B, S, D], DataType.DT_FLOAT)]
        with pytest.raises((ConfigError, ShapeError), match=message):
            PyTorchModel(M(kw, mask)).torch_to_ff(ff, ts)


@pytest.mark.parametrize("how", ["generated", "buffer"])
def test_decoder_exports_equal_torch_through_onnx(tmp_path, how):
    """torch's ONNX export of a decoder (attention decomposed; the causal mask an additive constant
    before each self-attention Softmax) builds the same computation."""
    pytest.importorskip("onnx")
    from flexrt.onnx import ONNXModel
    torch.manual_seed(0)
    module = Decoder(how).eval()
    path = str(tmp_path / "decoder.onnx")
    torch.onnx.export(module, (torch.from_numpy(X), torch.from_numpy(MEMORY)), path, dynamo=False,
                      input_names=["x", "memory"])
    om = ONNXModel(path)
    ff = FFModel(FFConfig(["-b", str(B)]))
    ts = {"x": ff.create_tensor(list(X.shape), DataType.DT_FLOAT),
          "memory": ff.create_tensor(list(MEMORY.shape), DataType.DT_FLOAT)}
    out = om.apply(ff, ts)
    ff.compile(loss_type="mean_squared_error_avg")
    om.load_weights(ff)
    ts["x"].set_tensor(ff, X)
    ts["memory"].set_tensor(ff, MEMORY)
    ff.forward()
    with torch.no_grad():
        want = module(torch.from_numpy(X), torch.from_numpy(MEMORY)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-5, atol=1e-6)


class Seq2Seq(nn.Module):
    """nn.Transformer: an encoder on the source, a causal decoder on the target."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, D)
        self.model = nn.Transformer(D, 2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16,
                                    dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        return self.model(self.embed(src), self.embed(tgt), tgt_mask=mask, tgt_is_causal=True)


def test_nn_transformer_equals_torch():
    torch.manual_seed(0)
    src, tgt = RNG.standard_normal((B, S, 3)).astype(np.float32), X
    for argv in ([], ["-ll:gpu", "2"]):
        _run(Seq2Seq().eval(), [src, tgt], argv)


def test_nested_tensor_fast_path_differs_only_at_padded_positions_and_says_so():
    """torch's eval fast path (enable_nested_tensor=True) returns 0 at padded positions; flexrt
    computes them (as torch does in training), warns, and equals torch at every other position."""
    from flexrt.errors import FrontendWarning
    torch.manual_seed(5)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 2, 16, dropout=0.0, batch_first=True), 2).eval()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        def forward(self, x, real):
            return self.encoder(x, src_key_padding_mask=real == 0)
    x, real = RNG.standard_normal((B, T, D)).astype(np.float32), _real(B, T, 8)
    real[1, 2:] = 0
    ff = FFModel(FFConfig(["-b", str(B)]))
    ts = [ff.create_tensor(list(a.shape), DataType.DT_FLOAT) for a in (x, real)]
    pm = PyTorchModel(M())
    with pytest.warns(FrontendWarning, match=r"returns 0 at the padded positions"):
        (out,) = pm.torch_to_ff(ff, ts)
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    for t, a in zip(ts, (x, real)):
        t.set_tensor(ff, a)
    ff.forward()
    with torch.no_grad():
        want = M()(torch.from_numpy(x), torch.from_numpy(real)).numpy()
    keep = real.astype(bool)
    np.testing.assert_allclose(out.get_tensor(ff)[keep], want[keep], rtol=1e-5, atol=1e-6)
    assert np.abs(want[~keep]).max() == 0.0 < np.abs(out.get_tensor(ff)[~keep]).max()
