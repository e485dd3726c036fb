"""The operator table of a PCG: per operator its name, type, output shapes, parameters it owns and
forward FLOPs, plus totals. Used by ``flexrt show`` and ``FFModel.summary``.

A weight is counted once, at the first operator (in topological order) that reads it, directly or
through parallelization operators; so weights shared by unrolled RNN steps count once.

Entry points: ``op_table``, ``totals``, ``format_count``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS, OpType
from flexrt.ir.pcg import PCG, input_shapes_of
from flexrt.ir.registry import op_def


@dataclass(frozen=True, slots=True)
class OpRow:
    id: int
    name: str
    op: str
    outputs: tuple[str, ...]
    params: int
    flops: int


@dataclass(frozen=True, slots=True)
class Totals:
    operators: int
    params: int
    flops: int


def _weight_source(pcg: PCG, nid: int) -> int | None:
    """The WEIGHT node a tensor comes from through parallelization operators, if any."""
    node = pcg.node(nid)
    while node.op_type in PARALLEL_OPS:
        node = pcg.node(node.inputs[0].node)
    return node.id if node.op_type is OpType.WEIGHT else None


def op_table(pcg: PCG) -> list[OpRow]:
    rows = []
    counted: set[int] = set()
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type in SOURCE_OPS and node.op_type is not OpType.INPUT:
            continue
        params = 0
        for ref in node.inputs:
            w = _weight_source(pcg, ref.node)
            if w is not None and w not in counted and node.op_type not in PARALLEL_OPS:
                counted.add(w)
                params += pcg.shape(ref).tensor_shape.num_elements
        outs = [s.tensor_shape for s in pcg.output_shapes(nid)]
        flops = op_def(node.op_type).flops(node.attrs, input_shapes_of(pcg, node), outs)
        rows.append(OpRow(nid, node.name, node.op_type.value, tuple(str(s) for s in pcg.output_shapes(nid)),
                          params, flops))
    return rows


def totals(pcg: PCG, rows: list[OpRow] | None = None) -> Totals:
    """Operators (nodes other than inputs and weights), parameters (every weight once), forward FLOPs."""
    rows = op_table(pcg) if rows is None else rows
    params = sum(n.attrs.shape.num_elements for n in pcg.nodes if n.op_type is OpType.WEIGHT)
    return Totals(len(pcg.operators()), params, sum(r.flops for r in rows))


def format_count(n: float, unit: str = "") -> str:
    """12345678 -> '12.3 M' (k, M, G, T)."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.1f} {suffix}{unit}"
    return f"{n:g} {unit}".rstrip()
