"""Finite-difference checks of backward kernels (float64).

For an operator on given operands, ``check_gradients`` draws a random projection ``w`` of its
outputs, takes L = sum(w * forward(operands)), and compares the backward kernel's gradient of every
floating operand with central differences of L, element by element (every element for small
operands, a random sample of them for larger ones).

Entry point: ``check_gradients``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from flexrt.kernels.registry import run_backward, run_forward


def check_gradients(attrs, operands: Sequence[np.ndarray], rng: np.random.Generator, eps: float = 1e-6,
                    rtol: float = 1e-5, atol: float = 1e-7, max_elements: int = 64,
                    skip: Optional[Sequence[int]] = None) -> int:
    """Assert that the backward kernel of ``attrs`` matches central differences; returns how many
    elements were checked. Integer operands (indices) are skipped, as are those listed in ``skip``."""
    operands = [np.array(a, dtype=a.dtype, copy=True) for a in operands]
    outputs = run_forward(np, attrs, operands)
    weights = [rng.standard_normal(o.shape) for o in outputs]
    grads = run_backward(np, attrs, operands, outputs, weights)

    def loss() -> float:
        return float(sum(np.sum(w * o) for w, o in zip(weights, run_forward(np, attrs, operands))))

    checked = 0
    for i, (a, g) in enumerate(zip(operands, grads)):
        if a.dtype.kind != "f" or (skip and i in skip):
            continue
        if g is None:
            raise AssertionError(f"{attrs.op_type.value}: backward gave no gradient for floating operand {i}")
        if g.shape != a.shape:
            raise AssertionError(f"{attrs.op_type.value}: gradient of operand {i} has shape {g.shape}, "
                                 f"operand {a.shape}")
        flat = a.reshape(-1)
        idx = np.arange(flat.size) if flat.size <= max_elements else rng.choice(flat.size, max_elements, False)
        for j in idx:
            old = flat[j]
            flat[j] = old + eps
            up = loss()
            flat[j] = old - eps
            down = loss()
            flat[j] = old
            numeric = (up - down) / (2 * eps)
            analytic = float(g.reshape(-1)[j])
            if not abs(numeric - analytic) <= atol + rtol * max(abs(numeric), abs(analytic)):
                raise AssertionError(f"{attrs.op_type.value} {attrs}: d/d operand {i}[{np.unravel_index(j, a.shape)}]"
                                     f" analytic {analytic!r} vs numeric {numeric!r}")
            checked += 1
    return checked
