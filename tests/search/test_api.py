"""The one search entry: ``SearchRequest`` validation, the algorithm registry, ``search(name, request)``."""

import dataclasses
import json
import subprocess
import sys

import pytest

from flexrt.errors import ConfigError
from flexrt.search import SearchRequest, SearchResult, algorithm, algorithms, register_algorithm, search
from flexrt.search import api
from flexrt.strategy import SearchSpace, data_parallel

EVERY_ALGORITHM = {"mcmc", "disco", "exhaustive", "unity", "sequential", "data-parallel", "model-parallel", "expert",
                   "one-weird-trick", "wu-rnn", "megatron", "megatron-lm", "neo-dlrm", "pipeline"}


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for one test: what the test registers is gone afterwards."""
    monkeypatch.setattr(api, "_ALGORITHMS", dict(api._ALGORITHMS))
    return api._ALGORITHMS


# ---- SearchRequest ------------------------------------------------------------------------------

@pytest.mark.parametrize("budget", [-1, 1.5, True, "10", None])
def test_request_rejects_a_bad_budget(mlp, p100, cost, budget):
    with pytest.raises(ConfigError, match=r"budget must be an integer >= 0, got"):
        SearchRequest(mlp, p100, cost, budget=budget)


@pytest.mark.parametrize("field, value, message", [
    ("seed", 1.0, "seed must be an integer, got 1.0"),
    ("seed", False, "seed must be an integer"),
    ("space", "full", "space must be a SearchSpace or None"),
    ("initial", "dp", "initial strategies are a tuple of strategies, got str"),
    ("initial", (1,), "initial strategies must be strategies .*got int"),
    ("optimizer", "lamb", "optimizer must be one of sgd, momentum, adam, rmsprop, adagrad, got 'lamb'"),
    ("progress", 1, "progress must be True, False or None"),
    ("options", 3, "options are a mapping of option name to value"),
    ("options", {"not a name": 1}, "option names are keyword names"),
])
def test_request_rejects_bad_fields_saying_what_is_valid(mlp, p100, cost, field, value, message):
    with pytest.raises(ConfigError, match=message):
        SearchRequest(mlp, p100, cost, **{field: value})


def test_request_rejects_what_is_not_a_model_machine_or_cost_model(mlp, p100, cost):
    with pytest.raises(ConfigError, match="pcg must be a PCG"):
        SearchRequest("lenet", p100, cost)
    with pytest.raises(ConfigError, match="machine must be a Machine"):
        SearchRequest(mlp, "flexflow_p100", cost)
    with pytest.raises(ConfigError, match="cost_model must be a cost model"):
        SearchRequest(mlp, p100, None)


def test_request_is_frozen_with_read_only_options(mlp, p100, cost):
    given = {"alpha": 2.0}
    r = SearchRequest(mlp, p100, cost, initial=[data_parallel(mlp, p100)], options=given)
    given["alpha"] = 9.0
    assert r.options["alpha"] == 2.0 and isinstance(r.initial, tuple) and r.budget == api.DEFAULT_BUDGET
    with pytest.raises(TypeError):
        r.options["alpha"] = 3.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.budget = 5
    assert dataclasses.replace(r, seed=4).options == {"alpha": 2.0}


# ---- the registry -------------------------------------------------------------------------------

def test_import_registers_every_algorithm_in_a_fresh_interpreter():
    code = "import json, flexrt.search as s; print(json.dumps(s.algorithms()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert set(json.loads(out)) == EVERY_ALGORITHM


def test_reimporting_an_algorithm_module_re_registers_it_in_a_fresh_interpreter():
    code = ("import importlib, sys, flexrt.search as s\n"
            "m = sys.modules['flexrt.search.mcmc']  # flexrt.search.mcmc is the function, shadowing the module\n"
            "old = s.algorithm('mcmc').fn\n"
            "importlib.reload(m)\n"
            "print(s.algorithm('mcmc').fn is m.mcmc and old is not m.mcmc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_registering_a_name_twice_is_an_error(registry):
    def other(pcg, machine, cost_model, budget=0, seed=0):
        raise AssertionError("never run")

    with pytest.raises(ConfigError, match="'mcmc' is registered twice: by flexrt.search.mcmc.mcmc and by"):
        register_algorithm("mcmc", other)
    assert algorithm("mcmc").fn is not other


def test_options_and_request_fields_come_from_the_signature(registry, mlp, p100, cost):
    seen = {}

    def fake(pcg, machine, cost_model, budget=0, seed=0, space=None, progress=None, alpha=1.0, depth=2):
        seen.update(budget=budget, seed=seed, space=space, progress=progress, alpha=alpha, depth=depth)
        return SearchResult(None, 1.0, api.SearchLog("fake", budget, seed))

    entry = register_algorithm("fake", fake)
    assert entry.options == {"alpha", "depth"} and entry.fields == {"space", "progress"}
    assert "fake" in algorithms()
    search("fake", SearchRequest(mlp, p100, cost, budget=7, seed=3, space=SearchSpace.full(), options={"alpha": 4.0}))
    assert seen == {"budget": 7, "seed": 3, "space": SearchSpace.full(), "progress": None, "alpha": 4.0, "depth": 2}


def test_declared_options_must_be_taken_and_not_request_fields(registry):
    def fixed(pcg, machine, cost_model, budget=0, seed=0, alpha=1.0):
        raise AssertionError("never run")

    def open_ended(pcg, machine, cost_model, budget=0, seed=0, **options):
        raise AssertionError("never run")

    with pytest.raises(ConfigError, match="its function takes no beta; its keyword parameters: alpha"):
        register_algorithm("fixed", fixed, options={"alpha", "beta"})
    with pytest.raises(ConfigError, match="seed are SearchRequest fields, not options"):
        register_algorithm("open", open_ended, options={"seed"})
    assert register_algorithm("open", open_ended, options=("beta",)).options == {"beta"}
    with pytest.raises(ConfigError, match=r"must take \(pcg, machine, cost_model, budget=, seed="):
        register_algorithm("nobudget", lambda pcg, machine, cost_model: None)


# ---- search(name, request) ----------------------------------------------------------------------

@pytest.mark.parametrize("name, option, valid", [
    ("mcmc", "split_size", "valid options: alpha, cost_fn, follow"),
    ("exhaustive", "alpha", "valid options: on_leaf, prefix_bound"),   # was swallowed by **_ignored
    ("unity", "follow", "valid options: alpha, cache, config_ratio, devices"),
    ("data-parallel", "alpha", "valid options: none"),
])
def test_an_option_the_algorithm_does_not_take_is_an_error(mlp, p100, cost, name, option, valid):
    with pytest.raises(ConfigError, match=f"'{name}' takes no option '{option}'; {valid}"):
        search(name, SearchRequest(mlp, p100, cost, budget=1, options={option: 1}))


def test_a_request_field_the_algorithm_does_not_take_is_an_error(mlp, p100, cost):
    dp = data_parallel(mlp, p100)
    with pytest.raises(ConfigError, match="'pipeline' takes no initial .*1 strategies.*that do: disco, exhaustive, "
                                          "mcmc, sequential, unity"):
        search("pipeline", SearchRequest(mlp, p100, cost, initial=(dp,)))
    with pytest.raises(ConfigError, match="'model-parallel' takes no space"):
        search("model-parallel", SearchRequest(mlp, p100, cost, space=SearchSpace.full()))


def test_search_needs_a_request(mlp, p100, cost):
    with pytest.raises(ConfigError, match="request must be a SearchRequest"):
        search("mcmc", mlp)


def test_search_passes_options_and_fields_to_the_algorithm(mlp, p100, cost):
    r = search("mcmc", SearchRequest(mlp, p100, cost, budget=12, seed=5, space=SearchSpace.full(), progress=False,
                                     options={"alpha": 3.0, "refine": False}))
    assert r.log.budget == 12 and r.log.seed == 5 and r.log.proposals <= 12
    assert r.log.notes["alpha"] == 3.0 and r.log.notes["refine"] is False
    assert r.log.notes["space"] == str(SearchSpace.full())


def test_baselines_are_algorithms_scored_by_one_simulation(mlp, p100, cost):
    from flexrt.search.baselines import model_parallel
    from flexrt.simulator.simulate import simulate
    r = search("model-parallel", SearchRequest(mlp, p100, cost, budget=0))
    assert r.algorithm == "model-parallel" and r.strategy.configs == model_parallel(mlp, p100).configs
    assert r.cost_s == pytest.approx(simulate(r.strategy, p100, cost).iteration_time_s, rel=1e-12)
    with pytest.raises(ConfigError, match="model mlp has no expert strategy"):
        search("expert", SearchRequest(mlp, p100, cost, options={"model": "mlp"}))
    with pytest.raises(ConfigError, match="needs option 'model'"):
        search("expert", SearchRequest(mlp, p100, cost))


@pytest.mark.parametrize("name", sorted(a for a in EVERY_ALGORITHM if "initial" in algorithm(a).fields))
def test_a_search_never_returns_a_strategy_slower_than_an_initial_one(name, mlp, p100, cost):
    """Given Unity's strategy (one a budget of 1 cannot reach, or a graph the algorithm cannot walk), every
    algorithm that takes initial strategies returns one at least as fast, and says so in its log."""
    from flexrt.search.api import Scorer
    good = search("unity", SearchRequest(mlp, p100, cost, budget=50))
    dp_cost = Scorer(p100, cost).full(data_parallel(mlp, p100))
    assert good.cost_s < dp_cost
    r = search(name, SearchRequest(mlp, p100, cost, budget=1, initial=(data_parallel(mlp, p100), good.strategy)))
    assert r.cost_s <= good.cost_s * (1 + 1e-12)
    kept = r.log.notes.get("initial_kept")
    if kept:
        assert kept["index"] == 1 and kept["initial_s"] == r.cost_s < kept["found_s"]
