"""Strategies: a parallel computation graph plus a machine view per operator (DESIGN.md).

A SOAP configuration (FlexFlow §4) gives each operator a degree per parallel axis (sample,
attribute, parameter, reduction; see ``flexrt.ir.registry.ParallelAxis``) and a machine view.
``apply_configs`` turns a model's sequential PCG and such configurations into the parallel PCG,
inserting on every edge the parallelization operators (Unity §3.3) that take the producer's
layout to the one the consumer needs: Reduction (or AllReduce) for partial sums, Combine and
Repartition per dimension, Replicate for copies. Chains are shared, so a weight read by many
unrolled RNN steps is replicated once.

Entry points: ``Strategy``, ``OpConfig``, ``apply_configs``, ``data_parallel``, ``random_strategy``,
``save_strategy``, ``load_strategy``.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Mapping, Optional

from flexrt.errors import FlexrtError, ShapeError, StrategyError
from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS
from flexrt.ir.ops import (AllReduceAttrs, CombineAttrs, ReductionAttrs, RepartitionAttrs, ReplicateAttrs)
from flexrt.ir.parallel_axes import required_weight_shapes, solve_axes, tensor_degrees
from flexrt.ir.parallel_tensor import ParallelTensorShape, divisors
from flexrt.ir.pcg import PCG, Node, TensorRef
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, Projection, data_parallel_view, enumerate_views, view_devices

FORMAT = "flexrt.strategy"
VERSION = 1
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


def node_axes(pcg: PCG, node: Node):
    """The parallel axes of a compute node and their degrees, read from its data inputs' shapes."""
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    data = [pcg.shape(r) for r in node.inputs[:len(node.inputs) - nw]]
    return solve_axes(opdef, node.attrs, node.name, data)


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


_TARGETS: dict = {}  # (attrs, input shapes, degrees) -> (operand targets, weight targets); searches repeat them


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
        opdef = op_def(node.op_type)
        nw = opdef.num_weights(node.attrs)
        data_refs, weight_refs = node.inputs[:len(node.inputs) - nw], node.inputs[len(node.inputs) - nw:]
        full = [base.shape(r).tensor_shape for r in data_refs]
        axes = opdef.parallel_axes(node.attrs, full)
        deg = _check_degrees(node, axes, degrees.get(nid, {}))
        key = (node.attrs, tuple(full), tuple(sorted(deg.items())))
        if key in _TARGETS:
            targets, wtargets = _TARGETS[key]
        else:
            try:
                targets = [ParallelTensorShape.of(s.dims, d.shard, d.sum, d.copy, s.dtype) for i, s in enumerate(full)
                           for d in [tensor_degrees(axes, deg, i, s.rank, False)]]
                wtargets = required_weight_shapes(opdef, node.attrs, node.name, targets)
            except ShapeError as e:
                raise ShapeError(f"strategy for '{node.name}' ({node.op_type.value}) with degrees "
                                 f"{ {k: v for k, v in deg.items() if v > 1} }: {e}") from None
            if len(_TARGETS) > 100_000:
                _TARGETS.clear()
            _TARGETS[key] = (targets, wtargets)
        ins = [b.reshard(ref(r), t, f"'{node.name}' input {i}") for i, (r, t) in enumerate(zip(data_refs, targets))]
        ins += [b.reshard(ref(r), t, f"'{node.name}' weight {i}") for i, (r, t) in enumerate(zip(weight_refs, wtargets))]
        mapping[nid] = b.add(node.attrs, ins, node.name).node
    return b.pcg, mapping


@dataclass
class Strategy:
    """A parallel PCG and a machine view for each of its compute operators.

    ``configs`` (base node id -> OpConfig) and ``base`` are kept when the strategy came from SOAP
    configurations, so it can be saved per operator and changed one operator at a time.
    """

    pcg: PCG
    views: dict[int, MachineView]
    base: Optional[PCG] = None
    configs: dict[int, OpConfig] = field(default_factory=dict)
    origin: dict[int, int] = field(default_factory=dict)  # base node id -> pcg node id

    @classmethod
    def from_configs(cls, base: PCG, configs: Mapping[int, OpConfig]) -> "Strategy":
        pcg, mapping = apply_configs(base, {nid: c.degree_map for nid, c in configs.items()})
        views = {}
        for n in base.nodes:
            if is_compute(n):
                if n.id not in configs:
                    raise StrategyError(f"no configuration for operator '{n.name}'")
                views[mapping[n.id]] = configs[n.id].view
        return cls(pcg, views, base, dict(configs), mapping)

    def with_config(self, node_id: int, config: OpConfig) -> "Strategy":
        """The strategy with one operator's configuration replaced (an MCMC proposal)."""
        if self.base is None:
            raise StrategyError("this strategy was not built from per-operator configurations")
        configs = dict(self.configs)
        configs[node_id] = config
        return Strategy.from_configs(self.base, configs)

    def check_views(self, machine: Machine) -> None:
        """Every compute node's view must place its pieces on distinct existing devices."""
        for nid, view in self.views.items():
            node = self.pcg.node(nid)
            try:
                devices = view_devices(machine, view, axis_degrees(self.pcg, node))
            except FlexrtError as e:
                raise StrategyError(f"operator '{node.name}': {e}") from None
            if len(set(devices)) != len(devices):
                raise StrategyError(f"operator '{node.name}': view {view} puts two pieces on one device")


