"""Parallel shape inference for compute operators, derived from their ``ParallelAxis`` lists.

An operator's axes say which slots of its operands (shard dimension, sum, copy) and outputs each
independent parallel degree lands on. Given the parallel shapes of the data inputs this module
solves the degree of every axis, checks that the operands agree, and produces the output parallel
shapes and the parallel shapes the weights must have. It also maps a piece (a coordinate per axis)
to the region of each tensor it reads or writes, which the kernels' brute-force checker and the
runtime both use.

Entry points: ``infer_parallel``, ``solve_axes``, ``required_weight_shapes``, ``operand_region``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from flexrt.errors import ShapeError
from flexrt.ir.parallel_tensor import ParallelDegrees, ParallelTensorShape
from flexrt.ir.registry import OpDef, ParallelAxis, Slot, SlotKind
from flexrt.ir.tensor_shape import TensorShape


_AXES: dict = {}


def axes_of(opdef: OpDef, attrs, data_shapes: Sequence[TensorShape]) -> tuple[ParallelAxis, ...]:
    """``opdef.parallel_axes(attrs, data_shapes)``, computed once per (operator type, attributes,
    data shapes): operators of one kind and shape share the tuple."""
    key = (opdef.op_type, attrs, tuple(data_shapes))
    hit = _AXES.get(key)
    if hit is None:
        if len(_AXES) > 100_000:
            _AXES.clear()
        hit = _AXES[key] = tuple(opdef.parallel_axes(attrs, list(data_shapes)))
    return hit


def _slot_degree(shape: ParallelTensorShape, slot: Slot) -> int:
    if slot.kind is SlotKind.SHARD:
        return shape.dims[slot.dim].degree
    return shape.sum_degree if slot.kind is SlotKind.SUM else shape.discard_copy_degree


def _all_slots(shape_rank: int) -> list[Slot]:
    return [Slot(SlotKind.SHARD, d) for d in range(shape_rank)] + [Slot(SlotKind.SUM), Slot(SlotKind.COPY)]


def _key(slot: Slot) -> tuple:
    return (slot.kind, slot.dim)  # halo is a property of how a piece reads, not a different slot


def _axes_at(axes: Sequence[ParallelAxis], operand: int, slot: Slot, output: bool = False) -> list[ParallelAxis]:
    found = []
    for ax in axes:
        for idx, s in (ax.outputs if output else ax.operands):
            if idx == operand and _key(s) == _key(slot):
                found.append(ax)
    return found


def _describe(axes: Sequence[ParallelAxis], operand: int) -> str:
    parts = []
    for ax in axes:
        for idx, s in ax.operands:
            if idx == operand:
                parts.append(f"{s} ({ax.name})")
    return ", ".join(parts) if parts else "nothing"


def solve_axes(opdef: OpDef, attrs, name: str, data_inputs: Sequence[ParallelTensorShape]) -> tuple[
        tuple[ParallelAxis, ...], dict[str, int]]:
    """The operator's axes and the degree of each, read from the data inputs' degrees.

    Raises ShapeError when an input is cut in a way the operator does not accept.
    """
    full = [s.tensor_shape for s in data_inputs]
    axes = axes_of(opdef, attrs, full)
    label = f"{opdef.op_type.value} '{name}'"
    # an axis whose degree the attributes hold (``degree_attr``) first; then each other axis reads
    # its degree from a data input's slot that it shares with none, or only with such axes
    degree: dict[str, int] = {ax.name: getattr(attrs, ax.degree_attr) for ax in axes if ax.degree_attr}
    for ax in axes:
        if ax.degree_attr:
            continue
        for idx, slot in ax.operands:
            if idx >= len(data_inputs):   # a weight: its degrees are what the data inputs imply
                continue
            others = [a for a in _axes_at(axes, idx, slot) if a is not ax]
            if all(a.degree_attr for a in others):
                degree[ax.name] = _slot_degree(data_inputs[idx], slot) // math.prod(degree[a.name] for a in others)
                break
        else:
            raise ShapeError(f"{label}: rule error, axis '{ax.name}' has no slot of its own on a data input")
    for idx, shape in enumerate(data_inputs):
        for slot in _all_slots(shape.rank):
            covering = _axes_at(axes, idx, slot)
            expected = math.prod(degree[a.name] for a in covering)
            actual = _slot_degree(shape, slot)
            if actual != expected:
                if not covering:
                    what = ("holds partial sums (sum degree %d) and the operator is not linear in it; "
                            "insert a Reduction first" % actual) if slot.kind is SlotKind.SUM else (
                        f"is cut along {slot} with degree {actual}, which this operator cannot parallelize")
                    raise ShapeError(f"{label}: input {idx} {shape} {what}; parallelizable slots of input {idx}: "
                                     f"{_describe(axes, idx)}")
                raise ShapeError(
                    f"{label}: input {idx} {shape} has degree {actual} on {slot} but the other inputs imply "
                    f"{expected} (axes {', '.join(a.name for a in covering)} with degrees "
                    f"{', '.join(str(degree[a.name]) for a in covering)}); inputs: "
                    f"{', '.join(str(s) for s in data_inputs)}")
    if opdef.check_degrees is not None:
        try:
            opdef.check_degrees(attrs, full, degree)
        except ShapeError as e:
            raise ShapeError(f"{label}: {e}") from None
    return axes, degree


def tensor_degrees(axes, degree, idx, rank, output: bool) -> ParallelDegrees:
    """The degrees of operand (or output) ``idx`` when the axes have degrees ``degree``."""
    def prod_at(slot):
        return math.prod(degree[a.name] for a in _axes_at(axes, idx, slot, output))
    return ParallelDegrees(tuple(prod_at(Slot(SlotKind.SHARD, d)) for d in range(rank)),
                           prod_at(Slot(SlotKind.SUM)), prod_at(Slot(SlotKind.COPY)))


def _with(shape: TensorShape, deg: ParallelDegrees, label: str, what: str) -> ParallelTensorShape:
    try:
        return ParallelTensorShape.of(shape.dims, deg.shard, deg.sum, deg.copy, shape.dtype)
    except ShapeError as e:
        raise ShapeError(f"{label}: {what}: {e}") from None


_WEIGHTS: dict = {}         # (attrs, data shapes) -> required weight shapes, for successes


def required_weight_shapes(opdef: OpDef, attrs, name: str,
                           data_inputs: Sequence[ParallelTensorShape]) -> tuple[ParallelTensorShape, ...]:
    """The parallel shapes the operator's weights must have for these data-input degrees (a pure
    function of attributes and shapes, remembered; the name only labels errors)."""
    try:
        key = (attrs, tuple(data_inputs))
        hit = _WEIGHTS.get(key)
    except TypeError:
        return _required_weight_shapes(opdef, attrs, name, data_inputs)
    if hit is None:
        hit = _required_weight_shapes(opdef, attrs, name, data_inputs)
        if len(_WEIGHTS) >= 200_000:
            _WEIGHTS.clear()
        _WEIGHTS[key] = hit
    return hit


def _required_weight_shapes(opdef: OpDef, attrs, name: str,
                            data_inputs: Sequence[ParallelTensorShape]) -> tuple[ParallelTensorShape, ...]:
    axes, degree = solve_axes(opdef, attrs, name, data_inputs)
    full = [s.tensor_shape for s in data_inputs]
    wshapes = opdef.weight_shapes(attrs, full) if opdef.weight_shapes else ()
    label = f"{opdef.op_type.value} '{name}'"
    n = len(data_inputs)
    return tuple(_with(w, tensor_degrees(axes, degree, n + i, w.rank, False), label, f"weight {i}")
                 for i, w in enumerate(wshapes))


def infer_parallel(opdef: OpDef, attrs, name: str, operands: Sequence[ParallelTensorShape]) -> tuple[
        ParallelTensorShape, ...]:
    """Output parallel shapes of a compute operator from its operands (data inputs, then weights)."""
    label = f"{opdef.op_type.value} '{name}'"
    nw = opdef.num_weights(attrs)
    data = list(operands[:len(operands) - nw])
    weights = operands[len(operands) - nw:]
    outs = opdef.output_shapes(attrs, [s.tensor_shape for s in data])   # the logical shapes first: a clear error
    axes, degree = solve_axes(opdef, attrs, name, data)
    if nw:
        required = required_weight_shapes(opdef, attrs, name, data)
        for i, (have, need) in enumerate(zip(weights, required)):
            if have != need:
                names = opdef.weight_names(attrs)
                raise ShapeError(f"{label}: weight '{names[i]}' is {have} but the inputs "
                                 f"{', '.join(map(str, data))} require {need}")
    return tuple(_with(o, tensor_degrees(axes, degree, k, o.rank, True), label, f"output {k}")
                 for k, o in enumerate(outs))


@dataclass(frozen=True, slots=True)
class Region:
    """The part of a tensor one piece touches: a [start, stop) range per dimension (ranges of halo
    dimensions may reach outside the tensor, meaning padding), the partial-sum index and the
    replica index."""

    ranges: tuple[tuple[int, int], ...]
    sum_index: int = 0
    copy_index: int = 0


def axis_coordinates(axes: Sequence[ParallelAxis], degree: dict[str, int]) -> list[dict[str, int]]:
    """Every piece of the operator as {axis name: coordinate}, in row-major order of the axes."""
    names = [a.name for a in axes]
    return [dict(zip(names, c)) for c in itertools.product(*(range(degree[n]) for n in names))]


def region_plan(axes, idx: int, rank: int, output: bool):
    """How the regions of operand (or output) ``idx`` follow from axis coordinates: per dimension
    (names of the covering axes, halo, output dim of the halo), then the names covering the sum
    and copy slots. Compute it once per tensor and call ``plan_region`` per piece."""
    dims = []
    for d in range(rank):
        slot = Slot(SlotKind.SHARD, d)
        covering = _axes_at(axes, idx, slot, output)
        halo = not output and any(_key(s) == _key(slot) and s.halo
                                  for a in covering for j, s in a.operands if j == idx)
        out_dim = next((s.dim for a in covering for j, s in a.outputs if j == 0 and s.kind is SlotKind.SHARD), -1)
        parts = [] if output else [(a.name, s.at, s.of) for a in axes for j, s in a.operands
                                   if j == idx and s.kind is SlotKind.PART and s.dim == d]
        if parts and covering:
            raise ShapeError(f"rule error: dimension {d} of operand {idx} is both a part and cut")
        dims.append((tuple(a.name for a in covering), halo, out_dim) + tuple(parts[:1]))
    names = lambda kind: tuple(a.name for a in _axes_at(axes, idx, Slot(kind), output))  # noqa: E731
    select = () if output else tuple((a.name, s.at, s.of) for a in axes for j, s in a.operands
                                     if j == idx and s.kind is SlotKind.PART and s.dim < 0)
    return tuple(dims), names(SlotKind.SUM), names(SlotKind.COPY), select[:1]


def _index(names, degree, coords) -> int:
    idx = 0
    for n in names:  # mixed radix, first axis most significant
        idx = idx * degree[n] + coords[n]
    return idx


def tensor_region(axes, degree, coords, idx: int, shape: TensorShape, output: bool,
                  opdef: OpDef | None = None, attrs=None, data_shapes=None, out_shape=None) -> Region:
    """The region of operand (or output) ``idx`` that the piece at ``coords`` reads (writes)."""
    return plan_region(region_plan(axes, idx, len(shape.dims), output), idx, degree, coords, shape, opdef, attrs,
                       data_shapes, out_shape)


def plan_region(plan, idx: int, degree, coords, shape: TensorShape, opdef: OpDef | None = None, attrs=None,
                data_shapes=None, out_shape=None) -> Region:
    """``tensor_region`` with the plan computed beforehand (``region_plan``)."""
    dims, sum_names, copy_names, select = plan
    if select and not _selected(select[0], degree, coords[select[0][0]]):
        return Region(tuple((0, 0) for _ in shape.dims), _index(sum_names, degree, coords),
                      _index(copy_names, degree, coords))
    ranges = []
    for (names, halo, out_dim, *part), size in zip(dims, shape.dims):
        if part:
            ranges.append(_part_range(part[0], degree, coords[part[0][0]], size))
            continue
        deg = math.prod(degree[n] for n in names)
        i = _index(names, degree, coords)
        lo, hi = i * (size // deg), (i + 1) * (size // deg)
        if halo and deg > 1:
            osize = out_shape.dims[out_dim]
            lo, hi = opdef.halo(attrs, idx, len(ranges), data_shapes, (i * (osize // deg), (i + 1) * (osize // deg)))
        ranges.append((lo, hi))
    return Region(tuple(ranges), _index(sum_names, degree, coords), _index(copy_names, degree, coords))


def _selected(part, degree, coordinate: int) -> bool:
    """Whether the piece at ``coordinate`` of a ``PART`` slot's axis reads the operand: the one
    piece whose output slice (or, for a whole-operand part, whose partial sum) holds its span."""
    name, at, of = part
    return at * degree[name] // of == coordinate


def _part_range(part, degree, coordinate: int, size: int) -> tuple[int, int]:
    """The range a piece reads of a ``PART`` dimension: all of it where the piece's output slice
    holds the operand's span, nothing elsewhere."""
    return (0, size) if _selected(part, degree, coordinate) else (0, 0)


