"""What each task of a lowered iteration does to data: the runtime's half of the task graph.

The simulator times tasks; the runtime (``flexrt.runtime``) executes them. Lowering gives every
task an action naming the device buffers it reads and writes, so that the runtime moves exactly
the data the simulator's transfers account for.

Buffers live on one device (``device`` -1 is host memory: the batch the data loader holds) and are
named by a ``Key``: its ``kind`` (``BufKind``) says what the buffer is, the other fields which one:

- ``Key.output(op, k, piece)`` output ``k`` of a piece of a compute operator, written by its forward;
- ``Key.operand(op, i, piece)`` operand ``i`` as the piece reads it (halo included), assembled at
  the start of its forward from parts (a local producer's output, a received transfer, the batch,
  a weight instance);
- ``Key.grad_output(op, k, piece)`` the gradient of that output, assembled at the start of its
  backward by summing the contributions of every consumer (and the loss);
- ``Key.grad_operand(op, i, piece)`` the gradient of an operand, written by the backward;
- ``Key.transfer(id)`` a transfer's copy on the destination device;
- ``Key.sum(id)`` / ``Key.grad_sum(id)`` a REDUCE task's sum of partial pieces / of gradients;
- ``Key.ring(id)`` a member's buffer of a ring AllReduce (summed in place);
- ``Key.weight(name, ranges)`` / ``Key.weight_grad(name, ranges)`` a weight instance and its gradient;
- ``Key.input(name)`` the batch of a model input, on the host;
- ``Key.loss_in(op, piece)`` / ``Key.loss_grad(op, piece)`` the output rows a loss task scores and
  the gradient it hands back (piece -1: the gathered output).

Coordinates are global: a buffer covers ``ranges`` of its tensor (reaching outside the tensor where
a convolution's halo holds padding, filled with ``fill``), and a ``Part`` copies (or adds) ``box``
of its source into the same ``box`` of the buffer being assembled. Lowering records parts per owner
(``Lowering.parts``) because the owner of an edge adds parts to buffers that an operator's task
assembles; the runtime joins them.

Entry points: ``Key`` (with ``BufKind``), ``Buf``, ``Part``, and the actions ``Forward``, ``Backward``, ``Move``, ``Sum``,
``Update``, ``Loss``, ``RingStep`` (with ``RingGroup``), ``Fused``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, Optional

Box = tuple  # ((lo, hi), ...) per dimension, global coordinates
HOST = -1


class BufKind(enum.Enum):
    """What a device buffer holds (see the module doc)."""

    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    OUTPUT = "out"
    OPERAND = "operand"
    GRAD_OUTPUT = "grad_out"
    GRAD_OPERAND = "grad_operand"
    TRANSFER = "transfer"
    SUM = "sum"
    GRAD_SUM = "grad_sum"
    RING = "ring"
    WEIGHT = "weight"
    WEIGHT_GRAD = "weight_grad"
    INPUT = "input"
    LOSS_IN = "loss_in"
    LOSS_GRAD = "loss_grad"


class Key(NamedTuple):
    """The name of a buffer: its kind, then the operator, weight or input it belongs to (``""`` for
    transfers, sums and rings), an index (operand or output index, transfer or group id,
    or a weight instance's ranges) and the piece (-1 where none). Built by the class methods."""

    kind: BufKind
    name: str = ""
    index: object = -1
    piece: int = -1

    def __repr__(self) -> str:  # how it is built: readable in errors, unique (plans sort buffers by it)
        args = _REPR_FIELDS[self.kind]
        return f"Key.{self.kind.name.lower()}({', '.join(repr(getattr(self, f)) for f in args)})"

    @classmethod
    def output(cls, op: str, k: int, piece: int) -> "Key":
        return cls(BufKind.OUTPUT, op, k, piece)

    @classmethod
    def operand(cls, op: str, i: int, piece: int) -> "Key":
        return cls(BufKind.OPERAND, op, i, piece)

    @classmethod
    def grad_output(cls, op: str, k: int, piece: int) -> "Key":
        return cls(BufKind.GRAD_OUTPUT, op, k, piece)

    @classmethod
    def grad_operand(cls, op: str, i: int, piece: int) -> "Key":
        return cls(BufKind.GRAD_OPERAND, op, i, piece)

    @classmethod
    def transfer(cls, tid: int) -> "Key":
        return cls(BufKind.TRANSFER, "", tid)

    @classmethod
    def sum(cls, gid: int) -> "Key":
        return cls(BufKind.SUM, "", gid)

    @classmethod
    def grad_sum(cls, gid: int) -> "Key":
        return cls(BufKind.GRAD_SUM, "", gid)

    @classmethod
    def ring(cls, gid: int) -> "Key":
        return cls(BufKind.RING, "", gid)

    @classmethod
    def weight(cls, name: str, ranges: tuple) -> "Key":
        return cls(BufKind.WEIGHT, name, ranges)

    @classmethod
    def weight_grad(cls, name: str, ranges: tuple) -> "Key":
        return cls(BufKind.WEIGHT_GRAD, name, ranges)

    @classmethod
    def input(cls, name: str) -> "Key":
        return cls(BufKind.INPUT, name)

    @classmethod
    def loss_in(cls, op: str, piece: int) -> "Key":
        return cls(BufKind.LOSS_IN, op, -1, piece)

    @classmethod
    def loss_grad(cls, op: str, piece: int) -> "Key":
        return cls(BufKind.LOSS_GRAD, op, -1, piece)

    def own(self, suffix: str) -> "Key":
        """The same buffer's own copy for a second task that makes it again (a recomputation's
        ``"@r"``, a zero-bubble W pass's ``"@w"``): the name with ``suffix``."""
        return self._replace(name=self.name + suffix)


_REPR_FIELDS = {kind: fields for kinds, fields in (
    ((BufKind.OUTPUT, BufKind.OPERAND, BufKind.GRAD_OUTPUT, BufKind.GRAD_OPERAND), ("name", "index", "piece")),
    ((BufKind.TRANSFER, BufKind.SUM, BufKind.GRAD_SUM, BufKind.RING), ("index",)),
    ((BufKind.WEIGHT, BufKind.WEIGHT_GRAD), ("name", "index")),
    ((BufKind.INPUT,), ("name",)),
    ((BufKind.LOSS_IN, BufKind.LOSS_GRAD), ("name", "piece"))) for kind in kinds}


@dataclass(frozen=True, slots=True)
class Buf:
    key: Key
    device: int
    ranges: Box
    dtype: str          # numpy dtype name
    fill: float = 0.0   # value of elements no part writes (padding, absent gradient contributions)


def own_buf(b: Buf, suffix: str) -> Buf:
    """``b`` under its own copy's key (``Key.own``)."""
    return Buf(b.key.own(suffix), b.device, b.ranges, b.dtype, b.fill)


@dataclass(frozen=True, slots=True)
class Part:
    src: Key            # the source buffer
    device: int         # the source's device (the destination's, or HOST: parts never cross devices)
    box: Box
    add: bool = False   # accumulate (gradients, partial sums) instead of overwriting


@dataclass(frozen=True, slots=True)
class Forward:
    node: str
    attrs: object              # the piece's attributes (``piece_call`` applied)
    zeroed: frozenset          # operands the piece replaces by zeros (a bias added by one partial only)
    operands: tuple            # Buf per operand, assembled at start
    outputs: tuple             # Buf per output, written


@dataclass(frozen=True, slots=True)
class Backward:
    node: str
    attrs: object
    zeroed: frozenset
    operands: tuple            # Buf per operand (the forward's)
    outputs: tuple             # Buf per output (the forward's)
    grad_outputs: tuple        # Buf per output, assembled at start from contributions
    grad_operands: tuple       # Buf per operand, or None where no gradient is needed


@dataclass(frozen=True, slots=True)
class Move:
    src: Key
    src_device: int
    dst: Buf                   # dst.ranges is the box moved


@dataclass(frozen=True, slots=True)
class Sum:
    dst: Buf                   # assembled at start by adding its parts


@dataclass(frozen=True, slots=True)
class Update:
    weight: Buf
    grad: Buf
    gather_grad: bool          # False when a ring AllReduce has assembled and summed the gradient


@dataclass(frozen=True, slots=True)
class Loss:
    output: Buf                # the model's output rows this task scores (assembled at start)
    grad: Buf                  # written: d loss / d output for those rows
    rows: Box                  # the label rows (dim 0 range) of those outputs
    full_elements: int         # elements of the whole output: each piece weighs its share


@dataclass(frozen=True, slots=True)
class RingGroup:
    """A ring AllReduce's members. With ``segments`` > 1 (a gradient bucket) each member holds that
    many buffers (member-major in ``buffers``), summed as one flat concatenation."""

    id: int
    buffers: tuple             # Buf per member and segment: assembled from parts, then summed in place across members
    segments: int = 1

    @property
    def num_members(self) -> int:
        return len(self.buffers) // self.segments

    def member_buffers(self, i: int) -> tuple:
        return self.buffers[i * self.segments:(i + 1) * self.segments]

    def device(self, i: int) -> int:
        return self.buffers[i * self.segments].device


@dataclass(frozen=True, slots=True)
class RingStep:
    """A ring member's send (the first hop of its transfer): the group's collective runs once every
    step of the group is ready. A ring split over channels (``Machine.ring_channels``) has one step
    per member and channel; ``member`` indexes the group's members."""

    group: RingGroup
    member: int


@dataclass(frozen=True, slots=True)
class Fused:
    """One task running a fusion group's members on one piece (``flexrt.strategy.fusion``): their
    ``Forward`` actions (a forward group) or ``Backward`` actions (a backward group), in the order they
    run. ``recomputed[m]`` marks a duplicated member: it is computed again inside the task from what
    it reads, and its operands and outputs are the task's own (never device buffers), so the members
    after it read its result from inside the task."""

    group: int
    members: tuple
    recomputed: tuple          # bool per member

    @property
    def private(self) -> frozenset:
        """(key, device) of the buffers only this task holds: the recomputed members' operands and outputs."""
        return frozenset((b.key, b.device) for m, r in zip(self.members, self.recomputed) if r
                         for b in m.operands + m.outputs)

    @property
    def shared(self) -> tuple:
        """The members that are not recomputed."""
        return tuple(m for m, r in zip(self.members, self.recomputed) if not r)


Action = Optional[object]


def gathered(action) -> tuple:
    """The buffers a task assembles from parts before it runs."""
    if isinstance(action, Forward):
        return action.operands
    if isinstance(action, Backward):
        return action.grad_outputs
    if isinstance(action, Sum):
        return (action.dst,)
    if isinstance(action, Update):
        return (action.grad,) if action.gather_grad else ()
    if isinstance(action, Loss):
        return (action.output,)
    if isinstance(action, Fused):
        return tuple(b for m in action.shared for b in gathered(m))
    return ()
