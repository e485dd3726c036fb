"""Element-wise binary operators with NumPy broadcasting: add, subtract, multiply, divide, max, min.

Parallel axes: every output dimension of size > 1 (an operand broadcast along it is replicated
instead: its copy slot), replicas pass through, and for add / subtract partial sums pass through
((a1 + a2) + (b1 + b2) = (a1 + b1) + (a2 + b2); both operands must carry the same sum degree).

Add and subtract of two operands of the output's shape also have the ``operand`` axis (degree 1 or
2, held in the attribute ``parts``): piece 0 reads only the first operand, piece 1 only the second
(a whole-operand ``PART`` slot), and the output is their partial sums (a - b as a + (-b)). Unity
Fig. 11b's Add -> Concat + Reduce as a configuration: operands on separate devices add where they
lie, and a consumer replicated on both devices gets the sum by an AllReduce instead of each operand
sent to one device and the result back.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.ir.op_type import ELEMENT_BINARY, LINEAR_BINARY, OpType
from flexrt.ir.ops._common import dim_kind, numel
from flexrt.ir.registry import COPY, SUM, AxisKind, OpDef, ParallelAxis, part, register_op, shard
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class ElementBinaryAttrs:
    """``parts``: the degree of the ``operand`` axis (1 in a model; a configuration sets it)."""

    op_type: OpType
    parts: int = 1

    def __post_init__(self):
        if self.op_type not in ELEMENT_BINARY:
            raise ShapeError(f"{self.op_type} is not an element-wise binary operator; valid: "
                             f"{', '.join(sorted(t.value for t in ELEMENT_BINARY))}")
        if self.parts not in (1, 2) or isinstance(self.parts, bool):
            raise ShapeError(f"{self.op_type.value}: parts must be 1 or 2 (one partial sum per operand), "
                             f"got {self.parts!r}")


def broadcast_dims(op: str, a: TensorShape, b: TensorShape) -> tuple[int, ...]:
    rank = max(a.rank, b.rank)
    pa = (1,) * (rank - a.rank) + a.dims
    pb = (1,) * (rank - b.rank) + b.dims
    out = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"{op}: shapes {list(a.dims)} and {list(b.dims)} do not broadcast "
                             f"(dimension {i}: {x} vs {y}); sizes must match or one of them be 1")
        out.append(max(x, y))
    return tuple(out)


def output_shapes(attrs, inputs):
    a, b = inputs
    if a.dtype != b.dtype:
        raise ShapeError(f"{attrs.op_type.value}: operand dtypes differ ({a.dtype.name} vs {b.dtype.name})")
    return (TensorShape(broadcast_dims(attrs.op_type.value, a, b), a.dtype),)


def parallel_axes(attrs, inputs):
    (out,) = output_shapes(attrs, inputs)
    axes = []
    full = [True] * len(inputs)  # operand i is broadcast along no dimension
    for d, size in enumerate(out.dims):
        if size == 1:
            continue
        operands = []
        for i, t in enumerate(inputs):
            td = d - (out.rank - t.rank)  # aligned dimension of operand i (right-aligned broadcasting)
            own = td >= 0 and t.dims[td] == size
            full[i] = full[i] and own
            operands.append((i, shard(td) if own else COPY))
        axes.append(ParallelAxis(f"dim{d}", dim_kind(d), tuple(operands), ((0, shard(d)),)))
    if any(full):  # the replica degree needs an operand whose copy slot is its own
        axes.append(ParallelAxis("replica", AxisKind.REPLICA, ((0, COPY), (1, COPY)), ((0, COPY),)))
    if attrs.op_type in LINEAR_BINARY:
        axes.append(ParallelAxis("partial", AxisKind.REDUCTION, ((0, SUM), (1, SUM)), ((0, SUM),)))
        if all(t.dims == out.dims for t in inputs):
            axes.append(ParallelAxis("operand", AxisKind.REDUCTION, ((0, part(-1, 0, 2)), (1, part(-1, 1, 2))),
                                     ((0, SUM),), degree_attr="parts"))
    return tuple(axes)


def flops(attrs, ins, outs):
    return numel(outs[0])


for _t in sorted(ELEMENT_BINARY, key=lambda t: t.value):
    register_op(OpDef(_t, ElementBinaryAttrs, output_shapes=output_shapes, flops=flops, num_inputs=2,
                      parallel_axes=parallel_axes))
