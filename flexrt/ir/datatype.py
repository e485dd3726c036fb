"""Element data types, with FlexFlow's names (``DataType.DT_FLOAT``)."""

from __future__ import annotations

import enum


class DataType(enum.Enum):
    """Element type of a tensor. Values are FlexFlow's enum values."""

    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is slow

    DT_BOOLEAN = 40
    DT_INT32 = 41
    DT_INT64 = 42
    DT_HALF = 43
    DT_FLOAT = 44
    DT_DOUBLE = 45
    DT_BFLOAT16 = 46
    DT_NONE = 49

    @property
    def size_bytes(self) -> int:
        return _SIZE_BYTES[self]

    @property
    def numpy_name(self) -> str:
        """The NumPy dtype name (kernels turn it into a dtype; the IR does not import NumPy)."""
        return _NUMPY_NAME[self]

    @property
    def is_floating(self) -> bool:
        return self in (DataType.DT_HALF, DataType.DT_FLOAT, DataType.DT_DOUBLE, DataType.DT_BFLOAT16)

    @property
    def short(self) -> str:
        return _SHORT[self]


_SIZE_BYTES = {
    DataType.DT_BOOLEAN: 1, DataType.DT_INT32: 4, DataType.DT_INT64: 8, DataType.DT_HALF: 2,
    DataType.DT_FLOAT: 4, DataType.DT_DOUBLE: 8, DataType.DT_BFLOAT16: 2, DataType.DT_NONE: 0,
}
_NUMPY_NAME = {
    DataType.DT_BOOLEAN: "bool", DataType.DT_INT32: "int32", DataType.DT_INT64: "int64",
    DataType.DT_HALF: "float16", DataType.DT_FLOAT: "float32", DataType.DT_DOUBLE: "float64",
    DataType.DT_BFLOAT16: "float32", DataType.DT_NONE: "void",
}
_SHORT = {
    DataType.DT_BOOLEAN: "b1", DataType.DT_INT32: "i32", DataType.DT_INT64: "i64",
    DataType.DT_HALF: "f16", DataType.DT_FLOAT: "f32", DataType.DT_DOUBLE: "f64",
    DataType.DT_BFLOAT16: "bf16", DataType.DT_NONE: "none",
}
