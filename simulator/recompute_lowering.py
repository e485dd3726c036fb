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

With a fusion plan (``flexrt.simulator.fusion.FusedGraph``): a backward group that merges a member's
backward with the backward of a consumer outside its segment makes that consumer part of the
segment for the trigger (``trigger_groups``): the segment then starts recomputing once the gradients
entering the fused task from outside are ready (waiting for the consumer's own backward, which is
inside the fused task, would be a cycle). A forward group's recomputed members of one segment are
recomputed as one fused task (the fused kernel run again).

Recomputing ops are lowered whole (no delta).

Entry points: ``recompute_copies``, ``segments``, ``lower_recompute``, ``trigger_groups``, ``fused_triggers``,
``working_set``, ``fused_working_set``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from flexrt.simulator.actions import BufKind, Forward, Key, own_buf
from flexrt.simulator.task_graph import KIND_CODE, Owner, OwnerKind, TaskKind, sorted_runs
from flexrt.strategy.pipeline import source_of

SUFFIX = "@r"


def recompute_copies(strategy) -> frozenset:
    """The compute operators of the strategy's (possibly micro-batched) model that are recomputed."""
    names = getattr(strategy, "recompute", frozenset())
    if not names:
        return frozenset()
    if getattr(strategy, "pipeline", None) is None:
        return frozenset(names)
    return frozenset(c for c in strategy.wiring().ops if source_of(c)[0] in names)


def segments(wiring, ops) -> list[list[str]]:
    """Connected components of the recomputed operators ``ops`` through producer -> consumer edges
    (each in graph order): what is recomputed together."""
    parent = {name: name for name in ops}

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for c in ops:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)].name
            if p in parent:
                parent[root(p)] = root(c)
    groups: dict[str, list[str]] = defaultdict(list)
    for name in wiring.ops:
        if name in parent:
            groups[root(name)].append(name)
    return list(groups.values())


def lower_recompute(low) -> None:
    """Add the recompute tasks, parts and dependencies of ``low.recompute`` (module doc); records
    ``low.recompute_tasks`` (operator -> its recompute task per piece).

    Vectorized over the graph's edges (a GPT-3 pipeline has millions): the dependencies the module
    doc names are read from the edges as they stand before the recompute tasks exist."""
    ops = low.recompute
    low.recompute_tasks = {}
    if not ops:
        return
    order = [name for name in low.wiring.ops if name in ops]
    size = low.core.size
    src, dst = low.core.edge_arrays()
    rtask = np.full(size, -1, dtype=np.int64)       # a recomputed operator's forward piece -> its recompute task
    code = KIND_CODE[TaskKind.RECOMPUTE]
    forwards, recomputes, backwards = [], [], []
    for name in order:
        lay = low.layout(name)
        fx, _, _ = low._piece_times(lay)
        fwd, bwd = low.op_tasks[name]
        tasks = low.core.after(low._oid(Owner.op(name)), code, lay.devices, fx, [[f] for f in fwd])
        low.recompute_tasks[name] = tasks
        forwards.extend(fwd)
        recomputes.extend(tasks)
        backwards.extend(bwd)
    rtask[np.array(forwards, dtype=np.int64)] = recomputes
    low.core.pairs(recomputes, backwards)
    # a recomputed producer's forward handing its operand to a recomputed forward on its device
    local = (rtask[src] >= 0) & (rtask[dst] >= 0)
    low.core.pairs(rtask[src[local]], rtask[dst[local]])
    chained = np.zeros(low.core.size, dtype=bool)    # recompute tasks that wait for another one
    chained[rtask[dst[local]]] = True
    segs = segments(low.wiring, ops)
    low.recompute_segments = segs
    low.recompute_chained = chained
    pairs = _trigger(low, segs, chained, (src, dst))
    low.recompute_trigger = pairs
    for g, before, ts in pairs:
        low._edges(Owner.op(segs[g][0]), before, ts)
    if low.detail:
        _detail(low, order)
    _working_set(low, segs)


