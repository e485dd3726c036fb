"""The Reuters newswire topics, as FlexFlow's (and Keras' 2.x) ``reuters.load_data`` returns them.

Entry points: ``load_data``, ``get_word_index``.
"""

from __future__ import annotations

import warnings

import numpy as np

from flexrt.inputs import parse_json, read_text
from flexrt.keras.datasets._files import DatasetError, get_file, load_npz

ORIGIN = "https://s3.amazonaws.com/text-datasets/reuters.npz"
FILE_HASH = "87aedbeb0cb229e378797a632c1997b6"
WORD_INDEX_ORIGIN = "https://s3.amazonaws.com/text-datasets/reuters_word_index.json"
WORD_INDEX_HASH = "4d44cc38712099c9e383dc6e5f11a921"


def _sequences(xs) -> np.ndarray:
    """A 1-D object array of lists (``np.array`` would make a 2-D one when all lengths agree)."""
    out = np.empty(len(xs), dtype=object)
    for i, x in enumerate(xs):
        out[i] = x
    return out


def _shuffled(file, seed: int):
    arrays = load_npz(file, ("x", "y"), "Reuters file")
    xs, labels = arrays["x"], arrays["y"]
    if xs.ndim != 1 or len(xs) != len(labels):
        raise DatasetError(f"Reuters file {file}: x has shape {xs.shape} and y {labels.shape}; expected one "
                           f"sequence and one label per newswire")
    indices = np.arange(len(xs))
    np.random.RandomState(seed).shuffle(indices)
    return [list(x) for x in xs[indices]], labels[indices]


def load_data(path: str = "reuters.npz", num_words=None, skip_top: int = 0, maxlen=None, test_split: float = 0.2,
              seed: int = 113, start_char=1, oov_char=2, index_from: int = 3, **kwargs):
    """The Reuters newswires as word-index sequences and their topics:
    ``(x_train, y_train), (x_test, y_test)``.

    Keras 2's semantics: the newswires are shuffled with ``seed``; each sequence starts with
    ``start_char`` (when not None) and its word indices are shifted by ``index_from``; sequences of
    ``maxlen`` words or more are dropped (when ``maxlen`` is given); words outside
    ``[skip_top, num_words)`` become ``oov_char`` (or are dropped when it is None); the last
    ``test_split`` of the newswires is the test set. ``x_*`` are 1-D object arrays of lists of ints,
    ``y_*`` integer arrays. ``nb_words`` is accepted for ``num_words`` with a warning.

    The file's sequences are an object array, i.e. a pickle inside the ``.npz``; it is read
    through the restricted unpickler, which builds arrays and plain values only.

    Example:
        >>> (x_train, y_train), (x_test, y_test) = load_data(num_words=1000)  # doctest: +SKIP
        >>> len(x_train), len(x_test)  # doctest: +SKIP
        (8982, 2246)
    """
    if "nb_words" in kwargs:
        warnings.warn("reuters.load_data: `nb_words` was renamed `num_words`", DeprecationWarning, stacklevel=2)
        num_words = kwargs.pop("nb_words")
    if kwargs:
        raise TypeError(f"reuters.load_data: unexpected keyword arguments {', '.join(sorted(kwargs))}")
    xs, labels = _shuffled(get_file(path, ORIGIN, file_hash=FILE_HASH), seed)
    if start_char is not None:
        xs = [[start_char] + [w + index_from for w in x] for x in xs]
    elif index_from:
        xs = [[w + index_from for w in x] for x in xs]
    if maxlen:
        kept = [i for i, x in enumerate(xs) if len(x) < maxlen]
        xs, labels = [xs[i] for i in kept], labels[kept]
    if not num_words:
        num_words = max((max(x) for x in xs if x), default=0)
    if oov_char is not None:
        xs = [[w if skip_top <= w < num_words else oov_char for w in x] for x in xs]
    else:
        xs = [[w for w in x if skip_top <= w < num_words] for x in xs]
    split = int(len(xs) * (1 - test_split))
    return ((_sequences(xs[:split]), np.array(labels[:split])),
            (_sequences(xs[split:]), np.array(labels[split:])))


def get_word_index(path: str = "reuters_word_index.json") -> dict:
    """The dictionary from words to their indices in ``load_data``'s sequences (before
    ``index_from`` is added).

    Example:
        >>> get_word_index()["the"]  # doctest: +SKIP
        1
    """
    file = get_file(path, WORD_INDEX_ORIGIN, file_hash=WORD_INDEX_HASH)
    index = parse_json(read_text(file, "Reuters word index", error=DatasetError), str(file), error=DatasetError)
    if not isinstance(index, dict):
        raise DatasetError(f"Reuters word index {file} holds a JSON {type(index).__name__}, not an object of "
                           f"word -> index")
    return index

