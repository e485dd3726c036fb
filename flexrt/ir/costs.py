"""Per-operator work: forward and backward FLOPs, bytes read and written, activation memory.

Works on full shapes and on piece shapes alike (the simulator calls it per piece). Defaults:
backward = 2 x forward FLOPs (gradient w.r.t. inputs and weights); bytes read = every operand,
bytes written = every output; activation memory = outputs kept for the backward pass plus the
operator's own extra state (masks, saved statistics).

Entry point: ``op_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape


@dataclass(frozen=True, slots=True)
class OpCost:
    forward_flops: int
    backward_flops: int
    bytes_read: int
    bytes_written: int
    activation_bytes: int


def op_cost(attrs, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape]) -> OpCost:
    """Cost of running ``attrs``'s operator on ``inputs`` (data then weights) producing ``outputs``."""
    opdef = op_def(attrs.op_type)
    fwd = opdef.flops(attrs, inputs, outputs)
    bwd = opdef.backward_flops(attrs, inputs, outputs) if opdef.backward_flops else 2 * fwd
    read = sum(s.size_bytes for s in inputs)
    written = sum(s.size_bytes for s in outputs)
    if attrs.op_type in SOURCE_OPS or attrs.op_type in PARALLEL_OPS:
        act = 0  # sources hold their data elsewhere; parallel ops keep nothing for back-propagation
    else:
        act = written + opdef.extra_memory_bytes(attrs, inputs, outputs)
    return OpCost(fwd, bwd, read, written, act)
