"""Symmetric simulation: ``R`` identical data-parallel replicas simulated as one.

Megatron-LM's layout (and any strategy made of one replica's strategy repeated over groups of
nodes, data parallel across them) runs the same tasks on every replica, on isomorphic devices and
links; only the gradient AllReduces join replicas. When the network treats nodes alike (every
preset: each node's NICs reach one switch fabric), the replicas' timelines are identical, so one
replica's timeline *is* the iteration's. ``Fold`` lowers one replica on the machine of its own nodes
(``sub``) and replaces each weight's cross-replica ring AllReduce by its image in that replica:

- a ring of ``n = k R`` members (``k`` instances per replica, device order: replica 0's ``k``,
  then replica 1's, ...) has member ``i`` send ``2(n-1)/n`` of the data to member ``i + 1`` after
  both are ready, and member ``i + 1`` sum; every member's send of channel 0 pays the whole ring's
  latency (``collectives.allreduce_latency`` over the whole machine's ring; the lowering's ring,
  ``Lowering._allreduce``);
- replica 0's members ``0 .. k-2`` send inside the replica as there; member ``k - 1`` sends to member
  ``k``, which is replica 1's first: by symmetry its readiness is member 0's, and the links its
  transfer crosses on replica 1's node are the images of member 0's node's own (the transfer that
  uses them there is replica ``R - 1``'s image of this one). The send therefore crosses the route
  from member ``k - 1`` to member ``k`` in the whole machine (``full``) with every link of replica
  1's nodes renamed to the same link of replica 0's, and member 0 sums what it brings.

A test shows the folded iteration time equals the whole machine's (``tests/simulator/
test_folding.py``). Folding is for timing only (no actions: the runtime runs whole strategies).

Entry point: ``Fold``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from flexrt.errors import MachineSpecError, StrategyError
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import Machine
from flexrt.simulator.collectives import allreduce_latency
from flexrt.simulator.cost_model import ring_sum_time
from flexrt.simulator.task_graph import CATEGORY_CODE, TaskKind
from flexrt.strategy.reshard import numel

_NODE = re.compile(r"\bn(\d+)\.")


@dataclass
class Fold:
    """``replicas`` identical replicas of the strategy lowered on ``sub`` (the first
    ``full.num_nodes / replicas`` nodes of ``full``)."""

    replicas: int
    full: Machine
    sub: Machine
    _links: dict = field(default_factory=dict, repr=False)   # full link id -> the sub machine's image
    _slots: list = field(default_factory=list, repr=False)    # slot k + 1 -> the latency its sends pay
    _slot_of: dict = field(default_factory=dict, repr=False)  # and back
    _ring_latency: dict = field(default_factory=dict, repr=False)   # (whole ring, bytes) -> its latency

    def __post_init__(self) -> None:
        r, full, sub = self.replicas, self.full, self.sub
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise StrategyError(f"symmetric simulation: replicas must be an integer >= 1, got {r!r}")
        if full.num_nodes != r * sub.num_nodes or full.devices_per_node != sub.devices_per_node:
            raise MachineSpecError(f"symmetric simulation: {r} replicas of {sub.num_nodes} node(s) do not make machine "
                                   f"{full.name!r} of {full.num_nodes} nodes")
        by_name = {(l.src, l.dst): l.id for l in sub.links}
        for link in full.links:
            key = (self._image(link.src), self._image(link.dst))
            if key in by_name:
                self._links[link.id] = by_name[key]

    def _image(self, name: str) -> str:
        return _NODE.sub(lambda m: f"n{int(m.group(1)) % self.sub.num_nodes}.", name)

    def route(self, src: int, k: int) -> tuple[int, ...]:
        """The links (of ``sub``) that replica 0's device ``src`` crosses to reach replica 1's device
        ``k``, as their images in replica 0."""
        out = []
        for l in self.full.route(src, self.sub.num_devices + k):
            image = self._links.get(l)
            if image is None:
                link = self.full.links[l]
                raise MachineSpecError(f"symmetric simulation: link {link.src} -> {link.dst} of machine "
                                       f"{self.full.name!r} has no image in one replica's nodes (the machine's "
                                       f"nodes are not alike)")
            out.append(image)
        return tuple(out)


def virtual(low, dst: int, wrap: bool, latency: float | None) -> int:
    """The route key of a folded ring send to ``dst`` (to replica 1's ``dst`` when ``wrap``) paying
    ``latency`` seconds in all (the whole ring's, ``collectives.allreduce_latency``), or its route's
    own when None (a later channel's send): ``Lowering._route`` resolves it (``route_of``)."""
    d = low.machine.num_devices
    fold, slot = low.fold, 0
    if latency is not None:
        slot = fold._slot_of.get(latency)
        if slot is None:
            fold._slots.append(latency)
            slot = fold._slot_of[latency] = len(fold._slots)
    # the graph caches routes by src * d + dst
    return d * d * (1 + (((slot * d + dst) << 1) | int(wrap)))


def route_of(low, src: int, key: int) -> tuple[tuple, float | None]:
    """(the sub machine's links, the latency the send pays in all or None for its route's own) of a
    virtual route key (``virtual``)."""
    d = low.machine.num_devices
    code = key // (d * d) - 1
    wrap, rest = code & 1, code >> 1
    slot, dst = divmod(rest, d)
    links = low.fold.route(src, dst) if wrap else low.machine.route(src, dst)
    if not slot:
        return links, None
    return links, low.fold._slots[slot - 1]


def folded_allreduce(low, owner, devices: list, ready: list, box, dtype, category, name: str) -> list:
    """Replica 0's part of a weight's ring AllReduce over every replica (module doc), channel by
    channel as the whole machine's ring runs (``Machine.ring_channels`` of the whole ring: each
    channel's first ``k`` members are replica 0's); returns per device the tasks after which it
    holds the sum."""
    if getattr(low.strategy, "fusion", None):
        raise StrategyError("symmetric simulation does not take fusion plans (gradient buckets join rings)")
    k = len(devices)
    fold = low.fold
    whole = [d + r * fold.sub.num_devices for r in range(fold.replicas) for d in devices]
    wholes = fold.full.ring_channels(whole)
    elements = numel(box)
    pos = {d: i for i, d in enumerate(devices)}
    done: list[list[int]] = [[] for _ in devices]
    for c, ring in enumerate(wholes):
        order = ring[:k]
        share = elements // len(wholes) + (1 if c < elements % len(wholes) else 0)
        idx = [pos[d] for d in order]
        label = name if c == 0 else f"{name} channel {c}"
        for i, t in zip(idx, _folded_ring(low, owner, list(order), [ready[i] for i in idx], share, dtype, category,
                                          label, ring if c == 0 else None)):
            done[i].append(t)
    return done


def _folded_ring(low, owner, devices: list, ready: list, elements: int, dtype, category, name: str,
                 whole) -> list:
    """One channel of ``folded_allreduce``: per member (in ``devices``' order) the REDUCE after which it
    holds the sum."""
    k = len(devices)
    n = k * low.fold.replicas
    total = 2 * (n - 1) * elements
    latency = None
    if whole is not None:   # channel 0 pays the whole ring's latency
        key = (tuple(whole), elements * dtype.size_bytes)
        latency = low.fold._ring_latency.get(key)
        if latency is None:
            latency = low.fold._ring_latency[key] = allreduce_latency(low.fold.full, low.cost, whole, key[1]).seconds
    adds = TensorShape((max(1, (n - 1) * elements // n),), dtype)
    reduce_exe = low._per_kind(devices, f"{name} sum", lambda spec: ring_sum_time(low.cost, adds, spec))
    oid = low._oid(owner)
    done = [None] * k
    for i in range(k):
        j = (i + 1) % k
        share = total // n + (1 if i < total % n else 0)
        first = low.core.transfer(oid, devices[i], virtual(low, devices[j], i == k - 1, latency), share, dtype.size_bytes,
                                  CATEGORY_CODE[category], list(ready[i]) + list(ready[j]))
        r = low._task(owner, TaskKind.REDUCE, devices[j], reduce_exe[j], f"{name} ring sum @{devices[j]}")
        low._edges(owner, list(low.core.hops(first)), [r])
        done[j] = r
    return done
