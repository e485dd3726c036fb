"""What a rule's pattern operators mean: the bridge between FlexFlow's rule language and flexrt's
PCG operators, shared by the generator, the verifier's concrete checks and the rewriter.

| rule operator | parameters | flexrt operator |
|---|---|---|
| ``OP_LINEAR`` (x, w) | ``PM_ACTI`` 0 none, 2 relu (TASO's numbering) | ``LinearAttrs(w.dims[1], use_bias=False, activation)``; x [..., in], w [in, out] |
| ``OP_RELU`` (x) | | ``ElementUnaryAttrs(RELU)`` |
| ``OP_EW_ADD`` / ``OP_EW_MUL`` (a, b) | | ``ElementBinaryAttrs(EW_ADD / EW_MUL)`` |
| ``OP_SCALAR_MULTIPLY`` (x) | ``PM_SCALAR`` (integer) | ``ElementUnaryAttrs(SCALAR_MUL, scalar)`` |
| ``OP_CONCAT`` (a, b) | ``PM_AXIS``, ``PM_NUM_INPUTS`` 2, ``PM_NUMDIM`` | ``ConcatAttrs(axis)`` |
| ``OP_SPLIT`` (x) | ``PM_AXIS``, ``PM_NUM_OUTPUTS`` 2 | ``SplitAttrs((n/2, n/2), axis)`` |
| ``OP_TRANSPOSE`` (x) | | ``TransposeAttrs`` swapping the last two dimensions |
| ``OP_PARTITION`` (x) | ``PM_PARALLEL_DIM``, ``PM_PARALLEL_DEGREE`` | ``RepartitionAttrs(dim, degree)`` |
| ``OP_COMBINE`` (x) | ``PM_PARALLEL_DIM``, ``PM_PARALLEL_DEGREE`` | ``CombineAttrs(dim, degree)`` |
| ``OP_REPLICATE`` (x) | ``PM_PARALLEL_DEGREE`` (FlexFlow also writes ``PM_PARALLEL_DIM``, its replica dimension) | ``ReplicateAttrs(degree)``: copies |
| ``OP_REDUCE`` (x) | ``PM_PARALLEL_DEGREE`` (and FlexFlow's ``PM_PARALLEL_DIM``) | ``ReductionAttrs(degree)``: sums partial sums |

Dimensions (``PM_PARALLEL_DIM``, ``PM_AXIS``) in flexrt's rules count from the innermost dimension,
Legion's order: on a rank-r tensor, value d is flexrt's dimension ``r - 1 - d``. FlexFlow's own
``graph_subst_3_v2.json`` counts from the outermost (TASO's order: 9 of its rules are well-formed
only that way, none only the other way); ``library.load_flexflow_rules`` converts it on load.

Entry points: ``to_attrs``, ``pattern_of``, ``flexrt_dim``, ``flexflow_dim``.
"""

from __future__ import annotations

from typing import Optional, Sequence

