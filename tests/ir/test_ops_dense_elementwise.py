"""Shape inference of linear and element-wise operators against NumPy, and their bad inputs."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flexrt.errors import ShapeError
from flexrt.ir import OpType, TensorShape, op_def
from flexrt.ir.op_type import ELEMENT_BINARY, ELEMENT_UNARY
from flexrt.ir.ops import ElementBinaryAttrs, ElementUnaryAttrs, LinearAttrs
from flexrt.kernels import run_forward

dims = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def infer(attrs, *shapes):
    return op_def(attrs.op_type).output_shapes(attrs, [TensorShape(tuple(s)) for s in shapes])


@settings(max_examples=100)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(1, 6), st.booleans())
def test_linear_shape_matches_numpy(xs, out, bias):
    attrs = LinearAttrs(out, bias)
    (y,) = infer(attrs, xs)
    ws = op_def(OpType.LINEAR).weight_shapes(attrs, [TensorShape(tuple(xs))])
    x = np.ones(xs)
    (ref,) = run_forward(np, attrs, [x] + [np.ones(w.dims) for w in ws])
    assert y.dims == ref.shape == (x @ np.ones((xs[-1], out))).shape
    assert [w.dims for w in ws] == [(xs[-1], out)] + ([(out,)] if bias else [])


@settings(max_examples=100)
@given(dims, st.sampled_from(sorted(ELEMENT_UNARY, key=lambda t: t.value)))
def test_unary_shape_matches_numpy(xs, op):
    attrs = ElementUnaryAttrs(op, 2.0)
    (y,) = infer(attrs, xs)
    (ref,) = run_forward(np, attrs, [np.full(xs, 0.5)])
    assert y.dims == ref.shape


@settings(max_examples=200)
@given(dims, dims, st.sampled_from(sorted(ELEMENT_BINARY, key=lambda t: t.value)))
def test_binary_broadcast_matches_numpy(a, b, op):
    attrs = ElementBinaryAttrs(op)
    try:
        expected = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        with pytest.raises(ShapeError, match="do not broadcast"):
            infer(attrs, a, b)
        return
    (y,) = infer(attrs, a, b)
    assert y.dims == expected


def test_flops_formulas():
    attrs = LinearAttrs(10, True)
    x, w, b, y = TensorShape((64, 784)), TensorShape((784, 10)), TensorShape((10,)), TensorShape((64, 10))
    assert op_def(OpType.LINEAR).flops(attrs, [x, w, b], [y]) == 2 * 64 * 784 * 10 + 64 * 10
    # the same formula on one piece of a 2-way reduction-parallel split
    xp, wp = TensorShape((64, 392)), TensorShape((392, 10))
    assert op_def(OpType.LINEAR).flops(LinearAttrs(10, False), [xp, wp], [y]) == 2 * 64 * 392 * 10


def test_bad_inputs():
    with pytest.raises(ShapeError, match=r"linear: input \[5\] f32 has rank 1; valid ranks: 2 or more"):
        infer(LinearAttrs(3), [5])
    with pytest.raises(ShapeError, match="out_channels must be >= 1"):
        LinearAttrs(0)
    with pytest.raises(ShapeError, match="not an element-wise unary operator"):
        ElementUnaryAttrs(OpType.EW_ADD)
    with pytest.raises(ShapeError, match="not an element-wise binary operator"):
        ElementBinaryAttrs(OpType.RELU)
