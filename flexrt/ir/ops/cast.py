"""``Cast`` to another element type."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType

from flexrt.ir.datatype import DataType


@dataclass(frozen=True, slots=True)
class CastAttrs:
    op_type: ClassVar[OpType] = OpType.CAST
    dtype: DataType
