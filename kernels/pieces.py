"""Parallel values: a tensor held as pieces, and operators run piece by piece.

A ``ParallelValue`` stores one array per piece of a ``ParallelTensorShape``, keyed by
(shard index per dimension, partial-sum index, copy index). ``run_pieces`` runs a compute operator
once per piece of its parallel axes, each piece reading only its region of each operand (plus the
halo of convolution windows); ``apply_parallel_op`` runs a parallelization operator on the pieces
(slicing, concatenating, copying or summing them). Together they check every parallelization rule
against brute force (tests/kernels/test_parallel_rules.py) and are the reference the runtime follows.

Entry points: ``scatter``, ``gather``, ``run_pieces``, ``apply_parallel_op``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_axes import axis_coordinates, infer_parallel, solve_axes, tensor_region
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.registry import op_def
from flexrt.kernels.registry import forward_kernel

PieceKey = tuple  # (shard index tuple, sum index, copy index)


@dataclass
class ParallelValue:
    shape: ParallelTensorShape
    pieces: dict

    def keys(self):
        return piece_keys(self.shape)


def piece_keys(shape: ParallelTensorShape) -> list[PieceKey]:
    shards = itertools.product(*(range(d) for d in shape.shard_degrees))
    return [(s, k, c) for s in shards for k in range(shape.sum_degree) for c in range(shape.discard_copy_degree)]


def _slices(shape: ParallelTensorShape, shard_idx) -> tuple:
    return tuple(slice(i * d.piece_size, (i + 1) * d.piece_size) for i, d in zip(shard_idx, shape.dims))


def _split_sum(xp, full, n: int, rng):
    """``n`` arrays that add up to ``full`` (random when ``rng`` is given, else full + zeros)."""
    if n == 1:
        return [full]
    if rng is None:
        return [full] + [xp.zeros_like(full) for _ in range(n - 1)]
    if full.dtype.kind in "iub":
        parts = [xp.asarray(rng.integers(-3, 4, size=full.shape)).astype(full.dtype) for _ in range(n - 1)]
    else:
        parts = [xp.asarray(rng.standard_normal(full.shape)).astype(full.dtype) for _ in range(n - 1)]
    return [full - sum(parts)] + parts


def scatter(xp, full, shape: ParallelTensorShape, rng=None) -> ParallelValue:
    """Cut ``full`` into the pieces of ``shape``; partial sums are a random split when ``rng`` is given."""
    if tuple(full.shape) != shape.sizes:
        raise ShapeError(f"array of shape {list(full.shape)} does not match parallel shape {shape}")
    partials = _split_sum(xp, full, shape.sum_degree, rng)
    pieces = {}
    for s, k, c in piece_keys(shape):
        pieces[(s, k, c)] = partials[k][_slices(shape, s)].copy()
    return ParallelValue(shape, pieces)


def _assemble(xp, value: ParallelValue, sum_idx: int, copy_idx: int):
    """The full-size array of one partial sum of one replica, from its shards."""
    shape = value.shape
    out = xp.empty(shape.sizes, dtype=next(iter(value.pieces.values())).dtype)
    for s in itertools.product(*(range(d) for d in shape.shard_degrees)):
        out[_slices(shape, s)] = value.pieces[(s, sum_idx, copy_idx)]
    return out


def gather(xp, value: ParallelValue, rtol: float = 1e-9, atol: float = 1e-9):
    """The full tensor: shards joined, partial sums added; replicas must agree (else ShapeError)."""
    shape = value.shape
    copies = []
    for c in range(shape.discard_copy_degree):
        total = _assemble(xp, value, 0, c)
        for k in range(1, shape.sum_degree):
            total = total + _assemble(xp, value, k, c)
        copies.append(total)
    for c, other in enumerate(copies[1:], 1):
        if not xp.allclose(copies[0], other, rtol=rtol, atol=atol, equal_nan=True):
            raise ShapeError(f"replica {c} of {shape} differs from replica 0")
    return copies[0]


def _read_region(xp, value: ParallelValue, region, fill: float, cache: dict):
    key = (id(value), region.sum_index, region.copy_index)
    if key not in cache:
        cache[key] = _assemble(xp, value, region.sum_index, region.copy_index)
    full = cache[key]
    sizes = value.shape.sizes
    lo = [max(a, 0) for a, _ in region.ranges]
    hi = [min(b, n) for (_, b), n in zip(region.ranges, sizes)]
    inner = full[tuple(slice(a, b) for a, b in zip(lo, hi))]
    pads = [(a0 - a, b - b0) for (a, b), a0, b0 in zip(region.ranges, lo, hi)]
    if any(p != (0, 0) for p in pads):
        inner = xp.pad(inner, pads, constant_values=fill)
    return inner.copy()


def run_pieces(xp, attrs, operands: list[ParallelValue], name: str = "op") -> list[ParallelValue]:
    """Run a compute operator piece by piece (one call per coordinate of its parallel axes)."""
    opdef = op_def(attrs.op_type)
    shapes = [v.shape for v in operands]
    out_shapes = infer_parallel(opdef, attrs, name, shapes)
    nw = opdef.num_weights(attrs)
    data = shapes[:len(shapes) - nw]
    axes, degree = solve_axes(opdef, attrs, name, data)
    data_full = [s.tensor_shape for s in data]
    fn = forward_kernel(attrs.op_type)
    fill = opdef.halo_fill(attrs)
    outs = [ParallelValue(s, {}) for s in out_shapes]
    cache: dict = {}
    for coords in axis_coordinates(axes, degree):
        piece_attrs, zeroed = attrs, frozenset()
        if opdef.piece_call is not None:
            piece_attrs, zeroed = opdef.piece_call(attrs, coords, degree)
        args = []
        for i, v in enumerate(operands):
            region = tensor_region(axes, degree, coords, i, v.shape.tensor_shape, False, opdef, attrs,
                                   data_full, out_shapes[0].tensor_shape)
            arr = _read_region(xp, v, region, fill, cache)
            args.append(xp.zeros_like(arr) if i in zeroed else arr)
        results = fn(xp, piece_attrs, args)
        for k, (res, out) in enumerate(zip(results, outs)):
            region = tensor_region(axes, degree, coords, k, out.shape.tensor_shape, True)
            idx = tuple(a // d.piece_size for (a, _), d in zip(region.ranges, out.shape.dims))
            if tuple(res.shape) != out.shape.piece_shape.dims:
                raise ShapeError(f"{attrs.op_type.value} '{name}': piece {coords} computed shape "
                                 f"{list(res.shape)}, expected {list(out.shape.piece_shape.dims)}")
            out.pieces[(idx, region.sum_index, region.copy_index)] = res
    return outs


def apply_parallel_op(xp, attrs, value: ParallelValue) -> ParallelValue:
    """Move a value's pieces as a parallelization operator does (Unity §3.3)."""
    (out_shape,) = op_def(attrs.op_type).parallel_rule(attrs, [value.shape])
    src, t = value.shape, attrs.op_type
    pieces = {}
    if t in (OpType.REPARTITION, OpType.COMBINE):
        d = attrs.dim % src.rank
        for s, k, c in piece_keys(out_shape):
            lo = s[d] * out_shape.dims[d].piece_size  # element offset of the new piece along d
            src_s = list(s)
            src_s[d] = lo // src.dims[d].piece_size
            if t is OpType.REPARTITION:
                off = lo - src_s[d] * src.dims[d].piece_size
                sl = [slice(None)] * src.rank
                sl[d] = slice(off, off + out_shape.dims[d].piece_size)
                pieces[(s, k, c)] = value.pieces[(tuple(src_s), k, c)][tuple(sl)].copy()
            else:
                parts = []
                for j in range(attrs.degree):
                    ss = list(src_s)
                    ss[d] = src_s[d] + j
                    parts.append(value.pieces[(tuple(ss), k, c)])
                pieces[(s, k, c)] = xp.concatenate(parts, axis=d)
    elif t is OpType.REPLICATE:
        for s, k, c in piece_keys(out_shape):
            pieces[(s, k, c)] = value.pieces[(s, k, c // attrs.degree)].copy()
    elif t in (OpType.REDUCTION, OpType.ALLREDUCE):
        for s, k, c in piece_keys(out_shape):
            src_c = c // attrs.degree if t is OpType.ALLREDUCE else c
            parts = [value.pieces[(s, k * attrs.degree + j, src_c)] for j in range(attrs.degree)]
            pieces[(s, k, c)] = sum(parts[1:], parts[0].copy())
    else:
        raise ShapeError(f"{t.value}: piece-wise movement is defined for Repartition, Combine, Replicate, "
                         f"Reduction and AllReduce; {t.value} is scheduled by the runtime")
    return ParallelValue(out_shape, pieces)
