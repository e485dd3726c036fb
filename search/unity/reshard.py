"""Edge costs of Unity's machine-mapping DP, a whole matrix at a time (Unity §5.2, "Cost estimation").

``LocalCosts.edge_cost`` defines the cost of resharding one producer configuration's output into one
consumer configuration's operand. The DP needs it for every pair of configurations of two operators
on two blocks: (configurations)^2 pairs of (pieces x pieces) work each, which made the search grow
much faster than the devices. This module computes the same numbers for all pairs at once:

- configurations that give the tensor the same parallel shape and put the same boxes (and
  partial-sum indices) on the same devices are one *layout* (``Producers``, ``Consumers``); a matrix
  is computed over distinct layouts and broadcast to configurations;
- per producer layout and consumer piece, the compiled kernel ``_reshard.missing_and_holders`` finds
  the elements missing on the piece's device and the first other device that holds some; the
  transfer time of each distinct (source, destination, bytes) is asked of ``LocalCosts.transfer``
  once per search (``Memo``), and a pair's cost is the maximum over the consumer's pieces (one
  piece per device);
- pairs that sum partial sums go to ``_reshard.partial_sum_costs``, with each consumer group's
  transfer rows, return sum and ring time computed beforehand in Python.

The operations and their order are those of ``edge_cost``, so every number is the same bit for bit;
tests check the matrices against ``edge_cost`` and the kernels against their pure-Python references
here (``missing_and_holders_py``, ``partial_sum_costs_py``).

``reshard_loads`` turns the same pairs into link loads for the DP's contention model: the moves
``strategy.reshard_plan`` makes (every box a consumer piece lacks, from the piece holding it) added
per hop on the machine's shared links, in the compiled kernel ``_reshard.plain_loads`` (reference:
``_plain_sends``, also the path for transfer times that are not linear in the bytes).

Entry points: ``producers``, ``consumers``, ``reshard_matrix``, ``reshard_loads``, ``Memo``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.tensor_shape import TensorShape

try:
    from flexrt.search.unity import _reshard
except ImportError as e:  # never fall back silently to the slow path
    raise ImportError(
        "flexrt's compiled extension flexrt.search.unity._reshard is missing; build it with "
        "`pip install -e . --no-deps --no-build-isolation` (or `python setup.py build_ext --inplace`) from the "
        "repository root") from e

INF = float("inf")


def box_of(region, shape: TensorShape) -> tuple:
    """A region's ranges clipped to the tensor (a halo reaching outside reads padding)."""
    return tuple((max(a, 0), min(b, n)) for (a, b), n in zip(region.ranges, shape.dims))


def numel(box) -> int:
    n = 1
    for lo, hi in box:
        n *= max(0, hi - lo)
    return n


def overlap(a, b) -> int:
    n = 1
    for (x0, x1), (y0, y1) in zip(a, b):
        n *= max(0, min(x1, y1) - max(x0, y0))
    return n


def seq_sum(values) -> float:
    """Left-to-right float sum (what the kernels do; ``sum`` may compensate on newer Pythons)."""
    t = 0.0
    for v in values:
        t += v
    return t


@dataclass
class Pieces:
    """One tensor's pieces in one configuration: per piece its box ([lo, hi) per dimension, clipped
    to the tensor), partial-sum index and device; ``shape`` is the id of its parallel shape."""

    shape: int
    box: np.ndarray     # (pieces, rank, 2) int64
    sum: np.ndarray     # (pieces,) int64
    dev: np.ndarray     # (pieces,) int64

    def key(self) -> tuple:
        return self.shape, self.box.shape, self.box.tobytes(), self.sum.tobytes(), self.dev.tobytes()


@dataclass
class _Stack:
    """The distinct layouts of one tensor over an operator's configurations on one block, their
    pieces stacked: layout a's are ``off[a] .. off[a+1]-1``."""

    index: np.ndarray       # configuration -> layout
    shapes: np.ndarray      # per layout, the id of its parallel shape (``LocalCosts.shape_id``)
    box: np.ndarray
    sum: np.ndarray
    dev: np.ndarray
    off: np.ndarray


