"""How data moves from a producer's layout to a consumer's: one ``ReshardPlan`` per edge.

Output ``k`` of a producer is cut into pieces (``OperatorLayout.output_regions``); operand ``i`` of
its consumer wants other pieces (``operand_regions``, clipped to the tensor: a halo's padding is
no one's data). The plan matches them by region overlap:

- where the producer's partial-sum degree equals the consumer's (``k == 1``), each consumer piece
  takes every overlapping box from one replica of the producer piece holding it: the replica on
  its own device if there is one, else replica ``copy_index`` (so copies spread over replicas).
  These are the plan's ``moves``: scatter and gather by overlap, copies, or nothing (same device);
- where the producer holds ``k`` partial sums of what the consumer needs, each (box, consumer sum
  index) becomes a ``reduction``: the ``k`` partial pieces to sum and the consumer pieces that
  need the total (the lowering sums them on one device, or ring-AllReduces them where the
  partials' devices are exactly the consumers').

A weight's plan (``WeightPlan``) is the same matching from the instances its first user's pieces
hold to every user's pieces: local reads, or copies whose gradients go back.

Entry points: ``ReshardPlan``, ``reshard_plan``, ``WeightPlan``, ``weight_plan``, ``Reshards`` (a
cache of plans).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from flexrt.strategy.layout import OperatorLayout

Box = tuple  # ((lo, hi), ...) per dimension


@dataclass(frozen=True)
class ReshardPlan:
    """Operand ``i`` of a consumer assembled from output ``k`` of its producer.

    ``moves``: (producer piece, its device, consumer piece, its device, box) per box one consumer
    piece takes from one producer piece; ``reductions``: (box, ((partial piece, its device), ...),
    (consumer piece, ...)) per box that is a sum of partial pieces."""

    moves: tuple
    reductions: tuple

    @property
    def columns(self) -> tuple:
        """The moves as columns: (producer pieces, their devices, consumer pieces, their devices,
        elements moved), computed once."""
        cols = self.__dict__.get("_columns")
        if cols is None:
            cols = (tuple(m[0] for m in self.moves), tuple(m[1] for m in self.moves), tuple(m[2] for m in self.moves),
                    tuple(m[3] for m in self.moves), tuple(numel(m[4]) for m in self.moves))
            object.__setattr__(self, "_columns", cols)
        return cols


def overlap(a: Box, b: Box):
    """The intersection of two boxes, or None."""
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return box if all(lo < hi for lo, hi in box) else None


def numel(box: Box) -> int:
    return math.prod(hi - lo for lo, hi in box)


def pick_replica(replicas, device: int, copy_index: int) -> tuple[int, int]:
    """(piece, device) of the replica to read from ``replicas`` [(copy index, piece, device)]: the one
    on ``device`` if any, else the ``copy_index``-th (cycling) in copy order."""
    for _, q, d in replicas:
        if d == device:
            return q, d
    _, q, d = sorted(replicas)[copy_index % len(replicas)]
    return q, d


def _overlaps(wants: list, pieces: dict) -> list[list[tuple]]:
    """Per wanted box, [(producer box, overlap)] in the producers' order: the producer box itself
    where one equals it (the common case: the same cut on both sides), else every overlapping one
    (computed for all the remaining wanted boxes at once)."""
    out: list = [None] * len(wants)
    rest = []
    for p, want in enumerate(wants):
        if want in pieces:
            out[p] = [(want, want)]
        else:
            rest.append(p)
    if not rest:
        return out
    boxes = list(pieces)
    lo = np.array([[a for a, _ in b] for b in boxes], dtype=np.int64).reshape(len(boxes), -1)
    hi = np.array([[b for _, b in bx] for bx in boxes], dtype=np.int64).reshape(len(boxes), -1)
    w = np.array([wants[p] for p in rest], dtype=np.int64).reshape(len(rest), lo.shape[1], 2)
    ilo = np.maximum(lo[None, :, :], w[:, None, :, 0])
    ihi = np.minimum(hi[None, :, :], w[:, None, :, 1])
    hit = (ilo < ihi).all(axis=2)
    for p in rest:
        out[p] = []
    for r, b in zip(*np.nonzero(hit)):
        out[rest[r]].append((boxes[b], tuple(zip(ilo[r, b].tolist(), ihi[r, b].tolist()))))
    return out


def _same_cut(producer: OperatorLayout, k_out: int, consumer: OperatorLayout, i: int, k: int):
    """The plan where piece p of the consumer wants exactly piece p of the producer, neither has
    replicas nor partial sums (the common case: both cut alike), else None."""
    wants = consumer.operand_boxes[i]
    have = producer.output_boxes[k_out]
    if k != 1 or not producer.output_plain[k_out] or not consumer.operand_plain[i] or \
            (have is not wants and have != wants):  # equal cuts often share one list
        return None
    pd, cd = producer.devices, consumer.devices
    plan = ReshardPlan(tuple(zip(range(len(wants)), pd, range(len(wants)), cd, wants)), ())
    n = tuple(range(len(wants)))
    object.__setattr__(plan, "_columns", (n, tuple(pd), n, tuple(cd), producer.output_sizes[k_out]))
    return plan


def reshard_plan(producer: OperatorLayout, k_out: int, consumer: OperatorLayout, i: int, k: int) -> ReshardPlan:
    """The plan taking output ``k_out`` of ``producer`` to operand ``i`` of ``consumer``, where the
    producer holds ``k`` times the consumer's partial-sum degree."""
    same = _same_cut(producer, k_out, consumer, i, k)
    if same is not None:
        return same
    # producer pieces: shard box -> sum index -> [(copy index, piece, device)]
    pieces: dict = defaultdict(lambda: defaultdict(list))
    for q, r in enumerate(producer.output_regions[k_out]):
        pieces[r.ranges][r.sum_index].append((r.copy_index, q, producer.devices[q]))
    groups: dict = defaultdict(list)  # (box, consumer sum index) -> consumer pieces, when k > 1
    moves: list = []
    wants = consumer.operand_boxes[i]
    hits = _overlaps(wants, pieces)
    for p, region in enumerate(consumer.operand_regions[i]):
        dev = consumer.devices[p]
        for ranges, box in hits[p]:
            if k == 1:
                q, qdev = pick_replica(pieces[ranges][region.sum_index], dev, region.copy_index)
                moves.append((q, qdev, p, dev, box))
            else:
                groups[(box, region.sum_index)].append(p)
    reductions = []
    for (box, s_c), ps in groups.items():
        partials = []
        for s in range(s_c * k, (s_c + 1) * k):
            ranges = next(r for r in pieces if overlap(box, r))
            partials.append(pick_replica(pieces[ranges][s], consumer.devices[ps[0]], 0))
        reductions.append((box, tuple(partials), tuple(ps)))
    return ReshardPlan(tuple(moves), tuple(reductions))


