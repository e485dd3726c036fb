"""The operators added to the rule language: their fingerprints are exact or uninterpreted (collide
only on the same function of equal values), each generator family's rules hold on real tensors and
match their own source, the typed verifier proves the new laws and the concat laws that need sizes,
and refuses false ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flexrt.core import FFConfig, FFModel
from flexrt.errors import GraphError
from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import Conv2DAttrs
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.families import FAMILIES, connected_source, family_names, generate_library
from flexrt.search.substitutions.fingerprint import P, evaluate_side, to_pcg, value_digest
from flexrt.search.substitutions.match import find_matches, try_apply
from flexrt.search.substitutions.rule import CONV_PARAMS, OutputMap, PatternOp, Rule, Slot, check_rule_ops
from flexrt.search.substitutions.semantics import flexrt_dim, pattern_of, to_attrs, window_code, window_of
from flexrt.search.substitutions.verify import Status, verify_rules
from tests.search.test_library_law import law_holds

X, Y, W, B = Slot(-1), Slot(-2), Slot(-3), Slot(-4)
S = Slot


def op(t, *inputs, **params):
    return PatternOp(t, inputs, tuple((f"PM_{k.upper()}", v) for k, v in params.items()))


def digest(ops, inputs):
    return value_digest(evaluate_side(ops, inputs, modulus=P)[-1][0])


def test_uninterpreted_fingerprints_tell_functions_and_values_apart():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, P, (4, 4)), rng.integers(0, P, (4, 4))
    sig, tanh = op("OP_SIGMOID", X), op("OP_TANH", X)
    assert digest([sig], {-1: x}) == digest([sig], {-1: x.copy()})
    assert digest([sig], {-1: x}) != digest([tanh], {-1: x})
    assert digest([sig], {-1: x}) != digest([sig], {-1: y})
    sm0, sm1 = op("OP_SOFTMAX", X, softmax_dim=0), op("OP_SOFTMAX", X, softmax_dim=1)
    assert digest([sm0], {-1: x}) != digest([sm1], {-1: x})
    # softmax along dim 0 is a function of each row: permuting rows permutes the result, and
    # partitioning the other dim commutes with it
    part = op("OP_PARTITION", S(0), parallel_dim=1, parallel_degree=2)
    first = digest([sm0, part], {-1: x})
    assert first == digest([op("OP_PARTITION", X, parallel_dim=1, parallel_degree=2),
                            op("OP_SOFTMAX", S(0), softmax_dim=0)], {-1: x})
    # a fused sigmoid is sigmoid after the linear; a fused tanh is not
    w = rng.integers(0, P, (4, 4))
    fused = digest([op("OP_LINEAR", X, W, acti=1)], {-1: x, -3: w})
    assert fused == digest([op("OP_LINEAR", X, W, acti=0), op("OP_SIGMOID", S(0))], {-1: x, -3: w})
    assert fused != digest([op("OP_LINEAR", X, W, acti=3)], {-1: x, -3: w})


def test_a_dimension_beyond_the_rank_is_an_error_not_a_wrap_around():
    assert flexrt_dim(0, 1) == 0 and flexrt_dim(1, 2) == 0
    with pytest.raises(GraphError, match="dimension 1 .* rank 1; valid: 0..0"):
        flexrt_dim(1, 1)


@pytest.mark.parametrize("family", [f for f in family_names() if f not in ("core", "bias")])
def test_every_rule_of_a_family_holds_on_real_tensors_and_matches_its_source(family):
    res = generate_library([family], max_ops=2 if family == "conv" else None)  # conv's 3 ops: the library's law test
    assert res.rules, family
    for i, (rule, shapes) in enumerate(zip(res.rules, res.input_shapes)):
        if i % 3:  # a third of them keeps the test short; the shipped library's law test covers all
            continue
        g, _ = to_pcg(rule.src, {k: s.tensor_shape for k, s in shapes.items()})
        matches = find_matches(g, rule)
        assert matches, rule
        assert law_holds(g, rule, matches[0], seed=i), rule


def test_the_bias_family_within_two_operators():
    res = generate_library(["bias"], max_ops=2)
    kinds = {op.type for r in res.rules for op in r.src + r.dst}
    assert "OP_BIAS_ADD" in kinds
    assert any(len(o.inputs) == 3 for r in res.rules for o in r.src + r.dst if o.type == "OP_LINEAR")
    for i, (rule, shapes) in enumerate(zip(res.rules, res.input_shapes)):
        g, _ = to_pcg(rule.src, {k: s.tensor_shape for k, s in shapes.items()})
        assert law_holds(g, rule, find_matches(g, rule)[0], seed=i), rule


def test_families_are_named_and_bounded():
    assert family_names()[0] == "core" and len(set(family_names())) == len(FAMILIES)
    assert all(1 <= f.max_ops <= 3 for f in FAMILIES)
    with pytest.raises(Exception, match="unknown generator family nope; valid: core"):
        generate_library(["nope"])


def _rule(name, src, dst, outputs=None):
    return Rule(name, tuple(src), tuple(dst), outputs or (OutputMap(len(src) - 1, 0, len(dst) - 1, 0),))


def concat(ax, a, b):
    return op("OP_CONCAT", a, b, axis=ax, num_inputs=2)


def split(ax, x):
    return op("OP_SPLIT", x, axis=ax, num_outputs=2)


def conv(x, w, kernel=1, padding=0, **params):
    return op("OP_CONV2D", x, w, kernel_h=kernel, kernel_w=kernel, padding_h=padding, padding_w=padding, **params)


W2 = Slot(-5)
MERGE = [conv(X, W, acti=2), conv(X, W2, acti=2)]   # two convolutions of one input (Inception's branches)


TRUE = [
    # TASO's merged convolutions: kernels side by side, then the output split by channels
    Rule("conv_merge", tuple(MERGE), (concat(3, W, W2), conv(X, S(0), acti=2), split(2, S(1))),
         (OutputMap(0, 0, 2, 0), OutputMap(1, 0, 2, 1))),
    _rule("conv_relu_unfuse", [conv(X, W, 3, 1, acti=2)], [conv(X, W, 3, 1), op("OP_RELU", S(0))]),
    _rule("conv_grouped_data_parallel", [op("OP_PARTITION", X, parallel_dim=3, parallel_degree=2),
                                         op("OP_REPLICATE", W, parallel_degree=2), conv(S(0), S(1), 3, 1, group=32)],
          [conv(X, W, 3, 1, group=32), op("OP_PARTITION", S(0), parallel_dim=3, parallel_degree=2)]),
    _rule("bn_relu_fuse", [op("OP_BATCHNORM", X, Y, W, acti=0), op("OP_RELU", S(0))], [op("OP_BATCHNORM", X, Y, W, acti=2)]),
    _rule("bn_channel_parallel", [op("OP_PARTITION", X, parallel_dim=2, parallel_degree=2),
                                  op("OP_PARTITION", Y, parallel_dim=0, parallel_degree=2),
                                  op("OP_PARTITION", W, parallel_dim=0, parallel_degree=2),
                                  op("OP_BATCHNORM", S(0), S(1), S(2), acti=2)],
          [op("OP_BATCHNORM", X, Y, W, acti=2), op("OP_PARTITION", S(0), parallel_dim=2, parallel_degree=2)]),
    _rule("conv_add_inputs", [conv(X, W), conv(Y, W), op("OP_EW_ADD", S(0), S(1))],
          [op("OP_EW_ADD", X, Y), conv(S(0), W)]),
    # holds only for equal halves: the typing (mapped outputs of equal sizes) proves it
    _rule("split_concat", [concat(1, X, Y), split(1, S(0))], [op("OP_SCALAR_MULTIPLY", X, scalar=1)],
          (OutputMap(1, 0, 0, 0),)),
    _rule("concat_assoc", [concat(0, X, Y), concat(0, S(0), W)], [concat(0, Y, W), concat(0, X, S(0))]),
    _rule("linear_bias_relu", [op("OP_LINEAR", X, W, B, acti=2)],
          [op("OP_LINEAR", X, W, acti=0), op("OP_BIAS_ADD", S(0), B), op("OP_RELU", S(1))]),
    _rule("softmax_partition", [op("OP_SOFTMAX", X, softmax_dim=0), op("OP_PARTITION", S(0), parallel_dim=1,
                                                                      parallel_degree=2)],
          [op("OP_PARTITION", X, parallel_dim=1, parallel_degree=2), op("OP_SOFTMAX", S(0), softmax_dim=0)]),
    _rule("bmm_transpose", [op("OP_BATCHMATMUL", X, Y), op("OP_TRANSPOSE", S(0))],
          [op("OP_TRANSPOSE", Y), op("OP_TRANSPOSE", X), op("OP_BATCHMATMUL", S(0), S(1))]),
    _rule("gelu_concat", [concat(1, X, Y), op("OP_GELU", S(0))], [op("OP_GELU", X), op("OP_GELU", Y),
                                                                   concat(1, S(0), S(1))]),
    _rule("bag_model_parallel", [op("OP_EMBEDDING", X, W, aggr=1)],
          [op("OP_REPLICATE", X, parallel_degree=2), op("OP_PARTITION", W, parallel_dim=0, parallel_degree=2),
           op("OP_EMBEDDING", S(0), S(1), aggr=1), op("OP_COMBINE", S(2), parallel_dim=0, parallel_degree=2)]),
]
FALSE = [
    # grouped: a kernel's input channels are its group's, so side-by-side kernels are not side-by-side outputs
    Rule("conv_merge_grouped", (conv(X, W, group=2), conv(X, W2, group=2)),
         (concat(3, W, W2), conv(X, S(0), group=2), split(2, S(1))), (OutputMap(0, 0, 2, 0), OutputMap(1, 0, 2, 1))),
    _rule("conv_relu_add", [conv(X, W, acti=2), conv(Y, W, acti=2), op("OP_EW_ADD", S(0), S(1))],
          [op("OP_EW_ADD", X, Y), conv(S(0), W, acti=2)]),
    _rule("conv_concat_swapped", [conv(X, W), conv(X, W2), concat(2, S(0), S(1))],
          [concat(3, W2, W), conv(X, S(0))]),
    _rule("conv_window", [conv(X, W, 3, 1)], [conv(X, W, 3, 0)]),
    # a piece of the batch normalizes with its own statistics (flexrt's and FlexFlow's data parallelism)
    _rule("bn_batch_parallel", [op("OP_PARTITION", X, parallel_dim=3, parallel_degree=2),
                                op("OP_REPLICATE", Y, parallel_degree=2), op("OP_REPLICATE", W, parallel_degree=2),
                                op("OP_BATCHNORM", S(0), S(1), S(2))],
          [op("OP_BATCHNORM", X, Y, W), op("OP_PARTITION", S(0), parallel_dim=3, parallel_degree=2)]),
    _rule("concat_comm", [concat(0, X, Y)], [concat(0, Y, X)]),
    _rule("softmax_wrong_dim", [op("OP_SOFTMAX", X, softmax_dim=0), op("OP_PARTITION", S(0), parallel_dim=0,
                                                                      parallel_degree=2)],
          [op("OP_PARTITION", X, parallel_dim=0, parallel_degree=2), op("OP_SOFTMAX", S(0), softmax_dim=0)]),
    _rule("sigmoid_is_tanh", [op("OP_SIGMOID", X)], [op("OP_TANH", X)]),
    # true only for indices into the first table; proved while ill-typed axiom instances made the
    # typing hypotheses contradictory
    _rule("embedding_reads_the_first_table", [concat(1, X, Y), op("OP_EMBEDDING", W, S(0), aggr=0)],
          [op("OP_EMBEDDING", W, X, aggr=0)]),
    _rule("layernorm_concat_normalized_dim", [concat(0, X, Y), op("OP_LAYERNORM", S(0), axes=1)],
          [op("OP_LAYERNORM", X, axes=1), op("OP_LAYERNORM", Y, axes=1), concat(0, S(0), S(1))]),
]


def test_the_typed_verifier_proves_the_new_laws_and_refuses_false_ones():
    # a false law is never proved, whatever the time; each of these runs to its timeout (about 2.6x
    # it over the verifier's strategies), so a short one keeps the test fast
    for r in verify_rules(TRUE, timeout_s=10, jobs=2):
        assert r.status is Status.PROVED, r
    for r in verify_rules(FALSE, timeout_s=2, jobs=2):
        assert r.status is not Status.PROVED, r


# ---- the convolution in the rule language ----------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    Conv2DAttrs(8, 3, 3, 1, 1, 1, 1, use_bias=False, activation=ActiMode.AC_MODE_RELU),
    Conv2DAttrs(8, 1, 7, 2, 1, 0, 3, groups=2, use_bias=True),
    Conv2DAttrs(4, 5, 5, 2, 2, 2, 2, groups=4, use_bias=False, activation=ActiMode.AC_MODE_GELU),
])
def test_a_convolution_round_trips_through_its_rule_operator(attrs):
    x = TensorShape((2, 8, 9, 11))
    kernel = TensorShape((attrs.out_channels, 8 // attrs.groups, attrs.kernel_h, attrs.kernel_w))
    shapes = [x, kernel] + ([TensorShape((attrs.out_channels,))] if attrs.use_bias else [])
    p = pattern_of(attrs, shapes)
    assert p.type == "OP_CONV2D" and to_attrs(p, shapes) == attrs
    assert window_of(window_code(p)) == {k: v for k, v in p.params if k in CONV_PARAMS}


def test_a_convolution_rule_operator_names_what_is_wrong():
    with pytest.raises(GraphError, match=r"kernel \[4, 4, 3, 3\] is not 1 x 1 \(PM_KERNEL_H, PM_KERNEL_W\)"):
        to_attrs(conv(X, W), [TensorShape((2, 4, 5, 5)), TensorShape((4, 4, 3, 3))])
    bad = Rule("r", (op("OP_CONV2D", X, W, kernel_h=0, kernel_w=1),), (op("OP_CONV2D", X, W, kernel_h=1, kernel_w=1),),
               (OutputMap(0, 0, 0, 0),))
    with pytest.raises(GraphError, match="PM_KERNEL_H"):
        check_rule_ops(bad, "rule[0]")


def _two_branches(channels=(16, 16)):
    """Inception's pattern: two 1 x 1 convolutions with a fused ReLU of one input, concatenated."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 8, 6, 6])
    ys = [m.conv2d(x, c, 1, 1, 1, 1, 0, 0, ActiMode.AC_MODE_RELU, use_bias=False, name=f"b{i}")
          for i, c in enumerate(channels)]
    m.concat(ys, 1)
    return m.pcg


