"""The operator registry: one ``OpDef`` per ``OpType``, holding that operator's rules as data.

Every operator provides the same few functions (flexflow-train style): output shapes, weight
shapes, parallel axes (which partitionings of its operands it accepts and what they produce, see
``flexrt.ir.parallel_axes``), FLOPs, and optional hooks for piece-wise execution. Parallelization
operators (Repartition, Combine, ...) move data instead of computing; they give ``parallel_rule``.

Shapes passed to ``flops``/``backward_flops``/``memory`` may be piece shapes: those functions must
read sizes from the shapes, never from attributes such as ``out_channels``.

Entry points: ``register_op`` (called by each module of ``flexrt.ir.ops``) and ``op_def``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from flexrt.errors import GraphError
from flexrt.ir.op_type import PARALLEL_OPS, OpType
from flexrt.ir.tensor_shape import TensorShape


class SlotKind(enum.Enum):
    SHARD = "shard"
    SUM = "sum"
    COPY = "copy"
    PART = "part"


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a parallel axis lands on one tensor: a shard dimension, the sum or the copy degree, or
    a part.

    ``halo=True`` on a shard slot of an operand means a piece reads a window wider than its own
    slice (convolution and pooling along height/width); ``OpDef.halo`` gives the window.

    A ``PART`` slot (operands only) says the operand is one whole part of the output: it fills
    ``[at, at + size)`` of the output's dimension (of size ``of``) that the axis shards, and the one
    piece whose output slice holds that span reads it whole, every other piece nothing (Concat's
    inputs: Unity Fig. 16b's concatenation without moving data). The operand's degree on ``dim``
    stays 1. With ``dim`` -1 the part is the whole operand, ``at`` its index among the ``of``
    operands an output of partial sums adds: piece ``at * degree // of`` reads it, the others read
    nothing (Add's operand axis: Unity Fig. 11b's Add as a Concat and a Reduce).
    """

    kind: SlotKind
    dim: int = -1
    halo: bool = False
    at: int = 0
    of: int = 0

    def __str__(self) -> str:
        if self.kind is SlotKind.SHARD:
            return f"dim {self.dim}" + (" (with halo)" if self.halo else "")
        if self.kind is SlotKind.PART:
            if self.dim < 0:
                return f"operand {self.at} of {self.of} summed"
            return f"part [{self.at}, ...) of {self.of} along dim {self.dim}"
        return self.kind.value


def shard(dim: int, halo: bool = False) -> Slot:
    return Slot(SlotKind.SHARD, dim, halo)


def part(dim: int, at: int, of: int) -> Slot:
    """A ``PART`` slot: the operand fills ``[at, ...)`` of the ``of`` elements the axis cuts."""
    return Slot(SlotKind.PART, dim, False, at, of)


SUM = Slot(SlotKind.SUM)
COPY = Slot(SlotKind.COPY)


class AxisKind(enum.Enum):
    """FlexFlow Table 2's kinds of parallelizable dimension, plus reduction and replica (Unity §2.1)."""

    SAMPLE = "sample"
    ATTRIBUTE = "attribute"
    PARAMETER = "parameter"
    REDUCTION = "reduction"
    REPLICA = "replica"


@dataclass(frozen=True, slots=True)
class ParallelAxis:
    """One independent way to cut an operator into pieces.

    The axis has one degree; every tensor listed gets that degree in its slot (a slot shared by
    several axes gets the product). Every axis touches every operand and every output, so pieces of
    the operator, of each operand and of each output correspond one to one (no implicit copies),
    except on ``PART`` slots, where each operand is read by one piece only (``Slot``). Such an axis
    has no degree on its operands to read it from: ``degree_attr`` names the attribute holding it
    (``configured_attrs`` sets it from a configuration; the base graph's operators hold 1).
    ``operands`` index data inputs first, then weights. ``exact=False`` marks the rare axis whose
    pieces compute something close to, not equal to, the unpartitioned result, as practice does
    (BatchNorm's sample axis: per-piece batch statistics, like FlexFlow and PyTorch DDP without
    SyncBatchNorm); the brute-force checker compares those with their own per-piece reference.
    """

    name: str
    kind: AxisKind
    operands: tuple[tuple[int, Slot], ...]
    outputs: tuple[tuple[int, Slot], ...]
    exact: bool = True
    degree_attr: str = ""
    # whether Unity's mapping DP (``search.unity.costs.LocalCosts``) considers the axis; the
    # simulator-driven searches (MCMC) and explicit strategies use every axis
    mapped: bool = True

    @property
    def is_part(self) -> bool:
        """Whether its pieces read whole operands where they lie (``PART`` slots: a Concat's or an
        Add's parts, Unity Fig. 16b)."""
        return any(s.kind is SlotKind.PART for _, s in self.operands)


