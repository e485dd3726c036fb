"""RMSNorm and BiasAdd (the parts of FlexFlow's fused normalization layers): shape inference, weight
shapes, parallel axes, FLOPs and memory, bad attributes and dims, JSON round trips."""

import pytest
from flexrt.kernels.validation import check_rejected

from flexrt.errors import ShapeError
from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir import ParallelTensorShape as P
from flexrt.ir.ops import BiasAddAttrs, RMSNormAttrs
from flexrt.ir.parallel_axes import infer_parallel, validate_axes
from flexrt.ir.registry import AxisKind, op_def
from flexrt.ir.serialize import attrs_from_json, attrs_to_json

F, D = DataType.DT_FLOAT, DataType.DT_DOUBLE


def T(*dims, dtype=F):
    return TensorShape(tuple(dims), dtype)


@pytest.mark.parametrize("dims", [(7,), (4, 6), (2, 3, 5), (2, 3, 4, 8)])
def test_rms_norm_output_is_the_input_shape_and_gamma_the_last_dimension(dims):
    opdef = op_def(OpType.RMS_NORM)
    attrs = RMSNormAttrs(1e-6, dims[-1])
    x = T(*dims, dtype=D)
    validate_axes(opdef, attrs, [x])
    assert opdef.output_shapes(attrs, [x]) == (x,)
    assert opdef.weight_shapes(attrs, [x]) == (T(dims[-1], dtype=D),)
    assert opdef.weight_names(attrs) == ("gamma",)


def test_rms_norm_axes_are_every_dimension_but_the_last():
    axes = op_def(OpType.RMS_NORM).parallel_axes(RMSNormAttrs(1e-5, 6), [T(2, 4, 6)])
    assert [(a.name, a.kind) for a in axes] == [("dim0", AxisKind.SAMPLE), ("dim1", AxisKind.ATTRIBUTE),
                                                ("replica", AxisKind.REPLICA)]


def test_rms_norm_parallel_shapes_keep_gamma_whole():
    opdef, attrs = op_def(OpType.RMS_NORM), RMSNormAttrs(1e-5, 6)
    (out,) = infer_parallel(opdef, attrs, "rms", [P.of((4, 2, 6), (2, 2, 1)), P.of((6,), discard_copy_degree=4)])
    assert out == P.of((4, 2, 6), (2, 2, 1))


def test_rms_norm_rejects_a_cut_of_the_normalized_dimension():
    e = check_rejected(RMSNormAttrs(1e-5, 6), [P.of((4, 6), (1, 2)), P.of((6,), discard_copy_degree=1)])
    assert "dim 1" in str(e) and "cannot parallelize" in str(e)


def test_rms_norm_rejects_a_dim_that_is_not_the_last_dimension():
    with pytest.raises(ShapeError, match=r"rms_norm: dim 1 must equal the size of the last \(normalized\) "
                                         r"dimension of input \[8, 10, 20\] f32, which is 20; valid: dim=20"):
        op_def(OpType.RMS_NORM).output_shapes(RMSNormAttrs(1e-6, 1), [T(8, 10, 20)])
    with pytest.raises(ShapeError, match="which is 20"):
        op_def(OpType.RMS_NORM).weight_shapes(RMSNormAttrs(1e-6, 10), [T(8, 10, 20)])


def test_rms_norm_rejects_an_integer_input():
    with pytest.raises(ShapeError, match="rms_norm: input .* has dtype DT_INT32; valid: a floating type"):
        op_def(OpType.RMS_NORM).output_shapes(RMSNormAttrs(1e-6, 4), [T(2, 4, dtype=DataType.DT_INT32)])


@pytest.mark.parametrize("eps, dim, message", [
    (0.0, 4, "eps must be a number > 0"), (-1e-6, 4, "eps must be a number > 0"), ("1e-6", 4, "eps must be"),
    (True, 4, "eps must be"), (1e-6, 0, "dim must be an int >= 1"), (1e-6, 4.0, "dim must be an int"),
    (1e-6, True, "dim must be an int"),
])
def test_rms_norm_rejects_bad_attributes(eps, dim, message):
    with pytest.raises(ShapeError, match=f"rms_norm: {message}"):
        RMSNormAttrs(eps, dim)


