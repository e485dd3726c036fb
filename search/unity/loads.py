"""The contention model's link and device loads of ``LocalCosts`` (``search/unity/costs.py``: module
doc, "For the contention model"): which links are shared, how long each transfer, gradient ring and
operator keeps them (and each device) busy per pass.

``LinkLoads`` is a part of ``LocalCosts`` (its base class): it uses the configurations, layouts,
routes and costs that ``LocalCosts`` defines.

Entry points: ``shared_links``, ``LinkLoads``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
from flexrt.search.unity.reshard import reshard_loads

from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.tensor_shape import TensorShape
from flexrt.machine import Machine
from flexrt.simulator.cost_model import has_linear_transfers

if TYPE_CHECKING:
    from flexrt.search.unity.costs import Block

# the edge loads kept (they are recomputed when asked again): with every edge's kept, Inception-v3's
# DP on 48 GPUs held 1.4 GB of them
EDGE_LOADS_BYTES = 256 << 20


def shared_links(machine: Machine) -> list[int]:
    """The links that carry more than one device's sends to more than one device: the links where
    transfers between different pairs of devices queue behind each other (a node's NICs and network
    ports, the bus between its sockets, a PCIe switch's uplink). A link only one device sends over (a
    GPU's own NVLink to its CPU) or only one device receives from is left out: the edge costs already
    charge a destination the sum of what it receives. Of links that the very same routes cross (a
    NIC's PCIe link and its network port) only the slowest is kept (the lowest id among equals): they
    carry the same bytes, so it is the busier."""
    routes: dict[int, list] = {}
    n = machine.num_devices
    for a in range(n):
        for b in range(n):
            for l in machine.route(a, b):
                routes.setdefault(l, []).append((a, b))
    slowest: dict[tuple, int] = {}
    for l, pairs in routes.items():
        if len({a for a, _ in pairs}) > 1 and len({b for _, b in pairs}) > 1:
            key = tuple(pairs)
            kept = slowest.get(key)
            if kept is None or (machine.links[l].bandwidth, l) < (machine.links[kept].bandwidth, kept):
                slowest[key] = l
    return sorted(slowest.values())


class LinkLoads:
    """The load vectors of ``LocalCosts`` (module doc)."""

    def _init_loads(self) -> None:
        self._shared = None             # shared link ids (``shared``) and each link's load column
        self._column = None
        self._hops: dict = {}
        self._table = None
        self._node_loads: dict = {}
        self._edge_loads: dict = {}     # least recently used first (``EDGE_LOADS_BYTES``)
        self._edge_loads_bytes = 0

    @property
    def shared(self) -> np.ndarray:
        """The ids of the machine's shared links (``shared_links``); a load vector has one entry per
        shared link, in this order."""
        if self._shared is None:
            self._shared = np.array(shared_links(self.machine), dtype=np.int64)
            self._column = np.full(len(self.machine.links), -1, dtype=np.int64)
            self._column[self._shared] = np.arange(len(self._shared))
        return self._shared

    def hop_loads(self, src: int, dst: int, num_bytes: int,
                  paid: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(load columns, seconds): how long each shared link on the route from ``src`` to ``dst`` is
        busy with a transfer of ``num_bytes`` (the lowering's hop time: the bytes over the link's
        bandwidth plus the route's latency, or ``paid`` where larger: an AllReduce's sends pay its
        whole latency, ``ring_latency``)."""
        key = (src, dst, num_bytes, paid)
        hit = self._hops.get(key)
        if hit is None:
            cols, times = [], []
            if src != dst and num_bytes > 0:
                self.shared  # noqa: B018  (builds the columns)
                links, latency, ids = self._route(src, dst)
                latency = latency if paid is None else max(latency, paid)
                for l, link in zip(ids, links):
                    if self._column[l] >= 0:
                        cols.append(int(self._column[l]))
                        times.append(self.cost.transfer_time(link, num_bytes) - link.latency_s + latency)
            if len(self._hops) > 200_000:
                self._hops.clear()
            hit = self._hops[key] = (np.array(cols, dtype=np.int64), np.array(times, dtype=np.float64))
        return hit

    def route_table(self) -> Optional[tuple]:
        """Every route's hops on shared links as arrays, for cost models whose transfer time is the
        latency plus bytes over bandwidth (``has_linear_transfers``; None for others): (ptr, columns,
        seconds per byte, route latency), route ``src * devices + dst``'s hops being
        ``ptr[route] .. ptr[route + 1] - 1``; a hop's time is ``bytes * seconds per byte + latency``,
        ``hop_loads``' numbers."""
        if self._table is None:
            if not has_linear_transfers(self.cost):
                self._table = False
            else:
                n, ptr, cols, inv, lat = self.machine.num_devices, [0], [], [], np.zeros(self.machine.num_devices ** 2)
                self.shared  # noqa: B018  (builds the columns)
                for a in range(n):
                    for b in range(n):
                        if a != b:
                            links, lat[a * n + b], ids = self._route(a, b)
                            for l, link in zip(ids, links):
                                if self._column[l] >= 0:
                                    cols.append(int(self._column[l]))
                                    inv.append(1.0 / link.bandwidth)
                        ptr.append(len(cols))
                self._table = (np.array(ptr, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(inv), lat)
        return self._table or None

    def ring_loads(self, devices: list[int], num_bytes: int) -> np.ndarray:
        """Per shared link, the seconds ``ring``'s AllReduce of ``num_bytes`` over ``devices`` keeps it busy."""
        out = np.zeros(len(self.shared))
        n = len(devices)
        if n > 1:
            orders = self.machine.ring_channels(sorted(devices))   # the lowering's channels
            share = max(1, 2 * (n - 1) * (num_bytes // len(orders)) // n)
            paid = self.ring_latency(orders[0], num_bytes // len(orders))
            for c, ring in enumerate(orders):   # channel 0 pays the AllReduce's latency (the lowering's)
                for a, b in zip(ring, ring[1:] + ring[:1]):
                    cols, times = self.hop_loads(a, b, share, paid=paid if c == 0 else None)
                    out[cols] += times
        return out

    @property
    def load_width(self) -> int:
        """Columns of a load vector per pass: the shared links (``shared``), then every device."""
        return len(self.shared) + self.machine.num_devices

    def add_link_loads(self, into: np.ndarray, D: np.ndarray) -> None:
        """Add link loads ``D`` (..., 2 x shared links) to load vectors ``into`` (..., 2 x ``load_width``,
        float32): no device time."""
        L, W = len(self.shared), self.load_width
        into[..., :L] += D[..., :L]
        into[..., W:W + L] += D[..., L:]

    def node_loads(self, pcg: PCG, node: Node, block: Block) -> np.ndarray:
        """(configurations on ``block``, 2 x ``load_width``) float32: per pass (forward, backward), the
        seconds each shared link is busy with the configuration's weight-gradient AllReduces
        (``node_cost``'s rings, all of them; backward only), then the seconds each device computes
        (its pieces' forward; their backward with the update and, with ``overlap``, the rings' sums)."""
        key = (self.sig_id(pcg, node), block)
        hit = self._node_loads.get(key)
        if hit is None:
            L, W = len(self.shared), self.load_width
            cfgs = self.configs(pcg, node, block)
            out = np.zeros((len(cfgs), 2 * W), dtype=np.float32)
            for row, cfg in zip(out, cfgs):
                lay = self.layout(pcg, node, cfg)
                kinds, piece_kind, weight_groups = self._piece_work(node, lay.part)
                for dtype, groups in weight_groups:
                    for dims, pieces in groups:
                        row[W:W + L] += self.ring_loads(sorted({lay.devices[p] for p in pieces}),
                                                        TensorShape(dims, dtype).size_bytes)
                f, b, _ = self.node_parts(pcg, node, cfg)
                slowest = max((self._op_time(*k, self.machine.devices[lay.devices[0]].spec) for k in kinds), key=sum)
                extra = b - max(0.0, slowest[1])   # the update (and rings' sums): on every device holding a piece
                for p, d in enumerate(lay.devices):
                    fp, bp = self._op_time(*kinds[piece_kind[p]], self.machine.devices[d].spec)
                    row[L + d] += max(0.0, fp)
                    row[W + L + d] += max(0.0, bp) + max(0.0, extra)
            hit = self._node_loads[key] = out
        return hit

    def device_sets(self, pcg: PCG, node: Node, block: Block) -> np.ndarray:
        """(configurations on ``block``, devices) float32: 1 where the configuration places a piece."""
        key = ("devices", self.sig_id(pcg, node), block)
        hit = self._node_loads.get(key)
        if hit is None:
            cfgs = self.configs(pcg, node, block)
            hit = np.zeros((len(cfgs), self.machine.num_devices), dtype=np.float32)
            for row, cfg in zip(hit, cfgs):
                row[list(self.layout(pcg, node, cfg).devices)] = 1.0
            self._node_loads[key] = hit
        return hit

    def add_edge_device_loads(self, into: np.ndarray, pcg: PCG, u: Node, k: int, v: Node, i: int, bu: Block,
                              bv: Block, cu: np.ndarray, cv: np.ndarray) -> np.ndarray:
        """Add an edge's time (``edge_matrix`` at configuration indices ``cu`` of u and ``cv`` of v,
        arrays of one shape) to load vectors ``into`` (..., 2 x ``load_width``, float32; returned) as
        device load: the forward transfer on v's devices, the gradient's on u's (the devices take part
        in the moves and sums: copies, NCCL kernels). Each product is rounded to float32 before it
        is added, as storing it in a float32 array would."""
        L, W = len(self.shared), self.load_width
        E = np.asarray(self.edge_matrix(pcg, u, k, v, i, bu, bv)[cu, cv])
        E = np.where(np.isfinite(E), E, 0.0)   # an impossible pair costs infinity already
        grad = pcg.shape(v.inputs[i]).tensor_shape.dtype.is_floating and u.op_type is not OpType.INPUT
        fwd = E / 2 if grad else E
        into[..., L:W] += (fwd[..., None] * self.device_sets(pcg, v, bv)[cv]).astype(np.float32)
        if grad:
            into[..., W + L:] += ((E - fwd)[..., None] * self.device_sets(pcg, u, bu)[cu]).astype(np.float32)
        return into

    def edge_loads(self, pcg: PCG, u: Node, k: int, v: Node, i: int, bu: Block, bv: Block) -> tuple:
        """``edge_matrix``'s transfers as link loads: (the layout of each configuration of ``u``, of
        ``v``, (layouts of u, layouts of v, shared links) float32 seconds; ``reshard.reshard_loads``)."""
        key = (self.sig_id(pcg, u), k, self.sig_id(pcg, v), i, bu, bv)
        hit = self._edge_loads.pop(key, None)
        if hit is None:
            full = pcg.shape(v.inputs[i]).tensor_shape
            P, C = self._producers(pcg, u, k, bu), self._consumers(pcg, v, i, bv)
            D = reshard_loads(P, C, full, full.dtype.is_floating and u.op_type is not OpType.INPUT, self)
            hit = (P.index, C.index, D)
            self._edge_loads_bytes += D.nbytes
            while self._edge_loads and self._edge_loads_bytes > EDGE_LOADS_BYTES:  # least recently used first
                self._edge_loads_bytes -= self._edge_loads.pop(next(iter(self._edge_loads)))[2].nbytes
        self._edge_loads[key] = hit
        return hit

    def edge_bound(self, pcg: PCG, u: Node, k: int, v: Node, i: int, bu: Block, bv: Block) -> np.ndarray:
        """Per configuration pair (as ``edge_matrix``), the busiest shared link's forward seconds plus
        the busiest's backward seconds of the edge's transfers: what the edge takes at least when
        its transfers queue on shared links (a scatter from one device through its node's NIC)."""
        key = ("bound", self.sig_id(pcg, u), k, self.sig_id(pcg, v), i, bu, bv)
        M = self._matrices.get(key)
        if M is None:
            iu, iv, D = self.edge_loads(pcg, u, k, v, i, bu, bv)
            half = D.shape[2] // 2
            b = D[:, :, :half].max(axis=2) + D[:, :, half:].max(axis=2) if half else np.zeros(D.shape[:2])
            M = self._matrices[key] = b.astype(np.float64)[iu][:, iv]
        return M
