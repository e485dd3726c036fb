"""CuPy's side of the fused element-wise chains (``kernels/fused.py``): one ``cupy.ElementwiseKernel``
per chain, compiled once. The only kernels module that imports CuPy; reached only with CuPy arrays.

Entry point: ``elementwise_kernel``.
"""

from __future__ import annotations

from flexrt.errors import GraphError

_KERNELS: dict = {}


def elementwise_kernel(chain, ins: str, out: str, body: str):
    """The cached ``cupy.ElementwiseKernel(ins, out, body)`` of ``chain``."""
    kernel = _KERNELS.get(chain)
    if kernel is None:
        try:
            import cupy
        except ImportError as e:  # only reached with CuPy arrays, so CuPy is there
            raise GraphError("the CuPy fused kernel needs CuPy; install cupy or use the numpy backend") from e
        kernel = _KERNELS[chain] = cupy.ElementwiseKernel(ins, out, body, f"flexrt_fused_chain_{len(_KERNELS)}")
    return kernel
