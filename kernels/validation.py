"""Brute-force validation of parallelization rules (in the manner of DTensor's strategy validation).

For an operator on concrete shapes, ``partitionings`` enumerates every assignment of degrees to its
parallel axes whose total is in ``totals`` (2 and 4 pieces by default) and turns it into the data
inputs' parallel shapes; ``check_partitioning`` scatters real arrays into those pieces (partial
sums as random splits), runs the operator piece by piece and checks that the reassembled result
equals the unpartitioned forward. ``check_rejected`` asserts that a partitioning is refused with
a ShapeError.

Entry points: ``partitionings``, ``check_partitioning``, ``check_all_partitionings``, ``check_rejected``.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterator, Sequence

from flexrt.errors import ShapeError
from flexrt.ir.parallel_axes import configured_attrs, infer_parallel, required_weight_shapes, tensor_degrees
from flexrt.ir.parallel_tensor import ParallelTensorShape, divisors
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.pieces import gather, run_pieces, scatter
from flexrt.kernels.registry import run_forward


def partitionings(attrs, data_shapes: Sequence[TensorShape], totals: Sequence[int] = (2, 4),
                  inexact: bool = False) -> Iterator[tuple[dict[str, int], list[ParallelTensorShape]]]:
    """Every axis-degree assignment with a total in ``totals`` that the shapes' sizes allow, with the
    data inputs' parallel shapes it implies; assignments that cut an axis marked ``exact=False``
    only when ``inexact`` is true."""
    opdef = op_def(attrs.op_type)
    axes = opdef.parallel_axes(attrs, list(data_shapes))
    names = [a.name for a in axes]
    choices = [divisors(max(totals)) for _ in axes]
    for degs in itertools.product(*choices):
        if math.prod(degs) not in totals:
            continue
        degree = dict(zip(names, degs))
        if not inexact and any(d > 1 and not a.exact for a, d in zip(axes, degs)):
            continue
        try:
            shapes = [ParallelTensorShape.of(s.dims, d.shard, d.sum, d.copy, s.dtype)
                      for i, s in enumerate(data_shapes)
                      for d in [tensor_degrees(axes, degree, i, s.rank, False)]]
            configured = configured_attrs(axes, attrs, degree)
            opdef_outs = infer_parallel(opdef, configured, "op", shapes + list(
                required_weight_shapes(opdef, configured, "op", shapes)))
        except ShapeError:
            continue  # a degree that does not divide some size: not a partitioning of these shapes
        del opdef_outs
        yield degree, shapes


def check_partitioning(xp, attrs, data_arrays: Sequence, weight_arrays: Sequence,
                       data_pshapes: Sequence[ParallelTensorShape], rng, rtol: float = 1e-7,
                       atol: float = 1e-9) -> list:
    """Run ``attrs``'s operator piece by piece under ``data_pshapes`` and compare with the full run.

    Raises AssertionError naming the partitioning when a reassembled output differs.
    """
    opdef = op_def(attrs.op_type)
    wshapes = required_weight_shapes(opdef, attrs, "op", data_pshapes)
    expected = run_forward(xp, attrs, list(data_arrays) + list(weight_arrays))
    values = [scatter(xp, a, s, rng) for a, s in zip(data_arrays, data_pshapes)]
    values += [scatter(xp, a, s, rng) for a, s in zip(weight_arrays, wshapes)]
    outs = run_pieces(xp, attrs, values)
    got = [gather(xp, o, rtol=rtol, atol=atol) for o in outs]
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape or not xp.allclose(g, e, rtol=rtol, atol=atol):
            err = float(xp.max(xp.abs(g - e))) if g.shape == e.shape else "shape"
            raise AssertionError(
                f"{attrs.op_type.value} {attrs}: output {k} under inputs "
                f"{', '.join(map(str, data_pshapes))} differs from the unpartitioned result (max error {err})")
    return got


def check_all_partitionings(xp, attrs, data_arrays: Sequence, weight_arrays: Sequence, rng,
                            totals: Sequence[int] = (2, 4), **tol) -> int:
    """``check_partitioning`` for every partitioning on ``totals`` pieces; returns how many were checked."""
    shapes = [TensorShape(tuple(a.shape), _dtype_of(a)) for a in data_arrays]
    n = 0
    axes = op_def(attrs.op_type).parallel_axes(attrs, shapes)
    for degree, pshapes in partitionings(attrs, shapes, totals):
        check_partitioning(xp, configured_attrs(axes, attrs, degree), data_arrays, weight_arrays, pshapes, rng, **tol)
        n += 1
    return n


def check_rejected(attrs, operand_pshapes: Sequence[ParallelTensorShape]) -> ShapeError:
    """Assert that the operator refuses these operand parallel shapes (data inputs, then weights)."""
    opdef = op_def(attrs.op_type)
    try:
        if opdef.parallel_rule is not None:
            opdef.parallel_rule(attrs, list(operand_pshapes))
        else:
            nw = opdef.num_weights(attrs)
            data = list(operand_pshapes[:len(operand_pshapes) - nw]) if nw else list(operand_pshapes)
            if nw and len(operand_pshapes) == len(data):
                raise AssertionError("pass the weights' parallel shapes too")
            infer_parallel(opdef, attrs, "op", list(operand_pshapes))
    except ShapeError as e:
        return e
    raise AssertionError(f"{attrs.op_type.value} {attrs} accepted {', '.join(map(str, operand_pshapes))}, "
                         f"which is not a valid partitioning")


def _dtype_of(arr):
    from flexrt.ir.datatype import DataType
    for t in DataType:
        if t.numpy_name == str(arr.dtype) and t is not DataType.DT_BFLOAT16:
            return t
    raise ShapeError(f"no DataType for array dtype {arr.dtype}")
