"""FlexFlow Keras scripts run as FlexFlow's users run them: ``python script.py -ll:gpu N -b B``.

The scripts in ``keras_scripts/`` are written for these tests in the style of FlexFlow's
``examples/python/keras`` (their imports already renamed: what ``bench/bench_flexflow_scripts.py
--suite keras`` does to FlexFlow's own). The law: a script gives the same result on one simulated
device and on four (data parallelism; float32, so to rounding). The scripts have no Dropout: a
partitioned dropout draws a mask per piece, as FlexFlow's does (statistically equivalent, not equal).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).parent / "keras_scripts"
RESULT = re.compile(r"^RESULT (.*)$", re.M)


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory) -> Path:
    """MNIST in Keras' cache format: 640 training images, learnable (class templates plus noise)."""
    home = tmp_path_factory.mktemp("keras")
    d = home / "datasets"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    templates = rng.integers(0, 256, (10, 28, 28))

    def images(labels):
        return ((templates[labels] * 3 + rng.integers(0, 256, (len(labels), 28, 28))) // 4).astype(np.uint8)
    y_train, y_test = rng.integers(0, 10, 640), rng.integers(0, 10, 64)
    np.savez(d / "mnist.npz", x_train=images(y_train), y_train=y_train.astype(np.uint8), x_test=images(y_test),
             y_test=y_test.astype(np.uint8))
    return home


def run_script(name: str, args: list[str], keras_home: Path) -> dict:
    env = dict(os.environ, KERAS_HOME=str(keras_home))
    env.pop("FLEXRT_DATA_DIR", None)
    p = subprocess.run([sys.executable, str(SCRIPTS / name), *args], cwd=SCRIPTS, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"{name} {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    found = RESULT.findall(p.stdout)
    assert found, f"{name} printed no RESULT line:\n{p.stdout[-2000:]}"
    words = found[-1].split()
    out = {k: float(v) for k, v in zip(words[::2], words[1::2])}
    out["stdout"] = p.stdout
    return out


@pytest.mark.parametrize("script", ["seq_mnist_mlp.py", "func_ops.py"])
def test_script_gives_one_devices_result_on_four(script, keras_home):
    one = run_script(script, ["-b", "16", "-ll:gpu", "1"], keras_home)
    four = run_script(script, ["-b", "16", "-ll:gpu", "4"], keras_home)
    for key in one:
        if key != "stdout":
            assert four[key] == pytest.approx(one[key], rel=1e-4, abs=1e-4), key
    if script == "seq_mnist_mlp.py":
        assert one["accuracy"] > 90.0                      # learnable data: trained for real
        assert "epoch 1/3: 40 iterations" in one["stdout"]
        assert "Total params: 50890" in one["stdout"]      # 784*64+64 + 64*10+10
