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
- a gradient bucket becomes one ring AllReduce: the rings of its weights over one device group are
  merged hop by hop (each member's send carries the concatenation, timed by the machine's links for
  the summed bytes) and sum by sum, so it starts when every member's gradient is ready; its
  ``RingStep`` sums the members' buffers as one flat buffer (``RingGroup.segments``).

Ring AllReduces of one device group share their links: the engine runs each link's transfers one at
a time in the order they become ready (DisCo §4.4's one channel per group), overlapping computation.

Entry points: ``FusedGraph``, ``fused_piece_time``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.actions import Buf, Fused, RingGroup, RingStep
from flexrt.simulator.cost_model import AnalyticCostModel, FusedMember, fused_traffic
from flexrt.simulator.task_graph import CATEGORIES, KIND_CODE, Task, TaskGraph, TaskKind, _KINDS
from flexrt.strategy.fusion import FusionPlan, check_fusion

_FWD, _BWD = KIND_CODE[TaskKind.FORWARD], KIND_CODE[TaskKind.BACKWARD]
_REDUCE, _TRANSFER = KIND_CODE[TaskKind.REDUCE], KIND_CODE[TaskKind.TRANSFER]
_ANALYTIC = AnalyticCostModel()


def fused_piece_time(cost, members: list, phase: str, unfused: list, spec) -> float:
    """Seconds of one fused task: the cost model's ``fused_time`` where it has one, else the members'
    own times (``unfused``) scaled by the analytic model's fused / unfused ratio."""
    if hasattr(cost, "fused_time"):
        return float(cost.fused_time(members, phase, spec))
    which = "forward_s" if phase == "forward" else "backward_s"
    alone = sum(getattr(_ANALYTIC.op_times(m.attrs, list(m.inputs), list(m.outputs), spec), which) for m in members)
    return float(sum(unfused) * _ANALYTIC.fused_time(members, phase, spec) / alone)


class FusedGraph:
    """The task graph of ``lowering``'s last built strategy with ``plan`` applied (checked first).

    Tasks are numbered 0..n-1 afresh (``origin[t]``: the lowering's id, -1 for a merged task). It
    offers what the engine, the simulator's reports and the runtime read from a ``TaskGraph``:
    ``columns``, ``engine``, ``ids``, ``task``, ``tasks``, ``successors``, ``parts``, ``inputs``,
    ``weight_shapes``, ``loss_node``, ``memory_by_device``."""

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
        col = base.columns()
        n = len(col["alive"])
        self._rep = np.arange(n, dtype=np.int64)
        self._new: list = []           # per merged task: (kind, device, exe, priority, transfer, members, action, name)
        self._new_xfer: list = []      # per merged transfer: (elements, bytes, category)
        self._dups: list = []          # (duplicated member's task, the merged task it feeds)
        self._col, self._n, self._xn = col, n, len(col["xfer_bytes"])
        self._lowering = lowering
        for gi, g in enumerate(plan.groups):
            self._merge_group(gi, g)
        for bi, bucket in enumerate(plan.buckets):
            self._merge_bucket(bi, bucket)
        self._contract()
        del self._lowering

    # ---- groups -----------------------------------------------------------------------------------
    def _merge_group(self, gi: int, g) -> None:
        low, col = self._lowering, self._col
        phase = 0 if g.phase == "forward" else 1
        wiring = low.wiring
        order = sorted(g.ops, key=wiring.position.__getitem__)
        if phase == 1:
            order.reverse()
        members = set(g.ops)
        lays = {o: low.layout(o) for o in order}
        for p, dev in enumerate(lays[order[0]].devices):
            ids, fused, times = [], [], []
            for o in order:
                lay = lays[o]
                attrs, ins, outs = lay.classes[lay.piece_class[p]]
                internal = tuple(i for i in range(len(lay.node.inputs)) if wiring.producer[(o, i)].name in members)
                dup = o in g.duplicate
                fused.append(FusedMember(attrs, tuple(ins), tuple(outs), internal, dup))
                tid = low.op_tasks[o][phase][p]
                times.append(float(col["exe"][tid]))
                if dup:
                    self._dups.append((tid, len(self._new) + self._n))
                else:
                    ids.append(tid)
            exe = fused_piece_time(low.cost, fused, g.phase, times, low._spec(dev))
            if not exe > 0:
                raise StrategyError(f"fusion group {gi}: the cost model gave a non-positive time {exe!r}")
            action = None
            if self.detail:
                acts = tuple(self.base.info[low.op_tasks[o][phase][p]][3] for o in order)
                action = Fused(gi, acts, tuple(o in g.duplicate for o in order))
            name = f"fused {'fwd' if phase == 0 else 'bwd'} g{gi}({'+'.join(order[:3])}{'+...' if len(order) > 3 else ''})[{p}]"
            self._add(_FWD if phase == 0 else _BWD, dev, exe, ids, -1, action, name)

    def _add(self, kind, device, exe, ids, xfer, action, name) -> int:
        new = self._n + len(self._new)
        prio = int(self._col["priority"][ids].min())
        self._rep[ids] = new
        self._new.append((kind, device, exe, prio, xfer, action, name))
        return new

    # ---- buckets ----------------------------------------------------------------------------------
    def _merge_bucket(self, bi: int, bucket) -> None:
        low = self._lowering
        by_devices: dict = {}
        for w in bucket:
            for ring in low.rings.get(w, ()):
                by_devices.setdefault(ring.devices, []).append(ring)
        for devices, rings in by_devices.items():
            if len(rings) != len(bucket):
                raise StrategyError(f"gradient bucket {bi}: its weights are not all synchronized over devices "
                                    f"{list(devices)}")
            self._merge_rings(bi, devices, rings)

    def _merge_rings(self, bi: int, devices: tuple, rings: list) -> None:
        low, col, core = self._lowering, self._col, self.base.core
        n, dtype = len(devices), rings[0].dtype
        elements = sum(r.elements for r in rings)
        total = 2 * (n - 1) * elements
        gid = low._new_group()
        group = None
        if self.detail:
            group = RingGroup(gid, tuple(Buf(r.key, d, r.box, dtype.numpy_name) for d in devices for r in rings),
                              len(rings))
        category = int(col["xfer_category"][col["transfer"][rings[0].firsts[0]]])
        for i in range(n):
            j = (i + 1) % n
            share = total // n + (1 if i < total % n else 0)
            hop_devs, hop_times = low._hops(devices[i], devices[j], share * dtype.size_bytes)
            hops = [list(core.hops(r.firsts[i])) for r in rings]
            if any(len(h) != len(hop_devs) for h in hops):
                raise StrategyError(f"gradient bucket {bi}: its rings take different routes")
            xid = self._xn + len(self._new_xfer)
            self._new_xfer.append((share, share * dtype.size_bytes, category))
            for k, (dev, t) in enumerate(zip(hop_devs, hop_times)):
                action = RingStep(group, i) if self.detail and k == 0 else None
                self._add(_TRANSFER, dev, t, [h[k] for h in hops], xid, action,
                          f"bucket {bi} ring {i}->{j} hop {k}")
        adds = TensorShape((max(1, (n - 1) * elements // n),), dtype)
        for j in range(n):
            exe = low.cost.reduce_time(adds, 2, low._spec(devices[j]))
            self._add(_REDUCE, devices[j], exe, [r.done[j] for r in rings], -1, None,
                      f"bucket {bi} ring sum @{devices[j]}")

    # ---- the contracted arrays ------------------------------------------------------------------
    def _contract(self) -> None:
        col, rep, n = self._col, self._rep, self._n
        src, dst = self.base.core.edge_arrays()
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        s, d = rep[src], rep[dst]
        keep = s != d
        extra_s, extra_d = [], []
        if self._dups:
            dup_of = {t: g for t, g in self._dups}
            for t, g in self._dups:   # the duplicated member no longer feeds its group ...
                keep &= ~((src == t) & (d == g))
            dup_ids = np.fromiter(dup_of, dtype=np.int64)
            into = np.isin(dst, dup_ids)
            for a, t in zip(s[into].tolist(), dst[into].tolist()):  # ... the group waits for what it waits for
                extra_s.append(a)
                extra_d.append(dup_of[t])
        s = np.concatenate([s[keep], np.asarray(extra_s, dtype=np.int64)])
        d = np.concatenate([d[keep], np.asarray(extra_d, dtype=np.int64)])
        m = len(self._new)
        alive = np.concatenate([col["alive"] & (rep[:n] == np.arange(n)), np.ones(m, dtype=bool)])
        ids = np.flatnonzero(alive)
        index = np.full(n + m, -1, dtype=np.int64)
        index[ids] = np.arange(len(ids))
        s, d = index[s], index[d]
        pairs = np.unique(np.stack([s, d], axis=1), axis=0) if len(s) else np.zeros((0, 2), dtype=np.int64)
        self.src, self.dst = pairs[:, 0].copy(), pairs[:, 1].copy()
        new = self._new
        cat = lambda key, extra, dt: np.concatenate([col[key], np.asarray(extra, dtype=dt)])[ids]  # noqa: E731
        self._cols = {
            "kind": cat("kind", [x[0] for x in new], np.int8), "device": cat("device", [x[1] for x in new], np.int64),
            "exe": cat("exe", [x[2] for x in new], np.float64), "priority": cat("priority", [x[3] for x in new], np.int64),
            "transfer": cat("transfer", [x[4] for x in new], np.int64),
            "owner": cat("owner", [-1] * m, np.int32), "alive": np.ones(len(ids), dtype=bool),
            "xfer_elements": np.concatenate([col["xfer_elements"], np.asarray([x[0] for x in self._new_xfer],
                                                                                dtype=np.int64)]),
            "xfer_bytes": np.concatenate([col["xfer_bytes"], np.asarray([x[1] for x in self._new_xfer],
                                                                          dtype=np.int64)]),
            "xfer_category": np.concatenate([col["xfer_category"], np.asarray([x[2] for x in self._new_xfer],
                                                                                dtype=np.int8)])}
        self.origin = np.where(ids < n, ids, -1)
        self._merged = {int(index[n + k]): new[k] for k in range(m)}
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        """A cycle would make the engine wait forever: refuse it (the plan's check should have)."""
        num = len(self.origin)
        indeg = np.bincount(self.dst, minlength=num)
        order = np.argsort(self.src, kind="stable")
        starts = np.searchsorted(self.src[order], np.arange(num + 1))
        stack = list(np.flatnonzero(indeg == 0))
        seen = 0
        dsts = self.dst[order]
        indeg = indeg.copy()
        while stack:
            t = stack.pop()
            seen += 1
            for b in dsts[starts[t]:starts[t + 1]].tolist():
                indeg[b] -= 1
                if indeg[b] == 0:
                    stack.append(b)
        if seen != num:
            raise StrategyError("the fusion plan makes the task graph cyclic (a group waits for its own result); "
                                "split the groups")

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
        kind, device, exe, _, xfer, action, name = self._merged[t]
        if xfer >= 0:
            elements, nbytes, cat = self._new_xfer[xfer - self._xn]
            link_type = self.link_types[device - self.num_compute_devices]
            return Task(t, _KINDS[kind], device, exe, name, category=CATEGORIES[cat], elements=elements,
                        num_bytes=nbytes, transfer=xfer, link_type=link_type, action=action)
        node = action.members[0].node if isinstance(action, Fused) else ""
        return Task(t, _KINDS[kind], device, exe, name, node=node, action=action)

    @property
    def tasks(self):
        return _Tasks(self)

    def successors(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {t: [] for t in range(len(self.origin))}
        for a, b in zip(self.src.tolist(), self.dst.tolist()):
            out[a].append(b)
        return out

    def memory_by_device(self) -> dict:
        return self.base.memory_by_device()

    to_dot = TaskGraph.to_dot


class _Tasks:
    def __init__(self, g: FusedGraph) -> None:
        self._g = g

    def __getitem__(self, t: int):
        return self._g.task(t)

    def __len__(self) -> int:
        return len(self._g)

    def __iter__(self):
        return iter(range(len(self._g)))

    def values(self):
        return [self._g.task(t) for t in range(len(self._g))]


def fused_or_base(lowering, plan: Optional[FusionPlan]):
    """The graph the consumers take: the lowering's own, or it with ``plan`` applied."""
    return FusedGraph(lowering, plan) if plan else lowering.graph
