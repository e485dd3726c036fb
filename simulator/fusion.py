"""Fusion in the task graph (DisCo §3, §4): a lowered strategy's task graph with its fusion plan applied.

``FusedGraph`` contracts the ``Lowering``'s graph; the simulator and the runtime both take it, so
what is simulated is what runs (DESIGN.md "One task graph, two consumers"):

- a fusion group becomes one task per piece and phase: its owned members' tasks of that piece are
  merged (the union of their dependencies, the edges between them gone), timed as one fused
  operator by the cost model (``fused_time``: one launch, intermediates on chip; a cost model
  without one scales the members' own times by the analytic fused/unfused ratio). Its action,
  ``Fused``, runs the members one after the other;
- a duplicated member is recomputed inside the group: the group's task waits for what the member
  waits for instead of the member, whose own task stays for its other consumers;
- with activation recomputation (``flexrt.simulator.recompute_lowering``): a forward group's recomputed
  members of one segment are recomputed as one fused task, and a backward group that merges a
  segment's backward with a consumer's moves the segment's recompute trigger (``fused_triggers``);
- a gradient bucket becomes one ring AllReduce: the rings of its weights over one device group are
  merged hop by hop (each member's send carries the concatenation, timed by the machine's links for
  the summed bytes) and sum by sum, so it starts when every member's gradient is ready; its
  ``RingStep`` sums the members' buffers as one flat buffer (``RingGroup.segments``).

Ring AllReduces of one device group share their links: the engine runs each link's transfers one at
a time in the order they become ready (DisCo §4.4's one channel per group), overlapping computation.

Entry points: ``FusedGraph``, ``fused_piece_time``, ``fused_members``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.actions import Buf, Fused, RingGroup, RingStep
from flexrt.simulator.cost_model import AnalyticCostModel, FusedMember, ring_sum_time
from flexrt.simulator.recompute_lowering import fused_triggers, fused_working_set, trigger_groups
from flexrt.simulator.task_graph import CATEGORIES, KIND_CODE, Task, TaskGraph, TaskKind, _KINDS, _TaskView
from flexrt.strategy.fusion import FusionGroup, FusionPlan, check_fusion

_FWD, _BWD = KIND_CODE[TaskKind.FORWARD], KIND_CODE[TaskKind.BACKWARD]
_RECOMPUTE = KIND_CODE[TaskKind.RECOMPUTE]
_REDUCE, _TRANSFER = KIND_CODE[TaskKind.REDUCE], KIND_CODE[TaskKind.TRANSFER]
_ANALYTIC = AnalyticCostModel()


class _Merge(NamedTuple):
    """One task of the fused graph made of the lowering's tasks ``ids``: its kind, device and time, the
    transfer row it opens ((elements, bytes, category)) or -1 for a later hop of the same transfer or
    None for a computation, its action and name (with detail), and the duplicated members' tasks
    whose predecessors it takes over."""

    kind: int
    device: int
    exe: float
    ids: tuple
    xfer: object
    action: object
    name: str
    dups: tuple


def fused_piece_time(cost, members: list, phase: str, unfused: list, spec) -> float:
    """Seconds of one fused task: the cost model's ``fused_time`` where it has one, else the members'
    own times (``unfused``) scaled by the analytic model's fused / unfused ratio."""
    if hasattr(cost, "fused_time"):
        return float(cost.fused_time(members, phase, spec))
    which = "forward_s" if phase == "forward" else "backward_s"
    alone = sum(getattr(_ANALYTIC.op_times(m.attrs, list(m.inputs), list(m.outputs), spec), which) for m in members)
    return float(sum(unfused) * _ANALYTIC.fused_time(members, phase, spec) / alone)


