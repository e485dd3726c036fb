"""One entry for every search algorithm (DESIGN.md "Search"): ``search(name, request)``.

A :class:`SearchRequest` says what to search (PCG, machine, cost model, budget, seed, the space,
initial strategies, optimizer, progress, and the algorithm's own options); it is frozen and
validated when built. Every algorithm registers itself with :func:`register_algorithm` when its
module is imported (``import flexrt.search`` imports them all) and returns a :class:`SearchResult`:
the best strategy, its simulated iteration time, and a :class:`SearchLog` (iteration, wall time,
current and best cost). Every algorithm is bounded by default, deterministic for a seed, shows
progress on long runs (:class:`Progress`), and returns the best strategy so far on Ctrl-C (the
log is then marked ``interrupted``). An option the algorithm does not take is an error.

The search space (``SearchSpace``, ``OpChoices``) lives in the strategy layer
(``flexrt.strategy.choices``).

Entry points: ``search``, ``SearchRequest``, ``SearchResult``, ``SearchLog``, ``Scorer``,
``register_algorithm``, ``algorithm``, ``algorithms``.

Example:
    >>> from flexrt.machine import load_machine                                    # doctest: +SKIP
    >>> request = SearchRequest(pcg, load_machine("flexflow_p100"), AnalyticCostModel(),
    ...                         budget=200, seed=0, options={"alpha": 2.0})        # doctest: +SKIP
    >>> result = search("mcmc", request)                                           # doctest: +SKIP
    >>> result.cost_s <= result.log.entries[0].best_cost_s                         # doctest: +SKIP
    True
"""

from __future__ import annotations

import inspect
import math
import random
import sys
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from flexrt.errors import ConfigError, StrategyError
from flexrt.ir.pcg import PCG
from flexrt.ir.registry import AxisKind
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.machine.views import view_devices
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import ConfigStrategy, OpChoices, SearchSpace, Strategy, data_parallel, node_axes

DEFAULT_BUDGET = 1000  # proposals (MCMC) or simulated leaves (exhaustive) when none is given
# The largest budget a search takes: about a day of the fastest proposals; a larger one could only
# run until interrupted (every search keeps its best so far when it is).
MAX_BUDGET = 10_000_000


# ---- scoring ------------------------------------------------------------------------------------

SIMULATIONS = ("delta", "full")


class Scorer:
    """Simulated iteration time of strategies, by delta simulation where it can (``simulation``
    "full": every score is a full simulation, the baseline FlexFlow's Fig. 11 compares with).

    The simulator holds the last strategy it scored. ``score(strategy, changed)`` takes the names
    of the operators whose configuration differs from that one (the caller tracks them: after a
    rejected MCMC proposal it is the rejected operator plus the next proposal's), so no step back
    is needed. ``cost_fn`` replaces the simulator (tests: toy costs, interruptions).
    """

    def __init__(self, machine: Machine, cost_model, optimizer: OptimizerKind = OptimizerKind.SGD,
                 cost_fn: Optional[Callable[[Strategy], float]] = None, simulation: str = "delta") -> None:
        if simulation not in SIMULATIONS:
            raise ConfigError(f"simulation must be one of {', '.join(SIMULATIONS)}, got {simulation!r}")
        self.cost_fn, self.simulation = cost_fn, simulation
        self.sim = None if cost_fn else Simulator(machine, cost_model, optimizer, detail=False)
        self.full_calls = self.delta_calls = 0
        self.sim_s = 0.0

    def full(self, strategy: Strategy) -> float:
        t = time.perf_counter()
        self.full_calls += 1
        try:
            if self.cost_fn:
                return float(self.cost_fn(strategy))
            return self.sim.time_full(strategy)
        finally:
            self.sim_s += time.perf_counter() - t

    def score(self, strategy: Strategy, changed: set[str]) -> float:
        t = time.perf_counter()
        self.delta_calls += 1
        try:
            if self.cost_fn:
                return float(self.cost_fn(strategy))
            if self.simulation == "full":  # FlexFlow's baseline: every proposal simulated afresh
                return self.sim.time_full(strategy)
            return self.sim.time_delta(strategy, changed)
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


# ---- the request --------------------------------------------------------------------------------

