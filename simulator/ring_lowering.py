"""How a ring AllReduce becomes tasks of the lowering's graph, channel by channel.

A ring of n members takes 2(n-1) steps; the lowering sends one pipelined transfer per ring
neighbour pair carrying 2(n-1)/n of the data (each hop paying the AllReduce's latency, the ring's
steps' or a tree's, ``collectives.ring_extras``), then each member sums. Across nodes with
several network adapters the data is split over the machine's channels (``Machine.ring_channels``:
NCCL's one ring per adapter, each entering and leaving every node through its adapter), each such
a ring on its share; only channel 0 pays the latency, since the channels step together (DisCo's
T = C x + D: the channels divide C x, D is paid once). With the measured comm cost the ring stays one (the fit
times the whole collective).

The runtime sums the whole box once: every channel's sends are steps of one ``RingGroup`` (member
indices in the caller's device order), whose collective runs when all of them are ready.

Entry points: ``WeightRing``, ``lower_allreduce``.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.actions import Buf, Key, RingGroup, RingStep
from flexrt.simulator.cost_model import ring_sum_time
from flexrt.simulator.task_graph import CATEGORY_CODE, OwnerKind
from flexrt.strategy.reshard import numel


RING_KEY = "ring"   # the lowering's times cache: a ring channel's (sums' times, latency extras)


@dataclass(frozen=True)
class WeightRing:
    """One ring AllReduce (one channel of it) of a weight instance's gradient: its members' devices
    in ring order, per member the first hop of its send to the next member and the REDUCE after
    which it holds the sum, the elements summed, their dtype, the members' buffer key, the
    instance's box and the channel (``Machine.ring_channels``; channel 0 pays the latency)."""

    devices: tuple
    firsts: tuple
    done: tuple
    elements: int
    dtype: object
    key: object
    box: tuple
    channel: int = 0


def lower_allreduce(low, owner, devices: list[int], ready: list[list[int]], box, dtype, category,
                    name: str) -> tuple[list[list[int]], tuple]:
    """Ring AllReduce of ``box`` over ``devices`` in the lowering ``low`` (module doc). Returns, per
    device, the tasks after which it holds the sum, and the key of the members' buffers: the caller
    adds the parts each member contributes."""
    elements = numel(box)
    key = Key.ring(low._new_group())
    orders = (tuple(devices),) if low.ring_fits is not None else low.machine.ring_channels(devices)
    pos = {d: i for i, d in enumerate(devices)}
    done_of: list[list[int]] = [[] for _ in devices]
    group = None
    for c, order in enumerate(orders):
        share = elements // len(orders) + (1 if c < elements % len(orders) else 0)
        idx = [pos[d] for d in order]
        done, firsts = _ring(low, owner, list(order), [ready[i] for i in idx], share, dtype, category, name, c == 0)
        for i, t in zip(idx, done):
            done_of[i].append(t)
        if owner.kind is OwnerKind.WEIGHT:
            low.rings.setdefault(owner.name, []).append(WeightRing(tuple(order), tuple(firsts), tuple(done), share,
                                                                   dtype, key, tuple(box), c))
        if low.detail:
            if group is None:
                group = RingGroup(key.index, tuple(Buf(key, d, tuple(box), dtype.numpy_name) for d in devices))
            n = len(order)
            label = name if c == 0 else f"{name} channel {c}"
            for i in range(n):
                j = (i + 1) % n
                low._name_hops(low.core.hops(firsts[i]), f"{label} ring {i}->{j}", (), RingStep(group, pos[order[i]]))
                low.graph.annotate(done[j], f"{label} ring sum @{order[j]}")
    return done_of, key


def _ring(low, owner, order: list[int], ready: list[list[int]], elements: int, dtype, category, name: str,
          steps: bool) -> tuple[list[int], list[int]]:
    """One channel's ring over ``order`` summing ``elements``: (per member the REDUCE after which it
    holds the sum, per member its send's first hop); ``steps``: it pays the AllReduce's latency."""
    key = (RING_KEY, tuple(order), elements, dtype, steps)   # rings recur (one per micro-batch and layer)
    hit = low._times.get(key)
    if hit is None:
        n = len(order)
        adds = TensorShape((max(1, (n - 1) * elements // n),), dtype)
        reduce_exe = low._per_kind(order, f"{name} sum", lambda spec: ring_sum_time(low.cost, adds, spec))
        extras = low.ring_extras(order, elements, dtype.size_bytes, reduce_exe) if steps else None
        hit = (reduce_exe, extras)
        if low.ring_fits is None:       # measured extras are not kept (``collectives.ring_extras``)
            low._times[key] = hit
    reduce_exe, extras = hit
    return low.core.ring(low._oid(owner), order, ready, elements, dtype.size_bytes, CATEGORY_CODE[category],
                         reduce_exe, extras)
