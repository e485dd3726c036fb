"""Operator-level costs for Unity's machine-mapping dynamic program (Unity §5.2, "Cost estimation").

The DP needs, for a compute operator and a configuration (degrees per parallel axis and a machine
view), the time of the operator itself, and for an edge between two configured operators the time
of the resharding between them. Both are estimated from the same pieces the simulator lowers:

- ``node_cost``: the slowest piece's forward + backward (the simulator's cost model on the piece
  shapes, halos included), plus, per weight, the ring AllReduce of its gradient over the devices
  that hold a replica (``2(n-1)/n`` of the piece over the slowest route of the ring and ``2(n-1)``
  latencies) and the update of a piece;
- ``edge_cost``: per consumer piece, the elements of its operand box not held by a producer piece
  on its own device, moved over the route from the device that holds them (forward) and back
  (the gradient); partial sums are AllReduced when producer and consumer pieces share devices,
  else gathered, summed and sent out; the time is the busiest destination's. Impossible
  reshardings (e.g. fewer copies than the producer makes, see ``strategy._Builder.reshard``) cost
  infinity.

The configurations an operator may take on a block of devices are Unity's "resource quantities":
every degree assignment over the allowed axis kinds (replica axes included: ``relu`` copied on
every device is Fig. 2b's), at most ``max_axes`` (default 2) of them split, whose total degree
divides the block's device count (a replica axis only alone), placed on the block's first devices
in piece order. The final strategy is simulated as a whole task graph; these estimates only rank
mappings.

Entry points: ``Block``, ``LocalCosts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from flexrt.strategy import OpConfig, all_axes, apply_single, resharding_steps
from flexrt.strategy.config import _check_degrees

from flexrt.errors import ShapeError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_axes import axis_coordinates, plan_region, region_plan, tensor_degrees
from flexrt.ir.parallel_tensor import ParallelTensorShape, divisors
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import Machine
from flexrt.machine.views import view_devices, view_from_device_ids

INF = float("inf")
# axis kinds split only on their own: copies of a whole operator (Fig. 2b's ReLU), not copies of pieces
_ALONE = (AxisKind.REPLICA,)


@dataclass(frozen=True, slots=True)
class Block:
    """A resource quantity: ``count`` devices starting at device ``start``."""

    start: int
    count: int

    def devices(self) -> range:
        return range(self.start, self.start + self.count)


@dataclass
class _Layout:
    devices: list[int]
    operand_regions: list[list]     # operand -> piece -> Region
    output_regions: list[list]
    operand_shapes: list[TensorShape]
    out_shapes: list[ParallelTensorShape]      # parallel shapes of the outputs
    target_shapes: list[ParallelTensorShape]   # what each data operand must arrive as
    coords: list[dict]                          # each piece's coordinate per axis
    degree: dict[str, int]


def _box(region, shape: TensorShape):
    return tuple((max(a, 0), min(b, n)) for (a, b), n in zip(region.ranges, shape.dims))


def _numel(box) -> int:
    return math.prod(max(0, hi - lo) for lo, hi in box)


def _overlap(a, b) -> int:
    return math.prod(max(0, min(x1, y1) - max(x0, y0)) for (x0, x1), (y0, y1) in zip(a, b))


def reshard_possible(src: ParallelTensorShape, dst: ParallelTensorShape) -> bool:
    """Whether a resharding chain takes ``src`` to ``dst`` (``strategy.resharding_steps``)."""
    try:
        resharding_steps(src, dst)
    except StrategyError:
        return False
    return True


class LocalCosts:
    """Configurations and their costs for the operators of one compute graph family (memoized by
    operator signature, so candidates that share operators share the work)."""

    def __init__(self, machine: Machine, cost_model, kinds: frozenset, optimizer: str = "sgd",
                 min_degree: int = 1, max_axes: int = 2) -> None:
        self.machine, self.cost, self.kinds, self.optimizer = machine, cost_model, kinds, optimizer
        self.min_degree, self.max_axes = min_degree, max_axes
        self._configs: dict = {}
        self._layouts: dict = {}
        self._node: dict = {}
        self._edge: dict = {}
        self._times: dict = {}
        self._xfer: dict = {}
        self._sigs: dict = {}
        self._interned: dict = {}
        self._piece_lists: dict = {}
        self._by_layout: dict = {}
        self._vectors: dict = {}
        self._matrices: dict = {}
        self.edge_evaluations = 0

    # ---- signatures ----------------------------------------------------------------------------
    @staticmethod
    def signature(pcg: PCG, node: Node) -> tuple:
        return (node.attrs, tuple(pcg.shape(r).tensor_shape for r in node.inputs))

    def sig_id(self, pcg: PCG, node: Node) -> int:
        """The node's signature as a small integer (equal signatures, equal numbers), computed once
        per (graph, node): memo keys stay cheap to hash."""
        key = (id(pcg), node.id)
        hit = self._sigs.get(key)
        if hit is None or hit[0] is not pcg:
            if len(self._sigs) > 100_000:
                self._sigs.clear()
            hit = self._sigs[key] = (pcg, self._interned.setdefault(self.signature(pcg, node), len(self._interned)))
        return hit[1]

    # ---- configurations ------------------------------------------------------------------------
    def configs(self, pcg: PCG, node: Node, block: Block) -> list[OpConfig]:
        """Every configuration of ``node`` on ``block`` (see the module doc), degree-1 first."""
        key = (self.sig_id(pcg, node), block)
        if key in self._configs:
            return self._configs[key]
        axes = [a for a in all_axes(pcg, node) if not any(s.kind is SlotKind.SUM for _, s in a.operands)]
        names = [a.name for a in all_axes(pcg, node)]
        allowed = [a for a in axes if a.kind in self.kinds or a.kind is AxisKind.REPLICA]
        choices = divisors(block.count)
        out: list[OpConfig] = []

        def rec(i: int, acc: dict, total: int) -> None:
            if i == len(allowed):
                split = [a for a in allowed if acc[a.name] > 1]
                if total < min(self.min_degree, block.count) or block.count % total or len(split) > self.max_axes \
                        or (len(split) > 1 and any(a.kind in _ALONE for a in split)):
                    return
                try:
                    apply_single(pcg, node, acc)
                except (ShapeError, StrategyError):
                    return
                degs = tuple(acc.get(n, 1) for n in names)
                view = view_from_device_ids(self.machine, degs, list(range(block.start, block.start + total)))
                if view is not None:
                    out.append(OpConfig(tuple((k, v) for k, v in acc.items() if v > 1), view))
                return
            for d in choices:
                if total * d > block.count:
                    break
                acc[allowed[i].name] = d
                rec(i + 1, acc, total * d)
            del acc[allowed[i].name]

        rec(0, {}, 1)
        if not out:  # e.g. min_degree cannot be met: the operator runs whole on the block's first device
            view = view_from_device_ids(self.machine, tuple(1 for _ in names), [block.start])
            out.append(OpConfig((), view))
        self._configs[key] = out
        return out

    # ---- layouts -------------------------------------------------------------------------------
    def layout(self, pcg: PCG, node: Node, cfg: OpConfig) -> _Layout:
        key = (self.sig_id(pcg, node), cfg)
        if key in self._layouts:
            return self._layouts[key]
        opdef = op_def(node.op_type)
        nw = opdef.num_weights(node.attrs)
        full = [pcg.shape(r).tensor_shape for r in node.inputs]
        data_full = full[:len(full) - nw]
        axes = opdef.parallel_axes(node.attrs, data_full)
        deg = _check_degrees(node, axes, cfg.degree_map)
        coords = axis_coordinates(axes, deg)
        devices = list(view_devices(self.machine, cfg.view, tuple(deg[a.name] for a in axes)))
        outs = opdef.output_shapes(node.attrs, data_full)
        operand_regions = []
        for i, s in enumerate(full):
            plan = region_plan(axes, i, s.rank, False)
            operand_regions.append([plan_region(plan, i, deg, c, s, opdef, node.attrs, data_full, outs[0])
                                    for c in coords])
        output_regions = []
        for k, s in enumerate(outs):
            plan = region_plan(axes, k, s.rank, True)
            output_regions.append([plan_region(plan, k, deg, c, s) for c in coords])
        targets = [ParallelTensorShape.of(s.dims, d.shard, d.sum, d.copy, s.dtype) for i, s in enumerate(data_full)
                   for d in [tensor_degrees(axes, deg, i, s.rank, False)]]
        out_shapes = [ParallelTensorShape.of(o.dims, d.shard, d.sum, d.copy, o.dtype) for k, o in enumerate(outs)
                      for d in [tensor_degrees(axes, deg, k, o.rank, True)]]
        lay = _Layout(devices, operand_regions, output_regions, full, out_shapes, targets, coords, deg)
        self._layouts[key] = lay
        return lay

    # ---- transfers -----------------------------------------------------------------------------
    def transfer(self, src: int, dst: int, num_bytes: int) -> float:
        """Seconds to move ``num_bytes`` from ``src`` to ``dst`` over its route (as the lowering's
        hops: the slowest hop's time, the route's latencies once)."""
        if src == dst or num_bytes <= 0:
            return 0.0
        key = (src, dst, num_bytes)
        t = self._xfer.get(key)
        if t is None:
            links = [self.machine.links[l] for l in self.machine.route(src, dst)]
            if not links:
                raise StrategyError(f"no route from device {src} to device {dst}")
            latency = sum(link.latency_s for link in links)
            t = max(self.cost.transfer_time(link, num_bytes) - link.latency_s for link in links) + latency
            if len(self._xfer) > 200_000:
                self._xfer.clear()
            self._xfer[key] = t
        return t

    def ring(self, devices: list[int], num_bytes: int) -> float:
        """A ring AllReduce of ``num_bytes`` over ``devices`` (sorted ring, slowest neighbour pair)."""
        n = len(devices)
        if n <= 1:
            return 0.0
        ring = sorted(devices)
        share = max(1, 2 * (n - 1) * num_bytes // n)
        return max(self.transfer(a, b, share) for a, b in zip(ring, ring[1:] + ring[:1]))

    # ---- node cost -----------------------------------------------------------------------------
    def _op_time(self, attrs, ins, outs, device: int) -> float:
        spec = self.machine.devices[device].spec
        key = (attrs, ins, outs, spec.name)
        t = self._times.get(key)
        if t is None:
            times = self.cost.op_times(attrs, list(ins), list(outs), spec)
            t = self._times[key] = times.forward_s + times.backward_s
        return t

    def node_cost(self, pcg: PCG, node: Node, cfg: OpConfig) -> float:
        key = (self.sig_id(pcg, node), cfg)
        c = self._node.get(key)
        if c is not None:
            return c
        lay = self.layout(pcg, node, cfg)
        opdef = op_def(node.op_type)
        nw = opdef.num_weights(node.attrs)
        compute = 0.0
        for p, dev in enumerate(lay.devices):
            ins = tuple(TensorShape(tuple(b - a for a, b in r[p].ranges), s.dtype)
                        for r, s in zip(lay.operand_regions, lay.operand_shapes))
            outs = tuple(TensorShape(tuple(b - a for a, b in r[p].ranges), s.dtype)
                         for r, s in zip(lay.output_regions, lay.out_shapes))
            attrs = node.attrs
            if opdef.piece_call is not None:  # e.g. a conv piece runs without the padding its halo holds
                attrs, _ = opdef.piece_call(node.attrs, lay.coords[p], lay.degree)
            compute = max(compute, self._op_time(attrs, ins, outs, dev))
        sync = 0.0
        for i in range(len(lay.operand_shapes) - nw, len(lay.operand_shapes)):
            shape = lay.operand_shapes[i]
            groups: dict = {}
            for p, r in enumerate(lay.operand_regions[i]):
                groups.setdefault(r.ranges, []).append(lay.devices[p])
            worst = 0.0
            for ranges, devs in groups.items():
                piece = TensorShape(tuple(b - a for a, b in ranges), shape.dtype)
                t = self.ring(sorted(set(devs)), piece.size_bytes) + self.cost.update_time(
                    piece, self.machine.devices[devs[0]].spec, self.optimizer)
                worst = max(worst, t)
            sync += worst
        c = self._node[key] = compute + sync
        return c

    def node_vector(self, pcg: PCG, node: Node, block: Block) -> np.ndarray:
        """``node_cost`` of every configuration of ``node`` on ``block``."""
        key = (self.sig_id(pcg, node), block)
        vec = self._vectors.get(key)
        if vec is None:
            vec = self._vectors[key] = np.array([self.node_cost(pcg, node, c) for c in self.configs(pcg, node, block)])
        return vec

    # ---- edge cost -----------------------------------------------------------------------------
    def edge_cost(self, pcg: PCG, u: Node, k: int, v: Node, i: int, cu: OpConfig, cv: OpConfig) -> float:
        """Resharding output ``k`` of ``u`` (configured ``cu``) into operand ``i`` of ``v`` (``cv``):
        forward and, for floating-point tensors, the gradient back."""
        key = (self.sig_id(pcg, u), k, self.sig_id(pcg, v), i, cu, cv)
        c = self._edge.get(key)
        if c is not None:
            return c
        self.edge_evaluations += 1
        P, C = self.layout(pcg, u, cu), self.layout(pcg, v, cv)
        src, dst = P.out_shapes[k], C.target_shapes[i]
        if not reshard_possible(src, dst):
            self._edge[key] = INF
            return INF
        full = C.operand_shapes[i]
        grad = full.dtype.is_floating and u.op_type is not OpType.INPUT
        pieces, by_dev = self._pieces(P, k, full)
        # configurations that place the same boxes on the same devices cost the same
        lkey = (src, dst, grad, tuple(pieces), self._wanted(C, i, full))
        c = self._by_layout.get(lkey)
        if c is not None:
            self._edge[key] = c
            return c
        item = full.dtype.size_bytes
        ksum = src.sum_degree // dst.sum_degree
        incoming: dict[int, float] = {}
        if ksum == 1:
            for p, r in enumerate(C.operand_regions[i]):
                want, dev = _box(r, full), C.devices[p]
                need = _numel(want)
                have = sum(_overlap(want, b) for b in by_dev.get((dev, r.sum_index), ()))
                missing = need - min(have, need)
                if missing:
                    holder = next((d for b, s, d in pieces if s == r.sum_index and d != dev and _overlap(want, b)),
                                  None)
                    if holder is not None:
                        incoming[dev] = incoming.get(dev, 0.0) + self.transfer(holder, dev, missing * item)
            fwd = max(incoming.values(), default=0.0)
        else:
            groups: dict = {}
            for p, r in enumerate(C.operand_regions[i]):
                groups.setdefault((_box(r, full), r.sum_index), []).append(C.devices[p])
            fwd = 0.0
            for (box, s_c), cdevs in groups.items():
                pdevs = sorted({d for b, s, d in pieces if s_c * ksum <= s < (s_c + 1) * ksum and _overlap(box, b)})
                nbytes = _numel(box) * item
                if sorted(set(cdevs)) == pdevs and len(pdevs) > 1:
                    t = self.ring(pdevs, nbytes)
                else:
                    target = cdevs[0]
                    t = sum(self.transfer(d, target, nbytes) for d in pdevs) + \
                        sum(self.transfer(target, d, nbytes) for d in set(cdevs))
                fwd = max(fwd, t)
        c = self._edge[key] = self._by_layout[lkey] = fwd * (2.0 if grad else 1.0)
        return c

    def _pieces(self, lay: _Layout, k: int, full: TensorShape):
        """Output ``k``'s pieces as (box, sum index, device), and the distinct boxes per (device, sum)."""
        key = (id(lay), k)
        hit = self._piece_lists.get(key)
        if hit is None or hit[0] is not lay:
            pieces = [(_box(r, full), r.sum_index, lay.devices[q]) for q, r in enumerate(lay.output_regions[k])]
            by_dev: dict = {}
            for b, s, d in pieces:
                if b not in by_dev.setdefault((d, s), []):
                    by_dev[(d, s)].append(b)
            hit = self._piece_lists[key] = (lay, pieces, by_dev)
        return hit[1], hit[2]

    def _wanted(self, lay: _Layout, i: int, full: TensorShape) -> tuple:
        """Operand ``i``'s pieces as (box, sum index, copy index, device)."""
        key = (id(lay), "opd", i)
        hit = self._piece_lists.get(key)
        if hit is None or hit[0] is not lay:
            hit = self._piece_lists[key] = (lay, tuple((_box(r, full), r.sum_index, r.copy_index, lay.devices[p])
                                                       for p, r in enumerate(lay.operand_regions[i])))
        return hit[1]

    def edge_matrix(self, pcg: PCG, u: Node, k: int, v: Node, i: int, bu: Block, bv: Block) -> np.ndarray:
        """``edge_cost`` for every configuration of ``u`` on ``bu`` (rows) and of ``v`` on ``bv``."""
        key = (self.sig_id(pcg, u), k, self.sig_id(pcg, v), i, bu, bv)
        M = self._matrices.get(key)
        if M is None:
            cus, cvs = self.configs(pcg, u, bu), self.configs(pcg, v, bv)
            M = np.array([[self.edge_cost(pcg, u, k, v, i, a, b) for b in cvs] for a in cus]).reshape(len(cus), len(cvs))
            self._matrices[key] = M
        return M
