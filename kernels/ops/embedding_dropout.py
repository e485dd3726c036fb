"""Embedding (with bag aggregation) and Dropout forwards.

Dropout draws its keep mask with a NumPy Generator seeded by ``attrs.seed`` (so a mask is a pure
function of seed and shape on every backend) and moves it to the array module with ``xp.asarray``.
"""

from __future__ import annotations

import numpy as np  # only for the dropout mask's Generator: the mask must not depend on the backend

from flexrt.errors import ShapeError
from flexrt.ir.enums import AggrMode
from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_forward


@register_forward(OpType.EMBEDDING)
def embedding_forward(xp, attrs, operands):
    idx, table = operands
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"embedding: indices have dtype {idx.dtype}; valid: int32, int64")
    n = table.shape[0]
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise ShapeError(f"embedding: index {bad} is out of range for a table of {n} entries; "
                             f"valid indices: 0..{n - 1}")
    rows = xp.take(table, idx, axis=0)  # [..., out]
    if attrs.aggr is AggrMode.AGGR_MODE_SUM:
        rows = xp.sum(rows, axis=-2)
    elif attrs.aggr is AggrMode.AGGR_MODE_AVG:
        rows = xp.mean(rows, axis=-2)
    return (rows,)


def dropout_mask(seed: int, shape: tuple, rate: float):
    """The NumPy keep mask (True = kept) of a dropout call: a pure function of (seed, shape, rate)."""
    return np.random.default_rng(seed).random(shape) >= rate


@register_forward(OpType.DROPOUT)
def dropout_forward(xp, attrs, operands):
    (x,) = operands
    if attrs.rate == 0.0:
        return (x.copy(),)
    keep = xp.asarray(dropout_mask(attrs.seed, tuple(x.shape), attrs.rate))
    return (xp.where(keep, x * x.dtype.type(1.0 / (1.0 - attrs.rate)), x.dtype.type(0)),)
