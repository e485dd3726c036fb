"""``Reshape`` to ``shape`` (same number of elements; one entry may be -1)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class ReshapeAttrs:
    op_type: ClassVar[OpType] = OpType.RESHAPE
    shape: tuple[int, ...]