def _all_axes(pcg: PCG, node: Node):
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    return opdef.parallel_axes(node.attrs, [pcg.shape(r).tensor_shape for r in node.inputs[:len(node.inputs) - nw]])


def _soap_axes(pcg: PCG, node: Node):
    """The axes a SOAP configuration chooses: not replicas, and not the axes that consume partial
    sums (those follow from an upstream reduction-parallel operator)."""
    return [a for a in _all_axes(pcg, node) if a.kind in SOAP_KINDS
            and not any(slot.kind is SlotKind.SUM for _, slot in a.operands)]


def embed_view(view: MachineView, axis: int, num_axes: int) -> MachineView:
    """A 1-D view placed on one axis of an operator with ``num_axes`` axes (the others degree 1)."""
    strides = [1] * num_axes
    projections = [Projection.INTRA] * num_axes
    strides[axis] = view.strides[0]
    projections[axis] = view.projections[0]
    return MachineView(view.start, tuple(strides), tuple(projections))


def data_parallel(base: PCG, machine: Machine, degree: Optional[int] = None) -> Strategy:
    """Every operator split along its sample axis over ``degree`` devices (default: all that divide
    the batch), the view spanning devices 0..degree-1."""
    n = degree or machine.num_devices
    configs = {}
    for node in base.nodes:
        if not is_compute(node):
            continue
        axes = _all_axes(base, node)
        sample = [a for a in axes if a.kind is AxisKind.SAMPLE]
        d = 1
        if sample:
            batch = base.shape(node.inputs[0]).sizes[0]
            d = max(k for k in divisors(n) if batch % k == 0)
        view = embed_view(data_parallel_view(machine, d), axes.index(sample[0]) if sample else 0, len(axes))
        configs[node.id] = OpConfig(((sample[0].name, d),) if sample and d > 1 else (), view)
    return Strategy.from_configs(base, configs)


def valid_configs(base: PCG, node: Node, machine: Machine, max_degree: Optional[int] = None) -> list[dict[str, int]]:
    """Every SOAP degree assignment of ``node`` with a total degree up to the number of devices that
    its shapes allow (degrees divide the number of devices)."""
    limit = max_degree or machine.num_devices
    axes = _soap_axes(base, node)
    choices = divisors(machine.num_devices)
    out = []

    def rec(i, acc, total):
        if i == len(axes):
            try:
                apply_single(base, node, acc)
            except (ShapeError, StrategyError):
                return
            out.append(dict(acc))
            return
        for d in choices:
            if total * d > limit:
                break
            acc[axes[i].name] = d
            rec(i + 1, acc, total * d)
        del acc[axes[i].name]

    rec(0, {}, 1) if axes else out.append({})
    return out


def apply_single(base: PCG, node: Node, degrees: Mapping[str, int]) -> None:
    """Raise ShapeError/StrategyError when ``degrees`` is not a valid configuration of ``node``."""
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    full = [base.shape(r).tensor_shape for r in node.inputs[:len(node.inputs) - nw]]
    axes = opdef.parallel_axes(node.attrs, full)
    deg = _check_degrees(node, axes, degrees)
    shapes = [ParallelTensorShape.of(s.dims, d.shard, d.sum, d.copy, s.dtype) for i, s in enumerate(full)
              for d in [tensor_degrees(axes, deg, i, s.rank, False)]]
    solve_axes(opdef, node.attrs, node.name, shapes)
    required_weight_shapes(opdef, node.attrs, node.name, shapes)
    for k, o in enumerate(opdef.output_shapes(node.attrs, full)):
        d = tensor_degrees(axes, deg, k, o.rank, True)
        ParallelTensorShape.of(o.dims, d.shard, d.sum, d.copy, o.dtype)


def random_config(base: PCG, node: Node, machine: Machine, rng: random.Random) -> OpConfig:
    """A random valid configuration of one operator: degrees, then a random view for them."""
    degrees = rng.choice(valid_configs(base, node, machine))
    views = enumerate_views(machine, tuple(degrees.get(a.name, 1) for a in _all_axes(base, node)))
    return OpConfig(tuple((k, v) for k, v in degrees.items() if v > 1), rng.choice(views))


