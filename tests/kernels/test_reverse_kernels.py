"""Reverse's kernels: forward against np.flip, backward against finite differences, every accepted
partitioning against the unpartitioned result, and LayerNorm without a bias (FlexFlow's use_bias=False)."""

import numpy as np
import pytest
from flexrt.kernels.gradcheck import check_gradients
from flexrt.kernels.registry import run_backward, run_forward
from flexrt.kernels.validation import check_all_partitionings

from flexrt.ir.ops import LayerNormAttrs, ReverseAttrs

CASES = [((5,), 0), ((4, 6), 1), ((4, 6), 0), ((2, 3, 4), -1), ((2, 3, 4, 2), 2)]


@pytest.mark.parametrize("dims, axis", CASES)
def test_reverse_forward_matches_numpy_flip(dims, axis):
    x = np.random.default_rng(0).standard_normal(dims)
    (y,) = run_forward(np, ReverseAttrs(axis), [x])
    np.testing.assert_array_equal(y, np.flip(x, axis))
    assert y.flags.c_contiguous and not np.shares_memory(y, x)


def test_reverse_forward_keeps_integer_dtype():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (y,) = run_forward(np, ReverseAttrs(0), [x])
    assert y.dtype == np.int32 and y[0].tolist() == [8, 9, 10, 11]


@pytest.mark.parametrize("dims, axis", CASES)
def test_reverse_backward_is_the_flipped_gradient(dims, axis):
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal(dims), rng.standard_normal(dims)
    (y,) = run_forward(np, ReverseAttrs(axis), [x])
    (dx,) = run_backward(np, ReverseAttrs(axis), [x], [y], [g])
    np.testing.assert_array_equal(dx, np.flip(g, axis))


@pytest.mark.parametrize("dims, axis", CASES)
def test_reverse_backward_matches_finite_differences(dims, axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(dims)
    assert check_gradients(ReverseAttrs(axis), [x], rng) == min(x.size, 64)


def test_reverse_backward_of_integer_input_is_none():
    x = np.arange(6).reshape(2, 3)
    (y,) = run_forward(np, ReverseAttrs(1), [x])
    assert run_backward(np, ReverseAttrs(1), [x], [y], [np.ones((2, 3))]) == (None,)


@pytest.mark.parametrize("dims, axis, minimum", [((4, 4, 2), 1, 4), ((4, 6), 0, 3), ((4, 4, 4), -1, 5)])
def test_reverse_partitionings_match_unpartitioned(dims, axis, minimum):
    rng = np.random.default_rng(3)
    n = check_all_partitionings(np, ReverseAttrs(axis), [rng.standard_normal(dims)], [], rng, rtol=1e-12, atol=0)
    assert n >= minimum


def test_layer_norm_without_bias_is_scaled_normalization():
    rng = np.random.default_rng(4)
    x, gamma = rng.standard_normal((3, 5)), rng.standard_normal(5)
    attrs = LayerNormAttrs((-1,), True, 1e-5, use_bias=False)
    (y,) = run_forward(np, attrs, [x, gamma])
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, xhat * gamma, rtol=1e-12)
    assert check_gradients(attrs, [x, gamma], rng) == 15 + 5
    grads = run_backward(np, attrs, [x, gamma], [y], [np.ones_like(y)])
    assert len(grads) == 2


def test_layer_norm_without_bias_partitionings():
    rng = np.random.default_rng(5)
    attrs = LayerNormAttrs((-1,), True, 1e-5, use_bias=False)
    n = check_all_partitionings(np, attrs, [rng.standard_normal((4, 4, 6))], [rng.standard_normal(6)], rng,
                                rtol=1e-10, atol=1e-12)
    assert n >= 4
