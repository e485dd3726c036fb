"""The search space: which configurations each compute operator may take (FlexFlow §4, §6).

:class:`SearchSpace` follows FlexFlow's flags: the sample axis always; attribute axes with
``--enable-attribute-parallel``; parameter axes with ``--enable-parameter-parallel``, which also
gates reduction axes (splitting a contraction dimension partitions the weight's input dimension,
i.e. it is parameter parallelism whose outputs are partial sums); ``--only-data-parallel`` keeps
the sample axis alone. Device placement (the operator's machine view) is always searched.
``tie_shared`` (off by default) makes operators that share a weight take one configuration
together (:meth:`OpChoices.units`).

:class:`OpChoices` holds the configurations of every compute operator of one model in one space,
computed once per operator: what every search algorithm draws from.

Entry points: ``SearchSpace``, ``OpChoices``.

Example:
    >>> str(SearchSpace.from_flags(enable_parameter_parallel=True))
    'sample+parameter+reduction'
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind
from flexrt.machine import Machine
from flexrt.machine.views import enumerate_views, view_devices
from flexrt.strategy.config import OpConfig, Strategy, is_compute, node_axes
from flexrt.strategy.space import valid_configs

__all__ = ["OpChoices", "SearchSpace"]


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Which parallel axes a configuration may split (views are always searched).

    Example:
        >>> SearchSpace.from_flags(enable_parameter_parallel=True).kinds == frozenset(
        ...     {AxisKind.SAMPLE, AxisKind.PARAMETER, AxisKind.REDUCTION})
        True
    """

    kinds: frozenset = frozenset({AxisKind.SAMPLE})
    # "all": every view of enumerate_views; "aligned": pieces on a contiguous block of devices
    # starting at a multiple of its size, in piece order (FlexFlow's usual placements; smaller)
    placements: str = "all"
    # operators that share a weight (the steps of an unrolled RNN layer, FlexFlow's shared_op)
    # take one configuration together: the same degree per axis kind on the same devices, as
    # FlexFlow's RNN operators sharing parameters are placed together (§8.3's RNNLM; smaller)
    tie_shared: bool = False

    def __post_init__(self):
        if self.placements not in ("all", "aligned"):
            raise ConfigError(f"placements must be 'all' or 'aligned', got {self.placements!r}")
        if isinstance(self.kinds, (str, AxisKind)) or not hasattr(self.kinds, "__iter__"):
            raise ConfigError(f"a search space's kinds are a set of AxisKind, got {self.kinds!r}")
        object.__setattr__(self, "kinds", frozenset(self.kinds))  # a set given stays immutable
        bad = [k for k in self.kinds if not isinstance(k, AxisKind) or k is AxisKind.REPLICA]
        if bad:
            raise ConfigError(f"a search space splits SOAP axes (sample, attribute, parameter, reduction); got {bad}")
        if not isinstance(self.tie_shared, bool):
            raise ConfigError(f"tie_shared must be True or False, got {self.tie_shared!r}")

    @classmethod
    def from_flags(cls, only_data_parallel: bool = False, enable_parameter_parallel: bool = False,
                   enable_attribute_parallel: bool = False) -> "SearchSpace":
        """The space of FlexFlow's flags (module docstring): the sample axis, plus parameter and
        reduction axes and/or attribute axes, unless ``only_data_parallel`` (which contradicts
        them: a ConfigError)."""
        if only_data_parallel and (enable_parameter_parallel or enable_attribute_parallel):
            given = [f for f, on in (("--enable-parameter-parallel", enable_parameter_parallel),
                                     ("--enable-attribute-parallel", enable_attribute_parallel)) if on]
            raise ConfigError(f"--only-data-parallel contradicts {' and '.join(given)}: give one or the other")
        kinds = {AxisKind.SAMPLE}
        if not only_data_parallel:
            if enable_parameter_parallel:
                kinds |= {AxisKind.PARAMETER, AxisKind.REDUCTION}
            if enable_attribute_parallel:
                kinds.add(AxisKind.ATTRIBUTE)
        return cls(frozenset(kinds))

    @classmethod
    def from_config(cls, ffconfig) -> "SearchSpace":
        """The space of an ``FFConfig``'s flags."""
        return cls.from_flags(ffconfig.only_data_parallel, ffconfig.enable_parameter_parallel,
                              ffconfig.enable_attribute_parallel)

    @classmethod
    def full(cls, placements: str = "all") -> "SearchSpace":
        """Every SOAP axis: sample, attribute, parameter and reduction."""
        return cls(frozenset({AxisKind.SAMPLE, AxisKind.ATTRIBUTE, AxisKind.PARAMETER, AxisKind.REDUCTION}),
                   placements)

    def __str__(self) -> str:
        return "+".join(k.value for k in AxisKind if k in self.kinds) + (
            "" if self.placements == "all" else f" ({self.placements} placements)") + (
            " (shared weights tied)" if self.tie_shared else "")


