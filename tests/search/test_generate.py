"""The substitution generator: enumeration, exact fingerprints, TASO's prunings, and every generated
rule checked concretely with the float NumPy kernels, piece by piece."""

import itertools

import numpy as np
import pytest

from flexrt.ir.tensor_shape import TensorShape
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.kernels.pieces import gather, scatter
from flexrt.search.substitutions.fingerprint import P, apply_op, evaluate_side, full_value, to_pcg, value_digest
from flexrt.search.substitutions.generate import COUNT_LABELS, catalog, generate
from flexrt.search.substitutions.rule import PatternOp, Rule, Slot

X = Slot(-1, 0)
PART0 = (("PM_PARALLEL_DEGREE", 2), ("PM_PARALLEL_DIM", 0))
RED = (("PM_PARALLEL_DEGREE", 2),)


@pytest.fixture(scope="module")
def size2():
    return generate(max_ops=2, seed=0)


def _sig(ops):
    """A rule side as comparable data, external inputs kept."""
    return tuple((o.type, o.params, o.inputs) for o in ops)


def _has_rule(rules, a, b):
    a, b = _sig(a), _sig(b)
    return any({_sig(r.src), _sig(r.dst)} == {a, b} for r in rules)


# ---- known rules ------------------------------------------------------------------------------
def test_generate_size1_finds_commutativity_and_add_self_is_scale():
    res = generate(max_ops=1)
    add_ab = [PatternOp("OP_EW_ADD", (X, Slot(-2, 0)))]
    add_ba = [PatternOp("OP_EW_ADD", (Slot(-2, 0), X))]
    mul_ab = [PatternOp("OP_EW_MUL", (X, Slot(-2, 0)))]
    mul_ba = [PatternOp("OP_EW_MUL", (Slot(-2, 0), X))]
    assert _has_rule(res.rules, add_ab, add_ba)
    assert _has_rule(res.rules, mul_ab, mul_ba)
    assert _has_rule(res.rules, [PatternOp("OP_EW_ADD", (X, X))],
                     [PatternOp("OP_SCALAR_MULTIPLY", (X,), (("PM_SCALAR", 2),))])
    assert len(res.rules) == 3  # and nothing else at size 1 (e.g. no relu(x) == x)


def test_generate_relu_is_not_idempotent_under_the_polynomial(size2):
    relu2 = [PatternOp("OP_RELU", (X,)), PatternOp("OP_RELU", (Slot(0, 0),))]
    assert not _has_rule(size2.rules, relu2, [PatternOp("OP_RELU", (X,))])
    assert not any(_sig(r.src) == _sig(relu2) or _sig(r.dst) == _sig(relu2) for r in size2.rules)


def test_generate_relu_commutes_with_partition_fig11a(size2):
    part_relu = [PatternOp("OP_PARTITION", (X,), PART0), PatternOp("OP_RELU", (Slot(0, 0),))]
    relu_part = [PatternOp("OP_RELU", (X,)), PatternOp("OP_PARTITION", (Slot(0, 0),), PART0)]
    assert _has_rule(size2.rules, part_relu, relu_part)


def _brief(ops):
    """A side without input names: (type, parallel dim) per operator, in order."""
    return [(o.type, o.param("PM_PARALLEL_DIM")) for o in ops]


def test_generate_finds_linear_data_and_model_parallel_laws():
    # partition(linear(x, w), d) == linear(partition(x) / replicate(x), replicate(w) / partition(w)):
    # d = 1 (FlexFlow's numbering: the sample dim) is data parallelism, d = 0 (out) model parallelism
    keep = ("OP_LINEAR", "OP_PARTITION", "OP_REPLICATE", "OP_COMBINE", "OP_REDUCE")
    res = generate(max_ops=3, shapes=((4, 4), (4, 4)), choices=[c for c in catalog() if c.type in keep])
    for d in (0, 1):
        hits = [r for r in res.rules if _brief(r.dst) == [("OP_LINEAR", None), ("OP_PARTITION", d)]
                and sorted(_brief(r.src), key=str) == sorted([("OP_PARTITION", d), ("OP_REPLICATE", None),
                                                               ("OP_LINEAR", None)], key=str)]
        assert len(hits) == 1, d
        (r,) = hits
        assert len(r.external_inputs("src")) == 2  # the general rule; its x == w instance is pruned
    assert res.counts["after_specializations"] < res.counts["confirmed"]


