"""Operator-level costs for Unity's machine-mapping dynamic program (Unity §5.2, "Cost estimation").

The DP needs, for a compute operator and a configuration (degrees per parallel axis and a machine
view), the time of the operator itself, and for an edge between two configured operators the time
of the resharding between them. Both are estimated from the same pieces the simulator lowers:

- ``node_cost``: the slowest piece's forward + backward (the simulator's cost model on the piece
  shapes, halos included), plus, per weight, the ring AllReduce of its gradient over the devices
  that hold a replica (``2(n-1)/n`` of the piece over the slowest route of the ring, its latency
  once: the simulator's ring pays it at each of its steps but overlaps the rings with the
  backward pass, which this sum does not; charging every step made ResNeXt-50's estimate 22% high
  at 24 GPUs) and the update of a piece. With ``overlap=True`` (``node_parts``: forward, backward,
  synchronization, which ``mapping`` composes as a flow shop) the ring is the simulator's: the
  AllReduce's whole latency (``collectives.allreduce_latency``: the ring's steps or a tree's), and
  the members' sums with the update on the devices;
- ``edge_cost``: per consumer piece, the elements of its operand box not held by a producer piece
  on its own device, moved over the route from the device that holds them (forward) and back
  (the gradient); partial sums are AllReduced when producer and consumer pieces share devices,
  else gathered, summed and sent out; the time is the busiest destination's. Impossible
  reshardings (e.g. fewer copies than the producer makes, see ``strategy._Builder.reshard``) cost
  infinity.

For the contention model of the DP (``mapping``), the same transfers are also counted as link
loads: ``shared`` are the machine's links that carry several devices' sends to several devices
(``loads.shared_links``: a node's network ports, the bus between its sockets, a PCIe switch; of links the
same routes cross, the slowest); ``edge_loads`` gives, per pair of configurations, the seconds each
is busy with the edge's transfers in the forward and in the backward pass (``reshard.reshard_loads``:
the lowering's moves, compiled), ``node_loads`` with a configuration's gradient rings (each send
paying the AllReduce's whole latency, as the simulator's ring does), and
``edge_bound`` the busiest link's forward time plus the busiest's backward time of an edge.

The configurations an operator may take on a block of devices are Unity's "resource quantities":
every degree assignment over the allowed axis kinds (replica axes included: ``relu`` copied on
every device is Fig. 2b's), at most ``max_axes`` (default 2) of them split, whose total degree
divides the block's device count (a replica axis only alone), placed on the block's first devices
in piece order. The final strategy is simulated as a whole task graph; these estimates only rank
mappings.

**Pruning** (``config_ratio`` r > 0; the unity search's default 4, ``--config-ratio``): a
configuration's ``node_cost`` is a lower bound of what it adds to any mapping that uses it (every
cost the DP forms is a sum or maximum with it as a term), and the configurations kept are those
whose bound is at most r x w x the cheapest's, w the operator's parallel width (a maximal
antichain of operators through it, ``reach.parallel_widths``, rounded up to a power of two, at
most the block's devices: packed beside w - 1 branches it may take 1/w of a block, at about w
times the cost). The rest would have to save more than that in resharding to be chosen. Exact pruning
does not bite: on ResNeXt-50 at 96 summit GPUs a configuration is dominated outright (cheaper
than another whatever its neighbours' configurations) for 0.9% of them; this bound drops 56% of
them there (21% for Inception-v3, 7% for DLRM) and left the found strategies' simulated times
unchanged where measured, but for BERT-Large's at 24 GPUs (355.433 against 355.442 ms: its pooler's
chosen configuration costs 7.1x its cheapest) (README, "Unity's search"). r = 0 keeps every
configuration: the DP is then exact over the whole space.

What the DP asks for, and how it stays cheap as devices grow (the configurations per operator grow
about linearly with the devices, their pieces too, so a table over pairs of configurations is
cubic in the devices if each entry walks the pieces in Python):

- the degree assignments on ``count`` devices are enumerated once per (signature, count) and shared
  by every block of that size; an axis degree that does not divide a dimension the axis cuts is
  skipped before ``op_shapes`` is asked (it would refuse it), and ``op_shapes``' answer is kept;
- what a configuration's degrees imply (regions, shapes, per-piece work) is computed once per
  (signature, degrees) (``_Part``) and shared by every placement of it; a node's compute time is
  the max over its distinct pieces (one device kind) and kept per (signature, degrees, kind);
- routes are grouped into kinds (``route_kinds``: the same link types, bandwidths and latencies in
  order), over which a transfer takes the same time (the cost models time a link by these), so a
  ring, a row of transfers to one device and the reshard memo's misses compute one time per kind
  and size (``transfers``, ``_ring_plan``), the same numbers as pair by pair;
- ``edge_matrix`` computes the whole (configurations of u) x (configurations of v) table of
  ``edge_cost`` at once, over distinct layouts, in compiled loops with transfer times memoized by
  (source, destination, bytes) (``reshard``); ``edge_cost`` is the definition, kept and used by
  tests: both give the same numbers bit for bit;
- a search's later DPs (the finalists' overlap and data+model mappings, the pipeline stages') are
  made ``LocalCosts(like=the search's)``: they share its caches of what their own space, ring
  model and pruning do not change (``_share``), so they start where the search left off, with
  the same mappings (ResNeXt-50 on 96 summit GPUs, budget 5, the whole search: median 44.9 s
  against 57.5 s over 4 alternating runs, 1.12-1.46x paired, load 1.1-2.1; peak 1.54 against
  1.84 GiB).

Entry points: ``Block``, ``LocalCosts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from flexrt.simulator.cost_model import ring_sum_time
from flexrt.search.unity.loads import LinkLoads
from flexrt.search.unity.reach import parallel_widths
from flexrt.search.unity.reshard import (
    Consumers,
    Memo,
    Pieces,
    Producers,
    box_of,
    consumers,
    numel,
    overlap,
    producers,
    reshard_matrix,
    seq_sum,
)
from flexrt.strategy import OpConfig, all_axes, op_shapes, resharding_steps
from flexrt.strategy.config import OpShapes, _check_degrees, data_shapes
from flexrt.strategy.layout import OperatorLayout, layout_on

from flexrt.errors import ConfigError, ShapeError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import ParallelTensorShape, divisors
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.machine.views import view_devices, view_from_device_ids
from flexrt.simulator.collectives import allreduce_latency

INF = float("inf")
# axis kinds split only on their own: copies of a whole operator (Fig. 2b's ReLU), not copies of pieces
_ALONE = (AxisKind.REPLICA,)


def _link_kind(link) -> tuple:
    """What a link's transfer time depends on in every cost model here (``route_kinds``)."""
    return link.type, link.bandwidth, link.latency_s


