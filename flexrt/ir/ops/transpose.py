"""``Transpose``: permute dimensions by ``perm``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class TransposeAttrs:
    op_type: ClassVar[OpType] = OpType.TRANSPOSE
    perm: tuple[int, ...]
