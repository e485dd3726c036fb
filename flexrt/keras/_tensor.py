"""``Tensor``: a symbolic Keras tensor, one output of one call of a layer (or an ``Input``).

A tensor knows its shape without the batch (``batch_shape[0]`` is None until a model using it is
compiled with the config's ``-b``), its element type, the layer that made it (``from_layer``) and
the layers that read it (``to_layers``), as FlexFlow's Keras tensors do. ``ffhandle`` is the
``flexrt.model.Tensor`` it became in the last compiled model that used it.

Operators build layers: ``a + b`` is ``Add()([a, b])``, ``a - b``, ``a * b`` likewise, ``a @ b`` a
batch matmul and ``a ** k`` a power (FlexFlow's).

Example:
    >>> from flexrt.keras.layers import Input
    >>> t = Input(shape=(784,))
    >>> t.batch_shape, t.dtype_str
    ((None, 784), 'float32')

Entry point: ``Tensor`` (made by layers, never by hand), ``dtype_of``.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import numpy as np

from flexrt.errors import ConfigError
from flexrt.ir.datatype import DataType

# Keras dtype names and the DataTypes FlexFlow's Keras tensors take.
_DTYPES = {"float32": DataType.DT_FLOAT, "float64": DataType.DT_DOUBLE, "int32": DataType.DT_INT32,
           "int64": DataType.DT_INT64}


def dtype_of(where: str, dtype: Any) -> DataType:
    """A Keras dtype (None: float32; a name, a NumPy dtype or a DataType) -> its DataType."""
    if dtype is None:
        return DataType.DT_FLOAT
    if isinstance(dtype, DataType):
        if dtype in _DTYPES.values():
            return dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name in _DTYPES:
            return _DTYPES[name]
    raise ConfigError(f"{where}: dtype {dtype!r} is not supported; valid: {', '.join(_DTYPES)} "
                      f"(or DataType.{', DataType.'.join(d.name for d in _DTYPES.values())})")


def dtype_name(dtype: DataType) -> str:
    return {v: k for k, v in _DTYPES.items()}.get(dtype, dtype.name)


class Tensor:
    """One symbolic tensor of a Keras graph (see the module docstring)."""

    __slots__ = ("batch_shape", "dtype", "name", "from_layer", "to_layers", "node", "serial", "_ffhandle")
    _serials = itertools.count()

    def __init__(self, batch_shape: tuple, dtype: DataType, from_layer: Any, node: Any = None,
                 name: str = "") -> None:
        self.batch_shape = (None,) + tuple(int(d) for d in batch_shape[1:])
        self.dtype = dtype
        self.name = name
        self.from_layer = from_layer
        self.node = node          # the call of from_layer that made it (None for an Input)
        self.to_layers: list = []
        self._ffhandle = None
        self.serial = next(Tensor._serials)   # creation order (the order of the layer calls)

    @property
    def shape(self) -> list:
        return list(self.batch_shape)

    @property
    def num_dims(self) -> int:
        return len(self.batch_shape)

    @property
    def dtype_str(self) -> str:
        return dtype_name(self.dtype)

    @property
    def ffhandle(self):
        """The ``flexrt.model.Tensor`` this tensor became in the last compiled model using it."""
        return self._ffhandle

    @ffhandle.setter
    def ffhandle(self, handle) -> None:
        self._ffhandle = handle

    def sample_shape(self) -> tuple:
        """The shape without the batch dimension."""
        return self.batch_shape[1:]

    def __repr__(self) -> str:
        owner = getattr(self.from_layer, "name", "?")
        return f"<keras Tensor {self.name or owner} shape={self.batch_shape} dtype={self.dtype_str}>"

    # FlexFlow's operators on Keras tensors
    def __add__(self, other):
        from flexrt.keras.layers.merge import Add
        return Add()([self, other])

    def __sub__(self, other):
        from flexrt.keras.layers.merge import Subtract
        return Subtract()([self, other])

    def __mul__(self, other):
        from flexrt.keras.layers.merge import Multiply
        return Multiply()([self, other])

    def __matmul__(self, other):
        from flexrt.keras.backend import batch_dot
        return batch_dot(self, other)

    def __pow__(self, other):
        from flexrt.keras.backend import pow as kpow
        return kpow(self, other)


def check_tensor(where: str, value: Any, what: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise ConfigError(f"{where}: {what} must be a Keras tensor (from Input(...) or a layer call), got "
                          f"{type(value).__name__} {value!r:.80}")
    return value


def optional_name(where: str, name: Optional[str]) -> Optional[str]:
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where}: name must be a non-empty string, got {name!r}")
    return name


def shape_text(shape) -> str:
    """``(None, 784)``: a shape as Keras prints it."""
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
