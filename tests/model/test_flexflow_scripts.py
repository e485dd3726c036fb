"""FlexFlow-style scripts run as FlexFlow's users run them: ``python script.py -ll:gpu N -b B``.

The scripts in ``ff_scripts/`` are written for these tests in the style of FlexFlow's
``examples/python/native`` (Keras' data sets from the cache, ``init_flexflow_runtime``, data
loaders, ``fit``/``eval``, the manual loop on ``set_tensor``, ``-config-file``, the per-operator
pattern of a forward pass read back with ``get_array``). Data sets are written in Keras' formats
into a temporary ``KERAS_HOME``. The law: every script gives the same result on one simulated
device and on four (data parallelism: the same weights as one device).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).parent / "ff_scripts"
RESULT = re.compile(r"^RESULT (.*)$", re.M)


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory) -> Path:
    """MNIST (1,000 training images) and CIFAR-10's first batch in Keras' cache formats."""
    home = tmp_path_factory.mktemp("keras")
    d = home / "datasets"
    (d / "cifar-10-batches-py").mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(d / "mnist.npz", x_train=rng.integers(0, 256, (1000, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 1000, dtype=np.uint8),
             x_test=rng.integers(0, 256, (200, 28, 28), dtype=np.uint8),
             y_test=rng.integers(0, 10, 200, dtype=np.uint8))
    for name in ("data_batch_1", "test_batch"):
        batch = {b"data": rng.integers(0, 256, (10000, 3072), dtype=np.uint8),
                 b"labels": rng.integers(0, 10, 10000).tolist()}
        with open(d / "cifar-10-batches-py" / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return home


def run_script(name: str, args: list[str], keras_home: Path, cwd: Path | None = None) -> dict:
    env = dict(os.environ, KERAS_HOME=str(keras_home), MPLBACKEND="Agg")
    env.pop("FLEXRT_DATA_DIR", None)
    p = subprocess.run([sys.executable, str(SCRIPTS / name), *args], cwd=cwd or SCRIPTS, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{name} {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    found = RESULT.findall(p.stdout)
    assert found, f"{name} printed no RESULT line:\n{p.stdout[-2000:]}"
    words = found[-1].split()
    out = {k: float(v) for k, v in zip(words[::2], words[1::2]) if re.fullmatch(r"[-+.\deE]+", v)}
    out["stderr"] = p.stderr
    return out


def _same(a: dict, b: dict) -> None:
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-9)
    assert a["kernel_sum"] == pytest.approx(b["kernel_sum"], rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("script", ["mnist_mlp.py", "attach_loop.py"])
def test_training_script_one_device_equals_four(script, keras_home):
    one = run_script(script, ["-ll:gpu", "1", "-b", "32", "--epochs", "2"], keras_home)
    four = run_script(script, ["-ll:gpu", "4", "-b", "32", "--epochs", "2"], keras_home)
    _same(one, four)
    assert np.isfinite(one["kernel_sum"])


def test_script_flags_are_left_to_the_script(keras_home):
    """-a and --samples are the script's own (argparse); FFConfig leaves them alone."""
    out = run_script("mnist_mlp.py", ["-a", "--samples", "64", "-b", "16", "-ll:gpu", "2"], keras_home)
    assert 0.0 <= out["accuracy"] <= 100.0


def test_config_file_reaches_ffconfig(keras_home, tmp_path):
    """FlexFlow's CI style: -config-file JSON -> init_flexflow_runtime -> FlexFlow's flags."""
    cfg = tmp_path / "params.json"
    cfg.write_text(json.dumps({"num_gpus": 2, "memory_per_gpu": 14048, "zero_copy_memory_per_node": 12192,
                               "batch_size": 16, "epochs": 2, "only_data_parallel": True}))
    out = run_script("cifar10_cnn.py", ["-config-file", str(cfg)], keras_home)
    assert out["epochs"] == 2 and out["batch"] == 16
    one = run_script("cifar10_cnn.py", ["-ll:gpu", "1", "-b", "16", "--epochs", "2"], keras_home)
    _same(out, one)


@pytest.mark.parametrize("gpus", ["1", "4"])
def test_operator_script_reads_its_output(gpus, keras_home):
    """Compile with a cross-entropy on a non-softmax output (warned once), forward without labels,
    the output read back equals NumPy's on the weights read back."""
    out = run_script("op_forward.py", ["-ll:gpu", gpus, "-b", "8"], keras_home)
    assert out["max_rel_err"] < 1e-4
    assert out["stderr"].count("softmax") == 1
