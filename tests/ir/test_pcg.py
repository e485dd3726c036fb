"""PCG: construction errors, topological order, dominators, structural hash, JSON round trip."""

import dataclasses
import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from flexrt.errors import GraphError, ShapeError
from flexrt.ir import ActiMode, OpType, TensorShape
from flexrt.ir.ops import (CombineAttrs, ElementBinaryAttrs, ElementUnaryAttrs, InputAttrs, LinearAttrs,
                           ReductionAttrs, RepartitionAttrs, ReplicateAttrs, WeightAttrs)
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.summary import op_table, totals

R = TensorRef
UNARY = [OpType.RELU, OpType.TANH, OpType.SIGMOID, OpType.EXP, OpType.IDENTITY]


def mlp(b=64, ci=784, h=512, co=10, parallel=False):
    """Unity Fig. 2's MLP; with ``parallel`` its first layer uses reduction parallelism on 2 devices."""
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((b, ci))), name="x")
    w1 = g.add_node(WeightAttrs(TensorShape((ci, h))), name="w1")
    w2 = g.add_node(WeightAttrs(TensorShape((h, co))), name="w2")
    xi, wi = R(x), R(w1)
    if parallel:
        xi = R(g.add_node(RepartitionAttrs(1, 2), [xi], "part_x"))
        wi = R(g.add_node(RepartitionAttrs(0, 2), [wi], "part_w1"))
    y = R(g.add_node(LinearAttrs(h, False), [xi, wi], "fc1"))
    if parallel:
        y = R(g.add_node(ReductionAttrs(2), [y], "reduce"))
    r = R(g.add_node(ElementUnaryAttrs(OpType.RELU), [y], "relu"))
    g.add_node(LinearAttrs(co, False), [r, R(w2)], "fc2")
    return g


def random_pcg(rng: random.Random, n_ops: int) -> PCG:
    """A random DAG of unary / binary element-wise ops over [8, 6] tensors."""
    g = PCG()
    tensors = [R(g.add_node(InputAttrs(TensorShape((8, 6))), name=f"in{i}")) for i in range(rng.randint(1, 3))]
    for _ in range(n_ops):
        if rng.random() < 0.5:
            a = g.add_node(ElementUnaryAttrs(rng.choice(UNARY)), [rng.choice(tensors)])
        else:
            a = g.add_node(ElementBinaryAttrs(rng.choice([OpType.EW_ADD, OpType.EW_MUL])),
                           [rng.choice(tensors), rng.choice(tensors)])
        tensors.append(R(a))
    return g


def relabel(g: PCG, rng: random.Random) -> PCG:
    """The same graph with nodes added in another topological order, under other names."""
    order = g.topological_order()
    h, mapping, pending = PCG(), {}, list(order)
    while pending:
        ready = [n for n in pending if all(r.node in mapping for r in g.node(n).inputs)]
        n = rng.choice(ready)
        pending.remove(n)
        node = g.node(n)
        mapping[n] = h.add_node(node.attrs, [R(mapping[r.node], r.index) for r in node.inputs], f"z{rng.random()}")
    return h


def test_mlp_shapes_and_summary():
    g = mlp()
    assert str(g.shape(R(g.node_by_name("fc1").id))) == "[64, 512] f32"
    t = totals(g)
    assert t.params == 784 * 512 + 512 * 10
    assert t.operators == 3
    rows = {r.name: r for r in op_table(g)}
    assert rows["fc1"].flops == 2 * 64 * 512 * 784 and rows["fc1"].params == 784 * 512


def test_reduction_parallel_mlp_shapes():
    g = mlp(parallel=True)
    assert str(g.shape(R(g.node_by_name("fc1").id))) == "[64, 512] s2 f32"
    assert str(g.shape(R(g.node_by_name("reduce").id))) == "[64, 512] f32"


def test_add_node_errors_name_the_operator():
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((64, 784))), name="x")
    w = g.add_node(WeightAttrs(TensorShape((100, 10))), name="w")
    with pytest.raises(ShapeError, match=r"linear 'fc'.*weight 'kernel' is \[100, 10\] f32.*require \[784, 10\]"):
        g.add_node(LinearAttrs(10, False), [R(x), R(w)], "fc")
    with pytest.raises(GraphError, match="missing node 99"):
        g.add_node(ElementUnaryAttrs(OpType.RELU), [R(99)], "r")
    with pytest.raises(GraphError, match="already exists"):
        g.add_node(InputAttrs(TensorShape((1,))), name="x")
    with pytest.raises(ShapeError, match=r"repartition 'p': degree 3 on dimension 1 of \[64, 784\] f32 would give degree 3, "
                                        r"which does not divide size 784; valid repartition degrees: 1, 2, 4, 7"):
        g.add_node(RepartitionAttrs(1, 3), [R(x)], "p")
    with pytest.raises(ShapeError, match="combine.*does not divide the degree 1"):
        g.add_node(CombineAttrs(0, 2), [R(x)], "c")
    with pytest.raises(ShapeError, match="relu 'r2'.*partial sums"):
        rep = g.add_node(ReplicateAttrs(2), [R(w)])
        lin = g.add_node(LinearAttrs(4, False), [R(g.add_node(RepartitionAttrs(1, 2), [R(x)])),
                                                   R(g.add_node(RepartitionAttrs(0, 2), [R(g.add_node(
                                                       WeightAttrs(TensorShape((784, 4)))))]))])
        del rep
        g.add_node(ElementUnaryAttrs(OpType.RELU), [R(lin)], "r2")


