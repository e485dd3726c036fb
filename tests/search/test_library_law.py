"""The law for the shipped, verified library: every rule, applied where its source occurs inside a
larger graph, leaves the computation unchanged (both graphs evaluated with the NumPy kernels on
random inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.ir.op_type import OpType
from flexrt.ir.ops import ElementUnaryAttrs
from flexrt.ir.pcg import TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.fingerprint import to_pcg
from flexrt.search.substitutions.library import load_library
from flexrt.search.substitutions.match import find_matches
from flexrt.search.substitutions.evaluate import evaluate, random_inputs
from flexrt.search.substitutions.match import rewrite


def law_holds(pcg, rule, match, seed: int) -> bool:
    """Rewrite at ``match``; both graphs on the same random inputs give the same outputs (a
    destination may leave an output unused, e.g. the other half of a split: not compared)."""
    rw = rewrite(pcg, rule, match)
    rw.pcg.validate()
    inputs = random_inputs(pcg, np.random.default_rng(seed))
    before = evaluate(pcg, inputs)
    moved = dict(rw.replaced)
    after = evaluate(rw.pcg, inputs, [moved.get(ref, ref) for ref in before])
    return all(np.allclose(before[ref], after[moved.get(ref, ref)], rtol=1e-8, atol=1e-10) for ref in before)

RULES = load_library()


def test_the_library_is_shipped_and_verified():
    assert len(RULES) >= 1000
    assert all(r.applicable for r in RULES)
    assert {len(r.src) for r in RULES} <= {1, 2, 3}


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(RULES) - 1), seed=st.integers(0, 2**16), consume=st.booleans())
def test_every_shipped_rule_keeps_the_computation(index, seed, consume):
    rule = RULES[index]
    g, refs = to_pcg(rule.src, {k: TensorShape((4, 4)) for k in rule.external_inputs("src")})
    if consume:  # the rewrite must hand the replaced outputs to their readers
        for m in rule.outputs:
            ref = refs[m.src_op][m.src_ts]
            if g.shape(ref).sum_degree == 1:
                g.add_node(ElementUnaryAttrs(OpType.RELU), [TensorRef(ref.node, ref.index)])
    matches = find_matches(g, rule)
    assert matches, f"{rule.name} does not match its own source"
    for m in matches:
        assert law_holds(g, rule, m, seed), f"{rule.name} changed the computation at {m}"


@pytest.mark.slow
def test_every_shipped_rule_once():
    for rule in RULES:
        g, _ = to_pcg(rule.src, {k: TensorShape((4, 4)) for k in rule.external_inputs("src")})
        for m in find_matches(g, rule)[:1]:
            assert law_holds(g, rule, m, 0), rule.name
