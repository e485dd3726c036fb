"""MCMC (FlexFlow §6.2): Eq. 1 acceptance, valid proposals, determinism, budget, Ctrl-C, log."""

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from flexrt.errors import ConfigError
from flexrt.ir.registry import AxisKind
from flexrt.machine import load_machine
from flexrt.search import SearchRequest, accept, mcmc, search
from flexrt.strategy import OpChoices, SearchSpace
from flexrt.simulator.simulate import simulate
from flexrt.strategy import Strategy, node_axes


@pytest.mark.parametrize("delta", [0.25, 1.0, 2.0])
def test_accept_frequency_follows_eq1(delta):
    rng = random.Random(7)
    n, beta = 20000, 1.3
    hits = sum(accept(delta, beta, rng) for _ in range(n))
    p = math.exp(-beta * delta)
    # 5 standard deviations of a binomial proportion
    assert abs(hits / n - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_accept_never_rejects_an_improvement():
    rng = random.Random(0)
    assert all(accept(d, 100.0, rng) for d in (-1.0, -1e-9, 0.0))


def test_mcmc_acceptance_rate_on_toy_cost(mlp, p100, cost):
    # toy cost: a fixed penalty per operator not on the sample axis alone; every proposal that adds
    # a penalty is Delta = 1 unit = 1% of the reference, so accepted with probability e^-alpha
    def toy(s: Strategy) -> float:
        return 100.0 + sum(1.0 for c in s.configs.values() if c.total_degree != 4)
    r = mcmc(mlp, p100, cost, budget=400, seed=3, alpha=0.5, space=SearchSpace.full(), cost_fn=toy, num_random=0)
    assert r.cost_s == 100.0
    assert r.log.notes["candidates"] == ["data-parallel"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_every_proposal_builds_and_simulates(mlp, p100, cost, seed):
    seen = []

    def check(i, proposal, c):
        assert math.isfinite(c) and c > 0
        proposal.check_views(p100)
        assert simulate(proposal, p100, cost).iteration_time_s == pytest.approx(c, rel=1e-9)
        seen.append(c)

    mcmc(mlp, p100, cost, budget=12, seed=seed, space=SearchSpace.full(), on_iteration=check, progress=False)
    assert seen


def test_proposals_stay_in_the_space(mlp, p100, cost):
    space = SearchSpace()  # sample axis only, FlexFlow's default flags
    kinds = []

    def check(i, proposal, c):
        for nid, cfg in proposal.configs.items():
            axes = {a.name: a.kind for a in node_axes(mlp, mlp.node(nid))[0]}
            kinds.extend(axes[a] for a, d in cfg.degrees if d > 1)

    mcmc(mlp, p100, cost, budget=40, seed=1, space=space, on_iteration=check)
    assert kinds and set(kinds) == {AxisKind.SAMPLE}


def test_space_flags_gate_axis_kinds():
    assert SearchSpace.from_flags().kinds == {AxisKind.SAMPLE}
    assert SearchSpace.from_flags(enable_attribute_parallel=True).kinds == {AxisKind.SAMPLE, AxisKind.ATTRIBUTE}
    assert SearchSpace.from_flags(only_data_parallel=True).kinds == {AxisKind.SAMPLE}
    with pytest.raises(ConfigError, match="--only-data-parallel contradicts --enable-parameter-parallel"):
        SearchSpace.from_flags(only_data_parallel=True, enable_parameter_parallel=True)
    assert AxisKind.REDUCTION in SearchSpace.from_flags(enable_parameter_parallel=True).kinds


def test_full_space_has_more_configurations(mlp, p100):
    fc1 = mlp.node_by_name("fc1")
    small = OpChoices(mlp, p100, SearchSpace()).configs(fc1)
    big = OpChoices(mlp, p100, SearchSpace.full()).configs(fc1)
    assert set(small) < set(big)


def test_same_seed_same_result(mlp, p100, cost):
    a = mcmc(mlp, p100, cost, budget=60, seed=5, space=SearchSpace.full())
    b = mcmc(mlp, p100, cost, budget=60, seed=5, space=SearchSpace.full())
    assert a.strategy.configs == b.strategy.configs and a.cost_s == b.cost_s
    assert [(e.current_cost_s, e.best_cost_s) for e in a.log.entries] == \
        [(e.current_cost_s, e.best_cost_s) for e in b.log.entries]


def test_budget_is_respected_and_log_monotone(mlp, p100, cost):
    r = search("mcmc", SearchRequest(mlp, p100, cost, budget=50, seed=2, space=SearchSpace.full()))
    assert r.log.proposals <= 50
    best = [e.best_cost_s for e in r.log.entries]
    assert all(b2 <= b1 for b1, b2 in zip(best, best[1:]))
    assert best[-1] == r.cost_s
    assert all(e.best_cost_s <= e.current_cost_s for e in r.log.entries)
    assert simulate(r.strategy, p100, cost).iteration_time_s == pytest.approx(r.cost_s, rel=1e-9)


def test_lazy_and_back_sync_give_the_same_chain(mlp, p100, cost):
    a = mcmc(mlp, p100, cost, budget=40, seed=9, space=SearchSpace.full(), sync="lazy")
    b = mcmc(mlp, p100, cost, budget=40, seed=9, space=SearchSpace.full(), sync="back")
    assert [e.current_cost_s for e in a.log.entries] == pytest.approx([e.current_cost_s for e in b.log.entries],
                                                                      rel=1e-12)


@pytest.mark.parametrize("seed", [2, 11])
def test_delta_and_full_simulation_give_the_same_search(mlp, cost, seed):
    """Delta simulation equals full simulation exactly, so a search scoring every proposal by full
    simulation (FlexFlow's Fig. 11 baseline) takes exactly the same steps."""
    machine = load_machine("flexflow_p100", nodes=2)
    a = mcmc(mlp, machine, cost, budget=60, seed=seed, space=SearchSpace.full())
    b = mcmc(mlp, machine, cost, budget=60, seed=seed, space=SearchSpace.full(), simulation="full")
    assert a.log.notes["simulation"] == "delta" and b.log.notes["simulation"] == "full"
    assert [e.current_cost_s for e in a.log.entries] == [e.current_cost_s for e in b.log.entries]
    assert a.cost_s == b.cost_s and a.strategy.configs == b.strategy.configs


def test_unknown_simulation_is_a_clear_error(mlp, p100, cost):
    with pytest.raises(ConfigError, match="simulation must be one of delta, full, got 'exact'"):
        mcmc(mlp, p100, cost, budget=5, simulation="exact")


def test_interrupt_returns_the_best_so_far(mlp, p100, cost):
    costs = []

    def stop_after(i, proposal, c):
        costs.append(c)
        if i == 7:
            raise KeyboardInterrupt

    r = mcmc(mlp, p100, cost, budget=100, seed=4, space=SearchSpace.full(), on_iteration=stop_after)
    assert r.log.interrupted and r.log.stop_reason == "interrupted"
    assert r.log.proposals == 7
    first = r.log.entries[0].current_cost_s
    assert r.cost_s == r.log.entries[-1].best_cost_s <= first
    assert r.cost_s >= min([first, *costs])
    assert simulate(r.strategy, p100, cost).iteration_time_s == pytest.approx(r.cost_s, rel=1e-9)


def test_zero_budget_returns_the_best_candidate(mlp, p100, cost):
    r = mcmc(mlp, p100, cost, budget=0, seed=0)
    assert r.log.proposals == 0 and math.isfinite(r.cost_s)


def test_unknown_algorithm_is_a_clear_error(mlp, p100, cost):
    from flexrt.errors import ConfigError
    with pytest.raises(ConfigError, match="unknown search algorithm 'annealing'; valid: .*exhaustive, .*mcmc"):
        search("annealing", SearchRequest(mlp, p100, cost))


def test_neighbour_signature_finds_the_same_placement(mlp, p100):
    choices = OpChoices(mlp, p100, SearchSpace.full())
    fc1, fc2 = mlp.node_by_name("fc1"), mlp.node_by_name("fc2")
    assert fc2 in choices.neighbours(fc1) and fc1 in choices.neighbours(fc2)
    for cfg in choices.configs(fc1):
        twin = choices.matching(fc2, choices.signature(fc1, cfg))
        if twin is not None:
            assert choices.signature(fc2, twin) == choices.signature(fc1, cfg)
    assert choices.matching(fc2, choices.signature(fc1, choices.configs(fc1)[0])) is not None


def test_follow_zero_is_flexflows_uniform_proposal(mlp, p100, cost):
    a = mcmc(mlp, p100, cost, budget=30, seed=1, space=SearchSpace.full(), follow=0.0)
    assert a.log.notes["follow"] == 0.0 and a.log.proposals > 0


def test_progress_line_shows_iterations_best_and_acceptance(capsys):
    from flexrt.search.api import Progress
    bar = Progress(True, 100, "mcmc")
    bar._bar = None  # the plain stderr line, whether or not tqdm is installed
    bar._last = float("-inf")
    bar.update(42, 0.0125, 0.25)
    bar.close()
    err = capsys.readouterr().err
    assert "42/100 iterations" in err and "best 12.500 ms" in err and "acceptance 25%" in err
    quiet = Progress(False, 100, "mcmc")
    quiet.update(1, 1.0, 1.0)
    assert capsys.readouterr().err == ""


def test_refine_ends_at_a_single_operator_local_optimum(mlp, p100, cost):
    # the final greedy descent: no single-operator change of the result is faster
    space = SearchSpace(placements="aligned")
    r = mcmc(mlp, p100, cost, budget=300, seed=0, space=space)
    assert r.log.stop_reason == "budget spent" and r.log.notes["refine"]
    choices = OpChoices(mlp, p100, space)
    for n in choices.ops:
        for cfg in choices.configs(n):
            other = simulate(r.strategy.with_config(n.id, cfg), p100, cost).iteration_time_s
            assert other >= r.cost_s * (1 - 1e-9)


def test_refine_false_is_flexflows_chains(mlp, p100, cost):
    r = mcmc(mlp, p100, cost, budget=60, seed=2, space=SearchSpace.full(), refine=False, segment=0.0)
    assert r.log.notes["restarts"] == 0 and r.log.proposals <= 60
