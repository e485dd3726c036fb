"""flexrt simulate: table and JSON output, delta method, trace and task graph files, errors."""

import json

from flexrt.cli import main
from flexrt.examples.strategies import unity_fig2


def test_simulate_json_data_parallel_fig2(capsys):
    assert main(["simulate", "mlp_unity_fig2", "--machine", "dgx1_v100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_devices"] == 8 and doc["iteration_time_s"] > 0
    assert doc["moved_elements"]["activation"] == 0  # data parallelism moves only weight gradients
    assert doc["moved_elements"]["weight_sync"] == 2 * 7 * (784 * 512 + 512 * 10)  # ring over 8 devices


def test_simulate_delta_method_equals_full(capsys):
    args = ["simulate", "alexnet", "-b", "32", "--machine", "dgx1_v100", "--random-strategy", "5", "--json"]
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(args + ["--method", "delta"]) == 0
    delta = json.loads(capsys.readouterr().out)
    assert delta["delta_steps"] > 0
    assert delta["iteration_time_s"] == full["iteration_time_s"]
    assert delta["moved_elements"] == full["moved_elements"]


def test_simulate_writes_trace_and_taskgraph(tmp_path, capsys):
    trace, dot = tmp_path / "t.json", tmp_path / "g.dot"
    assert main(["simulate", "mlp_unity_fig2", "--machine", "dgx1_v100", "--nodes", "1", "--trace", str(trace),
                 "--taskgraph", str(dot)]) == 0
    out = capsys.readouterr().out
    assert "iteration time" in out and f"wrote the trace to {trace}" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" and e["name"].startswith("fwd dense1") for e in events)
    assert dot.read_text().startswith("digraph taskgraph")


def test_simulate_errors(tmp_path, capsys):
    assert main(["simulate", "mlp_unity_fig2", "--machine", "nosuch"]) == 1
    assert "unknown machine preset 'nosuch'" in capsys.readouterr().err
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"format": "flexrt.strategy", "version": 1, "machine": {"num_nodes": 1,
                                                                                       "devices_per_node": 8},
                               "model_hash": "0", "operators": []}))
    assert main(["simulate", "mlp_unity_fig2", "--machine", "dgx1_v100", "--strategy", str(bad)]) == 1
    assert "made for another model" in capsys.readouterr().err
    assert main(["simulate", "mlp_unity_fig2", "--machine", "dgx1_v100", "--method", "delta", "--strategy",
                 str(unity_fig2.FILE)]) == 1
    assert "needs a per-operator strategy" in capsys.readouterr().err


def test_simulate_delta_reaches_megatron_whose_copies_no_single_step_from_data_parallelism_can_take(capsys):
    """Megatron-LM's replicated operators (LayerNorm, residual adds: copies of the tensor group) can
    feed only operators that take copies, so the walk from data parallelism must change those
    consumers first (it stopped on 'copies can only be multiplied'); the result equals full."""
    args = ["simulate", "transformer", "--seq-length", "8", "-b", "8", "--machine", "local", "--megatron", "--json"]
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(args + ["--method", "delta"]) == 0
    delta = json.loads(capsys.readouterr().out)
    assert delta["delta_steps"] > 1
    assert delta["iteration_time_s"] == full["iteration_time_s"]
    assert delta["moved_elements"] == full["moved_elements"]


def test_simulate_delta_keeps_recomputation_and_refuses_a_pipelined_strategy_file(tmp_path, capsys):
    """The walk from data parallelism recomputes what the strategy recomputes (it dropped it and
    stopped on 'delta simulation diverged'); a pipelined file, like --pipeline, is a clear error
    (it was an internal KeyError)."""
    args = ["simulate", "lenet", "-b", "8", "--machine", "local", "--random-strategy", "2", "--recompute", "full",
            "--json"]
    assert main(args) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(args + ["--method", "delta"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == full["iteration_time_s"]
    piped = tmp_path / "p.json"
    assert main(["search", "lenet", "-b", "8", "--machine", "local", "--algo", "pipeline", "--budget", "2",
                 "--no-progress", "--export", str(piped)]) == 0
    capsys.readouterr()
    for extra in (["--strategy", str(piped)], ["--pipeline", "2"]):
        assert main(["simulate", "lenet", "-b", "8", "--machine", "local", "--method", "delta"] + extra) == 1
        assert "a pipelined strategy" in capsys.readouterr().err
