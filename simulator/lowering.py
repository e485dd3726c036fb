"""Lowering: (parallel PCG, machine views, machine, cost model) -> the task graph of one training
iteration (FlexFlow §5.1, Unity §3.3), held in a simulation ``Engine``.

What becomes a task:
- every piece of a compute operator gets a forward and a backward task on its device;
- data crossing devices gets transfers, one task per link hop. A transfer holds every link of its
  route at the same time (cut-through, as NCCL and RDMA pipeline), so it takes the route's summed
  latency plus its bytes over each hop's bandwidth, and contention on any hop delays it;
- chains of parallelization operators between two computations are lowered together, by region
  overlap, from the producer's pieces to the consumer's:
  - Repartition and Combine become scatter and gather transfers;
  - Replicate becomes one transfer per remote copy;
  - Reduction becomes transfers of the partial pieces plus a REDUCE task that sums them;
  - partial sums whose consumers are replicas on the same devices become a ring AllReduce
    (both: ``flexrt.simulator.reduction_lowering``);
- backward mirrors the forward movement: gradients travel back, broadcasts become reductions and
  the other way round;
- a box of an output that several operands on one device read (a residual, attention's query, key
  and value) crosses to that device once; each consumer task's gradient of it crosses back once
  (``flexrt.simulator.fanout_lowering``);
- inputs are materialized where their consumers need them (the data loader's job: no transfer);
- weights are resident where their first consumer needs them. Replicas synchronize gradients with a
  ring AllReduce (across nodes with several network adapters, one ring per adapter on a share of
  the data: ``Machine.ring_channels``), then each replica runs an UPDATE task. A consumer that needs a weight in another
  layout (a shared weight) reads a copy of the part it needs: one per part and device per
  iteration, whatever the number of readers there, whose gradients are summed there and sent back
  once;
- the loss scores the model's output (the last operator nobody consumes, or ``loss_output``): a LOSS
  task per piece holding whole rows between its forward and backward, else the pieces gathered on
  one device (transfers in category LOSS) and the gradient sent back.

Every task also carries its action (``flexrt.simulator.actions``: the device buffers it reads and
writes), and owners record the parts that assemble buffers, so the runtime executes this very
graph with real data.

Work is grouped by owner (``Owner``): an operator's pieces, an operand edge, a weight, the loss. Every task and dependency belongs to one owner, so changing one
operator's configuration re-lowers only the owners it touches (``Lowering.update``), and the
engine's delta simulation re-times only what changed (FlexFlow §5.3).

How a ring AllReduce is timed (its links, or the machine's measured T = C x + D per device group)
is the lowering's ``comm_cost`` (``flexrt.simulator.collectives``); the task graph is the same.

Entry point: ``Lowering``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Optional

from flexrt.errors import StrategyError
from flexrt.gc_pause import no_gc
from flexrt.ir.costs import op_cost
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import TensorRef
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.simulator.actions import HOST, Backward, Buf, Forward, Key, Loss, Move, Part, Sum, Update
from flexrt.simulator.cost_model import has_linear_transfers, loss_time, receive_time
from flexrt.simulator.collectives import CommCost, RingFits, comm_cost_of, ring_extras
from flexrt.simulator.engine import Engine
from flexrt.simulator.fanout_lowering import fanout_siblings, lower_fanout
from flexrt.simulator.reduction_lowering import lower_reduction
from flexrt.simulator.folding import folded_allreduce, route_of
from flexrt.simulator.pipeline_lowering import (accumulate_micro_batches, lower_schedule, split_backward,
                                                weight_grad_parts, weight_grad_times)
from flexrt.simulator.precision_lowering import has_half_weights, lower_overflow_check
from flexrt.simulator.recompute_lowering import lower_recompute, recompute_copies
from flexrt.simulator.ring_lowering import WeightRing, lower_allreduce
from flexrt.simulator.sync_lowering import grad_sync_of, lower_sync_after_backward, parse_grad_sync
from flexrt.strategy import Strategy
from flexrt.strategy.layout import Layouts, OperatorLayout
from flexrt.strategy.reshard import Reshards, numel, overlap
from flexrt.simulator.task_graph import (CATEGORY_CODE, KIND_CODE, Access, Category, Owner, OwnerKind,
                                         RegionRequirement, TaskGraph, TaskKind)

_MEMORY_CODE = {"weights": 0, "gradients": 1, "activations": 2}  # GraphCore's memory kinds
_ACTIVATION = CATEGORY_CODE[Category.ACTIVATION]


@dataclass
class _EdgeEnds:
    """The two ends of an operand edge: producer output ``k`` of ``pname``, operand ``i`` of ``cname``."""

    pname: str
    k: int
    cname: str
    i: int
    pfwd: list
    pbwd: list
    cfwd: list
    cbwd: list
    grad: bool      # the consumer sends gradients back (floating point, not a model input)
    label: str

    def out(self, q):
        return Key.output(self.pname, self.k, q)

    def gout(self, q):
        return Key.grad_output(self.pname, self.k, q)

    def opd(self, p):
        return Key.operand(self.cname, self.i, p)

    def gin(self, p):
        return Key.grad_operand(self.cname, self.i, p)


REDUCE_KEY = "reduce"   # the times cache's key of a REDUCE task (``Lowering._reduce``); others are operators'


class Lowering:
    """Builds and incrementally updates the task graph of a strategy."""

    def __init__(self, machine: Machine, cost_model, optimizer: OptimizerKind = OptimizerKind.SGD, engine_cls=Engine,
                 loss_output: Optional[str] = None, detail: bool = True, incremental: bool = True,
                 comm_cost: CommCost | str | None = None, fold=None, grad_sync: Optional[str] = None) -> None:
        """``comm_cost`` (default: what ``cost_model`` carries, else analytic) times ring AllReduces
        from the links or from the machine's measured fits (a ConfigError when it has none).
        ``fold``: one of identical data-parallel replicas (``flexrt.simulator.folding``).
        ``grad_sync`` (default: what ``cost_model`` carries, else overlap): gradients synchronized during
        the backward pass or after it (``flexrt.simulator.sync_lowering``)."""
        self.fold = fold
        self.grad_sync = parse_grad_sync(grad_sync_of(cost_model) if grad_sync is None else grad_sync)
        self.machine = machine
        self.cost = cost_model
        self.comm_cost = comm_cost_of(cost_model) if comm_cost is None else CommCost.parse(comm_cost)
        if fold is not None and (detail or fold.sub is not machine or self.comm_cost is CommCost.MEASURED):
            raise StrategyError("symmetric simulation lowers one replica on its own machine (fold.sub), without "
                                "detail, its rings timed from their links (comm cost analytic)")
        self.ring_fits = RingFits(machine) if self.comm_cost is CommCost.MEASURED else None
        self.optimizer = optimizer
        self.num_compute = machine.num_devices
        self._spec_names = [d.spec.name for d in machine.devices]  # device -> its kind's name
        self._one_kind = len(set(self._spec_names)) <= 1  # every device of one kind (the common case)
        self.engine_cls = engine_cls
        self.detail = detail  # names, regions, actions and parts: what the runtime and traces need
        self.incremental = incremental  # updates re-lower what changed; else every strategy is built afresh
        self.engine = engine_cls(machine.num_devices + len(machine.links))
        self._fresh_graph()
        self._times: dict = {}
        # what derives from objects shared by twin layouts (``OperatorLayout.kin``), by their identity:
        # (what, ids) -> (the objects, the value); see ``derived``
        self._derived: dict = {}
        self._routes: dict = {}
        self._ranks: dict = {}
        self.strategy: Optional[Strategy] = None
        self.loss_output = loss_output

    def _fresh_graph(self) -> None:
        linear = has_linear_transfers(self.cost)  # transfer_time is latency + bytes / bandwidth
        self.graph = TaskGraph(self.machine.num_devices, len(self.machine.links), self.detail, hops=self._hops,
                               routes=self._route if linear else None, incremental=self.incremental)
        self.graph.link_types = [link.type.name for link in self.machine.links]
        self.core = self.graph.core
        self.oids: dict[tuple, int] = {}  # owner key -> the graph's owner id
        self.op_tasks: dict[str, tuple[range, range]] = {}  # operator -> (forward ids, backward ids) by piece
        self.wgrad: dict[str, list] = {}  # operator -> its weight-gradient (W) task by piece, where split apart
        self.parts = self.graph.parts  # owner -> (buffer key, device, part)
        self.rings: dict[str, list[WeightRing]] = {}  # weight -> its gradients' ring AllReduces (fusion merges them)
        self.fusion_cache: dict = {}  # what ``FusedGraph`` derives from this graph, kept across fusion plans
        self._group_ids = 0
        self.fanout_pending: dict = {}  # producer output -> its operand edges seen so far (``lower_fanout``)

    # ---- strategy context -----------------------------------------------------------------
    def _set_strategy(self, strategy: Strategy) -> None:
        wiring = strategy.wiring()
        self.strategy = strategy
        self.pipeline = getattr(strategy, "pipeline", None)
        self.recompute = recompute_copies(strategy)
        if wiring is getattr(self, "wiring", None):
            return  # one model: producers, consumers and ranks stay
        self.wiring = wiring
        self.half = has_half_weights(wiring)   # mixed precision: updates wait for the overflow check
        self._last_user_of = defaultdict(list)  # operator -> the weights it is the last user of
        for w in wiring.weights:
            users = wiring.consumers.get(w)
            if users:
                self._last_user_of[max((c for c, _ in users), key=wiring.position.__getitem__)].append(w)
        self._layouts = Layouts(self.machine, wiring)
        self._reshards = Reshards()   # keyed by twin layouts' origin: few, whatever the micro-batches
        self._ranks = {}
        self.position = wiring.position
        self.consumers = wiring.consumers
        self.producer = wiring.producer
        self._siblings = fanout_siblings(wiring)
        self._release = self._release_plan()  # for one-shot builds
        sinks = wiring.sinks
        if self.pipeline is not None:     # every micro-batch's copy of the output is scored on its rows
            self.loss_rows = {c: self.pipeline.loss_rows(c) for c in self.pipeline.model.losses}
            self.loss_node = list(self.loss_rows)[-1]
            return
        if self.loss_output is not None:
            if self.loss_output not in wiring.ops:
                raise StrategyError(f"loss output '{self.loss_output}' is not a compute operator of the model; "
                                    f"operators without consumers: {', '.join(sinks)}")
            self.loss_node = self.loss_output
        else:
            self.loss_node = sinks[-1] if sinks else None
        self.loss_rows = {self.loss_node: None} if self.loss_node is not None else {}

    def layout(self, name: str) -> OperatorLayout:
        return self._layouts.get(name, self.strategy.shapes(name), self.strategy.view(name))

    # ---- task and edge bookkeeping --------------------------------------------------------
    def _rank(self, owner) -> int:
        """Tie-break base of the owner's tasks; a task's priority is it plus its index within the owner.
        Ranks come from the order of the named nodes, which does not depend on the strategy, so a graph
        reached by incremental updates breaks ties exactly as a fresh lowering does."""
        rank = self._ranks[owner] = ((self.position[owner.name] * 4 + owner.kind.value) * 256 + owner.index) << 24
        return rank

    def _oid(self, owner) -> int:
        """The graph's id of an owner (its tasks' priorities start at the owner's rank)."""
        oid = self.oids.get(owner)
        if oid is None:
            rank = self._ranks.get(owner)
            oid = self.oids[owner] = self.graph.owner(owner, rank if rank is not None else self._rank(owner))
        return oid

    def _task(self, owner, kind, device, exe, name, **kw) -> int:
        if not exe > 0:
            raise StrategyError(f"task {name} got a non-positive time {exe!r} from the cost model")
        return self.graph.add_task(self._oid(owner), kind, device, float(exe), name, **kw)

    def _edge(self, owner, a: int, b: int) -> None:
        self.core.edge(self._oid(owner), a, b)

    def _edges(self, owner, before, after) -> None:
        self.core.fan(self._oid(owner), before, after)

    def _drop(self, owner) -> None:
        oid = self.oids.get(owner)
        if oid is not None:
            self.graph.drop(oid)
        if owner.kind is OwnerKind.OP:
            self.op_tasks.pop(owner.name, None)
            self.wgrad.pop(owner.name, None)
        elif owner.kind is OwnerKind.WEIGHT:
            self.rings.pop(owner.name, None)

    def _mem(self, owner, device: int, kind: str, num_bytes: int) -> None:
        self.core.memory(self._oid(owner), device, _MEMORY_CODE[kind], num_bytes)

    def _part(self, owner, key: Key, device: int, src: Key, src_device: int, box, add: bool = False) -> None:
        if not self.detail or any(hi <= lo for lo, hi in box):  # nothing to copy (a piece that reads nothing)
            return
        self.parts.setdefault(owner, []).append((key, device, Part(src, src_device, tuple(box), add)))

    def _send(self, owner, src_key: Key, src: int, dst: int, box, dtype, category: Category, name: str,
              before) -> tuple[list[int], tuple]:
        """Move ``box`` of buffer ``src_key`` on ``src`` to a new buffer on ``dst``; returns (hops, its key)."""
        key = Key.transfer(self.core.num_transfers)  # the id of the transfer _transfer makes
        move = Move(src_key, src, Buf(key, dst, tuple(box), dtype.numpy_name)) if self.detail else None
        return self._transfer(owner, src, dst, numel(box), dtype.size_bytes, category, name, before,
                              action=move), key

    def _transfer(self, owner, src: int, dst: int, elements: int, itemsize: int, category: Category, name: str,
                  before, regions=(), action=None) -> range:
        """One transfer src -> dst: a task per hop, all starting after ``before``; returns the hops. The
        first hop carries the data movement (``action``); the others hold their links."""
        first = self.core.transfer(self._oid(owner), src, dst, elements, itemsize, CATEGORY_CODE[category], before)
        hops = self.core.hops(first)
        if self.detail:
            self._name_hops(hops, name, regions, action)
        return hops

    def _name_hops(self, hops, name: str, regions=(), action=None) -> None:
        types, nc = self.graph.link_types, self.num_compute
        for j, t in enumerate(hops):
            d = self.graph.core.row(t)[1]
            link_type = types[d - nc] if d >= nc else "copy by receiver"   # Machine.copied_by_receiver
            self.graph.annotate(t, f"{name} hop {j} {link_type}", "", -1, regions if j == 0 else (),
                                action if j == 0 else None)

    def _route(self, src: int, dst: int) -> tuple[tuple, tuple, tuple, float]:
        """(engine devices, latencies, bandwidths, summed latency) of the hops from src to dst (a
        folded ring's send: ``folding.virtual``)."""
        paid = None
        if dst >= self.num_compute * self.num_compute:
            route, paid = route_of(self, src, dst)
        else:
            route = self.machine.route(src, dst)
        if not route:
            raise StrategyError(f"no route from device {src} to device {dst}")
        links = self.machine.links
        for l in route:
            if not links[l].bandwidth > 0:
                raise StrategyError(f"link {l} ({links[l].src} -> {links[l].dst}) has bandwidth "
                                    f"{links[l].bandwidth!r} bytes/s; it must be > 0")
        devs = tuple(self.num_compute + l for l in route)
        lats, bws = tuple(links[l].latency_s for l in route), tuple(links[l].bandwidth for l in route)
        if dst < self.num_compute and self.machine.copied_by_receiver(route):
            # the destination device copies the message when it next polls: one more hop, on it
            devs, lats, bws = devs + (dst,), lats + (lats[-1],), bws + (bws[-1],)
        own = sum(links[l].latency_s for l in route)
        return devs, lats, bws, own if paid is None else max(own, paid)

    def _hops(self, src: int, dst: int, num_bytes: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(engine devices, times) of the hops of a transfer; transfers of one size recur."""
        key = (src, dst, num_bytes)
        hit = self._routes.get(key)
        if hit is None:
            devs, _, _, latency = self._route(src, dst)
            nc, links, times = self.num_compute, self.machine.links, []
            for d in devs:
                if d >= nc:
                    link = links[d - nc]
                    times.append(self.cost.transfer_time(link, num_bytes) - link.latency_s + latency)
                else:  # the destination's own copy (Machine.copied_by_receiver) over the route's last link
                    link = links[devs[-2] - nc]
                    times.append(receive_time(self.cost, link, num_bytes) - link.latency_s + latency)
            hit = (devs, tuple(times))
            if len(self._routes) > 200_000:
                self._routes.clear()
            self._routes[key] = hit
        return hit

    def reduce_time(self, device: int, shape: TensorShape, n: int) -> float:
        """The cost model's time of summing ``n`` tensors of ``shape`` on ``device`` (sums of one shape
        recur: a pipeline's accumulation has one per micro-batch)."""
        key = (REDUCE_KEY, shape, n, self._spec_names[device])
        exe = self._times.get(key)
        if exe is None:
            exe = self._times[key] = self.cost.reduce_time(shape, n, self._spec(device))
        return exe

    def _reduce(self, owner, device: int, shape: TensorShape, n: int, name: str, before, action=None) -> int:
        t = self._task(owner, TaskKind.REDUCE, device, self.reduce_time(device, shape, n), name, action=action)
        self._edges(owner, before, [t])
        return t

    def _per_kind(self, devices, what: str, time_of) -> list[float]:
        """``time_of(device kind)`` for each device, asked once per kind; positive or an error."""
        names, times, out = self._spec_names, {}, []
        for d in devices[:1] if self._one_kind else devices:  # one kind: the first device answers for all
            x = times.get(names[d])
            if x is None:
                x = times[names[d]] = time_of(self._spec(d))
                if not x > 0:
                    raise StrategyError(f"{what} @{d}: the cost model gave a non-positive time {x!r}")
            out.append(x)
        return out * len(devices) if self._one_kind else out

    def _spec(self, device: int):
        return self.machine.devices[device].spec

    def _new_group(self) -> int:
        self._group_ids += 1
        return self._group_ids - 1

    def _allreduce(self, owner, devices: list[int], ready: list[list[int]], box, dtype, category,
                   name: str) -> tuple[list[list[int]], tuple]:
        """Ring AllReduce of ``box`` over ``devices`` (``ring_lowering.lower_allreduce``)."""
        return lower_allreduce(self, owner, devices, ready, box, dtype, category, name)

    def ring_extras(self, devices, elements: int, itemsize: int, reduce_exe) -> list[tuple]:
        """Per ring member, the time added to each hop of its send (``collectives.ring_extras``)."""
        return ring_extras(self, devices, elements, itemsize, reduce_exe)

    # ---- owners -----------------------------------------------------------------------------
    def _op_time(self, attrs, ins, outs, device: int):
        """(OpTimes, activation bytes) of one piece; pieces of one shape on one device kind recur."""
        key = (attrs, tuple(ins), tuple(outs), self._spec(device).name)
        if key not in self._times:
            self._times[key] = (self.cost.op_times(attrs, ins, outs, self._spec(device)),
                                op_cost(attrs, ins, outs).activation_bytes)
        return self._times[key]

    def derived(self, what: str, objs: tuple, make):
        """``make()``, computed once per ``what`` and identity of ``objs`` (kept alive with the value;
        at most 50,000 kept): twin layouts share their origin's piece times, plans and read groups."""
        key = (what,) + tuple(map(id, objs))
        hit = self._derived.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], objs)):
            return hit[1]
        if len(self._derived) >= 50_000:
            self._derived.clear()
        value = make()
        self._derived[key] = (objs, value)
        return value

    def _piece_times(self, lay: OperatorLayout) -> tuple[tuple, tuple, tuple]:
        """Per piece: forward time, backward time, activation bytes (pieces of one class on one device
        kind are timed once; twin layouts share their origin's)."""
        return self.derived("piece times", (lay.kin,), lambda: self._time_pieces(lay))

    def _time_pieces(self, lay: OperatorLayout) -> tuple[tuple, tuple, tuple]:
        timed: dict = {}
        names = self._spec_names
        first = names[lay.devices[0]]
        if len(lay.classes) == 1 and all(names[d] == first for d in lay.devices):  # one class, one device kind
            times, activation_bytes = self._op_time(*lay.classes[0], lay.devices[0])
            n = len(lay.devices)
            return (float(times.forward_s),) * n, (float(times.backward_s),) * n, (activation_bytes,) * n
        fx, bx, act = [], [], []
        for p, dev in enumerate(lay.devices):
            tkey = (lay.piece_class[p], names[dev])
            hit = timed.get(tkey)
            if hit is None:
                times, activation_bytes = self._op_time(*lay.classes[lay.piece_class[p]], dev)
                hit = timed[tkey] = (float(times.forward_s), float(times.backward_s), activation_bytes)
            fx.append(hit[0])
            bx.append(hit[1])
            act.append(hit[2])
        return tuple(fx), tuple(bx), tuple(act)

    def _lower_op(self, name: str) -> None:
        lay = self.layout(name)
        fx, bx, act = self._piece_times(lay)
        if self.pipeline is not None and not self.pipeline.holds_activations(name):
            act = [0] * len(act)       # a micro-batch beyond those a stage holds at once
        if name in self.recompute:
            act = [0] * len(act)       # dropped after the forward: one segment's count is charged instead
        wx = weight_grad_times(self, name, fx, bx)      # a zero-bubble schedule's W passes, else None
        base = self.core.pieces(self._oid(Owner.op(name)), lay.devices, fx,
                                bx if wx is None else [b - w for b, w in zip(bx, wx)], act)
        n = len(lay.devices)
        fwd, bwd = range(base, base + 2 * n, 2), range(base + 1, base + 2 * n, 2)
        self.op_tasks[name] = (fwd, bwd)
        if self.detail:
            for p, dev in enumerate(lay.devices):
                fa, ba = self._piece_actions(name, lay, p, dev)
                self.graph.annotate(fwd[p], f"fwd {name}[{p}]", name, p, self._piece_regions(lay, p, dev), fa)
                self.graph.annotate(bwd[p], f"bwd {name}[{p}]", name, p, (), ba)
        if wx is not None:
            split_backward(self, name, lay, wx)

    @staticmethod
    def _piece_regions(lay: OperatorLayout, p: int, dev: int) -> tuple:
        node = lay.node
        return tuple(RegionRequirement(ref, r[p], Access.READ, dev) for ref, r in
                     zip(node.inputs, lay.operand_regions)) + tuple(
            RegionRequirement(TensorRef(node.id, k), r[p], Access.WRITE, dev) for k, r in enumerate(lay.output_regions))

    def _piece_actions(self, name: str, lay: OperatorLayout, p: int, dev: int) -> tuple[Forward, Backward]:
        """What the runtime does for piece ``p``: the buffers its forward and backward read and write."""
        attrs, zeroed = lay.piece_attrs[p]
        fill = float(op_def(lay.node.op_type).halo_fill(lay.node.attrs))
        operands = tuple(Buf(Key.operand(name, i, p), dev, r[p].ranges, s.dtype.numpy_name, fill)
                         for i, (r, s) in enumerate(zip(lay.operand_regions, lay.operand_shapes)))
        outputs = tuple(Buf(Key.output(name, k, p), dev, r[p].ranges, s.dtype.numpy_name)
                        for k, (r, s) in enumerate(zip(lay.output_regions, lay.output_shapes)))
        gouts = tuple(Buf(Key.grad_output(name, k, p), dev, r[p].ranges, s.dtype.numpy_name)
                      for k, (r, s) in enumerate(zip(lay.output_regions, lay.output_shapes)))
        gins = tuple(Buf(Key.grad_operand(name, i, p), dev, r[p].ranges, s.dtype.numpy_name)
                     if self.wiring.needs_grad(name, i) else None
                     for i, (r, s) in enumerate(zip(lay.operand_regions, lay.operand_shapes)))
        return (Forward(name, attrs, zeroed, operands, outputs),
                Backward(name, attrs, zeroed, operands, outputs, gouts, gins))

    def _lower_edge(self, consumer: str, i: int) -> None:
        pref = self.producer[(consumer, i)]
        if pref.op_type is OpType.WEIGHT:
            return  # weights belong to their weight owner
        owner = Owner.edge(consumer, i)
        C = self.layout(consumer)
        full = C.operand_shapes[i]
        if pref.op_type is OpType.INPUT:  # the data loader puts each piece's rows in place: no transfer
            for p, box in enumerate(C.operand_boxes[i] if self.detail else ()):
                self._part(owner, Key.operand(consumer, i, p), C.devices[p], Key.input(pref.name), HOST, box)
            return
        P = self.layout(pref.name)
        cfwd, cbwd = self.op_tasks[consumer]
        pfwd, pbwd = self.op_tasks[pref.name]
        dtype = full.dtype
        k = self.strategy.shapes(pref.name).outputs[pref.index].sum_degree // \
            self.strategy.shapes(consumer).operands[i].sum_degree
        plan = self._reshards.get(P, pref.index, C, i, k)
        ends = _EdgeEnds(pref.name, pref.index, consumer, i, pfwd, pbwd, cfwd, cbwd,
                         self.wiring.needs_grad(consumer, i), f"{pref.name}->{consumer}.in{i}")
        siblings = self._siblings.get((consumer, i))
        if siblings is not None and pref.name not in self.recompute:
            lower_fanout(self, owner, ends, plan, dtype, siblings)   # a box several operands read crosses once
        elif plan.moves:
            self._moves(owner, ends, plan, dtype)
        for red in plan.reductions:
            lower_reduction(self, owner, ends, red, dtype, C.devices)

    def _moves(self, owner, e: "_EdgeEnds", plan, dtype) -> None:
        """One-to-one moves producer piece q -> consumer piece p of ``box``: on one device only
        dependencies; else a transfer forward and, for a gradient, one back."""
        qs, qdevs, ps, pdevs, elements = plan.columns
        fwd_first, bwd_first = self.core.moves(self._oid(owner), e.pfwd.start, e.cfwd.start, qs, ps, qdevs, pdevs,
                                               elements, dtype.size_bytes, e.grad)
        if not self.detail:
            return
        np_dtype = dtype.numpy_name
        for (q, qdev, p, pdev, box), fx, bx in zip(plan.moves, fwd_first, bwd_first):
            out, gout, opd, gin = e.out(q), e.gout(q), e.opd(p), e.gin(p)
            if fx < 0:
                self._part(owner, opd, pdev, out, qdev, box)
                if e.grad:
                    self._part(owner, gout, qdev, gin, pdev, box, add=True)
                continue
            hops = self.core.hops(fx)
            xkey = Key.transfer(self.core.row(fx)[4])
            self._name_hops(hops, f"xfer {e.label} [{q}]->[{p}]", (), Move(out, qdev, Buf(xkey, pdev, tuple(box),
                                                                                          np_dtype)))
            self._part(owner, opd, pdev, xkey, pdev, box)
            if bx >= 0:
                gkey = Key.transfer(self.core.row(bx)[4])
                self._name_hops(self.core.hops(bx), f"grad {e.label} [{p}]->[{q}]", (),
                                Move(gin, pdev, Buf(gkey, qdev, tuple(box), np_dtype)))
                self._part(owner, gout, qdev, gkey, qdev, box, add=True)

    def _lower_weight(self, wname: str) -> None:
        """The weight's instances (its first user's pieces) hold it and sum its gradient (ring
        AllReduce over replicas), then each updates it; pieces of later users read an instance on
        their device or get a copy, and send the gradient back (``WeightPlan``)."""
        owner = Owner.weight(wname)
        users = sorted(self.consumers.get(wname, []), key=lambda u: self.position[u[0]])
        if not users:
            return
        dtype = self.wiring.weight_shape[wname].dtype
        np_dtype = dtype.numpy_name
        layouts = [(self.layout(c), i) for c, i in users]
        plan = self._reshards.weight(layouts)
        bwd = [self.wgrad.get(c) or self.op_tasks[c][1] for c, _ in users]   # what writes weight gradients
        # per instance the tasks its gradient waits for
        deps: dict[tuple, dict[int, list[int]]] = {ranges: {d: [] for _, d in reps} for ranges, reps in plan.instances}
        for u, p, ranges, dev in plan.reads:
            deps[ranges][dev].append(bwd[u][p])
        oid = self._oid(owner)
        sent = self._weight_copies(owner, wname, users, plan, bwd, dtype) if plan.copies else []
        for (_, ranges, src, _, _), (_, _, bx) in zip(plan.copies, sent):
            deps[ranges][src].extend(self.core.hops(bx))
        grad_parts = self._weight_parts(owner, wname, users, plan, sent, np_dtype) if self.detail else {}
        if self.pipeline is not None:
            accumulate_micro_batches(self, owner, wname, users, plan, deps, grad_parts, sent)
        for ranges, reps in plan.instances:
            piece = TensorShape(tuple(b - a for a, b in ranges), dtype)
            devices = sorted(d for _, d in reps)   # a ring in device order: crosses nodes least (NCCL)
            self.core.memory_each(oid, devices, _MEMORY_CODE["weights"], piece.size_bytes)
            self.core.memory_each(oid, devices, _MEMORY_CODE["gradients"], piece.size_bytes)
            if self.fold is not None and self.fold.replicas > 1:   # one replica's image of the ring over every replica
                done, gkey = folded_allreduce(self, owner, devices, [deps[ranges][d] for d in devices], ranges,
                                              dtype, Category.WEIGHT_SYNC, f"allreduce {wname}"), None
            elif len(devices) > 1:
                done, gkey = self._allreduce(owner, devices, [deps[ranges][d] for d in devices], ranges,
                                             dtype, Category.WEIGHT_SYNC, f"allreduce {wname}")
            else:
                done, gkey = [deps[ranges][devices[0]]], Key.weight_grad(wname, ranges)
            exe = self._per_kind(devices, f"update {wname}",
                                 lambda spec: self.cost.update_time(piece, spec, self.optimizer))
            updates = self.core.after(oid, KIND_CODE[TaskKind.UPDATE], devices, exe, done)
            if not self.detail:
                continue
            for d, u in zip(devices, updates):
                for key, box in grad_parts.get((ranges, d), ()):
                    self._part(owner, gkey, d, key, d, box, add=True)
                update = Update(Buf(Key.weight(wname, ranges), d, ranges, np_dtype), Buf(gkey, d, ranges, np_dtype),
                                gather_grad=len(devices) == 1)
                self.graph.annotate(u, f"update {wname}@{d}", wname, -1, (), update)

    def _weight_copies(self, owner, wname: str, users, plan, bwd, dtype) -> list[tuple]:
        """The copies of ``plan`` (a weight's parts on devices no instance of it is on): per copy one
        transfer there before every reader's forward, the readers' gradients summed there (a reduce
        task after their backwards, where there are several) and one transfer of the sum back.
        Returns per copy (first forward hop, the sum's key or None, first backward hop)."""
        sums, back_before = [], []
        for readers, ranges, src, dev, box in plan.copies:
            after = [bwd[u][p] for u, p in readers]
            if len(readers) == 1:
                sums.append(None)
                back_before.append(after[0])
                continue
            key = Key.sum(self._new_group()) if self.detail else None
            piece = TensorShape(tuple(b - a for a, b in box), dtype)
            back_before.append(self._reduce(owner, dev, piece, len(readers), f"sum grad {wname}@{dev}", after,
                                            Sum(Buf(key, dev, box, dtype.numpy_name)) if self.detail else None))
            sums.append(key)
        fwd_first, back_first = self.core.copies(
            self._oid(owner), [x[2] for x in plan.copies], [x[3] for x in plan.copies],
            [numel(x[4]) for x in plan.copies], dtype.size_bytes, CATEGORY_CODE[Category.WEIGHT_SYNC],
            [self.op_tasks[users[x[0][0][0]][0]][0][x[0][0][1]] for x in plan.copies], back_before)
        for (readers, *_), fx in zip(plan.copies, fwd_first):
            if len(readers) > 1:
                self._edges(owner, list(self.core.hops(fx)), [self.op_tasks[users[u][0]][0][p] for u, p in readers[1:]])
        return list(zip(fwd_first, sums, back_first))

    def _weight_parts(self, owner, wname: str, users, plan, sent, np_dtype) -> dict:
        """With detail: the parts that assemble each user piece's weight operand, each copy's gradient
        sum and each instance's gradient, and the copies' actions and names. Returns (ranges, device)
        -> [(key, box)]."""
        grad_parts: dict = defaultdict(list)
        for u, p, ranges, dev in plan.reads:
            c, i = users[u]
            box = overlap(self.layout(c).operand_regions[i][p].ranges, ranges)
            self._part(owner, Key.operand(c, i, p), dev, Key.weight(wname, ranges), dev, box)
            grad_parts[(ranges, dev)].append((Key.grad_operand(c, i, p), box))
        for (readers, ranges, src, dev, box), (fx, skey, bx) in zip(plan.copies, sent):
            xkey, gkey = Key.transfer(self.core.row(fx)[4]), Key.transfer(self.core.row(bx)[4])
            self._name_hops(self.core.hops(fx), f"copy {wname} ->{dev}", (),
                            Move(Key.weight(wname, ranges), src, Buf(xkey, dev, box, np_dtype)))
            for u, p in readers:
                c, i = users[u]
                self._part(owner, Key.operand(c, i, p), dev, xkey, dev, box)
                if skey is not None:
                    self._part(owner, skey, dev, Key.grad_operand(c, i, p), dev, box, add=True)
            c, i = users[readers[0][0]]
            grad = skey if skey is not None else Key.grad_operand(c, i, readers[0][1])
            self._name_hops(self.core.hops(bx), f"grad {wname} {dev}->", (),
                            Move(grad, dev, Buf(gkey, src, box, np_dtype)))
            grad_parts[(ranges, src)].append((gkey, box))
        return grad_parts

    def _loss_time(self, piece: TensorShape, device: int) -> float:
        return loss_time(self.cost, piece, self._spec(device))

    def _lower_loss(self, name: str) -> None:
        """The loss scores the model's output where it is computed when each piece holds whole rows
        (the output cut along its first, sample dimension only). Otherwise the pieces holding the
        same rows (one data-parallel replica's samples) are gathered on the first one's device,
        scored there, and the gradient sent back: a replica's loss never crosses to another's
        devices. Only replica 0 of a replicated output receives a gradient (the other replicas'
        backward sees zeros)."""
        owner = Owner.loss(name)
        lay = self.layout(name)
        full = lay.output_shapes[0]
        first, rows, total = self.loss_rows.get(name) or (0, full.dims[0], full.dims[0])
        full_elements = full.num_elements // rows * total       # the whole batch's, over micro-batches too
        fwd, bwd = self.op_tasks[name]
        regions = lay.output_regions[0]
        scored = [p for p, r in enumerate(regions) if r.copy_index == 0]
        whole_rows = all(r.sum_index == 0 and all(rg == (0, n) for rg, n in zip(r.ranges[1:], full.dims[1:]))
                         for r in regions)
        if whole_rows:
            for p in scored:
                self._score(owner, name, p, [p], regions[p].ranges, first, full_elements)
            return
        groups: dict[tuple, list[int]] = {}                # a row range -> the pieces holding those rows
        for p in scored:
            groups.setdefault(regions[p].ranges[0], []).append(p)
        for g, (row, pieces) in enumerate(groups.items()):
            self._score(owner, name, -1 - g, pieces, (row,) + tuple((0, n) for n in full.dims[1:]), first,
                        full_elements)

    def _score(self, owner, name: str, index: int, pieces: list, box: tuple, first: int, full_elements: int) -> None:
        """One loss task scoring ``box`` of ``name``'s output, on the device of ``pieces[0]``: the
        pieces' parts assembled there (sent where they live elsewhere), the gradient sent back to each."""
        lay = self.layout(name)
        dtype = lay.output_shapes[0].dtype
        fwd, bwd = self.op_tasks[name]
        regions = lay.output_regions[0]
        target = lay.devices[pieces[0]]
        key_in, key_grad = Key.loss_in(name, index), Key.loss_grad(name, index)
        arrivals = []
        for p in pieces:
            dev, piece_box = lay.devices[p], regions[p].ranges
            if dev == target:
                arrivals.append(fwd[p])
                self._part(owner, key_in, target, Key.output(name, 0, p), dev, piece_box, add=len(pieces) > 1)
            else:
                hops, xkey = self._send(owner, Key.output(name, 0, p), dev, target, piece_box, dtype, Category.LOSS,
                                        f"xfer {name}[{p}]->loss@{target}", [fwd[p]])
                arrivals += hops
                self._part(owner, key_in, target, xkey, target, piece_box, add=True)
        rows = ((box[0][0] + first, box[0][1] + first),)
        action = Loss(Buf(key_in, target, box, dtype.numpy_name), Buf(key_grad, target, box, dtype.numpy_name),
                      rows, full_elements)
        shape = TensorShape(tuple(b - a for a, b in box), dtype)
        label = f"loss {name}[{index}]" if index >= 0 else f"loss {name}@{target}"
        t = self._task(owner, TaskKind.LOSS, target, self._loss_time(shape, target), label, node=name,
                       piece=max(index, -1), action=action)
        self._edges(owner, arrivals, [t])
        for p in pieces:
            dev, piece_box = lay.devices[p], regions[p].ranges
            if dev == target:
                self._edge(owner, t, bwd[p])
                self._part(owner, Key.grad_output(name, 0, p), dev, key_grad, dev, piece_box, add=True)
            else:
                hops, xkey = self._send(owner, key_grad, target, dev, piece_box, dtype, Category.LOSS,
                                        f"grad loss {name}->[{p}]", [t])
                self._edges(owner, hops, [bwd[p]])
                self._part(owner, Key.grad_output(name, 0, p), dev, xkey, dev, piece_box, add=True)

    # ---- building ---------------------------------------------------------------------------
    def build(self, strategy: Strategy) -> None:
        """Lower the whole strategy into a new task graph and build the engine from it.

        Owners are lowered operator by operator (its tasks, its operand edges, the weights it is the
        last user of, the loss it scores): priorities, not emission order, break ties, so any order
        gives the same timeline, and this one lets a one-shot (not ``incremental``) build release
        each layout once its last reader is lowered."""
        with no_gc():
            self._fresh_graph()
            self._set_strategy(strategy)
            self._describe_graph()
            release = self._release if not self.incremental else {}
            for name in self.wiring.ops:
                self._lower_op(name)
                for i in range(len(self.wiring.nodes[name].inputs)):
                    self._lower_edge(name, i)
                for w in self._last_user_of.get(name, ()):
                    self._lower_weight(w)
                if name in self.loss_rows:
                    self._lower_loss(name)
                for done in release.get(name, ()):
                    self._layouts.drop(done)
            weight_grad_parts(self)
            lower_recompute(self)
            if self.half:
                lower_overflow_check(self)
            if self.pipeline is not None:
                lower_schedule(self)
            if self.grad_sync == "after_backward":
                lower_sync_after_backward(self, strategy)
            self.engine = self.graph.engine(self.engine_cls)

    def _release_plan(self) -> dict[str, list[str]]:
        """Operator -> the operators whose layouts nothing lowered after it reads."""
        pos = self.position
        later = pos.__getitem__
        weight_last = {}   # weight -> its last user (lowered with it, reading every user's layout)
        last = {}
        for name in self.wiring.ops:
            at = max([name] + [c for c, _ in self.consumers.get(name, ())], key=later)
            for i in range(len(self.wiring.nodes[name].inputs)):
                pref = self.producer[(name, i)]
                if pref.op_type is OpType.WEIGHT:
                    w = weight_last.get(pref.name)
                    if w is None:
                        w = weight_last[pref.name] = max((c for c, _ in self.consumers.get(pref.name, ())), key=later)
                    at = max(at, w, key=later)
            last[name] = at
        out: dict[str, list[str]] = defaultdict(list)
        for name, at in last.items():
            out[at].append(name)
        return out

    def _describe_graph(self) -> None:
        self.graph.inputs = dict(self.wiring.inputs)
        self.graph.weight_shapes = dict(self.wiring.weight_shape)
        self.graph.loss_node = self.loss_node

    def _lower_owners(self, owners) -> None:
        ops, edges, weights, losses = owners
        for name in ops:
            self._lower_op(name)
        for c, i in edges:
            self._lower_edge(c, i)
        for w in weights:
            self._lower_weight(w)
        for name in losses:
            self._lower_loss(name)

    def update(self, strategy: Strategy, changed: set[str]) -> None:
        """Re-lower what a change of the named compute operators' configurations touches and bring the
        engine in step (only the changed tasks and edges)."""
        if self.strategy is None or strategy.wiring() is not self.wiring or not self.incremental \
                or getattr(strategy, "pipeline", None) is not None or self.pipeline is not None \
                or getattr(strategy, "recompute", None) or self.recompute or self.half \
                or self.grad_sync != "overlap":
            self.build(strategy)   # a pipeline's schedule, recomputation and barriers order tasks of many owners
            return
        self._set_strategy(strategy)
        self.fusion_cache.clear()
        self.fanout_pending.clear()
        ops = set(changed)
        edges, weights = set(), set()
        for name in changed:
            for i in range(len(self.wiring.nodes[name].inputs)):
                p = self.producer[(name, i)]
                if p.op_type is OpType.WEIGHT:
                    weights.add(p.name)
                edges.add((name, i))
            edges.update(self.consumers.get(name, []))
        for e in list(edges):                       # an output's readers are lowered together (lower_fanout)
            edges.update(self._siblings.get(e, ()))
        for o in ops:
            self._drop(Owner.op(o))
        for e in edges:
            self._drop(Owner.edge(*e))
        for w in weights:
            self._drop(Owner.weight(w))
        losses = [name for name in self.loss_rows if name in ops]
        for name in losses:
            self._drop(Owner.loss(name))
        order = self.position
        self._lower_owners((sorted(ops, key=order.get), sorted(edges, key=lambda e: (order[e[0]], e[1])),
                            sorted(weights, key=order.get), losses))
        self._describe_graph()
        self.graph.sync(self.engine)

    def memory_by_device(self) -> dict[int, dict[str, int]]:
        return self.graph.memory_by_device()
