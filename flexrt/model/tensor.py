"""``Tensor``: FlexFlow's tensor handle, a reference to one output of a layer in an ``FFModel``'s PCG.

Example:
    >>> from flexrt.model import FFConfig, FFModel
    >>> m = FFModel(FFConfig([]))
    >>> x = m.create_tensor([64, 784])
    >>> x.dims, x.num_dims, x.data_type.name
    ((64, 784), 2, 'DT_FLOAT')

Data: FlexFlow's calls that read and write a tensor's whole value work under any strategy
(``flexrt.model._access`` says what each kind of tensor holds): ``inline_map`` / ``get_array`` /
``get_flat_array`` / ``inline_unmap``, ``attach_numpy_array`` / ``detach_numpy_array`` /
``is_mapped``, ``set_tensor`` / ``get_tensor``; a ``Parameter`` (a weight, from
``Layer.get_weight_tensor()``) adds ``get_weights`` / ``set_weights``.

Entry points: ``Tensor`` (made by ``FFModel``'s layer methods, never by hand), ``Parameter``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flexrt.errors import ConfigError
from flexrt.ir.datatype import DataType
from flexrt.ir.pcg import TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.model import _access

if TYPE_CHECKING:
    from flexrt.model.ffmodel import FFModel
    from flexrt.model.layer import Layer


class Tensor:
    """Output ``ref.index`` of the PCG node ``ref.node`` of ``model``; its shape is fixed when it is made.

    Two handles are equal when they name the same output of the same model.
    """

    __slots__ = ("_model", "_ref", "_shape", "_owner")

    def __init__(self, model: "FFModel", ref: TensorRef, shape: TensorShape, owner: str) -> None:
        self._model = model
        self._ref = ref
        self._shape = shape
        self._owner = owner

    @property
    def model(self) -> "FFModel":
        return self._model

    @property
    def ref(self) -> TensorRef:
        return self._ref

    @property
    def dims(self) -> tuple[int, ...]:
        """Sizes, sample dimension first (FlexFlow's Python order)."""
        return self._shape.dims

    @property
    def num_dims(self) -> int:
        return self._shape.rank

    @property
    def data_type(self) -> DataType:
        return self._shape.dtype

    @property
    def owner_layer(self) -> str:
        """Name of the layer that produces this tensor (for ``create_tensor``, the input's name)."""
        return self._owner

    @property
    def owner_op(self) -> "Layer":
        """The layer that produces this tensor (FlexFlow's ``owner_op``)."""
        return self._model.get_layer_by_name(self._owner)

    def get_shape(self) -> TensorShape:
        """Sizes and element type."""
        return self._shape

    def __eq__(self, other) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return self._model is other._model and self._ref == other._ref

    def __hash__(self) -> int:
        return hash((id(self._model), self._ref))

    def __repr__(self) -> str:
        return f"Tensor({self._owner}:{self._ref.index}, {self._shape})"

    # ---- FlexFlow's data calls ----------------------------------------------------------------
    def _mapped(self) -> dict:
        return self._model._mapped

    def is_mapped(self) -> bool:
        """Whether ``inline_map`` or ``attach_numpy_array`` mapped it (and no unmap followed)."""
        return self in self._mapped()

    def inline_map(self, ffmodel, ffconfig=None) -> None:
        """Map the tensor: take its whole current value for ``get_array`` (also ``inline_map(ffconfig)``)."""
        _access.split_args(self, "inline_map", (ffmodel, ffconfig))
        if self.is_mapped():
            raise ConfigError(f"inline_map: {_access.describe(self)} is already mapped; inline_unmap it first")
        self._mapped()[self] = _access.read(self._model, self, "inline_map")

    def inline_unmap(self, ffmodel, ffconfig=None) -> None:
        """Unmap the tensor, writing back what was changed in the mapped array (inputs, the label
        tensor and weights; a layer output's copy is dropped). Also ``inline_unmap(ffconfig)``."""
        _access.split_args(self, "inline_unmap", (ffmodel, ffconfig))
        arr = self._take_mapped("inline_unmap")
        if _access.tensor_kind(self._model, self) in _access.WRITABLE:
            _access.write(self._model, self, arr, "inline_unmap")

    def _take_mapped(self, where: str):
        if not self.is_mapped():
            raise ConfigError(f"{where}: {_access.describe(self)} is not mapped; call inline_map(ffmodel, ffconfig) "
                              f"first")
        return self._mapped().pop(self)

    def get_array(self, ffmodel, ffconfig=None, data_type=None) -> np.ndarray:
        """The mapped array (changes in place are written back at ``inline_unmap``); also the older
        ``get_array(ffconfig, data_type)``."""
        _access.split_args(self, "get_array", (ffmodel, ffconfig, data_type))
        if not self.is_mapped():
            raise ConfigError(f"get_array: {_access.describe(self)} is not mapped; call "
                              f"inline_map(ffmodel, ffconfig) first")
        return self._mapped()[self]

    def get_flat_array(self, ffmodel, ffconfig=None, data_type=None) -> np.ndarray:
        """``get_array``'s array as one dimension (a view: changes reach the mapped array)."""
        _access.split_args(self, "get_flat_array", (ffmodel, ffconfig, data_type))
        return self.get_array(ffmodel, ffconfig).reshape(-1)

    def attach_numpy_array(self, ffmodel, ffconfig, np_array=None) -> None:
        """Make ``np_array`` (exact shape and dtype) the tensor's value and map it; also the older
        ``attach_numpy_array(ffconfig, np_array)``."""
        _, arr = _access.split_args(self, "attach_numpy_array", (ffmodel, ffconfig, np_array), array=True)
        if self.is_mapped():
            raise ConfigError(f"attach_numpy_array: {_access.describe(self)} is already mapped; detach it first")
        _access.write(self._model, self, arr, "attach_numpy_array")
        self._mapped()[self] = arr

    def detach_numpy_array(self, ffconfig=None) -> None:
        """Unmap an attached array, writing back what was changed in it."""
        arr = self._take_mapped("detach_numpy_array")
        if _access.tensor_kind(self._model, self) is _access.Kind.WEIGHT:
            _access.write(self._model, self, arr, "detach_numpy_array")

    def set_tensor(self, ffmodel, np_array) -> None:
        """Write the tensor's whole value (an input's batch, the labels, a weight)."""
        _, arr = _access.split_args(self, "set_tensor", (ffmodel, np_array), array=True)
        _access.write(self._model, self, arr, "set_tensor")

    def get_tensor(self, ffmodel, comm_type=None) -> np.ndarray:
        """A copy of the tensor's whole value (``comm_type``, FlexFlow's older argument, is ignored)."""
        _access.split_args(self, "get_tensor", (ffmodel,))
        return np.array(_access.read(self._model, self, "get_tensor"), copy=True)


class Parameter(Tensor):
    """FlexFlow's ``Parameter``: a weight's tensor handle (``Layer.get_weight_tensor()``), named
    ``{layer}.{weight}``; ``get_weights`` / ``set_weights`` read and write its whole array."""

    __slots__ = ("_name",)

    def __init__(self, model: "FFModel", ref: TensorRef, shape: TensorShape, owner: str, name: str) -> None:
        super().__init__(model, ref, shape, owner)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def get_weights(self, ffmodel) -> np.ndarray:
        """The weight's current full array (gathered from the devices that hold its pieces)."""
        _access.split_args(self, "get_weights", (ffmodel,))
        return _access.read(self._model, self, "get_weights")

    def set_weights(self, ffmodel, np_array) -> None:
        """Write the weight's full array; the next iteration uses it (until it is overwritten)."""
        _, arr = _access.split_args(self, "set_weights", (ffmodel, np_array), array=True)
        _access.write(self._model, self, arr, "set_weights")

    def __repr__(self) -> str:
        return f"Parameter({self._name}, {self._shape})"
