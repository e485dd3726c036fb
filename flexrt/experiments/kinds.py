"""The registry of run kinds: what one run of an experiment measures, and which inputs it takes.

A kind is a function of validated inputs (a mapping of parameter name to value) to an
:class:`Outcome`: a dict of metrics, optionally the strategy it found (as a strategy JSON document)
and convergence curves. It declares its parameters (:class:`Param`: type, default, valid values),
so an experiment file is checked against them before anything runs.

    @register_kind("pipeline_bubble", params=(Param("stages", "int", minimum=1), ...),
                   metrics=("bubble", "law"), description="...")
    def pipeline_bubble(inputs) -> Outcome: ...

Entry points: :func:`register_kind`, :func:`kind`, :func:`kinds`, :class:`Param`, :class:`Outcome`,
:class:`SkipRun`, :func:`problem_of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from flexrt.errors import ConfigError, FlexrtError

REQUIRED = object()   # a Param's default when the experiment must give the value
TYPES = ("str", "int", "float", "bool", "strs", "ints", "floats", "mapping")


@dataclass(frozen=True, slots=True)
class Param:
    """One input of a kind. ``type`` is one of ``TYPES`` ("strs": a list of strings, ...); ``choices``
    a tuple of valid values, or a function returning them (the zoo's models, the presets), checked
    for each string (of a list too); ``minimum``/``maximum`` bound numbers (each item of a list)."""

    name: str
    type: str
    default: Any = REQUIRED
    choices: Any = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    help: str = ""

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ConfigError(f"parameter {self.name!r}: unknown type {self.type!r}; valid: {', '.join(TYPES)}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def valid_choices(self) -> Optional[tuple]:
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)


def problem_of(check: Callable, *args) -> Optional[str]:
    """What ``check(*args)`` refuses, as a run kind's ``check`` says it (our error's message), or
    None when it passes: the same checks a run makes, made when the experiment file loads."""
    try:
        check(*args)
    except FlexrtError as e:
        return str(e)
    return None


@dataclass
class Outcome:
    """What one run produced: ``metrics`` (names with units: ``_ms``, ``_s``; plain numbers, strings,
    booleans or None), the found ``strategy`` as a strategy JSON document (saved beside the results),
    and ``convergence``: curve name -> [[seconds, best cost in ms], ...]."""

    metrics: dict[str, Any]
    strategy: Optional[dict] = None
    convergence: dict[str, list] = field(default_factory=dict)


class SkipRun(Exception):
    """A run that does not apply (a device count the machine cannot take): recorded as skipped, with why."""


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    fn: Callable[[Mapping[str, Any]], Outcome]
    params: tuple[Param, ...]
    metrics: tuple[str, ...]
    description: str
    # what the parameters' own checks cannot say: a run's inputs that do not go together (the
    # problem, said for the reader of the file; None when they do). Checked when the file is read.
    check: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


_KINDS: dict[str, Kind] = {}


def register_kind(name: str, params: tuple[Param, ...], metrics: tuple[str, ...], description: str,
                  check: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None):
    """Decorator: register ``fn(inputs) -> Outcome`` as the run kind ``name``. ``check(inputs)`` says
    what is wrong with a combination of inputs (or None), so that an experiment file is refused when
    read, not when the run comes. Registering a name twice with another function is an error (the
    same definition again, a module reloaded, is allowed)."""
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ConfigError(f"run kind {name!r}: a parameter is declared twice: {names}")

    def wrap(fn: Callable[[Mapping[str, Any]], Outcome]):
        old = _KINDS.get(name)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ConfigError(f"run kind {name!r} is registered twice ({old.fn.__module__}.{old.fn.__qualname__} "
                              f"and {fn.__module__}.{fn.__qualname__})")
        _KINDS[name] = Kind(name, fn, tuple(params), tuple(metrics), description, check)
        return fn
    return wrap


def kinds() -> tuple[str, ...]:
    """The registered kinds' names, sorted (importing :mod:`flexrt.experiments` registers them all)."""
    return tuple(sorted(_KINDS))


def kind(name: str) -> Kind:
    if name not in _KINDS:
        raise ConfigError(f"unknown run kind {name!r}; valid: {', '.join(kinds())}")
    return _KINDS[name]