class OpChoices:
    """The configurations each compute operator may take in a space, computed once per operator.

    Example:
        >>> choices = OpChoices(pcg, machine, SearchSpace.full())          # doctest: +SKIP
        >>> all(choices.contains(s) for s in strategies_of_the_space)       # doctest: +SKIP
        True
    """

    def __init__(self, base: PCG, machine: Machine, space: SearchSpace) -> None:
        self.base, self.machine, self.space = base, machine, space
        self.ops: list[Node] = [n for n in base.nodes if is_compute(n)]
        self._degrees: dict[int, list[dict[str, int]]] = {}
        self._views: dict[tuple[int, tuple[int, ...]], list] = {}
        self._axes: dict[int, list] = {}
        self._by_signature: dict[int, dict] = {}
        self._neighbours: Optional[dict[int, list[Node]]] = None
        self._units: Optional[list[list[Node]]] = None

    def axes(self, node: Node) -> list:
        """The node's SOAP axes (``node_axes``), cached."""
        if node.id not in self._axes:
            self._axes[node.id] = node_axes(self.base, node)[0]
        return self._axes[node.id]

    def degrees(self, node: Node) -> list[dict[str, int]]:
        """Degree assignments of the node whose split axes are all of an allowed kind."""
        if node.id not in self._degrees:
            self._degrees[node.id] = valid_configs(self.base, node, self.machine, kinds=self.space.kinds)
        return self._degrees[node.id]

    def views(self, node: Node, degrees: dict[str, int]) -> list:
        key = tuple(degrees.get(a.name, 1) for a in self.axes(node))
        if (node.id, key) not in self._views:
            views = enumerate_views(self.machine, key)
            if self.space.placements == "aligned":
                n = math.prod(key)
                views = [v for v in views if v.start % n == 0
                         and view_devices(self.machine, v, key) == tuple(range(v.start, v.start + n))]
            self._views[(node.id, key)] = views
        return self._views[(node.id, key)]

    def configs(self, node: Node) -> list[OpConfig]:
        """Every (degrees, view) configuration of the node in the space."""
        return [OpConfig(tuple(d.items()), v) for d in self.degrees(node) for v in self.views(node, d)]

    def random(self, node: Node, rng: random.Random, avoid: Optional[OpConfig] = None) -> OpConfig:
        """A random configuration: uniform degrees, then a uniform view for them (FlexFlow's
        proposal); ``avoid`` (the current one) is redrawn a few times so proposals move."""
        cfg = avoid
        for _ in range(8):
            d = rng.choice(self.degrees(node))
            cfg = OpConfig(tuple(d.items()), rng.choice(self.views(node, d)))
            if cfg != avoid:
                return cfg
        return cfg

    def signature(self, node: Node, cfg: OpConfig) -> tuple:
        """What a configuration does, comparable across operators: degree per axis kind, and the
        devices of its pieces in order."""
        kind = {a.name: a.kind for a in self.axes(node)}
        per_kind: dict = {}
        for a, d in cfg.degrees:
            per_kind[kind[a]] = per_kind.get(kind[a], 1) * d
        degs = tuple(cfg.degree_map.get(a.name, 1) for a in self.axes(node))
        return (tuple(sorted((k.value, d) for k, d in per_kind.items())), view_devices(self.machine, cfg.view, degs))

    def matching(self, node: Node, signature: tuple) -> Optional[OpConfig]:
        """The node's configuration with this signature, if it has one."""
        if node.id not in self._by_signature:
            self._by_signature[node.id] = {}
            for c in self.configs(node):
                self._by_signature[node.id].setdefault(self.signature(node, c), c)
        return self._by_signature[node.id].get(signature)

    def neighbours(self, node: Node) -> list[Node]:
        """Compute operators that produce this node's inputs or consume its outputs."""
        if self._neighbours is None:
            ids = {n.id for n in self.ops}
            nb: dict[int, set[int]] = {i: set() for i in ids}
            for n in self.ops:
                for r in n.inputs:
                    if r.node in ids:
                        nb[n.id].add(r.node)
                        nb[r.node].add(n.id)
            self._neighbours = {i: [self.base.node(j) for j in sorted(v)] for i, v in nb.items()}
        return self._neighbours[node.id]

    def movable(self) -> list[Node]:
        """Operators with more than one configuration (the ones a proposal may change)."""
        return [n for n in self.ops if len(self.degrees(n)) > 1 or len(self.views(n, self.degrees(n)[0])) > 1]

    # -- units: the operators that change together (one each unless the space ties shared weights)

    def units(self) -> list[list[Node]]:
        """The compute operators grouped into units that take one configuration together, in
        topological order of their first operators: one operator per unit, or with
        ``space.tie_shared`` the operators reading a common weight (transitively) in one unit."""
        if self._units is None:
            order = {nid: i for i, nid in enumerate(self.base.topological_order())}
            ops = sorted(self.ops, key=lambda n: order[n.id])
            parent = {n.id: n.id for n in ops}

            def find(i: int) -> int:
                while parent[i] != i:
                    parent[i] = parent[parent[i]]
                    i = parent[i]
                return i

            if self.space.tie_shared:
                ids = set(parent)
                for src in self.base.nodes:
                    if src.op_type is OpType.WEIGHT:
                        users = sorted({c for c in self.base.consumers(src.id) if c in ids}, key=order.get)
                        for u in users[1:]:
                            a, b = find(users[0]), find(u)
                            if a != b:
                                parent[max(a, b, key=order.get)] = min(a, b, key=order.get)
            groups: dict[int, list[Node]] = {}
            for n in ops:
                groups.setdefault(find(n.id), []).append(n)
            self._units = list(groups.values())
        return self._units

    def unit_configs(self, unit: Sequence[Node], config: OpConfig) -> Optional[dict[int, OpConfig]]:
        """The configuration of every operator of a unit when its first one takes ``config``: the
        one with the same signature (None where an operator has none)."""
        if len(unit) == 1:
            return {unit[0].id: config}
        sig = self.signature(unit[0], config)
        out = {unit[0].id: config}
        for n in unit[1:]:
            c = self.matching(n, sig)
            if c is None:
                return None
            out[n.id] = c
        return out

    def unit_options(self, unit: Sequence[Node]) -> list[dict[int, OpConfig]]:
        """Every configuration of a unit (those of its first operator every other one can match)."""
        return [u for u in (self.unit_configs(unit, c) for c in self.configs(unit[0])) if u is not None]

    def movable_units(self) -> list[list[Node]]:
        """Units with more than one configuration."""
        return [u for u in self.units() if len(self.unit_options(u)) > 1]

    def random_unit(self, unit: Sequence[Node], rng: random.Random,
                    current: Optional[Mapping[int, OpConfig]] = None) -> dict[int, OpConfig]:
        """A random configuration of a unit: FlexFlow's proposal (:meth:`random`) for its first
        operator, the others matching it (redrawn a few times where one cannot)."""
        lead = unit[0]
        avoid = current.get(lead.id) if current is not None else None
        out = None
        for _ in range(8):
            out = self.unit_configs(unit, self.random(lead, rng, avoid))
            if out is not None:
                return out
        return dict(self.unit_options(unit)[0])

    def random_configs(self, rng: random.Random) -> dict[int, OpConfig]:
        """A random configuration of every operator (tied units together)."""
        if not self.space.tie_shared:
            return {n.id: self.random(n, rng) for n in self.ops}
        out: dict[int, OpConfig] = {}
        for u in self.units():
            out.update(self.random_unit(u, rng))
        return out

    def contains(self, strategy: Strategy) -> bool:
        """Whether every operator of the strategy uses only allowed axis kinds (and tied units
        one configuration)."""
        for n in self.ops:
            kind = {a.name: a.kind for a in self.axes(n)}
            if any(kind.get(a) not in self.space.kinds for a, v in strategy.configs[n.id].degrees if v > 1):
                return False
        if self.space.tie_shared:
            for u in self.units():
                if len(u) > 1 and self.unit_configs(u, strategy.configs[u[0].id]) != {
                        n.id: strategy.configs[n.id] for n in u}:
                    return False
        return True
