"""The law for the shipped, verified library: every rule, applied where its source occurs inside a
larger graph, leaves the computation unchanged (both graphs evaluated with the NumPy kernels on
random inputs)."""

from __future__ import annotations

import dataclasses
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.ir.op_type import OpType
from flexrt.ir.ops import ElementUnaryAttrs
from flexrt.ir.pcg import TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.fingerprint import to_pcg
from flexrt.errors import FlexrtError
from flexrt.search.substitutions.library import (cut_counterexample, cut_source, keeps_values, load_library,
                                                 rule_input_shapes)
from flexrt.search.substitutions.match import find_matches, try_apply
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
from flexrt.search.substitutions.verify import Status, check_rule


def law_holds(pcg, rule, match, seed: int) -> bool:
    """Rewrite at ``match``; both graphs on the same random inputs give the same outputs."""
    return keeps_values(pcg, rule, match, seed)

RULES = load_library()


def source_graph(rule):
    """The rule's source as a PCG, on the shapes the generator found it on (``rule_input_shapes``;
    rank-3 inputs for the batch-matmul family's rules that hold no batch matmul)."""
    shapes = rule_input_shapes(rule)
    try:
        return to_pcg(rule.src, shapes)
    except FlexrtError:
        return to_pcg(rule.src, {k: TensorShape((4,) * 3, s.dtype) if s.rank == 2 and s.dtype.is_floating else s
                                 for k, s in shapes.items()})


def test_the_library_is_shipped_and_verified():
    assert len(RULES) >= 1000
    assert all(r.applicable for r in RULES)
    assert {len(r.src) for r in RULES} <= {1, 2, 3}
    kinds = {op.type for r in RULES for op in r.src + r.dst}
    assert {"OP_BIAS_ADD", "OP_SOFTMAX", "OP_BATCHMATMUL", "OP_LAYERNORM", "OP_EMBEDDING", "OP_SIGMOID",
            "OP_GELU", "OP_CONV2D"} <= kinds
    assert any(len(op.inputs) == 3 for r in RULES for op in r.src + r.dst if op.type == "OP_LINEAR")  # a bias


NEW_TYPES = ("OP_BIAS_ADD", "OP_SOFTMAX", "OP_BATCHMATMUL", "OP_LAYERNORM", "OP_EMBEDDING", "OP_SIGMOID", "OP_TANH",
             "OP_GELU", "OP_ELU", "OP_EXP", "OP_SIN", "OP_COS", "OP_CONV2D")
NEW_RULES = [r for r in RULES if any(op.type in NEW_TYPES or (op.type == "OP_LINEAR" and len(op.inputs) == 3)
                                     for op in r.src + r.dst)]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, max(0, len(NEW_RULES) - 1)), seed=st.integers(0, 2**16))
def test_every_rule_with_a_new_operator_keeps_the_computation(index, seed):
    rule = NEW_RULES[index]
    g, _ = source_graph(rule)
    matches = find_matches(g, rule)
    assert matches, f"{rule.name} does not match its own source"
    assert law_holds(g, rule, matches[0], seed), f"{rule.name} changed the computation"


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(RULES) - 1), seed=st.integers(0, 2**16), consume=st.booleans())
def test_every_shipped_rule_keeps_the_computation(index, seed, consume):
    rule = RULES[index]
    g, refs = source_graph(rule)
    if consume:  # the rewrite must hand the replaced outputs to their readers
        for m in rule.outputs:
            ref = refs[m.src_op][m.src_ts]
            if g.shape(ref).sum_degree == 1:
                g.add_node(ElementUnaryAttrs(OpType.RELU), [TensorRef(ref.node, ref.index)])
    matches = find_matches(g, rule)
    assert matches, f"{rule.name} does not match its own source"
    for m in matches:
        assert law_holds(g, rule, m, seed), f"{rule.name} changed the computation at {m}"


SPLIT_RULES = [r for r in RULES if any(op.type == "OP_SPLIT" for op in r.src)]


def test_rules_with_a_split_keep_the_computation_where_it_cuts_unequally():
    """A source split matches a split at any point (Inception's 64 and 48 channels), and the rules
    are proved for every point: built with every split cut after its first entry, each rule's source
    either no longer types (its operators need equal halves) or is rewritten, and keeps its values."""
    rewritten = 0
    for i, rule in enumerate(SPLIT_RULES):
        g, matches = cut_source(rule) or (None, ())
        for m in matches:
            if try_apply(g, rule, m) is not None:
                assert law_holds(g, rule, m, i), f"{rule.name} changed the computation at {m}"
                rewritten += 1
    assert len(SPLIT_RULES) >= 100 and rewritten >= 50, (len(SPLIT_RULES), rewritten)


def test_a_rotation_is_refuted_by_a_cut_counterexample_and_the_library_has_none():
    """Swapping a split's parts back together is the identity's rotation: true only when the split
    cuts in the middle, so it is refuted concretely before Z3; no shipped rule is."""
    split = PatternOp("OP_SPLIT", (Slot(-1),), (("PM_AXIS", 0), ("PM_NUM_OUTPUTS", 2)))
    swap = PatternOp("OP_CONCAT", (Slot(0, 1), Slot(0, 0)), (("PM_AXIS", 0),))
    relu = PatternOp("OP_RELU", (Slot(-1),))
    rotation = Rule("rotate_relu", (relu, dataclasses.replace(split, inputs=(Slot(0),)),
                                    PatternOp("OP_CONCAT", (Slot(1, 1), Slot(1, 0)), (("PM_AXIS", 0),))),
                    (split, swap, PatternOp("OP_RELU", (Slot(1),))), (OutputMap(2, 0, 2, 0),))
    assert "changes the values" in cut_counterexample(rotation)
    res = check_rule(rotation)
    assert res.status is Status.REFUTED and res.strategy == "concrete"
    assert not [r.name for r in SPLIT_RULES if cut_counterexample(r)]


@pytest.mark.slow
def test_every_shipped_rule_once():
    for rule in RULES:
        g, _ = source_graph(rule)
        for m in find_matches(g, rule)[:1]:
            assert law_holds(g, rule, m, 0), rule.name
