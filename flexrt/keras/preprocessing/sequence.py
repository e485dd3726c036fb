"""Keras' ``pad_sequences``: lists of ids -> one array of equal-length rows.

Example:
    >>> pad_sequences([[1, 2], [3]], maxlen=3).tolist()
    [[0, 1, 2], [0, 0, 3]]

Entry point: ``pad_sequences``.
"""

from __future__ import annotations

import numbers

import numpy as np

from flexrt.errors import ConfigError


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre", value=0.0) -> np.ndarray:
    """Each sequence cut to ``maxlen`` (from the start, 'pre', or the end, 'post') and padded with
    ``value`` before ('pre') or after ('post') it."""
    for arg, v in (("padding", padding), ("truncating", truncating)):
        if v not in ("pre", "post"):
            raise ConfigError(f"pad_sequences: {arg} must be 'pre' or 'post', got {v!r}")
    seqs = [list(s) for s in sequences]
    if maxlen is None:
        maxlen = max((len(s) for s in seqs), default=0)
    if isinstance(maxlen, bool) or not isinstance(maxlen, numbers.Integral) or maxlen < 0:
        raise ConfigError(f"pad_sequences: maxlen must be an integer >= 0 or None, got {maxlen!r}")
    out = np.full((len(seqs), maxlen), value, dtype=dtype)
    for i, s in enumerate(seqs):
        s = s[-maxlen:] if truncating == "pre" else s[:maxlen]
        if maxlen == 0 or not s:
            continue
        if padding == "post":
            out[i, :len(s)] = s
        else:
            out[i, maxlen - len(s):] = s
    return out
