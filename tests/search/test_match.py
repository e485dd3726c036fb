"""Pattern matching and rewriting with substitution rules: what matches, what is rejected, and the
law: applying a correct rule at any match of a random PCG leaves every output unchanged (evaluated
piece by piece with the NumPy kernels). Unity's examples (Fig. 11a, Fig. 11b, the Megatron chain of
Fig. 10) are applied and checked the same way; a wrong rule breaks the law."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import FlexrtError, ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import (CombineAttrs, ConcatAttrs, ElementBinaryAttrs, ElementUnaryAttrs, InputAttrs, LinearAttrs,
                           RepartitionAttrs, ReplicateAttrs, TransposeAttrs, WeightAttrs)
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.evaluate import evaluate, graph_outputs, random_inputs
from flexrt.search.substitutions.library import MEGATRON_CHAIN, keeps_values, unity_example_rules
from flexrt.search.substitutions.match import apply, degree_generic, find_matches, rewrite, rewrites, try_apply
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot

T = TensorRef
RELU = ElementUnaryAttrs(OpType.RELU)
ADD = ElementBinaryAttrs(OpType.EW_ADD)
MUL = ElementBinaryAttrs(OpType.EW_MUL)


def op(t, *inputs, **params):
    return PatternOp(t, tuple(Slot(i) if isinstance(i, int) else Slot(*i) for i in inputs),
                     tuple((f"PM_{k.upper()}", v) for k, v in params.items()))


def rule(name, src, dst, maps=None):
    maps = maps or [(len(src) - 1, 0, len(dst) - 1, 0)]
    return Rule(name, tuple(src), tuple(dst), tuple(OutputMap(*m) for m in maps))


def part(i, dim, d=2):
    return op("OP_PARTITION", i, parallel_dim=dim, parallel_degree=d)


def comb(i, dim, d=2):
    return op("OP_COMBINE", i, parallel_dim=dim, parallel_degree=d)


# Correct rules, written by hand (dimension 0 = innermost, 1 = rows of a matrix).
CORRECT = [
    rule("add_comm", [op("OP_EW_ADD", -1, -2)], [op("OP_EW_ADD", -2, -1)]),
    rule("partition_combine_inverse", [part(-1, 1), comb(0, 1), op("OP_RELU", 1)], [op("OP_RELU", -1)]),
    rule("linear_data_parallel", [op("OP_LINEAR", -1, -2)],
         [part(-1, 1), op("OP_REPLICATE", -2, parallel_degree=2), op("OP_LINEAR", 0, 1), comb(2, 1)]),
    rule("linear_reduction_parallel", [op("OP_LINEAR", -1, -2)],
         [part(-1, 0), part(-2, 1), op("OP_LINEAR", 0, 1), op("OP_REDUCE", 2, parallel_degree=2)]),
    rule("relu_over_partition", [part(-1, 0), op("OP_RELU", 0)], [op("OP_RELU", -1), part(0, 0)]),
    rule("relu_over_partition_rows", [part(-1, 1), op("OP_RELU", 0)], [op("OP_RELU", -1), part(0, 1)]),
    rule("add_over_partition", [part(-1, 1), part(-2, 1), op("OP_EW_ADD", 0, 1)],
         [op("OP_EW_ADD", -1, -2), part(0, 1)]),
    rule("add_past_combine", [comb(-1, 1), comb(-2, 1), op("OP_EW_ADD", 0, 1)],
         [op("OP_EW_ADD", -1, -2), comb(0, 1)]),
    *unity_example_rules().values(),
]
# Wrong rules: shapes stay valid, values do not.
WRONG = [
    rule("relu_distributes_over_add", [op("OP_EW_ADD", -1, -2), op("OP_RELU", 0)],
         [op("OP_RELU", -1), op("OP_RELU", -2), op("OP_EW_ADD", 0, 1)]),
    rule("add_is_mul", [op("OP_EW_ADD", -1, -2)], [op("OP_EW_MUL", -1, -2)]),
]


def mlp_block(batch=8, d_in=4, hidden=6, d_out=4):
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((batch, d_in))), name="x")
    w1 = g.add_node(WeightAttrs(TensorShape((d_in, hidden))), name="w1")
    w2 = g.add_node(WeightAttrs(TensorShape((hidden, d_out))), name="w2")
    h = g.add_node(LinearAttrs(hidden, False), [T(x), T(w1)], name="fc1")
    r = g.add_node(RELU, [T(h)], name="relu")
    g.add_node(LinearAttrs(d_out, False), [T(r), T(w2)], name="fc2")
    return g


def law_holds(pcg: PCG, r: Rule, match, seed: int = 0) -> bool:
    """Rewrite at ``match``: the graph's outputs are the old ones (a replaced one where it went) and
    both graphs give the same values on the same random inputs (``library.keeps_values``)."""
    rw = rewrite(pcg, r, match)
    moved = dict(rw.replaced)
    assert sorted(map(str, graph_outputs(rw.pcg))) == sorted(str(moved.get(ref, ref)) for ref in graph_outputs(pcg))
    return keeps_values(pcg, r, match, seed)


# ---- random PCGs --------------------------------------------------------------------------
@st.composite
def random_pcgs(draw):
    """A PCG over [8, 8] tensors: a base that the algebraic rules match (add, linear, relu, and an
    add of two linears), then random steps, single operators (relu, add, linear, partition, combine,
    replicate) or the chains the parallel rules look for (partition then relu or add, combine then
    relu or add); steps that do not fit the shapes are skipped."""
    g = PCG()
    x0, x1 = (T(g.add_node(InputAttrs(TensorShape((8, 8))))) for _ in range(2))
    w0, w1 = (T(g.add_node(WeightAttrs(TensorShape((8, 8))))) for _ in range(2))
    tensors = [x0, x1, T(g.add_node(ADD, [x0, x1]))]
    tensors.append(T(g.add_node(LinearAttrs(8, False), [tensors[-1], w0])))
    tensors.append(T(g.add_node(RELU, [tensors[-1]])))
    lin = [T(g.add_node(LinearAttrs(8, False), [x, w])) for x, w in ((x0, w0), (x1, w1))]
    tensors.append(T(g.add_node(ADD, lin)))

    def add(attrs, inputs):
        tensors.append(T(g.add_node(attrs, inputs)))
        return tensors[-1]

    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["relu", "add", "linear", "partition", "combine", "replicate",
                                     "partition-relu", "partition-add", "partition-combine-relu", "combine-relu",
                                     "combine-add", "combine-linear", "mul", "transpose", "concat", "self"]))
        a = draw(st.sampled_from(tensors[-3:]))  # recent tensors: chains of operators that rules match
        dim, degree = draw(st.sampled_from([0, 1])), draw(st.sampled_from([2, 4]))
        try:
            if kind == "relu":
                add(RELU, [a])
            elif kind in ("add", "mul"):
                same = [t for t in tensors if g.shape(t) == g.shape(a)]  # equal parallel shapes
                add(ADD if kind == "add" else MUL, [a, draw(st.sampled_from(same))])
            elif kind == "self":  # one tensor as both operands: add(x, x), linear(x, x), ...
                attrs = draw(st.sampled_from([ADD, MUL, ConcatAttrs(dim), LinearAttrs(8, False)]))
                add(attrs, [a, a])
            elif kind == "transpose":
                add(TransposeAttrs((1, 0)), [a])
            elif kind == "concat":
                same = [t for t in tensors if g.shape(t) == g.shape(a)]
                add(ConcatAttrs(dim), [a, draw(st.sampled_from(same))])
            elif kind == "linear":
                w = T(g.add_node(WeightAttrs(TensorShape((8, 8)))))
                if g.shape(a).dims[0].degree > 1:  # data parallel: the weight is replicated
                    w = T(g.add_node(ReplicateAttrs(g.shape(a).dims[0].degree), [w]))
                add(LinearAttrs(8, False), [a, w])
            elif kind == "replicate":
                add(ReplicateAttrs(2), [a])
            elif kind.startswith("partition"):
                p = add(RepartitionAttrs(dim, degree), [a])
                if kind == "partition-relu":
                    add(RELU, [p])
                elif kind == "partition-combine-relu":
                    add(RELU, [add(CombineAttrs(dim, degree), [p])])
                elif kind == "partition-add":
                    b = draw(st.sampled_from([t for t in tensors if g.shape(t) == g.shape(a)]))
                    add(ADD, [p, add(RepartitionAttrs(dim, degree), [b])])
            else:
                c = add(CombineAttrs(dim, g.shape(a).dims[dim].degree), [a])
                if kind == "combine-relu":
                    add(RELU, [c])
                elif kind == "combine-linear":
                    add(LinearAttrs(8, False), [c, T(g.add_node(WeightAttrs(TensorShape((8, 8)))))])
                elif kind == "combine-add":
                    b = draw(st.sampled_from([t for t in tensors if g.shape(t) == g.shape(a)]))
                    add(ADD, [c, add(CombineAttrs(dim, g.shape(a).dims[dim].degree), [b])])
        except FlexrtError:
            continue
    return g


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(random_pcgs(), st.integers(0, 2**16))
def test_law_correct_rules_keep_the_computation(pcg, seed):
    applied = 0
    for r in CORRECT:
        for m in find_matches(pcg, r):
            try:
                ok = law_holds(pcg, r, m, seed)
            except ShapeError:
                continue  # an invalid rewrite is rejected, not applied
            assert ok, f"rule {r.name} at {m} changed the computation"
            applied += 1
    assert applied > 0  # the base graph always offers matches


def test_law_detects_a_wrong_rule():
    g = PCG()
    a, b = (g.add_node(InputAttrs(TensorShape((8, 8)))) for _ in range(2))
    s = g.add_node(ADD, [T(a), T(b)])
    g.add_node(RELU, [T(s)])
    for r in WRONG:
        ms = find_matches(g, r)
        assert ms, r.name
        assert not any(law_holds(g, r, m, seed) for m in ms for seed in range(3)), r.name


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(random_pcgs(), st.integers(0, 2**16))
def test_law_fails_for_wrong_rules_somewhere(pcg, seed):
    # the base graph has add(x, y) read by linear: add_is_mul always changes the outputs
    r = WRONG[1]
    assert not all(law_holds(pcg, r, m, seed) for m in find_matches(pcg, r))


@pytest.fixture(scope="module")
def generated_rules():
    from flexrt.search.substitutions.generate import generate
    return generate(max_ops=2).rules


@pytest.mark.slow
@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pcg=random_pcgs(), seed=st.integers(0, 2**16))
def test_law_generated_rules_keep_the_computation(generated_rules, pcg, seed):
    """The law for the generator's rules of up to 2 operators a side (fingerprint-confirmed)."""
    for r in generated_rules:
        for m in find_matches(pcg, r, limit=4):
            try:
                ok = law_holds(pcg, r, m, seed)
            except ShapeError:
                continue
            assert ok, f"generated rule {r.name} at {m} changed the computation"