def fused_members(lowering, order: list, group, piece: int) -> list:
    """The ``FusedMember``s of ``group``'s task on piece ``piece`` of ``lowering``'s strategy, members in
    ``order`` (the order they run): each piece's attributes and shapes, the operands it reads from
    another member (``internal``; ``sources``: from an earlier member's output 0) and whether it is a
    recomputed duplicate. What a cost model's ``fused_time`` is asked about."""
    wiring, members = lowering.wiring, set(group.ops)
    out = []
    for o in order:
        lay = lowering.layout(o)
        attrs, ins, outs = lay.classes[lay.piece_class[piece]]
        producers = [wiring.producer[(o, i)] for i in range(len(lay.node.inputs))]
        internal = tuple(i for i, pr in enumerate(producers) if pr.name in members)
        sources = tuple(order.index(pr.name) if pr.name in members and pr.index == 0 else -1 for pr in producers)
        out.append(FusedMember(attrs, tuple(ins), tuple(outs), internal, o in group.duplicate, sources))
    return out


class FusedGraph:
    """The task graph of ``lowering``'s last built strategy with ``plan`` applied (checked first).

    Tasks are numbered 0..n-1 afresh (``origin[t]``: the lowering's id, -1 for a merged task). It
    offers what the engine, the simulator's reports and the runtime read from a ``TaskGraph``:
    ``columns``, ``engine``, ``ids``, ``task``, ``tasks``, ``successors``, ``parts``, ``inputs``,
    ``weight_shapes``, ``loss_node``, ``memory_by_device``. ``check`` runs ``check_fusion`` (a search
    that checked the plan already passes False); a cycle the plan would make is the engine's
    ``GraphError`` either way."""

    def __init__(self, lowering, plan: FusionPlan, check: bool = True) -> None:
        strategy = lowering.strategy
        if check:
            check_fusion(strategy, plan, lowering.machine, lowering._layouts, lowering._reshards)
        base = lowering.graph
        self.base, self.plan, self.detail = base, plan, base.detail
        self.num_compute_devices, self.num_links = base.num_compute_devices, base.num_links
        self.num_devices, self.link_types = base.num_devices, base.link_types
        self.parts, self.inputs, self.weight_shapes = base.parts, base.inputs, base.weight_shapes
        self.loss_node = base.loss_node
        self._col = col = lowering.fusion_cache.setdefault("columns", None) or base.columns()
        lowering.fusion_cache["columns"] = col
        self._n, self._xn = len(col["alive"]), len(col["xfer_bytes"])
        self._lowering = lowering
        merges: list[_Merge] = []
        for gi, g in enumerate(plan.groups):
            merges += self._cached(("group", g.ops, g.phase, g.duplicate, gi), lambda: self._merge_group(gi, g))
        self._retrigger, self._extra_activations = None, {}
        if getattr(lowering, "recompute_tasks", None):
            groups = trigger_groups(lowering, plan)      # the segments, or those the plan joins
            self._retrigger = fused_triggers(lowering, groups)
            self._extra_activations = fused_working_set(lowering, groups)
            for gi, g in enumerate(plan.groups):
                merges += self._merge_recompute(gi, g, groups)
        for bi, bucket in enumerate(plan.buckets):
            merges += self._cached(("bucket", bucket, bi), lambda: self._merge_bucket(bi, bucket))
        self._merges = merges
        self._contract()
        del self._lowering

    def _cached(self, key, make) -> list:
        """Merges depend on the lowered graph and the group or bucket only (names and actions also on
        its index): a search asking again for one gets them from the lowering's cache."""
        if self.detail:
            return make()
        cache = self._lowering.fusion_cache
        key = key[:-1]
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = make()
        return hit

    # ---- groups -----------------------------------------------------------------------------------
    def _merge_group(self, gi: int, g) -> list:
        low, col = self._lowering, self._col
        phase = 0 if g.phase == "forward" else 1
        wiring = low.wiring
        order = sorted(g.ops, key=wiring.position.__getitem__)
        if phase == 1:
            order.reverse()
        lays = {o: low.layout(o) for o in order}
        times_of: dict = {}
        out = []
        for p, dev in enumerate(lays[order[0]].devices):
            ids, dups, times = [], [], []
            classes = tuple(lays[o].piece_class[p] for o in order)
            for o in order:
                tid = low.op_tasks[o][phase][p]
                times.append(float(col["exe"][tid]))
                (dups if o in g.duplicate else ids).append(tid)
            key = (classes, low._spec_names[dev])
            exe = times_of.get(key)
            if exe is None:
                fused = fused_members(low, order, g, p)
                exe = times_of[key] = fused_piece_time(low.cost, fused, g.phase, times, low._spec(dev))
                if not exe > 0:
                    raise StrategyError(f"fusion group {gi}: the cost model gave a non-positive time {exe!r}")
            action, name = None, ""
            if self.detail:
                acts = tuple(self.base.info[low.op_tasks[o][phase][p]][3] for o in order)
                action = Fused(gi, acts, tuple(o in g.duplicate for o in order))
                name = (f"fused {'fwd' if phase == 0 else 'bwd'} g{gi}({'+'.join(order[:3])}"
                        f"{'+...' if len(order) > 3 else ''})[{p}]")
            out.append(_Merge(_FWD if phase == 0 else _BWD, dev, exe, tuple(ids), None, action, name, tuple(dups)))
        return out

    def _merge_recompute(self, gi: int, g, groups: list) -> list:
        """A forward group's owned members recomputed in one trigger group (``trigger_groups``), two
        or more, as one RECOMPUTE task per piece: the fused kernel run again, timed as the fused
        forward of those members. Not where a recomputed duplicate of the group belongs to that
        trigger group (its own recompute task runs between theirs)."""
        low, col = self._lowering, self._col
        if g.phase != "forward":
            return []
        out = []
        for members in groups:
            inside = set(members)
            run = [o for o in members if o in g.owned and o in low.recompute_tasks]
            if len(run) < 2 or any(d in inside and d in low.recompute_tasks for d in g.duplicate):
                continue
            sub = FusionGroup(tuple(run))
            for p, dev in enumerate(low.layout(run[0]).devices):
                ids = tuple(low.recompute_tasks[o][p] for o in run)
                times = [float(col["exe"][t]) for t in ids]
                exe = fused_piece_time(low.cost, fused_members(low, run, sub, p), "forward", times, low._spec(dev))
                if not exe > 0:
                    raise StrategyError(f"fusion group {gi}: the cost model gave a non-positive time {exe!r}")
                action, name = None, ""
                if self.detail:
                    action = Fused(gi, tuple(self.base.info[t][3] for t in ids), (False,) * len(ids))
                    name = f"fused recompute g{gi}({'+'.join(run[:3])}{'+...' if len(run) > 3 else ''})[{p}]"
                out.append(_Merge(_RECOMPUTE, dev, exe, ids, None, action, name, ()))
        return out

    # ---- buckets ----------------------------------------------------------------------------------
    def _merge_bucket(self, bi: int, bucket) -> list:
        low = self._lowering
        by_devices: dict = {}
        for w in bucket:
            for ring in low.rings.get(w, ()):
                by_devices.setdefault((ring.devices, ring.channel), []).append(ring)
        out = []
        groups: dict = {}   # device set -> (the bucket's RingGroup there, member index by device): channel 0's
        for (devices, _), rings in by_devices.items():
            if len(rings) != len(bucket):
                raise StrategyError(f"gradient bucket {bi}: its weights are not all synchronized over devices "
                                    f"{list(devices)}")
            out += self._merge_rings(bi, devices, rings, groups)
        return out

    def _merge_rings(self, bi: int, devices: tuple, rings: list, groups: dict) -> list:
        """One channel of a bucket's ring (channel 0 first: it makes the bucket's RingGroup, whose
        steps the other channels' sends are too, as ``Lowering._allreduce`` makes them)."""
        low, col, core = self._lowering, self._col, self.base.core
        n, dtype = len(devices), rings[0].dtype
        elements = sum(r.elements for r in rings)
        total = 2 * (n - 1) * elements
        group, member = None, {}
        if self.detail:
            where = frozenset(devices)
            if rings[0].channel == 0:
                groups[where] = (RingGroup(low._new_group(), tuple(Buf(r.key, d, r.box, dtype.numpy_name)
                                                                   for d in devices for r in rings), len(rings)),
                                 {d: i for i, d in enumerate(devices)})
            group, member = groups[where]
        category = int(col["xfer_category"][col["transfer"][rings[0].firsts[0]]])
        adds = TensorShape((max(1, (n - 1) * elements // n),), dtype)
        exe = low._per_kind(list(devices), f"bucket {bi} sum", lambda spec: ring_sum_time(low.cost, adds, spec))
        # the comm cost's, as unfused: the step latencies on channel 0 only (``ring_lowering``)
        extras = low.ring_extras(list(devices), elements, dtype.size_bytes, exe) if rings[0].channel == 0 else \
            [[0.0] * len(low._hops(devices[i], devices[(i + 1) % n], 0)[0]) for i in range(n)]
        label = f"bucket {bi}" + (f" channel {rings[0].channel}" if rings[0].channel else "")
        out = []
        for i in range(n):
            j = (i + 1) % n
            share = total // n + (1 if i < total % n else 0)
            hop_devs, hop_times = low._hops(devices[i], devices[j], share * dtype.size_bytes)
            hop_times = [t + x for t, x in zip(hop_times, extras[i])]
            hops = [core.hops(r.firsts[i]) for r in rings]
            if any(len(h) != len(hop_devs) for h in hops):
                raise StrategyError(f"gradient bucket {bi}: its rings take different routes")
            row = (share, share * dtype.size_bytes, category)
            for k, (dev, t) in enumerate(zip(hop_devs, hop_times)):
                action = RingStep(group, member[devices[i]]) if group is not None and k == 0 else None
                out.append(_Merge(_TRANSFER, dev, t, tuple(h[k] for h in hops), row if k == 0 else -1, action,
                                  f"{label} ring {i}->{j} hop {k}" if self.detail else "", ()))
        for j in range(n):
            out.append(_Merge(_REDUCE, devices[j], exe[j], tuple(r.done[j] for r in rings), None, None,
                              f"{label} ring sum @{devices[j]}" if self.detail else "", ()))
        return out

    # ---- the contracted arrays ------------------------------------------------------------------
    def _contract(self) -> None:
        col, n, merges = self._col, self._n, self._merges
        m = len(merges)
        sizes = np.fromiter((len(x.ids) for x in merges), dtype=np.int64, count=m)
        flat = np.fromiter((t for x in merges for t in x.ids), dtype=np.int64, count=int(sizes.sum()))
        rep = np.arange(n, dtype=np.int64)
        rep[flat] = np.repeat(np.arange(n, n + m, dtype=np.int64), sizes)
        prio = np.minimum.reduceat(col["priority"][flat], np.cumsum(sizes) - sizes) if m else np.zeros(0, np.int64)
        # transfer rows: a merged transfer's first hop opens one, its other hops share it
        xfer = np.full(m, -1, dtype=np.int64)
        rows, current = [], -1
        for k, x in enumerate(merges):
            if isinstance(x.xfer, tuple):
                rows.append(x.xfer)
                current = self._xn + len(rows) - 1
            if x.xfer is not None:
                xfer[k] = current
        self._new_xfer = rows
        src, dst = self.base.core.edge_arrays()
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        if self._retrigger is not None:       # the recompute triggers the plan's backward groups move
            (old_s, old_d), (new_s, new_d) = self._retrigger
            stale = np.isin(src * n + dst, old_s * n + old_d)
            src, dst = np.concatenate([src[~stale], new_s]), np.concatenate([dst[~stale], new_d])
        s, d = rep[src], rep[dst]
        keep = s != d
        dups = [(t, n + k) for k, x in enumerate(merges) for t in x.dups]
        extra_s = extra_d = np.zeros(0, dtype=np.int64)
        if dups:
            dup_of = dict(dups)
            dup_t = np.fromiter(dup_of, dtype=np.int64)
            dup_g = np.fromiter(dup_of.values(), dtype=np.int64)
            lookup = np.full(n, -1, dtype=np.int64)
            lookup[dup_t] = dup_g
            keep &= ~((lookup[src] >= 0) & (d == lookup[src]))      # the duplicated member no longer feeds its group
            into = lookup[dst] >= 0                                  # ... the group waits for what it waits for
            extra_s, extra_d = s[into], lookup[dst[into]]
        s = np.concatenate([s[keep], extra_s])
        d = np.concatenate([d[keep], extra_d])
        alive = np.concatenate([col["alive"] & (rep == np.arange(n)), np.ones(m, dtype=bool)])
        ids = np.flatnonzero(alive)
        index = np.full(n + m, -1, dtype=np.int64)
        index[ids] = np.arange(len(ids))
        num = len(ids)
        key = np.sort(index[s] * num + index[d], kind="stable")  # nearly sorted already: timsort runs through
        if key.size > 1:
            key = key[np.concatenate([[True], key[1:] != key[:-1]])]
        self.src, self.dst = key // num, key % num      # sorted by source, each edge once
        cat = lambda k, extra, dt: np.concatenate([col[k], np.asarray(extra, dtype=dt)])[ids]  # noqa: E731
        xrow = lambda i, dt: np.concatenate([col["xfer_" + i], np.asarray([r[("elements", "bytes", "category").index(i)]  # noqa: E731
                                                                            for r in rows], dtype=dt)])
        self._cols = {
            "kind": cat("kind", [x.kind for x in merges], np.int8),
            "device": cat("device", [x.device for x in merges], np.int64),
            "exe": cat("exe", [x.exe for x in merges], np.float64), "priority": cat("priority", prio, np.int64),
            "transfer": cat("transfer", xfer, np.int64), "owner": cat("owner", [-1] * m, np.int32),
            "alive": np.ones(num, dtype=bool), "xfer_elements": xrow("elements", np.int64),
            "xfer_bytes": xrow("bytes", np.int64), "xfer_category": xrow("category", np.int8)}
        self.origin = np.where(ids < n, ids, -1)
        self._first_merged = num - m        # merged tasks come last, in the order of ``merges``
        self._xfer = xfer

    # ---- what the consumers read --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.origin)

    def columns(self) -> dict:
        return dict(self._cols)

    def engine(self, engine_cls):
        c = self._cols
        return engine_cls.from_arrays(self.num_devices, c["device"], c["exe"], self.src, self.dst, c["priority"])

    def ids(self) -> list[int]:
        return list(range(len(self.origin)))

    def task(self, t: int):
        o = int(self.origin[t])
        if o >= 0:
            return dataclasses.replace(self.base.task(o), id=t)
        x, xfer = self._merges[t - self._first_merged], int(self._xfer[t - self._first_merged])
        kind, device, exe, action, name = x.kind, x.device, x.exe, x.action, x.name
        if xfer >= 0:
            elements, nbytes, cat = self._new_xfer[xfer - self._xn]
            link_type = self.link_types[device - self.num_compute_devices] if device >= self.num_compute_devices else ""
            return Task(t, _KINDS[kind], device, exe, name, category=CATEGORIES[cat], elements=elements,
                        num_bytes=nbytes, transfer=xfer, link_type=link_type, action=action)
        node = action.members[0].node if isinstance(action, Fused) else ""
        return Task(t, _KINDS[kind], device, exe, name, node=node, action=action)

    @property
    def tasks(self) -> _TaskView:
        return _TaskView(self)

    def has_task(self, t: int) -> bool:
        return 0 <= t < len(self.origin)

    def successors(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {t: [] for t in range(len(self.origin))}
        for a, b in zip(self.src.tolist(), self.dst.tolist()):
            out[a].append(b)
        return out

    def memory_by_device(self) -> dict:
        """The lowering's static memory, with the recomputed activations that this plan's backward
        groups make live together (``recompute_lowering.fused_working_set``)."""
        out = self.base.memory_by_device()
        for dev, extra in self._extra_activations.items():
            m = out.setdefault(dev, {})
            m["activations"] = m.get("activations", 0) + extra
        return out

    to_dot = TaskGraph.to_dot