def test_rms_norm_flops_and_saved_statistics():
    opdef, attrs, x = op_def(OpType.RMS_NORM), RMSNormAttrs(1e-5, 8), T(2, 3, 8)
    assert opdef.flops(attrs, [x], [x]) == 4 * 48
    assert opdef.backward_flops(attrs, [x], [x]) == 8 * 48
    assert opdef.extra_memory_bytes(attrs, [x], [x]) == 6 * 4  # one inverse RMS per row
    piece = T(1, 3, 8)
    assert opdef.extra_memory_bytes(attrs, [piece], [piece]) == 3 * 4


def test_rms_norm_attrs_json_round_trip():
    attrs = RMSNormAttrs(1e-6, 4096)
    assert attrs_to_json(attrs) == {"eps": 1e-6, "dim": 4096}
    assert attrs_from_json("rms_norm", attrs_to_json(attrs)) == attrs
    assert attrs_from_json("rms_norm", {"eps": 1, "dim": 3}) == RMSNormAttrs(1.0, 3)


@pytest.mark.parametrize("dims", [(4, 6), (2, 3, 5), (2, 3, 4, 8)])
def test_bias_add_shapes_and_axes(dims):
    opdef, attrs = op_def(OpType.BIAS_ADD), BiasAddAttrs()
    x = T(*dims)
    validate_axes(opdef, attrs, [x])
    assert opdef.output_shapes(attrs, [x]) == (x,)
    assert opdef.weight_shapes(attrs, [x]) == (T(dims[-1]),) and opdef.weight_names(attrs) == ("bias",)
    axes = opdef.parallel_axes(attrs, [x])
    r = len(dims)
    assert [a.name for a in axes] == [f"dim{d}" for d in range(r)] + ["replica", "partial"]
    assert axes[r - 1].kind is AxisKind.PARAMETER


def test_bias_add_cuts_the_bias_with_the_last_dimension():
    opdef, attrs = op_def(OpType.BIAS_ADD), BiasAddAttrs()
    (out,) = infer_parallel(opdef, attrs, "b", [P.of((4, 6), (1, 2)), P.of((6,), (2,))])
    assert out == P.of((4, 6), (1, 2))
    check_rejected(attrs, [P.of((4, 6), (1, 2)), P.of((6,), discard_copy_degree=2)])  # a whole bias for a slice


def test_bias_add_partial_sums_add_the_bias_once():
    opdef, attrs = op_def(OpType.BIAS_ADD), BiasAddAttrs()
    (out,) = infer_parallel(opdef, attrs, "b", [P.of((4, 6), sum_degree=2), P.of((6,), discard_copy_degree=2)])
    assert out == P.of((4, 6), sum_degree=2)
    assert opdef.piece_call(attrs, {"partial": 0}, {"partial": 2}) == (attrs, frozenset())
    assert opdef.piece_call(attrs, {"partial": 1}, {"partial": 2}) == (attrs, frozenset({1}))


@pytest.mark.parametrize("x, message", [(T(6), "has rank 1; valid ranks: 2 or more"),
                                        (T(2, 6, dtype=DataType.DT_INT64), "valid: a floating type")])
def test_bias_add_rejects_bad_inputs(x, message):
    with pytest.raises(ShapeError, match=f"bias_add: input .* {message}"):
        op_def(OpType.BIAS_ADD).output_shapes(BiasAddAttrs(), [x])


def test_bias_add_flops_and_json_round_trip():
    opdef, x = op_def(OpType.BIAS_ADD), T(2, 3, 8)
    assert opdef.flops(BiasAddAttrs(), [x], [x]) == 48 and opdef.backward_flops(BiasAddAttrs(), [x], [x]) == 48
    assert attrs_from_json("bias_add", attrs_to_json(BiasAddAttrs())) == BiasAddAttrs()
