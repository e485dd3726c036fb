"""DisCo's fusion search (search/disco.py, Algorithm 1): never worse than its start, deterministic
for a seed, within its budget, keeps the best on Ctrl-C, honours ``methods``; its plans are valid
and re-simulate to the reported cost; ``flexrt search --algo disco`` runs end to end."""

from __future__ import annotations

import json
from functools import cache

import pytest

from flexrt.cli import main
from flexrt.errors import ConfigError
from flexrt.search import SearchRequest, search
from flexrt.search.disco import disco
from flexrt.search.fusion_policies import fully_overlapped, fusion_policy
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import check_fusion
from tests.search.test_fusion_policies import COST, cnn, machine, transformer


@cache
def pcg(name: str):
    return {"cnn": cnn, "transformer": transformer}[name]()


def simulated(strategy) -> float:
    return Simulator(machine(), COST, detail=False, incremental=False).time_full(strategy)


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_disco_improves_on_its_start_and_its_plan_is_valid(model):
    r = search("disco", SearchRequest(pcg(model), machine(), COST, budget=60, seed=1))
    start = r.log.entries[0].best_cost_s
    assert r.cost_s <= start == simulated(data_parallel(pcg(model), machine()))
    assert r.log.proposals <= 60 and r.algorithm == "disco"
    assert r.cost_s == pytest.approx(simulated(r.strategy), rel=1e-12)
    if r.strategy.fusion:
        check_fusion(r.strategy, r.strategy.fusion, machine())
        assert r.strategy.fusion.name == "disco"
    assert [e.best_cost_s for e in r.log.entries] == sorted((e.best_cost_s for e in r.log.entries), reverse=True)
    sim = Simulator(machine(), COST, detail=False, incremental=False)
    sim.time_full(r.strategy)
    assert fully_overlapped(sim) <= r.cost_s * (1 + 1e-12)


def test_same_seed_same_result_and_budget_obeyed():
    runs = [disco(pcg("cnn"), machine(), COST, budget=25, seed=s) for s in (3, 3, 4)]
    a, b, _ = runs
    assert a.cost_s == b.cost_s and a.strategy.fusion == b.strategy.fusion
    assert [(e.iteration, e.current_cost_s, e.best_cost_s) for e in a.log.entries] == \
        [(e.iteration, e.current_cost_s, e.best_cost_s) for e in b.log.entries]
    assert a.log.notes["candidates"] == b.log.notes["candidates"]
    assert all(r.log.proposals <= 25 for r in runs)
    assert disco(pcg("cnn"), machine(), COST, budget=0).log.proposals == 0


def test_interrupt_keeps_the_best_so_far():
    costs = []

    def stop(i, plan, cost):
        costs.append(cost)
        if i == 5:
            raise KeyboardInterrupt

    r = disco(pcg("cnn"), machine(), COST, budget=100, seed=2, on_candidate=stop)
    assert r.log.interrupted and r.log.stop_reason == "interrupted" and r.log.proposals == 5
    first = r.log.entries[0].best_cost_s
    assert r.cost_s == min([first] + [c for c in costs if c is not None])
    assert r.cost_s == pytest.approx(simulated(r.strategy), rel=1e-12)


def test_methods_subsets_for_the_ablation():
    only_ar = disco(pcg("transformer"), machine(), COST, budget=30, seed=0, methods=("allreduce",))
    plan = only_ar.strategy.fusion
    assert plan is None or not plan.groups
    assert set(only_ar.log.notes["improvements"]) == {"allreduce"}
    only_op = disco(pcg("transformer"), machine(), COST, budget=30, seed=0, methods="op")
    plan = only_op.strategy.fusion
    assert plan is None or (not plan.buckets and not any(g.duplicate for g in plan.groups))
    assert only_op.log.notes["candidates"] == {"op": only_op.log.proposals}
    with pytest.raises(ConfigError, match="methods must be a non-empty subset of op, dup, allreduce"):
        disco(pcg("cnn"), machine(), COST, budget=3, methods=("op", "tensor"))
    with pytest.raises(ConfigError, match="alpha is the pruning threshold"):
        disco(pcg("cnn"), machine(), COST, budget=3, alpha=0.5)


def test_starts_from_the_initial_strategys_plan():
    s = data_parallel(pcg("transformer"), machine())
    jax = s.with_fusion(fusion_policy("jax")(s, machine()))
    r = search("disco", SearchRequest(pcg("transformer"), machine(), COST, budget=20, seed=0, initial=(jax,)))
    assert r.log.entries[0].best_cost_s == simulated(jax) >= r.cost_s


def test_search_cli_runs_disco_and_applies_fusion_policies(capsys):
    args = ["search", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--seed", "1"]
    assert main(args + ["--algo", "disco", "--budget", "20", "--beta", "4", "--methods", "op,allreduce",
                        "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["algorithm"] == "disco" and doc["iteration_time_s"] <= doc["data_parallel_s"]
    assert doc["log"]["notes"]["methods"] == ["op", "allreduce"] and doc["log"]["proposals"] <= 20
    assert main(args + ["--algo", "data-parallel", "--fusion", "jax", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fusion"] == "jax" and doc["unfused_s"] == doc["data_parallel_s"] != doc["iteration_time_s"]
    assert main(["simulate", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--fusion", "xla", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fusion"] == "xla"
    assert main(args + ["--algo", "mcmc", "--budget", "2", "--beta", "3"]) != 0
    assert "--beta: --algo mcmc takes no such option" in capsys.readouterr().err


def test_a_fusion_plan_from_a_strategy_file_is_reported_and_refused_by_delta(tmp_path, capsys):
    """A plan arriving through --strategy ran as "internal error: delta diverged"; --json said fusion off."""
    path = str(tmp_path / "d.json")
    args = ["lenet", "--machine", "flexflow_p100", "--nodes", "1"]
    assert main(["search", *args, "--algo", "disco", "--budget", "10", "--export", path, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["simulate", *args, "--strategy", path, "--method", "delta"]) == 1
    assert "holds a fusion plan, and delta simulation walks per-operator changes" in capsys.readouterr().err
    assert main(["simulate", *args, "--strategy", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fusion_groups"] > 0


def test_fused_cost_without_fused_tasks_warns(capsys):
    """It was accepted and printed "fused tasks timed ..." though nothing was fused."""
    args = ["simulate", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--fused-cost", "analytic"]
    assert main(args) == 0
    assert "times fused tasks, and this strategy has none" in capsys.readouterr().err
    assert main(args + ["--fusion", "xla"]) == 0
    assert "has none" not in capsys.readouterr().err


def test_methods_with_an_empty_item_are_refused():
    from flexrt.search.disco import check_methods
    with pytest.raises(ConfigError, match="non-empty subset of op, dup, allreduce"):
        check_methods("op,")
    assert check_methods(" op , allreduce") == ("op", "allreduce")
