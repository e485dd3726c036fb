"""Forward and backward of Reformer's LSH self-attention (``OpType.LSH_SELF_ATTENTION``).

The semantics are those of ``flexrt.ir.ops.lsh_attention`` (hash by random rotations, sort by
(bucket, position), chunks attending to themselves and the previous chunk, shared-QK with normalized
keys, self masked unless alone, optional causal mask, rounds combined by their log-sum-exps).

Each hash round works on the sorted order padded to a whole number of chunks: padded slots carry
position -1 and are masked as keys; their query rows are computed and dropped. A round is a fixed
permutation of the positions, so its backward sorts the incoming gradients with the same permutation,
back-propagates through the chunked attention and unsorts. Array-module generic (NumPy or CuPy).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_backward, register_forward

SELF_SCORE = -1e5       # a position sees itself only when nothing else is visible (Reformer §2)
MASKED_SCORE = -1e9     # padding and, with ``causal``, later positions
NORM_EPS = 1e-6         # keys are q / sqrt(|q|^2 + eps)


@lru_cache(maxsize=64)
def _rotations_host(seed: int, n_hashes: int, head_dim: int, half: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n_hashes, head_dim, half))


def rotations(xp, attrs, dtype):
    """The fixed random rotations R [n_hashes, head_dim, n_buckets / 2] of ``attrs`` (None for one bucket)."""
    if attrs.n_buckets == 1:
        return None
    r = _rotations_host(attrs.seed, attrs.n_hashes, attrs.head_dim, attrs.n_buckets // 2)
    return xp.asarray(r, dtype=dtype)


def hash_buckets(xp, attrs, q):
    """Buckets [n_hashes, N, h, L] of the per-head vectors q [N, h, L, D]: argmax([qR; -qR])."""
    rot = rotations(xp, attrs, q.dtype)
    if rot is None:
        return xp.zeros((attrs.n_hashes,) + q.shape[:3], dtype=xp.int64)
    proj = xp.matmul(q[None], rot[:, None, None])                  # [R, N, h, L, n_buckets/2]
    return xp.argmax(xp.concatenate([proj, -proj], axis=-1), axis=-1).astype(xp.int64)


def _look_back(xp, t, fill):
    """[N, h, nc, c, ...] -> [N, h, nc, 2c, ...]: each chunk preceded by the previous one (chunk 0 by ``fill``)."""
    first = xp.full(t[:, :, :1].shape, fill, dtype=t.dtype)
    prev = xp.concatenate([first, t[:, :, :-1]], axis=2)
    return xp.concatenate([prev, t], axis=3)


def _look_back_grad(xp, g, c):
    """The adjoint of ``_look_back``: [N, h, nc, 2c, ...] -> [N, h, nc, c, ...]."""
    prev, own = g[:, :, :, :c], g[:, :, :, c:]
    shifted = xp.concatenate([prev[:, :, 1:], xp.zeros_like(prev[:, :, :1])], axis=2)
    return own + shifted


def _sort_pad(xp, t, perm, padded):
    """t [N, h, L, ...] gathered into the order ``perm`` [N, h, L] and zero-padded to ``padded`` rows."""
    idx = perm.reshape(perm.shape + (1,) * (t.ndim - 3))
    s = xp.take_along_axis(t, idx, axis=2)
    if padded == s.shape[2]:
        return s
    pad = xp.zeros(s.shape[:2] + (padded - s.shape[2],) + s.shape[3:], dtype=s.dtype)
    return xp.concatenate([s, pad], axis=2)


def _unsort(xp, t, inv, length):
    """The inverse of ``_sort_pad``: drop the padding, gather back with the inverse permutation."""
    t = t[:, :, :length]
    return xp.take_along_axis(t, inv.reshape(inv.shape + (1,) * (t.ndim - 3)), axis=2)


def _round_forward(xp, attrs, q, v, buckets):
    """One hash round on q, v [N, h, L, D]: (o [N, h, L, D], lse [N, h, L], saved state for backward)."""
    n, h, length, d = q.shape
    c = min(attrs.chunk_size, length)
    nc = -(-length // c)
    padded = nc * c
    perm = xp.argsort(buckets * length + xp.arange(length), axis=-1)
    inv = xp.argsort(perm, axis=-1)
    sq, sv = _sort_pad(xp, q, perm, padded), _sort_pad(xp, v, perm, padded)
    spos = perm                                                       # original positions, sorted; -1: padding
    if padded > length:
        spos = xp.concatenate([perm, xp.full((n, h, padded - length), -1, dtype=perm.dtype)], axis=2)
    norm = xp.sqrt(xp.sum(sq * sq, axis=-1, keepdims=True) + q.dtype.type(NORM_EPS))
    sk = sq / norm
    cq = sq.reshape(n, h, nc, c, d)
    ck = _look_back(xp, sk.reshape(n, h, nc, c, d), 0)
    cv = _look_back(xp, sv.reshape(n, h, nc, c, d), 0)
    qpos = spos.reshape(n, h, nc, c)[..., None]
    kpos = _look_back(xp, spos.reshape(n, h, nc, c), -1)[..., None, :]
    scores = xp.matmul(cq, xp.swapaxes(ck, -1, -2)) * q.dtype.type(1.0 / math.sqrt(d))
    is_self = qpos == kpos
    masked = kpos < 0
    if attrs.causal:
        masked = masked | (kpos > qpos)
    scores = xp.where(is_self, q.dtype.type(SELF_SCORE), scores)
    scores = xp.where(masked, q.dtype.type(MASKED_SCORE), scores)
    top = xp.max(scores, axis=-1, keepdims=True)
    lse = top + xp.log(xp.sum(xp.exp(scores - top), axis=-1, keepdims=True))
    p = xp.exp(scores - lse)
    o = xp.matmul(p, cv).reshape(n, h, padded, d)
    saved = {"perm": perm, "inv": inv, "sk": sk, "norm": norm, "cq": cq, "ck": ck, "cv": cv, "p": p,
             "live": ~(is_self | masked), "c": c, "padded": padded}
    return _unsort(xp, o, inv, length), _unsort(xp, lse.reshape(n, h, padded), inv, length), saved


def _round_backward(xp, attrs, saved, g_o, g_lse):
    """Gradients (dq, dv) [N, h, L, D] of one round given those of its o [N, h, L, D] and lse [N, h, L]."""
    n, h, length, d = g_o.shape
    c, padded, perm, inv = saved["c"], saved["padded"], saved["perm"], saved["inv"]
    nc = padded // c
    p, cq, ck, cv = saved["p"], saved["cq"], saved["ck"], saved["cv"]
    do = _sort_pad(xp, g_o, perm, padded).reshape(n, h, nc, c, d)
    dl = _sort_pad(xp, g_lse, perm, padded).reshape(n, h, nc, c, 1)
    dp = xp.matmul(do, xp.swapaxes(cv, -1, -2))
    dcv = xp.matmul(xp.swapaxes(p, -1, -2), do)
    ds = p * (dp - xp.sum(dp * p, axis=-1, keepdims=True) + dl)
    ds = xp.where(saved["live"], ds, 0) * g_o.dtype.type(1.0 / math.sqrt(d))
    dcq = xp.matmul(ds, ck)
    dck = xp.matmul(xp.swapaxes(ds, -1, -2), cq)
    dsk = _look_back_grad(xp, dck, c).reshape(n, h, padded, d)
    dsv = _look_back_grad(xp, dcv, c).reshape(n, h, padded, d)
    sk = saved["sk"]
    dsq = dcq.reshape(n, h, padded, d) + (dsk - sk * xp.sum(sk * dsk, axis=-1, keepdims=True)) / saved["norm"]
    return _unsort(xp, dsq, inv, length), _unsort(xp, dsv, inv, length)


def _heads(t, n, length, heads, d):
    return t.reshape(n, length, heads, d).transpose(0, 2, 1, 3)   # [N, L, h*D] -> [N, h, L, D]


def _attend(xp, attrs, x, wqk, wv):
    """Projections and every round: (q, v, ctx [N, h, L, D], per-round (o, lse, saved), round weights)."""
    d = attrs.head_dim
    n, length = x.shape[0], x.shape[1]
    heads = wqk.shape[1] // d       # a piece cut along heads holds fewer columns
    q = _heads(xp.matmul(x, wqk), n, length, heads, d)
    v = _heads(xp.matmul(x, wv), n, length, heads, d)
    buckets = hash_buckets(xp, attrs, q)
    rounds = [_round_forward(xp, attrs, q, v, buckets[r]) for r in range(attrs.n_hashes)]
    lse = xp.stack([r[1] for r in rounds])                            # [R, N, h, L]
    w = xp.exp(lse - xp.max(lse, axis=0, keepdims=True))
    w = w / xp.sum(w, axis=0, keepdims=True)
    ctx = sum(w[r][..., None] * rounds[r][0] for r in range(attrs.n_hashes))
    return ctx, rounds, w


def _merge(ctx):
    n, h, length, d = ctx.shape
    return ctx.transpose(0, 2, 1, 3).reshape(n, length, h * d)


@register_forward(OpType.LSH_SELF_ATTENTION)
def lsh_self_attention_forward(xp, attrs, operands):
    """LSH self-attention over the heads this call's weights hold (see the module docstring)."""
    x, wqk, wv, wo = operands
    ctx, _, _ = _attend(xp, attrs, x, wqk, wv)
    return (xp.matmul(_merge(ctx), wo),)


