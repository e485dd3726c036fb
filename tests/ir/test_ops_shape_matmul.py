"""Shape inference, weight shapes, FLOPs and input checks of the shape, matmul, attention, reduce,
cast, gather and LSTM operators."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ShapeError
from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir.ops import (BatchMatmulAttrs, CastAttrs, ConcatAttrs, FlatAttrs, GatherAttrs, LSTMAttrs,
                           MultiHeadAttentionAttrs, ReduceAttrs, ReshapeAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.parallel_axes import validate_axes
from flexrt.ir.registry import op_def

F, I64 = DataType.DT_FLOAT, DataType.DT_INT64
dims_st = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def T(*dims, dtype=F):
    return TensorShape(tuple(dims), dtype)


def out_dims(attrs, *inputs):
    """Output dims as tuples; also checks the axis list is well formed for these shapes."""
    opdef = op_def(attrs.op_type)
    validate_axes(opdef, attrs, list(inputs))
    return [o.dims for o in opdef.output_shapes(attrs, list(inputs))]


# ---- shape inference against NumPy ------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.data())
def test_transpose_shape_matches_numpy(data):
    shape = data.draw(dims_st)
    perm = data.draw(st.permutations(range(len(shape))))
    assert out_dims(TransposeAttrs(perm), T(*shape)) == [np.empty(shape).transpose(perm).shape]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_reshape_shape_matches_numpy(data):
    shape = data.draw(dims_st)
    # target: the input's prime factors regrouped in a random order, maybe one entry replaced by -1
    factors = [p for d in shape for p in _prime_factors(d)]
    factors = data.draw(st.permutations(factors)) if factors else []
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(factors) - 1, 1)), max_size=3)))
    target = [math.prod(factors[a:b]) for a, b in zip([0] + cuts, cuts + [len(factors)]) if a < b] or [1]
    if data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    assert out_dims(ReshapeAttrs(target), T(*shape)) == [np.empty(shape).reshape(target).shape]


def _prime_factors(n):
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_concat_shape_matches_numpy(data):
    shape = data.draw(dims_st)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    arrays = []
    for s in sizes:
        d = list(shape)
        d[axis] = s
        arrays.append(np.empty(d))
    got = out_dims(ConcatAttrs(axis), *(T(*a.shape) for a in arrays))
    assert got == [np.concatenate(arrays, axis=axis).shape]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_split_shapes_match_numpy(data):
    shape = data.draw(dims_st)
    axis = data.draw(st.integers(0, len(shape) - 1))
    cuts = sorted(data.draw(st.sets(st.integers(1, shape[axis] - 1), max_size=3))) if shape[axis] > 1 else []
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [shape[axis]])]
    expected = [p.shape for p in np.split(np.empty(shape), cuts, axis=axis)]
    assert out_dims(SplitAttrs(sizes, axis), T(*shape)) == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=2), st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))
def test_batch_matmul_shape_matches_numpy(batch, m, k, n):
    a, b = np.zeros(batch + [m, k]), np.zeros(batch + [k, n])
    assert out_dims(BatchMatmulAttrs(), T(*a.shape), T(*b.shape)) == [np.matmul(a, b).shape]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_gather_shape_matches_numpy(data):
    shape = data.draw(dims_st)
    dim = data.draw(st.integers(0, len(shape) - 1))
    index = [data.draw(st.integers(1, 5)) if d == dim else data.draw(st.integers(1, s)) for d, s in enumerate(shape)]
    x = np.empty(shape)
    idx = np.zeros(index, dtype=np.int64)
    cut = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index))]
    got = out_dims(GatherAttrs(dim), T(*shape), T(*index, dtype=I64))
    assert got == [np.take_along_axis(cut, idx, axis=dim).shape] == [tuple(index)]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_reduce_shape_matches_numpy(data):
    shape = data.draw(dims_st)
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    keep = data.draw(st.booleans())
    op = data.draw(st.sampled_from([OpType.REDUCE_SUM, OpType.MEAN]))
    assert out_dims(ReduceAttrs(op, axes, keep), T(*shape)) == [np.sum(np.zeros(shape), axis=tuple(axes),
                                                                        keepdims=keep).shape]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=5))
def test_flat_shape_matches_numpy(shape):
    assert out_dims(FlatAttrs(), T(*shape)) == [np.empty(shape).reshape(shape[0], -1).shape]


def test_cast_changes_dtype_only():
    (out,) = op_def(OpType.CAST).output_shapes(CastAttrs(DataType.DT_HALF), [T(3, 4)])
    assert out == TensorShape((3, 4), DataType.DT_HALF)


def test_multihead_attention_output_and_weights():
    attrs = MultiHeadAttentionAttrs(8, 2, kdim=6, vdim=4)
    ins = [T(2, 3, 8), T(2, 5, 6), T(2, 5, 4)]
    opdef = op_def(OpType.MULTIHEAD_ATTENTION)
    assert out_dims(attrs, *ins) == [(2, 3, 8)]
    assert opdef.weight_names(attrs) == ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")
    assert [w.dims for w in opdef.weight_shapes(attrs, ins)] == [(8, 8), (6, 8), (4, 8), (8, 8)] + [(8,)] * 4
    no_bias = MultiHeadAttentionAttrs(8, 2, bias=False)
    assert opdef.weight_names(no_bias) == ("wq", "wk", "wv", "wo")
    assert len(opdef.weight_shapes(no_bias, [T(2, 3, 8), T(2, 5, 8), T(2, 5, 8)])) == 4


def test_multihead_attention_bert_large_param_count():
    e = 1024
    attrs = MultiHeadAttentionAttrs(e, 16)
    ins = [T(1, 128, e)] * 3
    params = sum(w.num_elements for w in op_def(OpType.MULTIHEAD_ATTENTION).weight_shapes(attrs, ins))
    assert params == 4 * e * e + 4 * e == 4_198_400


def test_multihead_attention_kdim_zero_means_embed_dim():
    assert MultiHeadAttentionAttrs(8, 2) == MultiHeadAttentionAttrs(8, 2, kdim=8, vdim=8)


def test_lstm_outputs_and_weights():
    attrs = LSTMAttrs(4)
    ins = [T(2, 3), T(2, 4), T(2, 4)]
    opdef = op_def(OpType.LSTM)
    assert out_dims(attrs, *ins) == [(2, 4), (2, 4)]
    assert [w.dims for w in opdef.weight_shapes(attrs, ins)] == [(3, 16), (4, 16), (16,)]
    assert opdef.weight_names(attrs) == ("w_ih", "w_hh", "bias")


# ---- FLOPs ------------------------------------------------------------------------------------

def _flops(attrs, ins):
    opdef = op_def(attrs.op_type)
    ws = list(opdef.weight_shapes(attrs, ins)) if opdef.weight_shapes else []
    return opdef.flops(attrs, ins + ws, opdef.output_shapes(attrs, ins))


def test_batch_matmul_flops():
    assert _flops(BatchMatmulAttrs(), [T(2, 3, 4), T(2, 4, 5)]) == 2 * (2 * 3 * 5) * 4 == 240


def test_multihead_attention_flops_hand_computed():
    # N=2, Lq=3, Lk=5, E=8: projections 2*8*(2*3*8 + 2*5*8 + 2*5*8) = 3328, QK^T and AV 2 * 2*2*3*5*8
    # = 960, output projection 2*2*3*8*8 = 768
    attrs = MultiHeadAttentionAttrs(8, 2)
    assert _flops(attrs, [T(2, 3, 8), T(2, 5, 8), T(2, 5, 8)]) == 3328 + 960 + 768


def test_multihead_attention_flops_of_head_pieces_add_up():
    attrs = MultiHeadAttentionAttrs(8, 2)
    opdef = op_def(OpType.MULTIHEAD_ATTENTION)
    data = [T(2, 3, 8), T(2, 5, 8), T(2, 5, 8)]
    full = _flops(attrs, data)
    half_w = [T(8, 4), T(8, 4), T(8, 4), T(4, 8), T(4), T(4), T(4), T(8)]  # one of 2 head groups
    assert 2 * opdef.flops(attrs, data + half_w, [T(2, 3, 8)]) == full
    assert opdef.backward_flops(attrs, data + half_w, [T(2, 3, 8)]) == full
    # saved q, k, v, context (2*2*3*4 + 2*2*5*4) and one head's weights 2*1*3*5, 4 bytes each
    assert opdef.extra_memory_bytes(attrs, data + half_w, [T(2, 3, 8)]) == (48 + 80 + 30) * 4


def test_lstm_flops_hand_computed():
    # 2*N*(in+H)*4H = 2*2*7*16 = 448, element-wise 32 per hidden unit and sample: 32*2*4 = 256
    assert _flops(LSTMAttrs(4), [T(2, 3), T(2, 4), T(2, 4)]) == 448 + 256


@pytest.mark.parametrize("op, expected", [(OpType.REDUCE_SUM, 20 - 4), (OpType.MEAN, 20 - 4 + 4)])
def test_reduce_flops(op, expected):
    assert _flops(ReduceAttrs(op, (1,)), [T(4, 5)]) == expected


@pytest.mark.parametrize("attrs, ins", [
    (ConcatAttrs(0), [T(2, 3), T(4, 3)]), (SplitAttrs((1, 2), 1), [T(2, 3)]), (ReshapeAttrs((6,)), [T(2, 3)]),
    (TransposeAttrs((1, 0)), [T(2, 3)]), (FlatAttrs(), [T(2, 3, 4)]), (GatherAttrs(0), [T(2, 3), T(2, 3, dtype=I64)]),
])
def test_data_movement_ops_have_no_flops(attrs, ins):
    assert _flops(attrs, ins) == 0


def test_cast_flops_one_per_element():
    assert _flops(CastAttrs(DataType.DT_HALF), [T(3, 4)]) == 12


# ---- bad inputs -------------------------------------------------------------------------------

def _raises(fn, *words):
    with pytest.raises(ShapeError) as e:
        fn()
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


def test_concat_rejects_mismatched_inputs():
    shapes = op_def(OpType.CONCAT).output_shapes
    _raises(lambda: shapes(ConcatAttrs(1), [T(4, 6, 2), T(4, 5, 3)]),
            "input 1 [4, 5, 3] differs from input 0 [4, 6, 2] in dimension 2 (not the concat axis 1)")
    _raises(lambda: shapes(ConcatAttrs(0), [T(4, 6), T(4, 6, 1)]), "rank 3", "rank 2")
    _raises(lambda: shapes(ConcatAttrs(0), [T(4, 6), T(4, 6, dtype=I64)]), "DT_INT64", "same dtype")
    _raises(lambda: shapes(ConcatAttrs(2), [T(4, 6)]), "axis 2", "valid: -2..1")


def test_split_rejects_sizes_not_summing():
    _raises(lambda: op_def(OpType.SPLIT).output_shapes(SplitAttrs((2, 3), 1), [T(4, 6)]),
            "sum to 5", "size 6")
    _raises(lambda: SplitAttrs((2, 0), 0), "size 1 is 0")
    _raises(lambda: SplitAttrs((), 0), "empty")


def test_reshape_rejects_bad_shapes():
    shapes = op_def(OpType.RESHAPE).output_shapes
    _raises(lambda: shapes(ReshapeAttrs((5, 5)), [T(4, 6)]), "24 elements", "25 elements")
    _raises(lambda: shapes(ReshapeAttrs((5, -1)), [T(4, 6)]), "not a multiple", "5")
    _raises(lambda: ReshapeAttrs((-1, 4, -1)), "2 entries -1", "at most one")
    _raises(lambda: ReshapeAttrs((0, 4)), "entry 0", "-1")


def test_transpose_rejects_bad_perm():
    _raises(lambda: TransposeAttrs((0, 0, 2)), "not a permutation of 0..2")
    _raises(lambda: TransposeAttrs((1, 2)), "not a permutation of 0..1")
    _raises(lambda: op_def(OpType.TRANSPOSE).output_shapes(TransposeAttrs((1, 0)), [T(2, 3, 4)]),
            "2 entries", "rank 3")


def test_flat_rejects_rank_one():
    _raises(lambda: op_def(OpType.FLAT).output_shapes(FlatAttrs(), [T(5)]), "rank 1", "2 or more")


def test_batch_matmul_rejects_bad_operands():
    shapes = op_def(OpType.BATCH_MATMUL).output_shapes
    _raises(lambda: shapes(BatchMatmulAttrs(), [T(2, 3, 4), T(3, 4, 5)]), "batch dimensions differ", "[2]", "[3]")
    _raises(lambda: shapes(BatchMatmulAttrs(), [T(3, 4), T(4, 5)]), "rank 2", "3 or more")
    _raises(lambda: shapes(BatchMatmulAttrs(), [T(2, 3, 4), T(2, 5, 6)]), "k = 4", "5 rows")


def test_multihead_attention_rejects_bad_arguments():
    shapes = op_def(OpType.MULTIHEAD_ATTENTION).output_shapes
    _raises(lambda: MultiHeadAttentionAttrs(10, 4), "num_heads 4 does not divide embed_dim 10")
    _raises(lambda: MultiHeadAttentionAttrs(8, 2, add_bias_kv=True), "add_bias_kv", "not supported")
    _raises(lambda: MultiHeadAttentionAttrs(8, 2, add_zero_attn=True), "add_zero_attn", "not supported")
    _raises(lambda: MultiHeadAttentionAttrs(8, 2, dropout=1.5), "dropout")
    _raises(lambda: shapes(MultiHeadAttentionAttrs(8, 2, kdim=6), [T(2, 3, 8), T(2, 5, 8), T(2, 5, 8)]),
            "key [2, 5, 8] has 8 features but kdim is 6")
    _raises(lambda: shapes(MultiHeadAttentionAttrs(8, 2), [T(3, 8), T(2, 5, 8), T(2, 5, 8)]), "query", "rank 2")
    _raises(lambda: shapes(MultiHeadAttentionAttrs(8, 2), [T(2, 3, 8), T(2, 5, 8), T(2, 4, 8)]),
            "different lengths")
    _raises(lambda: shapes(MultiHeadAttentionAttrs(8, 2), [T(2, 3, 8), T(1, 5, 8), T(1, 5, 8)]), "batch sizes")


def test_gather_rejects_bad_index():
    shapes = op_def(OpType.GATHER).output_shapes
    _raises(lambda: shapes(GatherAttrs(1), [T(4, 6), T(4, 2)]), "dtype DT_FLOAT", "DT_INT32, DT_INT64")
    _raises(lambda: shapes(GatherAttrs(1), [T(4, 6), T(4, dtype=I64)]), "rank 1", "rank 2")
    _raises(lambda: shapes(GatherAttrs(1), [T(4, 6), T(5, 2, dtype=I64)]), "dimension 0 (5 > 4)")
    _raises(lambda: shapes(GatherAttrs(2), [T(4, 6), T(4, 2, dtype=I64)]), "dim 2", "valid: -2..1")


def test_reduce_rejects_bad_axes():
    shapes = op_def(OpType.REDUCE_SUM).output_shapes
    _raises(lambda: shapes(ReduceAttrs(OpType.REDUCE_SUM, (1, -1)), [T(4, 6)]), "twice")
    _raises(lambda: shapes(ReduceAttrs(OpType.REDUCE_SUM, (2,)), [T(4, 6)]), "axis 2", "valid: -2..1")
    _raises(lambda: ReduceAttrs(OpType.REDUCE_SUM, ()), "empty")
    _raises(lambda: ReduceAttrs(OpType.RELU, (0,)), "not a reduction", "mean, reduce_sum")
    _raises(lambda: op_def(OpType.MEAN).output_shapes(ReduceAttrs(OpType.MEAN, (0,)), [T(4, dtype=I64)]),
            "floating")


def test_reduce_single_int_axis_is_normalized():
    assert ReduceAttrs(OpType.MEAN, 1).axes == (1,)


def test_cast_and_lstm_reject_bad_arguments():
    _raises(lambda: CastAttrs(DataType.DT_NONE), "DT_NONE", "DT_FLOAT")
    _raises(lambda: LSTMAttrs(0), "hidden_size")
    shapes = op_def(OpType.LSTM).output_shapes
    _raises(lambda: shapes(LSTMAttrs(4), [T(2, 3), T(2, 5), T(2, 4)]), "h is [2, 5]", "[2, 4]")
    _raises(lambda: shapes(LSTMAttrs(4), [T(2, 3, 1), T(2, 4), T(2, 4)]), "x", "rank 3")
