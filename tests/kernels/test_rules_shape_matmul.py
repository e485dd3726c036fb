"""Parallelization rules and kernels of the shape, matmul, attention, reduce, cast, gather and LSTM
operators, checked against brute force and against independent computations."""

import itertools
import math

import numpy as np
import pytest

from flexrt.errors import ShapeError
from flexrt.ir import DataType, OpType, ParallelTensorShape as P
from flexrt.ir.ops import (BatchMatmulAttrs, CastAttrs, ConcatAttrs, FlatAttrs, GatherAttrs, LSTMAttrs,
                           MultiHeadAttentionAttrs, ReduceAttrs, ReshapeAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.registry import op_def
from flexrt.kernels.pieces import run_pieces, scatter
from flexrt.kernels.registry import run_forward
from flexrt.kernels.validation import check_all_partitionings, check_rejected

TOL = dict(rtol=1e-6, atol=1e-9)
I64 = DataType.DT_INT64


def _r(rng, *shape):
    return rng.standard_normal(shape)


def _mha_weights(rng, e, kdim, vdim, bias):
    ws = [_r(rng, e, e), _r(rng, kdim, e), _r(rng, vdim, e), _r(rng, e, e)]
    return ws + ([_r(rng, e) for _ in range(4)] if bias else [])


# (id, attrs, data shapes (or arrays via a callable), weights callable, minimum number of partitionings)
CASES = [
    ("concat_axis1", ConcatAttrs(1), lambda g: [_r(g, 4, 2, 4), _r(g, 4, 6, 4)], 4),
    ("concat_last_three", ConcatAttrs(-1), lambda g: [_r(g, 4, 2, 4), _r(g, 4, 2, 2), _r(g, 4, 2, 6)], 4),
    ("concat_int", ConcatAttrs(0), lambda g: [g.integers(-5, 5, (2, 4)), g.integers(-5, 5, (6, 4))], 3),
    ("split_axis1", SplitAttrs((1, 3), 1), lambda g: [_r(g, 4, 4, 2)], 4),
    ("split_axis0_three", SplitAttrs((2, 1, 1), 0), lambda g: [_r(g, 4, 4)], 3),
    ("reshape_keep2_infer", ReshapeAttrs((4, 2, -1)), lambda g: [_r(g, 4, 2, 6)], 5),
    ("reshape_keep1", ReshapeAttrs((4, 3, 4)), lambda g: [_r(g, 4, 2, 6)], 3),
    ("reshape_infer_first", ReshapeAttrs((-1, 12)), lambda g: [_r(g, 4, 2, 6)], 3),
    ("reshape_keep_none", ReshapeAttrs((2, 2, 12)), lambda g: [_r(g, 4, 2, 6)], 2),
    ("transpose_201", TransposeAttrs((2, 0, 1)), lambda g: [_r(g, 4, 2, 6)], 5),
    ("transpose_2d", TransposeAttrs((1, 0)), lambda g: [_r(g, 4, 6)], 4),
    ("flat_4d", FlatAttrs(), lambda g: [_r(g, 4, 4, 3, 2)], 4),
    ("flat_2d", FlatAttrs(), lambda g: [_r(g, 4, 6)], 4),
    ("bmm_3d", BatchMatmulAttrs(), lambda g: [_r(g, 2, 4, 4), _r(g, 2, 4, 6)], 6),
    ("bmm_4d", BatchMatmulAttrs(), lambda g: [_r(g, 2, 2, 4, 2), _r(g, 2, 2, 2, 4)], 7),
    ("reduce_sum_mid", ReduceAttrs(OpType.REDUCE_SUM, (1,)), lambda g: [_r(g, 4, 4, 2)], 5),
    ("reduce_sum_all", ReduceAttrs(OpType.REDUCE_SUM, (0, 1, 2)), lambda g: [_r(g, 4, 4, 2)], 5),
    ("reduce_sum_keep", ReduceAttrs(OpType.REDUCE_SUM, (-1, 0), True), lambda g: [_r(g, 4, 4, 2)], 5),
    ("reduce_sum_int", ReduceAttrs(OpType.REDUCE_SUM, (1,)), lambda g: [g.integers(-9, 9, (4, 4)).astype(np.int32)], 4),
    ("mean_last_keep", ReduceAttrs(OpType.MEAN, (-1,), True), lambda g: [_r(g, 4, 4, 2)], 4),
    ("mean_first", ReduceAttrs(OpType.MEAN, (0,)), lambda g: [_r(g, 4, 4, 2)], 4),
    ("cast_f64_f32", CastAttrs(DataType.DT_FLOAT), lambda g: [_r(g, 4, 4)], 4),
    ("cast_f64_i32", CastAttrs(DataType.DT_INT32), lambda g: [_r(g, 4, 4) * 10], 3),
    ("cast_i64_f64", CastAttrs(DataType.DT_DOUBLE), lambda g: [g.integers(-9, 9, (4, 4))], 3),
    ("gather_dim1", GatherAttrs(1), lambda g: [_r(g, 4, 6), g.integers(0, 6, (4, 4))], 3),
    ("gather_dim0", GatherAttrs(0), lambda g: [_r(g, 6, 4), g.integers(0, 6, (4, 4))], 3),
    ("gather_smaller_index", GatherAttrs(-1), lambda g: [_r(g, 4, 4, 6), g.integers(-6, 6, (2, 4, 4))], 2),
]


@pytest.mark.parametrize("attrs, make, minimum", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_shape_op_partitionings_match_unpartitioned(attrs, make, minimum):
    rng = np.random.default_rng(11)
    # a cast to float32 rounds each partial sum on its own
    tol = dict(rtol=1e-5, atol=1e-6) if attrs.op_type is OpType.CAST else TOL
    n = check_all_partitionings(np, attrs, make(rng), [], rng, **tol)
    assert n >= minimum > 0


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dims", [(8, 4, 8, 8), (8, 4, 6, 4), (12, 4, 12, 12)])
def test_multihead_attention_partitionings(bias, dims):
    rng = np.random.default_rng(12)
    e, heads, kdim, vdim = dims
    attrs = MultiHeadAttentionAttrs(e, heads, kdim, vdim, bias=bias)
    data = [_r(rng, 2, 4, e), _r(rng, 2, 6, kdim), _r(rng, 2, 6, vdim)]
    n = check_all_partitionings(np, attrs, data, _mha_weights(rng, e, kdim, vdim, bias), rng, **TOL)
    assert n >= 6  # sample, seq and heads, at 2 and 4 and mixed


def test_lstm_partitionings():
    rng = np.random.default_rng(13)
    data = [_r(rng, 4, 3), _r(rng, 4, 5), _r(rng, 4, 5)]
    ws = [_r(rng, 3, 20), _r(rng, 5, 20), _r(rng, 20)]
    assert check_all_partitionings(np, LSTMAttrs(5), data, ws, rng, **TOL) == 5  # s2 s4 c2 c4 s2c2


def test_reduce_sum_over_reduced_dim_gives_partial_sums():
    rng = np.random.default_rng(14)
    x = _r(rng, 4, 6)
    attrs = ReduceAttrs(OpType.REDUCE_SUM, (1,))
    (out,) = run_pieces(np, attrs, [scatter(np, x, P.of((4, 6), (1, 3)))])
    assert out.shape == P.of((4,), sum_degree=3)
    assert np.allclose(sum(out.pieces.values()), x.sum(axis=1))


# ---- rejected partitionings -------------------------------------------------------------------

def test_concat_along_its_axis_rejected():
    e = check_rejected(ConcatAttrs(1), [P.of((4, 2, 4), (1, 2, 1)), P.of((4, 6, 4), (1, 2, 1))])
    assert "dim 1" in str(e) and "cannot parallelize" in str(e)


def test_concat_inputs_must_agree():
    e = check_rejected(ConcatAttrs(1), [P.of((4, 2), (2, 1)), P.of((4, 6))])
    assert "degree 1 on dim 0" in str(e)
    check_rejected(ConcatAttrs(1), [P.of((4, 2), sum_degree=2), P.of((4, 6))])


def test_split_along_its_axis_rejected():
    e = check_rejected(SplitAttrs((2, 2), 1), [P.of((4, 4), (1, 2))])
    assert "dim 1" in str(e)


def test_lstm_partial_sums_rejected():
    w = [P.of((6, 16)), P.of((4, 16)), P.of((16,))]
    e = check_rejected(LSTMAttrs(4), [P.of((2, 6), sum_degree=2), P.of((2, 4)), P.of((2, 4))] + w)
    assert "partial sums" in str(e)
    check_rejected(LSTMAttrs(4), [P.of((2, 6), (1, 2)), P.of((2, 4)), P.of((2, 4))] + w)  # no model parallelism


def test_mean_over_cut_reduced_dim_rejected():
    e = check_rejected(ReduceAttrs(OpType.MEAN, (1,)), [P.of((4, 6), (1, 2))])
    assert "dim 1" in str(e)


@pytest.mark.parametrize("attrs, pshape", [
    (ReshapeAttrs((4, 12)), P.of((4, 2, 6), (1, 2, 1))),     # dimension 1 is merged away
    (ReshapeAttrs((8, 6)), P.of((4, 2, 6), (2, 1, 1))),      # the first dimension changes size
    (FlatAttrs(), P.of((4, 2, 6), (1, 1, 2))),               # pieces of dimension 2 interleave
])
def test_shape_op_rejects_cut_it_cannot_follow(attrs, pshape):
    e = check_rejected(attrs, [pshape])
    assert "cannot parallelize" in str(e)


def test_transpose_accepts_every_single_dimension_cut():
    rng = np.random.default_rng(15)
    x = _r(rng, 4, 2, 6)
    for d in range(3):
        deg = [1, 1, 1]
        deg[d] = 2
        (out,) = run_pieces(np, TransposeAttrs((2, 0, 1)), [scatter(np, x, P.of(x.shape, deg))])
        assert out.shape.shard_degrees[(2, 0, 1).index(d)] == 2


def test_cast_to_int_rejects_partial_sums():
    e = check_rejected(CastAttrs(DataType.DT_INT32), [P.of((4, 4), sum_degree=2)])
    assert "partial sums" in str(e)


def test_gather_rejects_cut_along_dim_of_input_and_partial_index():
    check_rejected(GatherAttrs(1), [P.of((4, 6), (1, 2)), P.of((4, 4), (1, 2), dtype=I64)])
    check_rejected(GatherAttrs(1), [P.of((4, 6)), P.of((4, 4), sum_degree=2, dtype=I64)])
    check_rejected(GatherAttrs(1), [P.of((4, 6), sum_degree=2), P.of((4, 4), dtype=I64)])
    # index smaller than the input along dimension 0: that dimension cannot be cut
    check_rejected(GatherAttrs(1), [P.of((4, 6), (2, 1)), P.of((2, 4), (2, 1), dtype=I64)])


def test_batch_matmul_rejects_plain_replicas():
    e = check_rejected(BatchMatmulAttrs(), [P.of((2, 4, 4), discard_copy_degree=2),
                                            P.of((2, 4, 6), discard_copy_degree=2)])
    assert "copy" in str(e)


def test_multihead_attention_rejects_cut_key_length_and_partial_sums():
    attrs = MultiHeadAttentionAttrs(8, 2, bias=False)
    w = [P.of((8, 8))] * 4
    check_rejected(attrs, [P.of((2, 4, 8)), P.of((2, 6, 8), (1, 2, 1)), P.of((2, 6, 8), (1, 2, 1))] + w)
    e = check_rejected(attrs, [P.of((2, 4, 8), sum_degree=2), P.of((2, 6, 8)), P.of((2, 6, 8))] + w)
    assert "partial sums" in str(e)


def test_multihead_attention_heads_degree_must_divide_num_heads():
    rng = np.random.default_rng(16)
    attrs = MultiHeadAttentionAttrs(8, 2, bias=False)
    data = [scatter(np, _r(rng, 2, 4, 8), P.of((2, 4, 8), discard_copy_degree=4)),
            scatter(np, _r(rng, 2, 6, 8), P.of((2, 6, 8), discard_copy_degree=4)),
            scatter(np, _r(rng, 2, 6, 8), P.of((2, 6, 8), discard_copy_degree=4))]
    ws = [scatter(np, _r(rng, 8, 8), P.of((8, 8), (1, 4))) for _ in range(3)]
    ws.append(scatter(np, _r(rng, 8, 8), P.of((8, 8), (4, 1))))
    with pytest.raises(ShapeError, match="heads degree 4 does not divide num_heads 2"):
        run_pieces(np, attrs, data + ws)


# ---- kernels against independent computations -------------------------------------------------

def _mha_reference(attrs, query, key, value, ws):
    """Head by head, row by row, summing each head's share of the output projection."""
    e, d = attrs.embed_dim, attrs.head_dim
    wq, wk, wv, wo = ws[:4]
    bq, bk, bv, bo = ws[4:] if attrs.bias else (np.zeros(e),) * 4
    n, lq, lk = query.shape[0], query.shape[1], key.shape[1]
    out = np.tile(bo, (n, lq, 1)).astype(float)
    for b, h in itertools.product(range(n), range(attrs.num_heads)):
        cols = slice(h * d, (h + 1) * d)
        q = query[b] @ wq[:, cols] + bq[cols]
        k = key[b] @ wk[:, cols] + bk[cols]
        v = value[b] @ wv[:, cols] + bv[cols]
        for i in range(lq):
            s = [float(q[i] @ k[j]) / math.sqrt(d) for j in range(lk)]
            m = max(s)
            p = [math.exp(x - m) for x in s]
            ctx = sum(p[j] / sum(p) * v[j] for j in range(lk))
            out[b, i] += ctx @ wo[cols, :]
    return out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dims", [(8, 2, 8, 8), (6, 3, 5, 4), (4, 1, 4, 4)])
def test_multihead_attention_matches_per_head_loop(bias, dims):
    rng = np.random.default_rng(17)
    e, heads, kdim, vdim = dims
    attrs = MultiHeadAttentionAttrs(e, heads, kdim, vdim, bias=bias)
    q, k, v = _r(rng, 2, 3, e), _r(rng, 2, 5, kdim), _r(rng, 2, 5, vdim)
    ws = _mha_weights(rng, e, kdim, vdim, bias)
    (got,) = run_forward(np, attrs, [q, k, v] + ws)
    assert got.shape == (2, 3, e)
    assert np.allclose(got, _mha_reference(attrs, q, k, v, ws), rtol=1e-10, atol=1e-10)


def test_multihead_attention_softmax_is_stable_for_large_scores():
    attrs = MultiHeadAttentionAttrs(2, 1, bias=False)
    q = np.full((1, 1, 2), 1e3)
    k = np.array([[[1e3, 1e3], [-1e3, -1e3]]])
    v = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    eye = np.eye(2)
    (got,) = run_forward(np, attrs, [q, k, v, eye, eye, eye, eye])
    assert np.array_equal(got, [[[1.0, 2.0]]])  # all weight on the first key, no NaN


def _lstm_reference(x, h, c, w_ih, w_hh, bias):
    n, hidden = h.shape
    h_new, c_new = np.zeros((n, hidden)), np.zeros((n, hidden))
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    for b in range(n):
        for u in range(hidden):
            pre = []
            for gate in range(4):
                col = gate * hidden + u
                pre.append(bias[col] + sum(x[b, i] * w_ih[i, col] for i in range(x.shape[1]))
                           + sum(h[b, j] * w_hh[j, col] for j in range(hidden)))
            i_g, f_g, g_g, o_g = sig(pre[0]), sig(pre[1]), math.tanh(pre[2]), sig(pre[3])
            c_new[b, u] = f_g * c[b, u] + i_g * g_g
            h_new[b, u] = o_g * math.tanh(c_new[b, u])
    return h_new, c_new


def test_lstm_matches_scalar_loop():
    rng = np.random.default_rng(18)
    x, h, c = _r(rng, 2, 3), _r(rng, 2, 2), _r(rng, 2, 2)
    ws = [_r(rng, 3, 8), _r(rng, 2, 8), _r(rng, 8)]
    got_h, got_c = run_forward(np, LSTMAttrs(2), [x, h, c] + ws)
    ref_h, ref_c = _lstm_reference(x, h, c, *ws)
    assert np.allclose(got_h, ref_h, rtol=1e-12, atol=1e-12)
    assert np.allclose(got_c, ref_c, rtol=1e-12, atol=1e-12)


def test_gather_matches_torch_semantics_loop():
    rng = np.random.default_rng(19)
    x = _r(rng, 4, 5, 6)
    for dim in range(3):
        index_shape = [3, 4, 5]
        index_shape[dim] = 7
        index = rng.integers(0, x.shape[dim], index_shape)
        (got,) = run_forward(np, GatherAttrs(dim), [x, index])
        ref = np.empty(index_shape)
        for pos in itertools.product(*map(range, index_shape)):
            src = list(pos)
            src[dim] = index[pos]
            ref[pos] = x[tuple(src)]
        assert np.array_equal(got, ref)


def test_reduce_and_cast_kernels_keep_declared_dtypes():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (s,) = run_forward(np, ReduceAttrs(OpType.REDUCE_SUM, (1,)), [x])
    assert s.dtype == np.int32 and s.tolist() == [6, 22, 38]
    (m,) = run_forward(np, ReduceAttrs(OpType.MEAN, (0, 1)), [x.astype(np.float32)])
    assert m.dtype == np.float32 and m.shape == () and float(m) == 5.5
    (c,) = run_forward(np, CastAttrs(DataType.DT_HALF), [x])
    assert c.dtype == np.float16 and c.tolist() == x.tolist()


def test_split_and_reshape_kernels_return_fresh_arrays():
    x = np.arange(24.0).reshape(4, 6)
    outs = run_forward(np, SplitAttrs((1, 5), 1), [x]) + run_forward(np, ReshapeAttrs((2, -1)), [x])
    for o in outs:
        assert not np.shares_memory(o, x)
    assert outs[0].ravel().tolist() == [0.0, 6.0, 12.0, 18.0]
    assert outs[2].shape == (2, 12)


# ---- against PyTorch, where it is installed ---------------------------------------------------

def test_multihead_attention_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed; the per-head loop test covers MHA")
    torch.manual_seed(0)
    e, heads, kdim, vdim = 8, 2, 6, 4
    mha = torch.nn.MultiheadAttention(e, heads, kdim=kdim, vdim=vdim, batch_first=True, dtype=torch.float64)
    q, k, v = torch.randn(2, 3, e, dtype=torch.float64), torch.randn(2, 5, kdim, dtype=torch.float64), \
        torch.randn(2, 5, vdim, dtype=torch.float64)
    with torch.no_grad():
        expected = mha(q, k, v, need_weights=False)[0].numpy()
        b = mha.in_proj_bias.numpy()
        ws = [mha.q_proj_weight.numpy().T, mha.k_proj_weight.numpy().T, mha.v_proj_weight.numpy().T,
              mha.out_proj.weight.numpy().T, b[:e], b[e:2 * e], b[2 * e:], mha.out_proj.bias.numpy()]
    (got,) = run_forward(np, MultiHeadAttentionAttrs(e, heads, kdim, vdim), [q.numpy(), k.numpy(), v.numpy()] + ws)
    assert np.allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_lstm_matches_torch_lstm_cell():
    torch = pytest.importorskip("torch", reason="torch is not installed; the scalar-loop test covers the LSTM cell")
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(3, 4, dtype=torch.float64)
    x, h, c = (torch.randn(2, n, dtype=torch.float64) for n in (3, 4, 4))
    with torch.no_grad():
        eh, ec = cell(x, (h, c))
        ws = [cell.weight_ih.numpy().T, cell.weight_hh.numpy().T, (cell.bias_ih + cell.bias_hh).numpy()]
    got_h, got_c = run_forward(np, LSTMAttrs(4), [x.numpy(), h.numpy(), c.numpy()] + ws)
    assert np.allclose(got_h, eh.numpy()) and np.allclose(got_c, ec.numpy())


def test_gather_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed; the loop test covers gather")
    rng = np.random.default_rng(20)
    x, index = _r(rng, 4, 6), rng.integers(0, 6, (3, 5))
    (got,) = run_forward(np, GatherAttrs(1), [x, index])
    assert np.array_equal(got, torch.gather(torch.from_numpy(x), 1, torch.from_numpy(index)).numpy())


def test_every_op_here_has_rules_and_kernel():
    from flexrt.kernels.registry import forward_kernel
    for t in (OpType.CONCAT, OpType.SPLIT, OpType.RESHAPE, OpType.TRANSPOSE, OpType.FLAT, OpType.CAST,
              OpType.GATHER, OpType.BATCH_MATMUL, OpType.MULTIHEAD_ATTENTION, OpType.REDUCE_SUM, OpType.MEAN,
              OpType.LSTM):
        assert op_def(t).op_type is t and callable(forward_kernel(t))


def test_multihead_attention_partitionings_never_split_a_head():
    from flexrt.ir import TensorShape
    from flexrt.kernels.validation import partitionings
    attrs = MultiHeadAttentionAttrs(8, 2, bias=False)
    shapes = [TensorShape((2, 4, 8)), TensorShape((2, 6, 8)), TensorShape((2, 6, 8))]
    heads = {deg["heads"] for deg, _ in partitionings(attrs, shapes, totals=(2, 4))}
    assert heads == {1, 2}


def test_gather_refuses_an_index_out_of_range_with_the_valid_range():
    from flexrt.kernels.ops.shape_ops import gather_forward
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert gather_forward(np, GatherAttrs(1), (x, np.full((4, 1), -1)))[0][0, 0] == 5.0   # from the end
    for bad in (6, -7):
        with pytest.raises(ShapeError, match=rf"gather: index {bad} is out of range for dimension 1 of size 6; "
                                             r"valid indices: -6\.\.5"):
            gather_forward(np, GatherAttrs(1), (x, np.full((4, 1), bad)))
