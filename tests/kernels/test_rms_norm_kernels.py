"""RMSNorm's and BiasAdd's kernels: forwards against the NumPy formula (and FlexFlow's kernel order of
operations in float32), backwards against finite differences and closed forms, and every accepted
partitioning against the unpartitioned result."""

import numpy as np
import pytest
from flexrt.kernels.gradcheck import check_gradients
from flexrt.kernels.registry import run_backward, run_forward
from flexrt.kernels.validation import check_all_partitionings

from flexrt.ir.ops import BiasAddAttrs, RMSNormAttrs

SHAPES = [(6,), (3, 5), (2, 3, 4), (2, 2, 3, 4)]


def rms_norm(x, gamma, eps):
    return x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + eps) * gamma


@pytest.mark.parametrize("dims", SHAPES)
@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_rms_norm_forward_matches_the_formula(dims, eps):
    rng = np.random.default_rng(0)
    x, gamma = rng.standard_normal(dims), rng.standard_normal(dims[-1])
    (y,) = run_forward(np, RMSNormAttrs(eps, dims[-1]), [x, gamma])
    np.testing.assert_allclose(y, rms_norm(x, gamma, eps), rtol=1e-13, atol=1e-15)
    assert y.shape == x.shape and y.dtype == np.float64


def test_rms_norm_forward_float32_matches_flexflow_kernel_order():
    """FlexFlow: rms = rsqrt(sum(x*x) / N + eps), y = x * rms, out = y * w (accumulated in float32 here)."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 20)).astype(np.float32), rng.standard_normal(20).astype(np.float32)
    (y,) = run_forward(np, RMSNormAttrs(1e-6, 20), [x, w])
    rms = (1.0 / np.sqrt((x * x).sum(-1, keepdims=True) / np.float32(20) + np.float32(1e-6))).astype(np.float32)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x * rms * w, rtol=2e-6, atol=1e-7)


def test_rms_norm_of_a_constant_row_is_gamma_up_to_sign():
    x = np.array([[3.0, 3.0, 3.0, 3.0], [-2.0, -2.0, -2.0, -2.0]])
    gamma = np.array([1.0, 2.0, 0.5, -1.0])
    (y,) = run_forward(np, RMSNormAttrs(1e-12, 4), [x, gamma])
    np.testing.assert_allclose(y, [gamma, -gamma], rtol=1e-10)


@pytest.mark.parametrize("dims", SHAPES)
def test_rms_norm_backward_matches_finite_differences(dims):
    rng = np.random.default_rng(2)
    x, gamma = rng.standard_normal(dims), rng.standard_normal(dims[-1])
    n = check_gradients(RMSNormAttrs(1e-3, dims[-1]), [x, gamma], rng)
    assert n == min(x.size, 64) + dims[-1]


def test_rms_norm_backward_closed_form_on_one_row():
    """For one row of N values: dx_k = r * g_k - x_k * r^3 * sum_j(g_j * x_j) / N, g = dy * gamma."""
    rng = np.random.default_rng(3)
    x, gamma, dy = rng.standard_normal(5), rng.standard_normal(5), rng.standard_normal(5)
    eps = 1e-2
    (y,) = run_forward(np, RMSNormAttrs(eps, 5), [x, gamma])
    dx, dgamma = run_backward(np, RMSNormAttrs(eps, 5), [x, gamma], [y], [dy])
    r = 1 / np.sqrt(np.mean(x ** 2) + eps)
    jac = np.diag(r * gamma) - np.outer(x, x * gamma) * r ** 3 / 5  # jac[k, j] = dy_j / dx_k
    np.testing.assert_allclose(dx, jac @ dy, rtol=1e-12)
    np.testing.assert_allclose(dgamma, dy * x * r, rtol=1e-12)


def test_rms_norm_gamma_gradient_sums_over_rows():
    rng = np.random.default_rng(4)
    x, gamma, dy = rng.standard_normal((3, 4, 6)), rng.standard_normal(6), rng.standard_normal((3, 4, 6))
    (y,) = run_forward(np, RMSNormAttrs(1e-5, 6), [x, gamma])
    _, dgamma = run_backward(np, RMSNormAttrs(1e-5, 6), [x, gamma], [y], [dy])
    np.testing.assert_allclose(dgamma, (dy * rms_norm(x, 1.0, 1e-5)).sum(axis=(0, 1)), rtol=1e-12)
    assert dgamma.shape == (6,)


@pytest.mark.parametrize("dims, minimum", [((4, 4, 6), 9), ((4, 6), 5), ((2, 4, 2, 3), 12)])
def test_rms_norm_partitionings_match_unpartitioned(dims, minimum):
    rng = np.random.default_rng(5)
    n = check_all_partitionings(np, RMSNormAttrs(1e-5, dims[-1]), [rng.standard_normal(dims)],
                                [rng.standard_normal(dims[-1])], rng, rtol=1e-10, atol=1e-12)
    assert n >= minimum


@pytest.mark.parametrize("dims", [(3, 5), (2, 3, 4)])
def test_bias_add_forward_and_backward(dims):
    rng = np.random.default_rng(6)
    x, b, dy = rng.standard_normal(dims), rng.standard_normal(dims[-1]), rng.standard_normal(dims)
    (y,) = run_forward(np, BiasAddAttrs(), [x, b])
    np.testing.assert_array_equal(y, x + b)
    dx, db = run_backward(np, BiasAddAttrs(), [x, b], [y], [dy])
    np.testing.assert_array_equal(dx, dy)
    assert not np.shares_memory(dx, dy)
    np.testing.assert_allclose(db, dy.reshape(-1, dims[-1]).sum(0), rtol=1e-12)
    assert check_gradients(BiasAddAttrs(), [x, b], rng) == min(x.size, 64) + dims[-1]


@pytest.mark.parametrize("dims, minimum", [((4, 4, 4), 20), ((4, 6), 13)])
def test_bias_add_partitionings_match_unpartitioned(dims, minimum):
    """Including the last dimension (bias cut with it) and partial sums (bias added once)."""
    rng = np.random.default_rng(7)
    n = check_all_partitionings(np, BiasAddAttrs(), [rng.standard_normal(dims)], [rng.standard_normal(dims[-1])],
                                rng, rtol=1e-12, atol=1e-12)
    assert n >= minimum
