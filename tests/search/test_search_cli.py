"""``flexrt search`` and compile's search (FlexFlow: compile searches when --budget is given)."""

import json


from flexrt.cli import main
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.simulator.strategy import load_strategy


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
