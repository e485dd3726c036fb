"""torch's attention and transformer modules -> ``IRNode``s (see ``flexrt.torch._fx``): nn.MultiheadAttention,
TransformerEncoderLayer / TransformerEncoder, TransformerDecoderLayer / TransformerDecoder and nn.Transformer (whose
own forwards cannot be traced) as the nodes of their computation: attention, residual adds, norms,
feed-forward. A causal mask given as ``attn_mask`` / ``src_mask`` / ``tgt_mask`` (a bool
``triu(ones, 1)``, or an additive one of -inf above the diagonal: ``generate_square_subsequent_mask``,
made in forward or held in a buffer) makes the self-attention FFModel's causal attention; any
other such mask is refused naming the node. An attention given a key padding mask
(``key_padding_mask``, ``src_key_padding_mask``, ``tgt_key_padding_mask``,
``memory_key_padding_mask``: True, or a float added, where a key is padding) is built of its parts,
since FFModel's attention takes no mask: the query, key and value projections (dense layers of
``in_proj_weight``'s rows), the heads' scores plus the mask (``KEY_PADDING_MASK``: the float type's
lowest number where True), the softmax, and ``out_proj``.

Entry points: ``TRANSFORMER_MODULES``, ``TAKES_MASKS``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import math

from flexrt.errors import FrontendWarning, warn_caller
from flexrt.torch._fx import _NONE, _bind
from flexrt.torch._fx_values import attention_nodes
from flexrt.torch._ir import Ref


def causal(ctx, node, mask, is_causal, what: str) -> bool:
    """Whether an attention given ``mask`` (an fx node or None) and the ``is_causal`` hint is causal."""
    if mask is None:
        if is_causal:
            return True
        return False
    if not (hasattr(mask, "name") and mask.name in ctx.attn_masks):
        raise ctx.error(node, f"{what}: FFModel's attention takes no mask; flexrt maps only a causal one "
                              f"(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), or "
                              f"nn.Transformer.generate_square_subsequent_mask(T): -inf above the diagonal)")
    return True


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


def padded_attention(ctx, node, m: nn.MultiheadAttention, q: str, k: str, v: str, padding, is_causal: bool,
                     prefix: str) -> str:
    """``m`` on queries ``q``, keys ``k`` and values ``v`` with the key padding mask ``padding`` (an fx
    node), built of its parts (module doc); returns the output's name ([N, L, E], or [L, N, E] when
    not batch first)."""
    if m.bias_k is not None or m.add_zero_attn:
        raise ctx.error(node, "MultiheadAttention(add_bias_kv=True or add_zero_attn=True) is not supported")
    if not hasattr(padding, "name"):
        raise ctx.error(node, f"the key padding mask must be a traced tensor, got {padding!r}")
    if m.dropout > 0 and m.training:
        raise ctx.error(node, f"MultiheadAttention(dropout={m.dropout}) in training with a key padding mask: flexrt "
                              f"builds that attention of its parts and drops no attention weights; convert it in eval "
                              f"mode or with dropout 0")
    e, h = m.embed_dim, m.num_heads
    add = lambda op, ins, fields, part: ctx.add(node, op, ins, fields, name=f"{prefix}.{part}", users=())  # noqa: E731
    if not m.batch_first:
        q, k, v = (add("TRANSPOSE", [t], [0, 1], f"{p}_batch_first") for t, p in ((q, "q"), (k, "k"), (v, "v")))
    heads = []
    projections = ctx.__dict__.setdefault("projections", {})
    for i, (src, part) in enumerate(((q, "q"), (k, "k"), (v, "v"))):
        holder = projections.setdefault((id(m), i), _Projection(m, i))
        lin = ctx.layer(node, "LINEAR", holder, "dense", [src], [e, _NONE, int(m.in_proj_bias is not None)],
                        name=f"{prefix}.{part}_proj", users=())
        batch = add("GETATTR", [lin], ["size", 0], f"{part}_batch")
        split = add("VIEW", [lin], [Ref(batch), -1, h, e // h], f"{part}_heads")
        heads.append(add("TRANSPOSE", [split], [1, 2], f"{part}_t"))
    bias = add("KEY_PADDING_MASK", [padding.name, heads[0]], [], "padding")
    att = attention_nodes(ctx, node, *heads, prefix, bias, is_causal, 1.0 / math.sqrt(e // h))
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
    is_causal = causal(ctx, node, a.get("attn_mask"), a.get("is_causal"), "attn_mask")
    if a.get("key_padding_mask") is not None:   # (output, None): the weights are not computed
        out = padded_attention(ctx, node, m, a["query"].name, a["key"].name, a["value"].name, a["key_padding_mask"],
                               is_causal, node.name)
        ctx.add(node, "ATTENTION_OUTPUT", [out])
        return
    fields, kws = _attention_fields(ctx, node, m, is_causal)
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

    def attention(self, module, q: str, kv: str, part: str, is_causal: bool, drop: str, padding=None) -> str:
        if padding is not None:
            out = padded_attention(self.ctx, self.node, module, q, kv, kv, padding, is_causal, self.name(part))
            return self.dropout(out, drop, getattr(self.m, drop).p)
        fields, kws = _attention_fields(self.ctx, self.node, module, is_causal)
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


def _encoder_layer(ctx, node, m: nn.TransformerEncoderLayer, x: str, prefix: str, is_causal: bool,
                   padding=None) -> str:
    """The nodes of one TransformerEncoderLayer on ``x`` (``padding``: its key padding mask); returns
    the name of its output."""
    p = _Layer(ctx, node, m, prefix)
    h = p.residual(x, lambda s: p.attention(m.self_attn, s, s, "self_attn", is_causal, "dropout1", padding), "norm1",
                   "add1")
    return p.residual(h, lambda s: p.feed_forward(s, "dropout2"), "norm2", "add2")


def _decoder_layer(ctx, node, m: nn.TransformerDecoderLayer, x: str, memory: str, prefix: str,
                   is_causal: bool, padding=None, memory_padding=None) -> str:
    """The nodes of one TransformerDecoderLayer on ``x`` reading ``memory`` (the key padding masks of
    its self-attention and of the memory); returns its output's name."""
    p = _Layer(ctx, node, m, prefix)
    h = p.residual(x, lambda s: p.attention(m.self_attn, s, s, "self_attn", is_causal, "dropout1", padding), "norm1",
                   "add1")
    h = p.residual(h, lambda s: p.attention(m.multihead_attn, s, memory, "multihead_attn", False, "dropout2",
                                            memory_padding), "norm2", "add2")
    return p.residual(h, lambda s: p.feed_forward(s, "dropout3"), "norm3", "add3")


