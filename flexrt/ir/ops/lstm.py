"""``LSTM`` cell, one unrolled step: (x [N, in], h [N, H], c [N, H]) -> (h', c'); weights
w_ih [in, 4H], w_hh [H, 4H], bias [4H] (gates i, f, g, o). Unrolled steps share the weight nodes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from flexrt.ir.op_type import OpType



@dataclass(frozen=True, slots=True)
class LSTMAttrs:
    op_type: ClassVar[OpType] = OpType.LSTM
    hidden_size: int
