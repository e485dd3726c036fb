"""Markers that say what a test needs (declared in pyproject.toml): a test marked ``gpu`` skips
where there is no CUDA GPU with CuPy, one marked ``mpi`` where ``mpiexec`` or mpi4py is missing;
the skip says which. ``slow`` tests are deselected by default (pyproject.toml's ``addopts``:
``-m 'not slow'``; ``-m slow`` runs them).

Every test sees ``FLEXRT_CACHE_DIR`` set to a fresh folder of the session, so the user's cache (the
profile cache, the calibrated ``local`` machine of ``flexrt calibrate``) neither leaks in nor is
written to.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest
from hypothesis import settings

# Timing is for benchmarks, not tests: no per-example deadline (a loaded CI machine made them flaky).
# Under .ci/run (FLEXRT_CI set) the examples are derandomized: the same ones every run, so a landing
# never hangs on a rare example a run happened to draw (a rounding bound found so, once); a plain
# `make test` draws new ones each run, to keep finding them.
settings.register_profile("flexrt", deadline=None)
settings.register_profile("flexrt-ci", deadline=None, derandomize=True)
settings.load_profile("flexrt-ci" if os.environ.get("FLEXRT_CI") else "flexrt")


@functools.cache
def gpu_missing() -> str | None:
    """Why no GPU test can run here, or None when one can."""
    if importlib.util.find_spec("cupy") is None:
        return 'needs a CUDA GPU and CuPy; CuPy is not installed (pip install -e ".[gpu]")'
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy raises its own CUDA errors when there is no driver
        return f"needs a CUDA GPU; CuPy cannot reach one ({type(e).__name__}: {e})"
    return None if count > 0 else "needs a CUDA GPU; CuPy sees none"


@functools.cache
def mpi_missing() -> str | None:
    """Why no MPI test can run here, or None when one can."""
    from flexrt.runtime.mpi import find_mpiexec
    if find_mpiexec() is None:
        return 'needs mpiexec, which is neither next to this Python nor on PATH (pip install -e ".[mpi]" brings MPICH)'
    if importlib.util.find_spec("mpi4py") is None:
        return 'needs mpi4py, which is not installed (pip install -e ".[mpi]")'
    return None


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    saved = os.environ.get("FLEXRT_CACHE_DIR")
    os.environ["FLEXRT_CACHE_DIR"] = str(tmp_path_factory.mktemp("flexrt-cache"))
    yield
    if saved is None:
        os.environ.pop("FLEXRT_CACHE_DIR", None)
    else:
        os.environ["FLEXRT_CACHE_DIR"] = saved


MISSING = {"gpu": gpu_missing, "mpi": mpi_missing}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for name, missing in MISSING.items():
        if item.get_closest_marker(name) is not None:
            reason = missing()
            if reason is not None:
                pytest.skip(reason)