def _detail(low, order: list) -> None:
    """With detail: each recompute task's action, the parts assembling its operands, and the
    backward (and W) tasks reading the recomputed buffers."""
    ops = low.recompute
    operand_parts: dict[Key, list] = defaultdict(list)
    for plist in low.parts.values():
        for key, dev, part in plist:
            if key.kind is BufKind.OPERAND and key.name in ops:
                operand_parts[key].append((dev, part))
    for name in order:
        owner = Owner.op(name)
        lay = low.layout(name)
        _, bwd = low.op_tasks[name]
        for p, (dev, rid) in enumerate(zip(lay.devices, low.recompute_tasks[name])):
            fa, _ = low._piece_actions(name, lay, p, dev)
            ra = Forward(name, fa.attrs, fa.zeroed, tuple(own_buf(b, SUFFIX) for b in fa.operands),
                         tuple(own_buf(b, SUFFIX) for b in fa.outputs))
            low.graph.annotate(rid, f"recompute {name}[{p}]", name, p, (), ra)
            for i, b in enumerate(fa.operands):
                for d, part in operand_parts.get(b.key, ()):
                    s = part.src
                    if s.kind is BufKind.OUTPUT and s.name in ops and part.device == d:
                        s = s.own(SUFFIX)
                    low._part(owner, ra.operands[i].key, d, s, part.device, part.box, part.add)
            # the backward (and a zero-bubble schedule's W pass) read the recomputed buffers
            for t in [bwd[p]] + ([low.wgrad[name][p]] if name in low.wgrad else []):
                node, piece, regions, action = low.graph.info[t]
                low.graph.annotate(t, low.graph.names[t], node, piece, regions,
                                   dataclasses.replace(action, operands=ra.operands, outputs=ra.outputs))


