"""The Z3 verifier: hand-written rules (Unity Fig. 11, the linear data/model/reduction-parallel laws,
the Megatron MLP) are proved; false rules never are; the axioms are consistent; children are killed
at their time limit and run under a memory limit.

Dims count from the innermost (FlexFlow's convention): on x [batch, in], features = 0, batch = 1."""

import time

import pytest
from flexrt.search.substitutions.axioms import Z3Algebra
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
from flexrt.search.substitutions.verify import (
    Status,
    check_axioms,
    check_rule,
    rule_terms,
    verify_rule,
    verify_rules,
)

from flexrt.errors import GraphError

X, Y, W, W2 = Slot(-1), Slot(-2), Slot(-3), Slot(-4)
S = Slot


def op(t, *inputs, **params):
    return PatternOp(t, inputs, tuple(params.items()))


def part(d, k, x): return op("OP_PARTITION", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
def comb(d, k, x): return op("OP_COMBINE", x, PM_PARALLEL_DIM=d, PM_PARALLEL_DEGREE=k)
def repl(k, x): return op("OP_REPLICATE", x, PM_PARALLEL_DEGREE=k)
def red(k, x): return op("OP_REDUCE", x, PM_PARALLEL_DEGREE=k)
def lin(x, w, acti=0): return op("OP_LINEAR", x, w, PM_ACTI=acti)
def relu(x): return op("OP_RELU", x)
def smul(s, x): return op("OP_SCALAR_MULTIPLY", x, PM_SCALAR=s)
def concat(ax, a, b): return op("OP_CONCAT", a, b, PM_AXIS=ax, PM_NUM_INPUTS=2)


def rule(name, src, dst, outputs=None):
    return Rule(name, src, dst, outputs or (OutputMap(len(src) - 1, 0, len(dst) - 1, 0),))


TRUE_RULES = [
    # Unity Fig. 11a: relu accepts spatial (row = batch) partitioning.
    rule("fig11a_relu_spatial", [relu(X)], [part(1, 2, X), relu(S(0)), comb(1, 2, S(1))]),
    # Unity Fig. 11b in our operators: an add of two products is one product over the concatenated
    # operands, computed reduction-parallel, so the add becomes a Reduce (the pieces of the
    # partitioned concats are exactly the original operands: the concat moves no data).
    rule("fig11b_add_to_concat_reduce",
         [lin(X, W), lin(Y, W2), op("OP_EW_ADD", S(0), S(1))],
         [concat(0, X, Y), concat(1, W, W2), part(0, 2, S(0)), part(1, 2, S(1)), lin(S(2), S(3)), red(2, S(4))]),
    rule("linear_data_parallel", [lin(X, W, 2)],
         [part(1, 2, X), repl(2, W), lin(S(0), S(1), 2), comb(1, 2, S(2))]),
    rule("linear_model_parallel", [lin(X, W)],
         [repl(2, X), part(0, 2, W), lin(S(0), S(1)), comb(0, 2, S(2))]),
    rule("linear_reduction_parallel", [lin(X, W)],
         [part(0, 2, X), part(1, 2, W), lin(S(0), S(1)), red(2, S(2))]),
    rule("unity_linear_reduce", [red(2, X), lin(S(0), W)], [repl(2, W), lin(X, S(0)), red(2, S(1))]),
    rule("linear_acti_is_relu", [lin(X, W, 2)], [lin(X, W), relu(S(0))]),
    rule("taso_linear_add_w", [lin(X, W), lin(X, W2), op("OP_EW_ADD", S(0), S(1))],
         [op("OP_EW_ADD", W, W2), lin(X, S(0))]),
    # Megatron's MLP (Fig. 10) in one rule: model-parallel first linear, relu on the pieces,
    # reduction-parallel second linear, one Reduce.
    rule("megatron_mlp", [lin(X, W), relu(S(0)), lin(S(1), W2)],
         [repl(2, X), part(0, 2, W), lin(S(0), S(1)), relu(S(2)), part(1, 2, W2), lin(S(3), S(4)), red(2, S(5))]),
    # Two outputs: split commutes with relu.
    Rule("split_relu_two_outputs", [relu(X), op("OP_SPLIT", S(0), PM_AXIS=1, PM_NUM_OUTPUTS=2)],
         [op("OP_SPLIT", X, PM_AXIS=1, PM_NUM_OUTPUTS=2), relu(S(0, 0)), relu(S(0, 1))],
         (OutputMap(1, 0, 1, 0), OutputMap(1, 1, 2, 0))),
]

FALSE_RULES = [
    rule("relu_is_identity", [relu(X)], [smul(1, X)]),
    rule("x_equals_y", [smul(1, X)], [smul(1, Y)]),
    rule("relu_partition_wrong_dim", [relu(X)], [part(1, 2, X), relu(S(0)), comb(0, 2, S(1))]),
    # relu of partial sums is not the relu of their sum
    rule("reduction_parallel_through_relu", [lin(X, W, 2)],
         [part(0, 2, X), part(1, 2, W), lin(S(0), S(1), 2), red(2, S(2))]),
]


@pytest.fixture(scope="module")
def true_results():
    return {r.name: r for r in verify_rules(TRUE_RULES, timeout_s=5, jobs=2)}


@pytest.fixture(scope="module")
def false_results():
    return {r.name: r for r in verify_rules(FALSE_RULES, timeout_s=2, jobs=2)}


@pytest.mark.parametrize("r", TRUE_RULES, ids=lambda r: r.name)
def test_verify_rules_proves_true_rule(true_results, r):
    res = true_results[r.name]
    assert res.status is Status.PROVED, str(res)
    assert res.verified and res.strategy in res.tried[-1]
    assert res.seconds < 5


@pytest.mark.slow
@pytest.mark.parametrize("r", FALSE_RULES, ids=lambda r: r.name)
def test_verify_rules_never_proves_false_rule(false_results, r):
    res = false_results[r.name]
    assert res.status in (Status.REFUTED, Status.UNKNOWN), str(res)
    assert not res.verified
    assert len(res.tried) >= 2 or res.status is Status.REFUTED  # more than one strategy before giving up


def test_verify_rules_keeps_order_and_reports_progress():
    seen = []
    rs = TRUE_RULES[:3]
    out = verify_rules(rs, timeout_s=5, jobs=2, progress=lambda i, r: seen.append(i))
    assert [r.name for r in out] == [r.name for r in rs]
    assert sorted(seen) == [0, 1, 2]


@pytest.mark.slow
def test_axioms_are_consistent():
    res = check_axioms(timeout_s=8, jobs=2)
    assert len(res) == 4
    assert all(r.status is not Status.PROVED for r in res), f"the axioms prove a false rule: {res}"


def test_child_is_killed_at_its_hard_time_limit():
    # MBQI on a false rule ignores Z3's own timeout for minutes; the parent kills the child.
    t0 = time.perf_counter()
    res = verify_rule(FALSE_RULES[0], timeout_s=0.5, strategies=("mbqi",))
    assert res.status is Status.UNKNOWN
    assert res.tried[0].startswith("mbqi:")
    assert time.perf_counter() - t0 < 60


def test_child_runs_under_a_memory_limit():
    with pytest.raises(GraphError, match="exited before it was ready"):
        verify_rule(TRUE_RULES[0], timeout_s=1, memory_mb=40)


def test_rule_terms_share_inputs_and_map_split_outputs():
    alg = Z3Algebra()
    pairs = rule_terms(TRUE_RULES[-1], alg)
    assert [(str(a), str(b)) for a, b in pairs] == [
        ("split0(1, source1.point, relu(in0))", "relu(split0(1, destination0.point, in0))"),
        ("split1(1, source1.point, relu(in0))", "relu(split1(1, destination0.point, in0))")]


def test_untranslatable_rule_is_unknown_not_an_error():
    r = rule("softmax", [op("OP_SOFTMAX", X)], [op("OP_SOFTMAX", X)])
    res = check_rule(r)
    assert res.status is Status.UNKNOWN and res.tried == ("concrete:none", "translate:error")
    assert "OP_SOFTMAX" in res.detail


def test_check_rule_in_process_proves_fig11a():
    assert check_rule(TRUE_RULES[0], timeout_s=5).status is Status.PROVED


@pytest.mark.parametrize("r", [FALSE_RULES[0], rule("add_is_mul", [op("OP_EW_ADD", X, Y)], [op("OP_EW_MUL", Y, X)]),
                               rule("relu_before_scaling_by_minus_one", [relu(X)], [smul(-1, X)])],
                         ids=lambda r: r.name)
def test_a_false_rule_whose_sides_differ_on_random_inputs_is_refuted_before_z3(r):
    res = check_rule(r, timeout_s=2)
    assert res.status is Status.REFUTED and res.strategy == "concrete" and res.tried == ("concrete:sat",)
    assert "values differ" in res.detail


@pytest.mark.parametrize("name", ["conv_merge_grouped", "conv_relu_add", "conv_concat_swapped", "bn_batch_parallel",
                                  "sigmoid_is_tanh", "layernorm_concat_normalized_dim"])
def test_a_false_rule_of_typed_operators_is_refuted_on_its_source_graph(name):
    """Convolutions, batch norms and layer norms do not type on the 3-d inputs of FlexFlow's
    convention: the concrete step builds the rule's source on its operators' shapes (images,
    grouped kernels, channel vectors), rewrites it and compares, with no Z3."""
    from tests.search.test_subst_operators import FALSE
    r = next(r for r in FALSE if r.name == name)
    res = check_rule(r, timeout_s=2, strategies=("concrete",))
    assert res.status is Status.REFUTED and res.tried == ("concrete:sat",), res
    assert "rewritten at its first match" in res.detail or "values differ" in res.detail


def test_no_shipped_rule_is_refuted_concretely():
    """Every rule of the shipped library holds (or does not type) on random inputs: the concrete
    refutation never contradicts the verifier's proofs (a sample, every 7th rule)."""
    import importlib.resources as resources
    from flexrt.search.substitutions.rule import load_rules
    from flexrt.search.substitutions.verify import _values_differ
    rules = load_rules(str(resources.files("flexrt.configs") / "substitutions" / "library.json"))
    assert [r.name for r in rules[::7] if _values_differ(r)] == []