# ---- matching -----------------------------------------------------------------------------
def test_find_matches_compares_types_params_and_edges():
    g = mlp_block()
    dp = CORRECT[2]
    assert [m.nodes for m in find_matches(g, dp)] == [(3,), (5,)]
    # relu(partition(x, dim 0)) does not match relu(linear)
    assert find_matches(g, CORRECT[4]) == []
    p = g.add_node(RepartitionAttrs(0, 2), [T(0)])  # flexrt dim 0 (rows) is FlexFlow's dim 1 on a matrix
    g.add_node(RELU, [T(p)])
    assert find_matches(g, CORRECT[4]) == []          # partition on rows, rule wants dim 0 (columns)
    assert [m.nodes for m in find_matches(g, CORRECT[5])] == [(p, p + 1)]


def test_find_matches_binds_an_external_input_to_one_tensor():
    square = rule("add_self", [op("OP_EW_ADD", -1, -1)], [op("OP_SCALAR_MULTIPLY", -1, scalar=2)])
    g = PCG()
    a, b = (g.add_node(InputAttrs(TensorShape((4, 4)))) for _ in range(2))
    ab = g.add_node(ADD, [T(a), T(b)])
    aa = g.add_node(ADD, [T(a), T(a)])
    assert [m.nodes for m in find_matches(g, square)] == [(aa,)]
    assert [m.nodes for m in find_matches(g, CORRECT[0])] == [(ab,), (aa,)]
    assert law_holds(g, square, find_matches(g, square)[0])


