"""The CuPy side of profiling: the only simulator module that imports CuPy, and only inside functions
(the GPU is optional; tests/test_layers.py keeps CuPy imports in modules named ``*cupy*``).

Entry points: ``unavailable_reason`` and ``load``.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional


@functools.cache
def unavailable_reason() -> Optional[str]:
    """Why CuPy cannot profile here (not installed, no driver, no GPU), or None when it can."""
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e}); pip install -e '.[gpu]'"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy raises its own CUDA errors when there is no driver
        return f"CuPy cannot reach a GPU ({type(e).__name__}: {e})"
    return None if count > 0 else "CuPy sees no GPU"


def load() -> tuple[object, Callable[[], None], str]:
    """(the ``cupy`` module, a function that waits for the current device, the GPU's name).

    Raises:
        RuntimeError: when ``unavailable_reason()`` is not None.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot profile with CuPy: {reason}")
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return cupy, cupy.cuda.runtime.deviceSynchronize, name
