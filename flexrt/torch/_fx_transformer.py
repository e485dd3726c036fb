"""torch's attention and transformer modules -> ``IRNode``s (see ``flexrt.torch._fx``): nn.MultiheadAttention,
TransformerEncoderLayer / TransformerEncoder, TransformerDecoderLayer / TransformerDecoder and nn.Transformer (whose
own forwards cannot be traced) as the nodes of their computation: attention, residual adds, norms,
feed-forward. A causal mask given as ``attn_mask`` / ``src_mask`` / ``tgt_mask`` (a bool
``triu(ones, 1)``, or an additive one of -inf above the diagonal: ``generate_square_subsequent_mask``,
made in forward or held in a buffer) makes the self-attention FFModel's causal attention. An
attention given any other mask (``attn_mask``, ``src_mask``, ``tgt_mask``, ``memory_mask``) or a key
padding mask (``key_padding_mask``, ``src_key_padding_mask``, ``tgt_key_padding_mask``,
``memory_key_padding_mask``: True, or a float added, where a key is hidden) is built of its parts,
since FFModel's attention takes no mask: the query, key and value projections (dense layers of
``in_proj_weight``'s rows), the heads' scores plus the masks (``ATTENTION_MASK``: the float type's
lowest number where True), the softmax (causal where asked), and ``out_proj``.

Entry points: ``TRANSFORMER_MODULES``, ``TAKES_MASKS``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

import math

from flexrt.errors import FrontendWarning, warn_caller
from flexrt.torch._fx import _NONE, _bind
from flexrt.torch._fx_values import attention_nodes
from flexrt.torch._ir import Ref


class Masking(NamedTuple):
    """How one attention is masked: causal (FFModel's causal attention, or a causal softmax of the
    parts), ``values`` (an fx node: an attn_mask that is not causal, added to the scores) and
    ``padding`` (an fx node: a key padding mask)."""

    causal: bool = False
    values: object = None
    padding: object = None

    @property
    def parts(self) -> bool:
        """Whether the attention is built of its parts (FFModel's attention takes no mask)."""
        return self.values is not None or self.padding is not None


def masking(ctx, node, mask, is_causal, padding=None) -> Masking:
    """The masking of an attention given ``mask`` (an fx node or None), the ``is_causal`` hint and a
    key padding mask: a causal mask (``ctx.attn_masks``) makes it causal; any other tensor is
    values added to the scores (torch reads the mask, not the hint)."""
    for m in (mask, padding):
        if m is not None and not hasattr(m, "name"):
            raise ctx.error(node, f"a mask must be a traced tensor, got {m!r}")
    if mask is None:
        return Masking(bool(is_causal), None, padding)
    if mask.name in ctx.attn_masks or ctx.masks.get(mask.name) == "hide":   # (mask == 0 of a tril buffer: bool)
        return Masking(True, None, padding)
    if mask.name in ctx.masks:   # True where a query sees a key, as a bool attn_mask would hide the past and the present
        raise ctx.error(node, f"'{mask.name}' (True where a query may see a key) is given as attn_mask, where True "
                              f"hides; give its complement (mask == 0, or torch.triu(torch.ones(T, T, dtype=torch.bool), "
                              f"1))")
    return Masking(False, mask, padding)


class _Projection:
    """One input projection (0: query, 1: key, 2: value) of a MultiheadAttention as a Linear's weight
    and bias: rows of ``in_proj_weight`` (or ``q/k/v_proj_weight``), read when weights are loaded."""

    def __init__(self, m: nn.MultiheadAttention, i: int) -> None:
        self.m, self.i = m, i

    @property
    def weight(self):
        w, e = self.m.in_proj_weight, self.m.embed_dim
        return getattr(self.m, "qkv"[self.i] + "_proj_weight") if w is None else w[self.i * e:(self.i + 1) * e]

    @property
    def bias(self):
        b, e = self.m.in_proj_bias, self.m.embed_dim
        return None if b is None else b[self.i * e:(self.i + 1) * e]

    def named_parameters(self, recurse: bool = False):   # rows of the module's own: tied to nothing else
        return iter(())


def masked_attention(ctx, node, m: nn.MultiheadAttention, q: str, k: str, v: str, masks: Masking, prefix: str) -> str:
    """``m`` on queries ``q``, keys ``k`` and values ``v`` masked by ``masks`` (values or a key padding
    mask), built of its parts (module doc); returns the output's name ([N, L, E], or [L, N, E] when
    not batch first)."""
    if m.bias_k is not None or m.add_zero_attn:
        raise ctx.error(node, "MultiheadAttention(add_bias_kv=True or add_zero_attn=True) is not supported")
    if m.dropout > 0 and m.training:
        raise ctx.error(node, f"MultiheadAttention(dropout={m.dropout}) in training with a mask other than causal: "
                              f"flexrt builds that attention of its parts and drops no attention weights; convert it "
                              f"in eval mode or with dropout 0")
    e, h = m.embed_dim, m.num_heads
    add = lambda op, ins, fields, part: ctx.add(node, op, ins, fields, name=f"{prefix}.{part}", users=())  # noqa: E731
    if not m.batch_first:
        q, k, v = (add("TRANSPOSE", [t], [0, 1], f"{p}_batch_first") for t, p in ((q, "q"), (k, "k"), (v, "v")))
    heads = []
    for i, (src, part) in enumerate(((q, "q"), (k, "k"), (v, "v"))):
        holder = ctx.projections.setdefault((id(m), i), _Projection(m, i))
        lin = ctx.layer(node, "LINEAR", holder, "dense", [src], [e, _NONE, int(m.in_proj_bias is not None)],
                        name=f"{prefix}.{part}_proj", users=())
        batch = add("GETATTR", [lin], ["size", 0], f"{part}_batch")
        split = add("VIEW", [lin], [Ref(batch), -1, h, e // h], f"{part}_heads")
        heads.append(add("TRANSPOSE", [split], [1, 2], f"{part}_t"))
    addends = [add("ATTENTION_MASK", [mask.name, heads[0], heads[1]], [kind], f"{kind}_mask")
               for mask, kind in ((masks.padding, "key_padding"), (masks.values, "attn")) if mask is not None]
    bias = addends[0] if len(addends) == 1 else add("ADD", addends, [], "mask")
    att = attention_nodes(ctx, node, *heads, prefix, bias, masks.causal, 1.0 / math.sqrt(e // h))
    merged = add("RESHAPE", [add("TRANSPOSE", [att], [1, 2], "heads_back")], [Ref(f"{prefix}.q_batch"), -1, e],
                 "merged")
    out = ctx.layer(node, "LINEAR", m.out_proj, "dense", [merged], [e, _NONE, int(m.out_proj.bias is not None)],
                    name=f"{prefix}.out_proj", users=())
    return out if m.batch_first else add("TRANSPOSE", [out], [0, 1], "out_batch_first")


def _attention_fields(ctx, node, m: nn.MultiheadAttention, is_causal: bool):
    if m.bias_k is not None or m.add_zero_attn:
        raise ctx.error(node, "MultiheadAttention(add_bias_kv=True or add_zero_attn=True) is not supported")
    fields = [m.embed_dim, m.num_heads, m.kdim, m.vdim, float(m.dropout), int(m.in_proj_bias is not None)]
    return fields, [("batch_first", bool(m.batch_first))] + ([("causal", True)] if is_causal else [])


def _m_attention(ctx, node, m):
    a = _bind(ctx, node, ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                          "average_attn_weights", "is_causal"], {})
    masks = masking(ctx, node, a.get("attn_mask"), a.get("is_causal"), a.get("key_padding_mask"))
    if masks.parts:   # (output, None): the weights are not computed
        out = masked_attention(ctx, node, m, a["query"].name, a["key"].name, a["value"].name, masks, node.name)
        ctx.add(node, "ATTENTION_OUTPUT", [out])
        return
    fields, kws = _attention_fields(ctx, node, m, masks.causal)
    ctx.layer(node, "MULTIHEAD_ATTENTION", m, "multihead_attention",
              [a["query"].name, a["key"].name, a["value"].name], fields, kws)


def _activation_op(ctx, node, act) -> str:
    if act in (F.relu, torch.relu) or isinstance(act, nn.ReLU) or act == "relu":
        return "RELU"
    if act in (F.gelu,) or (isinstance(act, nn.GELU) and act.approximate == "none") or act == "gelu":
        return "GELU"
    raise ctx.error(node, f"feed-forward activation {act!r} is not supported; valid: relu, gelu")


class _Layer:
    """The nodes of one encoder or decoder layer ``m``, named ``{prefix}.{part}``."""

    def __init__(self, ctx, node, m, prefix: str) -> None:
        self.ctx, self.node, self.m, self.prefix = ctx, node, m, prefix
        for norm in (getattr(m, k) for k in ("norm1", "norm2", "norm3") if hasattr(m, k)):
            if not norm.elementwise_affine:
                raise ctx.error(node, f"{type(m).__name__} norms without elementwise_affine are not supported")

    def name(self, part: str) -> str:
        return f"{self.prefix}.{part}"

    def dropout(self, src: str, part: str, p: float) -> str:
        if p > 0 and self.m.training:
            return self.ctx.add(self.node, "DROPOUT", [src], [float(p)], name=self.name(part), users=())
        return src

    def attention(self, module, q: str, kv: str, part: str, masks: Masking, drop: str) -> str:
        if masks.parts:
            out = masked_attention(self.ctx, self.node, module, q, kv, kv, masks, self.name(part))
            return self.dropout(out, drop, getattr(self.m, drop).p)
        fields, kws = _attention_fields(self.ctx, self.node, module, masks.causal)
        att = self.ctx.layer(self.node, "MULTIHEAD_ATTENTION", module, "multihead_attention", [q, kv, kv], fields,
                             kws, name=self.name(part), users=())
        out = self.ctx.add(self.node, "GETITEM", [att], [0], name=self.name(f"{part}_out"), users=())
        return self.dropout(out, drop, getattr(self.m, drop).p)

    def feed_forward(self, src: str, last_dropout: str) -> str:
        ctx, node, m = self.ctx, self.node, self.m
        h = ctx.layer(node, "LINEAR", m.linear1, "dense", [src], [m.linear1.out_features, _NONE,
                      int(m.linear1.bias is not None)], name=self.name("linear1"), users=())
        h = ctx.add(node, _activation_op(ctx, node, m.activation), [h], name=self.name("activation"), users=())
        h = self.dropout(h, "dropout", m.dropout.p)
        h = ctx.layer(node, "LINEAR", m.linear2, "dense", [h], [m.linear2.out_features, _NONE,
                      int(m.linear2.bias is not None)], name=self.name("linear2"), users=())
        return self.dropout(h, last_dropout, getattr(m, last_dropout).p)

    def norm(self, src: str, part: str) -> str:
        mod = getattr(self.m, part)
        kws = [("shape", tuple(mod.normalized_shape)), ("eps", mod.eps)] + ([("bias", False)] if mod.bias is None
                                                                            else [])
        return self.ctx.layer(self.node, "LAYER_NORM", mod, "layer_norm", [src], [], kws, name=self.name(part),
                              users=())

    def residual(self, x: str, block, norm: str, part: str) -> str:
        """x + block(norm(x)) when the layer normalizes first, else norm(x + block(x))."""
        if self.m.norm_first:
            return self.ctx.add(self.node, "ADD", [x, block(self.norm(x, norm))], name=self.name(part), users=())
        return self.norm(self.ctx.add(self.node, "ADD", [x, block(x)], name=self.name(part), users=()), norm)


def _encoder_layer(ctx, node, m: nn.TransformerEncoderLayer, x: str, prefix: str, masks: Masking) -> str:
    """The nodes of one TransformerEncoderLayer on ``x``, its self-attention masked by ``masks``;
    returns the name of its output."""
    p = _Layer(ctx, node, m, prefix)
    h = p.residual(x, lambda s: p.attention(m.self_attn, s, s, "self_attn", masks, "dropout1"), "norm1", "add1")
    return p.residual(h, lambda s: p.feed_forward(s, "dropout2"), "norm2", "add2")


def _decoder_layer(ctx, node, m: nn.TransformerDecoderLayer, x: str, memory: str, prefix: str, masks: Masking,
                   memory_masks: Masking) -> str:
    """The nodes of one TransformerDecoderLayer on ``x`` reading ``memory`` (``masks``: its
    self-attention's; ``memory_masks``: its cross-attention's); returns its output's name."""
    p = _Layer(ctx, node, m, prefix)
    h = p.residual(x, lambda s: p.attention(m.self_attn, s, s, "self_attn", masks, "dropout1"), "norm1", "add1")
    h = p.residual(h, lambda s: p.attention(m.multihead_attn, s, memory, "multihead_attn", memory_masks, "dropout2"),
                   "norm2", "add2")
    return p.residual(h, lambda s: p.feed_forward(s, "dropout3"), "norm3", "add3")


def _final_norm(ctx, node, m, x: str, name: str | None = None) -> str:
    if m.norm is None:
        return x
    return ctx.layer(node, "LAYER_NORM", m.norm, "layer_norm", [x], [],
                     [("shape", tuple(m.norm.normalized_shape)), ("eps", m.norm.eps)], name=name or f"{node.name}.norm",
                     users=())


def _m_encoder_layer(ctx, node, m):
    a = _bind(ctx, node, ["src", "src_mask", "src_key_padding_mask", "is_causal"], {})
    masks = masking(ctx, node, a.get("src_mask"), a.get("is_causal"), a.get("src_key_padding_mask"))
    ctx.add(node, "IDENTITY", [_encoder_layer(ctx, node, m, a["src"].name, node.name, masks)])


def _m_encoder(ctx, node, m: nn.TransformerEncoder):
    a = _bind(ctx, node, ["src", "mask", "src_key_padding_mask", "is_causal"], {})
    masks = masking(ctx, node, a.get("mask"), a.get("is_causal"), a.get("src_key_padding_mask"))
    if masks.padding is not None and getattr(m, "use_nested_tensor", False) and not m.training:
        warn_caller(f"torch node '{node.name}': {type(m).__name__}(enable_nested_tensor=True) in eval mode returns 0 "
                    f"at the padded positions (torch's nested-tensor fast path); flexrt computes them as torch does "
                    f"in training, so only the positions that are not padding compare equal", FrontendWarning)
    x = a["src"].name
    for i, layer in enumerate(m.layers):
        x = _encoder_layer(ctx, node, layer, x, f"{node.name}.layers_{i}", masks)
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m, x)])


def _decoder_masks(ctx, node, a: dict, prefix: str = "") -> tuple[Masking, Masking]:
    """(the self-attention's masking, the cross-attention's) of a decoder's arguments ``a``."""
    if a.get(f"{prefix}memory_is_causal") and a.get(f"{prefix}memory_mask") is None:
        raise ctx.error(node, "memory_is_causal without a memory_mask is not supported; give the memory_mask")
    return (masking(ctx, node, a.get("tgt_mask"), a.get("tgt_is_causal"), a.get("tgt_key_padding_mask")),
            masking(ctx, node, a.get("memory_mask"), False, a.get("memory_key_padding_mask")))


_DECODER_ARGS = ["tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask",
                 "tgt_is_causal", "memory_is_causal"]


def _m_decoder_layer(ctx, node, m):
    a = _bind(ctx, node, _DECODER_ARGS, {})
    ctx.add(node, "IDENTITY", [_decoder_layer(ctx, node, m, a["tgt"].name, a["memory"].name, node.name,
                                              *_decoder_masks(ctx, node, a))])


def _m_decoder(ctx, node, m: nn.TransformerDecoder):
    a = _bind(ctx, node, _DECODER_ARGS, {})
    masks = _decoder_masks(ctx, node, a)
    x = a["tgt"].name
    for i, layer in enumerate(m.layers):
        x = _decoder_layer(ctx, node, layer, x, a["memory"].name, f"{node.name}.layers_{i}", *masks)
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m, x)])


