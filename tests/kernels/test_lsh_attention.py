"""LSH self-attention (Reformer §2): the kernels against a slow, loop-by-loop reference written here,
finite differences, full shared-QK attention in the one-bucket limit, and the parallelization rules
checked by brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flexrt.errors import ShapeError
from flexrt.ir import TensorShape
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import LSHSelfAttentionAttrs
from flexrt.ir.registry import op_def
from flexrt.ir.serialize import attrs_from_json, attrs_to_json
from flexrt.kernels.gradcheck import check_gradients
from flexrt.kernels.registry import run_forward
from flexrt.kernels.validation import check_all_partitionings, partitionings


def _operands(rng, n, length, e):
    x = rng.standard_normal((n, length, e))
    return [x] + [rng.standard_normal((e, e)) / math.sqrt(e) for _ in range(3)]


def _buckets(attrs, qh):
    """bucket(i) = argmax([q_i R; -q_i R]) for every round; [n_hashes, L]."""
    if attrs.n_buckets == 1:
        return np.zeros((attrs.n_hashes, qh.shape[0]), dtype=int)
    rot = np.random.default_rng(attrs.seed).standard_normal((attrs.n_hashes, attrs.head_dim, attrs.n_buckets // 2))
    out = []
    for r in range(attrs.n_hashes):
        proj = qh @ rot[r]
        out.append(np.argmax(np.concatenate([proj, -proj], axis=1), axis=1))
    return np.array(out)


def _one_round(attrs, qh, vh, bucket):
    """(o [L, D], lse [L]) of one hash round, position by position."""
    length, d = qh.shape
    c = min(attrs.chunk_size, length)
    order = sorted(range(length), key=lambda i: (bucket[i], i))
    chunk = {pos: rank // c for rank, pos in enumerate(order)}
    keys = qh / np.sqrt((qh * qh).sum(axis=1, keepdims=True) + 1e-6)
    o, lse = np.zeros((length, d)), np.zeros(length)
    for i in range(length):
        seen = [j for j in range(length) if chunk[j] in (chunk[i], chunk[i] - 1)]
        if attrs.causal:
            seen = [j for j in seen if j <= i]
        others = [j for j in seen if j != i]
        # self only when nothing else is visible, with the constant score -1e5, so that a round
        # where a position sees only itself weighs nothing beside a round where it sees others
        s = np.array([qh[i] @ keys[j] / math.sqrt(d) for j in others]) if others else np.array([-1e5])
        others = others or [i]
        top = s.max()
        lse[i] = top + math.log(np.exp(s - top).sum())
        p = np.exp(s - lse[i])
        o[i] = sum(pj * vh[j] for pj, j in zip(p, others))
    return o, lse


def reference(attrs, x, wqk, wv, wo):
    """The slow reference: per sample, head and round, then the paper's log-sum-exp combination."""
    n, length, e = x.shape
    d, heads = attrs.head_dim, attrs.num_heads
    ctx = np.zeros((n, length, e))
    for b in range(n):
        q, v = x[b] @ wqk, x[b] @ wv
        for h in range(heads):
            qh, vh = q[:, h * d:(h + 1) * d], v[:, h * d:(h + 1) * d]
            rounds = [_one_round(attrs, qh, vh, bk) for bk in _buckets(attrs, qh)]
            lse = np.array([r[1] for r in rounds])
            w = np.exp(lse - lse.max(axis=0))
            w /= w.sum(axis=0)
            ctx[b, :, h * d:(h + 1) * d] = sum(w[r][:, None] * rounds[r][0] for r in range(len(rounds)))
    return ctx @ wo


