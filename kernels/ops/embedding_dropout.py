"""Embedding (with bag aggregation) and Dropout forwards and backwards.

Dropout draws its keep mask with a NumPy Generator seeded by ``attrs.seed`` (so a mask is a pure
function of seed and shape on every backend) and moves it to the array module with ``xp.asarray``;
the backward recomputes the same mask. The embedding table's gradient is a row scatter-add
(``_scatter.scatter_add_rows``); the indices get none.
"""

from __future__ import annotations

import numpy as np  # only for the dropout mask's Generator: the mask must not depend on the backend

from flexrt.errors import ShapeError
from flexrt.ir.enums import AggrMode
from flexrt.ir.op_type import OpType
from flexrt.kernels.ops._scatter import scatter_add_rows
from flexrt.kernels.registry import register_backward, register_forward


def _rows_of(xp, attrs, idx, table):
    """(the rows of ``table`` that ``idx`` looks up; where they fall in it, or None for everywhere):
    a piece cut along ``entries`` holds rows ``entries_piece * rows`` onward and looks up only the
    indices there (the others read row 0, masked)."""
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"embedding: indices have dtype {idx.dtype}; valid: int32, int64")
    n = table.shape[0] * attrs.entries_degree
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise ShapeError(f"embedding: index {bad} is out of range for a table of {n} entries; "
                             f"valid indices: 0..{n - 1}")
    if attrs.entries_degree == 1:
        return idx, None
    local = idx - attrs.entries_piece * table.shape[0]
    hit = (local >= 0) & (local < table.shape[0])
    return xp.where(hit, local, 0), hit


@register_forward(OpType.EMBEDDING)
def embedding_forward(xp, attrs, operands):
    idx, table = operands
    local, hit = _rows_of(xp, attrs, idx, table)
    rows = xp.take(table, local, axis=0)  # [..., out]
    if hit is not None:   # indices of other pieces' rows give zeros
        rows = rows * hit[..., None].astype(rows.dtype)
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


@register_backward(OpType.EMBEDDING)
def embedding_backward(xp, attrs, operands, outputs, grad_outputs):
    idx, table = operands
    (dy,) = grad_outputs
    local, hit = _rows_of(xp, attrs, idx, table)
    width = table.shape[-1]
    if attrs.aggr is AggrMode.AGGR_MODE_NONE:
        rows = dy.reshape(-1, width)
    else:  # every index of a bag gets the bag's gradient (divided by the bag size for avg)
        bag = idx.shape[-1]
        rows = xp.broadcast_to(dy[..., None, :], tuple(dy.shape[:-1]) + (bag, width))
        if attrs.aggr is AggrMode.AGGR_MODE_AVG:
            rows = rows / dy.dtype.type(bag)
        rows = rows.reshape(-1, width)
    if hit is not None:   # only this piece's rows get gradients
        rows = rows * hit.reshape(-1, 1).astype(rows.dtype)
    return None, scatter_add_rows(xp, table.shape[0], local.reshape(-1), rows)


@register_backward(OpType.DROPOUT)
def dropout_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,), (dy,) = operands, grad_outputs
    if attrs.rate == 0.0:
        return (dy.copy(),)
    keep = xp.asarray(dropout_mask(attrs.seed, tuple(x.shape), attrs.rate))
    return (xp.where(keep, dy * dy.dtype.type(1.0 / (1.0 - attrs.rate)), dy.dtype.type(0)),)