@dataclass(frozen=True)
class WeightPlan:
    """How a weight reaches its users. The first user's pieces are the instances: ``instances`` is
    (ranges, ((copy index, device), ...) in copy order) per distinct range, each instance holding
    the weight's ``ranges`` and summing its gradient. ``reads`` are (user, piece, ranges, device)
    where a piece reads an instance on its own device (the gradient waits for that piece);
    ``copies`` are (readers, ranges, source device, destination device, box), one per part that
    pieces need on a device where no instance holds it: ``readers`` ((user, piece), ...) are the
    pieces there that read it. The part is copied there once per iteration (a weight does not change
    before its update; Legion's instances stay valid likewise), and the readers' gradients of it are
    summed there and sent back once."""

    instances: tuple
    reads: tuple
    copies: tuple


def weight_plan(users: list) -> WeightPlan:
    """The plan of a weight read as operand ``i`` by each (layout, i) of ``users``, first user first."""
    L0, i0 = users[0]
    regions = L0.operand_regions[i0]
    primary: dict = {}
    for r, dev in zip(regions, L0.devices):
        primary.setdefault(r.ranges, []).append((r.copy_index, dev))
    for reps in primary.values():
        reps.sort()
    held = {ranges: {d for _, d in reps} for ranges, reps in primary.items()}
    reads = [(0, p, r.ranges, dev) for p, (r, dev) in enumerate(zip(regions, L0.devices))]
    copies: dict = {}   # (ranges, src, dev, box) -> readers, in the order they were met
    for u, (L, i) in enumerate(users[1:], start=1):
        for p, (r, dev) in enumerate(zip(L.operand_regions[i], L.devices)):
            if dev in held.get(r.ranges, ()):
                reads.append((u, p, r.ranges, dev))
                continue
            for ranges, reps in primary.items():
                box = overlap(r.ranges, ranges)
                if box is None:
                    continue
                src = next((d for _, d in reps if d == dev), reps[r.copy_index % len(reps)][1])
                if src == dev:  # the instance on this device holds this part already
                    reads.append((u, p, ranges, dev))
                else:
                    copies.setdefault((ranges, src, dev, tuple(box)), []).append((u, p))
    return WeightPlan(tuple((ranges, tuple(reps)) for ranges, reps in primary.items()), tuple(reads),
                      tuple((tuple(readers), ranges, src, dev, box) for (ranges, src, dev, box), readers in copies.items()))


class Reshards:
    """Plans computed once per (producer layout, output, consumer layout, operand, k); layouts are
    matched by identity (``Layouts`` keeps one per configuration). At most ``limit`` are kept (0:
    none)."""

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self._memo: dict = {}

    def get(self, producer: OperatorLayout, k_out: int, consumer: OperatorLayout, i: int, k: int) -> ReshardPlan:
        if self.limit <= 0:  # keeps nothing (and so no layout alive)
            return reshard_plan(producer, k_out, consumer, i, k)
        producer, consumer = producer.kin, consumer.kin   # twins' copies share their origin's plans
        key = (id(producer), k_out, id(consumer), i, k)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is producer and hit[1] is consumer:
            return hit[2]
        plan = reshard_plan(producer, k_out, consumer, i, k)
        if len(self._memo) >= self.limit:
            self._memo.clear()
        self._memo[key] = (producer, consumer, plan)
        return plan

    def weight(self, users: list) -> WeightPlan:
        """``weight_plan`` of ``users`` [(layout, operand index)], cached like edges' plans."""
        if self.limit <= 0:
            return weight_plan(users)
        users = [(L.kin, i) for L, i in users]
        key = ("weight",) + tuple((id(L), i) for L, i in users)
        hit = self._memo.get(key)
        if hit is not None and all(a is L for a, (L, _) in zip(hit[0], users)):
            return hit[1]
        plan = weight_plan(users)
        if len(self._memo) >= self.limit:
            self._memo.clear()
        self._memo[key] = (tuple(L for L, _ in users), plan)
        return plan