CASES = [
    ("two_hashes_chunk4", LSHSelfAttentionAttrs(8, 2, 4, 2, 4, seed=3), (2, 12)),
    ("uneven_last_chunk", LSHSelfAttentionAttrs(8, 2, 6, 3, 5, seed=1), (2, 11)),
    ("causal", LSHSelfAttentionAttrs(8, 2, 4, 2, 3, causal=True, seed=7), (2, 10)),
    ("one_head_one_hash", LSHSelfAttentionAttrs(6, 1, 2, 1, 2), (1, 7)),
    ("chunk_longer_than_sequence", LSHSelfAttentionAttrs(8, 4, 8, 2, 64), (2, 6)),
]


@pytest.mark.parametrize("attrs, sizes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lsh_attention_forward_matches_slow_reference(attrs, sizes):
    ops = _operands(np.random.default_rng(0), *sizes, attrs.embed_dim)
    (got,) = run_forward(np, attrs, ops)
    np.testing.assert_allclose(got, reference(attrs, *ops), rtol=1e-12, atol=1e-12)


def test_lsh_attention_uses_several_buckets_in_the_cases():
    """The reference cases really hash: some sample and head spreads over more than one bucket."""
    attrs, (n, length) = CASES[0][1], CASES[0][2]
    x, wqk, _, _ = _operands(np.random.default_rng(0), n, length, attrs.embed_dim)
    b = _buckets(attrs, (x[0] @ wqk)[:, :attrs.head_dim])
    assert len(np.unique(b[0])) > 1 and not np.array_equal(b[0], b[1])


@pytest.mark.parametrize("attrs, sizes", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_lsh_attention_gradients_match_finite_differences(attrs, sizes):
    rng = np.random.default_rng(5)
    ops = _operands(rng, *sizes, attrs.embed_dim)
    assert check_gradients(attrs, ops, rng, max_elements=24) >= 4 * 6


@pytest.mark.parametrize("causal", [False, True])
def test_lsh_attention_one_bucket_one_chunk_is_full_shared_qk_attention(causal):
    """n_buckets 1 and a chunk covering the sequence: every position sees every other (self masked
    unless alone), i.e. full shared-QK attention with normalized keys; any number of rounds agree."""
    n, length, e, heads = 2, 9, 8, 2
    x, wqk, wv, wo = _operands(np.random.default_rng(2), n, length, e)
    d = e // heads
    q = (x @ wqk).reshape(n, length, heads, d).transpose(0, 2, 1, 3)
    v = (x @ wv).reshape(n, length, heads, d).transpose(0, 2, 1, 3)
    k = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    s[..., np.arange(length), np.arange(length)] = -np.inf
    if causal:
        s = np.where(np.triu(np.ones((length, length), bool), 1), -np.inf, s)
        s[..., 0, 0] = 0.0                      # position 0 sees only itself
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = (p @ v).transpose(0, 2, 1, 3).reshape(n, length, e) @ wo
    for hashes in (1, 3):
        attrs = LSHSelfAttentionAttrs(e, heads, 1, hashes, length, causal=causal)
        (got,) = run_forward(np, attrs, [x, wqk, wv, wo])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_lsh_attention_partitionings_match_unpartitioned():
    rng = np.random.default_rng(9)
    attrs = LSHSelfAttentionAttrs(8, 4, 4, 2, 3, seed=2)
    x, *ws = _operands(rng, 4, 7, 8)
    assert check_all_partitionings(np, attrs, [x], ws, rng, rtol=1e-10, atol=1e-12) >= 4


def test_lsh_attention_axes_are_sample_and_heads_never_splitting_a_head():
    attrs = LSHSelfAttentionAttrs(8, 2, 4, 1, 4)
    shapes = [TensorShape((4, 6, 8))]
    assert [a.name for a in op_def(OpType.LSH_SELF_ATTENTION).parallel_axes(attrs, shapes)] == ["sample", "heads"]
    assert {deg.get("heads", 1) for deg, _ in partitionings(attrs, shapes, totals=(2, 4))} == {1, 2}


def test_lsh_attention_shapes_weights_and_flops():
    attrs = LSHSelfAttentionAttrs(16, 4, 8, 2, 4)
    x = TensorShape((2, 12, 16))
    opdef = op_def(OpType.LSH_SELF_ATTENTION)
    assert opdef.output_shapes(attrs, [x]) == (x,)
    assert [w.dims for w in opdef.weight_shapes(attrs, [x])] == [(16, 16)] * 3
    assert opdef.weight_names(attrs) == ("wqk", "wv", "wo")
    ws = list(opdef.weight_shapes(attrs, [x]))
    # projections 3 x 2*N*L*E*E, hashing 2*N*L*E*(buckets/2)*hashes, attention 4*N*L*(2*chunk)*E*hashes
    want = 3 * 2 * 2 * 12 * 16 * 16 + 2 * 2 * 12 * 16 * 4 * 2 + 4 * 2 * 12 * 8 * 16 * 2
    assert opdef.flops(attrs, [x] + ws, [x]) == want
    half = [TensorShape((16, 8)), TensorShape((16, 8)), TensorShape((8, 16))]
    assert 2 * opdef.flops(attrs, [x] + half, [x]) == want     # two head groups add up


def test_lsh_attention_serialization_round_trip():
    attrs = LSHSelfAttentionAttrs(16, 4, 8, 2, 4, causal=True, seed=11)
    again = attrs_from_json(OpType.LSH_SELF_ATTENTION.value, attrs_to_json(attrs))
    assert again == attrs and again.seed == 11 and again.causal is True


@pytest.mark.parametrize("kwargs, match", [
    (dict(embed_dim=8, num_heads=3, n_buckets=4, n_hashes=1, chunk_size=2), "does not divide embed_dim"),
    (dict(embed_dim=8, num_heads=2, n_buckets=3, n_hashes=1, chunk_size=2), "1 or even"),
    (dict(embed_dim=8, num_heads=2, n_buckets=4, n_hashes=0, chunk_size=2), "n_hashes must be"),
    (dict(embed_dim=8, num_heads=2, n_buckets=4, n_hashes=1, chunk_size=2, seed=-1), "seed must be"),
])
def test_lsh_attention_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ShapeError, match=match):
        LSHSelfAttentionAttrs(**kwargs)


def test_lsh_attention_rejects_wrong_input_and_heads_degree():
    opdef = op_def(OpType.LSH_SELF_ATTENTION)
    attrs = LSHSelfAttentionAttrs(8, 2, 4, 1, 4)
    with pytest.raises(ShapeError, match="has 6 features but embed_dim is 8"):
        opdef.output_shapes(attrs, [TensorShape((2, 4, 6))])
    with pytest.raises(ShapeError, match="valid heads degrees: 1, 2"):
        opdef.check_degrees(attrs, [TensorShape((2, 4, 8))], {"heads": 4})


def test_ffmodel_lsh_self_attention_layer_and_argument_checks():
    from flexrt.core import DataType, FFConfig, FFModel
    from flexrt.errors import ConfigError
    m = FFModel(FFConfig([]))
    x = m.create_tensor([2, 16, 8], DataType.DT_DOUBLE)
    y = m.lsh_self_attention(x, 8, 2, 4, 2, 4, causal=True, seed=5, name="lsh")
    assert y.dims == (2, 16, 8)
    node = next(n for n in m.pcg.nodes if n.op_type is OpType.LSH_SELF_ATTENTION)
    assert node.attrs == LSHSelfAttentionAttrs(8, 2, 4, 2, 4, causal=True, seed=5)
    assert m.num_parameters() == 3 * 8 * 8
    with pytest.raises(ConfigError, match="n_hashes must be an integer >= 1"):
        m.lsh_self_attention(x, 8, 2, 4, 0, 4)
    with pytest.raises(ConfigError, match="causal must be True or False"):
        m.lsh_self_attention(x, 8, 2, 4, 1, 4, causal=1)
    with pytest.raises(ShapeError, match="embed_dim is 16"):
        m.lsh_self_attention(x, 16, 2, 4, 1, 4)
