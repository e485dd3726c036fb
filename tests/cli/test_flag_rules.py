"""Flags are honoured or refused, never accepted and ignored: the data-parallel fall-back is said,
the search algorithms FFConfig accepts are the registry's, and a script's compile honours FlexFlow's
--machine-model-file, --compgraph and --taskgraph."""

from __future__ import annotations

import pytest

from flexrt.cli import main
from flexrt.core import ActiMode, DataType, FFConfig, FFModel, LossType, SGDOptimizer
from flexrt.errors import ConfigError
from flexrt.model.flags import SEARCH_ALGORITHMS
from flexrt.search import algorithm, algorithms

from ..machine.test_flexflow_format import SAMPLE


@pytest.mark.parametrize("batch,used", [(7, 1), (12, 4), (8, None), (64, None)])
def test_data_parallel_fall_back_is_said(capsys, batch, used):
    assert main(["simulate", "mlp", "-b", str(batch), "--machine", "dgx1_v100"]) == 0
    err = capsys.readouterr().err
    assert ("flexrt: warning: batch" in err) is (used is not None)
    if used is not None:
        assert f"batch {batch} does not divide over 8 devices; data parallelism uses {used} of them" in err


def test_search_algorithm_choices_are_the_registered_searches():
    assert set(SEARCH_ALGORITHMS) == {a for a in algorithms() if "space" in algorithm(a).fields}
    with pytest.raises(ConfigError, match="valid: one of mcmc, unity, sequential, exhaustive"):
        FFConfig(["--search-algorithm", "bogus"])
    with pytest.raises(ConfigError, match="valid: one of mcmc"):
        FFConfig([]).with_values(search_algorithm="bogus")


def _compile(argv):
    m = FFModel(FFConfig(argv))
    x = m.create_tensor([8, 16], DataType.DT_FLOAT)
    m.softmax(m.dense(m.dense(x, 32, ActiMode.AC_MODE_RELU), 4))
    m.compile(optimizer=SGDOptimizer(m, 0.01), loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY)
    return m


def test_compile_honours_flexflow_graph_and_machine_files(tmp_path):
    machine_file = tmp_path / "machine.txt"
    machine_file.write_text(SAMPLE)
    comp, task = tmp_path / "comp.dot", tmp_path / "task.dot"
    m = _compile(["-b", "8", "--machine-model-file", str(machine_file), "--compgraph", str(comp),
                  "--taskgraph", str(task), "-ll:gpu", "4"])
    assert m.machine.num_devices == 8  # the FlexFlow file: 2 nodes x 2 sockets x 2 GPUs
    assert comp.read_text().startswith("digraph") and "dense" in comp.read_text()
    assert task.read_text().startswith("digraph taskgraph") and "fwd" in task.read_text()


def test_compile_refuses_two_machines(tmp_path):
    with pytest.raises(ConfigError, match="both name the machine; give one"):
        _compile(["--machine", "dgx1_v100", "--machine-model-file", str(tmp_path / "m.txt")])


def test_a_script_runs_once_per_command(tmp_path, capsys):
    counter = tmp_path / "runs.txt"
    script = tmp_path / "counted.py"
    script.write_text(f'''from pathlib import Path
p = Path({str(counter)!r})
p.write_text(str(int(p.read_text()) + 1) if p.exists() else "1")
from flexrt.core import *
def build_model(ffconfig):
    m = FFModel(ffconfig)
    m.softmax(m.dense(m.create_tensor([ffconfig.batch_size, 16], DataType.DT_FLOAT), 4))
    return m
''')
    assert main(["simulate", str(script), "-b", "8", "--machine", "dgx1_v100"]) == 0
    assert counter.read_text() == "1"