def check_config_ratio(value) -> float:
    """``LocalCosts``' ``config_ratio`` as a float, or our error: 0 (keep every configuration) or >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value == 0 or 1 <= value < INF):
        raise ConfigError(f"unity: the configuration ratio (--config-ratio) must be 0 (every configuration) or a "
                          f"finite number >= 1, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Block:
    """A resource quantity: ``count`` devices starting at device ``start``."""

    start: int
    count: int

    def devices(self) -> range:
        return range(self.start, self.start + self.count)


@dataclass
class _Part:
    """What a configuration's degrees imply wherever it is placed: the operator's layout
    (``flexrt.strategy.layout.layout_on``, the one derivation of pieces, regions and piece classes;
    built on the first placement asked for: ``_Layout.devices`` says where each placement's pieces
    run), its parallel shapes, and (built when first asked for) each tensor's boxes and the node
    cost's per-piece inputs."""

    layout: OperatorLayout
    shapes: OpShapes
    num_data: int                               # data operands (the weights follow)
    cache: dict = field(default_factory=dict)

    @property
    def operand_regions(self) -> list[list]:    # operand -> piece -> Region
        return self.layout.operand_regions

    @property
    def output_regions(self) -> list[list]:
        return self.layout.output_regions

    @property
    def operand_shapes(self) -> list[TensorShape]:
        return self.layout.operand_shapes

    @property
    def out_shapes(self) -> tuple:              # parallel shapes of the outputs
        return self.shapes.outputs

    @property
    def target_shapes(self) -> tuple:           # what each data operand must arrive as
        return self.shapes.operands[:self.num_data]

    @property
    def degree(self) -> dict[str, int]:
        return self.shapes.degree_map

    def _tensor(self, what: str, j: int) -> tuple[list, TensorShape]:
        if what == "out":
            return self.output_regions[j], self.out_shapes[j].tensor_shape
        return self.operand_regions[j], self.operand_shapes[j]

    def boxes(self, what: str, j: int) -> tuple:
        """(box, sum index) per piece of output (``what`` "out") or operand ("operand") ``j``."""
        hit = self.cache.get((what, j))
        if hit is None:
            regions, shape = self._tensor(what, j)
            hit = self.cache[(what, j)] = tuple((box_of(r, shape), r.sum_index) for r in regions)
        return hit

    def arrays(self, what: str, j: int) -> tuple[np.ndarray, np.ndarray]:
        """``boxes`` as arrays: (pieces, rank, 2) boxes and (pieces,) sum indices, int64."""
        hit = self.cache.get((what, j, "arrays"))
        if hit is None:
            regions, shape = self._tensor(what, j)
            box = np.array([r.ranges for r in regions], dtype=np.int64).reshape(len(regions), len(shape.dims), 2)
            box[:, :, 0] = np.maximum(box[:, :, 0], 0)  # clipped as box_of clips
            box[:, :, 1] = np.minimum(box[:, :, 1], np.array(shape.dims, dtype=np.int64))
            hit = self.cache[(what, j, "arrays")] = (box, np.array([r.sum_index for r in regions], dtype=np.int64))
        return hit


