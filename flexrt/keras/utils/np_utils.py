"""NumPy helpers of Keras: ``to_categorical`` (class ids -> one-hot rows) and ``normalize``.

Example:
    >>> to_categorical([0, 2, 1], 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]

Entry points: ``to_categorical``, ``normalize``.
"""

from __future__ import annotations

import numpy as np

from flexrt.errors import ConfigError


def to_categorical(y, num_classes=None, dtype="float32") -> np.ndarray:
    """One-hot rows of the class ids ``y`` (a trailing dimension of 1 is dropped first)."""
    ids = np.asarray(y)
    if ids.size and (ids.dtype.kind not in "iub" and not np.all(np.equal(np.mod(ids, 1), 0))):
        raise ConfigError(f"to_categorical: y must hold integer class ids, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    shape = ids.shape[:-1] if ids.ndim > 1 and ids.shape[-1] == 1 else ids.shape
    ids = ids.reshape(-1)
    if ids.size and ids.min() < 0:
        raise ConfigError(f"to_categorical: class ids must be >= 0, got {int(ids.min())}")
    n = int(ids.max()) + 1 if num_classes is None and ids.size else int(num_classes or 0)
    if ids.size and int(ids.max()) >= n:
        raise ConfigError(f"to_categorical: class id {int(ids.max())} needs num_classes > {int(ids.max())}, got {n}")
    out = np.zeros((ids.size, n), dtype=dtype)
    out[np.arange(ids.size), ids] = 1
    return out.reshape(shape + (n,))


def normalize(x, axis=-1, order=2) -> np.ndarray:
    """``x`` divided by its ``order``-norm along ``axis`` (zero norms left as they are)."""
    x = np.asarray(x)
    norm = np.atleast_1d(np.linalg.norm(x, order, axis))
    norm[norm == 0] = 1
    return x / np.expand_dims(norm, axis)