def test_find_matches_rejects_an_intermediate_read_outside_the_match():
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((8, 8))))
    p = g.add_node(RepartitionAttrs(0, 2), [T(x)])
    c = g.add_node(CombineAttrs(0, 2), [T(p)])
    g.add_node(RELU, [T(c)])
    assert len(find_matches(g, CORRECT[1])) == 1
    g.add_node(RELU, [T(p)])       # the partitioned tensor is now read outside: removing it breaks that
    assert find_matches(g, CORRECT[1]) == []


def test_find_matches_rejects_a_non_convex_match():
    # relu(x) and relu(y) with y = add(relu(x), x): rewriting both relus at once would make the
    # destination read y, which reads the destination: a cycle
    two = rule("two_relus", [op("OP_RELU", -1), op("OP_RELU", -2)], [op("OP_RELU", -1), op("OP_RELU", -2)],
               [(0, 0, 0, 0), (1, 0, 1, 0)])
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((4, 4))))
    r1 = g.add_node(RELU, [T(x)])
    y = g.add_node(ADD, [T(r1), T(x)])
    r2 = g.add_node(RELU, [T(y)])
    assert [m.nodes for m in find_matches(g, two)] == []
    z = g.add_node(RELU, [T(x)])        # an independent relu: (r1, z), (z, r1), (r2, z), (z, r2) are convex
    assert sorted(m.nodes for m in find_matches(g, two)) == sorted([(r1, z), (z, r1), (r2, z), (z, r2)])
    assert all(law_holds(g, two, m) for m in find_matches(g, two))