def _final_norm(ctx, node, m, x: str, name: str | None = None) -> str:
    if m.norm is None:
        return x
    return ctx.layer(node, "LAYER_NORM", m.norm, "layer_norm", [x], [],
                     [("shape", tuple(m.norm.normalized_shape)), ("eps", m.norm.eps)], name=name or f"{node.name}.norm",
                     users=())


def _m_encoder_layer(ctx, node, m):
    a = _bind(ctx, node, ["src", "src_mask", "src_key_padding_mask", "is_causal"], {})
    out = _encoder_layer(ctx, node, m, a["src"].name, node.name,
                         causal(ctx, node, a.get("src_mask"), a.get("is_causal"), "src_mask"), a.get("src_key_padding_mask"))
    ctx.add(node, "IDENTITY", [out])


def _m_encoder(ctx, node, m: nn.TransformerEncoder):
    a = _bind(ctx, node, ["src", "mask", "src_key_padding_mask", "is_causal"], {})
    is_causal = causal(ctx, node, a.get("mask"), a.get("is_causal"), "mask")
    if a.get("src_key_padding_mask") is not None and getattr(m, "use_nested_tensor", False) and not m.training:
        warn_caller(f"torch node '{node.name}': {type(m).__name__}(enable_nested_tensor=True) in eval mode returns 0 "
                    f"at the padded positions (torch's nested-tensor fast path); flexrt computes them as torch does "
                    f"in training, so only the positions that are not padding compare equal", FrontendWarning)
    x = a["src"].name
    for i, layer in enumerate(m.layers):
        x = _encoder_layer(ctx, node, layer, x, f"{node.name}.layers_{i}", is_causal, a.get("src_key_padding_mask"))
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m, x)])


