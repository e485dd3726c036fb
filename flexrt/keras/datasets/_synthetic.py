"""Synthetic data sets in the files and formats Keras caches: MNIST (``mnist.npz``), CIFAR-10
(``cifar-10-batches-py/``) and Reuters (``reuters.npz``), with the real shapes and learnable
contents (per class a fixed random template plus noise; per Reuters topic its own 20 of the 1,000
most common words), so that a script asserting an accuracy can pass.

The ``flexrt`` command (``show``, ``simulate``, ``search``, ``train``) builds a script's model
only up to its ``compile`` and trains on synthetic batches; a data set the script loads before
``compile`` that is not on this host is made here instead of downloaded (``synthetic_file``), once,
in flexrt's cache folder. ``bench/bench_flexflow_scripts.py`` writes the same files for whole runs.

Entry points: ``write_datasets``, ``write_dataset``, ``synthetic_file``.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from flexrt.paths import cache_dir

FILES = ("mnist.npz", "cifar-10-batches-py", "reuters.npz")


def _images(rng, labels, shape) -> np.ndarray:
    """uint8 images that a classifier can learn: per class a fixed random template, plus noise."""
    templates = rng.integers(0, 256, (10, *shape))
    noise = rng.integers(0, 256, (len(labels), *shape))
    return ((templates[labels] * 3 + noise) // 4).astype(np.uint8)


def write_datasets(home: Path, seed: int = 0) -> None:
    """MNIST, CIFAR-10 and Reuters under ``home / "datasets"``, in Keras' files and formats."""
    for fname in FILES:
        write_dataset(Path(home) / "datasets", fname, seed)


def write_dataset(folder: Path, fname: str, seed: int = 0) -> None:
    """One of ``FILES`` into ``folder``."""
    rng = np.random.default_rng(seed)
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    if fname == "mnist.npz":
        y_train, y_test = rng.integers(0, 10, 60000), rng.integers(0, 10, 10000)
        np.savez(d / "mnist.npz", x_train=_images(rng, y_train, (28, 28)), y_train=y_train.astype(np.uint8),
                 x_test=_images(rng, y_test, (28, 28)), y_test=y_test.astype(np.uint8))
    elif fname == "cifar-10-batches-py":
        c = d / "cifar-10-batches-py"
        c.mkdir(exist_ok=True)
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            labels = rng.integers(0, 10, 10000)
            batch = {b"data": _images(rng, labels, (3072,)), b"labels": labels.tolist()}
            with open(c / name, "wb") as f:
                pickle.dump(batch, f, protocol=2)
    elif fname == "reuters.npz":
        # 11228 newswires over 46 topics; each topic favours its own 20 of the 1000 most common words.
        topics = rng.integers(0, 46, 11228)
        vocab = rng.integers(1, 990, (46, 20))
        wires = np.empty(len(topics), dtype=object)
        for i, t in enumerate(topics):
            n = int(rng.integers(20, 120))
            own = vocab[t][rng.integers(0, 20, n)]
            wires[i] = [int(w) for w in np.where(rng.random(n) < 0.7, own, rng.integers(1, 5000, n))]
        np.savez(d / "reuters.npz", x=wires, y=topics.astype(np.int64))
    else:
        raise ValueError(f"no synthetic data set {fname!r}; valid: {', '.join(FILES)}")


_SAID: set = set()


def synthetic_file(fname: str) -> Path | None:
    """The synthetic stand-in of dataset file ``fname`` (written once into flexrt's cache), or None
    when there is none; says so once per file on stderr."""
    if fname not in FILES:
        return None
    folder = cache_dir() / "synthetic-keras" / "datasets"
    path = folder / fname
    if not path.exists():   # written whole in a scratch folder, then renamed into place (one writer wins)
        folder.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=folder, prefix=".writing-"))
        try:
            write_dataset(scratch, fname)
            os.rename(scratch / fname, path)
        except OSError:
            if not path.exists():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if fname not in _SAID:
        _SAID.add(fname)
        print(f"flexrt: dataset file {fname!r} is not on this host; the flexrt command builds the model on "
              f"synthetic data of its shapes ({path}) and trains on synthetic batches anyway", file=sys.stderr)
    return path