@register_backward(OpType.LSH_SELF_ATTENTION)
def lsh_self_attention_backward(xp, attrs, operands, outputs, grad_outputs):
    """Recomputes the rounds (same buckets, same permutations), then back-propagates through the
    output projection, the combination of rounds, each round and the two input projections.
    Gradients in operand order: x, wqk, wv, wo."""
    x, wqk, wv, wo = operands
    (gout,) = grad_outputs
    n, length, e = x.shape
    d = attrs.head_dim
    heads = wqk.shape[1] // d
    ctx, rounds, w = _attend(xp, attrs, x, wqk, wv)
    flat = _merge(ctx)
    dwo = xp.matmul(flat.reshape(-1, flat.shape[-1]).T, gout.reshape(-1, gout.shape[-1]))
    dctx = _heads(xp.matmul(gout, wo.T), n, length, heads, d)       # [N, h, L, D]
    g_ctx_dot = xp.sum(dctx * ctx, axis=-1)                          # [N, h, L]
    dq = xp.zeros_like(ctx)
    dv = xp.zeros_like(ctx)
    for r, (o, _, saved) in enumerate(rounds):
        g_lse = w[r] * (xp.sum(dctx * o, axis=-1) - g_ctx_dot)
        gq, gv = _round_backward(xp, attrs, saved, w[r][..., None] * dctx, g_lse)
        dq = dq + gq
        dv = dv + gv
    dq, dv = _merge(dq).reshape(n * length, -1), _merge(dv).reshape(n * length, -1)
    x2 = x.reshape(n * length, e)
    dx = (xp.matmul(dq, wqk.T) + xp.matmul(dv, wv.T)).reshape(x.shape)
    return dx, xp.matmul(x2.T, dq), xp.matmul(x2.T, dv), dwo