def test_rule_whose_destination_reads_a_missing_input_is_not_applicable():
    r = rule("needs_y", [op("OP_RELU", -1)], [op("OP_EW_ADD", -1, -2)])
    assert not r.applicable
    assert find_matches(mlp_block(), r) == []


def test_degree_generic_rule_matches_other_degrees():
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((8, 8))))
    p = g.add_node(RepartitionAttrs(1, 4), [T(x)])
    g.add_node(RELU, [T(p)])
    r = CORRECT[4]
    assert degree_generic(r)
    (m,) = find_matches(g, r)
    assert m.degrees == ((2, 4),)
    assert find_matches(g, r, generalize_degrees=False) == []
    new = apply(g, r, m)
    assert [n.attrs.degree for n in new.nodes if n.op_type is OpType.REPARTITION] == [4]
    assert law_holds(g, r, m)
    scaled = rule("reduce_replicate", [op("OP_REPLICATE", -1, parallel_degree=2), op("OP_REDUCE", 0, parallel_degree=2)],
                  [op("OP_SCALAR_MULTIPLY", -1, scalar=2)])
    assert not degree_generic(scaled)   # the scalar is tied to the degree


# ---- rewriting ------------------------------------------------------------------------------
def test_apply_keeps_ids_names_and_interface():
    g = mlp_block()
    dp = CORRECT[2]
    m = find_matches(g, dp)[0]
    new = apply(g, dp, m)
    new.validate()
    assert 3 not in new and all(new.node(i).name == g.node(i).name for i in (0, 1, 2, 4, 5))
    assert new.node(4).inputs[0].node >= g.node(5).id + 1  # relu now reads the destination's combine
    assert [n.name for n in new.nodes if not n.inputs] == ["x", "w1", "w2"]
    assert [str(new.shape(r)) for r in graph_outputs(new)] == [str(g.shape(r)) for r in graph_outputs(g)]
    assert g.node(3).op_type is OpType.LINEAR  # the original is untouched


