"""``OpType``: one enum for every operator, with algebraic families as sets (tinygrad style)."""

from __future__ import annotations

import enum


class OpType(enum.Enum):
    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    # sources
    INPUT = "input"
    WEIGHT = "weight"
    # dense and convolutional
    LINEAR = "linear"
    BIAS_ADD = "bias_add"
    CONV2D = "conv2d"
    POOL2D = "pool2d"
    BATCH_NORM = "batch_norm"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    EMBEDDING = "embedding"
    BATCH_MATMUL = "batch_matmul"
    MULTIHEAD_ATTENTION = "multihead_attention"
    LSH_SELF_ATTENTION = "lsh_self_attention"
    LSTM = "lstm"
    # shape manipulation
    CONCAT = "concat"
    SPLIT = "split"
    RESHAPE = "reshape"
    TRANSPOSE = "transpose"
    REVERSE = "reverse"
    FLAT = "flat"
    GATHER = "gather"
    CAST = "cast"
    # element-wise binary
    EW_ADD = "add"
    EW_SUB = "subtract"
    EW_MUL = "multiply"
    EW_DIV = "divide"
    EW_MAX = "max"
    EW_MIN = "min"
    # element-wise unary
    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    GELU = "gelu"
    ELU = "elu"
    EXP = "exp"
    LOG = "log"
    SIN = "sin"
    COS = "cos"
    IDENTITY = "identity"
    RSQRT = "rsqrt"
    POW = "pow"
    SCALAR_ADD = "scalar_add"
    SCALAR_SUB = "scalar_sub"
    SCALAR_MUL = "scalar_multiply"
    SCALAR_TRUE_DIV = "scalar_true_divide"
    # normalization / reductions / misc
    SOFTMAX = "softmax"
    DROPOUT = "dropout"
    REDUCE_SUM = "reduce_sum"
    MEAN = "mean"
    # parallelization operators (Unity §3.3)
    REPARTITION = "repartition"
    COMBINE = "combine"
    REPLICATE = "replicate"
    REDUCTION = "reduction"
    ALLREDUCE = "allreduce"
    PIPELINE = "pipeline"
    BATCH = "batch"


ELEMENT_BINARY = frozenset({OpType.EW_ADD, OpType.EW_SUB, OpType.EW_MUL, OpType.EW_DIV, OpType.EW_MAX, OpType.EW_MIN})
SCALAR_OPS = frozenset({OpType.SCALAR_ADD, OpType.SCALAR_SUB, OpType.SCALAR_MUL, OpType.SCALAR_TRUE_DIV})
ELEMENT_UNARY = frozenset({
    OpType.RELU, OpType.SIGMOID, OpType.TANH, OpType.GELU, OpType.ELU, OpType.EXP, OpType.SIN, OpType.COS,
    OpType.IDENTITY, OpType.RSQRT, OpType.POW, OpType.LOG}) | SCALAR_OPS
REDUCE_OPS = frozenset({OpType.REDUCE_SUM, OpType.MEAN})
# Loop fusion (XLA's): operators that compute each output element from the same element of their
# operands (or move elements), so a fused kernel feeds them tile by tile, on chip.
LOOP_FUSIBLE = ELEMENT_UNARY | ELEMENT_BINARY | frozenset({OpType.DROPOUT, OpType.CAST, OpType.RESHAPE, OpType.FLAT,
                                                           OpType.TRANSPOSE})
# Linear in their (only / every) input: f(a1 + a2) = f(a1) + f(a2), so partial sums pass through.
LINEAR_UNARY = frozenset({OpType.IDENTITY, OpType.SCALAR_MUL, OpType.SCALAR_TRUE_DIV})
# Sum of partial sums is still a sum: (a1 + a2) + (b1 + b2) = (a1 + b1) + (a2 + b2).
LINEAR_BINARY = frozenset({OpType.EW_ADD, OpType.EW_SUB})
COMMUTATIVE = frozenset({OpType.EW_ADD, OpType.EW_MUL, OpType.EW_MAX, OpType.EW_MIN})
PARALLEL_OPS = frozenset({
    OpType.REPARTITION, OpType.COMBINE, OpType.REPLICATE, OpType.REDUCTION, OpType.ALLREDUCE,
    OpType.PIPELINE, OpType.BATCH})
SOURCE_OPS = frozenset({OpType.INPUT, OpType.WEIGHT})
