"""What activation recomputation (``flexrt.strategy.recompute``) adds to a lowering (``Lowering``),
in both consumers of the task graph.

Every piece of a recomputed operator ``x`` gets a RECOMPUTE task on its device: its forward again,
writing ``Key.output("x@r", k, p)`` from operands ``Key.operand("x@r", i, p)`` assembled like the
forward's, except that a part read from a recomputed producer's output on the same device reads
that producer's recomputed output instead. Anything else (a checkpoint's output, a received
transfer, the batch, a weight) is read where the forward read it, so it stays alive until the
recomputation: that is what a checkpoint is. The backward of ``x`` then reads the recomputed
buffers, and the forward's own outputs die once the forward's consumers have read them.

Order (dependencies):
- the forward piece before its recomputation (what it reads exists), a recomputed producer's piece
  before its consumer's, and the recomputation before the backward piece;
- a *segment* (recomputed operators connected through each other, per micro-batch) starts
  recomputing only once the gradient of every consumer outside it has reached its members' devices
  (that consumer's backward there, or the transfer bringing its gradient; a consumer that feeds back
  into the segment excepted: its backward waits for the segment's), as a framework recomputes a
  checkpointed block when back-propagation reaches it. Across processes these are messages. One segment's activations are
  therefore live at a time on a device, which is what the static memory count charges.

Recomputing ops are lowered whole (no delta); recomputation and a fusion plan are not combined yet.

Entry points: ``recompute_copies``, ``lower_recompute``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from flexrt.errors import NotYetAvailableError
from flexrt.simulator.actions import BufKind, Forward, Key, own_buf
from flexrt.simulator.task_graph import Owner, OwnerKind, TaskKind
from flexrt.strategy.pipeline import source_of

SUFFIX = "@r"


def recompute_copies(strategy) -> frozenset:
    """The compute operators of the strategy's (possibly micro-batched) model that are recomputed."""
    names = getattr(strategy, "recompute", frozenset())
    if not names:
        return frozenset()
    if getattr(strategy, "fusion", None):
        raise NotYetAvailableError("a strategy with both a fusion plan and activation recomputation: the fused "
                                   "task graph does not carry recompute tasks yet; drop one of the two")
    if getattr(strategy, "pipeline", None) is None:
        return frozenset(names)
    return frozenset(c for c in strategy.wiring().ops if source_of(c)[0] in names)


def _segments(low, ops) -> list[list[str]]:
    """Connected components of the recomputed operators through producer -> consumer edges."""
    parent = {name: name for name in ops}

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for c in ops:
        for i in range(len(low.wiring.nodes[c].inputs)):
            p = low.producer[(c, i)].name
            if p in parent:
                parent[root(p)] = root(c)
    groups: dict[str, list[str]] = defaultdict(list)
    for name in low.wiring.ops:
        if name in parent:
            groups[root(name)].append(name)
    return list(groups.values())


def lower_recompute(low) -> None:
    """Add the recompute tasks, parts and dependencies of ``low.recompute`` (module doc); records
    ``low.recompute_tasks`` (operator -> its recompute task per piece)."""
    ops = low.recompute
    low.recompute_tasks = {}
    if not ops:
        return
    operand_parts: dict[Key, list] = defaultdict(list)
    if low.detail:
        for plist in low.parts.values():
            for key, dev, part in plist:
                if key.kind is BufKind.OPERAND and key.name in ops:
                    operand_parts[key].append((dev, part))
    fwd_of = {t: (name, q) for name in ops for q, t in enumerate(low.op_tasks[name][0])}
    size = low.core.size
    is_back, is_fwd = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    is_back[np.fromiter((t for name in ops for t in low.op_tasks[name][1]), dtype=np.int64)] = True
    is_fwd[np.fromiter(fwd_of, dtype=np.int64, count=len(fwd_of))] = True
    src, dst = low.core.edge_arrays()
    keep = is_back[dst] | (is_fwd[dst] & is_fwd[src])   # only these edges are asked about (vectorized: the
    preds: dict[int, list] = defaultdict(list)          # graph of a GPT-3 pipeline has millions of edges)
    for a, b in zip(src[keep].tolist(), dst[keep].tolist()):
        preds[b].append(a)
    del src, dst, keep, is_back, is_fwd
    chained: set = set()
    for name in low.wiring.ops:
        if name in ops:
            _recompute_op(low, name, operand_parts, chained, [[fwd_of[a] for a in preds.get(t, ()) if a in fwd_of]
                                                              for t in low.op_tasks[name][0]])
    segments = _segments(low, ops)
    for seg in segments:
        _trigger(low, seg, chained, preds)
    _working_set(low, segments)


