"""Parallelization rules and kernels of conv2d, pool2d, batch_norm, layer_norm, softmax, embedding
and dropout, checked against brute force and against independent computations."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flexrt.errors import ShapeError
from flexrt.ir import ActiMode, AggrMode, DataType, ParallelTensorShape as P, PoolType, TensorShape
from flexrt.ir.ops import (BatchNormAttrs, Conv2DAttrs, DropoutAttrs, EmbeddingAttrs, LayerNormAttrs,
                           Pool2DAttrs, SoftmaxAttrs)
from flexrt.kernels.pieces import gather, run_pieces, scatter
from flexrt.kernels.registry import run_forward
from flexrt.kernels.validation import check_all_partitionings, check_partitioning, check_rejected, partitionings

F64, I64 = DataType.DT_DOUBLE, DataType.DT_INT64


def _degrees_seen(attrs, x_shape, totals=(2, 4), dtype=F64):
    return [deg for deg, _ in partitionings(attrs, [TensorShape(x_shape, dtype)], totals)]


# ---------------------------------------------------------------- independent references

def conv_reference(x, k, b, stride, padding, groups):
    """Direct nested-loop convolution (NCHW, groups), for tiny inputs."""
    n, c, h, w = x.shape
    out, cg, kh, kw = k.shape
    (sh, sw), (ph, pw) = stride, padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    og = out // groups
    y = np.zeros((n, out, ho, wo))
    for b_, o, i, j in itertools.product(range(n), range(out), range(ho), range(wo)):
        g = o // og
        acc = 0.0 if b is None else b[o]
        for ci, di, dj in itertools.product(range(cg), range(kh), range(kw)):
            r, s = i * sh + di - ph, j * sw + dj - pw
            if 0 <= r < h and 0 <= s < w:
                acc += x[b_, g * cg + ci, r, s] * k[o, ci, di, dj]
        y[b_, o, i, j] = acc
    return y


def pool_reference(x, kernel, stride, padding, pool):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    y = np.zeros((n, c, ho, wo))
    for b, ch, i, j in itertools.product(range(n), range(c), range(ho), range(wo)):
        vals = [x[b, ch, r, s] for r in range(i * sh - ph, i * sh - ph + kh)
                for s in range(j * sw - pw, j * sw - pw + kw) if 0 <= r < h and 0 <= s < w]
        y[b, ch, i, j] = max(vals) if pool is PoolType.POOL_MAX else sum(vals) / (kh * kw)
    return y


@pytest.mark.parametrize("groups, stride, padding, bias, act", [
    (1, (1, 1), (0, 0), True, ActiMode.AC_MODE_NONE),
    (1, (2, 1), (1, 2), False, ActiMode.AC_MODE_RELU),
    (2, (1, 2), (1, 0), True, ActiMode.AC_MODE_NONE),
    (4, (2, 2), (1, 1), True, ActiMode.AC_MODE_TANH),
])
def test_conv2d_kernel_matches_nested_loops(groups, stride, padding, bias, act):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 4, 5, 6))
    k = rng.standard_normal((8, 4 // groups, 3, 2))
    b = rng.standard_normal(8) if bias else None
    attrs = Conv2DAttrs(8, 3, 2, *stride, *padding, groups, bias, act)
    (got,) = run_forward(np, attrs, [x, k] + ([b] if bias else []))
    expected = conv_reference(x, k, b, stride, padding, groups)
    expected = np.maximum(expected, 0) if act is ActiMode.AC_MODE_RELU else (
        np.tanh(expected) if act is ActiMode.AC_MODE_TANH else expected)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pool", list(PoolType))
@pytest.mark.parametrize("kernel, stride, padding", [((2, 2), (2, 2), (0, 0)), ((3, 2), (1, 2), (1, 1))])
def test_pool2d_kernel_matches_nested_loops(pool, kernel, stride, padding):
    x = -np.abs(np.random.default_rng(11).standard_normal((2, 3, 5, 6))) - 1.0  # all < 0: padding must lose
    attrs = Pool2DAttrs(*kernel, *stride, *padding, pool)
    (got,) = run_forward(np, attrs, [x])
    np.testing.assert_allclose(got, pool_reference(x, kernel, stride, padding, pool), rtol=1e-12)


def test_conv2d_and_pool2d_match_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed; the nested-loop references still run")
    F = torch.nn.functional
    rng = np.random.default_rng(12)
    x, k, b = rng.standard_normal((2, 6, 9, 7)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    (got,) = run_forward(np, Conv2DAttrs(4, 3, 3, 2, 1, 1, 0, groups=2), [x, k, b])
    ref = F.conv2d(torch.tensor(x), torch.tensor(k), torch.tensor(b), stride=(2, 1), padding=(1, 0), groups=2)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-10, atol=1e-10)
    (got,) = run_forward(np, Pool2DAttrs(3, 3, 2, 2, 1, 1, PoolType.POOL_AVG), [x])
    ref = F.avg_pool2d(torch.tensor(x), 3, 2, 1, count_include_pad=True)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-10)
    (got,) = run_forward(np, Pool2DAttrs(3, 3, 2, 2, 1, 1), [x])
    np.testing.assert_allclose(got, F.max_pool2d(torch.tensor(x), 3, 2, 1).numpy(), rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2]), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(0, 1),
       st.integers(3, 6))
def test_conv2d_kernel_matches_nested_loops_sampled(groups, kh, kw, s, p, h):
    rng = np.random.default_rng(13)
    x, k = rng.standard_normal((1, 2, h, h + 1)), rng.standard_normal((2, 2 // groups, kh, kw))
    (got,) = run_forward(np, Conv2DAttrs(2, kh, kw, s, s, p, p, groups, use_bias=False), [x, k])
    np.testing.assert_allclose(got, conv_reference(x, k, None, (s, s), (p, p), groups), rtol=1e-11, atol=1e-12)


# ---------------------------------------------------------------- conv2d / pool2d: every partitioning

@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("padding", [0, 1])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_partitionings_match_unpartitioned(stride, padding, kernel, groups):
    rng = np.random.default_rng(20)
    attrs = Conv2DAttrs(4, kernel, kernel, stride, stride, padding, padding, groups)
    x = rng.standard_normal((4, 4, 8, 8))
    ws = [rng.standard_normal((4, 4 // groups, kernel, kernel)), rng.standard_normal(4)]
    n = check_all_partitionings(np, attrs, [x], ws, rng)
    # sample and partial always, height and width where Ho divides; out and in (groups 1) or replica (groups 2)
    assert n >= 9


@pytest.mark.parametrize("act", [ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_RELU])
def test_conv2d_grouped_out_channel_partitionings(act):
    # groups == gcd(C, out) == 4: the out axis cuts the input channels with the groups
    rng = np.random.default_rng(21)
    attrs = Conv2DAttrs(8, 3, 3, 1, 1, 1, 1, groups=4, use_bias=True, activation=act)
    x = rng.standard_normal((2, 4, 4, 4))
    ws = [rng.standard_normal((8, 1, 3, 3)), rng.standard_normal(8)]
    assert check_all_partitionings(np, attrs, [x], ws, rng) >= 10
    assert any(d["out"] == 4 for d in _degrees_seen(attrs, (2, 4, 4, 4)))


def test_conv2d_resnext_style_groups_cut_by_divisors_of_groups():
    # C = out = 8, groups = 2 (ResNeXt's C = out = 128, groups = 32 in small): degree 2 only
    rng = np.random.default_rng(25)
    attrs = Conv2DAttrs(8, 3, 3, 1, 1, 1, 1, groups=2, use_bias=False)
    x = rng.standard_normal((2, 8, 4, 4))
    assert check_all_partitionings(np, attrs, [x], [rng.standard_normal((8, 4, 3, 3))], rng) >= 8
    assert {d["out"] for d in _degrees_seen(attrs, (2, 8, 4, 4))} == {1, 2}


def test_conv2d_halo_partitionings_are_exercised():
    attrs = Conv2DAttrs(2, 3, 3, 2, 2, 1, 1, use_bias=False)
    seen = _degrees_seen(attrs, (2, 2, 8, 8))
    assert {"height": 4, "width": 1} in [{k: d[k] for k in ("height", "width")} for d in seen]
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 2, 8, 8))
    (pshape,) = [ps for deg, ps in partitionings(attrs, [TensorShape((2, 2, 8, 8), F64)], (4,))
                 if deg["height"] == 2 and deg["width"] == 2]
    check_partitioning(np, attrs, [x], [rng.standard_normal((2, 2, 3, 3))], pshape, rng)


@pytest.mark.parametrize("pool", list(PoolType))
@pytest.mark.parametrize("kernel, stride, padding", [((3, 3), (1, 1), (1, 1)), ((3, 3), (2, 2), (1, 1)),
                                                     ((2, 2), (2, 2), (0, 0)), ((3, 1), (1, 1), (1, 0))])
def test_pool2d_partitionings_match_unpartitioned(pool, kernel, stride, padding):
    rng = np.random.default_rng(23)
    x = -np.abs(rng.standard_normal((4, 4, 8, 8))) - 1.0  # a 0 fill instead of -inf would win a max
    attrs = Pool2DAttrs(*kernel, *stride, *padding, pool)
    assert check_all_partitionings(np, attrs, [x], [], rng) >= 10


def test_pool2d_relu_partitionings():
    rng = np.random.default_rng(24)
    attrs = Pool2DAttrs(3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, ActiMode.AC_MODE_RELU)
    assert check_all_partitionings(np, attrs, [rng.standard_normal((2, 2, 4, 4))], [], rng) >= 10


def test_conv2d_rejected_partitionings():
    relu = Conv2DAttrs(4, 3, 3, activation=ActiMode.AC_MODE_RELU, use_bias=False)
    e = check_rejected(relu, [P.of((2, 4, 8, 8), (1, 2, 1, 1)), P.of((4, 4, 3, 3), (1, 2, 1, 1))])
    assert "cut along dim 1 with degree 2, which this operator cannot parallelize" in str(e)
    e = check_rejected(relu, [P.of((2, 4, 8, 8), sum_degree=2), P.of((4, 4, 3, 3), discard_copy_degree=2)])
    assert "partial sums" in str(e)
    # out-channel degree 4 over groups 2 would split a group
    grouped = Conv2DAttrs(4, 3, 3, groups=2, use_bias=False)
    e = check_rejected(grouped, [P.of((2, 4, 8, 8), (1, 4, 1, 1)), P.of((4, 2, 3, 3), (4, 1, 1, 1))])
    assert "out-channel degree 4 does not divide groups 2" in str(e)
    # height cut in 4 but Ho = 6 is not divisible by 4
    e = check_rejected(Conv2DAttrs(4, 3, 3, use_bias=False),
                       [P.of((2, 4, 8, 8), (1, 1, 4, 1)), P.of((4, 4, 3, 3), discard_copy_degree=4)])
    assert "degree 4 does not divide dimension 2 of size 6" in str(e)


# ---------------------------------------------------------------- normalization and softmax

def _batch_norm_reference(x, scale, bias, eps, relu):
    axes = tuple(d for d in range(x.ndim) if d != 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    y = y * scale.reshape(shape) + bias.reshape(shape)
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("shape", [(8, 4), (4, 4, 3, 3)])
def test_batch_norm_kernel_and_partitionings(shape, relu):
    rng = np.random.default_rng(30)
    attrs = BatchNormAttrs(relu=relu, eps=1e-3)
    x, s, b = rng.standard_normal(shape) * 3 + 1, rng.standard_normal(4), rng.standard_normal(4)
    (got,) = run_forward(np, attrs, [x, s, b])
    np.testing.assert_allclose(got, _batch_norm_reference(x, s, b, 1e-3, relu), rtol=1e-10, atol=1e-12)
    # channel and replica only: 2 + 3 partitionings on 2 and 4 pieces
    assert check_all_partitionings(np, attrs, [x], [s, b], rng) == 5


@pytest.mark.parametrize("pieces", [2, 4])
def test_batch_norm_sample_parallel_uses_per_piece_statistics(pieces):
    """The inexact sample axis: each piece equals BatchNorm of its own slice of the batch."""
    rng = np.random.default_rng(32)
    attrs = BatchNormAttrs(relu=False, eps=1e-3)
    x, s, b = rng.standard_normal((8, 3, 2, 2)) * 2 + 1, rng.standard_normal(3), rng.standard_normal(3)
    shapes = [P.of((8, 3, 2, 2), (pieces, 1, 1, 1)), P.of((3,), discard_copy_degree=pieces),
              P.of((3,), discard_copy_degree=pieces)]
    values = [scatter(np, a, sh, rng) for a, sh in zip([x, s, b], shapes)]
    got = gather(np, run_pieces(np, attrs, values)[0])
    step = 8 // pieces
    expected = np.concatenate([_batch_norm_reference(x[i:i + step], s, b, 1e-3, False) for i in range(0, 8, step)])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert not np.allclose(got, _batch_norm_reference(x, s, b, 1e-3, False))  # not the whole-batch statistics


def test_batch_norm_rejects_spatial_partitioning():
    e = check_rejected(BatchNormAttrs(), [P.of((4, 3, 2, 2), (1, 1, 2, 1)), P.of((3,)), P.of((3,))])
    assert "cut along dim 2 with degree 2, which this operator cannot parallelize" in str(e)
    assert "dim 1 (channel)" in str(e)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("axes", [(-1,), (1, 2), (-1, -2)])
def test_layer_norm_partitionings(axes, affine):
    rng = np.random.default_rng(31)
    attrs = LayerNormAttrs(axes, affine, eps=1e-4)
    x = rng.standard_normal((4, 4, 6))
    norm = x.shape[3 - len(axes):]
    ws = [rng.standard_normal(norm), rng.standard_normal(norm)] if affine else []
    (got,) = run_forward(np, attrs, [x] + ws)
    red = tuple(range(3 - len(axes), 3))
    expected = (x - x.mean(axis=red, keepdims=True)) / np.sqrt(x.var(axis=red, keepdims=True) + 1e-4)
    expected = expected * ws[0] + ws[1] if affine else expected
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert check_all_partitionings(np, attrs, [x], ws, rng) >= 5


def test_layer_norm_rejects_normalized_dim():
    e = check_rejected(LayerNormAttrs((-1,)), [P.of((4, 6), (1, 2)), P.of((6,), discard_copy_degree=1),
                                               P.of((6,), discard_copy_degree=1)])
    assert "cut along dim 1" in str(e)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_kernel_and_partitionings(axis):
    rng = np.random.default_rng(32)
    x = rng.standard_normal((4, 4, 6)) * 300  # large logits: only max subtraction keeps exp finite
    attrs = SoftmaxAttrs(axis)
    (got,) = run_forward(np, attrs, [x])
    assert np.all(np.isfinite(got))
    shifted = x - x.max(axis=axis, keepdims=True)
    np.testing.assert_allclose(got, np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True), rtol=1e-12)
    assert check_all_partitionings(np, attrs, [x], [], rng) >= 5


def test_softmax_rejects_its_axis():
    e = check_rejected(SoftmaxAttrs(-1), [P.of((4, 6), (1, 2))])
    assert "cut along dim 1 with degree 2, which this operator cannot parallelize" in str(e)
    assert "dim 0 (dim0)" in str(e)


# ---------------------------------------------------------------- embedding

@pytest.mark.parametrize("aggr", list(AggrMode))
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_embedding_partitionings(aggr, itype):
    rng = np.random.default_rng(40)
    idx = rng.integers(0, 12, (4, 4)).astype(itype)
    table = rng.standard_normal((12, 8))
    n = check_all_partitionings(np, EmbeddingAttrs(12, 8, aggr), [idx], [table], rng)
    # with the entries axis (the table's rows cut 2 or 4 ways, alone or with another axis)
    assert n >= (14 if aggr is not AggrMode.AGGR_MODE_AVG else 9)


def test_embedding_rejects_out_of_range_indices():
    table = np.zeros((5, 2))
    for bad in (5, -1):
        with pytest.raises(ShapeError, match=rf"index {bad} is out of range for a table of 5 entries; "
                                             r"valid indices: 0..4"):
            run_forward(np, EmbeddingAttrs(5, 2), [np.array([[0, bad]]), table])


def test_embedding_avg_rejects_cut_bag():
    e = check_rejected(EmbeddingAttrs(10, 4, AggrMode.AGGR_MODE_AVG),
                       [P.of((4, 6), (1, 2), dtype=I64), P.of((10, 4), discard_copy_degree=2)])
    assert "cut along dim 1" in str(e)


# ---------------------------------------------------------------- dropout

def test_dropout_rate_zero_is_identity_under_every_partitioning():
    rng = np.random.default_rng(50)
    x = rng.standard_normal((4, 4, 2))
    (y,) = run_forward(np, DropoutAttrs(0.0, seed=3), [x])
    np.testing.assert_array_equal(y, x)
    assert check_all_partitionings(np, DropoutAttrs(0.0, seed=3), [x], [], rng) >= 10


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_dropout_keeps_expected_fraction_scaled_and_deterministic(rate):
    x = np.random.default_rng(51).uniform(1.0, 2.0, (200, 500))
    attrs = DropoutAttrs(rate, seed=42)
    (y,) = run_forward(np, attrs, [x])
    kept = y != 0
    sigma = np.sqrt(rate * (1 - rate) / x.size)
    assert abs(kept.mean() - (1 - rate)) < 5 * sigma
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-12)
    np.testing.assert_array_equal(run_forward(np, attrs, [x])[0], y)  # same seed, same mask
    (other,) = run_forward(np, DropoutAttrs(rate, seed=43), [x])
    assert (other != 0).mean() == pytest.approx(1 - rate, abs=5 * sigma * 2)
    assert np.any((other != 0) != kept)


def test_dropout_partitionings_draw_one_mask_per_piece():
    # Exact comparison with the unpartitioned run holds only when no dimension is cut (replicas and
    # partial sums share their position's mask); a cut draws an independent mask per piece.
    rng = np.random.default_rng(52)
    x = rng.uniform(1.0, 2.0, (8, 64))
    attrs = DropoutAttrs(0.5, seed=7)
    uncut = 0
    for degree, pshapes in partitionings(attrs, [TensorShape(x.shape, F64)]):
        if degree["dim0"] == degree["dim1"] == 1:
            check_partitioning(np, attrs, [x], [], pshapes, rng)
            uncut += 1
            continue
        (out,) = run_pieces(np, attrs, [scatter(np, x, pshapes[0], rng)])
        y = gather(np, out)  # replicas agree (gather raises otherwise)
        kept = y != 0
        np.testing.assert_allclose(y[kept], x[kept] * 2.0, rtol=1e-12)
        masks = {(k[0]): (p != 0).tobytes() for k, p in out.pieces.items()}
        assert len(set(masks.values())) == len(masks), f"pieces of {pshapes[0]} share a mask"
    assert uncut == 5  # (replica, partial) degrees (2, 1), (1, 2), (4, 1), (2, 2), (1, 4)
