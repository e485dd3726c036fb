"""What each task of a lowered iteration does to data: the runtime's half of the task graph.

The simulator times tasks; the runtime (``flexrt.runtime``) executes them. Lowering gives every
task an action naming the device buffers it reads and writes, so that the runtime moves exactly
the data the simulator's transfers account for.

Buffers live on one device (``device`` -1 is host memory: the batch the data loader holds) and are
named by ``key`` tuples:

- ``("out", op, k, piece)`` output ``k`` of a piece of a compute operator, written by its forward;
- ``("opd", op, i, piece)`` operand ``i`` as the piece reads it (halo included), assembled at the
  start of its forward from parts (a local producer's output, a received transfer, the batch, a
  weight instance);
- ``("gout", op, k, piece)`` the gradient of that output, assembled at the start of its backward
  by summing the contributions of every consumer (and the loss);
- ``("gin", op, i, piece)`` the gradient of an operand, written by the backward;
- ``("xfer", id)`` a transfer's copy on the destination device;
- ``("sum", id)`` / ``("gsum", id)`` a REDUCE task's sum of partial pieces / of gradients;
- ``("ring", id)`` a member's buffer of a ring AllReduce (summed in place);
- ``("w", weight, ranges)`` / ``("wg", weight, ranges)`` a weight instance and its gradient;
- ``("input", name)`` / ``("label",)`` the batch, on the host;
- ``("loss", op, piece)`` the gradient the loss hands the model's output.

Coordinates are global: a buffer covers ``ranges`` of its tensor (reaching outside the tensor where
a convolution's halo holds padding, filled with ``fill``), and a ``Part`` copies (or adds) ``box``
of its source into the same ``box`` of the buffer being assembled. Lowering records parts per owner
(``Lowering.parts``) because the owner of an edge adds parts to buffers that an operator's task
assembles; the runtime joins them.

Entry points: ``Buf``, ``Part``, and the actions ``Forward``, ``Backward``, ``Move``, ``Sum``,
``Update``, ``Loss``, ``RingStep`` (with ``RingGroup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

Box = tuple  # ((lo, hi), ...) per dimension, global coordinates
HOST = -1


@dataclass(frozen=True, slots=True)
class Buf:
    key: tuple
    device: int
    ranges: Box
    dtype: str          # numpy dtype name
    fill: float = 0.0   # value of elements no part writes (padding, absent gradient contributions)


@dataclass(frozen=True, slots=True)
class Part:
    src: tuple          # key of the source buffer
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
    src: tuple
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
    id: int
    buffers: tuple             # Buf per member: assembled from parts, then summed in place across members


@dataclass(frozen=True, slots=True)
class RingStep:
    group: RingGroup
    member: int


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
    return ()
