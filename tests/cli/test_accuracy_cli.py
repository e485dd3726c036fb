"""``flexrt accuracy``: real runs beside predictions, calibration and validation strategies disjoint."""

from __future__ import annotations

import json

import pytest

from flexrt.cli import main
from flexrt.model.accuracy import MODELS, calibration_strategies, kendall_tau, scores, validation_strategies
from flexrt.machine import local_machine


def _check(doc, out, ranks):
    rows, meta = doc["rows"], doc["meta"]
    assert meta["ranks"] == ranks and rows and meta["hits"] + meta["misses"] > 0
    assert not set(meta["calibration"]) & set(meta["validation"])
    for r in rows:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["profiled_s"] > 0
        assert r["kinds"] and r["memory"]
        trace = json.loads((out / "traces" / f"{r['model']}-{r['strategy']}.json").read_text())
        pids = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert 0 in pids and 2 in pids          # measured and simulated side by side
    assert (out / "scatter.png").stat().st_size > 1000
    assert (out / "measured_times.json").is_file()


def test_accuracy_in_one_process(tmp_path, capsys):
    out = tmp_path / "acc"
    assert main(["accuracy", "--ranks", "1", "--models", "mlp", "--seeds", "1", "--calibration", "1", "--repeat", "1",
                 "--quick", "--output", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _check(doc, out, 1)
    assert {r["strategy"] for r in doc["rows"]} == {label for label, _ in validation_strategies(
        MODELS["mlp"][0](MODELS["mlp"][1]), local_machine(1), range(1))}


def test_fused_cost_choices_are_checked():
    from flexrt.cli._common import fused_cost_choice     # the one check every command's --fused-cost uses
    for good in ("learned", "learned:m.npz", "profiled", "analytic"):
        assert fused_cost_choice(good) == good
    for bad in ("learned:", "profiled:x", "nosuch", "analytic:y"):
        with pytest.raises(Exception, match="valid: analytic, profiled, learned or learned:PATH"):
            fused_cost_choice(bad)


@pytest.mark.mpi
def test_accuracy_one_process_per_device_under_mpi(tmp_path, capsys):
    out = tmp_path / "acc"
    assert main(["accuracy", "--ranks", "2", "--models", "mlp,rnn", "--seeds", "1", "--calibration", "1",
                 "--repeat", "1", "--quick", "--fusion", "--fusion-budget", "40", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "measured tasks (after)" in text and "profiled kernels (before)" in text
    assert "fusion plans DisCo found from data parallelism (fused tasks: learned:measured:" in text
    doc = json.loads((out / "accuracy.json").read_text())
    _check(doc, out, 2)
    # 5 kinds + 1 random seed, and DisCo's plan from data parallelism
    assert {r["model"] for r in doc["rows"]} == {"mlp", "rnn"} and len(doc["rows"]) == 2 * 7
    _check_fused(doc)


def _check_fused(doc):
    """Each model's DisCo row: a plan searched from its data-parallel row, never predicted slower than
    it (the search starts there), and run for real."""
    by = {(r["model"], r["strategy"]): r for r in doc["rows"]}
    fused = [r for r in doc["rows"] if r["strategy"].endswith("+disco")]
    assert len(fused) == len(doc["meta"]["models"])
    for r in fused:
        f, base = r["fusion"], by[(r["model"], r["strategy"].removesuffix("+disco"))]
        assert 0 < f["candidates"] <= 40 and f["groups"] >= 0 and f["buckets"] >= 0
        assert f["simulated_fused_s"] <= f["simulated_unfused_s"] * (1 + 1e-9)
        # predicted with the times measured again in the validation rounds (the search used the
        # first rounds'): a prediction of its own, beside the run
        assert r["predicted_s"] > 0 and base["predicted_s"] > 0 and r["measured_s"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--models", "nosuch"], "unknown model nosuch"),
    (["--models", ","], "--models: empty"),
    (["--machine", "{d}/missing.yaml"], "no such file"),
    (["--fusion", "--fused-cost", "learned:{d}/missing.npz"], "missing.npz: no such model file"),
])
def test_bad_arguments_are_clear_errors(tmp_path, capsys, argv, message):
    argv = [a.replace("{d}", str(tmp_path)) for a in argv]
    assert main(["accuracy", "--output", str(tmp_path / "o"), *argv]) == 1
    assert message in capsys.readouterr().err


def test_strategy_sets_are_disjoint_and_cover_the_kinds():
    machine = local_machine(2)
    for name, (build, batch) in MODELS.items():
        base = build(batch)
        cal = {label for label, _ in calibration_strategies(base, machine, 3)}
        val = dict(validation_strategies(base, machine, range(2)))
        assert not cal & set(val)
        assert {"data2", "model2", "reduction2", "hybrid", "roundrobin", "random0", "random1"} == set(val)
        assert len({s for s in map(repr, val.values())}) >= 5, name   # mostly distinct strategies


def test_pipelines_join_the_validation_and_calibration_sets_on_request():
    machine = local_machine(2)
    for name, (build, batch) in MODELS.items():
        base = build(batch)
        cal = dict(calibration_strategies(base, machine, 1, pipelines=True))
        val = dict(validation_strategies(base, machine, range(1), pipelines=True))
        assert not set(cal) & set(val)
        pipes = {label: s.pipeline for label, s in val.items() if getattr(s, "pipeline", None) is not None}
        assert {label: (p.stages, p.micro_batches, p.schedule.value) for label, p in pipes.items()} == {
            "gpipe2x4": (2, 4, "gpipe"), "1f1b2x4": (2, 4, "1f1b")}, name
        # calibrated on a pipeline of the same pieces, its stages on the same processes, that is not
        # one of those validated
        calib = cal["calib-interleaved2x4"].pipeline
        assert (calib.stages, calib.micro_batches, calib.schedule.value, calib.chunks) == (2, 4, "interleaved", 2)
    one = dict(calibration_strategies(MODELS["mlp"][0](64), local_machine(1), 1, pipelines=True))
    assert one["calib-1f1b1x4"].pipeline.micro_batches == 4      # one device: nothing to pair


def test_scores_median_max_tau_and_regret():
    rows = [{"model": "a", "strategy": s, "measured_s": m, "predicted_s": p}
            for s, m, p in (("x", 1.0, 1.1), ("y", 2.0, 1.0), ("z", 3.0, 3.0))]
    s = scores(rows)
    assert s["median_error"] == pytest.approx(0.1) and s["max_error"] == pytest.approx(0.5)
    assert s["per_model"]["a"]["predicted_best"] == "y" and s["per_model"]["a"]["regret"] == pytest.approx(1.0)
    assert s["tau"] == pytest.approx(kendall_tau([1, 2, 3], [1.1, 1.0, 3.0])) == pytest.approx(1 / 3)


def test_measurements_run_in_rounds_interleaved_across_strategies(monkeypatch):
    """Round r runs one session of every strategy before round r+1; each strategy's timed iterations
    are shared among the rounds and all come back with it, sorted by wall time."""
    from types import SimpleNamespace

    from flexrt.cli import _accuracy_worker as worker
    from flexrt.model import accuracy

    order, clock = [], iter(range(1000, 0, -1))

    class FakeSession:
        def __init__(self, strategy):
            self.strategy, self.plan = strategy, None
            order.append(strategy)

        def step(self, inputs, labels):
            return SimpleNamespace(wall_s=next(clock), strategy=self.strategy)

    costs = []
    monkeypatch.setattr(worker, "_session", lambda strategy, machine, cost: costs.append(cost) or FakeSession(strategy))
    monkeypatch.setattr(accuracy, "batch_for", lambda plan, batch: (None, None))
    items = [("m", label, 4, label) for label in "abc"]
    out = list(worker._measure(items, None, ["profiled", "measured", "measured"], repeat=7, rounds=3))
    assert order == list("abc") * 3
    assert costs == ["profiled", "measured", "measured"] * 3     # each item's sessions get its cost model
    assert [item[1] for item, _, _ in out] == list("abc")
    for item, session, results in out:
        assert len(results) == 7 and {r.strategy for r in results} == {item[3]}
        assert [r.wall_s for r in results] == sorted(r.wall_s for r in results)