def _recompute_op(low, name: str, operand_parts: dict, chained: set, local_producers: list) -> None:
    """The recompute task of each piece of ``name``; ``chained`` collects those that wait for a
    recomputed producer's task: per piece, ``local_producers`` are the recomputed (operator, piece)
    whose forward hands it its operand on its own device (a direct forward edge, the same in the
    graph with or without detail)."""
    owner = Owner.op(name)
    lay = low.layout(name)
    fx, _, _ = low._piece_times(lay)
    fwd, bwd = low.op_tasks[name]
    tasks = []
    for p, dev in enumerate(lay.devices):
        fa = ra = None
        if low.detail:      # actions and parts: what the runtime needs, not a search
            fa, _ = low._piece_actions(name, lay, p, dev)
            ra = Forward(name, fa.attrs, fa.zeroed, tuple(own_buf(b, SUFFIX) for b in fa.operands),
                         tuple(own_buf(b, SUFFIX) for b in fa.outputs))
        rid = low._task(owner, TaskKind.RECOMPUTE, dev, fx[p], f"recompute {name}[{p}]", node=name, piece=p,
                        action=ra)
        tasks.append(rid)
        low._edge(owner, fwd[p], rid)
        low._edge(owner, rid, bwd[p])
        for producer, q in local_producers[p]:
            low._edge(owner, low.recompute_tasks[producer][q], rid)
            chained.add(rid)
        if not low.detail:
            continue
        for i, b in enumerate(fa.operands):
            for d, part in operand_parts.get(b.key, ()):
                s = part.src
                if s.kind is BufKind.OUTPUT and s.name in low.recompute and part.device == d:
                    s = s.own(SUFFIX)
                low._part(owner, ra.operands[i].key, d, s, part.device, part.box, part.add)
        # the backward (and a zero-bubble schedule's W pass) read the recomputed buffers
        for t in [bwd[p]] + ([low.wgrad[name][p]] if name in low.wgrad else []):
            node, piece, regions, action = low.graph.info[t]
            low.graph.annotate(t, low.graph.names[t], node, piece, regions,
                               dataclasses.replace(action, operands=ra.operands, outputs=ra.outputs))
    low.recompute_tasks[name] = tasks


def _trigger(low, seg: list[str], chained: set, preds: dict) -> None:
    """The segment's recomputation waits for every gradient entering its backward from outside: its
    recompute tasks that wait for no other one wait for what its members' backwards on their device
    wait for from a consumer outside the segment (that consumer's backward on the same device, or the transfer
    bringing its gradient), unless that consumer's backward itself waits for the segment (it
    feeds back into it)."""
    members = set(seg)
    keys = low.graph.owner_keys
    verdict: dict[str, bool] = {}

    def entering(t: int) -> bool:
        owner = keys[low.core.row(t)[6]]
        if owner.kind is OwnerKind.LOSS:
            return True
        if owner.kind not in (OwnerKind.OP, OwnerKind.EDGE) or owner.name in members:
            return False
        if owner.name not in verdict:
            verdict[owner.name] = not _reaches(low, owner.name, members)
        return verdict[owner.name]
    outside: dict[int, set] = defaultdict(set)     # device -> what enters there
    for name in seg:
        for t in low.op_tasks[name][1]:
            outside[low.core.row(t)[1]].update(a for a in preds.get(t, ()) if entering(a))
    sources: dict[int, list] = defaultdict(list)
    for name in seg:
        for t in low.recompute_tasks[name]:
            if t not in chained:
                sources[low.core.row(t)[1]].append(t)
    for dev, ts in sources.items():
        if outside.get(dev):
            low._edges(Owner.op(seg[0]), sorted(outside[dev]), ts)


def _reaches(low, start: str, targets: set) -> bool:
    """Whether a path of operators leads from ``start`` to one of ``targets`` (searched no further
    than the last target in graph order)."""
    pos = low.position
    limit = max(pos[t] for t in targets)
    seen, stack = {start}, [start]
    while stack:
        x = stack.pop()
        for c, _ in low.consumers.get(x, ()):
            if c in targets:
                return True
            if c not in seen and pos[c] < limit:
                seen.add(c)
                stack.append(c)
    return False


def _working_set(low, segments: list) -> None:
    """Static memory: per device, the largest segment's recomputed activations (one segment is live
    at a time), charged to that segment's first operator."""
    best: dict[int, tuple[int, str]] = {}
    for seg in segments:
        per_dev: dict[int, int] = defaultdict(int)
        for name in seg:
            lay = low.layout(name)
            _, _, act = low._piece_times(lay)
            for dev, a in zip(lay.devices, act):
                per_dev[dev] += a
        for dev, total in per_dev.items():
            if total > best.get(dev, (0, ""))[0]:
                best[dev] = (total, seg[0])
    for dev, (total, name) in best.items():
        low._mem(Owner.op(name), dev, "activations", total)
