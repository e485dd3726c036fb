"""flexrt train: per-step loss with measured and simulated time, summary, memory, trace, errors."""

import json

from flexrt.cli import main


def test_train_prints_steps_summary_and_memory(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["train", "mlp_unity_fig2", "-b", "16", "--machine", "local", "--steps", "2",
                 "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all("measured" in s and "simulated" in s and "loss" in s for s in steps)
    assert "median measured" in out and "measured / simulated" in out
    assert out.count("peak memory measured") == 4  # data parallel over the 4 local devices
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" and e["name"].startswith("fwd dense1") for e in events)


def test_train_json_loss_decreases_on_the_fixed_batch(capsys):
    assert main(["train", "mlp_unity_fig2", "-b", "8", "--machine", "local", "--steps", "3", "--lr", "0.1",
                 "--mode", "threads", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    losses = [s["loss"] for s in doc["steps"]]
    assert len(losses) == 3 and losses[2] < losses[0]
    assert doc["simulated_ms"] > 0 and doc["median_measured_ms"] > 0 and doc["ratio"] > 0
    assert set(doc["memory"]) == {"0", "1", "2", "3"}
    assert all(m["measured_peak"] > 0 and m["predicted"] > 0 for m in doc["memory"].values())


def test_train_errors(capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--backend", "cupy"]) == 1
    err = capsys.readouterr().err
    assert "CuPy is not installed" in err and 'pip install -e ".[gpu]"' in err
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--backend", "jax"]) == 1
    assert "unknown backend 'jax'; valid: numpy, cupy" in capsys.readouterr().err
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--mode", "fast"]) == 1
    assert "unknown mode 'fast'; valid: serial, threads" in capsys.readouterr().err
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--steps", "0"]) == 2
    assert "argument --steps: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--strategy", "/nonexistent.json"]) == 1
    assert "strategy file /nonexistent.json does not exist" in capsys.readouterr().err
    assert main(["train", "mlp_unity_fig2", "--machine", "local", "--bogus-flag"]) == 2
