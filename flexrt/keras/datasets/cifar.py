"""Reading one CIFAR batch file (a pickled dict), shared by the CIFAR loaders.

Entry point: ``load_batch``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from flexrt.inputs import listing, read_bytes
from flexrt.keras.datasets._files import DatasetError, safe_unpickle

IMAGE_SHAPE = (3, 32, 32)  # channels first, as the files store each row


def _decoded(d, where: str) -> dict:
    if not isinstance(d, dict):
        raise DatasetError(f"{where} holds a {type(d).__name__}, not the dict of a CIFAR batch")
    out = {}
    for k, v in d.items():
        out[k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)] = v
    return out


def load_batch(fpath, label_key: str = "labels"):
    """``(data, labels)`` of the CIFAR batch file ``fpath``: uint8 images of shape (N, 3, 32, 32)
    and the list of N labels stored under ``label_key`` ("labels"; "fine_labels" in CIFAR-100).

    The file is a pickle (Python 2's, protocol 2, with byte-string keys); it is read with
    ``encoding="bytes"`` through the restricted unpickler, which builds NumPy arrays and plain
    values only and refuses anything else with a ``DatasetError``.

    Example:
        >>> data, labels = load_batch("cifar-10-batches-py/data_batch_1")  # doctest: +SKIP
        >>> data.shape, len(labels)  # doctest: +SKIP
        ((10000, 3, 32, 32), 10000)
    """
    where = f"CIFAR batch {fpath}"
    raw = read_bytes(Path(fpath), "CIFAR batch", error=DatasetError)
    d = _decoded(safe_unpickle(io.BytesIO(raw), where, encoding="bytes"), where)
    missing = [k for k in ("data", label_key) if k not in d]
    if missing:
        raise DatasetError(f"{where} has no {listing(repr(k) for k in missing)}; it has {listing(sorted(d))}")
    data, labels = d["data"], d[label_key]
    per_image = int(np.prod(IMAGE_SHAPE))
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != per_image:
        raise DatasetError(f"{where}: 'data' is {getattr(data, 'shape', type(data).__name__)}; expected an array "
                           f"of shape (N, {per_image})")
    if len(labels) != len(data):
        raise DatasetError(f"{where}: {len(data)} images but {len(labels)} labels")
    return data.reshape((data.shape[0],) + IMAGE_SHAPE), labels
