"""``OP_REDUCE_SUM`` in the rule language, and Unity Fig. 16c (EmbeddingBag -> Embedding + sum).

The verifier proves the sum's laws (linearity, concat, partial sums, the embedding bag as a sum of
lookups) and refuses false ones; the Fig. 16c rewrite keeps a DLRM's computation, and the rewritten
model trains, under any strategy, to the original model's single-device weights.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import ReduceAttrs
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import load_machine
from flexrt.search.substitutions.families import generate_library
from flexrt.search.substitutions.match import apply, find_matches
from flexrt.search.substitutions.rule import Rule
from flexrt.search.substitutions.semantics import pattern_of, to_attrs
from flexrt.search.substitutions.verify import Status, verify_rules
from flexrt.strategy import data_parallel, random_strategy
from tests.runtime.test_central_law import MODELS, TOL, compare_with_one_device, weights_for
from tests.search.test_library_law import law_holds
from tests.search.test_subst_operators import S, W, X, Y, _rule, concat, op


def rsum(x, ax):
    return op("OP_REDUCE_SUM", x, axis=ax)


# Unity Fig. 16c: an embedding bag is the sum of its lookups along the bag (dim 1 from the innermost)
BAG_AS_SUM = _rule("bag_as_sum", [op("OP_EMBEDDING", X, W, aggr=1)],
                   [op("OP_EMBEDDING", X, W, aggr=0), rsum(S(0), 1)])
TRUE = [
    BAG_AS_SUM,
    _rule("sum_partial", [op("OP_PARTITION", X, parallel_dim=1, parallel_degree=2), rsum(S(0), 1),
                          op("OP_REDUCE", S(1), parallel_degree=2)], [rsum(X, 1)]),
    _rule("sum_of_concat", [concat(1, X, Y), rsum(S(0), 1)], [rsum(X, 1), rsum(Y, 1), op("OP_EW_ADD", S(0), S(1))]),
    _rule("sum_over_samples", [op("OP_LINEAR", X, W), rsum(S(0), 2)], [rsum(X, 2), op("OP_LINEAR", S(0), W)]),
    _rule("sums_commute", [rsum(X, 2), rsum(S(0), 0)], [rsum(X, 0), rsum(S(0), 1)]),
]
FALSE = [
    _rule("sum_relu", [op("OP_RELU", X), rsum(S(0), 1)], [rsum(X, 1), op("OP_RELU", S(0))]),
    _rule("sum_of_products", [op("OP_EW_MUL", X, Y), rsum(S(0), 1)],
          [rsum(X, 1), rsum(Y, 1), op("OP_EW_MUL", S(0), S(1))]),
    _rule("bag_sums_channels", [op("OP_EMBEDDING", X, W, aggr=1)],
          [op("OP_EMBEDDING", X, W, aggr=0), rsum(S(0), 0)]),
    _rule("sum_over_features", [op("OP_LINEAR", X, W), rsum(S(0), 0)], [rsum(X, 0), op("OP_LINEAR", S(0), W)]),
    _rule("sums_do_not_swap", [rsum(X, 2), rsum(S(0), 0)], [rsum(X, 0), rsum(S(0), 0)]),
]


def test_a_sum_round_trips_through_its_rule_operator():
    x = TensorShape((2, 3, 4))
    for axis in range(3):
        attrs = ReduceAttrs(OpType.REDUCE_SUM, (axis,))
        p = pattern_of(attrs, [x])
        assert p.type == "OP_REDUCE_SUM" and p.param("PM_AXIS") == 2 - axis and to_attrs(p, [x]) == attrs
    assert pattern_of(ReduceAttrs(OpType.REDUCE_SUM, (1,), keepdims=True), [x]) is None
    assert pattern_of(ReduceAttrs(OpType.REDUCE_SUM, (0, 1)), [x]) is None
    assert pattern_of(ReduceAttrs(OpType.MEAN, (1,)), [x]) is None


def test_the_verifier_proves_the_sums_laws_and_refuses_false_ones():
    for r in verify_rules(TRUE, timeout_s=10, jobs=2):
        assert r.status is Status.PROVED, r
    for r in verify_rules(FALSE, timeout_s=2, jobs=2):
        assert r.status is not Status.PROVED, r


def test_the_reduce_family_finds_fig16c_and_keeps_only_rules_with_a_sum():
    res = generate_library(["reduce"])
    keys = {(tuple((o.type, o.params) for o in r.src), tuple((o.type, o.params) for o in r.dst)) for r in res.rules}
    bag = (tuple((o.type, o.params) for o in BAG_AS_SUM.src), tuple((o.type, o.params) for o in BAG_AS_SUM.dst))
    assert bag in keys and (bag[1], bag[0]) in keys                 # both directions
    assert all(any(o.type == "OP_REDUCE_SUM" for o in r.src + r.dst) for r in res.rules)
    assert res.counts["family_reduce_without_required"] > 0


def _bag_rewritten(pcg):
    for m in find_matches(pcg, BAG_AS_SUM):
        pcg = apply(pcg, BAG_AS_SUM, m)
    return pcg


def test_fig16c_rewrites_dlrms_bags_and_keeps_the_computation():
    m, _ = MODELS["dlrm"](DataType.DT_DOUBLE)
    g = m.pcg
    matches = find_matches(g, BAG_AS_SUM)
    assert len(matches) == 2
    for i, mm in enumerate(matches):
        assert law_holds(g, BAG_AS_SUM, mm, seed=i)
    new = _bag_rewritten(g)
    assert {n.op_type for n in new.nodes} >= {OpType.REDUCE_SUM}
    assert all(n.attrs.aggr.name == "AGGR_MODE_NONE" for n in new.nodes if n.op_type is OpType.EMBEDDING)


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_fig16c_rewritten_dlrm_trains_like_the_model(seed, machine):
    m, loss = MODELS["dlrm"](DataType.DT_DOUBLE)
    base = m.pcg
    g = _bag_rewritten(base)
    try:
        strategy = random_strategy(g, machine, seed)
    except StrategyError:
        strategy = data_parallel(g, machine, 2)
    compare_with_one_device("fig16c", base, strategy, machine, loss, TOL[DataType.DT_DOUBLE],
                            weights_for(base, DataType.DT_DOUBLE))


def test_a_rule_with_a_sum_needs_its_axis():
    from flexrt.errors import GraphError
    from flexrt.search.substitutions.rule import OutputMap, check_rule_ops
    bad = Rule("r", (op("OP_REDUCE_SUM", X),), (op("OP_REDUCE_SUM", X, axis=0),), (OutputMap(0, 0, 0, 0),))
    with pytest.raises(GraphError, match="PM_AXIS"):
        check_rule_ops(bad, "rule[0]")