def _stack(layouts: list[Pieces]) -> tuple[_Stack, list[Pieces]]:
    ids: dict = {}
    index = np.array([ids.setdefault(p.key(), j) for j, p in enumerate(layouts)], dtype=np.int64)
    firsts = sorted(set(ids.values()))
    renumber = np.zeros(len(layouts), dtype=np.int64)
    renumber[firsts] = np.arange(len(firsts))
    distinct = [layouts[j] for j in firsts]
    off = np.zeros(len(distinct) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(p.sum) for p in distinct])
    return _Stack(renumber[index], np.array([p.shape for p in distinct], dtype=np.int64),
                  np.concatenate([p.box for p in distinct]), np.concatenate([p.sum for p in distinct]),
                  np.concatenate([p.dev for p in distinct]), off), distinct


@dataclass
class Producers(_Stack):
    """Output layouts, and per (layout, device) the distinct boxes held there: the pieces
    ``held[held_ptr[a * num_devices + d] .. held_ptr[a * num_devices + d + 1] - 1]``."""

    held_ptr: np.ndarray = None
    held: np.ndarray = None


@dataclass
class Consumers(_Stack):
    """Operand layouts (one piece per device), with their partial-sum groups built when first needed."""

    layouts: list = None
    groups: dict = field(default_factory=dict)   # item size -> _Groups


@dataclass
class _Groups:
    """Per consumer layout, its pieces grouped by (box, sum index) as ``edge_cost``'s partial-sum path
    groups them, with what each group costs apart from the producer's devices."""

    box: np.ndarray
    sum: np.ndarray
    off: np.ndarray             # layout b's groups are off[b] .. off[b+1]-1
    dev_ptr: np.ndarray         # the group's distinct devices, ascending
    devs: np.ndarray
    row: np.ndarray             # index into rows: transfer(d, target, bytes) for every device d
    rows: np.ndarray
    back: np.ndarray            # sum of transfer(target, d, bytes) over the group's devices
    ring: np.ndarray            # ring AllReduce over the group's devices (when there are several)


def _held(p: Pieces, base: int, num_devices: int) -> list[list[int]]:
    """Per device, the stacked indices of the pieces with distinct (box, sum index) held there."""
    on: list[list[int]] = [[] for _ in range(num_devices)]
    if len(np.unique(p.dev)) == len(p.dev):  # one piece per device: nothing to merge
        for j, d in enumerate(p.dev.tolist()):
            on[d].append(base + j)
        return on
    seen: list[set] = [set() for _ in range(num_devices)]
    for j, (b, s, d) in enumerate(zip(p.box.tolist(), p.sum.tolist(), p.dev.tolist())):
        key = (tuple(map(tuple, b)), s)
        if key not in seen[d]:
            seen[d].add(key)
            on[d].append(base + j)
    return on


def producers(layouts: list[Pieces], num_devices: int) -> Producers:
    """``layouts[c]``: configuration c's output pieces."""
    st, distinct = _stack(layouts)
    held_ptr, held = [0], []
    for a, p in enumerate(distinct):
        for dev_pieces in _held(p, int(st.off[a]), num_devices):
            held += dev_pieces
            held_ptr.append(len(held))
    return Producers(st.index, st.shapes, st.box, st.sum, st.dev, st.off, np.array(held_ptr, dtype=np.int64),
                     np.array(held, dtype=np.int64))


def consumers(layouts: list[Pieces]) -> Consumers:
    """``layouts[c]``: configuration c's operand pieces, one per device."""
    st, distinct = _stack(layouts)
    for p in distinct:
        if len(np.unique(p.dev)) != len(p.dev):
            raise StrategyError(f"a consumer layout puts two pieces on one device (devices {p.dev.tolist()}); "
                                f"the DP's configurations place one piece per device")
    return Consumers(st.index, st.shapes, st.box, st.sum, st.dev, st.off, distinct)


