"""ParallelTensorShape: validity, piece shape, total degree; parallel-op shape rules and their laws."""

import pytest
from hypothesis import given, settings, strategies as st

from flexrt.errors import ShapeError
from flexrt.ir import DataType, OpType, ParallelDim, ParallelTensorShape as P, TensorShape, op_def
from flexrt.ir.ops import (AllReduceAttrs, BatchAttrs, CombineAttrs, PipelineAttrs, ReductionAttrs,
                           RepartitionAttrs, ReplicateAttrs, backward_partner, inverse)
from flexrt.ir.parallel_tensor import divisors


def test_piece_shape_and_total_degree():
    s = P.of((64, 784), (2, 4), sum_degree=3, discard_copy_degree=5, dtype=DataType.DT_DOUBLE)
    assert s.piece_shape == TensorShape((32, 196), DataType.DT_DOUBLE)
    assert s.total_degree == 2 * 4 * 3 * 5
    assert str(s) == "[64/2, 784/4] s3 c5 f64"
    assert s.tensor_shape == TensorShape((64, 784), DataType.DT_DOUBLE)


def test_non_dividing_degree_names_dimension_and_valid_degrees():
    with pytest.raises(ShapeError, match=r"degree 3 does not divide dimension 1 of size 784 \(shape \[64, 784\]\); "
                                         r"valid degrees: 1, 2, 4, 7, 8, 14"):
        P.of((64, 784), (1, 3))
    with pytest.raises(ShapeError, match="sum_degree must be an int >= 1"):
        P.of((4,), sum_degree=0)
    with pytest.raises(ShapeError, match="2 degrees given for a tensor of rank 1"):
        P.of((4,), (1, 1))
    with pytest.raises(ShapeError, match="size must be an int >= 1"):
        ParallelDim(0)
    with pytest.raises(ShapeError, match=r"dimension 1 of shape \[3, -1\]"):
        TensorShape((3, -1))


@given(st.integers(1, 5000))
def test_divisors(n):
    ds = divisors(n)
    assert ds == [d for d in range(1, n + 1) if n % d == 0]


shapes = st.lists(st.sampled_from([1, 2, 4, 6, 8, 12]), min_size=1, max_size=4)


@st.composite
def pshapes(draw):
    sizes = draw(shapes)
    degs = [draw(st.sampled_from(divisors(s))) for s in sizes]
    return P.of(sizes, degs, draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 3])))


def rule(attrs, s):
    (out,) = op_def(attrs.op_type).parallel_rule(attrs, [s])
    return out


@settings(max_examples=200)
@given(pshapes(), st.integers(0, 3), st.sampled_from([1, 2, 3, 4]))
def test_partition_then_combine_is_identity(s, dim, degree):
    dim %= s.rank
    try:
        p = rule(RepartitionAttrs(dim, degree), s)
    except ShapeError:
        assert s.sizes[dim] % (s.dims[dim].degree * degree) != 0
        return
    assert p.dims[dim].degree == s.dims[dim].degree * degree and p.total_degree == s.total_degree * degree
    assert rule(inverse(RepartitionAttrs(dim, degree)), p) == s
    assert rule(backward_partner(RepartitionAttrs(dim, degree)), p) == s


@settings(max_examples=200)
@given(pshapes(), st.sampled_from([1, 2, 3, 4]))
def test_replicate_reduction_allreduce_degrees(s, degree):
    r = rule(ReplicateAttrs(degree), s)
    assert r.discard_copy_degree == s.discard_copy_degree * degree and r.sizes == s.sizes
    assert backward_partner(ReplicateAttrs(degree)) == ReductionAttrs(degree)
    assert inverse(ReplicateAttrs(degree)) is None  # Reduction(Replicate(x)) = d * x (Unity §5.3)
    if s.sum_degree % degree == 0:
        red = rule(ReductionAttrs(degree), s)
        assert red.sum_degree * degree == s.sum_degree
        ar = rule(AllReduceAttrs(degree), s)
        assert ar == rule(ReplicateAttrs(degree), red)  # AllReduce = Reduction then Replicate
    else:
        with pytest.raises(ShapeError, match="does not divide the sum degree"):
            rule(ReductionAttrs(degree), s)


@settings(max_examples=100)
@given(pshapes(), st.integers(0, 3), st.sampled_from([1, 2, 3]))
def test_pipeline_then_batch_restores_size(s, dim, degree):
    dim %= s.rank
    attrs = PipelineAttrs(dim, degree)
    try:
        p = rule(attrs, s)
    except ShapeError:
        assert s.dims[dim].piece_size % degree != 0
        return
    assert p.sizes[dim] * degree == s.sizes[dim] and p.dims[dim].degree == s.dims[dim].degree
    assert rule(backward_partner(attrs), p) == s
    assert backward_partner(BatchAttrs(dim, degree)) == attrs


def test_parallel_op_attr_errors():
    with pytest.raises(ShapeError, match="degree must be an int >= 1"):
        ReplicateAttrs(0)
    with pytest.raises(ShapeError, match="dim 5 is out of range for a tensor of rank 2"):
        rule(RepartitionAttrs(5, 2), P.of((4, 4)))
    with pytest.raises(ShapeError, match="combine: degree 3 does not divide the degree 2"):
        rule(CombineAttrs(0, 3), P.of((4, 4), (2, 1)))
    assert op_def(OpType.REPLICATE).is_parallel_op and not op_def(OpType.LINEAR).is_parallel_op
