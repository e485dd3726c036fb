"""Strategies: a parallel computation graph plus a machine view per operator (DESIGN.md).

A SOAP configuration (FlexFlow §4) gives each operator a degree per parallel axis (sample,
attribute, parameter, reduction; see ``flexrt.ir.registry.ParallelAxis``) and a machine view.
``apply_configs`` turns a model's sequential PCG and such configurations into the parallel PCG,
inserting on every edge the parallelization operators (Unity §3.3) that take the producer's
layout to the one the consumer needs: Reduction (or AllReduce) for partial sums, Combine and
Repartition per dimension, Replicate for copies. Chains are shared, so a weight read by many
unrolled RNN steps is replicated once.

A strategy is one of two types behind one small protocol (``Strategy``: a parallel PCG, a view per
compute operator, and the ``Wiring`` lowering reads): ``ConfigStrategy``, per-operator
configurations over a base PCG (the SOAP search space; changed one operator at a time, its parallel
PCG built only when asked for), and ``GraphStrategy``, a whole parallel PCG with views (Unity's
substitutions, strategy files that hold their own PCG).

Entry points: ``OpConfig``, ``ConfigStrategy``, ``GraphStrategy``, ``Strategy``, ``apply_configs``,
``op_shapes``, ``Wiring``.
"""

from __future__ import annotations

import copy

import math
import weakref
from dataclasses import dataclass
from typing import Mapping, Optional

from flexrt.errors import FlexrtError, ShapeError, StrategyError
from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS, OpType
from flexrt.ir.ops import (AllReduceAttrs, CombineAttrs, ReductionAttrs, RepartitionAttrs, ReplicateAttrs)
from flexrt.ir.parallel_axes import axes_of, configured_attrs, required_weight_shapes, solve_axes, tensor_degrees
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.pcg import PCG, Node, TensorRef
from flexrt.ir.registry import AxisKind, op_def
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, view_devices

# Axis kinds a SOAP configuration sets; replica and partial-sum axes follow from the graph.
SOAP_KINDS = (AxisKind.SAMPLE, AxisKind.ATTRIBUTE, AxisKind.PARAMETER, AxisKind.REDUCTION)


@dataclass(frozen=True, slots=True)
class OpConfig:
    """One operator's configuration: a degree per parallel axis (axes not named are 1) and a view."""

    degrees: tuple[tuple[str, int], ...]
    view: MachineView

    def __post_init__(self):
        # canonical: sorted by axis name, degree-1 axes left out, so equal configurations compare equal
        object.__setattr__(self, "degrees", tuple(sorted((str(a), d) for a, d in dict(self.degrees).items() if d != 1)))

    @property
    def degree_map(self) -> dict[str, int]:
        return dict(self.degrees)

    @property
    def total_degree(self) -> int:
        return math.prod(d for _, d in self.degrees)


def is_compute(node: Node) -> bool:
    return node.op_type not in SOURCE_OPS and node.op_type not in PARALLEL_OPS


def compute_node(pcg: PCG, name: str) -> Optional[Node]:
    """The compute operator named ``name`` in ``pcg``, or None (no such node, or an input or weight)."""
    try:
        node = pcg.node_by_name(name)
    except FlexrtError:
        return None
    return node if is_compute(node) else None


def node_axes(pcg: PCG, node: Node):
    """The parallel axes of a compute node and their degrees, read from its data inputs' shapes."""
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    data = [pcg.shape(r) for r in node.inputs[:len(node.inputs) - nw]]
    return solve_axes(opdef, node.attrs, node.name, data)


def repeated_operands(pcg: PCG, node: Node) -> frozenset[int]:
    """The data operands of a compute node that read the same tensor as an earlier operand and are
    cut alike along every parallel axis (self-attention's key and value, reading its query): under
    any configuration they need the same pieces on the same devices, which cross once."""
    if len(set(node.inputs)) == len(node.inputs):
        return frozenset()              # the common case: no tensor read twice
    axes, _ = node_axes(pcg, node)
    first: dict = {}
    out = set()
    for i, ref in enumerate(node.inputs[:len(node.inputs) - op_def(node.op_type).num_weights(node.attrs)]):
        cut = (ref, tuple(dict(a.operands).get(i) for a in axes))
        if cut in first:
            out.add(i)
        else:
            first[cut] = i
    return frozenset(out)


def axis_degrees(pcg: PCG, node: Node) -> tuple[int, ...]:
    """Degrees of the node's axes in axis order (the degree tuple its machine view maps)."""
    axes, degree = node_axes(pcg, node)
    return tuple(degree[a.name] for a in axes)