def plan_regions(plan, idx: int, names: Sequence[str], degree, shape: TensorShape, opdef: OpDef | None = None,
                 attrs=None, data_shapes=None, out_shape=None, with_dims: bool = False):
    """``plan_region`` for every piece at once, in the order of ``axis_coordinates`` over ``names``
    (the operator's axis names): each dimension's ranges (halos included) are worked out once per
    index along it, not once per piece. With ``with_dims``, returns (regions, each region's dims)."""
    dims, sum_names, copy_names, select = plan
    count = math.prod(degree[n] for n in names)
    stride, s = {}, 1
    for n in reversed(names):
        stride[n] = s
        s *= degree[n]
    pieces = range(count)

    def index(covering) -> list[int]:
        if not covering:
            return [0] * count
        if len(covering) == 1:
            n = covering[0]
            st, dg = stride[n], degree[n]
            return [(p // st) % dg for p in pieces]
        out = [0] * count
        for n in covering:  # mixed radix, first axis most significant
            st, dg = stride[n], degree[n]
            out = [o * dg + (p // st) % dg for o, p in zip(out, pieces)]
        return out

    per_dim, lengths, split = [], [], False
    for d, ((covering, halo, out_dim, *part), size) in enumerate(zip(dims, shape.dims)):
        if part and degree[part[0][0]] > 1:
            split = True
            table = [_part_range(part[0], degree, c, size) for c in range(degree[part[0][0]])]
            at = index((part[0][0],))
            per_dim.append([table[i] for i in at])
            lengths.append([hi - lo for lo, hi in per_dim[-1]])
            continue
        deg = math.prod(degree[n] for n in covering)
        split = split or deg > 1
        if deg == 1:
            per_dim.append([(0, size)] * count)
            lengths.append([size] * count)
            continue
        if halo:
            osize = out_shape.dims[out_dim]
            table = [opdef.halo(attrs, idx, d, data_shapes, (i * (osize // deg), (i + 1) * (osize // deg)))
                     for i in range(deg)]
        else:
            table = [(i * (size // deg), (i + 1) * (size // deg)) for i in range(deg)]
        at = index(covering)
        per_dim.append([table[i] for i in at])
        if with_dims:
            widths = [hi - lo for lo, hi in table]
            lengths.append([widths[i] for i in at])
    if not split:  # every piece covers the whole tensor (replicas, partial sums): one shared tuple
        ranges = [tuple((0, size) for size in shape.dims)] * count
    else:
        ranges = list(zip(*per_dim))
    if select and degree[select[0][0]] > 1:  # a whole-operand part: the other pieces read nothing
        empty = tuple((0, 0) for _ in shape.dims)
        chosen = [_selected(select[0], degree, c) for c in index((select[0][0],))]
        ranges = [r if keep else empty for r, keep in zip(ranges, chosen)]
        lengths = [[w if keep else 0 for w, keep in zip(col, chosen)] for col in lengths]
    regions = [Region(r, si, ci) for r, si, ci in zip(ranges, index(sum_names), index(copy_names))]
    if with_dims:
        return regions, (list(zip(*lengths)) if lengths else [()] * count)
    return regions


def configured_attrs(axes: Sequence[ParallelAxis], attrs, degree: dict[str, int]):
    """The operator's attributes under these axis degrees: each part axis's degree set in the
    attribute that holds it (``ParallelAxis.degree_attr``); the same object when none changes."""
    changes = {a.degree_attr: degree.get(a.name, 1) for a in axes
               if a.degree_attr and getattr(attrs, a.degree_attr) != degree.get(a.name, 1)}
    return dataclasses.replace(attrs, **changes) if changes else attrs


def validate_axes(opdef: OpDef, attrs, data_shapes: Sequence[TensorShape]) -> None:
    """Check an operator's axis list itself: every axis touches every operand and every output."""
    axes = opdef.parallel_axes(attrs, data_shapes)
    n_ops = len(data_shapes) + opdef.num_weights(attrs)
    n_out = len(opdef.output_shapes(attrs, data_shapes))
    for ax in axes:
        touched = {i for i, _ in ax.operands}
        if touched != set(range(n_ops)):
            raise ShapeError(f"{opdef.op_type.value}: axis '{ax.name}' touches operands {sorted(touched)}, "
                             f"not all of 0..{n_ops - 1}")
        if {i for i, _ in ax.outputs} != set(range(n_out)):
            raise ShapeError(f"{opdef.op_type.value}: axis '{ax.name}' does not touch every output")
