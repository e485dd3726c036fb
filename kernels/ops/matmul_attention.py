"""Forwards and backwards of batch matmul and multi-head attention."""

from __future__ import annotations

import math

from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_backward, register_forward


@register_forward(OpType.BATCH_MATMUL)
def batch_matmul_forward(xp, attrs, operands):
    a, b = operands
    return (xp.matmul(a, b),)


def _softmax_last(xp, s):
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def causal_masked(xp, attrs, scores):
    """Causal attention: query i (of the whole sequence: a piece's first query is ``query_offset``
    times its length) sees keys 0..i; the others get -inf before the softmax (probability 0).
    Shared by multi-head attention and the causal softmax."""
    if not getattr(attrs, "causal", False):
        return scores
    lq, lk = scores.shape[-2], scores.shape[-1]
    first = attrs.query_offset * lq
    hidden = xp.arange(lk)[None, :] > (xp.arange(lq)[:, None] + first)
    return xp.where(hidden, scores.dtype.type(-xp.inf), scores)


@register_forward(OpType.MULTIHEAD_ATTENTION)
def multihead_attention_forward(xp, attrs, operands):
    """Scaled dot-product attention over the heads this call's weights hold.

    A piece cut along the heads axis receives wq/wk/wv with fewer columns (and wo with fewer rows):
    the number of heads is read from them, the head width from ``attrs``. Dropout is not applied.
    """
    query, key, value, wq, wk, wv, wo = operands[:7]
    d = attrs.head_dim
    width = wq.shape[1]
    heads = width // d
    q = xp.matmul(query, wq)
    k = xp.matmul(key, wk)
    v = xp.matmul(value, wv)
    if attrs.bias:
        bq, bk, bv, bo = operands[7:11]
        q, k, v = q + bq, k + bk, v + bv
    n, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    q = q.reshape(n, lq, heads, d).transpose(0, 2, 1, 3)     # [N, h, Lq, D]
    k = k.reshape(n, lk, heads, d).transpose(0, 2, 3, 1)     # [N, h, D, Lk]
    v = v.reshape(n, lk, heads, d).transpose(0, 2, 1, 3)     # [N, h, Lk, D]
    scores = causal_masked(xp, attrs, xp.matmul(q, k) * q.dtype.type(1.0 / math.sqrt(d)))
    ctx = xp.matmul(_softmax_last(xp, scores), v)              # [N, h, Lq, D]
    ctx = ctx.transpose(0, 2, 1, 3).reshape(n, lq, width)
    out = xp.matmul(ctx, wo)
    if attrs.bias:
        out = out + bo
    return (out,)


def _sum_to(xp, g, shape):
    """``g`` summed over the leading dimensions that broadcasting added to ``shape``."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for d, n in enumerate(shape):
        if n == 1 and g.shape[d] != 1:
            g = g.sum(axis=d, keepdims=True)
    return g


@register_backward(OpType.BATCH_MATMUL)
def batch_matmul_backward(xp, attrs, operands, outputs, grad_outputs):
    a, b = operands
    (g,) = grad_outputs
    da = xp.matmul(g, xp.swapaxes(b, -1, -2))
    db = xp.matmul(xp.swapaxes(a, -1, -2), g)
    return _sum_to(xp, da, a.shape), _sum_to(xp, db, b.shape)


@register_backward(OpType.MULTIHEAD_ATTENTION)
def multihead_attention_backward(xp, attrs, operands, outputs, grad_outputs):
    """Recomputes the forward's projections and attention probabilities, then back-propagates
    through out-projection, attention and the three input projections. Gradients in operand
    order: query, key, value, wq, wk, wv, wo (then bq, bk, bv, bo with ``attrs.bias``)."""
    query, key, value, wq, wk, wv, wo = operands[:7]
    (gout,) = grad_outputs
    d = attrs.head_dim
    width = wq.shape[1]
    heads = width // d
    n, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    q = xp.matmul(query, wq)
    k = xp.matmul(key, wk)
    v = xp.matmul(value, wv)
    if attrs.bias:
        bq, bk, bv = operands[7:10]
        q, k, v = q + bq, k + bk, v + bv
    qh = q.reshape(n, lq, heads, d).transpose(0, 2, 1, 3)     # [N, h, Lq, D]
    kh = k.reshape(n, lk, heads, d).transpose(0, 2, 1, 3)     # [N, h, Lk, D]
    vh = v.reshape(n, lk, heads, d).transpose(0, 2, 1, 3)     # [N, h, Lk, D]
    scale = q.dtype.type(1.0 / math.sqrt(d))
    p = _softmax_last(xp, causal_masked(xp, attrs, xp.matmul(qh, kh.transpose(0, 1, 3, 2)) * scale))   # [N, h, Lq, Lk]
    ctx = xp.matmul(p, vh).transpose(0, 2, 1, 3).reshape(n, lq, width)

    g2 = gout.reshape(-1, gout.shape[-1])
    dwo = xp.matmul(ctx.reshape(-1, width).T, g2)
    dctx = xp.matmul(gout, wo.T).reshape(n, lq, heads, d).transpose(0, 2, 1, 3)   # [N, h, Lq, D]
    dp = xp.matmul(dctx, vh.transpose(0, 1, 3, 2))                                  # [N, h, Lq, Lk]
    dvh = xp.matmul(p.transpose(0, 1, 3, 2), dctx)                                  # [N, h, Lk, D]
    ds = p * (dp - xp.sum(dp * p, axis=-1, keepdims=True)) * scale
    dqh = xp.matmul(ds, kh)                                                         # [N, h, Lq, D]
    dkh = xp.matmul(ds.transpose(0, 1, 3, 2), qh)                                   # [N, h, Lk, D]

    def merge(t, length):
        return t.transpose(0, 2, 1, 3).reshape(n * length, width)

    dq, dk, dv = merge(dqh, lq), merge(dkh, lk), merge(dvh, lk)
    grads = [xp.matmul(dq, wq.T).reshape(query.shape), xp.matmul(dk, wk.T).reshape(key.shape),
             xp.matmul(dv, wv.T).reshape(value.shape),
             xp.matmul(query.reshape(n * lq, -1).T, dq), xp.matmul(key.reshape(n * lk, -1).T, dk),
             xp.matmul(value.reshape(n * lk, -1).T, dv), dwo]
    if attrs.bias:
        grads += [dq.sum(axis=0), dk.sum(axis=0), dv.sum(axis=0), g2.sum(axis=0)]
    return tuple(grads)
