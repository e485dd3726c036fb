"""``reduce_sum`` and ``mean`` over ``axes``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class ReduceAttrs:
    op_type: OpType
    axes: tuple[int, ...]
    keepdims: bool = False