def _check_int(what: str, value, minimum: Optional[int] = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        rule = "an integer" if minimum is None else f"an integer >= {minimum}"
        raise ConfigError(f"a search request's {what} must be {rule}, got {value!r}")


def _frozen_options(options) -> Mapping[str, Any]:
    """A read-only copy of ``options`` (a mapping, or (name, value) pairs) keyed by identifiers."""
    try:
        items = dict(options)
    except (TypeError, ValueError):
        raise ConfigError(f"a search request's options are a mapping of option name to value "
                          f"(e.g. {{'alpha': 2.0}}), got {options!r}") from None
    bad = [k for k in items if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ConfigError(f"search option names are keyword names (e.g. 'alpha', 'split_size'), got {bad}")
    return MappingProxyType(items)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """What a search is asked: the best strategy for a model's PCG on a machine, by a cost model.

    Validated when built (:class:`~flexrt.errors.ConfigError` saying what is wrong). Every algorithm
    reads ``pcg``, ``machine``, ``cost_model``, ``budget`` and ``seed``. ``space`` (None: the
    algorithm's default, the sample axis for MCMC and every axis for Unity), ``initial`` strategies
    and ``optimizer`` (an ``OptimizerKind`` or its name, "sgd", "momentum" or "adam"; kept as the
    member) go to the algorithms that take them: setting one for an algorithm that does not is an
    error in :func:`search`. ``progress`` (None: on when stderr is a terminal) is only a
    display choice and goes where an algorithm shows progress. ``options`` are the algorithm's own
    keyword options (:func:`algorithm` lists them), kept as a read-only copy.

    Example:
        >>> request = SearchRequest(pcg, machine, AnalyticCostModel(), budget=200, seed=1,  # doctest: +SKIP
        ...                         options={"alpha": 2.0})
        >>> search("mcmc", request).log.proposals <= 200                                    # doctest: +SKIP
        True
    """

    pcg: PCG
    machine: Machine
    cost_model: Any
    budget: int = DEFAULT_BUDGET
    seed: int = 0
    space: Optional[SearchSpace] = None
    initial: tuple[Strategy, ...] = ()
    optimizer: OptimizerKind = OptimizerKind.SGD
    progress: Optional[bool] = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.pcg, PCG):
            raise ConfigError(f"a search request's pcg must be a PCG (a model's .pcg), got {type(self.pcg).__name__}")
        if not isinstance(self.machine, Machine):
            raise ConfigError(f"a search request's machine must be a Machine (flexrt.machine.load_machine), "
                              f"got {type(self.machine).__name__}")
        if not hasattr(self.cost_model, "op_times"):
            raise ConfigError(f"a search request's cost_model must be a cost model (AnalyticCostModel, "
                              f"ProfiledCostModel), got {type(self.cost_model).__name__}")
        _check_int("budget", self.budget, 0)
        if self.budget > MAX_BUDGET:
            raise ConfigError(f"a search request's budget must be at most {MAX_BUDGET:,}, got {self.budget:,}")
        _check_int("seed", self.seed)
        if self.space is not None and not isinstance(self.space, SearchSpace):
            raise ConfigError(f"a search request's space must be a SearchSpace or None (the algorithm's "
                              f"default), got {type(self.space).__name__}")
        if isinstance(self.initial, Strategy) or not isinstance(self.initial, (tuple, list)):
            raise ConfigError(f"a search request's initial strategies are a tuple of strategies, got "
                              f"{type(self.initial).__name__}")
        bad = [type(s).__name__ for s in self.initial if not isinstance(s, Strategy)]
        if bad:
            raise ConfigError(f"a search request's initial strategies must be strategies (ConfigStrategy, "
                              f"GraphStrategy), got {', '.join(bad)}")
        object.__setattr__(self, "initial", tuple(self.initial))
        try:
            object.__setattr__(self, "optimizer", OptimizerKind.parse(self.optimizer))
        except ConfigError:
            raise ConfigError(f"a search request's optimizer must be one of "
                              f"{', '.join(k.short_name for k in OptimizerKind)}, got {self.optimizer!r}") from None
        if self.progress is not None and not isinstance(self.progress, bool):
            raise ConfigError(f"a search request's progress must be True, False or None (on when stderr is "
                              f"a terminal), got {self.progress!r}")
        object.__setattr__(self, "options", _frozen_options(self.options))


# ---- the registry and the dispatcher ------------------------------------------------------------

# Request fields an algorithm may take, beyond (pcg, machine, cost_model, budget=, seed=), with the
# value that means "not set". A set field the algorithm does not take is an error, but progress,
# which changes only what is shown.
REQUEST_FIELDS: Mapping[str, Any] = MappingProxyType({"space": None, "initial": (), "optimizer": OptimizerKind.SGD,
                                                      "progress": None})


@dataclass(frozen=True, slots=True)
class Algorithm:
    """A registered search algorithm: its function, the request fields and the options it takes."""

    name: str
    fn: Callable[..., SearchResult]
    fields: frozenset[str]
    options: frozenset[str]
    defaults: Mapping[str, Any] = field(default_factory=dict)   # option -> its default, where the signature gives one
    keeps_initial: bool = False   # its own result is never slower than its initial strategies (it simulates them)

    def __str__(self) -> str:
        return f"{self.name} (options: {', '.join(sorted(self.options)) or 'none'})"


_ALGORITHMS: dict[str, Algorithm] = {}


def _takes(name: str, fn: Callable, options: Optional[Iterable[str]]) -> tuple[frozenset, frozenset]:
    """(request fields, options) a registered function takes, from its signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ConfigError(f"search algorithm {name!r}: cannot read the signature of {fn!r}") from None
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    keywords = {p.name for p in named[3:] if p.kind is not p.POSITIONAL_ONLY}
    if len(named) < 3 or not {"budget", "seed"} <= keywords:
        raise ConfigError(f"search algorithm {name!r}: its function must take (pcg, machine, cost_model, "
                          f"budget=, seed=, ...); got {inspect.signature(fn)}")
    fields = frozenset(keywords & set(REQUEST_FIELDS))
    declared = keywords - fields - {"budget", "seed"}
    if options is None:
        return fields, frozenset(declared)
    if isinstance(options, str):
        raise ConfigError(f"search algorithm {name!r}: options are a collection of names, got {options!r}")
    given = frozenset(options)
    reserved = sorted(given & (set(REQUEST_FIELDS) | {"pcg", "machine", "cost_model", "budget", "seed"}))
    if reserved:
        raise ConfigError(f"search algorithm {name!r}: {', '.join(reserved)} are SearchRequest fields, not options")
    if not any(p.kind is p.VAR_KEYWORD for p in params) and not given <= declared:
        raise ConfigError(f"search algorithm {name!r}: its function takes no {', '.join(sorted(given - declared))}; "
                          f"its keyword parameters: {', '.join(sorted(declared)) or 'none'}")
    return fields, given


def _definition(fn: Callable) -> tuple:
    return getattr(fn, "__module__", None), getattr(fn, "__qualname__", None) or id(fn)


def register_algorithm(name: str, fn: Callable[..., SearchResult],
                       options: Optional[Iterable[str]] = None, keeps_initial: bool = False) -> Algorithm:
    """Register ``fn(pcg, machine, cost_model, budget=, seed=, ..., **options) -> SearchResult`` as
    the search algorithm ``name``.

    The request fields it takes (``space``, ``initial``, ``optimizer``, ``progress``) and its
    options are read from its signature: every other keyword parameter after the cost model,
    ``budget`` and ``seed`` is an option. ``options`` names them instead (for a function taking
    ``**options``). ``keeps_initial``: the function itself never returns a strategy slower than its
    initial ones (else ``search`` compares them with its result). A name registered twice is an error, unless by the same definition (its
    module executed again, e.g. by ``importlib.reload``), which replaces the old entry.

    Example:
        >>> register_algorithm("mcmc", mcmc).options >= {"alpha", "follow"}   # doctest: +SKIP
        True
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a search algorithm's name must be a non-empty string, got {name!r}")
    fields, opts = _takes(name, fn, options)
    old = _ALGORITHMS.get(name)
    if old is not None and _definition(old.fn) != _definition(fn):
        raise ConfigError(f"search algorithm {name!r} is registered twice: by {'.'.join(map(str, _definition(old.fn)))} "
                          f"and by {'.'.join(map(str, _definition(fn)))}")
    params = inspect.signature(fn).parameters
    defaults = {o: params[o].default for o in opts if o in params and params[o].default is not inspect.Parameter.empty}
    entry = Algorithm(name, fn, fields, opts, MappingProxyType(defaults), keeps_initial)
    _ALGORITHMS[name] = entry
    return entry


def algorithms() -> tuple[str, ...]:
    """The names of the registered search algorithms, sorted."""
    return tuple(sorted(_ALGORITHMS))


def algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name`` (what request fields and options it takes)."""
    if name not in _ALGORITHMS:
        raise ConfigError(f"unknown search algorithm {name!r}; valid: {', '.join(algorithms())}")
    return _ALGORITHMS[name]


def check_options(name: str, options) -> Algorithm:
    """The algorithm ``name``, when it takes every option of ``options`` (names), else a ConfigError
    naming the unknown ones and the valid ones."""
    algo = algorithm(name)
    unknown = sorted(set(options) - algo.options)
    if unknown:
        raise ConfigError(f"search algorithm {name!r} takes no option {', '.join(map(repr, unknown))}; valid options: "
                          f"{', '.join(sorted(algo.options)) or 'none'}")
    for option, value in options.items():
        expected = _option_type_problem(algo.defaults.get(option, None), value)
        if expected:
            raise ConfigError(f"search algorithm {name!r}: option {option!r} must be {expected}, got {value!r}")
    return algo


def _option_type_problem(default: Any, value: Any) -> Optional[str]:
    """What ``value`` should be, for an option whose default is ``default`` (its type), or None when it
    is that: a bool for a bool, an integer for an int, a finite number for a float, a string for a
    string, a list (or a comma-separated string) for a tuple or list; any finite value where the default is
    None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a finite number"
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if isinstance(default, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a string"
    if isinstance(default, (tuple, list, frozenset)):   # or its items comma-separated, as on a command line
        return None if isinstance(value, (tuple, list, frozenset, str)) else "a list"
    return None


def search(name: str, request: SearchRequest) -> SearchResult:
    """Run the registered search algorithm ``name`` (see :func:`algorithms`) on ``request``.

    Raises:
        ConfigError: an unknown algorithm; an option the algorithm does not take (naming it and the
            valid ones); a request field set that it does not take (initial strategies for Unity).

    Example:
        >>> search("unity", SearchRequest(pcg, machine, cost, options={"follow": 0.5}))  # doctest: +SKIP
        Traceback (most recent call last):
        flexrt.errors.ConfigError: search algorithm 'unity' takes no option 'follow'; valid options: ...
    """
    if not isinstance(request, SearchRequest):
        raise ConfigError(f"search({name!r}, request): request must be a SearchRequest(pcg, machine, cost_model, "
                          f"budget=, seed=, ...), got {type(request).__name__}")
    algo = check_options(name, request.options)
    for what, unset in REQUEST_FIELDS.items():
        value = getattr(request, what)
        if what != "progress" and what not in algo.fields and value != unset:
            takers = [a for a in algorithms() if what in _ALGORITHMS[a].fields]
            shown = f"{len(value)} strategies" if what == "initial" else repr(getattr(value, "short_name", value))
            raise ConfigError(f"search algorithm {name!r} takes no {what} (the request sets {shown}); algorithms "
                              f"that do: {', '.join(takers) or 'none'}")
    taken = {what: getattr(request, what) for what in algo.fields}
    result = algo.fn(request.pcg, request.machine, request.cost_model, budget=request.budget, seed=request.seed,
                     **taken, **request.options)
    return _no_slower_than_initial(result, request) if "initial" in algo.fields and not algo.keeps_initial else result


def _no_slower_than_initial(result: SearchResult, request: SearchRequest) -> SearchResult:
    """``result``, or the fastest of the request's initial strategies where it beats it: a search never
    returns a strategy slower than one it was given (an imported strategy whose graph the algorithm
    cannot explore, or one a small budget did not reach). The log notes which, and by how much."""
    if not request.initial:
        return result
    scorer = Scorer(request.machine, request.cost_model, request.optimizer)
    costs = [scorer.full(s) for s in request.initial]
    best = min(range(len(costs)), key=costs.__getitem__)
    if not costs[best] < result.cost_s:
        return result
    result.log.notes["initial_kept"] = {"index": best, "initial_s": costs[best], "found_s": result.cost_s}
    return SearchResult(request.initial[best], costs[best], result.log)


def fixed_result(name: str, strategy: Strategy, machine: Machine, cost_model,
                 optimizer: OptimizerKind = OptimizerKind.SGD, seed: int = 0) -> SearchResult:
    """A named strategy scored by full simulation, with a one-entry log (the baselines)."""
    t0 = time.perf_counter()
    cost = Scorer(machine, cost_model, optimizer).full(strategy)
    log = SearchLog(name, 0, seed, stop_reason="fixed strategy")
    log.record(0, t0, cost, cost)
    return SearchResult(strategy, cost, log)


def describe(strategy: Strategy, machine: Machine, limit: int = 6) -> list[str]:
    """Short lines saying what a strategy does (cf. FlexFlow §8.4), operators grouped by what their
    configuration splits: data parallel over every device; split on a parameter, attribute or
    reduction axis; on fewer devices (with the devices they use). A pipelined strategy's first line
    is its pipeline (the operators are its micro-batches' copies)."""
    pcg = strategy.pcg
    plan = getattr(strategy, "pipeline", None)
    groups: dict[str, list[str]] = {}
    devices: dict[str, set[int]] = {}
    for nid, view in sorted(strategy.views.items()):
        node = pcg.node(nid)
        axes, degree = node_axes(pcg, node)
        split = sorted({"part" if a.is_part else a.kind.value for a in axes
                        if degree[a.name] > 1 and a.kind is not AxisKind.SAMPLE})
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
    return ([plan.describe()] if plan is not None else []) + lines


def below_degree(strategy: Strategy, k: int) -> list[str]:
    """The operators a strategy runs on fewer than ``k`` devices (their pieces), in graph order: where
    a search's ``min_degree`` could not be met (the shapes do not split that far)."""
    pcg = strategy.pcg
    out = []
    for nid in sorted(strategy.views):
        axes, degree = node_axes(pcg, pcg.node(nid))
        if math.prod(degree[a.name] for a in axes) < k:
            out.append(pcg.node(nid).name)
    return out


def cut_in_parts(strategy: Strategy) -> list[str]:
    """The operators a strategy cuts on a part axis (a Concat's pieces holding whole inputs where
    they lie, Unity Fig. 16b), in graph order."""
    pcg = strategy.pcg
    out = []
    for nid in sorted(strategy.views):
        node = pcg.node(nid)
        axes, degree = node_axes(pcg, node)
        if any(a.is_part and degree[a.name] > 1 for a in axes):
            out.append(node.name)
    return out


def check_budget(budget: int, what: str) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"{what}: the budget must be an integer >= 0, got {budget!r}")
    return budget


def initial_candidates(base: PCG, machine: Machine, choices: OpChoices, seed: int,
                       extra: Sequence[Strategy] = (), num_random: int = 1) -> list[tuple[str, Strategy]]:
    """FlexFlow's initial candidates: data parallelism, the given ones (expert, imported; used even
    where they split axes outside the space), and random strategies of the space (deterministic
    for the seed)."""
    out: list[tuple[str, Strategy]] = []
    dp = data_parallel(base, machine)
    if not choices.contains(dp):  # e.g. an operator whose batch split is not allowed: fall back per op
        raise StrategyError("data parallelism is outside the search space")
    out.append(("data-parallel", dp))
    for i, s in enumerate(extra):
        # given strategies start a chain even outside the space (FlexFlow seeds with the expert
        # whatever the flags); proposals then change their operators within the space only
        if isinstance(s, ConfigStrategy):
            out.append((f"given{i}", s))
    rng = random.Random(seed * 7919 + 17)
    for i in range(num_random):
        configs = choices.random_configs(rng)
        try:
            out.append((f"random{i}", Strategy.from_configs(base, configs)))
        except StrategyError:
            continue
    return out
