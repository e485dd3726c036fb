"""CIFAR-10 small images, as FlexFlow's ``cifar10.load_data(num_samples)`` returns them.

Entry point: ``load_data``.
"""

from __future__ import annotations

import numpy as np

from flexrt.errors import ConfigError
from flexrt.keras.datasets._files import DatasetError, get_file
from flexrt.keras.datasets.cifar import IMAGE_SHAPE, load_batch

DIRNAME = "cifar-10-batches-py"
ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
FILE_HASH = "c58f30108f718f92721af3b95e74349a"  # md5 of the tarball, as the CIFAR page gives it
SAMPLES_PER_BATCH = 10000
NUM_BATCHES = 5


def _check_num_samples(num_samples) -> int:
    valid = [SAMPLES_PER_BATCH * k for k in range(1, NUM_BATCHES + 1)]
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples not in valid:
        raise ConfigError(f"cifar10.load_data: num_samples={num_samples!r} must be a whole number of training "
                          f"batches of {SAMPLES_PER_BATCH} images; valid: {', '.join(map(str, valid))}")
    return int(num_samples)


def load_data(num_samples: int = 40000):
    """The first ``num_samples`` CIFAR-10 training images and the test set:
    ``(x_train, y_train), (x_test, y_test)``.

    As in FlexFlow, images stay channels first: ``x_train`` is uint8 of shape
    (num_samples, 3, 32, 32) and ``x_test`` (10000, 3, 32, 32); labels are uint8 of shape (N, 1).
    ``num_samples`` is 10000, 20000, ..., 50000 (it takes ``data_batch_1`` up to ``data_batch_5``).
    The folder ``cifar-10-batches-py`` is looked for in ``$FLEXRT_DATA_DIR`` and Keras' cache, else
    the tarball is downloaded and unpacked there (see ``flexrt.keras.datasets``).

    Example:
        >>> (x_train, y_train), (x_test, y_test) = load_data(10000)  # doctest: +SKIP
        >>> x_train.shape, y_train.shape  # doctest: +SKIP
        ((10000, 3, 32, 32), (10000, 1))
    """
    num_samples = _check_num_samples(num_samples)
    folder = get_file(DIRNAME, ORIGIN, file_hash=FILE_HASH, untar=True)
    x_train = np.empty((num_samples,) + IMAGE_SHAPE, dtype=np.uint8)
    y_train = np.empty((num_samples,), dtype=np.uint8)
    for i in range(num_samples // SAMPLES_PER_BATCH):
        fpath = folder / f"data_batch_{i + 1}"
        data, labels = load_batch(fpath)
        if len(data) != SAMPLES_PER_BATCH:
            raise DatasetError(f"CIFAR batch {fpath} holds {len(data)} images; a CIFAR-10 training batch holds "
                               f"{SAMPLES_PER_BATCH}")
        lo = i * SAMPLES_PER_BATCH
        x_train[lo:lo + SAMPLES_PER_BATCH] = data
        y_train[lo:lo + SAMPLES_PER_BATCH] = labels
    x_test, y_test = load_batch(folder / "test_batch")
    x_test = np.asarray(x_test, dtype=np.uint8)
    y_test = np.asarray(y_test, dtype=np.uint8)
    return (x_train, y_train.reshape(-1, 1)), (x_test, y_test.reshape(-1, 1))