def test_the_merged_convolutions_rewrite_a_model_and_keep_its_computation():
    g = _two_branches()
    merge = TRUE[0]
    matches = find_matches(g, merge)
    assert matches
    for i, m in enumerate(matches):
        assert law_holds(g, merge, m, seed=i)
    # unequal branches (Inception's 64 and 48): the split cuts where the first branch's channels end
    for channels in ((16, 8), (3, 13)):
        g = _two_branches(channels)
        unequal = find_matches(g, merge)
        assert len(unequal) == 2
        for i, m in enumerate(unequal):
            new = try_apply(g, merge, m)
            cut = [n.attrs.sizes for n in new.nodes if n.op_type is OpType.SPLIT]
            first = g.node(m.nodes[0]).attrs.out_channels
            assert cut == [(first, sum(channels) - first)]
            assert law_holds(g, merge, m, seed=i)


def test_the_conv_families_keep_only_connected_sources():
    res = generate_library(["conv"], max_ops=2)
    assert res.rules and all(connected_source(r) for r in res.rules)
    assert not connected_source(Rule("two", (op("OP_RELU", X), op("OP_RELU", Y)),
                                     (concat(2, X, Y), op("OP_RELU", S(0)), split(2, S(1))),
                                     (OutputMap(0, 0, 2, 0), OutputMap(1, 0, 2, 1))))


def test_a_batch_norm_and_its_relu_fuse_in_a_model_and_keep_its_computation():
    """torchvision's BasicConv2d (conv, batch norm, relu): the batch norm takes the ReLU (FlexFlow's
    batch_norm(relu=True)); a batch norm of another epsilon is not a rule operator."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 3, 6, 6])
    y = m.conv2d(x, 8, 3, 3, 1, 1, 1, 1, use_bias=False)
    m.relu(m.batch_norm(y, relu=False))
    g = m.pcg
    fuse = next(r for r in TRUE if r.name == "bn_relu_fuse")
    (match,) = find_matches(g, fuse)
    assert law_holds(g, fuse, match, seed=3)
    bn = next(n for n in g.nodes if n.op_type.value == "batch_norm")
    shapes = [g.shape(r).tensor_shape for r in bn.inputs]
    assert to_attrs(pattern_of(bn.attrs, shapes), shapes) == bn.attrs
    assert pattern_of(dataclasses.replace(bn.attrs, eps=1e-3), shapes) is None