def random_strategy(base: PCG, machine: Machine, seed: int) -> Strategy:
    """Every operator gets a random valid configuration (deterministic for a seed)."""
    rng = random.Random(seed)
    configs = {n.id: random_config(base, n, machine, rng) for n in base.nodes if is_compute(n)}
    return Strategy.from_configs(base, configs)


# ---- files ---------------------------------------------------------------------------------------

def _view_json(v: MachineView) -> dict:
    return {"start": v.start, "strides": list(v.strides), "projections": [p.name for p in v.projections]}


def _view_from_json(d, where: str) -> MachineView:
    try:
        return MachineView(int(d["start"]), tuple(int(s) for s in d["strides"]),
                           tuple(Projection[p] for p in d["projections"]))
    except (KeyError, TypeError, ValueError) as e:
        raise StrategyError(f"{where}: malformed view {d!r} ({e!r}); expected start, strides, projections "
                            f"(INTRA/INTER)") from None


def _machine_json(machine: Machine) -> dict:
    return {"name": machine.name, "num_nodes": machine.num_nodes, "devices_per_node": machine.devices_per_node}


def strategy_to_json(strategy: Strategy, machine: Machine) -> dict:
    if strategy.base is None:
        return {"format": FORMAT, "version": VERSION, "machine": _machine_json(machine),
                "pcg": strategy.pcg.to_json(),
                "views": {strategy.pcg.node(n).name: _view_json(v) for n, v in sorted(strategy.views.items())}}
    ops = []
    for nid, cfg in sorted(strategy.configs.items()):
        node = strategy.base.node(nid)
        ops.append({"name": node.name, "op": node.op_type.value, "degrees": dict(cfg.degrees),
                    "view": _view_json(cfg.view)})
    return {"format": FORMAT, "version": VERSION, "model_hash": strategy.base.structural_hash(),
            "machine": _machine_json(machine), "operators": ops}


def save_strategy(path: str, strategy: Strategy, machine: Machine) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strategy_to_json(strategy, machine), f, indent=1)
        f.write("\n")


def strategy_from_json(data: dict, base: Optional[PCG], machine: Machine, source: str = "<json>") -> Strategy:
    """Rebuild a strategy; the model (by PCG hash) and the machine must be the ones it was made for."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StrategyError(f"{source}: not a flexrt strategy file (missing \"format\": \"{FORMAT}\")")
    m = data.get("machine", {})
    here = _machine_json(machine)
    diff = [f"{k} {m.get(k)!r} (file) vs {here[k]!r} (this machine)" for k in ("num_nodes", "devices_per_node")
            if m.get(k) != here[k]]
    if diff:
        raise StrategyError(f"{source}: the strategy was made for machine {m.get('name')!r} and does not fit "
                            f"{machine.name!r}: {'; '.join(diff)}")
    if "pcg" in data:
        pcg = PCG.from_json(data["pcg"], source)
        views = {pcg.node_by_name(name).id: _view_from_json(v, f"{source}: views.{name}")
                 for name, v in data.get("views", {}).items()}
        s = Strategy(pcg, views)
        s.check_views(machine)
        return s
    if base is None:
        raise StrategyError(f"{source}: a per-operator strategy needs the model it was made for")
    if data.get("model_hash") != base.structural_hash():
        raise StrategyError(f"{source}: the strategy was made for another model (PCG hash "
                            f"{data.get('model_hash')} vs this model's {base.structural_hash()})")
    configs = {}
    for i, op in enumerate(data.get("operators", [])):
        where = f"{source}: operators[{i}]"
        try:
            node = base.node_by_name(op["name"])
        except (KeyError, FlexrtError):
            raise StrategyError(f"{where}: no operator named {op.get('name')!r} in this model") from None
        if op.get("op") != node.op_type.value:
            raise StrategyError(f"{where}: '{node.name}' is a {node.op_type.value} here, {op.get('op')!r} in the file")
        configs[node.id] = OpConfig(tuple(sorted((str(k), v) for k, v in op.get("degrees", {}).items())),
                                    _view_from_json(op.get("view"), where))
    missing = [n.name for n in base.nodes if is_compute(n) and n.id not in configs]
    if missing:
        raise StrategyError(f"{source}: no configuration for {len(missing)} operator(s): {', '.join(missing[:5])}")
    s = Strategy.from_configs(base, configs)
    s.check_views(machine)
    return s


def load_strategy(path: str, base: Optional[PCG], machine: Machine) -> Strategy:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise StrategyError(f"cannot read strategy file {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise StrategyError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    return strategy_from_json(data, base, machine, path)
