"""What the run kinds share: parameters every kind declares the same way, loading a model at a
batch size and a machine at a device count, simulating a strategy, and search logs as curves.

Entry points: :func:`model_param`, :func:`machine_param`, :func:`machine_for`, :func:`pcg_of`,
:func:`simulated`, :func:`curve`, :data:`COST`.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Optional

from flexrt.errors import ConfigError
from flexrt.experiments.kinds import REQUIRED, Param, SkipRun, problem_of
from flexrt.inputs import clip
from flexrt.ir.precision import Precision
from flexrt.ir.registry import AxisKind
from flexrt.machine import load_machine, preset_names
from flexrt.machine.limits import MAX_NODES
from flexrt.model import load_model, zoo_models
from flexrt.search.api import MAX_BUDGET
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import SearchSpace, strategy_to_json

COST = AnalyticCostModel()
MAX_CURVE_POINTS = 300


@functools.cache
def _zoo() -> tuple[str, ...]:
    """The zoo's model names (read once per process: each look-up reads every script's docstring)."""
    return tuple(m.name for m in zoo_models())


def model_param(default: Any = None) -> Param:
    return Param("model", "str", REQUIRED if default is None else default, choices=_zoo,
                 help="a zoo model (`flexrt models`) or a model script, relative to the experiment file")


def model_flags_param() -> Param:
    return Param("model_flags", "strs", [], help="the model script's own flags, as on the command line "
                 "(e.g. [--arch-sparse-feature-size, '256'] for dlrm)")


def precision_param() -> Param:
    return Param("precision", "str", "fp32", choices=tuple(p.value for p in Precision),
                 help="the model's precision (--precision): fp16 / bf16 compute at the devices' 16-bit peaks")


def machine_param(default: str) -> Param:
    return Param("machine", "str", default, choices=preset_names,
                 help="a preset (`flexrt machines`) or a machine file, relative to the experiment file")


def seed_param() -> Param:
    return Param("seed", "int", 0, minimum=0)


def budget_param(default: int) -> Param:
    return Param("budget", "int", default, minimum=0, maximum=MAX_BUDGET,
                 help="the search's budget (proposals, or candidate graphs)")


def devices_param(default: Any = None) -> Param:
    return Param("devices", "int", REQUIRED if default is None else default, minimum=1, maximum=65536)


def machine_for(name: str, devices: int):
    """``name`` scaled to ``devices`` devices (whole nodes); a count that is not whole nodes is a skip."""
    per_node = load_machine(name).devices_per_node
    if devices % per_node:
        raise SkipRun(f"{devices} devices are not whole nodes of {name} ({per_node} devices per node)")
    return load_machine(name, nodes=devices // per_node)


@functools.cache
def machine_problem(name: str, devices: int) -> Optional[str]:
    """What ``machine_for(name, devices)`` would refuse, said before any run (None: nothing; a count
    that is not whole nodes is a skip, not a problem)."""
    per_node = load_machine(name).devices_per_node
    if devices % per_node == 0 and devices // per_node > MAX_NODES:
        return (f"{devices} devices are {devices // per_node:,} nodes of {name} ({per_node} devices per node); a "
                f"machine has at most {MAX_NODES:,} nodes (flexrt.machine.limits.MAX_NODES)")
    return None


def model_flags_problem(model: str, seq_length: int = 0, extra: tuple[str, ...] = ()) -> Optional[str]:
    """What building zoo model ``model`` with these flags (``pcg_of``'s) would refuse of them, said
    before any run (None: nothing): a flag neither the script nor FFConfig takes, a bad value."""
    flags = (*extra, *(("--seq-length", str(seq_length)) if seq_length else ()))
    return _flags_problem(model, tuple(flags)) if flags else None


@functools.cache
def _flags_problem(model: str, flags: tuple) -> Optional[str]:
    from flexrt.model.config import FFConfig
    from flexrt.model.loader import script_build_model, split_script_flags

    def parse() -> None:
        build = script_build_model(model)
        rest = split_script_flags(build, flags)[0] if build else list(flags)
        FFConfig(rest, tolerant=build is None)
        if build and rest:   # FFConfig's own: the batch, epochs, search settings are the experiment's to set
            from flexrt.model.loader import script_options
            own = ", ".join(script_options(build)) or "none"
            raise ConfigError(f"{' '.join(rest)}: a FlexFlow flag, which the experiment sets itself (the batch is "
                              f"the per-device batch x devices); model_flags take the script's own: {own}")
    problem = problem_of(parse)
    return None if problem is None else f"model {model}: {clip(problem, 240)}"


def pcg_of(model: str, batch: int, seq_length: int = 0, extra: tuple[str, ...] = ()):
    """The PCG of zoo model ``model`` at global batch ``batch`` (``seq_length`` > 0 sets the sequence length)."""
    flags = ["-b", str(batch), *extra]
    if seq_length:
        flags += ["--seq-length", str(seq_length)]
    return load_model(model, flags).model.pcg


def simulated(strategy, machine, optimizer: str = "sgd"):
    """The full simulation's result (iteration time, moved elements, memory) of ``strategy``."""
    return Simulator(machine, COST, optimizer).full(strategy)


def peak_memory_bytes(result) -> Optional[int]:
    return max(result.peak_bytes.values()) if result.peak_bytes else None


def curve(log) -> list[list[float]]:
    """A search log as [[seconds, best cost ms], ...], at most ``MAX_CURVE_POINTS`` points (the last kept)."""
    points = [[e.time_s, e.best_cost_s * 1e3] for e in log.entries]
    if len(points) > MAX_CURVE_POINTS:
        step = len(points) / MAX_CURVE_POINTS
        points = [points[int(i * step)] for i in range(MAX_CURVE_POINTS)] + [points[-1]]
    return points


def strategy_doc(strategy, machine) -> dict:
    return strategy_to_json(strategy, machine)


class Timer:
    """``with Timer() as t: ...; t.s`` seconds."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.s = 0.0
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t0
        return False


AXES = ("sample", "attribute", "parameter", "reduction")


def space_params(axes: tuple[str, ...] = AXES, placements: str = "all") -> tuple[Param, ...]:
    """The search space as three parameters: the axes proposals may split, the placements, tied steps."""
    return (Param("axes", "strs", list(axes), choices=AXES, help="the SOAP axes the search may split"),
            Param("placements", "str", placements, choices=("all", "aligned")),
            Param("tie_shared", "bool", False, help="operators sharing weights (RNN steps) take one configuration"))


def space_of(inputs) -> SearchSpace:
    return SearchSpace(kinds=frozenset(AxisKind(a) for a in inputs["axes"]), placements=inputs["placements"],
                       tie_shared=inputs["tie_shared"])
