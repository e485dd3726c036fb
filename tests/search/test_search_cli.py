"""``flexrt search`` and compile's search (FlexFlow: compile searches when --budget is given)."""

import dataclasses
import json

import pytest

from flexrt.cli import main
from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.strategy import SearchSpace, data_parallel, load_strategy, save_strategy


def test_search_cli_json_compares_with_baselines(capsys, tmp_path):
    out = tmp_path / "s.json"
    rc = main(["search", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--budget", "30", "--seed", "1",
               "--export", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["algorithm"] == "mcmc" and doc["num_devices"] == 4
    assert doc["iteration_time_s"] <= doc["data_parallel_s"]
    assert doc["log"]["proposals"] <= 30
    pcg = load_model("lenet").model.pcg
    s = load_strategy(str(out), pcg, load_machine("flexflow_p100", nodes=1))
    assert set(s.configs) == {n.id for n in pcg.nodes if n.id in s.configs} and s.configs


def test_search_cli_prints_data_parallel_baseline(capsys):
    rc = main(["search", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--algo", "data-parallel"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "data parallel" in text and "speed-up 1.00x" in text


def test_search_cli_same_seed_same_result(capsys):
    args = ["search", "lenet", "--machine", "flexflow_p100", "--nodes", "1", "--budget", "20", "--seed", "3",
            "--enable-parameter-parallel", "--json"]
    main(args)
    a = json.loads(capsys.readouterr().out)
    main(args)
    b = json.loads(capsys.readouterr().out)
    assert a["iteration_time_s"] == b["iteration_time_s"] and a["strategy"] == b["strategy"]
    assert "parameter" in a["space"] and "reduction" in a["space"]


def test_compile_searches_when_budget_given(monkeypatch):
    from flexrt.model import training
    calls = []
    real = training._search_strategy

    def spy(pcg, machine, cfg):
        calls.append(cfg.search_budget)
        return real(pcg, machine, cfg)

    monkeypatch.setattr(training, "_search_strategy", spy)
    from flexrt.core import FFConfig
    assert training._search_requested(FFConfig(["--budget", "5"]))
    assert not training._search_requested(FFConfig([]))
    assert not training._search_requested(FFConfig(["--budget", "5", "--only-data-parallel"]))
    assert not training._search_requested(FFConfig(["--budget", "0"]))


def test_compile_runs_mcmc_and_trains_with_its_strategy(monkeypatch):
    from flexrt.core import ActiMode, DataType, FFConfig, FFModel, LossType, SGDOptimizer
    from flexrt.model import training
    seen = []
    real = training._search_strategy
    monkeypatch.setattr(training, "_search_strategy", lambda p, m, c: seen.append(c) or real(p, m, c))
    m = FFModel(FFConfig(["-b", "8", "--budget", "6", "--enable-parameter-parallel"]))
    x = m.create_tensor([8, 16], DataType.DT_FLOAT)
    t = m.dense(x, 32, ActiMode.AC_MODE_RELU)
    t = m.dense(t, 4)
    m.softmax(t)
    m.compile(optimizer=SGDOptimizer(m, 0.01), loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
    assert len(seen) == 1 and seen[0].search_budget == 6
    assert m.strategy.configs  # the search's per-operator strategy is the one compiled


# ---- every strategy comes from search(name, request) --------------------------------------------

@pytest.fixture
def calls(monkeypatch):
    """Every registered algorithm wrapped to record (name, the keywords search() gave it)."""
    from flexrt.search import api
    seen = []
    registry = dict(api._ALGORITHMS)
    for name, entry in registry.items():
        def spy(*args, _name=name, _fn=entry.fn, **kwargs):
            seen.append((_name, kwargs))
            return _fn(*args, **kwargs)
        registry[name] = dataclasses.replace(entry, fn=spy)
    monkeypatch.setattr(api, "_ALGORITHMS", registry)
    return seen


LENET = ["search", "lenet", "--machine", "flexflow_p100", "--nodes", "1"]


def test_search_cli_runs_the_algorithm_and_the_baselines_through_search(calls, capsys):
    assert main(LENET + ["--budget", "8", "--seed", "2", "--enable-parameter-parallel", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [name for name, _ in calls] == ["data-parallel", "expert", "mcmc"]
    _, expert = calls[1]
    assert expert["model"] == "lenet" and "space" not in expert
    _, kw = calls[2]
    assert kw["budget"] == 8 and kw["seed"] == 2 and kw["progress"] is False
    assert kw["space"] == SearchSpace.from_flags(enable_parameter_parallel=True) and len(kw["initial"]) == 1
    assert "alpha" not in kw  # not given: MCMC's own default
    assert doc["log"]["budget"] == 8 and doc["log"]["notes"]["alpha"] == 1.05


def test_search_cli_gives_unity_its_flags_as_options(calls, capsys):
    assert main(LENET + ["--algo", "unity", "--budget", "2", "--devices", "2", "--split-size", "0", "--no-cache",
                         "--json"]) == 0
    name, kw = calls[-1]
    assert name == "unity" and kw["space"] == SearchSpace.full() and len(kw["initial"]) == 1   # the expert
    assert {k: kw[k] for k in ("split_size", "cache", "devices")} == {"split_size": 0, "cache": False, "devices": 2}
    assert "config_ratio" not in kw   # not given: the search's own default
    assert json.loads(capsys.readouterr().out)["algorithm"] == "unity"
    assert main(LENET + ["--algo", "sequential", "--budget", "2", "--config-ratio", "0", "--json"]) == 0
    assert calls[-1][0] == "sequential" and calls[-1][1]["config_ratio"] == 0.0
    assert json.loads(capsys.readouterr().out)["log"]["notes"]["config_ratio"] == 0.0   # recorded with the result


def test_search_cli_refuses_a_bad_config_ratio(calls, capsys):
    assert main(LENET + ["--algo", "unity", "--budget", "2", "--config-ratio", "0.5"]) == 1
    assert "configuration ratio (--config-ratio) must be 0 (every configuration) or a finite number >= 1, got 0.5" \
        in capsys.readouterr().err
    assert main(LENET + ["--algo", "unity", "--config-ratio", "-1"]) == 2
    assert "--config-ratio: expected a finite number >= 0, got '-1'" in capsys.readouterr().err
    assert main(LENET + ["--algo", "mcmc", "--config-ratio", "4"]) == 1
    assert "--config-ratio: --algo mcmc takes no such option" in capsys.readouterr().err


def test_search_cli_refuses_a_flag_the_algorithm_does_not_take(calls, capsys):
    assert main(LENET + ["--algo", "mcmc", "--split-size", "3"]) == 1
    assert "--split-size: --algo mcmc takes no such option; its options here: --alpha" in capsys.readouterr().err
    assert main(LENET + ["--algo", "exhaustive", "--alpha", "2"]) == 1
    assert "--alpha: --algo exhaustive takes no such option; its options here: none" in capsys.readouterr().err
    assert calls == []


def test_search_cli_refuses_an_import_the_algorithm_cannot_start_from(calls, capsys, tmp_path):
    machine = load_machine("flexflow_p100", nodes=1)
    path = tmp_path / "dp.json"
    save_strategy(str(path), data_parallel(load_model("lenet").model.pcg, machine), machine)
    assert main(LENET + ["--algo", "pipeline", "--import", str(path)]) == 1
    assert "--import: --algo pipeline takes no initial strategy; algorithms that do: mcmc, exhaustive, unity, " \
           "sequential" in capsys.readouterr().err
    assert "pipeline" not in [name for name, _ in calls]


def _tiny_model(flags):
    from flexrt.core import ActiMode, DataType, FFConfig, FFModel
    m = FFModel(FFConfig(["-b", "8", *flags]))
    x = m.create_tensor([8, 16], DataType.DT_FLOAT)
    t = m.dense(x, 32, ActiMode.AC_MODE_RELU)
    m.softmax(m.dense(t, 4))
    return m


def test_compile_searches_through_search(calls):
    from flexrt.core import LossType, SGDOptimizer
    m = _tiny_model(["--budget", "4", "--enable-parameter-parallel", "--alpha", "0.5"])
    m.compile(optimizer=SGDOptimizer(m, 0.01), loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
    assert [name for name, _ in calls] == ["mcmc"]
    kw = calls[0][1]
    assert kw["budget"] == 4 and kw["alpha"] == 0.5 and kw["space"] == SearchSpace.from_flags(
        enable_parameter_parallel=True)


def test_compile_search_algorithm_unity_and_unknown(calls):
    from flexrt.machine import load_machine as machine_of
    from flexrt.model import training
    m = _tiny_model(["--budget", "2", "--search-algorithm", "unity", "--alpha", "0.5"])
    training._search_strategy(m.pcg, machine_of("local"), m.ffconfig)
    name, kw = calls[-1]
    assert name == "unity" and kw["alpha"] == 1.0 and kw["budget"] == 2 and kw["space"] == SearchSpace.full()
    with pytest.raises(ConfigError, match="flag --search-algorithm got 'annealing'; valid: one of mcmc, unity, "
                                          "sequential, exhaustive"):
        _tiny_model(["--budget", "2", "--search-algorithm", "annealing"])


@pytest.mark.parametrize("algo", ["mcmc", "unity"])
def test_search_cli_searches_the_model_in_its_precision(capsys, tmp_path, algo):
    """``--precision fp16``: the search, its baselines and the strategy it exports are the 16-bit
    model's (simulating the export in fp16 gives the time the search reports); fp32 is slower."""
    out = tmp_path / "s.json"
    common = ["search", "mlp", "-b", "64", "--machine", "dgx1_v100", "--algo", algo, "--budget", "3", "--no-progress",
              "--json"]
    assert main(common + ["--precision", "fp16", "--export", str(out)]) == 0
    half = json.loads(capsys.readouterr().out)
    assert main(common) == 0
    full = json.loads(capsys.readouterr().out)
    assert half["precision"] == "fp16" and full["precision"] == "fp32"
    assert half["data_parallel_s"] < full["data_parallel_s"] and half["iteration_time_s"] < full["iteration_time_s"]
    assert main(["simulate", "mlp", "-b", "64", "--machine", "dgx1_v100", "--strategy", str(out), "--precision", "fp16",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == pytest.approx(half["iteration_time_s"], rel=1e-9)