def test_generate_partition_then_combine_identity_pairs_appear():
    # combine(relu(partition(x))) == relu(x): partitioning is undone around an element-wise op (3 vs 1 ops)
    res = generate(max_ops=3, choices=[c for c in catalog() if c.type in ("OP_RELU", "OP_PARTITION", "OP_COMBINE")],
                   shapes=((4, 4),))
    for d in (0, 1):
        pd = (("PM_PARALLEL_DEGREE", 2), ("PM_PARALLEL_DIM", d))
        src = [PatternOp("OP_PARTITION", (X,), pd), PatternOp("OP_RELU", (Slot(0, 0),)),
               PatternOp("OP_COMBINE", (Slot(1, 0),), pd)]
        assert _has_rule(res.rules, src, [PatternOp("OP_RELU", (X,))])


# ---- prunings ---------------------------------------------------------------------------------
def test_generate_no_side_holds_two_equal_tensors(size2):
    # transpose(transpose(t)) == t and combine(partition(t)) == t never survive
    for r in size2.rules:
        for side in (r.src, r.dst):
            for i, op in enumerate(side):
                for s in op.inputs:
                    if not s.external:
                        pair = (side[s.op].type, op.type)
                        assert pair not in {("OP_TRANSPOSE", "OP_TRANSPOSE"), ("OP_PARTITION", "OP_COMBINE"),
                                            ("OP_COMBINE", "OP_PARTITION")} or side[s.op].params != op.params


def test_generate_no_rule_has_a_common_operator_on_external_inputs(size2):
    for r in size2.rules:
        src = {(o.type, o.params, o.inputs) for o in r.src if all(s.external for s in o.inputs)}
        dst = {(o.type, o.params, o.inputs) for o in r.dst if all(s.external for s in o.inputs)}
        assert not src & dst, r.name


def test_generate_no_two_rules_equal_under_input_renaming(size2):
    def canon(r, perm):
        ren = lambda ops: tuple((o.type, o.params, tuple(Slot(perm.get(s.op, s.op), s.ts) for s in o.inputs))
                                for o in ops)
        return frozenset((ren(r.src), ren(r.dst)))
    seen = set()
    for r in size2.rules:
        ext = sorted(r.external_inputs("src"))
        keys = {canon(r, dict(zip(ext, p))) for p in itertools.permutations(ext)}
        assert not keys & seen, r.name
        seen |= keys


def _output_groups(rule):
    """Number of output groups computed by disjoint operators on both sides (1: not decomposable)."""
    parent = list(range(len(rule.outputs)))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for side, key in ((rule.src, lambda m: (m.src_op, m.src_ts)), (rule.dst, lambda m: (m.dst_op, m.dst_ts))):
        deps = []
        for op in side:
            deps.append({len(deps)}.union(*(deps[s.op] for s in op.inputs if not s.external)))
        owner = {}
        for i, m in enumerate(rule.outputs):
            for d in deps[key(m)[0]]:
                if d in owner:
                    parent[find(i)] = find(owner[d])
                owner.setdefault(d, i)
    return len({find(i) for i in range(len(parent))})


def test_generate_no_rule_decomposes_into_independent_rules(size2):
    assert size2.counts["after_decomposable"] < size2.counts["after_common_supergraph"]
    assert all(_output_groups(r) == 1 for r in size2.rules)


