"""``Dropout`` with ``rate`` and a ``seed`` (deterministic masks per seed and piece)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class DropoutAttrs:
    op_type: ClassVar[OpType] = OpType.DROPOUT
    rate: float
    seed: int = 0
