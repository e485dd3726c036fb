"""flexrt: find fast parallelization strategies for DNN training and run them.

Layers (each imports only those to its left): ``flexrt.ir`` -> ``flexrt.machine`` ->
``flexrt.kernels`` -> ``flexrt.simulator`` -> ``flexrt.search``; ``flexrt.runtime``;
``flexrt.model`` and ``flexrt.cli`` on top. See README.md.

Started by an MPI launcher with several ranks on one host, each rank would otherwise start a BLAS
thread per core and the ranks would fight over the cores (10-30x slower GEMMs); unless the user set
them, the BLAS/OpenMP thread counts become the host's cores divided by the ranks on it. This runs
when flexrt is imported; where NumPy was imported first, ``flexrt.runtime.mpi.world`` applies the
same limit through threadpoolctl.
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

__version__ = "0.1.0"
