"""bfloat16 values held in float32 arrays: what the runtime computes bfloat16 with.

NumPy has no bfloat16 (ml_dtypes' type breaks ``einsum`` and its ``matmul`` returns float32), and a
bfloat16 tensor-core kernel reads bfloat16, accumulates in float32 and rounds its result to
bfloat16. So a bfloat16 tensor is a float32 array whose every value is a bfloat16 number:
``to_bfloat16`` rounds a float32 array to the nearest one (ties to even, as a conversion on the
device does: the upper 16 bits of the float32 pattern, rounded), keeping infinities and NaNs. The
runtime rounds every kernel's outputs and gradients of a bfloat16 model and sums partial results in
float32, as Megatron-LM's ``--bf16`` keeps float32 gradient buffers and masters.

Entry points: ``to_bfloat16``, ``bfloat16_if``, ``is_bfloat16_valued``.

Example:
    >>> import numpy as np
    >>> to_bfloat16(np, np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8], np.float32)).tolist()
    [1.0, 1.0, 1.015625]
"""

from __future__ import annotations

_ROUND = 0x7FFF


def to_bfloat16(xp, a):
    """``a`` (any floating array) as float32 holding the nearest bfloat16 values (a new array)."""
    x = xp.array(a, dtype=xp.float32, order="C", copy=True)
    bits = x.view(xp.uint32)
    finite = xp.isfinite(x)
    # round to nearest even on the upper 16 bits; a carry into the exponent is the right result
    # (rounding up to the next binade, or to infinity past the largest bfloat16)
    rounded = (bits + xp.uint32(_ROUND) + ((bits >> xp.uint32(16)) & xp.uint32(1))) & xp.uint32(0xFFFF0000)
    bits[...] = xp.where(finite, rounded, bits & xp.uint32(0xFFFF0000) | ((bits & xp.uint32(0xFFFF)) != 0)
                         .astype(xp.uint32) << xp.uint32(16))
    return x


def bfloat16_if(enabled, xp, a):
    """``to_bfloat16(xp, a)`` where ``enabled`` (a bfloat16 model) and ``a`` is floating, else ``a``:
    what the runtime and its reference apply to every value they produce."""
    return to_bfloat16(xp, a) if enabled and a.dtype.kind == "f" else a


def is_bfloat16_valued(xp, a) -> bool:
    """Whether every value of the float32 array ``a`` is a bfloat16 number."""
    return bool(((xp.ascontiguousarray(a, dtype=xp.float32).view(xp.uint32) & xp.uint32(0xFFFF)) == 0).all())