def test_invalid_rewrite_is_rejected():
    bad = rule("partition_by_4", [op("OP_RELU", -1)], [part(-1, 0, 4), op("OP_RELU", 0), comb(1, 0, 4)])  # 6 % 4
    g = mlp_block()
    (m,) = find_matches(g, bad, generalize_degrees=False)
    with pytest.raises(ShapeError):
        apply(g, bad, m)
    assert try_apply(g, bad, m) is None
    assert list(rewrites(g, [bad])) == []


def test_rules_compose():
    g = mlp_block()
    cur = g
    inputs = random_inputs(g, np.random.default_rng(1))
    want = evaluate(g, inputs)
    (out,) = want
    # data-parallel both linears, then move the relu past the combine
    for name in ("linear_data_parallel", "linear_data_parallel"):
        r = next(r for r in CORRECT if r.name == name)
        m = next(m for m in find_matches(cur, r))
        rw = rewrite(cur, r, m)
        cur, out = rw.pcg, dict(rw.replaced).get(out, out)
    assert sum(n.op_type is OpType.COMBINE for n in cur.nodes) == 2
    assert np.allclose(evaluate(cur, inputs, [out])[out], want[next(iter(want))])


# ---- Unity's examples ---------------------------------------------------------------------------
def test_fig11a_relu_accepts_spatial_partitioning():
    r = unity_example_rules()["fig11a_relu_spatial"]
    g = mlp_block()
    (m,) = find_matches(g, r)
    assert law_holds(g, r, m)
    new = apply(g, r, m)
    relu = next(n for n in new.nodes if n.op_type is OpType.RELU)
    assert new.shape(T(relu.id)).dims[0].degree == 2   # rows split


def test_fig11b_add_becomes_concat_then_reduce():
    r = unity_example_rules()["fig11b_add_concat_reduce"]
    g = PCG()
    x1, x2 = (g.add_node(InputAttrs(TensorShape((8, 4)))) for _ in range(2))
    w1, w2 = (g.add_node(WeightAttrs(TensorShape((4, 6)))) for _ in range(2))
    l1 = g.add_node(LinearAttrs(6, False), [T(x1), T(w1)])
    l2 = g.add_node(LinearAttrs(6, False), [T(x2), T(w2)])
    g.add_node(RELU, [T(g.add_node(ADD, [T(l1), T(l2)]))])
    (m,) = find_matches(g, r)
    assert law_holds(g, r, m)
    new = apply(g, r, m)
    kinds = [n.op_type for n in new.operators()]
    assert OpType.EW_ADD not in kinds and kinds.count(OpType.CONCAT) == 2 and OpType.REDUCTION in kinds


def test_megatron_chain_of_rewrites():
    """Fig. 10: linear-relu-linear becomes column-parallel, then row-parallel with one final Reduce."""
    rules = unity_example_rules()
    g = mlp_block()
    inputs = random_inputs(g, np.random.default_rng(2))
    want = evaluate(g, inputs)
    (out,) = want
    cur = g
    for name in MEGATRON_CHAIN:
        r = rules[name]
        ms = find_matches(cur, r)
        assert ms, name
        m = ms[0]
        assert law_holds(cur, r, m), name
        rw = rewrite(cur, r, m)
        cur, out = rw.pcg, dict(rw.replaced).get(out, out)
    ops = [cur.node(i).op_type for i in cur.topological_order()
           if cur.node(i).op_type not in (OpType.INPUT, OpType.WEIGHT)]
    assert ops.count(OpType.COMBINE) == 0 and ops.count(OpType.REDUCTION) == 1 and ops[-1] is OpType.REDUCTION
    fc1, fc2 = (n for n in cur.nodes if n.op_type is OpType.LINEAR)
    assert cur.shape(cur.node(fc1.id).inputs[1]).dims[1].degree == 2      # column-parallel w1
    assert cur.shape(cur.node(fc2.id).inputs[1]).dims[0].degree == 2      # row-parallel w2
    assert cur.shape(T(fc2.id)).sum_degree == 2
    assert np.allclose(evaluate(cur, inputs, [out])[out], want[next(iter(want))])
