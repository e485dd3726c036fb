"""A rule as Z3 terms over the axioms' algebra (``axioms.Z3Algebra``), with its typing.

``rule_terms`` gives ``(source term, destination term)`` per mapped output; with ``hypotheses`` it
also collects the conditions under which the rewriter applies the rule, stated with the sizes
``dim(t, i)`` on the dimensions the rule can tell apart (0 to 3, the dimensions of tensors up to
rank 4, as the axioms are typed, and every dimension a parameter names): every operator of both
sides is well typed (``Z3Algebra`` records it for each application:
element-wise operands of equal sizes, concat operands equal off the axis, a split dimension even, a
linear's inner dimensions equal, ...) and each mapped output has the sizes of the tensor it
replaces. Sizes are at least 1.

A split's point (where it cuts, ``Z3Algebra.split``) is an integer variable per split operator:
a source split's is the matched node's, any; a destination split's is the rewriter's choice
(``match._plan``), one under which both sides are well typed and the mapped outputs have the
sizes of what they replace: these hypotheses, so a proof holds for every point the rewriter may
choose.

A reshape's target is four integer variables per reshape operator, its sizes along dimensions 0 to 3
(``Z3Algebra.reshape``; the rule language's reshapes are of rank at most 4, ``semantics``): a
source reshape's are the matched node's, any; a destination reshape's are the rewriter's choice, fixed
by the same hypotheses (an output it maps has the sizes of the tensor it replaces).

Entry points: ``rule_terms``, ``SUPPORTED``.
"""

from __future__ import annotations

from flexrt.errors import GraphError
from flexrt.search.substitutions.rule import UNARY_TYPES, OP_SPECS, Rule
from flexrt.search.substitutions.semantics import window_code

SUPPORTED = tuple(OP_SPECS)
_DIM_PARAMS = ("PM_AXIS", "PM_PARALLEL_DIM", "PM_SOFTMAX_DIM")


def rule_dims(rule: Rule) -> list[int]:
    """The dimensions the typing hypotheses speak of."""
    named = {op.param(k) for op in rule.src + rule.dst for k in _DIM_PARAMS if op.param(k) is not None}
    named |= {op.param("PM_AXES") for op in rule.src + rule.dst if op.param("PM_AXES") is not None}
    return sorted({0, 1, 2, 3} | named)


def _need(op, key, where):
    v = op.param(key)
    if v is None:
        raise GraphError(f"{where}: {op.type} needs parameter {key}")
    return v


