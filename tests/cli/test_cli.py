"""The ``flexrt`` command: models, show (table, --json, --save, --dot) and its exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexrt.cli import main
from flexrt.ir.pcg import PCG
from flexrt.model import load_model, zoo_models

TINY = '''"""A tiny FlexFlow-style MLP."""
from flexrt.core import *

def top_level_task():
    ffconfig = FFConfig()
    print("this line must not reach the table")
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 784], DataType.DT_FLOAT)
    t = ffmodel.dense(x, 512, ActiMode.AC_MODE_RELU)
    t = ffmodel.dense(t, 10)
    t = ffmodel.softmax(t)
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.01), loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY])
    ffmodel.fit(x=None, y=None, epochs=ffconfig.epochs)

if __name__ == "__main__":
    top_level_task()
'''
# Linear: 2*out*in multiply-adds per sample, plus the bias, plus the fused activation.
DENSE_FLOPS_B32 = {"dense_1": 2 * 32 * 512 * 784 + 32 * 512 + 32 * 512, "dense_2": 2 * 32 * 10 * 512 + 32 * 10}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_models_lists_the_zoo(capsys):
    code, out, err = run(capsys, "models")
    assert code == 0 and err == ""
    lines = out.splitlines()
    zoo = zoo_models()
    assert len(lines) == max(len(zoo), 1)
    for z, line in zip(zoo, lines):
        assert line.split()[0] == z.name and line.endswith(z.description)


def test_cli_models_json(capsys):
    code, out, _ = run(capsys, "models", "--json")
    assert code == 0
    assert json.loads(out) == {"models": [{"name": z.name, "description": z.description} for z in zoo_models()]}


def test_cli_show_prints_table_and_totals(capsys, tiny):
    code, out, err = run(capsys, "show", tiny, "-b", "32")
    assert code == 0 and err == ""
    assert "must not reach" not in out
    assert out.splitlines()[0] == f"model tiny ({tiny}), batch size 32"
    header = next(line for line in out.splitlines() if line.startswith("name"))
    assert header.split() == ["name", "type", "output", "shape", "params", "FLOPs", "(fwd)"]
    row = next(line for line in out.splitlines() if line.startswith("dense_1 "))
    assert row.split() == ["dense_1", "linear", "[32,", "512]", "f32", "401.9", "k", "25.7", "M"]
    assert "operators: 3   parameters: 407.1 k (407,050)   forward: " in out


def test_cli_show_json_has_exact_totals(capsys, tiny):
    code, out, err = run(capsys, "show", tiny, "-b", "32", "--budget", "5", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["model"] == "tiny" and doc["config"]["batch_size"] == 32 and doc["config"]["search_budget"] == 5
    assert doc["totals"]["operators"] == 3 and doc["totals"]["parameters"] == 407050
    assert doc["totals"]["flops_forward"] == sum(op["flops"] for op in doc["operators"])
    names = [op["name"] for op in doc["operators"]]
    assert names == ["input_1", "dense_1", "dense_2", "softmax_1"]
    assert doc["operators"][1]["outputs"] == [{"dims": [32, 512], "dtype": "DT_FLOAT"}]
    assert doc["operators"][1]["params"] == 784 * 512 + 512


def test_cli_show_save_writes_pcg_json_that_reads_back_equal(capsys, tiny, tmp_path):
    target = tmp_path / "tiny.pcg.json"
    code, out, _ = run(capsys, "show", tiny, "--save", str(target))
    assert code == 0 and f"wrote the PCG to {target}" in out
    back = PCG.from_json(json.loads(target.read_text()))
    original = load_model(tiny).model.pcg
    assert back == original and back.structural_hash() == original.structural_hash()


def test_cli_show_dot_writes_graphviz(capsys, tiny, tmp_path):
    target = tmp_path / "tiny.dot"
    code, out, _ = run(capsys, "show", tiny, "--dot", str(target), "--json")
    assert code == 0 and json.loads(out)["files"] == {"dot": str(target)}
    text = target.read_text()
    assert text.startswith("digraph") and "dense_1" in text and text.rstrip().endswith("}")


def test_cli_unknown_model_exits_1_naming_valid_models(capsys):
    code, out, err = run(capsys, "show", "no_such_model")
    assert code == 1 and out == ""
    assert err.startswith("flexrt: error: unknown model 'no_such_model'; valid models: ")
    assert all(z.name in err for z in zoo_models()) and "Traceback" not in err


def test_cli_script_error_is_one_line_without_traceback(capsys, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from flexrt.core import *\nm = FFModel(FFConfig())\nm.dense(m.create_tensor([4]), 2)\n")
    code, out, err = run(capsys, "show", str(path))
    assert code == 1 and out == ""
    assert err.startswith("flexrt: error: model broken (") and "broken.py:3): dense 'dense_1': " in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, fragment", [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["models", "--bogus"], "unrecognized arguments: --bogus"),
    (["show"], "the following arguments are required: MODEL"),
    (["show", "mlp", "--bogus"], "flexrt show: error: unknown flag '--bogus'"),
    (["show", "mlp", "-b", "zero"], "flexrt show: error: flag -b got 'zero'; valid: an integer >= 1"),
    (["show", "mlp", "--dot"], "argument --dot: expected one argument"),
])
def test_cli_usage_errors_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2 and fragment in err


def test_cli_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run(capsys)
    assert code == 2 and "models" in err and "show" in err


def test_cli_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("flexrt ")


def test_cli_console_script_runs_show_json(tiny):
    exe = Path(sys.executable).with_name("flexrt")
    if not exe.exists():
        pytest.skip(f"the flexrt console script is not installed next to {sys.executable} (pip install -e .)")
    proc = subprocess.run([str(exe), "show", tiny, "-b", "32", "-ll:gpu", "4", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["config"]["workers_per_node"] == 4
    assert (doc["totals"]["operators"], doc["totals"]["parameters"]) == (3, 407050)
    flops = {op["name"]: op["flops"] for op in doc["operators"]}
    assert {k: flops[k] for k in DENSE_FLOPS_B32} == DENSE_FLOPS_B32
    assert doc["totals"]["flops_forward"] == sum(flops.values())
    bad = subprocess.run([str(exe), "show", "no_such_model"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stderr.startswith("flexrt: error: unknown model")


def test_show_passes_script_flags_to_build_model(capsys):
    """build_model's keyword parameters are the script's own flags (rnntc: --seq-length)."""
    assert main(["show", "rnntc", "-b", "2", "--seq-length", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(op["op"] == "lstm" for op in doc["operators"]) == 4 * 3
    assert main(["show", "rnntc", "-b", "2", "--seq-length", "x"]) == 2
    assert "flag --seq-length takes an int, got 'x'" in capsys.readouterr().err


def test_a_thread_the_script_leaves_running_does_not_hold_the_command(tmp_path):
    """Python waits for live threads at exit; a script's never-ending thread must not hang `flexrt show`."""
    script = tmp_path / "threads.py"
    script.write_text("import threading, time\nfrom flexrt.core import *\n"
                      "threading.Thread(target=lambda: time.sleep(10 ** 6), name='sleeper').start()\n"
                      "m = FFModel(FFConfig())\nm.relu(m.create_tensor([8, 4]))\n")
    proc = subprocess.run([sys.executable, "-m", "flexrt.cli", "show", str(script), "-b", "8"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "operators: 1" in proc.stdout
    assert "left 1 thread(s) running (sleeper); exiting without waiting for them" in proc.stderr


def test_json_output_holds_no_nan(capsys):
    """A diverged loss is null in --json (JSON has no NaN or infinity); finite numbers pass unchanged."""
    import json as _json
    from flexrt.cli._common import emit_json
    emit_json({"loss": float("nan"), "steps": [{"loss": float("inf")}, {"loss": 1.5}], "n": (1, float("-inf"))})
    assert _json.loads(capsys.readouterr().out) == {"loss": None, "steps": [{"loss": None}, {"loss": 1.5}],
                                                   "n": [1, None]}


def test_running_out_of_memory_is_an_error_not_a_bug(capsys, monkeypatch):
    """A MemoryError (a model or simulation larger than the host) exits 1 saying what to try, not 70."""
    from flexrt.cli import _simulate, main

    def run(args, extra):
        raise MemoryError("the simulation engine ran out of memory")
    monkeypatch.setattr(_simulate, "run", run)
    assert main(["simulate", "mlp", "--machine", "dgx1_v100"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flexrt: error: out of memory: the simulation engine ran out of memory: the model")
    assert "bug" not in err and len(err.strip().splitlines()) == 1


def test_a_flag_of_another_command_says_where_it_belongs(capsys):
    from flexrt.cli import main
    assert main(["search", "mlp", "--machine", "dgx1_v100", "--recompute", "full"]) == 2
    assert "--recompute is a flag of flexrt simulate and train, not of flexrt search" in capsys.readouterr().err
    assert main(["simulate", "mlp", "--machine", "dgx1_v100", "--loss-scale", "8"]) == 2
    assert "--loss-scale is a flag of flexrt train, not of flexrt simulate" in capsys.readouterr().err


def test_show_refuses_one_file_for_two_outputs_and_calibrate_a_missing_folder(tmp_path, capsys):
    """--save and --dot on one path wrote the JSON, then overwrote it with Graphviz text; calibrate made
    any missing folder (every other output refuses one)."""
    from flexrt.cli import main
    same = str(tmp_path / "g.json")
    assert main(["show", "mlp", "--save", same, "--dot", same]) == 1
    assert "--save and --dot both name" in capsys.readouterr().err
    assert main(["calibrate", "--devices", "2", "--quick", "--output", str(tmp_path / "no" / "x.yaml")]) == 1
    assert "the folder" in capsys.readouterr().err and not (tmp_path / "no").exists()
