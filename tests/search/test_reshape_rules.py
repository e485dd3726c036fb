"""Reshape in the rule language: its axioms hold on real tensors (and wrong ones fail), the generated
rules are proved for every target or refuted concretely, the rewriter chooses a destination
reshape's target, and every shipped reshape rule keeps the computation on real graphs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import FlexrtError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import BiasAddAttrs, ElementUnaryAttrs, InputAttrs, LinearAttrs, ReshapeAttrs, SoftmaxAttrs
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.axioms import Axiom, NumpyAlgebra, axiom_by_name, check_axiom
from flexrt.search.substitutions.axioms_reshape import numpy_target
from flexrt.search.substitutions.library import keeps_values, load_library
from flexrt.search.substitutions.match import find_matches, rewrite
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
from flexrt.search.substitutions.semantics import pattern_of
from flexrt.search.substitutions.verify import Status, check_rule

RESHAPE_RULES = [r for r in load_library() if any(op.type == "OP_RESHAPE" for op in r.src + r.dst)]


@pytest.mark.parametrize("s, t", [((4, 3, 2, 1), (6, 2, 2, 1)), ((2, 2, 2, 3), (24, 1, 1, 1)),
                                  ((1, 6, 1, 4), (3, 8, 1, 1)), ((5, 1, 1, 1), (1, 5, 1, 1))])
def test_two_reshapes_are_one_on_real_tensors(s, t):
    """``reshape_reshape`` where both targets hold the tensor's elements (the random draws of
    test_axioms rarely make the counts agree)."""
    A, rng = NumpyAlgebra(), np.random.default_rng(0)
    x = A.value(rng.standard_normal(s), None, rng)
    ax = axiom_by_name("reshape_reshape")
    lhs, rhs = ax.law(A, SimpleNamespace(x=x, **{f"s{d}": s[d] for d in range(4)}, **{f"t{d}": t[d] for d in range(4)}))
    assert lhs.shape.sizes == numpy_target(s) and A.same(lhs, rhs) is None


def _sizes(s):
    return {f"s{d}": v for d, v in enumerate(s)}


def test_wrong_reshape_axioms_fail_on_real_tensors():
    rng = np.random.default_rng(1)
    anywhere = Axiom("softmax_through_any_reshape", "softmax(0, reshape(s, x)) = reshape(s, softmax(0, x))",
                     lambda A, v: (A.softmax(0, A.reshape((v.s0, v.s1, v.s2, v.s3), v.x)),
                                   A.reshape((v.s0, v.s1, v.s2, v.s3), A.softmax(0, v.x))), ("x",),
                     tuple((f"s{d}", "size") for d in range(4)), shapes=lambda v, z: {"x": (4, 3, 2)})
    assert check_axiom(anywhere, 3, _sizes((4, 3, 2, 1)), rng) is not None   # [4, 3, 2] -> [2, 3, 4]
    not_itself = Axiom("any_reshape_is_identity", "reshape(s, x) = x",
                       lambda A, v: (A.reshape((v.s0, v.s1, v.s2, v.s3), v.x), v.x), ("x",),
                       tuple((f"s{d}", "size") for d in range(4)), shapes=lambda v, z: {"x": (4, 3, 2)})
    assert check_axiom(not_itself, 3, _sizes((6, 4, 1, 1)), rng) is not None
    # the shipped ones, at the same sizes, hold
    assert check_axiom(axiom_by_name("reshape_softmax"), 3, _sizes((2, 3, 4, 1)), rng) is None
    assert check_axiom(axiom_by_name("reshape_identity"), 3, _sizes((2, 3, 4, 1)), rng) is None


def _chain(first: str, second: str) -> Rule:
    """first(reshape(x)) -> reshape(first(x)) style rules: ``first`` then ``second`` on one input."""
    return Rule(f"{first}_{second}", (PatternOp(first, (Slot(-1),)), PatternOp(second, (Slot(0),),
                                       (("PM_SOFTMAX_DIM", 0),) if second == "OP_SOFTMAX" else ())),
                (PatternOp(second, (Slot(-1),), (("PM_SOFTMAX_DIM", 0),) if second == "OP_SOFTMAX" else ()),
                 PatternOp(first, (Slot(0),))), (OutputMap(1, 0, 1, 0),))


def test_a_reshape_passes_an_element_wise_op_for_every_target_but_a_softmax_only_along_its_rows():
    relu = check_rule(_chain("OP_RESHAPE", "OP_RELU"))
    assert relu.status is Status.PROVED
    softmax = check_rule(_chain("OP_RESHAPE", "OP_SOFTMAX"))
    assert softmax.status is Status.REFUTED and softmax.strategy == "concrete", softmax
    assert not [r.name for r in RESHAPE_RULES if any(op.type == "OP_SOFTMAX" for op in r.src + r.dst)]


def test_the_library_has_verified_reshape_rules():
    kinds = {(tuple(op.type for op in r.src), tuple(op.type for op in r.dst)) for r in RESHAPE_RULES}
    assert len(RESHAPE_RULES) >= 15
    assert (("OP_RESHAPE", "OP_RELU"), ("OP_RELU", "OP_RESHAPE")) in kinds
    assert (("OP_RESHAPE", "OP_LINEAR"), ("OP_LINEAR", "OP_RESHAPE")) in kinds
    assert (("OP_LINEAR", "OP_RESHAPE"), ("OP_RESHAPE", "OP_LINEAR")) in kinds
    assert (("OP_RESHAPE", "OP_RELU", "OP_RESHAPE"), ("OP_RELU",)) in kinds


def _graph(b: int, s: int, h: int, o: int, inner: str) -> PCG:
    """x [b, s, h] -> reshape [b * s, h] -> ``inner`` -> reshape [b, s, -1], and a reshape that
    changes the features ([b, s * h]) into a softmax (no rule may move it)."""
    g = PCG()
    x = TensorRef(g.add_node(InputAttrs(TensorShape((b, s, h))), name="x"))
    w = TensorRef(g.add_node(InputAttrs(TensorShape((h, o))), name="w"))
    bias = TensorRef(g.add_node(InputAttrs(TensorShape((h,))), name="bias"))
    t = TensorRef(g.add_node(ReshapeAttrs((b * s, h)), [x], name="rows"))
    attrs = {"linear": (LinearAttrs(o, False), [t, w]), "relu": (ElementUnaryAttrs(OpType.RELU), [t]),
             "sigmoid": (ElementUnaryAttrs(OpType.SIGMOID), [t]), "bias": (BiasAddAttrs(), [t, bias]),
             "softmax": (SoftmaxAttrs(-1), [t])}[inner]
    t = TensorRef(g.add_node(attrs[0], attrs[1], name=f"op_{inner}"))
    g.add_node(ReshapeAttrs((b, s, -1)), [t], name="back")
    f = TensorRef(g.add_node(ReshapeAttrs((b, s * h)), [x], name="flat"))
    g.add_node(SoftmaxAttrs(-1), [f], name="flat_softmax")
    return g


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=st.integers(1, 3), s=st.integers(2, 3), h=st.integers(2, 4), o=st.integers(1, 3),
       inner=st.sampled_from(["linear", "relu", "sigmoid", "bias", "softmax"]), seed=st.integers(0, 2 ** 16))
def test_every_shipped_reshape_rule_keeps_the_computation(b, s, h, o, inner, seed):
    g = _graph(b, s, h, o, inner)
    checked = 0
    for rule in RESHAPE_RULES:
        for m in find_matches(g, rule):
            try:
                rw = rewrite(g, rule, m)
            except FlexrtError:   # no target fits: a refused rewrite
                continue
            assert keeps_values(g, rule, m, seed), (rule.name, str(m))
            assert g.node_by_name("flat_softmax").id not in m.nodes or inner == "softmax"
            checked += 1
            assert rw.pcg.validate() is None
    assert checked >= 1 or inner not in ("linear", "relu", "sigmoid")   # no shipped rule moves a reshape
                                                                       # past a softmax or a bias_add


def test_the_rewriter_chooses_a_reshape_target_from_the_matched_tensors():
    """linear(x, w) -> reshape becomes reshape -> linear: the new reshape's target is the replaced
    output's shape with x's features ([b * s, h]), a shape no matched tensor has."""
    g = PCG()
    x = TensorRef(g.add_node(InputAttrs(TensorShape((2, 3, 5))), name="x"))
    w = TensorRef(g.add_node(InputAttrs(TensorShape((5, 4))), name="w"))
    y = TensorRef(g.add_node(LinearAttrs(4, False), [x, w], name="fc"))
    g.add_node(ReshapeAttrs((6, 4)), [y], name="rows")
    rules = [r for r in RESHAPE_RULES if [op.type for op in r.src] == ["OP_LINEAR", "OP_RESHAPE"]
             and [op.type for op in r.dst] == ["OP_RESHAPE", "OP_LINEAR"]]
    assert rules
    rw = rewrite(g, rules[0], find_matches(g, rules[0])[0])
    added = [rw.pcg.node(n) for n in rw.added]
    assert [tuple(n.attrs.shape) for n in added if n.op_type is OpType.RESHAPE] == [(6, 5)]
    assert keeps_values(g, rules[0], find_matches(g, rules[0])[0])


def test_a_rule_reshape_is_between_tensors_of_rank_at_most_4():
    x4, x5 = TensorShape((2, 3, 4, 5)), TensorShape((2, 3, 4, 5, 6))
    assert pattern_of(ReshapeAttrs((6, 20)), [x4]).type == "OP_RESHAPE"
    assert pattern_of(ReshapeAttrs((6, 4, 30)), [x5]) is None
    assert pattern_of(ReshapeAttrs((2, 3, 4, 5, 1)), [x4]) is None
    assert math.prod(numpy_target((3, 1, 1, 1))) == 3 and numpy_target((3, 1, 1, 1)) == (1, 3)


def test_unity_removes_reshape_pairs_that_stop_data_parallelism():
    """[B, S, H] -> [B * S, H] -> relu -> [B, S, H]: flexrt's reshape is sample-parallel only where it
    keeps the first dimension, so each pair costs a gather and a scatter under data parallelism.
    Unity with the shipped reshape rules folds every pair away (``reshape(relu(reshape(x))) =
    relu(x)``) and finds a faster strategy than without them."""
    from flexrt.core import DataType, FFConfig, FFModel
    from flexrt.machine import load_machine
    from flexrt.search.unity import unity
    from flexrt.simulator.cost_model import AnalyticCostModel

    b, s, h = 64, 32, 256
    m = FFModel(FFConfig(["-b", str(b)]))
    t = m.create_tensor([b, s, h], DataType.DT_FLOAT)
    for i in range(3):
        r = m.relu(m.reshape(t, [b * s, h], name=f"rows{i}"), name=f"relu{i}")
        t = m.dense(m.reshape(r, [b, s, h], name=f"back{i}"), h, name=f"fc{i}")
    m.softmax(m.dense(t, 10, name="out"), name="sm")
    rules = load_library()
    machine = load_machine("dgx1_v100")
    without = unity(m.pcg, machine, AnalyticCostModel(), budget=50, progress=False,
                    rules=[r for r in rules if r not in RESHAPE_RULES])
    joint = unity(m.pcg, machine, AnalyticCostModel(), budget=50, progress=False, rules=rules)
    assert sum(n.op_type is OpType.RESHAPE for n in without.strategy.pcg.nodes) == 6
    assert not any(n.op_type is OpType.RESHAPE for n in joint.strategy.pcg.nodes)
    assert joint.cost_s < 0.8 * without.cost_s
