"""``Tensor``: FlexFlow's tensor handle, a reference to one output of a layer in an ``FFModel``'s PCG.

Example:
    >>> from flexrt.model import FFConfig, FFModel
    >>> m = FFModel(FFConfig([]))
    >>> x = m.create_tensor([64, 784])
    >>> x.dims, x.num_dims, x.data_type.name
    ((64, 784), 2, 'DT_FLOAT')

Entry point: ``Tensor`` (made by ``FFModel``'s layer methods, never by hand).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexrt.ir.datatype import DataType
from flexrt.ir.pcg import TensorRef
from flexrt.ir.tensor_shape import TensorShape

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
