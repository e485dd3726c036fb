"""``MultiHeadAttention``, as PyTorch's ``nn.MultiheadAttention(batch_first=True)``:
query [N, Lq, E], key [N, Lk, kdim], value [N, Lk, vdim] -> [N, Lq, E] (kdim, vdim default to E).

    q = query @ wq + bq,  k = key @ wk + bk,  v = value @ wv + bv      (each [N, L, E])
    per head h (columns h*D:(h+1)*D, D = E / num_heads):
        ctx_h = softmax(q_h k_h^T / sqrt(D)) v_h
    out = concat_h(ctx_h) @ wo + bo

Weights: "wq" [E, E], "wk" [kdim, E], "wv" [vdim, E], "wo" [E, E], and with ``bias`` "bq", "bk",
"bv", "bo" [E] (4*E*E + 4*E parameters when kdim = vdim = E). A head's slice is one contiguous
block: columns h*D:(h+1)*D of wq/wk/wv (and entries of bq/bk/bv), rows h*D:(h+1)*D of wo. PyTorch's
``in_proj_weight`` [3E, E] maps to wq = in_proj_weight[:E].T and so on; ``out_proj.weight`` to wo = W.T.

``dropout`` (on the attention weights) is kept as an attribute but not applied by the forward here:
the forward is the inference-mode computation. ``add_bias_kv`` and ``add_zero_attn`` are not
supported (a ShapeError names the argument).

Parallel axes (operands: query, key, value, then the weights in ``weight_names`` order):
- ``sample``: query, key and value cut along N; weights replicated; output cut along N;
- ``seq``: query cut along Lq (each query row attends independently); key, value and the weights
  replicated; output cut along Lq;
- ``heads`` (parameter): query, key and value replicated; wq/wk/wv cut along columns, bq/bk/bv along
  their only dimension, wo along rows, bo replicated; the output holds partial sums (one per group
  of heads) and only the pieces at heads coordinate 0 add bo. The heads degree must divide
  ``num_heads`` (``check_degrees``: the weight shapes alone only force it to divide E).
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, register_op, shard
from flexrt.ir.tensor_shape import TensorShape

_WEIGHTS = ("wq", "wk", "wv", "wo")
_BIASES = ("bq", "bk", "bv", "bo")


@dataclass(frozen=True, slots=True)
class MultiHeadAttentionAttrs:
    """FlexFlow's ``multihead_attention`` arguments; ``kdim``/``vdim`` 0 mean ``embed_dim`` (stored so)."""

    op_type: ClassVar[OpType] = OpType.MULTIHEAD_ATTENTION
    embed_dim: int
    num_heads: int
    kdim: int = 0
    vdim: int = 0
    dropout: float = 0.0
    bias: bool = True
    add_bias_kv: bool = False
    add_zero_attn: bool = False
    causal: bool = False          # query i attends to keys 0..i only (GPT); needs Lq == Lk
    query_offset: int = 0         # a piece cut along "seq": its first query's position (set per piece)

    def __post_init__(self):
        for name in ("embed_dim", "num_heads"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ShapeError(f"multihead_attention: {name} must be an int >= 1, got {v!r}")
        if self.embed_dim % self.num_heads:
            raise ShapeError(f"multihead_attention: num_heads {self.num_heads} does not divide embed_dim "
                             f"{self.embed_dim}; each head gets embed_dim / num_heads channels")
        for name in ("kdim", "vdim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ShapeError(f"multihead_attention: {name} must be an int >= 1 (or 0 for embed_dim), got {v!r}")
            object.__setattr__(self, name, v or self.embed_dim)
        if not isinstance(self.dropout, (int, float)) or isinstance(self.dropout, bool) or not 0 <= self.dropout < 1:
            raise ShapeError(f"multihead_attention: dropout must be a number in [0, 1), got {self.dropout!r}")
        object.__setattr__(self, "dropout", float(self.dropout))
        if not isinstance(self.query_offset, int) or isinstance(self.query_offset, bool) or self.query_offset < 0:
            raise ShapeError(f"multihead_attention: query_offset must be an int >= 0, got {self.query_offset!r}")
        for name in ("bias", "add_bias_kv", "add_zero_attn", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise ShapeError(f"multihead_attention: {name} must be a bool, got {getattr(self, name)!r}")
        for name in ("add_bias_kv", "add_zero_attn"):
            if getattr(self, name):
                raise ShapeError(f"multihead_attention: {name}=True is not supported; use {name}=False")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads


def _check(attrs: MultiHeadAttentionAttrs, inputs) -> None:
    q, k, v = inputs
    for what, t, last in (("query", q, attrs.embed_dim), ("key", k, attrs.kdim), ("value", v, attrs.vdim)):
        if t.rank != 3:
            raise ShapeError(f"multihead_attention: {what} {t} has rank {t.rank}; valid rank: 3 ([N, L, features])")
        if t.dims[2] != last:
            name = {"query": "embed_dim", "key": "kdim", "value": "vdim"}[what]
            raise ShapeError(f"multihead_attention: {what} {list(t.dims)} has {t.dims[2]} features but "
                             f"{name} is {last}")
    if not q.dims[0] == k.dims[0] == v.dims[0]:
        raise ShapeError(f"multihead_attention: batch sizes differ: query {list(q.dims)}, key {list(k.dims)}, "
                         f"value {list(v.dims)}; dimension 0 must be equal")
    if attrs.causal and q.dims[1] != k.dims[1]:
        raise ShapeError(f"multihead_attention: causal attention needs as many queries as keys; query "
                         f"{list(q.dims)}, key {list(k.dims)}")
    if k.dims[1] != v.dims[1]:
        raise ShapeError(f"multihead_attention: key {list(k.dims)} and value {list(v.dims)} have different "
                         f"lengths ({k.dims[1]} vs {v.dims[1]}); dimension 1 must be equal")
    if not q.dtype == k.dtype == v.dtype:
        raise ShapeError(f"multihead_attention: dtypes differ (query {q.dtype.name}, key {k.dtype.name}, "
                         f"value {v.dtype.name})")


def output_shapes(attrs: MultiHeadAttentionAttrs, inputs):
    _check(attrs, inputs)
    q = inputs[0]
    return (TensorShape(q.dims, q.dtype),)


def weight_names(attrs: MultiHeadAttentionAttrs):
    return _WEIGHTS + (_BIASES if attrs.bias else ())


def weight_shapes(attrs: MultiHeadAttentionAttrs, inputs):
    _check(attrs, inputs)
    e, dt = attrs.embed_dim, inputs[0].dtype
    ws = tuple(TensorShape(s, dt) for s in ((e, e), (attrs.kdim, e), (attrs.vdim, e), (e, e)))
    return ws + ((TensorShape((e,), dt),) * 4 if attrs.bias else ())


def parallel_axes(attrs: MultiHeadAttentionAttrs, inputs):
    _check(attrs, inputs)
    nb = 4 if attrs.bias else 0
    weights = range(3, 7 + nb)

    def copies(*idx):
        return tuple((i, COPY) for i in idx)

    heads = ((0, COPY), (1, COPY), (2, COPY), (3, shard(1)), (4, shard(1)), (5, shard(1)), (6, shard(0)))
    if attrs.bias:
        heads += ((7, shard(0)), (8, shard(0)), (9, shard(0)), (10, COPY))
    return (
        ParallelAxis("sample", AxisKind.SAMPLE, ((0, shard(0)), (1, shard(0)), (2, shard(0))) + copies(*weights),
                     ((0, shard(0)),)),
        ParallelAxis("seq", AxisKind.ATTRIBUTE, ((0, shard(1)),) + copies(1, 2, *weights), ((0, shard(1)),)),
        ParallelAxis("heads", AxisKind.PARAMETER, heads, ((0, SUM),)),
    )


def check_degrees(attrs: MultiHeadAttentionAttrs, inputs, degrees):
    h = degrees.get("heads", 1)
    if attrs.num_heads % h:
        valid = [d for d in range(1, attrs.num_heads + 1) if attrs.num_heads % d == 0]
        raise ShapeError(f"heads degree {h} does not divide num_heads {attrs.num_heads} (a piece would hold part "
                         f"of a head); valid heads degrees: {', '.join(map(str, valid))}")


def piece_call(attrs: MultiHeadAttentionAttrs, coords, degrees):
    """A causal piece cut along the queries learns its first query's position (as the piece index
    times the piece's length, ``query_offset`` holds the index and the kernel multiplies)."""
    if attrs.causal and coords.get("seq", 0):
        attrs = dataclasses.replace(attrs, query_offset=coords["seq"])
    if attrs.bias and coords.get("heads", 0):
        return attrs, frozenset({10})  # this group's partial sum must not add bo again
    return attrs, frozenset()


def _sizes(ins):
    q, k, v, wq, wk, wv, wo = ins[:7]
    n, lq, lk = q.dims[0], q.dims[1], k.dims[1]
    return n, lq, lk, wq.dims[1], wo.dims[1]  # width: projected channels of this piece (E / heads degree)


def flops(attrs: MultiHeadAttentionAttrs, ins, outs):
    """Projections + QK^T + AV + output projection (multiply-adds counted as 2)."""
    n, lq, lk, width, e_out = _sizes(ins)
    q, k, v = ins[:3]
    proj = 2 * width * (n * lq * q.dims[2] + n * lk * k.dims[2] + n * lk * v.dims[2])
    return proj + 2 * 2 * n * lq * lk * width + 2 * n * lq * width * e_out


def backward_flops(attrs, ins, outs):
    return 2 * flops(attrs, ins, outs)


def extra_memory_bytes(attrs: MultiHeadAttentionAttrs, ins, outs):
    """Projected q, k, v, the context and the attention weights, kept for the backward pass."""
    n, lq, lk, width, _ = _sizes(ins)
    heads = width // attrs.head_dim
    return (2 * n * lq * width + 2 * n * lk * width + n * heads * lq * lk) * ins[0].dtype.size_bytes


# Passes over the [n, heads, Lq, Lk] scores of an attention that materializes them (cuDNN's, or
# Megatron-LM's before FlashAttention: QK^T, a fused scale-mask-softmax, dropout, AV as kernels of their
# own). Forward: QK^T writes them, the softmax reads and writes them, AV reads them. Backward: AV's
# backward reads the probabilities and writes their gradient, the softmax's reads both and writes the
# scores' gradient, which QK^T's backward reads twice (for dQ and for dK). Dropout adds a read and a
# write each way, and its mask (one byte an element: written, then read back).
_SCORE_PASSES = {"forward": 4, "backward": 7}
_DROPOUT_PASSES = 2


def intermediate_bytes(attrs: MultiHeadAttentionAttrs, ins, outs):
    """(forward, backward) bytes the scores move through device memory where an implementation
    materializes them; a fused kernel (FlashAttention) keeps them on chip."""
    n, lq, lk, width, _ = _sizes(ins)
    elements = n * (width // attrs.head_dim) * lq * lk
    size = ins[0].dtype.size_bytes
    extra = (_DROPOUT_PASSES * size + 1) * elements if attrs.dropout > 0 else 0
    return (_SCORE_PASSES["forward"] * size * elements + extra, _SCORE_PASSES["backward"] * size * elements + extra)


register_op(OpDef(OpType.MULTIHEAD_ATTENTION, MultiHeadAttentionAttrs, output_shapes=output_shapes, flops=flops,
                  num_inputs=3, weight_shapes=weight_shapes, weight_names=weight_names,
                  parallel_axes=parallel_axes, backward_flops=backward_flops,
                  extra_memory_bytes=extra_memory_bytes, intermediate_bytes=intermediate_bytes,
                  piece_call=piece_call, piece_call_axes=("heads", "seq"),
                  check_degrees=check_degrees))