from flexrt.errors import GraphError
from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import (CombineAttrs, ConcatAttrs, ElementBinaryAttrs, ElementUnaryAttrs, LinearAttrs,
                           ReductionAttrs, RepartitionAttrs, ReplicateAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.rule import PatternOp

ACTI = {0: ActiMode.AC_MODE_NONE, 2: ActiMode.AC_MODE_RELU}
ACTI_CODE = {v: k for k, v in ACTI.items()}
BINARY = {"OP_EW_ADD": OpType.EW_ADD, "OP_EW_MUL": OpType.EW_MUL}
BINARY_CODE = {v: k for k, v in BINARY.items()}


def flexrt_dim(value: int, rank: int) -> int:
    return rank - 1 - value


def flexflow_dim(dim: int, rank: int) -> int:
    return rank - 1 - (dim % rank)


def to_attrs(op: PatternOp, inputs: Sequence[TensorShape]):
    """flexrt attributes of pattern operator ``op`` on inputs of these shapes (GraphError if it has none)."""
    t, rank = op.type, inputs[0].rank if inputs else 0
    if t == "OP_LINEAR":
        acti = op.param("PM_ACTI", 0)
        if acti not in ACTI:
            raise GraphError(f"OP_LINEAR: PM_ACTI {acti} is not supported (valid: 0 none, 2 relu)")
        return LinearAttrs(inputs[1].dims[1], False, ACTI[acti])
    if t == "OP_RELU":
        return ElementUnaryAttrs(OpType.RELU)
    if t in ("OP_EW_ADD", "OP_EW_MUL"):
        return ElementBinaryAttrs(BINARY[t])
    if t == "OP_SCALAR_MULTIPLY":
        return ElementUnaryAttrs(OpType.SCALAR_MUL, float(op.param("PM_SCALAR", 2)))
    if t == "OP_CONCAT":
        return ConcatAttrs(flexrt_dim(op.param("PM_AXIS"), rank))
    if t == "OP_SPLIT":
        axis = flexrt_dim(op.param("PM_AXIS"), rank)
        n, k = inputs[0].dims[axis], op.param("PM_NUM_OUTPUTS", 2)
        if n % k:
            raise GraphError(f"OP_SPLIT: dimension of size {n} does not split into {k} equal parts")
        return SplitAttrs((n // k,) * k, axis)
    if t == "OP_TRANSPOSE":
        perm = list(range(rank))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        return TransposeAttrs(tuple(perm))
    if t == "OP_PARTITION":
        return RepartitionAttrs(flexrt_dim(op.param("PM_PARALLEL_DIM"), rank), op.param("PM_PARALLEL_DEGREE"))
    if t == "OP_COMBINE":
        return CombineAttrs(flexrt_dim(op.param("PM_PARALLEL_DIM"), rank), op.param("PM_PARALLEL_DEGREE"))
    if t == "OP_REPLICATE":
        return ReplicateAttrs(op.param("PM_PARALLEL_DEGREE"))
    if t == "OP_REDUCE":
        return ReductionAttrs(op.param("PM_PARALLEL_DEGREE"))
    raise GraphError(f"unknown rule operator {t}")


def pattern_of(attrs, inputs: Sequence[TensorShape]) -> Optional[PatternOp]:
    """The rule operator (type and parameters, no inputs) of a flexrt operator, or None when the rule
    language has none for it (e.g. a linear with a bias or a sigmoid)."""
    t = attrs.op_type
    rank = inputs[0].rank if inputs else 0
    if t is OpType.LINEAR:
        if attrs.use_bias or attrs.activation not in ACTI_CODE:
            return None
        return PatternOp("OP_LINEAR", (), (("PM_ACTI", ACTI_CODE[attrs.activation]),))
    if t is OpType.RELU:
        return PatternOp("OP_RELU", ())
    if t in BINARY_CODE:
        return PatternOp(BINARY_CODE[t], ())
    if t is OpType.SCALAR_MUL and float(attrs.scalar).is_integer():
        return PatternOp("OP_SCALAR_MULTIPLY", (), (("PM_SCALAR", int(attrs.scalar)),))
    if t is OpType.CONCAT and len(inputs) == 2:
        return PatternOp("OP_CONCAT", (), (("PM_AXIS", flexflow_dim(attrs.axis, rank)), ("PM_NUM_INPUTS", 2),
                                           ("PM_NUMDIM", rank)))
    if t is OpType.SPLIT and len(set(attrs.sizes)) == 1:
        return PatternOp("OP_SPLIT", (), (("PM_AXIS", flexflow_dim(attrs.axis, rank)),
                                          ("PM_NUM_OUTPUTS", len(attrs.sizes))))
    if t is OpType.TRANSPOSE and rank >= 2 and tuple(attrs.perm) == tuple(range(rank - 2)) + (rank - 1, rank - 2):
        return PatternOp("OP_TRANSPOSE", ())
    if t is OpType.REPARTITION:
        return PatternOp("OP_PARTITION", (), (("PM_PARALLEL_DIM", flexflow_dim(attrs.dim, rank)),
                                              ("PM_PARALLEL_DEGREE", attrs.degree)))
    if t is OpType.COMBINE:
        return PatternOp("OP_COMBINE", (), (("PM_PARALLEL_DIM", flexflow_dim(attrs.dim, rank)),
                                            ("PM_PARALLEL_DEGREE", attrs.degree)))
    if t is OpType.REPLICATE:
        return PatternOp("OP_REPLICATE", (), (("PM_PARALLEL_DEGREE", attrs.degree),))
    if t is OpType.REDUCTION:
        return PatternOp("OP_REDUCE", (), (("PM_PARALLEL_DEGREE", attrs.degree),))
    return None