def _groups(C: Consumers, item: int, costs) -> _Groups:
    hit = C.groups.get(item)
    if hit is not None:
        return hit
    boxes, sums, off, dev_ptr, devs, row, back, ring = [], [], [0], [0], [], [], [], []
    row_ids: dict = {}
    for p in C.layouts:
        grouped: dict = {}
        for b, s, d in zip(p.box.tolist(), p.sum.tolist(), p.dev.tolist()):
            grouped.setdefault((tuple(map(tuple, b)), s), []).append(d)
        for (b, s), cdevs in grouped.items():
            nbytes = numel(b) * item
            target, distinct = cdevs[0], set(cdevs)
            boxes.append(b)
            sums.append(s)
            devs += sorted(distinct)
            dev_ptr.append(len(devs))
            row.append(row_ids.setdefault((target, nbytes), len(row_ids)))
            back.append(seq_sum(costs.transfer(target, d, nbytes) for d in distinct))
            ring.append(costs.ring(sorted(distinct), nbytes) if len(distinct) > 1 else 0.0)
        off.append(len(sums))
    n = costs.machine.num_devices
    targets = np.array([t for t, _ in row_ids], dtype=np.int64).reshape(-1, 1)
    sizes = np.array([b for _, b in row_ids], dtype=np.int64).reshape(-1, 1)
    rows = costs.transfers(np.broadcast_to(np.arange(n), (len(row_ids), n)), np.broadcast_to(targets, (len(row_ids), n)),
                           np.broadcast_to(sizes, (len(row_ids), n))).reshape(len(row_ids), n)
    i64 = lambda x: np.array(x, dtype=np.int64)  # noqa: E731
    hit = C.groups[item] = _Groups(i64(boxes).reshape(len(boxes), C.box.shape[1], 2), i64(sums), i64(off),
                                   i64(dev_ptr), i64(devs), i64(row), rows, np.array(back, dtype=np.float64),
                                   np.array(ring, dtype=np.float64))
    return hit