_DECODER_ARGS = ["tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask",
                 "tgt_is_causal", "memory_is_causal"]


def _decoder_args(ctx, node) -> tuple[dict, bool]:
    a = _bind(ctx, node, _DECODER_ARGS, {})
    if a.get("memory_mask") is not None or a.get("memory_is_causal"):
        raise ctx.error(node, "memory_mask / memory_is_causal are not supported (the cross-attention sees all of "
                              "the memory)")
    return a, causal(ctx, node, a.get("tgt_mask"), a.get("tgt_is_causal"), "tgt_mask")


def _m_decoder_layer(ctx, node, m):
    a, is_causal = _decoder_args(ctx, node)
    out = _decoder_layer(ctx, node, m, a["tgt"].name, a["memory"].name, node.name, is_causal,
                         a.get("tgt_key_padding_mask"), a.get("memory_key_padding_mask"))
    ctx.add(node, "IDENTITY", [out])


def _m_decoder(ctx, node, m: nn.TransformerDecoder):
    a, is_causal = _decoder_args(ctx, node)
    x = a["tgt"].name
    for i, layer in enumerate(m.layers):
        x = _decoder_layer(ctx, node, layer, x, a["memory"].name, f"{node.name}.layers_{i}", is_causal,
                           a.get("tgt_key_padding_mask"), a.get("memory_key_padding_mask"))
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m, x)])


def _m_transformer(ctx, node, m: nn.Transformer):
    """nn.Transformer(src, tgt, masks...): its encoder on src (src_mask), its decoder on tgt reading
    the encoder's output (tgt_mask)."""
    a = _bind(ctx, node, ["src", "tgt", "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask",
                          "tgt_key_padding_mask", "memory_key_padding_mask", "src_is_causal", "tgt_is_causal",
                          "memory_is_causal"], {})
    if a.get("memory_mask") is not None or a.get("memory_is_causal"):
        raise ctx.error(node, "memory_mask / memory_is_causal are not supported (the cross-attention sees all of "
                              "the memory)")
    src_causal = causal(ctx, node, a.get("src_mask"), a.get("src_is_causal"), "src_mask")
    tgt_causal = causal(ctx, node, a.get("tgt_mask"), a.get("tgt_is_causal"), "tgt_mask")
    x = a["src"].name
    for i, layer in enumerate(m.encoder.layers):
        x = _encoder_layer(ctx, node, layer, x, f"{node.name}.encoder.layers_{i}", src_causal,
                           a.get("src_key_padding_mask"))
    memory = _final_norm(ctx, node, m.encoder, x, f"{node.name}.encoder.norm")
    y = a["tgt"].name
    for i, layer in enumerate(m.decoder.layers):
        y = _decoder_layer(ctx, node, layer, y, memory, f"{node.name}.decoder.layers_{i}", tgt_causal,
                           a.get("tgt_key_padding_mask"), a.get("memory_key_padding_mask"))
    ctx.add(node, "IDENTITY", [_final_norm(ctx, node, m.decoder, y, f"{node.name}.decoder.norm")])


TRANSFORMER_MODULES = {nn.MultiheadAttention: _m_attention, nn.TransformerEncoderLayer: _m_encoder_layer,
                       nn.TransformerEncoder: _m_encoder, nn.TransformerDecoderLayer: _m_decoder_layer,
                       nn.TransformerDecoder: _m_decoder, nn.Transformer: _m_transformer}
TAKES_MASKS = frozenset(TRANSFORMER_MODULES)
