"""Parallelization operators on real pieces: every one preserves the logical value (Unity §3.3)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flexrt.errors import ShapeError
from flexrt.ir import ParallelTensorShape as P
from flexrt.ir.ops import (AllReduceAttrs, CombineAttrs, PipelineAttrs, ReductionAttrs, RepartitionAttrs,
                           ReplicateAttrs, backward_partner)
from flexrt.ir.parallel_tensor import divisors
from flexrt.kernels.pieces import apply_parallel_op, gather, scatter


@st.composite
def cases(draw):
    sizes = draw(st.lists(st.sampled_from([2, 4, 6, 8]), min_size=1, max_size=3))
    degs = [draw(st.sampled_from(divisors(s))) for s in sizes]
    shape = P.of(sizes, degs, draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2])))
    return shape, draw(st.integers(0, 2**32 - 1))


def ops_for(shape):
    out = [ReplicateAttrs(2), ReplicateAttrs(3)]
    for d, pd in enumerate(shape.dims):
        out += [RepartitionAttrs(d, k) for k in divisors(pd.piece_size) if k > 1][:2]
        out += [CombineAttrs(d, k) for k in divisors(pd.degree) if k > 1]
    out += [ReductionAttrs(k) for k in divisors(shape.sum_degree) if k > 1]
    out += [AllReduceAttrs(k) for k in divisors(shape.sum_degree) if k > 1]
    return out


@settings(max_examples=80, deadline=None)
@given(cases())
def test_parallel_ops_preserve_value(case):
    shape, seed = case
    rng = np.random.default_rng(seed)
    full = rng.standard_normal(shape.sizes)
    value = scatter(np, full, shape, rng)
    for attrs in ops_for(shape):
        out = apply_parallel_op(np, attrs, value)
        assert set(out.pieces) == set(out.keys())
        for key, piece in out.pieces.items():
            assert piece.shape == out.shape.piece_shape.dims, (attrs, key)
        np.testing.assert_allclose(gather(np, out), full, rtol=1e-12, atol=1e-12)


def test_partition_combine_round_trip_restores_pieces_exactly():
    rng = np.random.default_rng(0)
    full = rng.standard_normal((8, 6))
    v = scatter(np, full, P.of((8, 6), (2, 3)), rng)
    attrs = RepartitionAttrs(0, 2)
    back = apply_parallel_op(np, backward_partner(attrs), apply_parallel_op(np, attrs, v))
    assert back.shape == v.shape
    for k in v.pieces:
        np.testing.assert_array_equal(back.pieces[k], v.pieces[k])


def test_reduction_sums_partials_and_replicas_must_agree():
    rng = np.random.default_rng(1)
    full = rng.standard_normal((4, 4))
    v = scatter(np, full, P.of((4, 4), sum_degree=4), rng)
    red = apply_parallel_op(np, ReductionAttrs(2), v)
    assert red.shape.sum_degree == 2
    np.testing.assert_allclose(gather(np, red), full)
    rep = apply_parallel_op(np, ReplicateAttrs(2), scatter(np, full, P.of((4, 4))))
    rep.pieces[((0, 0), 0, 1)] = rep.pieces[((0, 0), 0, 1)] + 1.0
    with pytest.raises(ShapeError, match="replica 1 .* differs from replica 0"):
        gather(np, rep)


def test_pipeline_pieces_are_the_runtimes_job():
    v = scatter(np, np.zeros((4, 4)), P.of((4, 4)))
    with pytest.raises(ShapeError, match="scheduled by the runtime"):
        apply_parallel_op(np, PipelineAttrs(0, 2), v)
