"""``Dropout`` with ``rate`` and a ``seed`` (deterministic masks per seed, piece and training step).

Training mode: y = x * keep / (1 - rate), keep a Bernoulli(1 - rate) mask that is a pure function of
(seed, shape of x): the same call gives the same mask (the kernel draws it from a NumPy Generator
seeded with ``seed``). Training draws a new mask every step: the runtime and the reference trainer
run step ``k``'s dropouts with ``at_step(attrs, k)`` (step 0 keeps the seed), the forward and its
backward (and a recomputation) alike.

Parallel axes: every dimension, ``replica`` and ``partial`` (for a fixed mask dropout is linear in x).
A partitioned dropout draws an independent mask per piece, as FlexFlow does (it seeds cuRAND per
task): ``piece_call`` gives each piece the seed ``piece_seed(seed, shard index)``, the shard index
being the piece's position along the dimension axes only, so the replicas and the partial sums of
one position draw the same mask (replicas stay equal; partial sums still add up). A partitioning
along a dimension is therefore statistically equivalent to, not equal to, the unpartitioned run
(exactly equal with rate 0, and for partitionings that cut no dimension).

Entry points: ``DropoutAttrs``, ``piece_seed``, ``at_step``; the rules register on import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from flexrt.errors import ShapeError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops._common import elementwise_axes, numel
from flexrt.ir.registry import OpDef, register_op

_MASK64 = (1 << 64) - 1


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def piece_seed(seed: int, shard_index: int) -> int:
    """The seed of the piece at ``shard_index`` (0 keeps ``seed``: an uncut tensor draws the full mask)."""
    if shard_index == 0:
        return seed
    return _splitmix64(seed ^ _splitmix64(shard_index)) >> 1  # a non-negative int below 2**63


def at_step(attrs, step: int, training: bool = True):
    """``attrs`` as training step ``step`` runs it: a dropout's seed mixed with the step (a new mask
    every step; step 0 keeps it); any other operator's attributes unchanged. Outside training
    (``training=False``: an inference forward, as ``torch.nn.Dropout`` in eval mode and Keras'
    ``predict``) a dropout passes its input through: rate 0."""
    if attrs.op_type is not OpType.DROPOUT or attrs.rate == 0.0:
        return attrs
    if not training:
        return dataclasses.replace(attrs, rate=0.0)
    if step == 0:
        return attrs
    return dataclasses.replace(attrs, seed=_splitmix64(attrs.seed ^ _splitmix64((step << 1) | 1)) >> 1)


@dataclass(frozen=True, slots=True)
class DropoutAttrs:
    """Example: ``DropoutAttrs(0.1, seed=7)``."""

    op_type: ClassVar[OpType] = OpType.DROPOUT
    rate: float
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.rate, (int, float)) or isinstance(self.rate, bool) or not 0.0 <= self.rate < 1.0:
            raise ShapeError(f"dropout: rate must be a number in [0, 1), got {self.rate!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= _MASK64:
            raise ShapeError(f"dropout: seed must be an int in [0, 2**64), got {self.seed!r}")
        object.__setattr__(self, "rate", float(self.rate))


def output_shapes(attrs: DropoutAttrs, inputs):
    (x,) = inputs
    if not x.dtype.is_floating:
        raise ShapeError(f"dropout: input {x} has dtype {x.dtype.name}; valid: a floating type")
    return (x,)


def parallel_axes(attrs: DropoutAttrs, inputs):
    return elementwise_axes(inputs[0].rank, 1, linear=True)


def piece_call(attrs: DropoutAttrs, coords, degrees):
    index = 0
    for name in sorted((n for n in coords if n.startswith("dim")), key=lambda n: int(n[3:])):
        index = index * degrees[name] + coords[name]  # mixed radix over the dimension axes only
    seed = piece_seed(attrs.seed, index)
    return (attrs if seed == attrs.seed else dataclasses.replace(attrs, seed=seed)), frozenset()


def flops(attrs: DropoutAttrs, ins, outs):
    return 2 * numel(outs[0]) if attrs.rate > 0 else 0  # a comparison and a multiplication per element


def backward_flops(attrs: DropoutAttrs, ins, outs):
    return numel(outs[0]) if attrs.rate > 0 else 0


def extra_memory_bytes(attrs: DropoutAttrs, ins, outs) -> int:
    """The keep mask, one byte per element (kept for the backward pass)."""
    return numel(outs[0]) if attrs.rate > 0 else 0


register_op(OpDef(OpType.DROPOUT, DropoutAttrs, output_shapes=output_shapes, flops=flops, num_inputs=1,
                  parallel_axes=parallel_axes, backward_flops=backward_flops, piece_call=piece_call,
                  extra_memory_bytes=extra_memory_bytes))
