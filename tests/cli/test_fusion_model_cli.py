"""``flexrt fusion-model collect | train | evaluate`` end to end on a tiny sample set, and the
``--fused-cost`` flag of ``flexrt simulate`` / ``flexrt search``; bad input is one line on stderr."""

from __future__ import annotations

import json
import time

import pytest

from flexrt.cli import main
from flexrt.cli._common import packaged_fusion_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """30 lenet samples, a model trained on them for a few epochs: (folder, samples, model)."""
    d = tmp_path_factory.mktemp("fusion-model")
    samples, model = d / "s.jsonl", d / "m.npz"
    assert main(["fusion-model", "collect", "--models", "lenet", "--count", "30", "--batch", "8",
                 "--output", str(samples), "--no-progress"]) == 0
    assert main(["fusion-model", "train", "--samples", str(samples), "--epochs", "3", "--output", str(model)]) == 0
    return d, samples, model


def test_collect_train_evaluate(tmp_path, capsys):
    t0 = time.perf_counter()
    samples, model, cdf = tmp_path / "s.jsonl", tmp_path / "m.npz", tmp_path / "fig9.png"
    assert main(["fusion-model", "collect", "--models", "lenet", "--count", "30", "--seed", "1", "--batch", "8",
                 "--output", str(samples)]) == 0
    out = capsys.readouterr().out
    assert "wrote 30 samples" in out and len(samples.read_text().splitlines()) == 30
    assert main(["fusion-model", "train", "--samples", str(samples), "--epochs", "3", "--output", str(model)]) == 0
    out = capsys.readouterr().out
    assert "trained 5 network(s) on 24 samples, 3 epochs" in out and "held out (6 samples)" in out and model.is_file()
    assert "the simulator will use:" in out
    assert main(["fusion-model", "evaluate", "--samples", str(samples), "--model", str(model), "--cdf", str(cdf)]) == 0
    out = capsys.readouterr().out
    for name in ("learned", "sum of members", "analytic", "linear (2-fold)"):
        assert name in out
    assert cdf.stat().st_size > 1000
    assert time.perf_counter() - t0 < 30


