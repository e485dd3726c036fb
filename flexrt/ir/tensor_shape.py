"""``TensorShape``: the unpartitioned shape of a tensor (dims in NumPy order, dim 0 = sample)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.inputs import short
from flexrt.ir.datatype import DataType

# Elements of one tensor at most: 2**48 (a PiB of float32), so that every byte count, flop count and
# piece size stays well inside the 64-bit integers of the simulator's compiled core.
MAX_ELEMENTS = 2 ** 48


@dataclass(frozen=True, slots=True)
class TensorShape:
    """Sizes of a tensor's dimensions and its element type.

    Example:
        >>> TensorShape((64, 784), DataType.DT_FLOAT).num_elements
        50176
    """

    dims: tuple[int, ...]
    dtype: DataType = DataType.DT_FLOAT

    def __post_init__(self) -> None:
        dims = tuple(self.dims)
        object.__setattr__(self, "dims", dims)
        n = 1
        for i, d in enumerate(dims):
            if not isinstance(d, int) or isinstance(d, bool) or d < 1:
                raise ShapeError(f"dimension {i} of shape {short(list(dims))} is {short(d)}; every size must be an int "
                                 f">= 1")
            n *= d
        if n > MAX_ELEMENTS:
            raise ShapeError(f"shape {short(list(dims))} has more than 2**48 = {MAX_ELEMENTS:,} elements, the limit "
                             f"of one tensor (flexrt.ir.tensor_shape.MAX_ELEMENTS); valid: dimensions whose product "
                             f"is at most that")
        if not isinstance(self.dtype, DataType):
            raise ShapeError(f"dtype must be a DataType, got {self.dtype!r}")

    @classmethod
    def piece(cls, dims, dtype: DataType = DataType.DT_FLOAT) -> "TensorShape":
        """The shape of a piece of a tensor, where a size may be 0: a piece that reads nothing of an
        operand (a ``PART`` slot, ``flexrt.ir.registry.Slot``). A tensor itself is never empty."""
        dims = tuple(dims)
        if all(isinstance(d, int) and d >= 1 for d in dims):
            return cls(dims, dtype)
        if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
            raise ShapeError(f"piece shape {list(dims)}: every size must be an int >= 0")
        out = object.__new__(cls)
        object.__setattr__(out, "dims", dims)
        object.__setattr__(out, "dtype", dtype)
        return out

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def size_bytes(self) -> int:
        return self.num_elements * self.dtype.size_bytes

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.dims))}] {self.dtype.short}"


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Turn a possibly negative axis into 0..rank-1, or raise a ShapeError naming the valid range."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for a tensor of rank {rank}; valid: {-rank}..{rank - 1}")
    return axis % rank
