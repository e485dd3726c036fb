"""FlexFlow's ``SingleDataLoader``: a whole dataset for one model tensor, handed out a batch at a time.

``FFModel.create_data_loader(tensor, array)`` makes one per input tensor (and one for
``ffmodel.label_tensor``). The loader keeps the full array (cast to the tensor's data type) and
``next_batch(ffmodel)`` gives the model the next ``batch_size`` rows, the tensor's first dimension;
a partial batch at the end of the dataset is never handed out (FlexFlow's iteration count is
``num_samples // batch_size``). The runtime splits each full batch along the sample dimension as the
strategy asks: the loader knows nothing of devices.

Example:
    >>> import numpy as np
    >>> from flexrt.model import FFConfig, FFModel
    >>> m = FFModel(FFConfig(["-b", "2"]))
    >>> x = m.create_tensor([2, 3])
    >>> dl = m.create_data_loader(x, np.arange(15.0).reshape(5, 3))
    >>> dl.num_samples, dl.num_batches
    (5, 2)
    >>> dl.next_batch(m); dl.next_batch(m); m.current_batch("input_1")[0].tolist()
    [6.0, 7.0, 8.0]

Entry points: ``SingleDataLoader``, ``batch_dtype``.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from flexrt.errors import ConfigError
from flexrt.ir.datatype import DataType


def batch_dtype(data_type: DataType) -> np.dtype:
    return np.dtype(data_type.numpy_name)


def ids_outside(arr: np.ndarray, want: np.dtype) -> Optional[tuple[int, int]]:
    """(lowest, highest) of integer ``arr`` when some value does not fit integer dtype ``want`` (a
    cast would wrap it: 2**32 + 1 would read as 1), else None."""
    if not arr.size:
        return None
    info = np.iinfo(want)
    lo, hi = int(arr.min()), int(arr.max())
    return (lo, hi) if lo < info.min or hi > info.max else None


class SingleDataLoader:
    """The dataset of one model tensor (an input, or the labels); ``name`` is the input's name or
    ``"label"``."""

    def __init__(self, ffmodel: Any, tensor: Any, full_array: Any, name: str) -> None:
        where = f"create_data_loader({name})"
        try:
            arr = np.asarray(full_array)
        except ValueError as e:   # ragged nested lists
            raise ConfigError(f"{where}: not an array of one shape (samples first): {e}") from None
        dims = tuple(tensor.dims)
        if arr.ndim != len(dims) and not (name == "label" and arr.ndim == len(dims) - 1 and dims[-1] == 1):
            raise ConfigError(f"{where}: the array has {arr.ndim} dimension(s) {list(arr.shape)}; the tensor has "
                              f"{len(dims)} {list(dims)} (samples first)")
        if arr.ndim == len(dims) - 1:
            arr = arr[..., None]
        if tuple(arr.shape[1:]) != dims[1:]:
            raise ConfigError(f"{where}: each sample has shape {list(arr.shape[1:])}; the tensor needs "
                              f"{list(dims[1:])} (array shape {list(arr.shape)}, tensor {list(dims)})")
        if arr.shape[0] < dims[0]:
            raise ConfigError(f"{where}: {arr.shape[0]} sample(s) is less than one batch of {dims[0]}")
        want = batch_dtype(tensor.data_type)
        if arr.dtype.kind not in "biuf":
            raise ConfigError(f"{where}: the array must be numeric, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and want.kind in "iu":   # class ids as floats (Keras casts them): whole numbers only
            if not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
                raise ConfigError(f"{where}: the tensor holds {want} (ids) but the array is {arr.dtype} with values "
                                  f"that are not whole numbers")
            arr = arr.astype(np.int64)
        outside = ids_outside(arr, want) if arr.dtype.kind in "iu" and want.kind in "iu" else None
        if outside is not None:
            info = np.iinfo(want)
            raise ConfigError(f"{where}: values {outside[0]}..{outside[1]} do not fit the tensor's {want} "
                              f"({info.min}..{info.max})")
        self.ffmodel = ffmodel
        self.name = name
        self.tensor = tensor
        self.data = np.ascontiguousarray(arr, dtype=want)
        self.batch_size = dims[0]
        self.next_index = 0

    @property
    def num_samples(self) -> int:
        return int(self.data.shape[0])

    @property
    def num_batches(self) -> int:
        return self.num_samples // self.batch_size

    def reset(self) -> None:
        """Start again from the first sample."""
        self.next_index = 0

    def next_batch(self, ffmodel: Any = None) -> None:
        """Hand the next batch to ``ffmodel`` (FlexFlow's signature); it wraps to the first batch
        when fewer than ``batch_size`` samples are left."""
        model = self.ffmodel if ffmodel is None else ffmodel
        if model is not self.ffmodel:
            raise ConfigError(f"next_batch: this loader ({self.name}) belongs to another FFModel")
        if self.next_index + self.batch_size > self.num_samples:
            self.next_index = 0
        lo = self.next_index
        self.next_index += self.batch_size
        model._set_batch(self.name, self.data[lo:lo + self.batch_size])

    def __repr__(self) -> str:
        return f"SingleDataLoader({self.name}, {self.num_samples} samples of {list(self.data.shape[1:])}, " \
               f"batch {self.batch_size})"