def _trigger(low, groups: list, chained, edges=None) -> list[tuple]:
    """Each group's recomputation waits for every gradient entering its members' backwards from
    outside: its recompute tasks that wait for no other one (not ``chained``) wait, on each device,
    for what its members' backwards there wait for from a consumer outside the group (that
    consumer's backward on the same device, or the transfer bringing its gradient), unless that
    consumer's backward itself waits for the group (it feeds back into it). A group is a segment,
    or a segment with the consumers whose backward a fusion plan merges with it
    (``trigger_groups``). Returns (group index, tasks waited for, recompute tasks) per group and
    device, as the lowering adds them (``fan``). ``edges``: the graph's (sources, destinations), else
    read from it (edges out of the recompute tasks are their own members', never entering)."""
    backs, back_seg, recs, rec_seg = [], [], [], []
    for k, seg in enumerate(groups):
        for name in seg:
            b, r = low.op_tasks[name][1], low.recompute_tasks.get(name, ())
            backs.extend(b)
            back_seg.extend([k] * len(b))
            recs.extend(r)
            rec_seg.extend([k] * len(r))
    src, dst = edges if edges is not None else low.core.edge_arrays()
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    seg_of = np.full(low.core.size, -1, dtype=np.int64)     # a member's backward task -> its group
    seg_of[np.array(backs, dtype=np.int64)] = back_seg
    into = seg_of[dst] >= 0
    src, dst = src[into], dst[into]
    cols = low.graph.columns()
    owner_col, device_col = cols["owner"], cols["device"]
    sk, oa = seg_of[dst], owner_col[src].astype(np.int64)
    width = int(oa.max(initial=0)) + 1
    uniq, inverse = np.unique(sk * width + oa, return_inverse=True)     # (group, the predecessor's owner)
    keys = low.graph.owner_keys
    member_sets = [set(seg) for seg in groups]
    entering = np.fromiter((_entering(low, keys[int(u % width)], member_sets[int(u // width)]) for u in uniq),
                           dtype=bool, count=len(uniq))[inverse]
    # per (group, device): what enters there
    grp = sk[entering] * low.core.size + device_col[dst[entering]]
    a = src[entering]
    by = np.lexsort((a, grp))
    outside = {g: np.unique(part).tolist() for g, part in sorted_runs(grp[by], a[by])}
    # per (group, device): its recompute tasks that wait for no other one, in emission order
    recs, rec_seg = np.array(recs, dtype=np.int64), np.array(rec_seg, dtype=np.int64)
    free = ~chained[recs]
    recs, rec_seg = recs[free], rec_seg[free]
    grp = rec_seg * low.core.size + device_col[recs]
    by = np.argsort(grp, kind="stable")
    out = []
    for g, ts in sorted_runs(grp[by], recs[by]):
        before = outside.get(g)
        if before:
            out.append((g // low.core.size, before, ts.tolist()))
    return out


def trigger_groups(low, plan) -> list[list[str]]:
    """The lowering's recompute segments grown by ``plan``'s backward groups (module doc): a consumer
    outside a group whose gradient enters it and whose backward a backward fusion group merges with
    a member's joins it, until none does; groups sharing an operator become one. Operators in graph
    order within a group; the lowering's segments themselves where nothing joins."""
    segs = low.recompute_segments
    bgroup = {o: gi for gi, g in enumerate(plan.groups) if g.phase == "backward" for o in g.ops}
    if not any(o in bgroup for seg in segs for o in seg):
        return segs
    groups = [set(seg) for seg in segs]
    changed, grown = True, False
    while changed:
        changed = False
        for members in groups:
            fused = {bgroup[o] for o in members if o in bgroup}
            joins = {c for o in members for c, _ in low.consumers.get(o, ())
                     if c not in members and bgroup.get(c) in fused and not _reaches(low, c, members)}
            if joins:
                members |= joins
                changed = grown = True
        merged: list[set] = []
        for members in groups:                 # groups sharing an operator are one
            for other in [m for m in merged if m & members]:
                merged.remove(other)
                members = members | other
                changed = True
            merged.append(members)
        groups = merged
    if not grown:
        return segs
    return [[name for name in low.wiring.ops if name in members] for members in groups]


def fused_triggers(low, groups):
    """None where the trigger groups ``groups`` (``trigger_groups``) are the lowering's segments;
    else (the lowering's trigger edges, the edges that replace them) as (source, destination) arrays
    of its task ids."""
    if groups is low.recompute_segments:
        return None
    return _pair_arrays(low.recompute_trigger), _pair_arrays(_trigger(low, groups, low.recompute_chained))


def _pair_arrays(pairs) -> tuple:
    src = [a for _, before, ts in pairs for a in before for _ in ts]
    dst = [b for _, before, ts in pairs for _ in before for b in ts]
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def _entering(low, owner, members: set) -> bool:
    """Whether a task of ``owner`` hands a gradient into the segment ``members`` from outside."""
    if owner.kind is OwnerKind.LOSS:
        return True
    if owner.kind not in (OwnerKind.OP, OwnerKind.EDGE) or owner.name in members:
        return False
    return not _reaches(low, owner.name, members)


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


def _working_set(low, segs: list) -> None:
    """Static memory: per device, the largest segment's recomputed activations (one segment is live
    at a time), charged to that segment's first operator."""
    for dev, (total, name) in working_set(low, segs).items():
        low._mem(Owner.op(name), dev, "activations", total)


def working_set(low, groups: list) -> dict[int, tuple[int, str]]:
    """Per device, the most bytes of recomputed activations one of ``groups`` (operators recomputed
    together) holds there, and that group's first operator. Operators not recomputed count nothing."""
    best: dict[int, tuple[int, str]] = {}
    for group in groups:
        per_dev: dict[int, int] = defaultdict(int)
        for name in group:
            if name not in low.recompute:
                continue
            lay = low.layout(name)
            for dev, a in zip(lay.devices, low._piece_times(lay)[2]):
                per_dev[dev] += a
        for dev, total in per_dev.items():
            if total > best.get(dev, (0, ""))[0]:
                best[dev] = (total, group[0])
    return best


def fused_working_set(low, groups) -> dict[int, int]:
    """Bytes of recomputed activations to add per device where a plan's backward groups join
    segments into one trigger group (``groups``, from ``trigger_groups``): they are recomputed
    together and live at once."""
    if groups is low.recompute_segments:
        return {}
    before, after = working_set(low, low.recompute_segments), working_set(low, groups)
    return {dev: total - before.get(dev, (0, ""))[0] for dev, (total, _) in after.items()
            if total > before.get(dev, (0, ""))[0]}