def test_generate_specializations_are_instances_of_kept_rules():
    some = generate(max_ops=2, shapes=TWO)
    every = generate(max_ops=2, shapes=TWO, drop_specializations=False)
    assert every.counts["rules"] > some.counts["rules"] == some.counts["after_specializations"]
    kept = {(_sig(r.src), _sig(r.dst)) for r in some.rules}
    dropped = [r for r in every.rules if (_sig(r.src), _sig(r.dst)) not in kept]
    assert dropped and all(len(r.external_inputs("src")) == 1 for r in dropped)  # x, y merged into x


def test_generate_both_directions_adds_reversed_rules():
    one = generate(max_ops=1)
    both = generate(max_ops=1, both_directions=True)
    assert len(both.rules) == len(one.rules) + 1  # a + b -> b + a is its own reverse
    r = both.rules[len(one.rules)]  # 2x -> x + x
    assert [o.type for o in r.src] == ["OP_SCALAR_MULTIPLY"] and [o.type for o in r.dst] == ["OP_EW_ADD"]


def test_generate_destination_uses_only_source_inputs(size2):
    assert all(r.applicable for r in size2.rules)


def test_generate_counts_monotone_through_prunings(size2):
    c = size2.counts
    assert c["enumerated"] >= c["valid"] >= c["graphs"] > c["fingerprint_classes"] > 0
    chain = [c["candidate_pairs"], c["after_common_subgraph"], c["after_common_supergraph"], c["after_decomposable"],
             c["after_renaming"], c["after_normal_form"], c["after_via_smaller"], c["confirmed"],
             c["after_specializations"], c["rules"]]
    assert chain == sorted(chain, reverse=True) and c["rules"] > 30
    assert c["confirmed"] + c["rejected_second_input_set"] == c["after_via_smaller"]
    assert c["after_specializations"] + c["dropped_dst_inputs"] <= c["confirmed"]
    assert len(size2.rules) == c["rules"] and size2.elapsed_s > 0


def test_generate_summary_lists_every_count(size2):
    lines = size2.summary().splitlines()
    assert len(lines) == len(COUNT_LABELS) + 1  # every count, then the time
    assert lines[-2].startswith("rules") and lines[-2].split()[-1] == str(size2.counts["rules"])


TWO = ((4, 4), (4, 4))


def test_generate_is_deterministic_for_a_seed():
    a, b = generate(max_ops=2, shapes=TWO, seed=0), generate(max_ops=2, shapes=TWO, seed=0)
    assert a.rules == b.rules and a.counts == b.counts and len(a.rules) > 20


def test_generate_other_seed_finds_the_same_rules():
    a, b = generate(max_ops=2, shapes=TWO, seed=0), generate(max_ops=2, shapes=TWO, seed=7)
    assert {(_sig(r.src), _sig(r.dst)) for r in a.rules} == {(_sig(r.src), _sig(r.dst)) for r in b.rules}


def test_generate_rules_round_trip_through_flexflow_json(size2):
    assert all(Rule.from_json(r.to_json()) == r for r in size2.rules)


# ---- soundness, concretely ---------------------------------------------------------------------
def _float_inputs(shapes, rng, scale=1):
    """Random float inputs of a rule's input shapes (sizes times ``scale``), partial sums split at random."""
    out = {}
    for k, ps in shapes.items():
        ps = ParallelTensorShape.of(tuple(n * scale for n in ps.sizes), ps.shard_degrees, ps.sum_degree,
                                    ps.discard_copy_degree)
        out[k] = scatter(np, rng.standard_normal(ps.sizes), ps, rng)
    return out


def _check_rule_on_floats(rule, shapes, seed, scale=1):
    inputs = _float_inputs(shapes, np.random.default_rng(seed), scale)
    src = evaluate_side(rule.src, inputs)
    dst = evaluate_side(rule.dst, inputs)
    for m in rule.outputs:
        a, b = src[m.src_op][m.src_ts], dst[m.dst_op][m.dst_ts]
        assert a.shape == b.shape, f"{rule.name}: output {m} parallel shapes {a.shape} vs {b.shape}"
        np.testing.assert_allclose(gather(np, a), gather(np, b), rtol=1e-9, atol=1e-9, err_msg=rule.name)
        for k in a.pieces:  # piece by piece, not just the gathered tensor
            np.testing.assert_allclose(a.pieces[k], b.pieces[k], rtol=1e-9, atol=1e-9, err_msg=rule.name)