@dataclass
class _Layout:
    """A configuration's pieces: its ``_Part`` and the device of each piece."""

    part: _Part
    devices: tuple[int, ...]
    _pieces: dict = field(default_factory=dict)

    def arrays(self, what: str, j: int, shape_id: int) -> Pieces:
        """Output (``what`` "out") or operand ("operand") ``j``'s pieces as arrays (``reshard.Pieces``)."""
        hit = self._pieces.get((what, j, "arrays"))
        if hit is None:
            box, sums = self.part.arrays(what, j)
            devices = np.array(self.devices, dtype=np.int64)
            hit = self._pieces[(what, j, "arrays")] = Pieces(shape_id, box, sums, devices)
        return hit

    def output_pieces(self, k: int) -> tuple:
        """Output ``k``'s pieces as (box, sum index, device), in piece order."""
        return self._with_devices("out", k)

    def operand_pieces(self, i: int) -> tuple:
        """Operand ``i``'s pieces as (box, sum index, device), in piece order."""
        return self._with_devices("operand", i)

    def _with_devices(self, what: str, j: int) -> tuple:
        hit = self._pieces.get((what, j))
        if hit is None:
            hit = self._pieces[(what, j)] = tuple((b, s, d) for (b, s), d in zip(self.part.boxes(what, j),
                                                                                  self.devices))
        return hit


def reshard_possible(src: ParallelTensorShape, dst: ParallelTensorShape) -> bool:
    """Whether a resharding chain takes ``src`` to ``dst`` (``strategy.resharding_steps``)."""
    try:
        resharding_steps(src, dst)
    except StrategyError:
        return False
    return True