def test_collect_again_reads_the_profile_cache(trained, tmp_path, capsys):
    _, samples, _ = trained
    again = tmp_path / "again.jsonl"
    assert main(["fusion-model", "collect", "--models", "lenet", "--count", "30", "--batch", "8",
                 "--output", str(again), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measurements"] == 0 and doc["samples"] == 30
    assert again.read_text() == samples.read_text()


def test_train_chooses_the_best_predictor_on_held_out_samples(trained, tmp_path, capsys):
    from flexrt.simulator.fused_model import LearnedFusedModel
    _, samples, _ = trained
    out = tmp_path / "m2.npz"
    assert main(["fusion-model", "train", "--samples", str(samples), "--epochs", "2", "--ensemble", "2",
                 "--output", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ensemble"] == 2 and set(doc["held_out"]) == {"learned", "sum of members", "linear"}
    best = max(doc["held_out"].values(), key=lambda r: (r["share_within_10pct"], -r["median_rel_error"]))
    assert doc["held_out"][doc["chosen"]] == best
    model = LearnedFusedModel.load(out)
    assert model.chosen == doc["chosen"] and model.held_out == doc["held_out"] and len(model.ensemble) == 2


def test_evaluate_json(trained, capsys):
    _, samples, model = trained
    assert main(["fusion-model", "evaluate", "--samples", str(samples), "--model", str(model), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["predictors"]) == {"learned", "sum of members", "analytic", "linear (2-fold)"}
    for r in doc["predictors"].values():
        assert 0 <= r["share_within_10pct"] <= r["share_within_14pct"] <= 1 and r["median_rel_error"] >= 0


@pytest.mark.parametrize("argv, message", [
    ("collect --models nosuchnet --output {d}/x.jsonl", "unknown zoo model nosuchnet"),
    ("collect --models , --output {d}/x.jsonl", "--models is empty"),
    ("collect --models lenet,lenet --output {d}/x.jsonl", "lists a model twice"),
    ("collect --models lenet --output {d}", "is a folder; give a file name"),
    ("collect --models lenet --output {d}/no/x.jsonl", "does not exist"),
    ("train --samples {d}/missing.jsonl --output {d}/m.npz", "no such file"),
    ("train --samples {d}/bad.jsonl --output {d}/m.npz", "bad.jsonl:1:2: invalid JSON"),
    ("train --samples {d}/empty.jsonl --output {d}/m.npz", "holds no samples"),
    ("evaluate --samples {s} --model {d}/missing.npz", "no such file"),
    ("evaluate --samples {s} --model {d}/bad.jsonl", "not a learned fused model"),
])
def test_bad_inputs_are_one_line(trained, argv, message, capsys):
    d, samples, _ = trained
    (d / "bad.jsonl").write_text("{not json\n")
    (d / "empty.jsonl").write_text("")
    assert main(["fusion-model", *argv.format(d=d, s=samples).split()]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("flexrt: error:")


@pytest.mark.parametrize("argv", ["collect --count 0 --output x", "collect", "train --output m.npz",
                                  "frobnicate", "train --samples s --output m --epochs -1"])
def test_usage_errors(argv, capsys):
    assert main(["fusion-model", *argv.split()]) == 2
    err = capsys.readouterr().err
    assert "error" in err


def test_simulate_and_search_with_the_learned_model(trained, capsys):
    _, _, model = trained
    base = ["lenet", "--machine", "local", "-b", "8", "--fusion", "xla"]
    assert main(["simulate", *base, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["simulate", *base, "--fused-cost", f"learned:{model}", "--json"]) == 0
    learned = json.loads(capsys.readouterr().out)
    assert learned["fused_cost"] == f"learned:{model}" and learned["iteration_time_s"] > 0
    assert learned["num_tasks"] == plain["num_tasks"]
    assert main(["simulate", *base, "--fused-cost", "analytic", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == plain["iteration_time_s"]
    assert main(["search", "lenet", "--machine", "local", "-b", "8", "--algo", "disco", "--budget", "5",
                 "--no-progress", "--fused-cost", f"learned:{model}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fused_cost"] == f"learned:{model}"


@pytest.mark.parametrize("flag, message", [
    ("learned:{d}/missing.npz", "no such model file"),
    ("profiled", "needs --cost profiled"),
])
def test_fused_cost_errors(trained, flag, message, capsys):
    d = trained[0]
    assert main(["simulate", "lenet", "--machine", "local", "-b", "8", "--fused-cost", flag.format(d=d)]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_fused_cost_usage_error(capsys):
    assert main(["simulate", "lenet", "--machine", "local", "--fused-cost", "bogus"]) == 2
    assert "unknown fused cost" in capsys.readouterr().err


def test_learned_without_packaged_model(capsys, monkeypatch, tmp_path):
    from flexrt.cli import _common
    monkeypatch.setattr(_common, "packaged_fusion_model", lambda: tmp_path / "none.npz")
    assert main(["simulate", "lenet", "--machine", "local", "-b", "8", "--fused-cost", "learned"]) == 1
    assert "flexrt fusion-model train" in capsys.readouterr().err


def test_the_packaged_model_times_fused_tasks(capsys):
    assert packaged_fusion_model().is_file()
    assert main(["simulate", "lenet", "--machine", "local", "-b", "8", "--data-parallel", "--fusion", "xla",
                 "--fused-cost", "learned", "--json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    assert doc["iteration_time_s"] > 0


def test_the_cdf_must_be_a_png_before_anything_runs(tmp_path, capsys):
    """--cdf x.txt ran the whole evaluation, then failed in matplotlib (exit 70)."""
    from flexrt.cli import main
    assert main(["fusion-model", "evaluate", "--samples", str(tmp_path / "none.jsonl"), "--model",
                 str(tmp_path / "none.npz"), "--cdf", str(tmp_path / "x.txt")]) == 1
    assert "the CDF plot is a PNG image; give a file name ending in .png" in capsys.readouterr().err
