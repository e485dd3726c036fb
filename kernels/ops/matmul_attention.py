"""Forwards of batch matmul and multi-head attention."""

from __future__ import annotations

import math

from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_forward


@register_forward(OpType.BATCH_MATMUL)
def batch_matmul_forward(xp, attrs, operands):
    a, b = operands
    return (xp.matmul(a, b),)


def _softmax_last(xp, s):
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


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
    scores = xp.matmul(q, k) * q.dtype.type(1.0 / math.sqrt(d))
    ctx = xp.matmul(_softmax_last(xp, scores), v)              # [N, h, Lq, D]
    ctx = ctx.transpose(0, 2, 1, 3).reshape(n, lq, width)
    out = xp.matmul(ctx, wo)
    if attrs.bias:
        out = out + bo
    return (out,)
