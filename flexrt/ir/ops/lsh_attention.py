"""``LSHSelfAttention``: Reformer's locality-sensitive-hashing self-attention (Kitaev et al. 2020, §2),
x [N, L, E] -> [N, L, E], with shared query/key projections.

    q = x @ wqk,  v = x @ wv                                     (each [N, L, E])
    per head h (columns h*D:(h+1)*D, D = E / num_heads) and hash round r < n_hashes:
        bucket_r(i) = argmax([q_i R_r ; -q_i R_r])               (R_r: a fixed random [D, n_buckets/2])
        sort positions by (bucket_r, position); cut the sorted order into chunks of chunk_size;
        position i attends to the keys of its chunk and of the previous chunk (no wrap-around):
            k_j = q_j / sqrt(|q_j|^2 + 1e-6),   s_ij = q_i . k_j / sqrt(D)
            s_ii = -1e5 (self only when nothing else is visible), causal: s_ij = -1e9 for j > i
        o_r(i) = sum_j softmax_j(s_ij) v_j,   z_r(i) = logsumexp_j(s_ij)
    ctx_h(i) = sum_r softmax_r(z_r(i)) o_r(i)                    (the paper's combination of rounds)
    out = concat_h(ctx_h) @ wo

The rotations ``R`` [n_hashes, D, n_buckets/2] are drawn from ``numpy.random.default_rng(seed)``
(standard normal), the same for every head and sample; ``n_buckets = 1`` puts every position in one
bucket (no hashing). Buckets are piecewise constant in the input, so gradients flow through the
attention weights only (the sort is a fixed permutation). A key visible in several rounds counts in
each round (the paper's optional duplicate correction is not applied).

Weights: "wqk" [E, E], "wv" [E, E], "wo" [E, E]; no biases (3*E*E parameters). A head's slice is
columns h*D:(h+1)*D of wqk and wv, rows h*D:(h+1)*D of wo.

Parallel axes (operands: x, then wqk, wv, wo):
- ``sample``: x cut along N; weights replicated; output cut along N;
- ``heads`` (parameter): x replicated; wqk/wv cut along columns, wo along rows; the output holds
  partial sums (one per group of heads). The heads degree must divide ``num_heads``.
There is no sequence axis: the hashing mixes positions across the whole sequence.

Entry point: ``LSHSelfAttentionAttrs`` (registered as ``OpType.LSH_SELF_ATTENTION``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.inputs import short
from flexrt.ir.op_type import OpType
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

_W = "lsh_self_attention"
MAX_LSH_COUNT = 65_536   # buckets or hash rounds: Reformer uses up to 64 and 8


@dataclass(frozen=True, slots=True)
class LSHSelfAttentionAttrs:
    """Reformer LSH self-attention arguments.

    Example:
        >>> LSHSelfAttentionAttrs(embed_dim=64, num_heads=4, n_buckets=8, n_hashes=2, chunk_size=16).head_dim
        16
    """

    op_type: ClassVar[OpType] = OpType.LSH_SELF_ATTENTION
    embed_dim: int
    num_heads: int
    n_buckets: int
    n_hashes: int
    chunk_size: int
    causal: bool = False
    seed: int = 0

    def __post_init__(self):
        for name in ("embed_dim", "num_heads", "n_buckets", "n_hashes", "chunk_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ShapeError(f"{_W}: {name} must be an int >= 1, got {v!r}")
        for name in ("n_buckets", "n_hashes"):     # the rotations hold n_hashes * D * n_buckets / 2 values
            if getattr(self, name) > MAX_LSH_COUNT:
                raise ShapeError(f"{_W}: {name} must be at most {MAX_LSH_COUNT:,}, got {short(getattr(self, name))}")
        if self.embed_dim % self.num_heads:
            raise ShapeError(f"{_W}: num_heads {self.num_heads} does not divide embed_dim {self.embed_dim}; "
                             f"each head gets embed_dim / num_heads channels")
        if self.n_buckets != 1 and self.n_buckets % 2:
            raise ShapeError(f"{_W}: n_buckets must be 1 or even (argmax over [xR; -xR] gives 2 * columns of R), "
                             f"got {self.n_buckets}")
        if not isinstance(self.causal, bool):
            raise ShapeError(f"{_W}: causal must be a bool, got {self.causal!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ShapeError(f"{_W}: seed must be an int >= 0, got {self.seed!r}")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads


def _check(attrs: LSHSelfAttentionAttrs, inputs) -> None:
    (x,) = inputs
    if x.rank != 3:
        raise ShapeError(f"{_W}: input {x} has rank {x.rank}; valid rank: 3 ([N, L, embed_dim])")
    if x.dims[2] != attrs.embed_dim:
        raise ShapeError(f"{_W}: input {list(x.dims)} has {x.dims[2]} features but embed_dim is {attrs.embed_dim}")
    if not x.dtype.is_floating:
        raise ShapeError(f"{_W}: input {x} has dtype {x.dtype.name}; valid: a floating type")


def output_shapes(attrs: LSHSelfAttentionAttrs, inputs):
    _check(attrs, inputs)
    return (TensorShape(inputs[0].dims, inputs[0].dtype),)


def weight_names(attrs: LSHSelfAttentionAttrs):
    return ("wqk", "wv", "wo")


def weight_shapes(attrs: LSHSelfAttentionAttrs, inputs):
    _check(attrs, inputs)
    e, dt = attrs.embed_dim, inputs[0].dtype
    return (TensorShape((e, e), dt),) * 3


def parallel_axes(attrs: LSHSelfAttentionAttrs, inputs):
    _check(attrs, inputs)
    return (
        ParallelAxis("sample", AxisKind.SAMPLE, ((0, shard(0)), (1, COPY), (2, COPY), (3, COPY)), ((0, shard(0)),)),
        ParallelAxis("heads", AxisKind.PARAMETER, ((0, COPY), (1, shard(1)), (2, shard(1)), (3, shard(0))),
                     ((0, SUM),)),
    )


def check_degrees(attrs: LSHSelfAttentionAttrs, inputs, degrees):
    h = degrees.get("heads", 1)
    if attrs.num_heads % h:
        valid = [d for d in range(1, attrs.num_heads + 1) if attrs.num_heads % d == 0]
        raise ShapeError(f"heads degree {h} does not divide num_heads {attrs.num_heads} (a piece would hold part "
                         f"of a head); valid heads degrees: {', '.join(map(str, valid))}")


def _sizes(attrs: LSHSelfAttentionAttrs, ins):
    """(N, L, E in, width of this piece's heads, E out, visible keys per query, chunk count)."""
    x, wqk, _, wo = ins[:4]
    n, length = x.dims[0], x.dims[1]
    chunk = min(attrs.chunk_size, length)
    chunks = math.ceil(length / chunk)
    visible = chunk * min(2, chunks)
    return n, length, x.dims[2], wqk.dims[1], wo.dims[1], visible, chunks


def flops(attrs: LSHSelfAttentionAttrs, ins, outs):
    """Projections (qk, v, out) + hashing + per round the chunked QK^T and AV (multiply-adds as 2).

    The argmax, sort and unsort move data and are not counted as FLOPs."""
    n, length, e_in, width, e_out, visible, _ = _sizes(attrs, ins)
    proj = 2 * n * length * e_in * width * 2 + 2 * n * length * width * e_out
    half = attrs.n_buckets // 2
    hashing = 2 * n * length * width * half * attrs.n_hashes
    attend = 2 * 2 * n * length * visible * width * attrs.n_hashes
    return proj + hashing + attend


def backward_flops(attrs, ins, outs):
    return 2 * flops(attrs, ins, outs)


def extra_memory_bytes(attrs: LSHSelfAttentionAttrs, ins, outs):
    """Projected q and v, the context, and per round the chunked attention weights, outputs and
    log-sum-exps, kept for the backward pass."""
    n, length, _, width, _, visible, _ = _sizes(attrs, ins)
    heads = max(1, width // attrs.head_dim)
    per_round = n * heads * length * visible + n * length * width + n * heads * length
    return (3 * n * length * width + attrs.n_hashes * per_round) * ins[0].dtype.size_bytes


register_op(OpDef(OpType.LSH_SELF_ATTENTION, LSHSelfAttentionAttrs, output_shapes=output_shapes, flops=flops,
                  num_inputs=1, weight_shapes=weight_shapes, weight_names=weight_names,
                  parallel_axes=parallel_axes, backward_flops=backward_flops,
                  extra_memory_bytes=extra_memory_bytes, check_degrees=check_degrees))
