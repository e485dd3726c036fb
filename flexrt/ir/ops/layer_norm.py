"""``LayerNorm``: normalizes over ``axes``; with ``elementwise_affine`` weights gamma, beta of those dims."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class LayerNormAttrs:
    op_type: ClassVar[OpType] = OpType.LAYER_NORM
    axes: tuple[int, ...]
    elementwise_affine: bool = True
    eps: float = 1e-5