def resharding_steps(src: ParallelTensorShape, target: ParallelTensorShape):
    """How ``src`` becomes ``target`` (the rules every resharding chain follows): (the operator that
    sums partial sums, AllReduceAttrs or ReductionAttrs, or None; its degree; the factor by which
    copies are then multiplied). Partitions and combines go between them, per dimension.
    StrategyError when no chain does it: partial sums only shrink by a divisor, copies only grow."""
    sum_step, k, have = None, 1, src.discard_copy_degree
    if src.sum_degree != target.sum_degree:
        if src.sum_degree % target.sum_degree:
            raise StrategyError(f"cannot turn sum degree {src.sum_degree} into {target.sum_degree} "
                                f"(from {src} to {target})")
        k = src.sum_degree // target.sum_degree
        grow = target.discard_copy_degree // src.discard_copy_degree
        if grow == k and target.discard_copy_degree % src.discard_copy_degree == 0 and \
                src.shard_degrees == target.shard_degrees:
            sum_step, have = AllReduceAttrs, have * k
        else:
            sum_step = ReductionAttrs
    want = target.discard_copy_degree
    if want % have:
        raise StrategyError(f"cannot turn copy degree {have} into {want} (from {src} to {target}); "
                            f"copies can only be multiplied")
    return sum_step, k, want // have