class Memo:
    """Float values keyed by three non-negative integers, in arrays the compiled kernels probe
    (``_reshard.memo_get`` / ``memo_put`` / ``memo_claim`` / ``memo_transfers``)."""

    def __init__(self, capacity: int = 1024) -> None:
        self.count = 0
        self._alloc(max(2, 1 << (capacity - 1).bit_length()))

    def _alloc(self, capacity: int) -> None:
        self.k0 = np.full(capacity, -1, dtype=np.int64)
        self.k1 = np.zeros(capacity, dtype=np.int64)
        self.k2 = np.zeros(capacity, dtype=np.int64)
        self.val = np.zeros(capacity, dtype=np.float64)

    def get(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """The value per key (a[n], b[n], c[n]); NaN where none is stored."""
        return _reshard.memo_get(self.k0, self.k1, self.k2, self.val, *(np.ascontiguousarray(x, dtype=np.int64)
                                                                       for x in (a, b, c)))

    def put(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, v: np.ndarray) -> None:
        """Store v[n] for key (a[n], b[n], c[n])."""
        keys = self._room(a, b, c)
        self.count += _reshard.memo_put(self.k0, self.k1, self.k2, self.val, *keys,
                                        np.ascontiguousarray(v, dtype=np.float64))

    def claim(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Enter the keys not stored yet (value NaN until ``put``); the positions of their first
        occurrences, so that each is computed once."""
        keys = self._room(a, b, c)
        first = _reshard.memo_claim(self.k0, self.k1, self.k2, self.val, *keys)
        self.count += len(first)
        return first

    def _room(self, a, b, c) -> list[np.ndarray]:
        keys = [np.ascontiguousarray(x, dtype=np.int64) for x in (a, b, c)]
        if 2 * (self.count + len(keys[0])) > len(self.k0):  # grow, keeping the table at most half full
            used = self.k0 != -1
            old = self.k0[used], self.k1[used], self.k2[used], self.val[used]
            self._alloc(1 << (4 * (self.count + len(keys[0]))).bit_length())
            self.count = _reshard.memo_put(self.k0, self.k1, self.k2, self.val, *old)
        return keys


def _times(missing: np.ndarray, holder: np.ndarray, qdev: np.ndarray, item: int, costs) -> np.ndarray:
    """Transfer seconds per (producer layout, consumer piece), 0 where nothing moves: the memo's,
    and for (source, destination, bytes) it has not seen, ``costs.transfer``'s."""
    memo = costs.transfer_memo
    T = _reshard.memo_transfers(memo.k0, memo.k1, memo.k2, memo.val, missing, holder, qdev, item)
    unknown = np.flatnonzero(np.isnan(T))
    if unknown.size:
        keys = holder.ravel()[unknown], qdev[unknown % missing.shape[1]], missing.ravel()[unknown] * item
        first = memo.claim(*keys)
        new = [k[first] for k in keys]
        memo.put(*new, costs.transfers(*new))
        T.ravel()[unknown] = memo.get(*keys)
    return T


def _ratios(P: Producers, C: Consumers, costs) -> np.ndarray:
    """``costs.sum_ratio`` per (producer layout, consumer layout), memoized per pair of shape ids."""
    pi, ps = np.unique(P.shapes, return_inverse=True)
    ci, cs = np.unique(C.shapes, return_inverse=True)
    a, b = np.repeat(pi, len(ci)), np.tile(ci, len(pi))
    c = np.zeros_like(a)
    memo = costs.ratio_memo
    r = memo.get(a, b, c)
    unknown = np.flatnonzero(np.isnan(r))
    if unknown.size:
        r[unknown] = [costs.sum_ratio_ids(int(s), int(t)) for s, t in zip(a[unknown].tolist(), b[unknown].tolist())]
        memo.put(a[unknown], b[unknown], c[unknown], r[unknown])
    return r.astype(np.int64).reshape(len(pi), len(ci))[ps.ravel()][:, cs.ravel()]


def reshard_matrix(P: Producers, C: Consumers, full: TensorShape, grad: bool, costs) -> np.ndarray:
    """``edge_cost`` for every configuration pair: rows are ``P``'s configurations, columns ``C``'s."""
    item = full.dtype.size_bytes
    K = _ratios(P, C, costs)
    E = np.full(K.shape, INF)
    rows = np.flatnonzero((K == 1).any(axis=1))
    if rows.size:
        missing, holder = _reshard.missing_and_holders(P.box, P.sum, P.dev, P.off, P.held_ptr, P.held, rows, C.box,
                                                       C.sum, C.dev, costs.machine.num_devices)
        T = _times(missing, holder, C.dev, item, costs)
        fwd = np.maximum.reduceat(T, C.off[:-1], axis=1)
        E[rows] = np.where(K[rows] == 1, fwd, E[rows])
    pa, pb = (np.ascontiguousarray(x) for x in np.nonzero(K > 1))
    if pa.size:
        G = _groups(C, item, costs)
        E[pa, pb] = _reshard.partial_sum_costs(P.box, P.sum, P.dev, P.off, G.box, G.sum, G.off, G.dev_ptr, G.devs,
                                               G.row, G.rows, G.back, G.ring, pa, pb, np.ascontiguousarray(K[pa, pb]),
                                               costs.machine.num_devices)
    if grad:
        E = E * 2.0
    return E[P.index][:, C.index]


def reshard_loads(P: Producers, C: Consumers, full: TensorShape, grad: bool, costs, compiled: bool = True) -> np.ndarray:
    """The transfers ``reshard_matrix`` costs, as link loads: per (producer layout, consumer layout)
    (``P.index`` and ``C.index`` map configurations to them), the seconds each shared link
    (``costs.shared``) is busy in the forward pass, then in the backward (2 x shared links, float32).
    The transfers are the lowering's (``strategy.reshard_plan``): each box a consumer piece lacks
    comes from the producer piece holding it (``edge_cost`` charges all of a piece's missing elements
    to one holder, a cheaper estimate of its time); the gradient (``grad``) makes every transfer
    again in the other direction. Pairs that sum partial sums load nothing here (left out: walking
    their groups in Python made the DP several times slower; ``edge_cost`` already serializes a
    gather's sends into its one device), nor do impossible pairs. ``compiled=False``: the pure-Python
    reference (the one path for cost models whose transfer times are not linear in the bytes)."""
    item = full.dtype.size_bytes
    K = _ratios(P, C, costs)
    A, B, L = K.shape[0], K.shape[1], len(costs.shared)
    flat = np.zeros(A * B * 2 * L)
    rows = np.flatnonzero((K == 1).any(axis=1))
    table = costs.route_table()
    if L and rows.size and table is not None and compiled:
        ptr, cols, inv, lat = table
        _reshard.plain_loads(P.box, P.sum, P.dev, P.off, _firsts(P), P.held_ptr, P.held, rows, C.box, C.sum, C.dev,
                             np.repeat(np.arange(B, dtype=np.int64), np.diff(C.off)), np.ascontiguousarray(K), ptr,
                             cols, inv, lat, costs.machine.num_devices, item, grad, L, flat)
    elif L and rows.size:  # the reference (and any cost model whose transfer times are not linear)
        sends = _Sends()
        _plain_sends(P, C, K, item, sends)
        sends.scatter(flat, grad, L, costs)
    return flat.reshape(A, B, 2 * L).astype(np.float32)


def _firsts(P: Producers) -> np.ndarray:
    """Per producer piece, the first piece of its layout with the same box and sum index."""
    hit = getattr(P, "_first", None)
    if hit is None:
        layout = np.repeat(np.arange(len(P.off) - 1, dtype=np.int64), np.diff(P.off))
        keys = np.concatenate([layout[:, None], P.box.reshape(len(P.sum), -1), P.sum[:, None]], axis=1)
        _, first, grp = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        hit = P._first = first[grp.ravel()].astype(np.int64)
    return hit


class _Sends:
    """Transfers (pair index, source, destination, bytes), collected as arrays."""

    def __init__(self) -> None:
        self.parts: list = []

    def add(self, pair, src, dst, nbytes) -> None:
        pair = np.asarray(pair, dtype=np.int64)
        self.parts.append(np.stack(np.broadcast_arrays(pair, np.asarray(src, dtype=np.int64),
                                                       np.asarray(dst, dtype=np.int64),
                                                       np.asarray(nbytes, dtype=np.int64)), axis=1))

    def scatter(self, flat: np.ndarray, grad: bool, L: int, costs) -> None:
        """Add every transfer's hop loads (``costs.hop_loads``) to ``flat`` (pairs x 2 x L: the
        forward's, then the gradient's, which goes the other way)."""
        if not self.parts:
            return
        t = np.concatenate(self.parts)
        t = t[t[:, 1] != t[:, 2]]
        phase = np.zeros(len(t), dtype=np.int64)
        if grad:
            t = np.concatenate([t, t[:, [0, 2, 1, 3]]])
            phase = np.concatenate([phase, np.ones_like(phase)])
        if not len(t):
            return
        table = costs.route_table()
        if table is not None:  # linear transfer times: every hop at once
            ptr, cols, inv_bw, lat = table
            route = t[:, 1] * costs.machine.num_devices + t[:, 2]
            per = ptr[route + 1] - ptr[route]
            start = np.repeat(ptr[route] - np.concatenate([[0], np.cumsum(per)[:-1]]), per) + np.arange(per.sum())
            times = np.repeat(t[:, 3], per) * inv_bw[start] + np.repeat(lat[route], per)
            flat += np.bincount(np.repeat(t[:, 0] * 2 + phase, per) * L + cols[start], weights=times,
                                minlength=len(flat))
            return
        kinds, inv = np.unique(t[:, 1:], axis=0, return_inverse=True)
        hops = [costs.hop_loads(int(s), int(d), int(n)) for s, d, n in kinds.tolist()]
        count = np.array([len(c) for c, _ in hops], dtype=np.int64)
        ptr = np.concatenate([[0], np.cumsum(count)])
        cols = np.concatenate([c for c, _ in hops] + [np.zeros(0, dtype=np.int64)])
        times = np.concatenate([x for _, x in hops] + [np.zeros(0)])
        per = count[inv.ravel()]
        start = np.repeat(ptr[inv.ravel()] - np.concatenate([[0], np.cumsum(per)[:-1]]), per) + np.arange(per.sum())
        idx = np.repeat(t[:, 0] * 2 + phase, per) * L + cols[start]
        flat += np.bincount(idx, weights=times[start], minlength=len(flat))


def _plain_sends(P: Producers, C: Consumers, K: np.ndarray, item: int, sends: _Sends) -> None:
    """The moves of ``strategy.reshard_plan`` where no partial sums meet (ratio 1): each consumer piece
    takes every overlapping producer box (same sum index) that its device does not hold, from the
    box's first piece (the plan spreads reads over replicas: the same bytes on the same routes when
    the producer has no replicas, else approximately)."""
    B = K.shape[1]
    qlay = np.repeat(np.arange(B), np.diff(C.off))
    for a in np.flatnonzero((K == 1).any(axis=1)).tolist():
        lo, hi = int(P.off[a]), int(P.off[a + 1])
        pbox, psum, pdev = P.box[lo:hi], P.sum[lo:hi], P.dev[lo:hi]
        keys = np.concatenate([pbox.reshape(len(pbox), -1), psum[:, None]], axis=1)
        _, first, grp = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        cols = np.flatnonzero(K[a][qlay] == 1)
        qbox, qsum, qdev = C.box[cols], C.sum[cols], C.dev[cols]
        gbox = pbox[first]
        ov = np.clip(np.minimum(gbox[:, None, :, 1], qbox[None, :, :, 1])
                     - np.maximum(gbox[:, None, :, 0], qbox[None, :, :, 0]), 0, None).prod(axis=2)
        ov *= psum[first][:, None] == qsum[None, :]
        local = np.zeros(ov.shape, dtype=bool)
        np.logical_or.at(local, grp.ravel(), pdev[:, None] == qdev[None, :])
        g, q = np.nonzero((ov > 0) & ~local)
        sends.add(a * B + qlay[cols[q]], pdev[first[g]], qdev[q], ov[g, q] * item)


# ---- pure-Python references of the kernels (tests check that both agree) ---------------------------

def missing_and_holders_py(pbox, psum, pdev, poff, held_ptr, held, rows, qbox, qsum, qdev, num_devices):
    """``_reshard.missing_and_holders`` in Python: for producer layout ``rows[r]`` and consumer piece q,
    the elements of q's box its device lacks, and the first other device holding some (or -1)."""
    missing = np.zeros((len(rows), len(qbox)), dtype=np.int64)
    holder = np.full((len(rows), len(qbox)), -1, dtype=np.int64)
    for r, a in enumerate(rows):
        for q in range(len(qbox)):
            want, s, dev = [tuple(x) for x in qbox[q]], qsum[q], qdev[q]
            need = numel(want)
            base = a * num_devices + dev
            have = sum(overlap(want, pbox[held[k]]) for k in range(held_ptr[base], held_ptr[base + 1])
                       if psum[held[k]] == s)
            if have >= need:
                continue
            missing[r, q] = need - have
            holder[r, q] = next((pdev[p] for p in range(poff[a], poff[a + 1])
                                 if psum[p] == s and pdev[p] != dev and overlap(want, pbox[p])), -1)
    return missing, holder


def partial_sum_costs_py(pbox, psum, pdev, poff, gbox, gsum, goff, dev_ptr, devs, row, rows, back, ring, pa, pb,
                         pk, num_devices):
    """``_reshard.partial_sum_costs`` in Python: per (producer layout, consumer layout, sum ratio k),
    the slowest group's cost: a ring AllReduce when the producer pieces summed into the group sit on
    exactly the group's devices (more than one), else their sends to the group's first device plus
    ``back``; or, when slower, the busiest source device's sends to every group, one after another."""
    out = np.zeros(len(pa))
    for n, (a, b, k) in enumerate(zip(pa, pb, pk)):
        fwd, sent = 0.0, {}
        for g in range(goff[b], goff[b + 1]):
            box = [tuple(x) for x in gbox[g]]
            pdevs = sorted({int(pdev[p]) for p in range(poff[a], poff[a + 1])
                            if gsum[g] * k <= psum[p] < (gsum[g] + 1) * k and overlap(box, pbox[p])})
            if pdevs == [int(d) for d in devs[dev_ptr[g]:dev_ptr[g + 1]]] and len(pdevs) > 1:
                t = ring[g]
            else:
                sends = [rows[row[g], d] for d in pdevs]
                t = seq_sum(sends) + back[g]
                for d, x in zip(pdevs, sends):
                    if x > 0:
                        sent[d] = sent.get(d, 0.0) + x
            fwd = max(fwd, t)
        out[n] = max([fwd] + list(sent.values()))   # a source's sends to many groups, one after another
    return out
