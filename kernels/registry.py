"""Registry of forward kernels, keyed by ``OpType``; registering one op twice is an error."""

from __future__ import annotations

from typing import Callable, Sequence

from flexrt.errors import GraphError
from flexrt.ir.op_type import OpType

ForwardFn = Callable[..., tuple]
_FORWARD: dict[OpType, ForwardFn] = {}


def register_forward(*op_types: OpType):
    """Decorator: ``@register_forward(OpType.RELU, OpType.TANH)`` on ``fn(xp, attrs, operands)``."""
    def deco(fn: ForwardFn) -> ForwardFn:
        for t in op_types:
            if t in _FORWARD:
                raise GraphError(f"a forward kernel for {t.name} is already registered")
            _FORWARD[t] = fn
        return fn
    return deco


def forward_kernel(op_type: OpType) -> ForwardFn:
    import flexrt.kernels.ops  # noqa: F401  (registers every kernel)
    try:
        return _FORWARD[op_type]
    except KeyError:
        raise GraphError(f"no forward kernel for {op_type.name}") from None


def run_forward(xp, attrs, operands: Sequence) -> tuple:
    """Compute ``attrs``'s operator on full operands (data inputs, then weights)."""
    out = forward_kernel(attrs.op_type)(xp, attrs, list(operands))
    return tuple(out)
