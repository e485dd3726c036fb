"""Registry of forward kernels, keyed by ``OpType``; registering one op twice is an error."""

from __future__ import annotations

from typing import Callable, Sequence

from flexrt.errors import GraphError
from flexrt.ir.op_type import OpType

ForwardFn = Callable[..., tuple]
BackwardFn = Callable[..., tuple]
_FORWARD: dict[OpType, ForwardFn] = {}
_BACKWARD: dict[OpType, BackwardFn] = {}


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


def register_backward(*op_types: OpType):
    """Decorator: ``@register_backward(OpType.RELU)`` on
    ``fn(xp, attrs, operands, outputs, grad_outputs) -> tuple`` returning one gradient per operand
    (data inputs, then weights), None for an operand with no gradient (integer indices)."""
    def deco(fn: BackwardFn) -> BackwardFn:
        for t in op_types:
            if t in _BACKWARD:
                raise GraphError(f"a backward kernel for {t.name} is already registered")
            _BACKWARD[t] = fn
        return fn
    return deco


def backward_kernel(op_type: OpType) -> BackwardFn:
    import flexrt.kernels.ops  # noqa: F401  (registers every kernel)
    try:
        return _BACKWARD[op_type]
    except KeyError:
        raise GraphError(f"no backward kernel for {op_type.name}") from None


def run_backward(xp, attrs, operands: Sequence, outputs: Sequence, grad_outputs: Sequence) -> tuple:
    """Gradients of every operand given the forward's operands and outputs and the outputs' gradients."""
    grads = tuple(backward_kernel(attrs.op_type)(xp, attrs, list(operands), list(outputs), list(grad_outputs)))
    if len(grads) != len(operands):
        raise GraphError(f"backward of {attrs.op_type.name} returned {len(grads)} gradients for "
                         f"{len(operands)} operands")
    return grads
