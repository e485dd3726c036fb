"""FlexFlow's MCMC search (FlexFlow §6.2): Metropolis–Hastings over the SOAP space.

A proposal gives one random operator a random configuration of its space (degrees over its
allowed axes, then a machine view for them) and is scored by delta simulation. With probability
``follow`` (default 0.25) the operator instead takes the configuration of a random neighbour
(same degree per axis kind, same devices) where it has one: FlexFlow's uniform proposal alone
rarely moves a whole run of operators onto other devices, since each single step in between pays
for new transfers on both sides (on LeNet it stalls 3-7% above the optimum; with ``follow`` it
reaches it). With probability ``segment`` (default 0.25) the proposal is a *run move*: every unit
from the chosen one to another random one (topological order) takes the same signature, so a
stage of a pipeline moves in one step. ``follow=0, segment=0`` is FlexFlow's proposal exactly.
With ``space.tie_shared`` a proposal changes a *unit*: the operators sharing a weight (the steps
of an unrolled RNN layer) together. A proposal is accepted with FlexFlow's Eq. 1 probability::

    alpha(S* | S) = min(1, exp(beta * (cost(S) - cost(S*))))

``beta`` comes from ``--alpha``. FlexFlow's code compares simulated milliseconds (beta = alpha per
ms); that makes the temperature depend on the model's size (LeNet's 0.2 ms iterations accept
everything, a random walk). Ours measures the difference in percent of the data-parallel
iteration time by default (``unit="percent"``: a proposal 1% slower than the current strategy is
accepted with probability e^-alpha); ``unit="ms"`` gives FlexFlow's literal rule.

Initial candidates (§6.2): data parallelism, the expert strategy and an imported strategy where
given, and random strategies. Each runs its own chain on an equal share of the budget (proposals)
and stops early when it has not improved the best strategy for half of its share.

``refine=True`` (default) adds two things FlexFlow's search lacks; measured on FlexFlow §8.3's
LeNet (sample axis, aligned placements, 4 P100s) the chains alone reach the exhaustive optimum for
1 seed of 3, stuck in basins 0.8% and 5% above it whose way out passes through strategies 5-20%
slower (two pipeline stages must move at once):

- multi-start: the budget is split into ``starts`` runs (at least one per candidate); after the
  candidates, runs start alternately from the best strategy (a reheat) and from new random
  strategies of the space. Each chain gets half of its run's share;
- greedy descent at the end of each chain (variable-neighbourhood descent): a move gives a run of
  ``length`` consecutive units the configuration signature of the run's first unit (length 1:
  every single-operator change); improvements are taken as found, longer runs are tried only
  where no shorter move improves, and the descent ends at a local optimum of all these moves.

Descent moves are proposals: they count against the budget and are logged and reported to
``on_iteration``; the search then always spends its budget.

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
from flexrt.ir.pcg import PCG, Node
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.search.api import (Progress, Scorer, SearchLog, SearchResult, check_budget, initial_candidates,
                               progress_default, register_algorithm)
from flexrt.strategy import OpChoices, OpConfig, SearchSpace, Strategy

UNITS = ("percent", "ms")


def accept(delta: float, beta: float, rng: random.Random) -> bool:
    """Eq. 1: always accept a proposal no slower than the current strategy (``delta`` =
    cost(proposal) - cost(current) <= 0); else accept with probability exp(-beta * delta)."""
    if delta <= 0:
        return True
    return rng.random() < math.exp(-beta * delta)


def mcmc(pcg: PCG, machine: Machine, cost_model, budget: int = 1000, seed: int = 0, alpha: float = 1.05,
         space: Optional[SearchSpace] = None, initial: Sequence[Strategy] = (), num_random: int = 1,
         optimizer: OptimizerKind = OptimizerKind.SGD, cost_fn: Optional[Callable[[Strategy], float]] = None,
         on_iteration: Optional[Callable[[int, Strategy, float], None]] = None,
         progress: Optional[bool] = None, sync: str = "lazy", unit: str = "percent",
         follow: float = 0.25, segment: float = 0.25, refine: bool = True, starts: int = 6,
         simulation: str = "delta") -> SearchResult:
    """Search the strategy space of ``pcg`` with MCMC; returns the best strategy found.

    Args:
        budget: proposals in all, descent moves included (see ``refine``).
        alpha: FlexFlow's ``--alpha``, the inverse temperature per ``unit`` (percent of the data
            parallel iteration time, or "ms").
        space: the axes proposals may split (default: sample only, FlexFlow's default flags).
        initial: more initial candidates (the expert strategy, an imported one), used even where
            they split axes outside the space.
        cost_fn: score strategies with this instead of the simulator (tests).
        on_iteration: called after every proposal with (iteration, proposal, its cost); an
            exception from it ends the search like Ctrl-C does when it is a KeyboardInterrupt.
        follow: probability of copying a neighbour's configuration instead of a random one.
        segment: probability of a run move (module docstring).
        refine: multi-start chains each ended by a greedy descent, until the budget is spent
            (module docstring); False gives FlexFlow's candidate chains alone.
        starts: chain + descent runs the budget is split into with ``refine``.
        sync: "lazy" (next delta covers the rejected operator too) or "back" (delta-simulate back
            to the current strategy after each rejection).
        simulation: "delta" (FlexFlow's Algorithm 2 per proposal) or "full" (Algorithm 1 per
            proposal: the same search, the same result, slower; FlexFlow's Fig. 11 baseline).

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
    movable = choices.movable_units()
    scorer = Scorer(machine, cost_model, optimizer, cost_fn, simulation)
    log = SearchLog("mcmc", budget, seed)
    log.notes.update(alpha=alpha, unit=unit, space=str(space), sync=sync, follow=follow, segment=segment,
                     refine=refine, simulation=simulation)
    candidates = initial_candidates(pcg, machine, choices, seed, initial, num_random)
    log.notes["candidates"] = [name for name, _ in candidates]
    # refine: `starts` chain + descent runs (the candidates, then alternately the best strategy
    # and new random ones), each chain on half of its share; else FlexFlow's chains on the budget
    runs = max(len(candidates), starts) if refine else len(candidates)
    share = max(1, budget // runs) if budget else 0
    chain_steps = max(1, share // 2) if refine else share
    bar = Progress(progress_default() if progress is None else progress, budget, "mcmc")
    st = _State(scorer, log, bar, t0, sync, on_iteration)
    beta = 0.0
    restart_rng = random.Random(seed * 7919 + 29)
    try:
        for ci, (name, start) in enumerate(candidates):
            st.restart(start)
            if ci == 0:  # beta per second: alpha per percent of data parallelism's time, or per ms
                beta = alpha * (100.0 / st.current_cost if unit == "percent" and st.current_cost > 0 else 1e3)
            if not movable:
                log.stop_reason = "no operator has a second configuration"
                break
            steps = chain_steps if refine or ci < len(candidates) - 1 else budget - share * (len(candidates) - 1)
            _chain(st, choices, movable, rng, beta, follow, min(steps, budget - st.iteration), segment)
            if refine:
                _descend(st, choices, movable, budget)
        rounds = _restarts(st, pcg, choices, movable, rng, restart_rng, beta, follow, segment, chain_steps,
                           budget) if refine and movable else 0
        log.notes["restarts"] = rounds
        log.stop_reason = log.stop_reason or ("budget spent" if st.iteration >= budget else
                                              "no improvement for half of a candidate's budget")
    except KeyboardInterrupt:
        log.interrupted = True
        log.stop_reason = "interrupted"
    finally:
        bar.close()
    log.notes.update(simulate_s=scorer.sim_s, full_simulations=scorer.full_calls,
                     delta_simulations=scorer.delta_calls)
    best = st.best if st.best is not None else candidates[0][1]  # None: interrupted before any score
    return SearchResult(best, st.best_cost, log)


def _restarts(st: "_State", pcg: PCG, choices: OpChoices, movable, rng, restart_rng, beta: float, follow: float,
              segment: float, chain_steps: int, budget: int) -> int:
    """``refine``'s rounds after the candidates' runs, until the budget is spent: a chain and a
    descent from the best strategy and from a new random one, alternately; returns the rounds."""
    rounds = 0
    while 0 < st.iteration < budget:
        rounds += 1
        before = st.iteration
        if rounds % 2:
            st.restart(st.best)
        else:
            try:
                st.restart(Strategy.from_configs(pcg, choices.random_configs(restart_rng)))
            except StrategyError:  # cannot happen for configurations of the space; reheat if it does
                st.restart(st.best)
        _chain(st, choices, movable, rng, beta, follow, min(chain_steps, budget - st.iteration), segment)
        _descend(st, choices, movable, budget)
        if st.iteration == before:  # no proposal could be built: nothing more to search
            break
    return rounds


class _State:
    """The chain's current strategy, the best one, and the simulator's view of them.

    ``pending`` holds the operators where the simulator's strategy differs from ``current`` (the
    last rejected proposal's, with lazy sync)."""

    def __init__(self, scorer: Scorer, log: SearchLog, bar: Progress, t0: float, sync: str, on_iteration) -> None:
        self.scorer, self.log, self.bar, self.t0, self.sync, self.on_iteration = scorer, log, bar, t0, sync, on_iteration
        self.current: Optional[Strategy] = None
        self.current_cost = math.inf
        self.best: Optional[Strategy] = None
        self.best_cost = math.inf
        self.pending: set[str] = set()
        self.iteration = 0

    def restart(self, start: Strategy) -> None:
        """Make ``start`` current (one full simulation)."""
        self.current, self.current_cost, self.pending = start, self.scorer.full(start), set()
        if self.current_cost < self.best_cost:
            self.best, self.best_cost = self.current, self.current_cost
        self.log.record(self.iteration, self.t0, self.current_cost, self.best_cost)

    def propose(self, configs: dict[int, OpConfig], names: set[str],
                decide: Callable[[float], bool]) -> Optional[bool]:
        """Score the current strategy with ``configs`` changed; move there if ``decide(delta)``.
        Returns whether it moved, or None where the proposal could not be built."""
        try:
            proposal = self.current.with_configs(configs)
        except StrategyError:  # cannot happen for configurations from valid_configs; skip if it does
            return None
        cost = self.scorer.score(proposal, self.pending | names)
        self.iteration += 1
        self.log.proposals += 1
        moved = decide(cost - self.current_cost)
        if moved:
            self.log.accepted += 1
            self.current, self.current_cost, self.pending = proposal, cost, set()
            if cost < self.best_cost:
                self.best, self.best_cost = proposal, cost
        elif self.sync == "back":
            self.scorer.score(self.current, names)
            self.pending = set()
        else:
            self.pending = set(names)
        self.log.record(self.iteration, self.t0, self.current_cost, self.best_cost)
        self.bar.update(self.iteration, self.best_cost, self.log.acceptance_rate)
        if self.on_iteration is not None:
            self.on_iteration(self.iteration, proposal, cost)
        return moved


def _run_configs(choices: OpChoices, run: Sequence[list[Node]], lead: list[Node], config: OpConfig) -> dict:
    """Configurations giving every unit of ``run`` the signature of ``lead`` taking ``config``
    (units with no configuration of that signature are left out)."""
    sig = choices.signature(lead[0], config)
    out: dict[int, OpConfig] = {}
    for group in run:
        c = config if group is lead else choices.matching(group[0], sig)
        u = choices.unit_configs(group, c) if c is not None else None
        if u is not None:
            out.update(u)
    return out


def _chain(st: _State, choices: OpChoices, movable: list[list[Node]], rng: random.Random, beta: float,
           follow: float, steps: int, segment: float = 0.0) -> None:
    """One Metropolis–Hastings chain from ``st.current``: ``steps`` proposals at most, stopping
    when the best cost has not improved for half of them (FlexFlow §6.2)."""
    last_gain = 0
    for step in range(max(0, steps)):
        if step - last_gain > max(1, steps // 2):
            break
        group = rng.choice(movable)
        node = group[0]
        configs = None
        if follow and rng.random() < follow:
            members = {n.id for n in group}
            nbrs = [o for n in group for o in choices.neighbours(n) if o.id not in members]
            if nbrs:
                other = rng.choice(nbrs)
                config = choices.matching(node, choices.signature(other, st.current.configs[other.id]))
                if config is not None and config != st.current.configs[node.id]:
                    configs = choices.unit_configs(group, config)
        if configs is None:
            configs = choices.random_unit(group, rng, st.current.configs)
        names = {n.name for n in group}
        if segment and rng.random() < segment and len(movable) > 1:
            # a run of units from this one to another random one takes its configuration too
            i, j = movable.index(group), rng.randrange(len(movable))
            configs = dict(configs)
            configs.update(_run_configs(choices, movable[min(i, j):max(i, j) + 1], group, configs[node.id]))
            configs = {k: v for k, v in configs.items() if st.current.configs[k] != v}
            names = {choices.base.node(k).name for k in configs} | names
        before = st.best_cost
        st.propose(configs, names, lambda d: accept(d, beta, rng))
        if st.best_cost < before:
            last_gain = step


def _descend(st: _State, choices: OpChoices, movable: list[list[Node]], budget: int) -> None:
    """Greedy descent from ``st.current`` (the end of a chain): a move gives a run of
    ``length`` consecutive units (topological order) the configuration of the run's first unit
    (the same signature: degree per axis kind and devices; units that cannot match keep theirs);
    length 1 is every single-unit change. Improvements are taken as found; lengths grow only
    while no shorter move improves, and the descent ends at a strategy no such move improves."""
    n = len(movable)
    length = 1
    while length <= n and st.iteration < budget:
        improved = False
        for i in range(n - length + 1):
            lead = movable[i]
            for option in choices.unit_options(lead):
                if st.iteration >= budget:
                    return
                configs = dict(option)
                sig = choices.signature(lead[0], option[lead[0].id])
                for group in movable[i + 1:i + length]:
                    c = choices.matching(group[0], sig)
                    u = choices.unit_configs(group, c) if c is not None else None
                    if u is not None:
                        configs.update(u)
                if all(st.current.configs[k] == v for k, v in configs.items()):
                    continue
                names = {choices.base.node(k).name for k, v in configs.items() if st.current.configs[k] != v}
                changed = {k: v for k, v in configs.items() if st.current.configs[k] != v}
                if st.propose(changed, names, lambda d: d < -1e-12 * st.current_cost):
                    improved = True
        length = 1 if improved else length + 1


register_algorithm("mcmc", mcmc)