class _Builder:
    """Builds the parallel PCG, sharing resharding chains between consumers."""

    def __init__(self) -> None:
        self.pcg = PCG()
        self.chains: dict[tuple[TensorRef, ParallelTensorShape], TensorRef] = {}

    def add(self, attrs, inputs, name) -> TensorRef:
        base, n = name, 1
        while True:
            try:
                self.pcg.node_by_name(name)
            except FlexrtError:
                break
            n += 1
            name = f"{base}{n}"
        return TensorRef(self.pcg.add_node(attrs, inputs, name))

    def reshard(self, ref: TensorRef, target: ParallelTensorShape, label: str) -> TensorRef:
        src = self.pcg.shape(ref)
        if src == target:
            return ref
        key = (ref, target)
        if key in self.chains:
            return self.chains[key]
        try:
            sum_step, k, copies = resharding_steps(src, target)
        except StrategyError as e:
            raise StrategyError(f"{label}: {e}") from None
        out = ref
        name = self.pcg.node(ref.node).name
        if sum_step is not None:
            out = self.add(sum_step(k), [out], f"{name}.{'allreduce' if sum_step is AllReduceAttrs else 'reduce'}")
        for d in range(target.rank):
            have, want = self.pcg.shape(out).dims[d].degree, target.dims[d].degree
            g = math.gcd(have, want)
            if have // g > 1:
                out = self.add(CombineAttrs(d, have // g), [out], f"{name}.combine{d}")
            if want // g > 1:
                out = self.add(RepartitionAttrs(d, want // g), [out], f"{name}.partition{d}")
        if copies > 1:
            out = self.add(ReplicateAttrs(copies), [out], f"{name}.replicate")
        if self.pcg.shape(out) != target:
            raise StrategyError(f"{label}: resharding {src} gave {self.pcg.shape(out)}, not {target}")
        self.chains[key] = out
        return out


def _check_degrees(node: Node, axes, given: Mapping[str, int]) -> dict[str, int]:
    names = [a.name for a in axes]
    unknown = set(given) - set(names)
    if unknown:
        raise StrategyError(f"operator '{node.name}' ({node.op_type.value}) has no axis "
                            f"{', '.join(sorted(unknown))}; its axes: {', '.join(names)}")
    for a, d in given.items():
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            raise StrategyError(f"operator '{node.name}': degree of axis {a} must be an int >= 1, got {d!r}")
    return {n: int(given.get(n, 1)) for n in names}


_SHAPES: dict = {}  # (attrs, data shapes, degrees) -> OpShapes; searches repeat them


@dataclass(frozen=True, slots=True)
class OpShapes:
    """The parallel shapes one operator configuration implies: its axes and their degrees, what each
    operand (data, then weights) must be and what each output is."""

    axes: tuple
    degree: tuple          # (axis name, degree) in axis order, every axis
    operands: tuple        # ParallelTensorShape per operand, data then weights
    outputs: tuple         # ParallelTensorShape per output

    @property
    def degree_map(self) -> dict[str, int]:
        return dict(self.degree)


def op_shapes(node: Node, full: list, degrees: Mapping[str, int]) -> OpShapes:
    """The parallel shapes of ``node`` (its data operands' full shapes ``full``) under ``degrees``;
    ShapeError or StrategyError, naming the operator, when they are not a valid configuration."""
    key = (node.attrs, tuple(full), tuple(sorted(degrees.items())))
    hit = _SHAPES.get(key)
    if hit is not None:
        return hit
    opdef = op_def(node.op_type)
    axes = axes_of(opdef, node.attrs, full)
    deg = _check_degrees(node, axes, degrees)
    try:
        targets = [ParallelTensorShape.of(s.dims, d.shard, d.sum, d.copy, s.dtype) for i, s in enumerate(full)
                   for d in [tensor_degrees(axes, deg, i, s.rank, False)]]
        attrs = configured_attrs(axes, node.attrs, deg)  # a part axis's degree is an attribute
        solve_axes(opdef, attrs, node.name, targets)
        wtargets = required_weight_shapes(opdef, attrs, node.name, targets)
        outs = [ParallelTensorShape.of(o.dims, d.shard, d.sum, d.copy, o.dtype)
                for k, o in enumerate(opdef.output_shapes(node.attrs, full))
                for d in [tensor_degrees(axes, deg, k, o.rank, True)]]
    except ShapeError as e:
        raise ShapeError(f"strategy for '{node.name}' ({node.op_type.value}) with degrees "
                         f"{ {k: v for k, v in deg.items() if v > 1} }: {e}") from None
    out = OpShapes(tuple(axes), tuple((a.name, deg[a.name]) for a in axes), tuple(targets) + tuple(wtargets),
                   tuple(outs))
    if len(_SHAPES) > 100_000:
        _SHAPES.clear()
    _SHAPES[key] = out
    return out


def computed_weights(pcg: PCG, nodes) -> list[str]:
    """Names of the operators among ``nodes`` (ids) whose weight operand another operator computes
    (a concatenation of two kernels, TASO's merged convolutions). A strategy places, synchronizes and
    updates weights as the model's parameters, each a weight node of the graph, so it cannot hold
    such a graph."""
    out = []
    for nid in nodes:
        node = pcg.node(nid)
        if not is_compute(node):
            continue
        nw = op_def(node.op_type).num_weights(node.attrs)
        if any(pcg.node(r.node).op_type is not OpType.WEIGHT for r in node.inputs[len(node.inputs) - nw:]):
            out.append(node.name)
    return out


def data_shapes(pcg: PCG, node: Node) -> list:
    """Full shapes of a node's data operands (weights left out)."""
    nw = op_def(node.op_type).num_weights(node.attrs)
    return [pcg.shape(r).tensor_shape for r in node.inputs[:len(node.inputs) - nw]]


def apply_configs(base: PCG, degrees: Mapping[int, Mapping[str, int]]) -> tuple[PCG, dict[int, int]]:
    """The parallel PCG of ``base`` (a PCG without parallel operators) under per-node axis degrees.

    Returns the parallel PCG and the map from ``base`` node ids to its node ids.
    """
    b = _Builder()
    mapping: dict[int, int] = {}

    def ref(r: TensorRef) -> TensorRef:
        return TensorRef(mapping[r.node], r.index)

    for nid in base.topological_order():
        node = base.node(nid)
        if node.op_type in PARALLEL_OPS:
            raise StrategyError(f"apply_configs takes a model without parallelization operators; "
                                f"'{node.name}' is a {node.op_type.value}")
        if node.op_type in SOURCE_OPS:
            mapping[nid] = b.add(node.attrs, [], node.name).node
            continue
        nw = op_def(node.op_type).num_weights(node.attrs)
        data_refs, weight_refs = node.inputs[:len(node.inputs) - nw], node.inputs[len(node.inputs) - nw:]
        shapes = op_shapes(node, data_shapes(base, node), degrees.get(nid, {}))
        targets, wtargets = shapes.operands[:len(data_refs)], shapes.operands[len(data_refs):]
        ins = [b.reshard(ref(r), t, f"'{node.name}' input {i}") for i, (r, t) in enumerate(zip(data_refs, targets))]
        ins += [b.reshard(ref(r), t, f"'{node.name}' weight {i}") for i, (r, t) in enumerate(zip(weight_refs, wtargets))]
        mapping[nid] = b.add(configured_attrs(shapes.axes, node.attrs, shapes.degree_map), ins, node.name).node
    return b.pcg, mapping


# ---- what lowering reads of a strategy ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Producer:
    """What feeds operand ``i`` of a compute operator: output ``index`` of ``name``, a compute
    operator, a model input (``op_type`` INPUT) or a weight (WEIGHT)."""

    name: str
    index: int
    op_type: OpType


class Wiring:
    """The compute operators of a model and how they connect, parallelization operators skipped:
    what lowering needs besides each operator's configuration. It depends on the model only (a
    ``ConfigStrategy`` shares its base's), so a one-operator proposal rebuilds nothing here."""

    def __init__(self, pcg: PCG, order: Optional[list] = None) -> None:
        nodes = [pcg.node(i) for i in order] if order is not None else list(pcg.nodes)
        self.nodes: dict[str, Node] = {}
        self.ops: list[str] = []                 # compute operators, in graph order
        self.weights: list[str] = []
        self.inputs: dict[str, object] = {}      # input name -> full TensorShape
        self.weight_shape: dict[str, object] = {}
        self.position: dict[str, int] = {}       # rank among compute operators, inputs and weights
        self.producer: dict[tuple[str, int], Producer] = {}
        self.consumers: dict[str, list[tuple[str, int]]] = {}
        self.operand_full: dict[str, tuple] = {}
        self.output_full: dict[str, tuple] = {}
        for node in nodes:
            if is_compute(node) or node.op_type in (OpType.INPUT, OpType.WEIGHT):
                self.position[node.name] = len(self.position)
                self.nodes[node.name] = node
            if node.op_type is OpType.INPUT:
                self.inputs[node.name] = pcg.shape(TensorRef(node.id, 0)).tensor_shape
            elif node.op_type is OpType.WEIGHT:
                self.weights.append(node.name)
                self.weight_shape[node.name] = node.attrs.shape
        full: dict[int, tuple] = {}    # id(parallel shape) -> (it, its full shape): shapes recur (memoized inference)

        def full_of(shape):
            hit = full.get(id(shape))
            if hit is None:
                hit = full[id(shape)] = (shape, shape.tensor_shape)
            return hit[1]
        for node in nodes:
            if not is_compute(node):
                continue
            self.ops.append(node.name)
            self.operand_full[node.name] = tuple(full_of(pcg.shape(r)) for r in node.inputs)
            self.output_full[node.name] = tuple(full_of(s) for s in pcg.output_shapes(node.id))
            for i, ref in enumerate(node.inputs):
                while True:
                    p = pcg.node(ref.node)
                    if p.op_type in (OpType.INPUT, OpType.WEIGHT) or is_compute(p):
                        break
                    ref = p.inputs[0]
                self.producer[(node.name, i)] = Producer(p.name, ref.index, p.op_type)
                self.consumers.setdefault(p.name, []).append((node.name, i))
        self.sinks = [n for n in self.ops if n not in self.consumers]  # the last one scores the loss by default

    def needs_grad(self, name: str, i: int) -> bool:
        """Whether operand ``i`` of ``name`` gets a gradient: floating point, not a model input."""
        return self.operand_full[name][i].dtype.is_floating and self.producer[(name, i)].op_type is not OpType.INPUT


_WIRINGS: dict[int, tuple] = {}  # id(base) -> (weakref to base, node count, Wiring)


def wiring_of(pcg: PCG) -> Wiring:
    """The (memoized) wiring of a base PCG, in its topological order; a PCG that grew since is wired
    anew."""
    hit = _WIRINGS.get(id(pcg))
    if hit is not None and hit[0]() is pcg and hit[1] == len(pcg.nodes):
        return hit[2]
    w = Wiring(pcg, pcg.topological_order())  # the order apply_configs builds the parallel PCG in
    _WIRINGS[id(pcg)] = (weakref.ref(pcg, lambda _, k=id(pcg): _WIRINGS.pop(k, None)), len(pcg.nodes), w)
    return w


# ---- the two strategy types -----------------------------------------------------------------------

class Strategy:
    """What every strategy gives: a parallel PCG (``pcg``), a machine view per compute operator of it
    (``views``, by its node id), and what lowering reads: ``wiring()`` and, per compute operator,
    ``shapes(name)`` and ``view(name)``. Two types implement it: ``ConfigStrategy`` and
    ``GraphStrategy``."""

    __slots__ = ()

    def wiring(self) -> Wiring:
        return self._wiring

    def shapes(self, name: str) -> OpShapes:
        raise NotImplementedError

    def view(self, name: str) -> MachineView:
        raise NotImplementedError

    def check_views(self, machine: Machine) -> None:
        """Every compute operator's view places its pieces on distinct existing devices."""
        for name in self.wiring().ops:
            view = self.view(name)
            try:
                devices = view_devices(machine, view, tuple(d for _, d in self.shapes(name).degree))
            except FlexrtError as e:
                raise StrategyError(f"operator '{name}': {e}") from None
            if len(set(devices)) != len(devices):
                raise StrategyError(f"operator '{name}': view {view} puts two pieces on one device")

    def with_fusion(self, plan) -> "Strategy":
        """The same strategy with a fusion plan (``flexrt.strategy.fusion``; None or an empty plan:
        none). The plan is checked against the strategy when it is lowered (``check_fusion``)."""
        out = copy.copy(self)
        out.fusion = plan or None
        return out

    def with_pipeline(self, plan) -> "Strategy":
        """The same strategy, pipelined by ``plan`` (``flexrt.strategy.pipeline.PipelinePlan``, whose
        micro-batched model must be this strategy's; None: not pipelined)."""
        out = copy.copy(self)
        out.pipeline = plan
        return out

    def with_recompute(self, names) -> "Strategy":
        """The same strategy recomputing the activations of the named original compute operators
        (``flexrt.strategy.recompute``; empty: none)."""
        from flexrt.strategy.recompute import recomputed
        ops = list(self.pipeline.model.copies) if self.pipeline is not None else self.wiring().ops
        out = copy.copy(self)
        out.recompute = recomputed(names, ops)
        return out

    @classmethod
    def from_configs(cls, base: PCG, configs: Mapping[int, OpConfig]) -> "ConfigStrategy":
        """Shorthand for ``ConfigStrategy(base, configs)``."""
        return ConfigStrategy(base, configs)


def _source_shape(wiring: Wiring, name: str) -> ParallelTensorShape:
    node = wiring.nodes[name]
    if node.op_type is OpType.WEIGHT:
        s = node.attrs.shape
    else:
        s = wiring.inputs[name]
    return ParallelTensorShape.of(s.dims, [1] * s.rank, 1, 1, s.dtype)


class ConfigStrategy(Strategy):
    """Per-operator configurations (base node id -> ``OpConfig``) over a base PCG without
    parallelization operators. Validated at construction (every compute operator configured, each
    configuration valid, every edge reshardable); ``with_config`` re-checks only what changed. The
    parallel PCG (``pcg``, ``views``, ``origin``) is built by ``apply_configs`` when first asked for."""

    __slots__ = ("base", "configs", "_wiring", "_names", "_pcg", "_views", "_origin", "_shapes", "fusion", "pipeline",
                 "recompute")

    def __init__(self, base: PCG, configs: Mapping[int, OpConfig], _check: Optional[set] = None,
                 _wiring: Optional[Wiring] = None, _shapes: Optional[dict] = None) -> None:
        self.base = base
        self.configs = dict(configs)
        self.fusion = None  # a FusionPlan (``with_fusion``)
        self.pipeline = None  # a PipelinePlan (``with_pipeline``)
        self.recompute = frozenset()  # original operators whose activations are recomputed (``with_recompute``)
        self._wiring = _wiring or wiring_of(base)
        self._names: dict[str, int] = {name: self._wiring.nodes[name].id for name in self._wiring.ops}
        self._pcg = self._views = self._origin = None
        self._shapes: dict[str, OpShapes] = _shapes if _shapes is not None else {}
        w = self._wiring
        if _check is None:
            missing = [n for n in w.ops if self._names[n] not in self.configs]
            if missing:
                raise StrategyError(f"no configuration for operator '{missing[0]}'"
                                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
            _check = set(w.ops)
        if len(_check) == len(w.ops):   # every operator: every edge once, as its consumer's operand
            edges = [(name, i) for name in w.ops for i in range(len(w.nodes[name].inputs))]
        else:
            edges = set()
            for name in _check:
                edges.update((name, i) for i in range(len(w.nodes[name].inputs)))
                edges.update(w.consumers.get(name, ()))
        for name in _check:
            self.shapes(name)
        sources: dict[str, ParallelTensorShape] = {}
        fits: set = set()       # (id(src), id(dst)) of shape pairs that reshard (op_shapes are memoized)
        bad = []
        for c, i in edges:
            p = w.producer[(c, i)]
            if p.op_type not in (OpType.INPUT, OpType.WEIGHT):
                src = self.shapes(p.name).outputs[p.index]
            else:
                src = sources.get(p.name) or sources.setdefault(p.name, _source_shape(w, p.name))
            dst = self.shapes(c).operands[i]
            if (id(src), id(dst)) in fits:
                continue
            try:
                resharding_steps(src, dst)
                fits.add((id(src), id(dst)))
            except StrategyError:
                bad.append((c, i))
        for c, i in sorted(bad, key=lambda e: (w.position[e[0]], e[1]))[:1]:     # the first in graph order
            p = w.producer[(c, i)]
            src = self.shapes(p.name).outputs[p.index] if p.op_type not in (OpType.INPUT, OpType.WEIGHT) \
                else sources[p.name]
            try:
                resharding_steps(src, self.shapes(c).operands[i])
            except StrategyError as e:
                raise StrategyError(f"'{c}' {'weight' if p.op_type is OpType.WEIGHT else 'input'} {i}: {e}") from None

    def shapes(self, name: str) -> OpShapes:
        hit = self._shapes.get(name)
        if hit is not None:
            return hit
        node = self._wiring.nodes[name]
        nw = op_def(node.op_type).num_weights(node.attrs)
        full = self._wiring.operand_full[name]
        hit = self._shapes[name] = op_shapes(node, list(full[:len(full) - nw]),
                                             self.configs[self._names[name]].degree_map)
        return hit

    def view(self, name: str) -> MachineView:
        return self.configs[self._names[name]].view

    def with_configs(self, configs: Mapping[int, OpConfig]) -> "ConfigStrategy":
        """The strategy with some operators' configurations replaced (an MCMC proposal): checks the
        changed operators and their edges only."""
        changed = {self.base.node(nid).name for nid in configs}
        shapes = {k: v for k, v in self._shapes.items() if k not in changed}
        out = ConfigStrategy(self.base, {**self.configs, **configs}, changed, self._wiring, shapes)
        out.pipeline = self.pipeline
        out.recompute = self.recompute
        return out

    def with_config(self, node_id: int, config: OpConfig) -> "ConfigStrategy":
        """The strategy with one operator's configuration replaced."""
        return self.with_configs({node_id: config})

    def _build(self) -> None:
        pcg, mapping = apply_configs(self.base, {nid: c.degree_map for nid, c in self.configs.items()})
        self._pcg, self._origin = pcg, mapping
        self._views = {mapping[nid]: self.configs[nid].view for nid in self._names.values()}

    @property
    def pcg(self) -> PCG:
        if self._pcg is None:
            self._build()
        return self._pcg

    @property
    def views(self) -> dict[int, MachineView]:
        if self._views is None:
            self._build()
        return self._views

    @property
    def origin(self) -> dict[int, int]:
        """Base node id -> node id in ``pcg``."""
        if self._origin is None:
            self._build()
        return self._origin

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigStrategy) and self.base is other.base and self.configs == other.configs \
            and self.fusion == other.fusion and self.pipeline is other.pipeline \
            and self.recompute == other.recompute

    __hash__ = None


class GraphStrategy(Strategy):
    """A whole parallel PCG and a machine view per compute operator (by node id)."""

    __slots__ = ("pcg", "views", "_wiring", "_ids", "_shapes", "fusion", "pipeline", "recompute")

    def __init__(self, pcg: PCG, views: Mapping[int, MachineView]) -> None:
        self.pcg = pcg
        self.views = dict(views)
        self.fusion = None  # a FusionPlan (``with_fusion``)
        self.pipeline = None  # a PipelinePlan (``with_pipeline``)
        self.recompute = frozenset()  # original operators whose activations are recomputed (``with_recompute``)
        self._wiring = Wiring(pcg)
        self._ids = {name: self._wiring.nodes[name].id for name in self._wiring.ops}
        self._shapes: dict[str, OpShapes] = {}
        missing = [n for n, i in self._ids.items() if i not in self.views]
        if missing:
            raise StrategyError(f"operator '{missing[0]}' has no machine view")

    def shapes(self, name: str) -> OpShapes:
        hit = self._shapes.get(name)
        if hit is not None:
            return hit
        node = self._wiring.nodes[name]
        axes, degree = node_axes(self.pcg, node)
        hit = self._shapes[name] = OpShapes(tuple(axes), tuple((a.name, degree[a.name]) for a in axes),
                        tuple(self.pcg.shape(r) for r in node.inputs), tuple(self.pcg.output_shapes(node.id)))
        return hit

    def view(self, name: str) -> MachineView:
        return self.views[self._ids[name]]
