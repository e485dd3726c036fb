"""What a rule's pattern operators mean: the bridge between FlexFlow's rule language and flexrt's
PCG operators, shared by the generator, the verifier's concrete checks and the rewriter.

| rule operator | parameters | flexrt operator |
|---|---|---|
| ``OP_LINEAR`` (x, w[, b]) | ``PM_ACTI`` 0 none, 1 sigmoid, 2 relu, 3 tanh (TASO's numbering), 4 gelu | ``LinearAttrs(w.dims[1], use_bias=(b given), activation)``; x [..., in], w [in, out], b [out] |
| ``OP_RELU`` (x) | | ``ElementUnaryAttrs(RELU)`` |
| ``OP_SIGMOID``, ``OP_TANH``, ``OP_GELU``, ``OP_ELU``, ``OP_EXP``, ``OP_SIN``, ``OP_COS``, ``OP_IDENTITY`` (x) | | ``ElementUnaryAttrs(SIGMOID, ...)`` |
| ``OP_BIAS_ADD`` (x, b) | | ``BiasAddAttrs()``: x [..., f] + b [f] |
| ``OP_SOFTMAX`` (x) | ``PM_SOFTMAX_DIM`` | ``SoftmaxAttrs(axis)`` |
| ``OP_BATCHMATMUL`` (a, b) | | ``BatchMatmulAttrs()``: a [..., m, k] x b [..., k, n] |
| ``OP_LAYERNORM`` (x[, gamma[, beta]]) | ``PM_AXES``: the number of innermost dims normalized | ``LayerNormAttrs(last PM_AXES dims, affine = gamma given, use_bias = beta given)``, eps 1e-5 only |
| ``OP_EMBEDDING`` (indices, table) | ``PM_AGGR`` 0 none, 1 sum (the embedding bag) | ``EmbeddingAttrs(entries, channels, aggr)`` |
| ``OP_CONV2D`` (x, kernel[, bias]) | ``PM_KERNEL_H/W``, ``PM_STRIDE_H/W`` (1), ``PM_PADDING_H/W`` (0), ``PM_GROUP`` (1), ``PM_ACTI`` | ``Conv2DAttrs(kernel.dims[0], ...)``: x [N, C, H, W], kernel [out, C / groups, kh, kw], bias [out] |
| ``OP_BATCHNORM`` (x, scale, bias) | ``PM_ACTI`` 0 or 2 (a fused ReLU) | ``BatchNormAttrs(relu)``, training mode, eps 1e-5 and momentum 0.1 only; x [N, C, H, W] |
| ``OP_REDUCE_SUM`` (x) | ``PM_AXIS`` | ``ReduceAttrs(REDUCE_SUM, (axis,), keepdims=False)``: the dimension summed and removed |
| ``OP_EW_ADD`` / ``OP_EW_MUL`` (a, b) | | ``ElementBinaryAttrs(EW_ADD / EW_MUL)`` |
| ``OP_SCALAR_MULTIPLY`` (x) | ``PM_SCALAR`` (integer) | ``ElementUnaryAttrs(SCALAR_MUL, scalar)`` |
| ``OP_CONCAT`` (a, b) | ``PM_AXIS``, ``PM_NUM_INPUTS`` 2, ``PM_NUMDIM`` | ``ConcatAttrs(axis)`` |
| ``OP_SPLIT`` (x) | ``PM_AXIS``, ``PM_NUM_OUTPUTS`` 2 | ``SplitAttrs((p, n - p), axis)``: a source split matches any point ``p``; a destination split cuts where every destination operator is well typed and each replaced output keeps its shape (``match._plan``: the middle first) |
| ``OP_TRANSPOSE`` (x) | | ``TransposeAttrs`` swapping the last two dimensions |
| ``OP_RESHAPE`` (x) | | ``ReshapeAttrs(target)``, input and output of rank at most 4: a source reshape matches any target; a destination reshape's target is the rewriter's choice, as a split's point (``match._plan``: a matched tensor's shape, or one with another's innermost size); the generator probes with ``default_reshape`` |
| ``OP_PARTITION`` (x) | ``PM_PARALLEL_DIM``, ``PM_PARALLEL_DEGREE`` | ``RepartitionAttrs(dim, degree)`` |
| ``OP_COMBINE`` (x) | ``PM_PARALLEL_DIM``, ``PM_PARALLEL_DEGREE`` | ``CombineAttrs(dim, degree)`` |
| ``OP_REPLICATE`` (x) | ``PM_PARALLEL_DEGREE`` (FlexFlow also writes ``PM_PARALLEL_DIM``, its replica dimension) | ``ReplicateAttrs(degree)``: copies |
| ``OP_REDUCE`` (x) | ``PM_PARALLEL_DEGREE`` (and FlexFlow's ``PM_PARALLEL_DIM``) | ``ReductionAttrs(degree)``: sums partial sums |

Dimensions (``PM_PARALLEL_DIM``, ``PM_AXIS``) in flexrt's rules count from the innermost dimension,
Legion's order: on a rank-r tensor, value d is flexrt's dimension ``r - 1 - d``. FlexFlow's own
``graph_subst_3_v2.json`` counts from the outermost (TASO's order: 9 of its rules are well-formed
only that way, none only the other way); ``library.load_flexflow_rules`` converts it on load.

A convolution's window (kernel, stride, padding) is one integer in the verifier (``window_code``):
its laws hold for every window, so the proofs never depend on it.

A reshape's target is part of no rule: the verifier reads it as four sizes per reshape (its
dimensions 0 to 3, ``translate``), the sizes of a tensor of rank at most 4 (a shape is its sizes up to
leading dimensions of size 1, as everywhere in the verifier), so ``pattern_of`` gives one only to
reshapes between tensors of rank at most 4.

Entry points: ``to_attrs``, ``pattern_of``, ``flexrt_dim``, ``flexflow_dim``, ``encode_window``,
``window_code``, ``window_of``, ``default_reshape``, ``RESHAPE_RANK``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from flexrt.errors import GraphError
from flexrt.ir.enums import ActiMode, AggrMode
from flexrt.ir.op_type import OpType
from flexrt.ir.ops import (BatchMatmulAttrs, BatchNormAttrs, BiasAddAttrs, CombineAttrs, ConcatAttrs, Conv2DAttrs,
                           ElementBinaryAttrs,
                           ElementUnaryAttrs, EmbeddingAttrs, LayerNormAttrs, LinearAttrs, ReduceAttrs, ReductionAttrs,
                           RepartitionAttrs, ReplicateAttrs, ReshapeAttrs, SoftmaxAttrs, SplitAttrs, TransposeAttrs)
from flexrt.ir.ops.reshape import resolved_shape
from flexrt.ir.ops.softmax import softmax_axis
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.rule import CONV_DEFAULTS, CONV_PARAMS, UNARY_TYPES, PatternOp

ACTI = {0: ActiMode.AC_MODE_NONE, 1: ActiMode.AC_MODE_SIGMOID, 2: ActiMode.AC_MODE_RELU, 3: ActiMode.AC_MODE_TANH,
        4: ActiMode.AC_MODE_GELU}  # TASO's numbering, and 4 for GELU (TASO has none)
ACTI_CODE = {v: k for k, v in ACTI.items()}
BINARY = {"OP_EW_ADD": OpType.EW_ADD, "OP_EW_MUL": OpType.EW_MUL}
BINARY_CODE = {v: k for k, v in BINARY.items()}
UNARY = {t: OpType[t.removeprefix("OP_")] for t in UNARY_TYPES}   # OP_SIGMOID -> OpType.SIGMOID, ...
UNARY_CODE = {v: k for k, v in UNARY.items()}
AGGR = {0: AggrMode.AGGR_MODE_NONE, 1: AggrMode.AGGR_MODE_SUM}
AGGR_CODE = {v: k for k, v in AGGR.items()}
LAYER_NORM_EPS = LayerNormAttrs((-1,)).eps   # the only epsilon a rule's layer norm has (rules hold integers)
BATCH_NORM = BatchNormAttrs(relu=False)       # a rule's batch norm: these eps and momentum only
RESHAPE_RANK = 4   # a rule's reshape reads and writes tensors of at most this rank (its four sizes)


def flexrt_dim(value: int, rank: int) -> int:
    """flexrt's dimension of FlexFlow's innermost-first ``value`` on a rank-``rank`` tensor; GraphError
    when the tensor has no such dimension (else a rank-1 tensor's dim 1 would wrap around to dim 0)."""
    if not 0 <= value < rank:
        raise GraphError(f"dimension {value} (counted from the innermost) does not exist on a tensor of rank "
                         f"{rank}; valid: 0..{rank - 1}")
    return rank - 1 - value


def flexflow_dim(dim: int, rank: int) -> int:
    return rank - 1 - (dim % rank)


def encode_window(values: Sequence[int]) -> int:
    """One integer for a convolution's window, its ``CONV_PARAMS`` values in order (kernel, stride,
    padding along height and width): six base-16 digits (each below 16, ``rule.PARAM_RANGES``)."""
    code = 0
    for v in values:
        code = code * 16 + v
    return code


def window_code(op: PatternOp) -> int:
    """``encode_window`` of a rule operator's window (defaults where it states none)."""
    return encode_window([op.param(key, CONV_DEFAULTS.get(key)) for key in CONV_PARAMS])


def window_of(code: int) -> dict:
    """The window parameters of ``window_code``'s integer."""
    values = []
    for _ in CONV_PARAMS:
        code, digit = divmod(code, 16)
        values.append(digit)
    return dict(zip(CONV_PARAMS, reversed(values)))


def _conv_attrs(op: PatternOp, inputs: Sequence[TensorShape]) -> Conv2DAttrs:
    acti = op.param("PM_ACTI", 0)
    if acti not in ACTI:
        raise GraphError(f"OP_CONV2D: PM_ACTI {acti} is not supported (valid: 0 none, 1 sigmoid, 2 relu, 3 tanh, 4 gelu)")
    if len(inputs) < 2 or inputs[1].rank != 4:
        raise GraphError(f"OP_CONV2D: the kernel must be [out, in / groups, kh, kw], got {inputs[1:2]}")
    p = {k: op.param(k, CONV_DEFAULTS.get(k)) for k in CONV_PARAMS + ("PM_GROUP",)}
    out, _, kh, kw = inputs[1].dims
    if (kh, kw) != (p["PM_KERNEL_H"], p["PM_KERNEL_W"]):
        raise GraphError(f"OP_CONV2D: kernel {list(inputs[1].dims)} is not {p['PM_KERNEL_H']} x {p['PM_KERNEL_W']} "
                         f"(PM_KERNEL_H, PM_KERNEL_W)")
    if len(inputs) == 3 and inputs[2].dims != (out,):
        raise GraphError(f"OP_CONV2D: the bias must be [{out}], got {list(inputs[2].dims)}")
    return Conv2DAttrs(out, kh, kw, p["PM_STRIDE_H"], p["PM_STRIDE_W"], p["PM_PADDING_H"], p["PM_PADDING_W"],
                       p["PM_GROUP"], len(inputs) == 3, ACTI[acti])


def default_reshape(x: TensorShape) -> tuple[int, ...]:
    """The target the generator probes a reshape with (and ``to_attrs`` gives one without a choice):
    the two outermost dimensions merged ([a, b, c] -> [a * b, c]), or on a matrix the outermost split
    in two ([a, c] -> [2, a / 2, c]). A rule found so is proved for every target (``translate``)."""
    d = x.dims
    if x.rank >= 3:
        return (d[0] * d[1],) + d[2:]
    if x.rank == 2 and d[0] % 2 == 0:
        return (2, d[0] // 2, d[1])
    raise GraphError(f"OP_RESHAPE: no default target for a tensor of shape {list(d)} (valid: rank 3 or 4, or a "
                     f"matrix whose outermost size is even)")


def _reshape_attrs(x: TensorShape, target) -> ReshapeAttrs:
    target = default_reshape(x) if target is None else tuple(target)
    attrs = ReshapeAttrs(target)
    resolved_shape(attrs, x)   # raises when the element counts differ
    if max(x.rank, len(target)) > RESHAPE_RANK:
        raise GraphError(f"OP_RESHAPE: {list(x.dims)} -> {list(target)}: a rule's reshape is between tensors of "
                         f"rank at most {RESHAPE_RANK}")
    return attrs


def to_attrs(op: PatternOp, inputs: Sequence[TensorShape], choice=None):
    """flexrt attributes of pattern operator ``op`` on inputs of these shapes (GraphError if it has none).
    ``choice``: what the rule leaves to the rewriter: where an ``OP_SPLIT`` cuts (its first part's size;
    None: equal parts), an ``OP_RESHAPE``'s target shape (None: ``default_reshape``)."""
    t, rank = op.type, inputs[0].rank if inputs else 0
    if t == "OP_LINEAR":
        acti = op.param("PM_ACTI", 0)
        if acti not in ACTI:
            raise GraphError(f"OP_LINEAR: PM_ACTI {acti} is not supported (valid: 0 none, 1 sigmoid, 2 relu, 3 tanh, 4 gelu)")
        if len(inputs) < 2 or inputs[1].rank != 2:
            raise GraphError(f"OP_LINEAR: the weight must be a matrix [in, out], got {inputs[1:2]}")
        return LinearAttrs(inputs[1].dims[1], len(inputs) == 3, ACTI[acti])
    if t == "OP_RELU":
        return ElementUnaryAttrs(OpType.RELU)
    if t in UNARY:
        return ElementUnaryAttrs(UNARY[t])
    if t == "OP_BIAS_ADD":
        return BiasAddAttrs()
    if t == "OP_SOFTMAX":
        return SoftmaxAttrs(flexrt_dim(op.param("PM_SOFTMAX_DIM"), rank))
    if t == "OP_BATCHMATMUL":
        return BatchMatmulAttrs()
    if t == "OP_LAYERNORM":
        n = op.param("PM_AXES")
        return LayerNormAttrs(tuple(range(-n, 0)), len(inputs) > 1, LAYER_NORM_EPS, len(inputs) == 3)
    if t == "OP_EMBEDDING":
        if len(inputs) < 2 or inputs[1].rank != 2:
            raise GraphError(f"OP_EMBEDDING: the table must be a matrix [entries, channels], got {inputs[1:2]}")
        entries, channels = inputs[1].dims
        return EmbeddingAttrs(entries, channels, AGGR[op.param("PM_AGGR", 0)], inputs[1].dtype)
    if t == "OP_CONV2D":
        return _conv_attrs(op, inputs)
    if t == "OP_BATCHNORM":
        acti = op.param("PM_ACTI", 0)
        if acti not in (0, 2):
            raise GraphError(f"OP_BATCHNORM: PM_ACTI {acti} is not supported (valid: 0 none, 2 relu)")
        if rank != 4:
            raise GraphError(f"OP_BATCHNORM: the input must be [N, C, H, W], got {inputs[:1]}")
        return dataclasses.replace(BATCH_NORM, relu=acti == 2)
    if t == "OP_REDUCE_SUM":
        return ReduceAttrs(OpType.REDUCE_SUM, (flexrt_dim(op.param("PM_AXIS"), rank),))
    if t in ("OP_EW_ADD", "OP_EW_MUL"):
        return ElementBinaryAttrs(BINARY[t])
    if t == "OP_SCALAR_MULTIPLY":
        return ElementUnaryAttrs(OpType.SCALAR_MUL, float(op.param("PM_SCALAR", 2)))
    if t == "OP_CONCAT":
        return ConcatAttrs(flexrt_dim(op.param("PM_AXIS"), rank))
    if t == "OP_SPLIT":
        axis = flexrt_dim(op.param("PM_AXIS"), rank)
        n, k = inputs[0].dims[axis], op.param("PM_NUM_OUTPUTS", 2)
        if choice is not None:
            if k != 2 or not 1 <= choice < n:
                raise GraphError(f"OP_SPLIT into {k}: cannot cut a dimension of size {n} after {choice} (valid: "
                                 f"two parts, 1 <= point < {n})")
            return SplitAttrs((choice, n - choice), axis)
        if n % k:
            raise GraphError(f"OP_SPLIT: dimension of size {n} does not split into {k} equal parts")
        return SplitAttrs((n // k,) * k, axis)
    if t == "OP_RESHAPE":
        return _reshape_attrs(inputs[0], choice)
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
    language has none for it (e.g. a pooling, a reshape, a layer or batch norm of another epsilon). The
    number of inputs (a linear's bias, a layer norm's affine weights) is the node's, compared by the
    matcher."""
    t = attrs.op_type
    rank = inputs[0].rank if inputs else 0
    if t is OpType.LINEAR:
        if attrs.activation not in ACTI_CODE:
            return None
        return PatternOp("OP_LINEAR", (), (("PM_ACTI", ACTI_CODE[attrs.activation]),))
    if t is OpType.RELU:
        return PatternOp("OP_RELU", ())
    if t in UNARY_CODE and attrs.scalar == 0.0:
        return PatternOp(UNARY_CODE[t], ())
    if t is OpType.BIAS_ADD:
        return PatternOp("OP_BIAS_ADD", ())
    if t is OpType.SOFTMAX and not attrs.causal:
        return PatternOp("OP_SOFTMAX", (), (("PM_SOFTMAX_DIM", flexflow_dim(softmax_axis(attrs, rank), rank)),))
    if t is OpType.BATCH_MATMUL and attrs.a_seq_length_dim is None and attrs.b_seq_length_dim is None:
        return PatternOp("OP_BATCHMATMUL", ())
    if t is OpType.LAYER_NORM and attrs.eps == LAYER_NORM_EPS:
        axes = sorted(a % rank for a in attrs.axes)
        if axes == list(range(rank - len(axes), rank)):
            return PatternOp("OP_LAYERNORM", (), (("PM_AXES", len(axes)),))
        return None
    if t is OpType.EMBEDDING and attrs.aggr in AGGR_CODE:
        return PatternOp("OP_EMBEDDING", (), (("PM_AGGR", AGGR_CODE[attrs.aggr]),))
    if t is OpType.BATCH_NORM and rank == 4 and (attrs.eps, attrs.momentum) == (BATCH_NORM.eps, BATCH_NORM.momentum):
        return PatternOp("OP_BATCHNORM", (), (("PM_ACTI", 2 if attrs.relu else 0),))
    if t is OpType.CONV2D and attrs.activation in ACTI_CODE:
        values = (attrs.kernel_h, attrs.kernel_w, attrs.stride_h, attrs.stride_w, attrs.padding_h, attrs.padding_w)
        return PatternOp("OP_CONV2D", (), tuple(zip(CONV_PARAMS, values)) + (
            ("PM_GROUP", attrs.groups), ("PM_ACTI", ACTI_CODE[attrs.activation])))
    if t is OpType.REDUCE_SUM and len(attrs.axes) == 1 and not attrs.keepdims and rank:
        return PatternOp("OP_REDUCE_SUM", (), (("PM_AXIS", flexflow_dim(attrs.axes[0], rank)),))
    if t in BINARY_CODE:
        return PatternOp(BINARY_CODE[t], ())
    if t is OpType.SCALAR_MUL and float(attrs.scalar).is_integer():
        return PatternOp("OP_SCALAR_MULTIPLY", (), (("PM_SCALAR", int(attrs.scalar)),))
    if t is OpType.CONCAT and len(inputs) == 2:
        return PatternOp("OP_CONCAT", (), (("PM_AXIS", flexflow_dim(attrs.axis, rank)), ("PM_NUM_INPUTS", 2),
                                           ("PM_NUMDIM", rank)))
    if t is OpType.SPLIT and (len(attrs.sizes) == 2 or len(set(attrs.sizes)) == 1):
        return PatternOp("OP_SPLIT", (), (("PM_AXIS", flexflow_dim(attrs.axis, rank)),
                                          ("PM_NUM_OUTPUTS", len(attrs.sizes))))
    if t is OpType.RESHAPE and max(rank, len(attrs.shape)) <= RESHAPE_RANK:
        return PatternOp("OP_RESHAPE", ())
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
