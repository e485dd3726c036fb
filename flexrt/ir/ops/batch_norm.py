"""``BatchNorm``: normalizes NCHW (or [N, C]) over every dimension but channel 1; weights scale, bias [C]."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class BatchNormAttrs:
    op_type: ClassVar[OpType] = OpType.BATCH_NORM
    relu: bool = True
    eps: float = 1e-5
    momentum: float = 0.1
