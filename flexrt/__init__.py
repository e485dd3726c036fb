"""flexrt: find fast parallelization strategies for DNN training and run them.

Layers (each imports only those to its left): ``flexrt.ir`` -> ``flexrt.machine`` ->
``flexrt.kernels`` -> ``flexrt.simulator`` -> ``flexrt.search``; ``flexrt.runtime``;
``flexrt.model`` and ``flexrt.cli`` on top. See README.md.

Started by an MPI launcher with several ranks on one host, each rank would otherwise start a BLAS
thread per core and the ranks would fight over the cores (10-30x slower GEMMs); unless the user set
them, the BLAS/OpenMP thread counts become the host's cores divided by the ranks on it. This runs
when flexrt is imported; where NumPy was imported first, ``flexrt.runtime.mpi.world`` applies the
same limit through threadpoolctl.

NumPy's operators allocate their results and temporaries afresh on every call. With glibc's
default policy, blocks above a moving threshold are mapped from the kernel and unmapped when
freed, and freed heap tops are returned, so the next call faults every page in again: measured on
this project's 2-core host, one 3x3 convolution of 8x3x32x32 took 2,170 us instead of 405 us, and
which of the two a process got depended on its allocation history (the simulator's profiled costs
and the runtime's tasks disagreed by 2-5x for the same kernel). When flexrt is imported, glibc
keeps blocks up to 32 MiB in the heap and keeps up to 256 MiB of freed heap (``mallopt``), as
training frameworks' caching allocators do; ``FLEXRT_MALLOC=default`` leaves glibc's policy alone.
"""

import os as _os


def local_rank_threads() -> int:
    """The host's cores divided by the MPI ranks on it (0 when not several local ranks)."""
    local = _os.environ.get("MPI_LOCALNRANKS") or _os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    if not local or not local.isdigit() or int(local) < 2:
        return 0
    return max(1, (_os.cpu_count() or 1) // int(local))


def _share_cores_among_local_ranks() -> None:
    threads = local_rank_threads()
    if threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            _os.environ.setdefault(var, str(threads))


_share_cores_among_local_ranks()

MMAP_THRESHOLD = 32 << 20     # glibc's largest; blocks up to it come from the heap
TRIM_THRESHOLD = 256 << 20    # freed heap kept for reuse


def _keep_freed_memory() -> bool:
    """glibc's ``mallopt``: heap blocks up to ``MMAP_THRESHOLD``, freed heap kept up to
    ``TRIM_THRESHOLD``. True when set; False off glibc or with ``FLEXRT_MALLOC=default``."""
    if _os.environ.get("FLEXRT_MALLOC", "") == "default":
        return False
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False  # not glibc (macOS, musl without mallopt): its own policy stays
    m_trim_threshold, m_mmap_threshold = -1, -3          # glibc's malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(mallopt(m_trim_threshold, TRIM_THRESHOLD))


MALLOC_TUNED = _keep_freed_memory()

__version__ = "0.1.0"
