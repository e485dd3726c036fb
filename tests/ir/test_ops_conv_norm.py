"""Shape rules, weight shapes, FLOPs and errors of conv2d, pool2d, batch_norm, layer_norm,
embedding, dropout and softmax (shape inference checked against NumPy on sampled shapes)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from flexrt.errors import ShapeError
from flexrt.ir import ActiMode, AggrMode, DataType, OpType, ParallelTensorShape as P, PoolType, TensorShape, op_def
from flexrt.ir.ops import (BatchNormAttrs, Conv2DAttrs, DropoutAttrs, EmbeddingAttrs, LayerNormAttrs,
                           Pool2DAttrs, SoftmaxAttrs)
from flexrt.ir.parallel_axes import infer_parallel, validate_axes
from flexrt.kernels.registry import run_forward

F32, F64, I32, I64 = DataType.DT_FLOAT, DataType.DT_DOUBLE, DataType.DT_INT32, DataType.DT_INT64


def T(*dims, dtype=F32):
    return TensorShape(tuple(dims), dtype)


def out_shape(attrs, *inputs):
    return op_def(attrs.op_type).output_shapes(attrs, list(inputs))


def weights(attrs, *inputs):
    return op_def(attrs.op_type).weight_shapes(attrs, list(inputs))


def axis_names(attrs, *inputs):
    return [a.name for a in op_def(attrs.op_type).parallel_axes(attrs, list(inputs))]


# ---------------------------------------------------------------- conv2d / pool2d shapes vs NumPy

@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    c = groups * draw(st.integers(1, 3))
    out = groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    attrs = Conv2DAttrs(out, kh, kw, draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                        draw(st.integers(0, 2)), draw(st.integers(0, 2)), groups, draw(st.booleans()))
    shape = (draw(st.integers(1, 3)), c, draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    return attrs, shape


def _numpy_windows(x, kh, kw, sh, sw, ph, pw):
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]  # [N, C, Ho, Wo, kh, kw]


@settings(max_examples=60, deadline=None)
@given(conv_cases())
def test_conv2d_output_shape_matches_numpy_windows(case):
    attrs, shape = case
    x = np.zeros(shape)
    n, c, h, w = shape
    fits = h + 2 * attrs.padding_h >= attrs.kernel_h and w + 2 * attrs.padding_w >= attrs.kernel_w
    if not fits:
        with pytest.raises(ShapeError, match="is larger than the padded input"):
            out_shape(attrs, T(*shape, dtype=F64))
        return
    win = _numpy_windows(x, attrs.kernel_h, attrs.kernel_w, attrs.stride_h, attrs.stride_w,
                         attrs.padding_h, attrs.padding_w)
    (y,) = out_shape(attrs, T(*shape, dtype=F64))
    assert y == T(n, attrs.out_channels, win.shape[2], win.shape[3], dtype=F64)
    ws = weights(attrs, T(*shape, dtype=F64))
    assert ws[0] == T(attrs.out_channels, c // attrs.groups, attrs.kernel_h, attrs.kernel_w, dtype=F64)
    assert ws[1:] == ((T(attrs.out_channels, dtype=F64),) if attrs.use_bias else ())
    arrays = [np.ones(s.dims) for s in ws]
    (got,) = run_forward(np, attrs, [x] + arrays)
    assert got.shape == y.dims
    validate_axes(op_def(OpType.CONV2D), attrs, [T(*shape, dtype=F64)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.data(),
       st.sampled_from(list(PoolType)))
def test_pool2d_output_shape_and_values_match_numpy_windows(kh, kw, sh, sw, data, pool):
    ph, pw = data.draw(st.integers(0, kh // 2)), data.draw(st.integers(0, kw // 2))
    shape = (2, 3, data.draw(st.integers(kh, 8)), data.draw(st.integers(kw, 8)))
    attrs = Pool2DAttrs(kh, kw, sh, sw, ph, pw, pool)
    x = np.random.default_rng(0).standard_normal(shape)
    fill = -np.inf if pool is PoolType.POOL_MAX else 0.0
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    win = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    expected = win.max(axis=(4, 5)) if pool is PoolType.POOL_MAX else win.sum(axis=(4, 5)) / (kh * kw)
    (y,) = out_shape(attrs, T(*shape, dtype=F64))
    assert y.dims == expected.shape
    (got,) = run_forward(np, attrs, [x])
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_weight_names():
    assert op_def(OpType.CONV2D).weight_names(Conv2DAttrs(4, 3, 3)) == ("kernel", "bias")
    assert op_def(OpType.CONV2D).weight_names(Conv2DAttrs(4, 3, 3, use_bias=False)) == ("kernel",)
    assert op_def(OpType.LAYER_NORM).weight_names(LayerNormAttrs((-1,))) == ("gamma", "beta")
    assert op_def(OpType.LAYER_NORM).weight_names(LayerNormAttrs((-1,), elementwise_affine=False)) == ()
    assert weights(LayerNormAttrs((-1,), elementwise_affine=False), T(2, 3)) == ()
    assert op_def(OpType.EMBEDDING).weight_names(EmbeddingAttrs(4, 2)) == ("table",)
    assert op_def(OpType.POOL2D).num_weights(Pool2DAttrs(2, 2)) == 0


def test_conv2d_axes_depend_on_groups_and_activation():
    x = T(2, 4, 8, 8)
    assert axis_names(Conv2DAttrs(8, 3, 3), x) == ["sample", "height", "width", "out", "in", "partial"]
    # a fused activation forbids partial-sum outputs; groups == 1 keeps the input's copy slot for "out"
    assert axis_names(Conv2DAttrs(8, 3, 3, activation=ActiMode.AC_MODE_RELU), x) == [
        "sample", "height", "width", "out"]
    # groups > 1: out-channel pieces own whole groups (check_degrees); the copy slot is free for replicas
    for g in (2, 4):
        assert axis_names(Conv2DAttrs(8, 3, 3, groups=g), x) == [
            "sample", "height", "width", "out", "partial", "replica"]


def test_conv2d_parallel_shapes_of_out_channel_and_reduction_axes():
    conv = op_def(OpType.CONV2D)
    attrs = Conv2DAttrs(8, 3, 3, padding_h=1, padding_w=1)
    (y,) = infer_parallel(conv, attrs, "c", [P.of((2, 4, 8, 8), discard_copy_degree=2),
                                              P.of((8, 4, 3, 3), (2, 1, 1, 1)), P.of((8,), (2,))])
    assert y == P.of((2, 8, 8, 8), (1, 2, 1, 1))
    (y,) = infer_parallel(conv, attrs, "c", [P.of((2, 4, 8, 8), (1, 4, 1, 1)),
                                              P.of((8, 4, 3, 3), (1, 4, 1, 1)), P.of((8,), discard_copy_degree=4)])
    assert y == P.of((2, 8, 8, 8), sum_degree=4)
    grouped = Conv2DAttrs(8, 3, 3, padding_h=1, padding_w=1, groups=4)
    (y,) = infer_parallel(conv, grouped, "c", [P.of((2, 4, 8, 8), (1, 2, 1, 1)),
                                                P.of((8, 1, 3, 3), (2, 1, 1, 1)), P.of((8,), (2,))])
    assert y == P.of((2, 8, 8, 8), (1, 2, 1, 1))


def test_conv2d_halo_and_piece_call():
    conv = op_def(OpType.CONV2D)
    attrs = Conv2DAttrs(4, 3, 5, stride_h=2, stride_w=1, padding_h=1, padding_w=2)
    x = [T(2, 4, 8, 8)]
    # output rows [2, 4) with stride 2 read input rows 2*2-1 = 3 .. 3*2-1+3 = 8
    assert conv.halo(attrs, 0, 2, x, (2, 4)) == (3, 8)
    assert conv.halo(attrs, 0, 2, x, (0, 2)) == (-1, 4)  # row -1 is padding
    assert conv.halo(attrs, 0, 3, x, (4, 8)) == (2, 10)  # columns 8, 9 are padding
    piece, zeroed = conv.piece_call(attrs, {"height": 1, "in": 1}, {"height": 2, "in": 2})
    assert (piece.padding_h, piece.padding_w, zeroed) == (0, 2, frozenset({2}))
    piece, zeroed = conv.piece_call(Conv2DAttrs(8, 3, 3, groups=4), {"out": 1}, {"out": 2})
    assert (piece.out_channels, piece.groups, zeroed) == (4, 2, frozenset())


# ---------------------------------------------------------------- FLOPs, hand-computed

def test_conv2d_flops_hand_computed():
    conv = op_def(OpType.CONV2D)
    attrs = Conv2DAttrs(6, 3, 3, padding_h=1, padding_w=1, groups=2)
    x = T(2, 4, 5, 5)
    ins = [x] + list(weights(attrs, x))
    outs = out_shape(attrs, x)
    assert outs[0] == T(2, 6, 5, 5)
    # 2 * N*out*Ho*Wo * (C/groups)*kh*kw + bias = 2 * 300 * 18 + 300
    assert conv.flops(attrs, ins, outs) == 11100
    assert conv.backward_flops(attrs, ins, outs) == 4 * 300 * 18 + 300
    relu = Conv2DAttrs(6, 3, 3, padding_h=1, padding_w=1, groups=2, use_bias=False, activation=ActiMode.AC_MODE_RELU)
    assert conv.flops(relu, [x, ins[1]], outs) == 10800 + 300
    # on an in-channel piece (kernel [6, 1, 3, 3] of C/groups = 2 cut in 2) the count halves
    piece = [T(2, 2, 5, 5), T(6, 1, 3, 3)]
    assert conv.flops(relu, piece, outs) == 5400 + 300


@settings(max_examples=30, deadline=None)
@given(conv_cases(), st.sampled_from([2, 3]))
def test_conv2d_flops_add_up_over_sample_pieces(case, d):
    attrs, (n, c, h, w) = case
    conv = op_def(OpType.CONV2D)
    try:
        full_out = out_shape(attrs, T(n * d, c, h, w))
    except ShapeError:
        return
    ws = list(weights(attrs, T(n, c, h, w)))
    piece_out = out_shape(attrs, T(n, c, h, w))
    assert d * conv.flops(attrs, [T(n, c, h, w)] + ws, piece_out) == conv.flops(attrs, [T(n * d, c, h, w)] + ws,
                                                                                full_out)


def test_pool2d_flops_hand_computed():
    pool = op_def(OpType.POOL2D)
    x = T(1, 2, 4, 4)
    avg = Pool2DAttrs(2, 2, 2, 2, pool_type=PoolType.POOL_AVG)
    outs = out_shape(avg, x)
    assert outs[0] == T(1, 2, 2, 2)
    assert pool.flops(avg, [x], outs) == 8 * 4 + 8  # window sums + one division per output
    assert pool.flops(Pool2DAttrs(2, 2, 2, 2), [x], outs) == 8 * 4


def test_norm_softmax_embedding_dropout_flops_and_memory():
    bn = op_def(OpType.BATCH_NORM)
    x = T(2, 3, 4, 4)
    assert bn.flops(BatchNormAttrs(), [x], [x]) == 8 * 96 + 96
    assert bn.flops(BatchNormAttrs(relu=False), [x], [x]) == 8 * 96
    assert bn.extra_memory_bytes(BatchNormAttrs(), [x], [x]) == 2 * 3 * 4  # mean, inv-std per channel
    assert bn.extra_memory_bytes(BatchNormAttrs(), [T(2, 3, 4, 4, dtype=F64)], [x]) == 2 * 3 * 8
    ln = op_def(OpType.LAYER_NORM)
    y = T(2, 3, 8)
    assert ln.extra_memory_bytes(LayerNormAttrs((-1,)), [y], [y]) == 2 * 6 * 4
    assert ln.extra_memory_bytes(LayerNormAttrs((1, 2)), [y], [y]) == 2 * 2 * 4
    assert ln.flops(LayerNormAttrs((-1,)), [y], [y]) == 8 * 48
    assert ln.flops(LayerNormAttrs((-1,), elementwise_affine=False), [y], [y]) == 6 * 48
    assert op_def(OpType.SOFTMAX).flops(SoftmaxAttrs(), [T(4, 10)], [T(4, 10)]) == 320
    emb = op_def(OpType.EMBEDDING)
    bag = EmbeddingAttrs(100, 3, AggrMode.AGGR_MODE_SUM)
    assert emb.flops(bag, [T(2, 5, dtype=I64)], out_shape(bag, T(2, 5, dtype=I64))) == 2 * 5 * 3 - 2 * 3
    assert emb.flops(EmbeddingAttrs(100, 3), [T(2, 5, dtype=I64)], [T(2, 5, 3)]) == 0
    dr = op_def(OpType.DROPOUT)
    assert dr.extra_memory_bytes(DropoutAttrs(0.5), [T(4, 6)], [T(4, 6)]) == 24
    assert dr.extra_memory_bytes(DropoutAttrs(0.0), [T(4, 6)], [T(4, 6)]) == 0


# ---------------------------------------------------------------- normalization, softmax, embedding

@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.data())
def test_layer_norm_shapes_and_axes_on_sampled_shapes(dims, data):
    r = len(dims)
    k = data.draw(st.integers(1, r))
    axes = tuple(data.draw(st.permutations([a - r if data.draw(st.booleans()) else a for a in range(r - k, r)])))
    attrs = LayerNormAttrs(axes)
    x = T(*dims)
    assert out_shape(attrs, x) == (x,)
    assert weights(attrs, x) == (T(*dims[r - k:]),) * 2
    assert axis_names(attrs, x) == [f"dim{d}" for d in range(r - k)] + ["replica"]
    arr = np.random.default_rng(1).standard_normal(dims)
    (got,) = run_forward(np, attrs, [arr, np.ones(dims[r - k:]), np.zeros(dims[r - k:])])
    red = tuple(range(r - k, r))
    expected = (arr - arr.mean(axis=red, keepdims=True)) / np.sqrt(arr.var(axis=red, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_softmax_shape_and_axes_on_sampled_shapes(dims, data):
    axis = data.draw(st.integers(-len(dims), len(dims) - 1))
    attrs = SoftmaxAttrs(axis)
    x = T(*dims)
    assert out_shape(attrs, x) == (x,)
    assert axis_names(attrs, x) == [f"dim{d}" for d in range(len(dims)) if d != axis % len(dims)] + ["replica"]
    arr = np.random.default_rng(2).standard_normal(dims) * 50
    (got,) = run_forward(np, attrs, [arr])
    assert got.shape == tuple(dims)
    np.testing.assert_allclose(got.sum(axis=axis), 1.0, rtol=1e-12)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5, 5)])
def test_batch_norm_shapes(shape):
    attrs = BatchNormAttrs()
    x = T(*shape)
    assert out_shape(attrs, x) == (x,)
    assert weights(attrs, x) == (T(3), T(3))
    assert op_def(OpType.BATCH_NORM).weight_names(attrs) == ("scale", "bias")
    assert axis_names(attrs, x) == ["sample", "channel", "replica"]  # sample: per-piece statistics


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from(list(AggrMode)),
       st.sampled_from([np.int32, np.int64]))
def test_embedding_shape_matches_numpy_take(dims, aggr, itype):
    attrs = EmbeddingAttrs(7, 5, aggr)
    dtype = I32 if itype is np.int32 else I64
    x = T(*dims, dtype=dtype)
    if aggr is not AggrMode.AGGR_MODE_NONE and len(dims) < 2:
        with pytest.raises(ShapeError, match="valid ranks with aggregation"):
            out_shape(attrs, x)
        return
    idx = np.random.default_rng(3).integers(0, 7, dims).astype(itype)
    table = np.random.default_rng(4).standard_normal((7, 5))
    expected = np.take(table, idx, axis=0)
    if aggr is AggrMode.AGGR_MODE_SUM:
        expected = expected.sum(axis=-2)
    elif aggr is AggrMode.AGGR_MODE_AVG:
        expected = expected.mean(axis=-2)
    (y,) = out_shape(attrs, x)
    assert y == TensorShape(expected.shape, F32)
    assert weights(attrs, x) == (T(7, 5),)
    (got,) = run_forward(np, attrs, [idx, table])
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_embedding_axes():
    assert axis_names(EmbeddingAttrs(10, 4), T(8, 3, dtype=I64)) == ["dim0", "dim1", "out", "entries"]
    assert axis_names(EmbeddingAttrs(10, 4, AggrMode.AGGR_MODE_SUM), T(8, 3, dtype=I64)) == [
        "dim0", "out", "bag", "entries"]
    assert axis_names(EmbeddingAttrs(10, 4, AggrMode.AGGR_MODE_AVG), T(8, 3, dtype=I64)) == ["dim0", "out", "entries"]


# ---------------------------------------------------------------- bad inputs and attributes

@pytest.mark.parametrize("make, pattern", [
    (lambda: Conv2DAttrs(0, 3, 3), "out_channels must be an int >= 1, got 0"),
    (lambda: Conv2DAttrs(4, 0, 3), "kernel_h must be an int >= 1, got 0"),
    (lambda: Conv2DAttrs(4, 3, 3, stride_w=0), "stride_w must be an int >= 1, got 0"),
    (lambda: Conv2DAttrs(4, 3, 3, padding_h=-1), "padding_h must be an int >= 0, got -1"),
    (lambda: Conv2DAttrs(6, 3, 3, groups=4), "groups 4 does not divide out_channels 6"),
    (lambda: Pool2DAttrs(3, 3, 1, 1, 2, 0), r"padding_h 2 is more than half of kernel_h 3; valid: 0..1"),
    (lambda: Pool2DAttrs(2, 2, 0), "stride_h must be an int >= 1"),
    (lambda: BatchNormAttrs(eps=0.0), "eps must be a number > 0"),
    (lambda: BatchNormAttrs(momentum=1.5), r"momentum must be a number in \[0, 1\]"),
    (lambda: LayerNormAttrs(()), "axes must be a non-empty sequence"),
    (lambda: EmbeddingAttrs(0, 4), "num_entries must be an int >= 1"),
    (lambda: EmbeddingAttrs(4, 4, "sum"), "aggr must be an AggrMode"),
    (lambda: DropoutAttrs(1.0), r"rate must be a number in \[0, 1\), got 1.0"),
    (lambda: DropoutAttrs(-0.1), r"rate must be a number in \[0, 1\)"),
    (lambda: DropoutAttrs(0.5, seed=-1), "seed must be an int"),
    (lambda: SoftmaxAttrs(1.5), "axis must be an int"),
])
def test_bad_attributes_raise_shape_error(make, pattern):
    with pytest.raises(ShapeError, match=pattern):
        make()


@pytest.mark.parametrize("attrs, inputs, pattern", [
    (Conv2DAttrs(4, 3, 3), [T(64, 3, 224)],
     r"conv2d: input \[64, 3, 224\] f32 has rank 3; valid ranks: 4 \(\[N, C, H, W\]\)"),
    (Conv2DAttrs(4, 5, 3), [T(1, 3, 2, 8)],
     r"conv2d: kernel height 5 is larger than the padded input height 2 \+ 2 \* 0 = 2"),
    (Conv2DAttrs(4, 3, 3, padding_w=1), [T(1, 3, 8, 1)], None),  # 1 + 2 = 3 fits a width-3 kernel
    (Conv2DAttrs(4, 3, 3, groups=2), [T(1, 3, 8, 8)],
     r"conv2d: groups 2 does not divide the input channels 3"),
    (Conv2DAttrs(4, 3, 3), [T(1, 3, 8, 8, dtype=I32)], "valid: a floating type"),
    (Pool2DAttrs(3, 3), [T(2, 3, 8)], r"pool2d: input \[2, 3, 8\] f32 has rank 3; valid ranks: 4 \(\[N, C, H, W\]\)"),
    (Pool2DAttrs(3, 3), [T(2, 3, 8, 2)], "pool2d: kernel width 3 is larger than the padded input width 2"),
    (BatchNormAttrs(), [T(2, 3, 4)], r"batch_norm: input \[2, 3, 4\] f32 has rank 3; valid ranks: 2 \(\[N, C\]\), 4 \(\[N, C, H, W\]\)"),
    (LayerNormAttrs((1,)), [T(2, 3, 4)],
     r"layer_norm: axes \[1\] \(dims \[1\]\) of input \[2, 3, 4\] f32 are not the trailing dimensions; "
     r"valid for 1 axes: \[2\]"),
    (LayerNormAttrs((0, 2)), [T(2, 3, 4)], "are not the trailing dimensions"),
    (LayerNormAttrs((-1, 2)), [T(2, 3, 4)], "name a dimension twice"),
    (LayerNormAttrs((3,)), [T(2, 3, 4)], r"out of range for input .* valid: -3..2"),
    (EmbeddingAttrs(10, 4), [T(8, 3)],
     r"embedding: indices \[8, 3\] f32 have dtype DT_FLOAT; valid: DT_INT32, DT_INT64"),
    (EmbeddingAttrs(10, 4, AggrMode.AGGR_MODE_AVG), [T(8, dtype=I32)], "valid ranks with aggregation"),
    (SoftmaxAttrs(2), [T(4, 6)], r"softmax: axis 2 is out of range for a tensor of rank 2; valid: -2..1"),
    (DropoutAttrs(0.1), [T(4, dtype=I64)], "dropout: input .* valid: a floating type"),
])
def test_bad_inputs_raise_informative_shape_error(attrs, inputs, pattern):
    if pattern is None:
        assert out_shape(attrs, *inputs)[0].dims == (1, 4, 6, 1)
        return
    with pytest.raises(ShapeError, match=pattern):
        out_shape(attrs, *inputs)


def test_embedding_entries_attributes_stay_out_of_files_at_their_defaults():
    """``entries_degree`` and ``entries_piece`` (set by a strategy and per piece) appear in files and
    PCG hashes only where they differ from their defaults, so files written before the entries axis
    existed (and the model hashes their strategies carry) stay valid; others round-trip."""
    from flexrt.ir.serialize import attrs_from_json, attrs_to_json
    base = EmbeddingAttrs(12, 4, AggrMode.AGGR_MODE_SUM)
    assert set(attrs_to_json(base)) == {"num_entries", "out_channels", "aggr", "data_type"}
    cut = EmbeddingAttrs(12, 4, AggrMode.AGGR_MODE_SUM, entries_degree=4, entries_piece=3)
    data = attrs_to_json(cut)
    assert data["entries_degree"] == 4 and data["entries_piece"] == 3
    assert attrs_from_json("embedding", data) == cut
    assert attrs_from_json("embedding", attrs_to_json(base)) == base
    with pytest.raises(ShapeError, match="entries_degree 5 must divide num_entries 12"):
        EmbeddingAttrs(12, 4, entries_degree=5)
