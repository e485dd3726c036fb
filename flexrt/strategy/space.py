"""The SOAP search space of one operator and of a model: which configurations are valid, random
ones, data parallelism (FlexFlow §4).

Entry points: ``data_parallel`` (``data_parallel_degree``), ``valid_configs``, ``apply_single``, ``random_config``,
``random_strategy``, ``all_axes``, ``soap_axes``, ``embed_view``.
"""

from __future__ import annotations

import math
import random
from typing import Mapping, Optional

from flexrt.errors import ShapeError, StrategyError
from flexrt.ir.parallel_axes import axes_of
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, Projection, data_parallel_view, enumerate_views, view_devices
from flexrt.strategy.config import SOAP_KINDS, ConfigStrategy, OpConfig, data_shapes, is_compute, op_shapes


def all_axes(pcg: PCG, node: Node):
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    return axes_of(opdef, node.attrs, [pcg.shape(r).tensor_shape for r in node.inputs[:len(node.inputs) - nw]])


def soap_axes(pcg: PCG, node: Node):
    """The axes a SOAP configuration chooses: not replicas, and not the axes that consume partial
    sums (those follow from an upstream reduction-parallel operator)."""
    return [a for a in all_axes(pcg, node) if a.kind in SOAP_KINDS
            and not any(slot.kind is SlotKind.SUM for _, slot in a.operands)]


def embed_view(view: MachineView, axis: int, num_axes: int) -> MachineView:
    """A 1-D view placed on one axis of an operator with ``num_axes`` axes (the others degree 1)."""
    strides = [1] * num_axes
    projections = [Projection.INTRA] * num_axes
    strides[axis] = view.strides[0]
    projections[axis] = view.projections[0]
    return MachineView(view.start, tuple(strides), tuple(projections))


def data_parallel_degree(batch: int, devices: int) -> int:
    """The devices data parallelism uses for ``batch`` samples on ``devices``: the largest count
    dividing both (fewer than ``devices`` where the batch does not divide over them)."""
    return max(k for k in divisors(devices) if batch % k == 0)


def data_parallel(base: PCG, machine: Machine, degree: Optional[int] = None) -> ConfigStrategy:
    """Every operator split along its sample axis over ``degree`` devices (default: all that divide
    the batch), the view spanning devices 0..degree-1."""
    n = degree or machine.num_devices
    configs = {}
    for node in base.nodes:
        if not is_compute(node):
            continue
        axes = all_axes(base, node)
        sample = [a for a in axes if a.kind is AxisKind.SAMPLE]
        d = 1
        if sample:
            d = data_parallel_degree(base.shape(node.inputs[0]).sizes[0], n)
        view = embed_view(data_parallel_view(machine, d), axes.index(sample[0]) if sample else 0, len(axes))
        configs[node.id] = OpConfig(((sample[0].name, d),) if sample and d > 1 else (), view)
    return ConfigStrategy(base, configs)


def valid_configs(base: PCG, node: Node, machine: Machine, max_degree: Optional[int] = None,
                  kinds: Optional[frozenset] = None) -> list[dict[str, int]]:
    """Every SOAP degree assignment of ``node`` with a total degree up to the number of devices that
    its shapes allow (degrees divide the number of devices), in enumeration order; with ``kinds``,
    only those that split no axis of another kind (the same assignments, in the same order, as
    filtering the whole list, without trying the others)."""
    limit = max_degree or machine.num_devices
    axes = soap_axes(base, node)
    every = divisors(machine.num_devices)
    choices = [every if kinds is None or a.kind in kinds else (1,) for a in axes]
    out = []

    def rec(i, acc, total):
        if i == len(axes):
            try:
                apply_single(base, node, acc)
            except (ShapeError, StrategyError):
                return
            out.append(dict(acc))
            return
        for d in choices[i]:
            if total * d > limit:
                break
            acc[axes[i].name] = d
            rec(i + 1, acc, total * d)
        del acc[axes[i].name]

    rec(0, {}, 1) if axes else out.append({})
    return out


def config_at(base: PCG, node: Node, machine: Machine, degrees, device: int = 0) -> OpConfig:
    """The first of ``degrees`` (a dict axis name -> degree, or a list of such dicts: alternatives in
    order; axes the operator lacks are ignored) valid for ``node``, else the node unsplit; the view
    starting at ``device`` where there is one, the most compact of those (the smallest span of device
    ids: a block of n / p devices is the devices ``device .. device + n/p - 1``, not one per node)."""
    names = [a.name for a in all_axes(base, node)]
    want = {}
    for alternative in ([degrees] if isinstance(degrees, Mapping) else degrees):
        ask = {k: v for k, v in alternative.items() if k in names and v > 1}
        if ask and _is_valid(base, node, machine, ask):
            want = ask
            break
    per_axis = tuple(want.get(n, 1) for n in names)
    views = enumerate_views(machine, per_axis)
    here = [v for v in views if v.start == device] or views[:1]

    def span(view) -> int:
        devices = view_devices(machine, view, per_axis)
        return max(devices) - min(devices)
    return OpConfig(tuple(want.items()), min(here, key=span))


def _is_valid(base: PCG, node: Node, machine: Machine, degrees: Mapping[str, int]) -> bool:
    """Whether ``degrees`` (every degree > 1) is among ``valid_configs`` of ``node``, without
    enumerating them: SOAP axes only, each degree a divisor of the devices, their product at most
    the devices, and a valid configuration."""
    n = machine.num_devices
    soap = {a.name for a in soap_axes(base, node)}
    if not set(degrees) <= soap or any(n % d for d in degrees.values()) or math.prod(degrees.values()) > n:
        return False
    try:
        apply_single(base, node, degrees)
    except (ShapeError, StrategyError):
        return False
    return True


def apply_single(base: PCG, node: Node, degrees: Mapping[str, int]) -> None:
    """Raise ShapeError/StrategyError when ``degrees`` is not a valid configuration of ``node``."""
    op_shapes(node, data_shapes(base, node), degrees)


def random_config(base: PCG, node: Node, machine: Machine, rng: random.Random) -> OpConfig:
    """A random valid configuration of one operator: degrees, then a random view for them."""
    degrees = rng.choice(valid_configs(base, node, machine))
    views = enumerate_views(machine, tuple(degrees.get(a.name, 1) for a in all_axes(base, node)))
    return OpConfig(tuple((k, v) for k, v in degrees.items() if v > 1), rng.choice(views))


def random_strategy(base: PCG, machine: Machine, seed: int) -> ConfigStrategy:
    """Every operator gets a random valid configuration (deterministic for a seed)."""
    rng = random.Random(seed)
    configs = {n.id: random_config(base, n, machine, rng) for n in base.nodes if is_compute(n)}
    return ConfigStrategy(base, configs)