def _apply(alg, op, args, where: str, choice=None) -> tuple:
    """The Z3 term(s) of one operator on its argument terms (``choice``: a split's point, a Z3 Int; a
    reshape's four sizes)."""
    t, p = op.type, op.param
    if t not in OP_SPECS:
        raise GraphError(f"{where}: operator {t} has no axioms (supported: {', '.join(SUPPORTED)})")
    if len(args) not in OP_SPECS[t].input_counts():
        raise GraphError(f"{where}: {t} takes {' or '.join(map(str, OP_SPECS[t].input_counts()))} inputs, "
                         f"got {len(args)}")
    if t == "OP_LINEAR":
        return (alg.linear(p("PM_ACTI", 0), *args) if len(args) == 2 else alg.linearb(p("PM_ACTI", 0), *args),)
    if t in UNARY_TYPES:
        return (alg.unary(UNARY_TYPES.index(t), *args),)
    simple = {"OP_RELU": alg.relu, "OP_EW_ADD": alg.ewadd, "OP_EW_MUL": alg.ewmul, "OP_TRANSPOSE": alg.transpose,
              "OP_BIAS_ADD": alg.bias_add, "OP_BATCHMATMUL": alg.bmm}
    if t in simple:
        return (simple[t](*args),)
    if t == "OP_SCALAR_MULTIPLY":
        return (alg.smul(p("PM_SCALAR", 2), *args),)
    if t == "OP_SOFTMAX":
        return (alg.softmax(_need(op, "PM_SOFTMAX_DIM", where), *args),)
    if t == "OP_LAYERNORM":
        return (alg.layernorm(_need(op, "PM_AXES", where), *args),)
    if t == "OP_EMBEDDING":
        return (alg.embedding(p("PM_AGGR", 0), *args),)
    if t == "OP_BATCHNORM":
        return (alg.bn(p("PM_ACTI", 0), *args),)
    if t == "OP_REDUCE_SUM":
        return (alg.reduce_sum(_need(op, "PM_AXIS", where), *args),)
    if t == "OP_CONV2D":
        conv = alg.conv if len(args) == 2 else alg.convb
        return (conv(window_code(op), p("PM_GROUP", 1), p("PM_ACTI", 0), *args),)
    if t == "OP_CONCAT":
        if p("PM_NUM_INPUTS", 2) != 2:
            raise GraphError(f"{where}: OP_CONCAT of {p('PM_NUM_INPUTS')} inputs (the axioms know 2)")
        return (alg.concat(_need(op, "PM_AXIS", where), *args),)
    if t == "OP_SPLIT":
        if p("PM_NUM_OUTPUTS", 2) != 2:
            raise GraphError(f"{where}: OP_SPLIT into {p('PM_NUM_OUTPUTS')} outputs (the axioms know 2)")
        ax = _need(op, "PM_AXIS", where)
        return (alg.split(0, ax, choice, *args), alg.split(1, ax, choice, *args))
    if t == "OP_RESHAPE":
        return (alg.reshape(choice, *args),)
    dim, deg = (lambda: _need(op, "PM_PARALLEL_DIM", where)), (lambda: _need(op, "PM_PARALLEL_DEGREE", where))
    if t == "OP_PARTITION":
        return (alg.partition(dim(), deg(), *args),)
    if t == "OP_COMBINE":
        return (alg.combine(dim(), deg(), *args),)
    if t == "OP_REPLICATE":
        return (alg.replicate(deg(), *args),)
    return (alg.reduce(deg(), *args),)


def rule_terms(rule: Rule, alg, hypotheses: list | None = None) -> list[tuple]:
    """``(source term, destination term)`` per mapped output; external input ``k`` is the constant
    ``in<k>`` of sort ``T``, the same on both sides. ``hypotheses``, when given, receives the rule's
    typing (see the module doc)."""
    z3 = alg.z3
    inputs: dict[int, object] = {}
    dims = rule_dims(rule)
    tensors: list = []
    alg.typing, alg.dims = [], dims   # the algebra records each application's typing on these dims

    def side(ops, where):
        outs: list[tuple] = []
        for i, op in enumerate(ops):
            choice = None
            args = []
            for s in op.inputs:
                if s.external:
                    n = -s.op - 1
                    args.append(inputs.setdefault(n, z3.Const(f"in{n}", alg.T)))
                else:
                    if s.ts >= len(outs[s.op]):
                        raise GraphError(f"rule {rule.name}: {where} operator {i} reads output {s.ts} of operator "
                                         f"{s.op} ({ops[s.op].type}), which has {len(outs[s.op])}")
                    args.append(outs[s.op][s.ts])
            if op.type == "OP_SPLIT":
                choice = z3.Int(f"{where}{i}.point")
            elif op.type == "OP_RESHAPE":
                choice = tuple(z3.Int(f"{where}{i}.size{d}") for d in range(4))
            outs.append(_apply(alg, op, args, f"rule {rule.name}: {where} operator {i}", choice))
            tensors.extend(outs[-1])
        return outs

    src, dst = side(rule.src, "source"), side(rule.dst, "destination")
    pairs = []
    for m in rule.outputs:
        if m.src_ts >= len(src[m.src_op]) or m.dst_ts >= len(dst[m.dst_op]):
            raise GraphError(f"rule {rule.name}: output map {m} names an output the operator does not have")
        pairs.append((src[m.src_op][m.src_ts], dst[m.dst_op][m.dst_ts]))
    del alg.dims
    if hypotheses is not None:
        hypotheses.extend(alg.typing)
        hypotheses.extend(alg.dim(a, i) == alg.dim(b, i) for a, b in pairs for i in dims)
        hypotheses.extend(alg.dim(t, i) >= 1 for t in list(inputs.values()) + tensors for i in dims)
    return pairs


__all__ = ["SUPPORTED", "rule_dims", "rule_terms"]
