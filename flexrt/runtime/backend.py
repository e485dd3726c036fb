"""Array backends of the runtime: where a device's memory is and how data moves between devices.

The NumPy backend is the reference: every device owns its own arrays (a copy between devices is a
real copy into memory the destination owns), and each device runs its tasks on its own worker in
the threaded executor. The CuPy backend (``flexrt.runtime._cupy``, the only module that imports
CuPy) maps devices onto GPUs, or onto streams of one GPU where there are fewer GPUs than devices.

Entry points: ``NumpyBackend``, ``get_backend``, ``available_host_bytes``.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import numpy as np

from flexrt.errors import ConfigError

BACKENDS = ("numpy", "cupy")


def available_host_bytes() -> int | None:
    """The host memory a new allocation can take now (Linux's MemAvailable; elsewhere the free
    physical pages), or None when the system does not say: what the NumPy backend's devices share."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class NumpyBackend:
    """Devices are NumPy arrays in this process; host memory is device -1."""

    name = "numpy"
    xp = np

    def __init__(self, num_devices: int) -> None:
        self.num_devices = num_devices

    def on(self, device: int):
        """Context in which ``device``'s kernels run (nothing to switch on the host)."""
        return nullcontext()

    def full(self, shape, dtype, fill: float, device: int):
        if fill == 0.0:
            return np.zeros(shape, dtype=dtype)
        return np.full(shape, fill, dtype=dtype)

    def put(self, dst, src, add: bool) -> None:
        """Write (or add) ``src`` into the view ``dst``; both live on one device, or ``src`` on the host."""
        if add:
            dst += src
        else:
            dst[...] = src

    def copy_to(self, src, device: int, src_device=None):
        """A copy of ``src`` in ``device``'s memory (a transfer between devices). ``src_device``, the
        logical device ``src`` lives on, lets the CuPy backend order the copy after that device's
        work only (without it, after every device on the source's GPU); NumPy needs no ordering."""
        return np.array(src, copy=True)

    def upload(self, host, device: int):
        return np.array(host, copy=True)

    def to_host(self, arr) -> np.ndarray:
        return np.asarray(arr)

    def synchronize(self) -> None:
        pass


def get_backend(name: str, num_devices: int):
    if name == "numpy":
        return NumpyBackend(num_devices)
    if name == "cupy":
        from flexrt.runtime._cupy import CupyBackend  # the only place CuPy is imported
        return CupyBackend(num_devices)
    raise ConfigError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)}")