class LocalCosts(LinkLoads):
    """Configurations and their costs for the operators of one compute graph family (memoized by
    operator signature, so candidates that share operators share the work)."""

    def __init__(self, machine: Machine, cost_model, kinds: frozenset, optimizer: OptimizerKind = OptimizerKind.SGD,
                 min_degree: int = 1, max_axes: int = 2, overlap: bool = False, config_ratio: float = 0.0,
                 like: Optional[LocalCosts] = None) -> None:
        self.machine, self.cost, self.kinds = machine, cost_model, kinds
        self.config_ratio = check_config_ratio(config_ratio)   # ``configs``' pruning bound; 0: every configuration
        self._width: dict = {}         # signature id -> its nodes' parallel width, a power of two (``configs``)
        self._base: dict = {}          # signature id -> ``base_id``
        self._widths = (None, {})      # (the graph, its ``reach.parallel_widths``), for ``sig_id``
        self.optimizer = OptimizerKind.parse(optimizer)      # a name ("adam") or the member
        self.min_degree, self.max_axes = min_degree, max_axes
        # the overlap model (module doc): rings as the simulator's, composed by ``MappingDP`` as a flow shop
        self.overlap = overlap
        self._configs: dict = {}
        self._degrees: dict = {}
        self._shapes_of: dict = {}     # (signature, degrees) -> OpShapes, None when invalid
        self._parts: dict = {}
        self._tensors: dict = {}       # pieces of each distinct tensor cut (``layout_on``'s memo)
        self._layouts: dict = {}
        self._node: dict = {}
        self._compute: dict = {}
        self._edge: dict = {}
        self._times: dict = {}
        self._xfer: dict = {}
        self._ring_times: dict = {}     # (devices, bytes) -> ``ring``
        self._ring_plans: dict = {}     # devices -> ``_ring_plan``
        self._kinds = None              # ``route_kinds``
        self._ring_latency: dict = {}   # (ring order, bytes per channel) -> ``ring_latency``
        self._routes: dict = {}
        self._sigs: dict = {}
        self._interned: dict = {}
        self._shape_ids: dict = {}
        self._shapes: list = []
        self.transfer_memo = Memo()     # (source, destination, bytes) -> transfer seconds
        self.ratio_memo = Memo()        # (shape id, shape id, 0) -> sum ratio
        self._sets: dict = {}
        self._init_loads()
        self._vectors: dict = {}
        self._matrices: dict = {}
        self.edge_evaluations = 0
        if like is not None:
            self._share(like)

    # what ``like`` shares (``_share``): caches whose values depend only on the machine, the cost model
    # and the optimizer; with the same ring model (``overlap``) too; with the same space too
    _SHARED = ("_interned", "_width", "_base", "_shapes_of", "_parts", "_tensors", "_layouts", "_compute",
               "_times", "_xfer", "_routes", "_ring_plans", "_ring_latency", "_shape_ids", "_shapes",
               "transfer_memo", "ratio_memo", "_hops")
    _SHARED_IF_OVERLAP = ("_node", "_edge", "_ring_times")
    _SHARED_IF_SPACE = ("_degrees",)

    def _share(self, like: LocalCosts) -> None:
        """Use ``like``'s caches of what does not depend on this instance's space, ring model or pruning
        (layouts, pieces, operator and transfer times, routes; node and edge costs with the same ring
        model; degree assignments with the same space): the finalists' DPs and the pipeline stages'
        start where the search's left off, with the same numbers. What is indexed by a configuration
        list (which the space and the pruning decide) stays this instance's own."""
        if like.machine is not self.machine or like.cost is not self.cost or like.optimizer is not self.optimizer:
            raise ConfigError("unity: LocalCosts(like=...) shares caches only between costs of one machine, "
                              "cost model and optimizer")
        names = self._SHARED
        if like.overlap == self.overlap:
            names += self._SHARED_IF_OVERLAP
        if (like.kinds, like.min_degree, like.max_axes) == (self.kinds, self.min_degree, self.max_axes):
            names += self._SHARED_IF_SPACE
        for name in names:
            setattr(self, name, getattr(like, name))
        self._kinds = like.route_kinds()
        self._shared, self._column, self._table = like.shared, like._column, like.route_table() or False

    # ---- signatures ----------------------------------------------------------------------------
    @staticmethod
    def signature(pcg: PCG, node: Node) -> tuple:
        return (node.attrs, tuple(pcg.shape(r).tensor_shape for r in node.inputs))

    def sig_id(self, pcg: PCG, node: Node) -> int:
        """The node's signature as a small integer (equal signatures, equal numbers), computed once
        per (graph, node): memo keys stay cheap to hash. With ``config_ratio`` it includes the node's
        parallel width, rounded up to a power of two (its configurations depend on it; ``base_id``:
        the signature alone, for what depends only on a configuration's own degrees and view)."""
        key = (id(pcg), node.id)
        hit = self._sigs.get(key)
        if hit is None or hit[0] is not pcg:
            if len(self._sigs) > 100_000:
                self._sigs.clear()
            sig = self.signature(pcg, node)
            sid = base = self._interned.setdefault(sig, len(self._interned))
            width = 1
            if self.config_ratio:
                if self._widths[0] is not pcg:
                    self._widths = (pcg, parallel_widths(pcg))
                width = 1 << (self._widths[1].get(node.id, 1) - 1).bit_length()
                sid = self._interned.setdefault((sig, width), len(self._interned))
            self._width[sid], self._base[sid] = width, base
            hit = self._sigs[key] = (pcg, sid)
        return hit[1]

    def base_id(self, pcg: PCG, node: Node) -> int:
        """``sig_id`` without the parallel width: one number for every node of one signature."""
        return self._base[self.sig_id(pcg, node)]

    # ---- configurations ------------------------------------------------------------------------
    def configs(self, pcg: PCG, node: Node, block: Block) -> list[OpConfig]:
        """The configurations of ``node`` on ``block`` (see the module doc), degree-1 first; with
        ``config_ratio`` r, those whose ``node_cost`` (a lower bound of what they add to any mapping)
        is at most r x w x the cheapest's, w the node's parallel width (at most the block's devices:
        packed beside w - 1 others, it may run on 1/w of them)."""
        key = (self.sig_id(pcg, node), block)
        hit = self._configs.get(key)
        if hit is not None:
            return hit
        out: list[OpConfig] = []
        for degrees, degs, total in self._degree_maps(pcg, node, block.count):
            view = view_from_device_ids(self.machine, degs, list(range(block.start, block.start + total)))
            if view is not None:
                out.append(OpConfig(degrees, view))
        if not out:  # e.g. min_degree cannot be met: the operator runs whole on the block's first device
            view = view_from_device_ids(self.machine, tuple(1 for _ in all_axes(pcg, node)), [block.start])
            out.append(OpConfig((), view))
        if self.config_ratio and len(out) > 1:
            cost = [self.node_cost(pcg, node, c) for c in out]
            bound = self.config_ratio * min(self._width[key[0]], block.count) * min(cost)
            out = [c for c, x in zip(out, cost) if x <= bound]
        self._configs[key] = out
        return out

    def _degree_maps(self, pcg: PCG, node: Node, count: int) -> list[tuple]:
        """The valid degree assignments on ``count`` devices, in enumeration order, as (degrees of the
        split axes, degree per axis in axis order, total degree); they do not depend on where the
        block starts, so every block of ``count`` devices shares them."""
        sig = self.base_id(pcg, node)
        hit = self._degrees.get((sig, count))
        if hit is not None:
            return hit
        every = all_axes(pcg, node)
        names = [a.name for a in every]
        allowed = [a for a in every if not any(s.kind is SlotKind.SUM for _, s in a.operands) and a.mapped
                   and (a.kind in self.kinds or a.kind is AxisKind.REPLICA)]
        choices = divisors(count)
        sizes = self._shard_sizes(pcg, node)
        out: list[tuple] = []

        def rec(i: int, acc: dict, total: int) -> None:
            if i == len(allowed):
                split = [a for a in allowed if acc[a.name] > 1]
                if total < min(self.min_degree, count) or count % total or len(split) > self.max_axes \
                        or (len(split) > 1 and any(a.kind in _ALONE for a in split)):
                    return
                degrees = tuple((k, v) for k, v in acc.items() if v > 1)
                if self._valid(pcg, node, sig, acc, degrees):
                    out.append((degrees, tuple(acc.get(n, 1) for n in names), total))
                return
            cut = sizes[allowed[i].name]
            for d in choices:
                if total * d > count:
                    break
                if any(n % d for n in cut):  # a multiple of d on a dimension d does not divide: never valid
                    continue
                acc[allowed[i].name] = d
                rec(i + 1, acc, total * d)
            del acc[allowed[i].name]

        rec(0, {}, 1)
        self._degrees[(sig, count)] = out
        return out

    @staticmethod
    def _shard_sizes(pcg: PCG, node: Node) -> dict[str, tuple[int, ...]]:
        """Per axis, the sizes of the dimensions it cuts on the data operands, weights and outputs.
        A dimension's degree is the product of the degrees of the axes cutting it and must divide
        its size (``ParallelTensorShape``'s rule, checked by ``op_shapes``), so an axis degree that
        does not divide one of these sizes makes every assignment that uses it invalid."""
        opdef = op_def(node.op_type)
        nw = opdef.num_weights(node.attrs)
        data = [pcg.shape(r).tensor_shape for r in node.inputs[:len(node.inputs) - nw]]
        operands = data + list(opdef.weight_shapes(node.attrs, data) if opdef.weight_shapes else ())
        outs = opdef.output_shapes(node.attrs, data)
        return {a.name: tuple(t[j].dims[s.dim] for t, slots in ((operands, a.operands), (outs, a.outputs))
                              for j, s in slots if s.kind is SlotKind.SHARD and j < len(t))
                for a in opdef.parallel_axes(node.attrs, data)}

    def _valid(self, pcg: PCG, node: Node, sig: int, acc: dict, degrees: tuple) -> bool:
        """Whether ``acc`` is a valid configuration (``op_shapes`` raises nothing); the shapes it
        implies are kept for ``_part``."""
        key = (sig, tuple(sorted(degrees)))
        if key in self._shapes_of:
            return self._shapes_of[key] is not None
        try:
            shapes = op_shapes(node, data_shapes(pcg, node), acc)
        except (ShapeError, StrategyError):
            shapes = None
        self._shapes_of[key] = shapes
        return shapes is not None

    # ---- layouts -------------------------------------------------------------------------------
    def layout(self, pcg: PCG, node: Node, cfg: OpConfig) -> _Layout:
        sig = self.base_id(pcg, node)
        key = (sig, cfg)
        lay = self._layouts.get(key)
        if lay is None:
            shapes = self._config_shapes(pcg, node, sig, cfg.degrees)
            devices = tuple(view_devices(self.machine, cfg.view, tuple(d for _, d in shapes.degree)))
            lay = self._layouts[key] = _Layout(self._part(pcg, node, sig, cfg.degrees, shapes, devices), devices)
        return lay

    def _config_shapes(self, pcg: PCG, node: Node, sig: int, degrees: tuple) -> OpShapes:
        shapes = self._shapes_of.get((sig, tuple(sorted(degrees))))
        if shapes is None:
            axes = all_axes(pcg, node)
            shapes = op_shapes(node, data_shapes(pcg, node), _check_degrees(node, axes, dict(degrees)))
        return shapes

    def _part(self, pcg: PCG, node: Node, sig: int, degrees: tuple, shapes: OpShapes, devices: tuple) -> _Part:
        key = (sig, degrees)
        part = self._parts.get(key)
        if part is None:
            full = [pcg.shape(r).tensor_shape for r in node.inputs]
            lay = layout_on(node, full, [o.tensor_shape for o in shapes.outputs], shapes, list(devices), self._tensors)
            part = self._parts[key] = _Part(lay, shapes, len(full) - op_def(node.op_type).num_weights(node.attrs))
        return part

    # ---- transfers -----------------------------------------------------------------------------
    def _route(self, src: int, dst: int) -> tuple[list, float, tuple[int, ...]]:
        """(links, summed latency, link ids) of the route from ``src`` to ``dst``."""
        route = self._routes.get((src, dst))
        if route is None:
            ids = self.machine.route(src, dst)
            links = [self.machine.links[l] for l in ids]
            if not links:
                raise StrategyError(f"no route from device {src} to device {dst}")
            route = self._routes[(src, dst)] = (links, sum(link.latency_s for link in links), ids)
        return route

    def transfer(self, src: int, dst: int, num_bytes: int) -> float:
        """Seconds to move ``num_bytes`` from ``src`` to ``dst`` over its route (as the lowering's
        hops: the slowest hop's time, the route's latencies once)."""
        if src == dst or num_bytes <= 0:
            return 0.0
        key = (src, dst, num_bytes)
        t = self._xfer.get(key)
        if t is None:
            links, latency, _ = self._route(src, dst)
            t = max(self.cost.transfer_time(link, num_bytes) - link.latency_s for link in links) + latency
            if len(self._xfer) > 200_000:
                self._xfer.clear()
            self._xfer[key] = t
        return t

    def route_kinds(self) -> tuple[np.ndarray, list]:
        """(the kind of route from each device to each, an n x n array; one (source, destination) per
        kind). Routes of one kind cross links of the same types, bandwidths and latencies in the same
        order, so a transfer over them takes the same time, bit for bit (the cost models time a link
        by these: ``transfer_time(link, bytes)``); kind 0 is a device to itself."""
        if self._kinds is None:
            n = self.machine.num_devices
            K = np.zeros((n, n), dtype=np.int64)
            ids: dict = {None: 0}
            reps = [(0, 0)]
            for a in range(n):
                for b in range(n):
                    if a != b:
                        key = tuple(map(_link_kind, self._route(a, b)[0]))
                        K[a, b] = ids.setdefault(key, len(ids))
                        if K[a, b] == len(reps):
                            reps.append((a, b))
            self._kinds = (K, reps)
        return self._kinds

    def transfers(self, src: np.ndarray, dst: np.ndarray, num_bytes: np.ndarray) -> np.ndarray:
        """``transfer`` per (src[i], dst[i], num_bytes[i]) (integer arrays of one shape), computed once
        per (kind of route, bytes): the same numbers."""
        K, reps = self.route_kinds()
        kind = K[src, dst]
        pairs, inverse = np.unique(np.stack([kind.ravel(), np.ravel(num_bytes)]), axis=1, return_inverse=True)
        times = np.array([self.transfer(*reps[k], b) for k, b in pairs.T.tolist()], dtype=np.float64)
        return times[inverse.ravel()].reshape(np.shape(kind))

    def ring(self, devices: list[int], num_bytes: int) -> float:
        """A ring AllReduce of ``num_bytes`` over ``devices`` (sorted ring, slowest neighbour pair). Over
        several channels (``Machine.ring_channels``: the lowering splits the data over them), the
        slowest channel, or the busiest link with every channel's share on it, whichever is slower."""
        n = len(devices)
        if n <= 1:
            return 0.0
        key = (tuple(sorted(devices)), num_bytes)
        t = self._ring_times.get(key)
        if t is not None:
            return t
        plan = self._ring_plans.get(key[0])
        if plan is None:
            if len(self._ring_plans) > 100_000:
                self._ring_plans.clear()
            plan = self._ring_plans[key[0]] = self._ring_plan(key[0])
        orders, pairs, loaded = plan
        share = max(1, 2 * (n - 1) * (num_bytes // len(orders)) // n)
        # with the overlap model, channel 0's sends pay the AllReduce's whole latency (the lowering's
        # ring_extras); summed along the backward (no overlap), one latency ranks better
        paid = self.ring_latency(orders[0], num_bytes // len(orders)) if self.overlap else 0.0
        t = max(self.transfer(a, b, share) + (max(0.0, paid - self._route(a, b)[1]) if first else 0.0)
                for a, b, first in pairs)
        if loaded:      # several channels: the busiest link, with every channel's share on it
            t = max(t, max(self.cost.transfer_time(link, crossing * share) for link, crossing in loaded))
        if len(self._ring_times) > 200_000:
            self._ring_times.clear()
        self._ring_times[key] = t
        return t

    def _ring_plan(self, devices: tuple) -> tuple:
        """What ``ring`` over ``devices`` maximizes over, one term per kind: (the channels
        (``Machine.ring_channels``), one (a, b, in channel 0) per kind of neighbour pair
        (``route_kinds``), and with several channels one (link, pairs crossing it) per kind of link).
        A pair's time depends only on its route's kind and whether it is in channel 0; a link's on
        its type, bandwidth, latency and the pairs crossing it: the maximum over kinds is the
        maximum over all."""
        orders = self.machine.ring_channels(devices)
        K, _ = self.route_kinds()
        kinds: dict = {}
        crossing: dict = {}
        for c, ring in enumerate(orders):
            for a, b in zip(ring, ring[1:] + ring[:1]):
                kinds.setdefault((int(K[a, b]), c == 0), (a, b, c == 0))
                for l in self._route(a, b)[2]:
                    crossing[l] = crossing.get(l, 0) + 1
        loaded: dict = {}
        if len(orders) > 1:
            for l, k in crossing.items():
                link = self.machine.links[l]
                loaded.setdefault((_link_kind(link), k), (link, k))
        return orders, tuple(kinds.values()), tuple(loaded.values())

    def ring_latency(self, order, num_bytes: int) -> float:
        """The latency every send of channel 0 of an AllReduce of ``num_bytes`` per channel over ``order``
        pays in all (``collectives.allreduce_latency``, as the lowering's rings)."""
        key = (tuple(order), num_bytes)
        hit = self._ring_latency.get(key)
        if hit is None:
            if len(self._ring_latency) > 200_000:
                self._ring_latency.clear()
            hit = self._ring_latency[key] = allreduce_latency(self.machine, self.cost, order, num_bytes).seconds
        return hit

    # ---- node cost -----------------------------------------------------------------------------
    def _op_time(self, attrs, ins, outs, spec) -> tuple[float, float]:
        """(forward, backward) seconds of one piece."""
        key = (attrs, ins, outs, spec.name)
        t = self._times.get(key)
        if t is None:
            times = self.cost.op_times(attrs, list(ins), list(outs), spec)
            t = self._times[key] = (times.forward_s, times.backward_s)
        return t

    def whole_time(self, attrs, ins, outs) -> float:
        """Forward + backward seconds of an operator unsplit on the machine's first device (logical
        shapes): what substitution selection orders its candidates by (``search._promise``)."""
        f, b = self._op_time(attrs, tuple(ins), tuple(outs), self.machine.devices[0].spec)
        return f + b

    def node_cost(self, pcg: PCG, node: Node, cfg: OpConfig) -> float:
        """The slowest piece's forward + backward, plus per weight the slowest replica group's gradient
        AllReduce and update (module doc): the sum of ``node_parts``."""
        f, b, sync = self.node_parts(pcg, node, cfg)
        return f + b + sync

    def node_parts(self, pcg: PCG, node: Node, cfg: OpConfig) -> tuple[float, float, float]:
        """(forward, backward, synchronization) seconds of ``node`` under ``cfg``: the slowest piece's
        forward and backward (the piece whose sum is slowest) and, per weight, the slowest replica
        group's update with the backward and its gradient AllReduce as the synchronization."""
        sig = self.base_id(pcg, node)
        key = (sig, cfg)
        c = self._node.get(key)
        if c is not None:
            return c
        lay = self.layout(pcg, node, cfg)
        kinds, piece_kind, weight_groups = self._piece_work(node, lay.part)
        specs = [self.machine.devices[d].spec for d in lay.devices]
        if all(sp.name == specs[0].name for sp in specs):  # the max over pieces is the max over their kinds
            ckey = (sig, cfg.degrees, specs[0].name)
            compute = self._compute.get(ckey)
            if compute is None:
                compute = self._compute[ckey] = max((self._op_time(*kind, specs[0]) for kind in kinds), key=sum)
        else:
            compute = max((self._op_time(*kinds[piece_kind[p]], specs[p]) for p in range(len(specs))), key=sum)
        sync = update = 0.0
        for dtype, groups in weight_groups:
            worst = (0.0, 0.0)
            for dims, pieces in groups:
                devs = sorted({lay.devices[p] for p in pieces})
                piece = TensorShape(dims, dtype)
                t = (self.ring(devs, piece.size_bytes),
                     (self._ring_sum(piece, len(devs), specs[pieces[0]]) if self.overlap else 0.0) +
                     self.cost.update_time(piece, specs[pieces[0]], self.optimizer))
                worst = max(worst, t, key=sum)
            sync += worst[0]
            update += worst[1]
        # a ring's sums and the updates run on the devices: compute, with the backward
        c = self._node[key] = (max(0.0, compute[0]), max(0.0, compute[1]) + update, sync)
        return c

    def _ring_sum(self, piece: TensorShape, n: int, spec) -> float:
        """A ring member's sum of what it received (the lowering's REDUCE after the ring's sends)."""
        if n <= 1:
            return 0.0
        return ring_sum_time(self.cost, TensorShape((max(1, (n - 1) * piece.num_elements // n),), piece.dtype), spec)

    def _piece_work(self, node: Node, part: _Part) -> tuple:
        """Per piece, what it computes: the distinct (attributes, input piece shapes, output piece
        shapes) (the layout's classes), each piece's index among them, and per weight (dtype,
        [(piece dims, the pieces holding that region), ...]) in first-appearance order."""
        hit = part.cache.get("work")
        if hit is not None:
            return hit
        nw = op_def(node.op_type).num_weights(node.attrs)
        weight_groups = []
        for i in range(len(part.operand_shapes) - nw, len(part.operand_shapes)):
            groups: dict = {}
            for p, r in enumerate(part.operand_regions[i]):
                groups.setdefault(r.ranges, []).append(p)
            weight_groups.append((part.operand_shapes[i].dtype,
                                  [(tuple(b - a for a, b in ranges), pieces) for ranges, pieces in groups.items()]))
        hit = part.cache["work"] = (part.layout.classes, part.layout.piece_class, weight_groups)
        return hit

    def node_vector(self, pcg: PCG, node: Node, block: Block) -> np.ndarray:
        """``node_cost`` of every configuration of ``node`` on ``block``."""
        return self._node_vectors(pcg, node, block)[3]

    def node_part_vectors(self, pcg: PCG, node: Node, block: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``node_parts`` of every configuration of ``node`` on ``block``: (forwards, backwards, syncs)."""
        return self._node_vectors(pcg, node, block)[:3]

    def _node_vectors(self, pcg: PCG, node: Node, block: Block) -> tuple:
        key = (self.sig_id(pcg, node), block)
        vec = self._vectors.get(key)
        if vec is None:
            parts = np.array([self.node_parts(pcg, node, c) for c in self.configs(pcg, node, block)]).reshape(-1, 3)
            f, b, sync = (parts[:, j].copy() for j in range(3))
            vec = self._vectors[key] = (f, b, sync, f + b + sync)
        return vec

    # ---- edge cost -----------------------------------------------------------------------------
    @staticmethod
    def sum_ratio(src: ParallelTensorShape, dst: ParallelTensorShape) -> int:
        """0 when no resharding chain takes ``src`` to ``dst``, else how many partial sums of ``src``
        each of ``dst``'s sums (1: none to sum)."""
        return src.sum_degree // dst.sum_degree if reshard_possible(src, dst) else 0

    def shape_id(self, shape: ParallelTensorShape) -> int:
        """A small integer per distinct parallel shape (cheap keys for ``sum_ratio_ids``)."""
        sid = self._shape_ids.get(shape)
        if sid is None:
            sid = self._shape_ids[shape] = len(self._shapes)
            self._shapes.append(shape)
        return sid

    def sum_ratio_ids(self, src: int, dst: int) -> int:
        """``sum_ratio`` of two shapes given by ``shape_id`` (``reshard_matrix`` memoizes it)."""
        return self.sum_ratio(self._shapes[src], self._shapes[dst])

    def edge_cost(self, pcg: PCG, u: Node, k: int, v: Node, i: int, cu: OpConfig, cv: OpConfig) -> float:
        """Resharding output ``k`` of ``u`` (configured ``cu``) into operand ``i`` of ``v`` (``cv``):
        forward and, for floating-point tensors, the gradient back. The definition, one pair at a time;
        ``edge_matrix`` computes the same numbers for every pair at once."""
        key = (self.base_id(pcg, u), k, self.base_id(pcg, v), i, cu, cv)
        c = self._edge.get(key)
        if c is not None:
            return c
        P, C = self.layout(pcg, u, cu), self.layout(pcg, v, cv)
        src, dst = P.part.out_shapes[k], C.part.target_shapes[i]
        ksum = self.sum_ratio(src, dst)
        if not ksum:
            self._edge[key] = INF
            return INF
        full = C.part.operand_shapes[i]
        grad = full.dtype.is_floating and u.op_type is not OpType.INPUT
        pieces = P.output_pieces(k)
        item = full.dtype.size_bytes
        if ksum == 1:
            by_dev: dict = {}
            for b, s, d in pieces:
                if b not in by_dev.setdefault((d, s), []):
                    by_dev[(d, s)].append(b)
            incoming: dict[int, float] = {}
            for want, s_c, dev in C.operand_pieces(i):
                need = numel(want)
                have = sum(overlap(want, b) for b in by_dev.get((dev, s_c), ()))
                missing = need - min(have, need)
                if missing:
                    holder = next((d for b, s, d in pieces if s == s_c and d != dev and overlap(want, b)), None)
                    if holder is not None:
                        incoming[dev] = incoming.get(dev, 0.0) + self.transfer(holder, dev, missing * item)
            fwd = max(incoming.values(), default=0.0)
        else:
            groups: dict = {}
            for b, s_c, d in C.operand_pieces(i):
                groups.setdefault((b, s_c), []).append(d)
            fwd, sent = 0.0, {}
            for (box, s_c), cdevs in groups.items():
                pdevs = sorted({d for b, s, d in pieces if s_c * ksum <= s < (s_c + 1) * ksum and overlap(box, b)})
                nbytes = numel(box) * item
                if sorted(set(cdevs)) == pdevs and len(pdevs) > 1:
                    t = self.ring(pdevs, nbytes)
                else:
                    target = cdevs[0]
                    sends = [self.transfer(d, target, nbytes) for d in pdevs]
                    t = seq_sum(sends) + seq_sum(self.transfer(target, d, nbytes) for d in set(cdevs))
                    for d, x in zip(pdevs, sends):   # a source sending to many groups sends one after another
                        if x > 0:
                            sent[d] = sent.get(d, 0.0) + x
                fwd = max(fwd, t)
            fwd = max([fwd] + list(sent.values()))
        c = self._edge[key] = fwd * (2.0 if grad else 1.0)
        return c

    def edge_matrix(self, pcg: PCG, u: Node, k: int, v: Node, i: int, bu: Block, bv: Block) -> np.ndarray:
        """``edge_cost`` for every configuration of ``u`` on ``bu`` (rows) and of ``v`` on ``bv``
        (``reshard.reshard_matrix``: over distinct layouts, compiled inner loops)."""
        su, sv = self.sig_id(pcg, u), self.sig_id(pcg, v)
        key = (su, k, sv, i, bu, bv)
        M = self._matrices.get(key)
        if M is None:
            full = pcg.shape(v.inputs[i]).tensor_shape
            P, C = self._producers(pcg, u, k, bu), self._consumers(pcg, v, i, bv)
            self.edge_evaluations += len(P.shapes) * len(C.shapes)
            M = self._matrices[key] = reshard_matrix(P, C, full, full.dtype.is_floating and u.op_type is not
                                                     OpType.INPUT, self)
        return M

    def _producers(self, pcg: PCG, u: Node, k: int, block: Block) -> Producers:
        key = (self.sig_id(pcg, u), k, block)
        hit = self._sets.get(key)
        if hit is None:
            lays = [self.layout(pcg, u, c) for c in self.configs(pcg, u, block)]
            hit = self._sets[key] = producers([lay.arrays("out", k, self.shape_id(lay.part.out_shapes[k]))
                                               for lay in lays], self.machine.num_devices)
        return hit

    def _consumers(self, pcg: PCG, v: Node, i: int, block: Block) -> Consumers:
        key = (self.sig_id(pcg, v), "operand", i, block)
        hit = self._sets.get(key)
        if hit is None:
            lays = [self.layout(pcg, v, c) for c in self.configs(pcg, v, block)]
            hit = self._sets[key] = consumers([lay.arrays("operand", i, self.shape_id(lay.part.target_shapes[i]))
                                               for lay in lays])
        return hit