def test_generate_every_size2_rule_holds_on_random_floats(size2):
    for r, shapes in zip(size2.rules, size2.input_shapes, strict=True):
        _check_rule_on_floats(r, shapes, seed=1)
        _check_rule_on_floats(r, shapes, seed=2, scale=2)  # found on 4 x 4, holds on 8 x 8


def test_generate_with_partial_sum_inputs_finds_reduce_rules():
    partial = ParallelTensorShape.of((4, 4), sum_degree=2)
    res = generate(max_ops=2, shapes=((4, 4), partial, partial))
    reduce_rules = [(r, sh) for r, sh in zip(res.rules, res.input_shapes) if
                    any(o.type == "OP_REDUCE" for o in r.src + r.dst)]
    assert len(reduce_rules) >= 5
    assert _has_rule(res.rules, [PatternOp("OP_TRANSPOSE", (X,)), PatternOp("OP_REDUCE", (Slot(0, 0),), RED)],
                     [PatternOp("OP_REDUCE", (X,), RED), PatternOp("OP_TRANSPOSE", (Slot(0, 0),))])
    for r, shapes in reduce_rules:
        assert any(ps.sum_degree == 2 for ps in shapes.values())
        _check_rule_on_floats(r, shapes, seed=3)


@pytest.mark.slow
def test_generate_size3_rules_hold_on_random_floats():
    res = generate(max_ops=3, shapes=((4, 4), (4, 4)))
    assert res.counts["rules"] > 300
    for r, shapes in zip(res.rules, res.input_shapes, strict=True):
        _check_rule_on_floats(r, shapes, seed=2)
        _check_rule_on_floats(r, shapes, seed=3, scale=2)


def test_generate_rule_sides_build_as_flexrt_pcgs(size2):
    shapes = {k: TensorShape((4, 4)) for k in range(-3, 0)}
    for r in size2.rules:
        for side in (r.src, r.dst):
            used = {s.op for o in side for s in o.inputs if s.external}
            g, refs = to_pcg(side, {k: shapes[k] for k in used})
            vals = evaluate_side(side, {k: np.zeros((4, 4)) for k in used})
            for i, outs in enumerate(vals):
                assert [g.shape(ref) for ref in refs[i]] == [v.shape for v in outs]


# ---- fingerprints ------------------------------------------------------------------------------
def test_fingerprint_relu_is_the_polynomial_mod_p():
    x = np.array([[0, 1, 2, P - 1]], dtype=np.int64).repeat(4, axis=0)
    (out,) = apply_op(PatternOp("OP_RELU", (X,)), [full_value(x)])
    np.testing.assert_array_equal(gather(np, out), (x * x + 3 * x) % P)


def test_fingerprint_hashes_the_degrees():
    x = full_value(np.arange(16, dtype=np.int64).reshape(4, 4))
    (parts,) = apply_op(PatternOp("OP_PARTITION", (X,), PART0), [x])
    (copies,) = apply_op(PatternOp("OP_REPLICATE", (X,), (("PM_PARALLEL_DEGREE", 2),)), [x])
    assert len({value_digest(x), value_digest(parts), value_digest(copies)}) == 3
    np.testing.assert_array_equal(gather(np, parts), gather(np, x))


def test_fingerprint_linear_products_do_not_overflow():
    big = full_value(np.full((4, 4), P - 1, dtype=np.int64))
    (out,) = apply_op(PatternOp("OP_LINEAR", (X, Slot(-2, 0)), (("PM_ACTI", 0),)), [big, big])
    np.testing.assert_array_equal(gather(np, out), np.full((4, 4), (4 * (P - 1) ** 2) % P))
