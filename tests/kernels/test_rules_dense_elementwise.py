"""Parallelization rules of linear and element-wise operators, checked against brute force."""

import numpy as np
import pytest

from flexrt.ir import ActiMode, OpType, ParallelTensorShape as P
from flexrt.ir.ops import ElementBinaryAttrs, ElementUnaryAttrs, LinearAttrs
from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY
from flexrt.kernels.validation import check_all_partitionings, check_rejected


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("act", [ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_RELU])
@pytest.mark.parametrize("xshape", [(4, 8), (4, 2, 8)])
def test_linear_partitionings_match_unpartitioned(use_bias, act, xshape):
    rng = np.random.default_rng(1)
    attrs = LinearAttrs(12, use_bias, act)
    x = rng.standard_normal(xshape)
    ws = [rng.standard_normal((8, 12))] + ([rng.standard_normal(12)] if use_bias else [])
    n = check_all_partitionings(np, attrs, [x], ws, rng)
    # sample, out, in and partial axes (4 of them for rank 2 without activation) on 2 and 4 pieces
    assert n >= (8 if act is ActiMode.AC_MODE_NONE else 5)


def test_linear_reduction_rejected_with_activation():
    attrs = LinearAttrs(6, False, ActiMode.AC_MODE_RELU)
    e = check_rejected(attrs, [P.of((4, 8), (1, 2)), P.of((8, 6), (2, 1))])
    assert "dim 1" in str(e)


def test_linear_weight_must_match_input_degrees():
    attrs = LinearAttrs(6, False)
    e = check_rejected(attrs, [P.of((4, 8), (2, 1)), P.of((8, 6))])  # weight not replicated
    assert "require [8, 6] c2" in str(e)


@pytest.mark.parametrize("op", sorted(ELEMENT_UNARY, key=lambda t: t.value))
def test_unary_partitionings(op):
    rng = np.random.default_rng(2)
    x = rng.uniform(0.5, 2.0, (4, 6))
    attrs = ElementUnaryAttrs(op, 1.5)
    assert check_all_partitionings(np, attrs, [x], [], rng) >= 4


@pytest.mark.parametrize("op", [OpType.RELU, OpType.SCALAR_ADD, OpType.EXP])
def test_nonlinear_unary_rejects_partial_sums(op):
    e = check_rejected(ElementUnaryAttrs(op, 1.0), [P.of((4, 6), sum_degree=2)])
    assert "partial sums" in str(e)


@pytest.mark.parametrize("op", sorted(ELEMENT_BINARY, key=lambda t: t.value))
@pytest.mark.parametrize("shapes", [((4, 6), (4, 6)), ((4, 6), (6,)), ((4, 1), (1, 6))])
def test_binary_partitionings(op, shapes):
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(0.5, 2.0, s) for s in shapes)
    assert check_all_partitionings(np, ElementBinaryAttrs(op), [a, b], [], rng) >= 2


def test_binary_mismatched_partial_sums_rejected():
    e = check_rejected(ElementBinaryAttrs(OpType.EW_ADD), [P.of((4, 6), sum_degree=2), P.of((4, 6))])
    assert "sum" in str(e)
    check_rejected(ElementBinaryAttrs(OpType.EW_MUL), [P.of((4, 6), sum_degree=2), P.of((4, 6), sum_degree=2)])
