"""FlexFlow's (and Keras') small datasets: ``mnist``, ``cifar10`` and ``reuters``.

Each module has ``load_data(...)`` returning ``(x_train, y_train), (x_test, y_test)`` as NumPy
arrays, with FlexFlow's shapes. Files are looked for in ``$FLEXRT_DATA_DIR``, then in Keras' cache
(``$KERAS_HOME/datasets``, else ``~/.keras/datasets``) under Keras' file names, so a dataset Keras
already downloaded is reused; a missing file is downloaded into Keras' cache, its checksum checked.
Pickled data (CIFAR batches, Reuters' object arrays) goes through a restricted unpickler that builds
NumPy arrays and nothing else.

Example:
    >>> from flexrt.keras.datasets import mnist
    >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()  # doctest: +SKIP
    >>> x_train.shape, x_train.dtype  # doctest: +SKIP
    ((60000, 28, 28), dtype('uint8'))

Entry points: the modules ``mnist``, ``cifar10``, ``cifar``, ``reuters``; ``DatasetError``.
"""

from flexrt.keras.datasets import cifar, cifar10, mnist, reuters
from flexrt.keras.datasets._files import DATA_DIR_ENV_VAR, DatasetError

__all__ = ["DATA_DIR_ENV_VAR", "DatasetError", "cifar", "cifar10", "mnist", "reuters"]
