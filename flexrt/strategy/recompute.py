"""Activation recomputation (gradient checkpointing) as part of a strategy: which operators' stored
activations are dropped after the forward and recomputed before the backward that needs them
(Chen et al. 2016, "Training deep nets with sublinear memory cost"; Megatron-LM's full and selective
recomputation, Korthikanti et al. 2022).

A strategy's recompute set names original compute operators (a pipelined strategy's copies
``x.mb{j}`` follow their operator). Lowering (``flexrt.simulator.recompute_lowering``) gives each
piece of such an operator a RECOMPUTE task: a second run of its forward, right before the backward
of its segment, into buffers of its own; the backward reads those, so the forward's outputs die as
soon as the forward's consumers have read them. Operators outside the set are **checkpoints**: their
outputs are kept, and recomputation starts from them.

How the set is chosen (``recompute_set``):

- ``full``: every operator but the checkpoints. Checkpoints are taken at the model's *cuts*, the
  operators whose output is the only tensor alive across that point of the graph (a transformer's
  residual stream between blocks, every layer of a chain), so a segment between two checkpoints
  recomputes from one stored tensor. Consecutive cuts are merged until a segment holds at least
  ``segment_ops`` operators (default ``ceil(sqrt(n))`` of the model's n operators, Chen's choice:
  stored checkpoints and one segment's recomputed activations both grow as the square root).
- ``selective``: only the memory-bound operators between checkpoints: those doing fewer than
  ``SELECTIVE_FLOPS_PER_BYTE`` forward FLOPs per byte of activation they keep (element-wise ops,
  softmax, dropout, normalizations): most of the memory for a small share of the time.
- ``none``: nothing.

Entry points: ``Granularity``, ``recompute_set``, ``checkpoint_cuts``, ``recomputed``.
"""

from __future__ import annotations

import enum
import math
from typing import Iterable, Optional

from flexrt.errors import StrategyError
from flexrt.inputs import parse_enum
from flexrt.ir.costs import op_cost

# Forward FLOPs per byte of kept activation below which an operator is memory-bound: every device
# preset's ridge point (peak FLOP/s over memory bandwidth) is above 8.
SELECTIVE_FLOPS_PER_BYTE = 8.0


class Granularity(enum.Enum):
    NONE = "none"
    FULL = "full"
    SELECTIVE = "selective"

    @classmethod
    def parse(cls, value) -> "Granularity":
        return parse_enum(cls, value, "recomputation", StrategyError)


def checkpoint_cuts(wiring) -> list[str]:
    """The compute operators (in graph order) whose output is the only tensor alive after them:
    every tensor produced before, the batch included, has no consumer after that point."""
    order = wiring.ops
    pos = {name: i for i, name in enumerate(order)}
    last_use = {}   # tensor producer (operator or input) -> position of its last consumer
    for c in order:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)]
            if p.name in wiring.weight_shape:
                continue
            last_use[p.name] = max(last_use.get(p.name, -1), pos[c])
    cuts = []
    # Sweep: count the tensors produced at or before i whose last use is after i.
    ends = [0] * (len(order) + 1)
    alive = sum(1 for name in wiring.inputs if name in last_use)
    for name in wiring.inputs:
        if name in last_use:
            ends[last_use[name]] += 1
    for i, name in enumerate(order):
        alive -= ends[i]                      # tensors whose last reader is operator i die here
        if name in last_use:
            alive += 1
            ends[last_use[name]] += 1
        if alive == 1 and name in last_use:
            cuts.append(name)
    return cuts


def recompute_set(wiring, granularity, segment_ops: Optional[int] = None) -> frozenset:
    """The operators a strategy recomputes under ``granularity`` (module doc)."""
    g = Granularity.parse(granularity)
    if g is Granularity.NONE:
        return frozenset()
    n = len(wiring.ops)
    if segment_ops is None:
        segment_ops = max(2, math.ceil(math.sqrt(n)))
    if isinstance(segment_ops, bool) or not isinstance(segment_ops, int) or segment_ops < 1:
        raise StrategyError(f"segment_ops must be an integer >= 1, got {segment_ops!r}")
    cuts = set(checkpoint_cuts(wiring))
    keep, run = set(), 0
    for name in wiring.ops:
        run += 1
        if name in cuts and run >= segment_ops:
            keep.add(name)
            run = 0
    if wiring.sinks:
        keep.add(wiring.sinks[-1])            # the scored output is held for the loss anyway
    chosen = [name for name in wiring.ops if name not in keep]
    if g is Granularity.SELECTIVE:
        chosen = [name for name in chosen if _memory_bound(wiring, name)]
    return frozenset(chosen)


def _memory_bound(wiring, name: str) -> bool:
    node = wiring.nodes[name]
    cost = op_cost(node.attrs, wiring.operand_full[name], wiring.output_full[name])
    return cost.activation_bytes > 0 and cost.forward_flops < SELECTIVE_FLOPS_PER_BYTE * cost.activation_bytes


def recomputed(names: Iterable[str], ops: list) -> frozenset:
    """``names`` checked against the model's compute operators ``ops`` (a StrategyError names the
    unknown)."""
    if isinstance(names, str):
        names = [names]
    out = frozenset(names)
    unknown = sorted(out - set(ops))
    if unknown:
        raise StrategyError(f"recompute: {', '.join(repr(u) for u in unknown[:5])} "
                            f"{'is not a compute operator' if len(unknown) == 1 else 'are not compute operators'} "
                            f"of the model (e.g. {', '.join(ops[:3])})")
    return out
