"""Forwards of the shape operators: concat, split, reshape, transpose, flat, cast, gather.

Each returns fresh arrays (never views of its operands), so that a runtime may free or overwrite
an operand after the call.
"""

from __future__ import annotations

import itertools

from flexrt.ir.op_type import OpType
from flexrt.kernels.registry import register_forward


@register_forward(OpType.CONCAT)
def concat_forward(xp, attrs, operands):
    return (xp.concatenate(operands, axis=attrs.axis),)


@register_forward(OpType.SPLIT)
def split_forward(xp, attrs, operands):
    (x,) = operands
    axis = attrs.axis % x.ndim
    bounds = [0, *itertools.accumulate(attrs.sizes)]
    outs = []
    for lo, hi in zip(bounds, bounds[1:]):
        sl = [slice(None)] * x.ndim
        sl[axis] = slice(lo, hi)
        outs.append(xp.ascontiguousarray(x[tuple(sl)]))
    return tuple(outs)


@register_forward(OpType.RESHAPE)
def reshape_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.reshape(x, attrs.shape).copy(),)


@register_forward(OpType.TRANSPOSE)
def transpose_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.ascontiguousarray(xp.transpose(x, attrs.perm)),)


@register_forward(OpType.FLAT)
def flat_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.reshape(x, (x.shape[0], -1)).copy(),)


@register_forward(OpType.CAST)
def cast_forward(xp, attrs, operands):
    (x,) = operands
    return (x.astype(attrs.dtype.numpy_name),)


@register_forward(OpType.GATHER)
def gather_forward(xp, attrs, operands):
    """torch.gather: the input is first cut to the index's sizes outside ``dim`` (torch reads only
    that part), then indexed along ``dim``."""
    x, index = operands
    dim = attrs.dim % x.ndim
    x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    return (xp.take_along_axis(x, index, axis=dim),)