def test_dominators_and_post_dominators_of_residual_block():
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((4, 4))), name="x")
    a = g.add_node(ElementUnaryAttrs(OpType.RELU), [R(x)], "a")
    b = g.add_node(ElementUnaryAttrs(OpType.TANH), [R(a)], "b")
    c = g.add_node(ElementBinaryAttrs(OpType.EW_ADD), [R(a), R(b)], "c")
    d = g.add_node(ElementUnaryAttrs(OpType.EXP), [R(c)], "d")
    assert g.dominators() == {x: None, a: x, b: a, c: a, d: c}
    assert g.post_dominators() == {x: a, a: c, b: c, c: d, d: None}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 25))
def test_structural_hash_equal_for_isomorphic_graphs(seed, n):
    rng = random.Random(seed)
    g = random_pcg(rng, n)
    assert relabel(g, rng).structural_hash() == g.structural_hash()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 25))
def test_structural_hash_changes_with_an_attribute(seed, n):
    rng = random.Random(seed)
    g = random_pcg(rng, n)
    h = g.copy()
    last = h.sinks()[0]
    h.add_node(ElementUnaryAttrs(OpType.SCALAR_MUL, 2.0), [R(last)])
    k = g.copy()
    k.add_node(ElementUnaryAttrs(OpType.SCALAR_MUL, 3.0), [R(last)])
    assert len({g.structural_hash(), h.structural_hash(), k.structural_hash()}) == 3


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 25))
def test_json_round_trip_exact(seed, n):
    g = random_pcg(random.Random(seed), n)
    g2 = PCG.loads(json.dumps(g.to_json()))
    assert g2 == g and g2.to_json() == g.to_json() and g2.structural_hash() == g.structural_hash()


def test_json_round_trip_parallel_ops_and_float_attrs():
    g = mlp(parallel=True)
    g.add_node(ElementUnaryAttrs(OpType.SCALAR_MUL, 0.1 + 0.2), [R(g.sinks()[0])], "scale")
    g.add_node(LinearAttrs(3, True, ActiMode.AC_MODE_GELU), [R(g.node_by_name("scale").id),
                                                             R(g.add_node(WeightAttrs(TensorShape((10, 3))))),
                                                             R(g.add_node(WeightAttrs(TensorShape((3,)))))])
    assert PCG.loads(g.dumps()) == g


def test_json_errors_are_clear():
    with pytest.raises(GraphError, match="not a flexrt PCG"):
        PCG.from_json({"nodes": []})
    with pytest.raises(GraphError, match=r"<json>:1:2: invalid JSON"):
        PCG.loads("{x")
    d = mlp().to_json()
    d["nodes"][3]["attrs"]["out_channels"] = 7
    with pytest.raises(ShapeError, match="fc1"):
        PCG.from_json(d)
    d = mlp().to_json()
    d["nodes"][0]["inputs"] = [[d["nodes"][-1]["id"], 0]]
    d["nodes"][0]["op"] = "relu"
    d["nodes"][0]["attrs"] = {"op_type": "RELU", "scalar": 0.0}
    with pytest.raises(GraphError, match="cycle through nodes"):
        PCG.from_json(d)
    d = mlp().to_json()
    d["nodes"][3]["op"] = "conv3d"
    with pytest.raises(GraphError, match="unknown operator 'conv3d'"):
        PCG.from_json(d)


def test_validate_reports_first_bad_node_with_input_shapes():
    g = mlp()
    bad = g.copy()
    fc2 = bad.node_by_name("fc2")
    bad._nodes[fc2.id] = dataclasses.replace(fc2, attrs=LinearAttrs(10, True))  # corrupt: now needs a bias
    with pytest.raises(GraphError, match=r"node \d+ 'fc2' \(linear\) is invalid.*its inputs: \[64, 512\] f32"):
        bad.validate()
    g.validate()


def test_remove_node():
    g = mlp()
    fc2 = g.node_by_name("fc2").id
    with pytest.raises(GraphError, match="read by fc2"):
        g.remove_node(g.node_by_name("relu").id)
    g.remove_node(fc2)
    assert "fc2" not in {n.name for n in g.nodes}


def test_dot_labels_escape_backslashes_and_quotes():
    """A layer named a"b\\c had its backslash written bare into the label (an escape sequence to Graphviz)."""
    from flexrt.core import DataType, FFConfig, FFModel
    m = FFModel(FFConfig(["-b", "4"]))
    m.dense(m.create_tensor([4, 8], DataType.DT_FLOAT), 4, name='a"b\\c')
    dot = m.pcg.to_dot("x")
    assert 'label="a\\"b\\\\c\\nlinear\\n[4, 4] f32"' in dot
