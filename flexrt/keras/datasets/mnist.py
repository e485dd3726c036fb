"""The MNIST handwritten digits, as FlexFlow's (and Keras') ``mnist.load_data`` returns them.

Entry point: ``load_data``.
"""

from __future__ import annotations

from flexrt.keras.datasets._files import DatasetError, get_file, load_npz

ORIGIN = "https://s3.amazonaws.com/img-datasets/mnist.npz"
FILE_HASH = "8a61469f7ea1b51cbae51d4f78837e45"  # md5, FlexFlow's and Keras' 2.x
KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_data(path: str = "mnist.npz"):
    """The MNIST training and test sets: ``(x_train, y_train), (x_test, y_test)``.

    ``x_*`` are uint8 images of shape (N, 28, 28), ``y_*`` uint8 labels 0-9 of shape (N,)
    (60,000 training and 10,000 test images). ``path`` is the file name looked for in
    ``$FLEXRT_DATA_DIR`` and Keras' cache (see ``flexrt.keras.datasets``).

    Example:
        >>> (x_train, y_train), (x_test, y_test) = load_data()  # doctest: +SKIP
        >>> x_train.shape, y_test.shape  # doctest: +SKIP
        ((60000, 28, 28), (10000,))
    """
    file = get_file(path, ORIGIN, file_hash=FILE_HASH)
    arrays = load_npz(file, KEYS, "MNIST file")
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DatasetError(f"MNIST file {file}: x_{part} has shape {x.shape} and y_{part} {y.shape}; expected "
                               f"(N, 28, 28) images and (N,) labels")
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])
