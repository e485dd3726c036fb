"""``ParallelTensorShape`` (Unity §3.1): per-dimension (size, degree), a sum degree (partial
sums waiting for a Reduction) and a discard-copy degree (replicas), plus the element type.

The total degree, the product of all degrees, is the number of pieces of the tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flexrt.errors import ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.tensor_shape import TensorShape


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` in increasing order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True, slots=True)
class ParallelDim:
    """One data dimension: its full ``size`` and the number of equal pieces it is cut into."""

    size: int
    degree: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise ShapeError(f"dimension size must be an int >= 1, got {self.size!r}")
        if not isinstance(self.degree, int) or self.degree < 1:
            raise ShapeError(f"degree must be an int >= 1, got {self.degree!r}")

    @property
    def piece_size(self) -> int:
        return self.size // self.degree


@dataclass(frozen=True, slots=True)
class ParallelDegrees:
    """The degrees of a parallel tensor without its sizes: shard degree per dim, sum, copy."""

    shard: tuple[int, ...]
    sum: int = 1
    copy: int = 1

    @property
    def total(self) -> int:
        return math.prod(self.shard) * self.sum * self.copy

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.shard))}) s{self.sum} c{self.copy}"


@dataclass(frozen=True, slots=True)
class ParallelTensorShape:
    """A tensor's shape together with how it is cut into pieces.

    Validated at construction: every degree divides its dimension's size.

    Example:
        >>> s = ParallelTensorShape.of((64, 784), degrees=(2, 1))
        >>> s.piece_shape.dims, s.total_degree
        ((32, 784), 2)
        >>> str(s)
        '[64/2, 784] f32'
    """

    dims: tuple[ParallelDim, ...]
    sum_degree: int = 1
    discard_copy_degree: int = 1
    dtype: DataType = DataType.DT_FLOAT

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.dims))
        for i, d in enumerate(self.dims):
            if not isinstance(d, ParallelDim):
                raise ShapeError(f"dimension {i} must be a ParallelDim, got {d!r}")
            if d.size % d.degree:
                valid = ", ".join(map(str, divisors(d.size)))
                raise ShapeError(
                    f"degree {d.degree} does not divide dimension {i} of size {d.size} "
                    f"(shape {list(self.sizes)}); valid degrees: {valid}")
        for name in ("sum_degree", "discard_copy_degree"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ShapeError(f"{name} must be an int >= 1, got {v!r}")
        if not isinstance(self.dtype, DataType):
            raise ShapeError(f"dtype must be a DataType, got {self.dtype!r}")

    @classmethod
    def of(cls, sizes, degrees=None, sum_degree: int = 1, discard_copy_degree: int = 1,
           dtype: DataType = DataType.DT_FLOAT) -> "ParallelTensorShape":
        sizes = tuple(sizes)
        degrees = (1,) * len(sizes) if degrees is None else tuple(degrees)
        if len(degrees) != len(sizes):
            raise ShapeError(f"{len(degrees)} degrees given for a tensor of rank {len(sizes)} ({list(sizes)})")
        return cls(tuple(ParallelDim(s, d) for s, d in zip(sizes, degrees)), sum_degree, discard_copy_degree, dtype)

    @classmethod
    def from_tensor_shape(cls, shape: TensorShape) -> "ParallelTensorShape":
        """The unpartitioned parallel shape (all degrees 1)."""
        return cls.of(shape.dims, dtype=shape.dtype)

    def with_degrees(self, degrees: ParallelDegrees) -> "ParallelTensorShape":
        if len(degrees.shard) != self.rank:
            raise ShapeError(f"{len(degrees.shard)} shard degrees for a tensor of rank {self.rank}")
        return ParallelTensorShape.of(self.sizes, degrees.shard, degrees.sum, degrees.copy, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.dims)

    @property
    def shard_degrees(self) -> tuple[int, ...]:
        return tuple(d.degree for d in self.dims)

    @property
    def degrees(self) -> ParallelDegrees:
        return ParallelDegrees(self.shard_degrees, self.sum_degree, self.discard_copy_degree)

    @property
    def total_degree(self) -> int:
        """Number of pieces: product of the shard degrees, the sum degree and the copy degree."""
        return math.prod(self.shard_degrees) * self.sum_degree * self.discard_copy_degree

    @property
    def tensor_shape(self) -> TensorShape:
        """The full (unpartitioned) logical shape."""
        return TensorShape(self.sizes, self.dtype)

    @property
    def piece_shape(self) -> TensorShape:
        """The shape of one piece."""
        return TensorShape(tuple(d.piece_size for d in self.dims), self.dtype)

    @property
    def is_unpartitioned(self) -> bool:
        return self.total_degree == 1

    def __str__(self) -> str:
        dims = ", ".join(f"{d.size}/{d.degree}" if d.degree > 1 else str(d.size) for d in self.dims)
        extra = "".join(
            f" {tag}{v}" for tag, v in (("s", self.sum_degree), ("c", self.discard_copy_degree)) if v > 1)
        return f"[{dims}]{extra} {self.dtype.short}"
