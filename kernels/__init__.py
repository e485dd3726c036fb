"""``flexrt.kernels``: how each operator is computed.

Every kernel has one signature, ``forward(xp, attrs, operands) -> tuple of arrays``, where ``xp``
is the array module (``numpy``, or ``cupy`` on a GPU) and ``operands`` are the data inputs followed
by the weights, so one implementation serves both backends. Nothing outside the CuPy backend imports
CuPy. Backward kernels have the signature ``backward(xp, attrs, operands, outputs, grad_outputs)``
and are checked by finite differences (``flexrt.kernels.gradcheck``).

Entry points: ``forward_kernel(op_type)``, ``run_forward``, and ``flexrt.kernels.pieces`` (runs an
operator piece by piece under a partitioning and reassembles the result).
"""

from flexrt.kernels.registry import (backward_kernel, forward_kernel, register_backward, register_forward,  # noqa: F401
                                     run_backward, run_forward)