@dataclass(frozen=True, slots=True)
class OpDef:
    """The rules of one operator type. Build with ``register_op``."""

    op_type: OpType
    attrs_type: type
    output_shapes: Callable[[Any, Sequence[TensorShape]], tuple[TensorShape, ...]]
    flops: Callable[[Any, Sequence[TensorShape], Sequence[TensorShape]], int]
    num_inputs: Optional[int] = 1                     # data inputs; None = variadic (at least 1)
    weight_shapes: Optional[Callable[[Any, Sequence[TensorShape]], tuple[TensorShape, ...]]] = None
    weight_names: Callable[[Any], tuple[str, ...]] = lambda attrs: ()
    # The default initializer of each weight by name of kind ("one", "zero", "glorot_uniform"), where
    # the operator has one; () leaves the runtime's rule (Glorot uniform, zeros for rank-1 biases).
    weight_inits: Callable[[Any], tuple[str, ...]] = lambda attrs: ()
    parallel_axes: Optional[Callable[[Any, Sequence[TensorShape]], tuple[ParallelAxis, ...]]] = None
    parallel_rule: Optional[Callable[[Any, Sequence[Any]], tuple[Any, ...]]] = None
    backward_flops: Optional[Callable[[Any, Sequence[TensorShape], Sequence[TensorShape]], int]] = None
    # Extra bytes kept for the backward pass beyond the outputs (masks, saved statistics).
    extra_memory_bytes: Callable[[Any, Sequence[TensorShape], Sequence[TensorShape]], int] = (
        lambda attrs, ins, outs: 0)
    # (forward, backward) bytes an implementation that materializes the operator's internal tensors
    # (attention's scores) moves through device memory beyond its operands; None: it has none.
    intermediate_bytes: Optional[Callable[[Any, Sequence[TensorShape], Sequence[TensorShape]], tuple[int, int]]] = None
    # (attrs, operand, dim, input shapes (full), (out_start, out_stop)) -> (in_start, in_stop)
    halo: Optional[Callable[[Any, int, int, Sequence[TensorShape], tuple[int, int]], tuple[int, int]]] = None
    # Adjusts one piece's call: (attrs, {axis: coordinate}, {axis: degree}) -> (attrs for the piece, operands to zero).
    piece_call: Optional[Callable[[Any, dict, dict], tuple[Any, frozenset]]] = None
    # The axes whose coordinates piece_call reads (None: any); pieces equal on them share one call.
    piece_call_axes: Optional[tuple[str, ...]] = None
    # Constraints on axis degrees beyond divisibility: (attrs, data input shapes, {axis: degree}) ->
    # None, or raise ShapeError (e.g. attention's heads degree must divide num_heads).
    check_degrees: Optional[Callable[[Any, Sequence[TensorShape], dict], None]] = None
    # Fill value for halo cells outside the tensor (e.g. -inf for max pooling).
    halo_fill: Callable[[Any], float] = lambda attrs: 0.0

    @property
    def is_parallel_op(self) -> bool:
        """A parallelization operator (moves data, Unity §3.3), not a source or a computation."""
        return self.op_type in PARALLEL_OPS

    def num_weights(self, attrs) -> int:
        return len(self.weight_names(attrs))

    def data_input_count_ok(self, n: int) -> bool:
        return n >= 1 if self.num_inputs is None else n == self.num_inputs


_REGISTRY: dict[OpType, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    """Register an operator's rules; registering one op type twice is an error."""
    if opdef.op_type in _REGISTRY:
        raise GraphError(f"operator {opdef.op_type.name} is already registered")
    if (opdef.parallel_axes is None) == (opdef.parallel_rule is None):
        raise GraphError(f"operator {opdef.op_type.name} must give exactly one of parallel_axes, parallel_rule")
    _REGISTRY[opdef.op_type] = opdef
    return opdef


def op_def(op_type: OpType) -> OpDef:
    _ensure_loaded()
    try:
        return _REGISTRY[op_type]
    except KeyError:
        raise GraphError(f"operator {op_type} has no registered rules; registered: "
                         f"{', '.join(sorted(t.name for t in _REGISTRY))}") from None


def registered_ops() -> tuple[OpType, ...]:
    _ensure_loaded()
    return tuple(_REGISTRY)


def op_type_of(attrs) -> OpType:
    """The OpType of an attributes value (a class attribute ``OP_TYPE`` or a field ``op_type``)."""
    return attrs.op_type


def _ensure_loaded() -> None:
    import flexrt.ir.ops  # noqa: F401  (registers every operator on import)
