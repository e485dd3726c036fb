"""FlexFlow's MCMC search (FlexFlow §6.2): Metropolis–Hastings over the SOAP space.

A proposal gives one random operator a random configuration of its space (degrees over its
allowed axes, then a machine view for them) and is scored by delta simulation. With probability
``follow`` (default 0.25) the operator instead takes the configuration of a random neighbour
(same degree per axis kind, same devices) where it has one: FlexFlow's uniform proposal alone
rarely moves a whole run of operators onto other devices, since each single step in between pays
for new transfers on both sides (on LeNet it stalls 3-7% above the optimum; with ``follow`` it
reaches it). ``follow=0`` is FlexFlow's proposal exactly. It is accepted
with FlexFlow's Eq. 1 probability::

    alpha(S* | S) = min(1, exp(beta * (cost(S) - cost(S*))))

``beta`` comes from ``--alpha``. FlexFlow's code compares simulated milliseconds (beta = alpha per
ms); that makes the temperature depend on the model's size (LeNet's 0.2 ms iterations accept
everything, a random walk). Ours measures the difference in percent of the data-parallel
iteration time by default (``unit="percent"``: a proposal 1% slower than the current strategy is
accepted with probability e^-alpha); ``unit="ms"`` gives FlexFlow's literal rule.

Initial candidates (§6.2): data parallelism, the expert strategy and an imported strategy where
given, and random strategies. Each runs its own chain on an equal share of the budget (proposals)
and stops early when it has not improved the best strategy for half of its share.

Delta simulation needs the operators that differ from the strategy the simulator last saw. After a
rejection the simulator holds the rejected proposal; rather than simulating back to the current
strategy, the next proposal is scored with the rejected operator added to its changed set (one
delta per proposal instead of two; ``bench/bench_fig6.py --sync`` measures both).

Entry points: ``mcmc``, ``accept``.
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable, Optional, Sequence

from flexrt.errors import StrategyError
from flexrt.ir.pcg import PCG
from flexrt.machine import Machine
from flexrt.search.api import (OpChoices, Progress, Scorer, SearchLog, SearchResult, SearchSpace, check_budget,
                               initial_candidates, progress_default, register_algorithm)
from flexrt.simulator.strategy import Strategy

UNITS = ("percent", "ms")


def accept(delta: float, beta: float, rng: random.Random) -> bool:
    """Eq. 1: always accept a proposal no slower than the current strategy (``delta`` =
    cost(proposal) - cost(current) <= 0); else accept with probability exp(-beta * delta)."""
    if delta <= 0:
        return True
    return rng.random() < math.exp(-beta * delta)


def mcmc(pcg: PCG, machine: Machine, cost_model, budget: int = 1000, seed: int = 0, alpha: float = 1.05,
         space: Optional[SearchSpace] = None, initial: Sequence[Strategy] = (), num_random: int = 1,
         optimizer: str = "sgd", cost_fn: Optional[Callable[[Strategy], float]] = None,
         on_iteration: Optional[Callable[[int, Strategy, float], None]] = None,
         progress: Optional[bool] = None, sync: str = "lazy", unit: str = "percent",
         follow: float = 0.25) -> SearchResult:
    """Search the strategy space of ``pcg`` with MCMC; returns the best strategy found.

    Args:
        budget: proposals in all (split evenly between the initial candidates).
        alpha: FlexFlow's ``--alpha``, the inverse temperature per ``unit`` (percent of the data
            parallel iteration time, or "ms").
        space: the axes proposals may split (default: sample only, FlexFlow's default flags).
        initial: more initial candidates (the expert strategy, an imported one), used even where
            they split axes outside the space.
        cost_fn: score strategies with this instead of the simulator (tests).
        on_iteration: called after every proposal with (iteration, proposal, its cost); an
            exception from it ends the search like Ctrl-C does when it is a KeyboardInterrupt.
        follow: probability of copying a neighbour's configuration instead of a random one.
        sync: "lazy" (next delta covers the rejected operator too) or "back" (delta-simulate back
            to the current strategy after each rejection).

    Example:
        >>> r = mcmc(pcg, machine, AnalyticCostModel(), budget=100, seed=1)   # doctest: +SKIP
        >>> r.log.entries[-1].best_cost_s == r.cost_s                        # doctest: +SKIP
        True
    """
    check_budget(budget, "mcmc")
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if sync not in ("lazy", "back"):
        raise ValueError(f"sync must be 'lazy' or 'back', got {sync!r}")
    space = space or SearchSpace()
    rng = random.Random(seed)
    t0 = time.perf_counter()
    choices = OpChoices(pcg, machine, space)
    movable = choices.movable()
    scorer = Scorer(machine, cost_model, optimizer, cost_fn)
    log = SearchLog("mcmc", budget, seed)
    log.notes.update(alpha=alpha, unit=unit, space=str(space), sync=sync, follow=follow)
    candidates = initial_candidates(pcg, machine, choices, seed, initial, num_random)
    log.notes["candidates"] = [name for name, _ in candidates]
    share = max(1, budget // len(candidates)) if budget else 0
    best: Optional[Strategy] = None
    best_cost = math.inf
    bar = Progress(progress_default() if progress is None else progress, budget, "mcmc")
    iteration = 0
    try:
        for ci, (name, start) in enumerate(candidates):
            current, current_cost = start, scorer.full(start)
            if ci == 0:  # beta per second: alpha per percent of data parallelism's time, or per ms
                beta = alpha * (100.0 / current_cost if unit == "percent" and current_cost > 0 else 1e3)
            if current_cost < best_cost:
                best, best_cost = current, current_cost
            log.record(iteration, t0, current_cost, best_cost)
            pending: set[str] = set()  # operators where the simulator's strategy differs from `current`
            last_gain = 0
            steps = share if ci < len(candidates) - 1 else budget - share * (len(candidates) - 1)
            for step in range(max(0, steps)):
                if not movable:
                    log.stop_reason = "no operator has a second configuration"
                    break
                if step - last_gain > max(1, steps // 2):
                    break
                node = rng.choice(movable)
                config = None
                if follow and rng.random() < follow and choices.neighbours(node):
                    other = rng.choice(choices.neighbours(node))
                    config = choices.matching(node, choices.signature(other, current.configs[other.id]))
                    if config == current.configs[node.id]:
                        config = None
                if config is None:
                    config = choices.random(node, rng, current.configs[node.id])
                try:
                    proposal = current.with_config(node.id, config)
                except StrategyError:  # cannot happen for configurations from valid_configs; skip if it does
                    continue
                cost = scorer.score(proposal, pending | {node.name})
                iteration += 1
                log.proposals += 1
                if accept(cost - current_cost, beta, rng):
                    log.accepted += 1
                    current, current_cost, pending = proposal, cost, set()
                    if cost < best_cost:
                        best, best_cost, last_gain = proposal, cost, step
                elif sync == "back":
                    scorer.score(current, {node.name})
                    pending = set()
                else:
                    pending = {node.name}
                log.record(iteration, t0, current_cost, best_cost)
                bar.update(iteration, best_cost, log.acceptance_rate)
                if on_iteration is not None:
                    on_iteration(iteration, proposal, cost)
        log.stop_reason = log.stop_reason or ("budget spent" if iteration >= budget else
                                              "no improvement for half of a candidate's budget")
    except KeyboardInterrupt:
        log.interrupted = True
        log.stop_reason = "interrupted"
    finally:
        bar.close()
    log.notes.update(simulate_s=scorer.sim_s, full_simulations=scorer.full_calls,
                     delta_simulations=scorer.delta_calls)
    if best is None:  # interrupted before the first candidate was scored
        best = candidates[0][1]
    return SearchResult(best, best_cost, log)


register_algorithm("mcmc", mcmc)