def _m_transformer(ctx, node, m: nn.Transformer):
    """nn.Transformer(src, tgt, masks...): its encoder on src (src_mask, src_key_padding_mask), its
    decoder on tgt reading the encoder's output (tgt_ and memory_ masks)."""
    a = _bind(ctx, node, ["src", "tgt", "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask",
                          "tgt_key_padding_mask", "memory_key_padding_mask", "src_is_causal", "tgt_is_causal",
                          "memory_is_causal"], {})
    src_masks = masking(ctx, node, a.get("src_mask"), a.get("src_is_causal"), a.get("src_key_padding_mask"))
    masks = _decoder_masks(ctx, node, a)
    x = a["src"].name
    for i, layer in enumerate(m.encoder.layers):
        x = _encoder_layer(ctx, node, layer, x, f"{node.name}.encoder.layers_{i}", src_masks)
    memory = _final_norm(ctx, node, m.encoder, x, f"{node.name}.encoder.norm")
    y = a["tgt"].name
    for i, layer in enumerate(m.decoder.layers):
        y = _decoder_layer(ctx, node, layer, y, memory, f"{node.name}.decoder.layers_{i}", *masks)
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m.decoder, y, f"{node.name}.decoder.norm")])


TRANSFORMER_MODULES = {nn.MultiheadAttention: _m_attention, nn.TransformerEncoderLayer: _m_encoder_layer,
                       nn.TransformerEncoder: _m_encoder, nn.TransformerDecoderLayer: _m_decoder_layer,
                       nn.TransformerDecoder: _m_decoder, nn.Transformer: _m_transformer}
TAKES_MASKS = frozenset(TRANSFORMER_MODULES)
