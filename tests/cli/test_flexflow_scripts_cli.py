"""FlexFlow's own scripts under the flexrt command: a script without ``build_model`` gets the flags
FFConfig does not know (its own argparse's, as FlexFlow's FFConfig leaves them), and ``simulate``,
``search`` and ``train`` take the optimizer and loss the script passes to ``compile`` unless
``--optimizer`` / ``--loss`` are given (FlexFlow's simulator and runtime use the model's own); a
model compiled for inference is said to be costed as training; a cross-entropy on a rank-1 output is
refused before anything runs."""

from __future__ import annotations

import json
import textwrap

import pytest

from flexrt.cli import main

SCRIPT = textwrap.dedent('''\
    import argparse
    from flexrt.core import *

    def top_level_task():
        ffconfig = FFConfig()
        parser = argparse.ArgumentParser()
        parser.add_argument("--hidden-size", type=int, default=16)
        parser.add_argument("-a", "--alpha-x", type=float, default=1.0)
        args, _ = parser.parse_known_args()
        ffmodel = FFModel(ffconfig)
        x = ffmodel.create_tensor([ffconfig.batch_size, 32], DataType.DT_FLOAT)
        t = ffmodel.dense(x, args.hidden_size, ActiMode.AC_MODE_RELU)
        t = ffmodel.dense(t, {classes})
        {head}
        ffmodel.compile(optimizer={optimizer}, loss_type={loss}, comp_mode={mode})

    if __name__ == "__main__":
        top_level_task()
    ''')


def script(tmp_path, optimizer="AdamOptimizer(ffmodel, 0.01)", loss="LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE",
           mode="CompMode.TRAINING", classes=10, head="t = ffmodel.softmax(t)"):
    path = tmp_path / "ffscript.py"
    path.write_text(SCRIPT.format(optimizer=optimizer, loss=loss, mode=mode, classes=classes, head=head))
    return str(path)


def test_a_scripts_own_flags_reach_its_argparse(tmp_path, capsys):
    path = script(tmp_path)
    assert main(["show", path, "-b", "4", "--hidden-size", "24", "-a", "2"]) == 0
    assert "[4, 24]" in capsys.readouterr().out
    assert main(["simulate", path, "-b", "4", "--machine", "dgx1_v100", "--hidden-size", "24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > 0
    # FlexFlow's own flags are still checked
    assert main(["simulate", path, "-b", "0", "--machine", "dgx1_v100"]) == 2
    assert "flag -b got 0" in capsys.readouterr().err


def _peak(capsys, argv) -> int:
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    return max(v["total"] for v in doc["memory_bytes"].values())


def test_simulate_costs_the_scripts_optimizer_unless_told(tmp_path, capsys):
    base = ["simulate", script(tmp_path), "-b", "8", "--machine", "dgx1_v100"]
    scripts, adam, sgd = _peak(capsys, base), _peak(capsys, base + ["--optimizer", "adam"]), \
        _peak(capsys, base + ["--optimizer", "sgd"])
    assert scripts == adam > sgd
    momentum = ["simulate", script(tmp_path, optimizer="SGDOptimizer(ffmodel, 0.1, momentum=0.9)"), "-b", "8",
                "--machine", "dgx1_v100"]
    assert _peak(capsys, momentum) == _peak(capsys, momentum + ["--optimizer", "momentum"]) > sgd


def test_train_takes_the_scripts_optimizer_and_loss(tmp_path, capsys):
    path = script(tmp_path)
    assert main(["train", path, "-b", "8", "--machine", "local", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "adam alpha 0.01" in out and "mean_squared_error_avg" in out
    assert main(["train", path, "-b", "8", "--machine", "local", "--steps", "1", "--optimizer", "sgd", "--lr", "0.5",
                 "--loss", "categorical_crossentropy"]) == 0
    out = capsys.readouterr().out
    assert "sgd lr 0.5" in out and "categorical_crossentropy" in out


def test_inference_scripts_are_said_to_be_costed_as_training(tmp_path, capsys):
    path = script(tmp_path, mode="CompMode.INFERENCE")
    assert main(["simulate", path, "-b", "8", "--machine", "dgx1_v100"]) == 0
    assert "compiles for inference (comp_mode=INFERENCE); flexrt simulate costs a training iteration" in \
        capsys.readouterr().err


@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "categorical_crossentropy"])
def test_a_cross_entropy_on_one_value_per_sample_is_refused_before_running(tmp_path, capsys, loss):
    path = script(tmp_path, loss="LossType.LOSS_IDENTITY", head="t = ffmodel.reduce_sum(t, [1])")
    assert main(["train", path, "-b", "8", "--machine", "local", "--steps", "1"]) == 0   # its own loss: identity
    capsys.readouterr()
    assert main(["train", path, "-b", "8", "--machine", "local", "--steps", "1", "--loss", loss]) == 1
    err = capsys.readouterr().err
    assert f"loss '{loss}' scores output" in err and "of shape [8], one value per sample" in err
    assert err.count("\n") == 1
