"""Reverse (FlexFlow's Reverse op): shape inference, parallel axes, FLOPs, bad attributes and JSON round trip."""

import numpy as np
import pytest
from flexrt.kernels.validation import check_rejected

from flexrt.errors import ShapeError
from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir import ParallelTensorShape as P
from flexrt.ir.ops import ReverseAttrs
from flexrt.ir.parallel_axes import validate_axes
from flexrt.ir.registry import op_def
from flexrt.ir.serialize import attrs_from_json, attrs_to_json

F = DataType.DT_FLOAT


def T(*dims, dtype=F):
    return TensorShape(tuple(dims), dtype)


@pytest.mark.parametrize("dims, axis", [((4,), 0), ((4, 6), 1), ((4, 6), -1), ((2, 3, 5), 0), ((2, 3, 5, 7), -2)])
def test_reverse_output_shape_is_the_input_shape(dims, axis):
    opdef = op_def(OpType.REVERSE)
    attrs = ReverseAttrs(axis)
    validate_axes(opdef, attrs, [T(*dims)])
    (out,) = opdef.output_shapes(attrs, [T(*dims, dtype=DataType.DT_DOUBLE)])
    assert out == T(*dims, dtype=DataType.DT_DOUBLE) and out.dims == np.flip(np.empty(dims), axis).shape


@pytest.mark.parametrize("axis, dims", [(2, [0, 1]), (-3, [1, 2]), (1, [0, 2])])
def test_reverse_axes_are_every_dimension_but_the_reversed_one(axis, dims):
    axes = op_def(OpType.REVERSE).parallel_axes(ReverseAttrs(axis), [T(2, 4, 6)])
    assert [a.name for a in axes] == [f"dim{d}" for d in dims] + ["replica", "partial"]


def test_reverse_rejects_a_cut_of_the_reversed_dimension():
    e = check_rejected(ReverseAttrs(1), [P.of((4, 6), (1, 2))])
    assert "dim 1" in str(e) and "cannot parallelize" in str(e)


def test_reverse_has_no_flops():
    opdef = op_def(OpType.REVERSE)
    assert opdef.flops(ReverseAttrs(0), [T(3, 4)], [T(3, 4)]) == 0
    assert opdef.backward_flops(ReverseAttrs(0), [T(3, 4)], [T(3, 4)]) == 0


def test_reverse_rejects_bad_axis():
    with pytest.raises(ShapeError, match="axis 2 is out of range for a tensor of rank 2; valid: -2..1"):
        op_def(OpType.REVERSE).output_shapes(ReverseAttrs(2), [T(4, 6)])
    for bad in (1.0, True, "1"):
        with pytest.raises(ShapeError, match="reverse: axis must be an int"):
            ReverseAttrs(bad)


def test_reverse_attrs_json_round_trip():
    attrs = ReverseAttrs(-2)
    assert attrs_from_json("reverse", attrs_to_json(attrs)) == attrs
