"""Forwards and backwards of the shape operators: concat, split, reshape, transpose, reverse, flat, cast,
gather.

Each returns fresh arrays (never views of its operands), so that a runtime may free or overwrite
an operand after the call.
"""

from __future__ import annotations

import itertools

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.kernels.ops._scatter import scatter_add_along
from flexrt.kernels.registry import register_backward, register_forward


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


@register_forward(OpType.REVERSE)
def reverse_forward(xp, attrs, operands):
    (x,) = operands
    return (xp.flip(x, axis=attrs.axis % x.ndim).copy(),)


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
    if index.size:      # ONNX GatherElements' range: -n..n-1 (a negative index counts from the end)
        lo, hi, n = int(index.min()), int(index.max()), x.shape[dim]
        if lo < -n or hi >= n:
            raise ShapeError(f"gather: index {lo if lo < -n else hi} is out of range for dimension {dim} of size "
                             f"{n}; valid indices: {-n}..{n - 1} (negative ones count from the end)")
    return (xp.take_along_axis(x, index, axis=dim),)


def _bounds(sizes):
    return [0, *itertools.accumulate(sizes)]


@register_backward(OpType.CONCAT)
def concat_backward(xp, attrs, operands, outputs, grad_outputs):
    (g,) = grad_outputs
    axis = attrs.axis % g.ndim
    bounds = _bounds([a.shape[axis] for a in operands])
    grads = []
    for a, lo, hi in zip(operands, bounds, bounds[1:]):
        if a.dtype.kind not in "fc":
            grads.append(None)
            continue
        sl = [slice(None)] * g.ndim
        sl[axis] = slice(lo, hi)
        grads.append(g[tuple(sl)].astype(a.dtype, copy=True))
    return tuple(grads)


@register_backward(OpType.SPLIT)
def split_backward(xp, attrs, operands, outputs, grad_outputs):
    (x,) = operands
    if x.dtype.kind not in "fc":
        return (None,)
    axis = attrs.axis % x.ndim
    parts = [xp.zeros(o.shape, dtype=x.dtype) if g is None else g.astype(x.dtype, copy=False)
             for o, g in zip(outputs, grad_outputs)]
    return (xp.concatenate(parts, axis=axis),)


def _float_or_none(fn):
    """Backward of a one-input layout operator: None for a non-floating input."""
    def backward(xp, attrs, operands, outputs, grad_outputs):
        (x,) = operands
        if x.dtype.kind not in "fc":
            return (None,)
        return (fn(xp, attrs, x, grad_outputs[0]).astype(x.dtype, copy=False),)
    backward.__name__ = fn.__name__
    return backward


@register_backward(OpType.RESHAPE, OpType.FLAT)
@_float_or_none
def reshape_backward(xp, attrs, x, g):
    return xp.reshape(g, x.shape).copy()


@register_backward(OpType.TRANSPOSE)
@_float_or_none
def transpose_backward(xp, attrs, x, g):
    inv = [0] * len(attrs.perm)
    for i, p in enumerate(attrs.perm):
        inv[p % x.ndim] = i
    return xp.ascontiguousarray(xp.transpose(g, inv))


@register_backward(OpType.REVERSE)
@_float_or_none
def reverse_backward(xp, attrs, x, g):
    return xp.flip(g, axis=attrs.axis % x.ndim).copy()  # reversal is its own inverse and linear


@register_backward(OpType.CAST)
def cast_backward(xp, attrs, operands, outputs, grad_outputs):
    """The gradient cast back to the input's dtype; None for a non-floating input, zeros when the
    output is not floating (an integer cast is piecewise constant)."""
    (x,) = operands
    if x.dtype.kind not in "fc":
        return (None,)
    g = grad_outputs[0]
    if g is None or outputs[0].dtype.kind not in "fc":
        return (xp.zeros(x.shape, dtype=x.dtype),)
    return (g.astype(x.dtype, copy=True),)


@register_backward(OpType.GATHER)
def gather_backward(xp, attrs, operands, outputs, grad_outputs):
    x, index = operands
    if x.dtype.kind not in "fc":
        return None, None
    dim = attrs.dim % x.ndim
    return scatter_add_along(xp, x.shape, dim, index, grad_outputs[0], x.dtype), None
