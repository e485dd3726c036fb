"""Every axiom of the verifier holds on real tensors: each is evaluated with flexrt's NumPy kernels on
random float tensors over random shapes, dims and degrees (hypothesis), so an unsound axiom fails."""

from types import SimpleNamespace

import numpy as np
import pytest
from flexrt.search.substitutions.axioms import (
    ACTI,
    AGGR,
    AXES,
    AXIOMS,
    GROUP,
    POINT,
    SIZE,
    WINDOW,
    DEG,
    DIM,
    SCALAR,
    UNARY,
    Axiom,
    Z3Algebra,
    axiom_by_name,
    check_axiom,
    z3_axioms,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from flexrt.search.substitutions.axiom_table import CONV_WINDOWS
from flexrt.search.substitutions.rule import UNARY_TYPES


def _draw_ints(draw, ax: Axiom, rank: int) -> dict:
    dom = {DIM: st.integers(0, rank - 1), DEG: st.integers(1, 4), ACTI: st.integers(0, 4),
           SCALAR: st.integers(-3, 3), UNARY: st.integers(0, len(UNARY_TYPES) - 1), AXES: st.integers(1, rank - 1),
           AGGR: st.integers(0, 1), WINDOW: st.sampled_from(CONV_WINDOWS), GROUP: st.integers(1, 2),
           POINT: st.integers(1, 3), SIZE: st.integers(1, 4)}
    return {n: draw(dom[d]) for n, d in ax.ints}


@pytest.mark.parametrize("ax", AXIOMS, ids=lambda a: a.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_axiom_holds_on_random_tensors(ax, data):
    rank = data.draw(st.sampled_from(ax.ranks))
    ints = _draw_ints(data.draw, ax, rank)
    assume(not ax.guard or all(ax.guard(None, SimpleNamespace(**ints))))
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    assert check_axiom(ax, rank, ints, np.random.default_rng(seed)) is None


def test_axiom_table_names_and_comments():
    names = [a.name for a in AXIOMS]
    assert len(names) == len(set(names))
    assert all(a.comment and "=" in a.comment for a in AXIOMS)
    assert len(AXIOMS) >= 76  # Unity: TASO's 43 + 33 parallel properties
    assert sum(a.parallel for a in AXIOMS) >= 33
    assert axiom_by_name("combine_partition").parallel


def test_concrete_check_fails_an_unsound_axiom():
    wrong = [Axiom("relu_is_identity", "relu(x) = x", lambda A, v: (A.relu(v.x), v.x), ("x",)),
             Axiom("add_is_mul", "ewadd(a, b) = ewmul(a, b)",
                   lambda A, v: (A.ewadd(v.a, v.b), A.ewmul(v.a, v.b)), ("a", "b")),
             # same values, different parallel shape: a layout is part of what an axiom states
             Axiom("partition_any_dim", "partition(0, 2, x) = partition(1, 2, x)",
                   lambda A, v: (A.partition(0, 2, v.x), A.partition(1, 2, v.x)), ("x",)),
             Axiom("replicate_is_identity", "replicate(2, x) = x", lambda A, v: (A.replicate(2, v.x), v.x), ("x",)),
             # batch statistics: a piece of the batch normalizes with its own (flexrt's data parallelism)
             Axiom("bn_partition_batch", "bn(0, partition(3, 2, x), replicate(2, s), replicate(2, b)) = ...",
                   lambda A, v: (A.bn(0, A.partition(3, 2, v.x), A.replicate(2, v.s), A.replicate(2, v.b)),
                                 A.partition(3, 2, A.bn(0, v.x, v.s, v.b))), ("x", "s", "b"),
                   shapes=lambda v, z: {"x": (4, 2, 3, 3), "s": (2,), "b": (2,)}, ranks=(4,)),
             # a split cuts where it is told: at a's end it gives a, not b
             Axiom("split_swaps", "split(0, 0, dim(a, 0), concat(0, a, b)) = b",
                   lambda A, v: (A.split(0, 0, A.dim(v.a, 0), A.concat(0, v.a, v.b)), v.b), ("a", "b")),
             # split undoes concat only at the concat's point: cut elsewhere, the parts are not a and b
             Axiom("split_anywhere", "split(0, 1, 1, concat(1, a, b)) = a",
                   lambda A, v: (A.split(0, 1, 1, A.concat(1, v.a, v.b)), v.a), ("a", "b"),
                   shapes=lambda v, z: {"a": (2, 3), "b": (2, 3)})]
    rng = np.random.default_rng(0)
    for ax in wrong:
        assert check_axiom(ax, max(2, *ax.ranks), {}, rng) is not None, ax.name


def test_every_axiom_is_a_quantified_z3_formula_with_a_trigger():
    import z3
    alg = Z3Algebra()
    formulas = z3_axioms(alg)
    assert len(formulas) == len(AXIOMS)
    for ax, f in zip(AXIOMS, formulas):
        assert z3.is_quantifier(f) and f.is_forall(), ax.name
        assert f.num_patterns() >= 1, f"{ax.name} has no E-matching pattern"
