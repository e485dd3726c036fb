"""One interface for every search algorithm (DESIGN.md "Search").

An algorithm takes (PCG, machine, cost model, budget, seed) and returns a :class:`SearchResult`:
the best strategy, its simulated iteration time, and a :class:`SearchLog` (iteration, wall time,
current and best cost). Every algorithm is bounded by default, deterministic for a seed, shows
progress on long runs (:class:`Progress`), and returns the best strategy so far on Ctrl-C (the
log is then marked ``interrupted``).

The search space (:class:`SearchSpace`) follows FlexFlow's flags: the sample axis always;
attribute axes with ``--enable-attribute-parallel``; parameter axes with
``--enable-parameter-parallel``, which also gates reduction axes (splitting a contraction dimension
partitions the weight's input dimension, i.e. it is parameter parallelism whose outputs are
partial sums); ``--only-data-parallel`` keeps the sample axis alone. Device placement (the
operator's machine view) is always searched. ``tie_shared`` (off by default) makes operators that
share a weight take one configuration together (:meth:`OpChoices.units`).

Entry points: ``search``, ``SearchResult``, ``SearchLog``, ``SearchSpace``, ``Scorer``,
``register_algorithm``, ``algorithms``.

Example:
    >>> from flexrt.machine import load_machine                                    # doctest: +SKIP
    >>> result = search("mcmc", pcg, load_machine("flexflow_p100"), AnalyticCostModel(),
    ...                 budget=200, seed=0)                                        # doctest: +SKIP
    >>> result.cost_s <= result.log.entries[0].best_cost_s                         # doctest: +SKIP
    True
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from flexrt.errors import ConfigError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind
from flexrt.machine import Machine
from flexrt.machine.views import enumerate_views, view_devices
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.strategy import OpConfig, Strategy, is_compute, node_axes, valid_configs

DEFAULT_BUDGET = 1000  # proposals (MCMC) or simulated leaves (exhaustive) when none is given


# ---- the search space ---------------------------------------------------------------------------

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
        bad = [k for k in self.kinds if not isinstance(k, AxisKind) or k is AxisKind.REPLICA]
        if bad:
            raise ConfigError(f"a search space splits SOAP axes (sample, attribute, parameter, reduction); got {bad}")

    @classmethod
    def from_flags(cls, only_data_parallel: bool = False, enable_parameter_parallel: bool = False,
                   enable_attribute_parallel: bool = False) -> "SearchSpace":
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
    """The configurations each compute operator may take in a space, computed once per operator."""

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
        if node.id not in self._axes:
            self._axes[node.id] = node_axes(self.base, node)[0]
        return self._axes[node.id]

    def degrees(self, node: Node) -> list[dict[str, int]]:
        """Degree assignments of the node whose split axes are all of an allowed kind."""
        if node.id not in self._degrees:
            kind = {a.name: a.kind for a in self.axes(node)}
            self._degrees[node.id] = [d for d in valid_configs(self.base, node, self.machine)
                                      if all(kind[a] in self.space.kinds for a, v in d.items() if v > 1)]
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


# ---- scoring ------------------------------------------------------------------------------------

class Scorer:
    """Simulated iteration time of strategies, by delta simulation where it can.

    The simulator holds the last strategy it scored. ``score(strategy, changed)`` takes the names
    of the operators whose configuration differs from that one (the caller tracks them: after a
    rejected MCMC proposal it is the rejected operator plus the next proposal's), so no step back
    is needed. ``cost_fn`` replaces the simulator (tests: toy costs, interruptions).
    """

    def __init__(self, machine: Machine, cost_model, optimizer: str = "sgd",
                 cost_fn: Optional[Callable[[Strategy], float]] = None) -> None:
        self.cost_fn = cost_fn
        self.sim = None if cost_fn else Simulator(machine, cost_model, optimizer)
        self.full_calls = self.delta_calls = 0
        self.sim_s = 0.0

    def full(self, strategy: Strategy) -> float:
        t = time.perf_counter()
        self.full_calls += 1
        try:
            if self.cost_fn:
                return float(self.cost_fn(strategy))
            self.sim.full(strategy)
            return self.sim.iteration_time()
        finally:
            self.sim_s += time.perf_counter() - t

    def score(self, strategy: Strategy, changed: set[str]) -> float:
        t = time.perf_counter()
        self.delta_calls += 1
        try:
            if self.cost_fn:
                return float(self.cost_fn(strategy))
            self.sim.lowering.update(strategy, changed)
            self.sim.lowering.engine.simulate_delta()
            return self.sim.iteration_time()
        finally:
            self.sim_s += time.perf_counter() - t


# ---- logs, results, progress --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LogEntry:
    iteration: int
    time_s: float
    current_cost_s: float
    best_cost_s: float


@dataclass
class SearchLog:
    """Per iteration: wall time since the start, the current and the best cost (seconds)."""

    algorithm: str
    budget: int
    seed: int
    entries: list[LogEntry] = field(default_factory=list)
    interrupted: bool = False
    stop_reason: str = ""
    proposals: int = 0
    accepted: int = 0
    notes: dict[str, Any] = field(default_factory=dict)

    def record(self, iteration: int, t0: float, current: float, best: float) -> None:
        self.entries.append(LogEntry(iteration, time.perf_counter() - t0, current, best))

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposals if self.proposals else 0.0

    @property
    def elapsed_s(self) -> float:
        return self.entries[-1].time_s if self.entries else 0.0

    def to_json(self) -> dict:
        return {"algorithm": self.algorithm, "budget": self.budget, "seed": self.seed,
                "interrupted": self.interrupted, "stop_reason": self.stop_reason, "proposals": self.proposals,
                "accepted": self.accepted, "acceptance_rate": self.acceptance_rate, "elapsed_s": self.elapsed_s,
                "notes": self.notes,
                "entries": [[e.iteration, e.time_s, e.current_cost_s, e.best_cost_s] for e in self.entries],
                "entry_fields": ["iteration", "time_s", "current_cost_s", "best_cost_s"]}


@dataclass
class SearchResult:
    strategy: Strategy
    cost_s: float
    log: SearchLog

    @property
    def algorithm(self) -> str:
        return self.log.algorithm


class Progress:
    """Progress of a long search on stderr: a tqdm bar where tqdm is installed, else one line about
    every second (iterations, best cost, acceptance rate). Silent unless ``enabled``."""

    def __init__(self, enabled: bool, total: int, label: str) -> None:
        self.enabled, self.total, self.label = enabled, total, label
        self._bar = None
        self._last = time.perf_counter()
        self._printed = False
        if enabled:
            try:
                from tqdm import tqdm  # optional: used only when already installed
                self._bar = tqdm(total=total, desc=label, file=sys.stderr, leave=False)
            except ImportError:
                self._bar = None

    def update(self, iteration: int, best_s: float, rate: float) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.n = iteration
            self._bar.set_postfix(best_ms=f"{best_s * 1e3:.3f}", accept=f"{rate:.0%}", refresh=False)
            self._bar.refresh()
            return
        now = time.perf_counter()
        if now - self._last >= 1.0:
            self._last = now
            self._printed = True
            print(f"\r{self.label}: {iteration}/{self.total} iterations, best {best_s * 1e3:.3f} ms, "
                  f"acceptance {rate:.0%}   ", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._printed:
            print(file=sys.stderr, flush=True)


def progress_default() -> bool:
    """Progress is shown by default when stderr is a terminal."""
    return sys.stderr.isatty()


# ---- the dispatcher -----------------------------------------------------------------------------

_ALGORITHMS: dict[str, Callable[..., SearchResult]] = {}


def register_algorithm(name: str, fn: Callable[..., SearchResult]) -> None:
    """Register ``fn(pcg, machine, cost_model, budget=, seed=, **options) -> SearchResult``."""
    if name in _ALGORITHMS:
        raise ConfigError(f"search algorithm {name!r} is registered twice")
    _ALGORITHMS[name] = fn


def algorithms() -> tuple[str, ...]:
    return tuple(sorted(_ALGORITHMS))


def search(algorithm: str, pcg: PCG, machine: Machine, cost_model, budget: Optional[int] = None, seed: int = 0,
           **options) -> SearchResult:
    """Run a named search algorithm (see :func:`algorithms`) on a model's PCG."""
    if algorithm not in _ALGORITHMS:
        raise ConfigError(f"unknown search algorithm {algorithm!r}; valid: {', '.join(algorithms())}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ConfigError(f"a search budget must be an integer >= 0, got {budget!r}")
    return _ALGORITHMS[algorithm](pcg, machine, cost_model, budget=DEFAULT_BUDGET if budget is None else budget,
                                  seed=seed, **options)


def fixed_result(name: str, strategy: Strategy, machine: Machine, cost_model, optimizer: str = "sgd",
                 seed: int = 0) -> SearchResult:
    """A named strategy scored by full simulation, with a one-entry log (the baselines)."""
    t0 = time.perf_counter()
    cost = Scorer(machine, cost_model, optimizer).full(strategy)
    log = SearchLog(name, 0, seed, stop_reason="fixed strategy")
    log.record(0, t0, cost, cost)
    return SearchResult(strategy, cost, log)


def describe(strategy: Strategy, machine: Machine, limit: int = 6) -> list[str]:
    """Short lines saying what a strategy does (cf. FlexFlow §8.4), operators grouped by what their
    configuration splits: data parallel over every device; split on a parameter, attribute or
    reduction axis; on fewer devices (with the devices they use)."""
    pcg = strategy.pcg
    groups: dict[str, list[str]] = {}
    devices: dict[str, set[int]] = {}
    for nid, view in sorted(strategy.views.items()):
        node = pcg.node(nid)
        axes, degree = node_axes(pcg, node)
        split = sorted({a.kind.value for a in axes if degree[a.name] > 1 and a.kind is not AxisKind.SAMPLE})
        total = math.prod(degree[a.name] for a in axes)
        if split:
            key = f"split on {'+'.join(split)} axes"
        elif total == machine.num_devices:
            key = f"data parallel over all {machine.num_devices} devices"
        elif total == 1:
            key = "whole on one device"
        else:
            key = f"data parallel over {total} devices"
        groups.setdefault(key, []).append(node.name)
        devices.setdefault(key, set()).update(view_devices(machine, view, tuple(degree[a.name] for a in axes)))
    lines = []
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
        used = sorted(devices[key])
        where = "" if len(used) == machine.num_devices else f" [devices {', '.join(map(str, used))}]"
        lines.append(f"{len(names)} op(s) {key}{where}: {shown}")
    return lines


def check_budget(budget: int, what: str) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"{what}: the budget must be an integer >= 0, got {budget!r}")
    return budget


def initial_candidates(base: PCG, machine: Machine, choices: OpChoices, seed: int,
                       extra: Sequence[Strategy] = (), num_random: int = 1) -> list[tuple[str, Strategy]]:
    """FlexFlow's initial candidates: data parallelism, the given ones (expert, imported; used even
    where they split axes outside the space), and random strategies of the space (deterministic
    for the seed)."""
    from flexrt.simulator.strategy import data_parallel
    out: list[tuple[str, Strategy]] = []
    dp = data_parallel(base, machine)
    if not choices.contains(dp):  # e.g. an operator whose batch split is not allowed: fall back per op
        raise StrategyError("data parallelism is outside the search space")
    out.append(("data-parallel", dp))
    for i, s in enumerate(extra):
        # given strategies start a chain even outside the space (FlexFlow seeds with the expert
        # whatever the flags); proposals then change their operators within the space only
        if s is not None and s.base is not None:
            out.append((f"given{i}", s))
    rng = random.Random(seed * 7919 + 17)
    for i in range(num_random):
        configs = choices.random_configs(rng)
        try:
            out.append((f"random{i}", Strategy.from_configs(base, configs)))
        except StrategyError:
            continue
    return out
