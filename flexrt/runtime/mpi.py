"""Running as one of several MPI ranks: detection, device ownership, failure handling.

flexrt runs SPMD (DESIGN.md): every rank builds the same strategy, lowers the same task graph
deterministically and executes the tasks of the devices it owns. This module is the only one that
imports mpi4py, and only when the process was started by an MPI launcher (``mpiexec``/``srun`` set
``PMI_*``, ``PMIX_*`` or ``OMPI_COMM_WORLD_*`` variables), so a plain ``pip install flexrt`` needs
no MPI.

Ownership: with ``R`` ranks on a machine of ``N`` nodes x ``G`` devices, rank ``r`` owns the
contiguous devices ``r*k .. (r+1)*k - 1`` with ``k = N*G / R``; ``R`` must divide the devices and
a rank's devices must lie in one node (``G % k == 0``) or cover whole nodes (``k % G == 0``).
The usual layouts: one rank per node (``R = N``) or one rank per device (``R = N*G``).

Failure: once MPI is up, an uncaught exception on any rank prints ``flexrt rank r/R: ...`` and
calls ``MPI_Abort``, which ends every rank with a non-zero exit instead of leaving the others
waiting for messages that will never come.

Entry points: ``world``, ``launched_by_mpi``, ``RankLayout``, ``rank_layout``.
"""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from dataclasses import dataclass
from typing import Optional

from flexrt.errors import ConfigError, MachineSpecError
from flexrt.machine import Machine

_LAUNCHER_VARS = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
_WORLD = None


def find_mpiexec() -> Optional[str]:
    """``mpiexec`` next to this Python (the ``mpich`` wheel puts it in the virtual environment), else
    on ``PATH``; None when there is none."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def flexrt_command() -> list[str]:
    """How to start the ``flexrt`` command with this Python (the console script next to it, else
    ``python -m flexrt.cli``)."""
    here = os.path.join(os.path.dirname(sys.executable), "flexrt")
    return [here] if os.path.isfile(here) else [sys.executable, "-m", "flexrt.cli"]


def launch(ranks: int, cmd: list[str], env: Optional[dict] = None, timeout_s: float = 3600.0,
           echo: bool = True) -> str:
    """Run ``cmd`` as ``ranks`` MPI processes on this host (``mpiexec -n ranks``; one rank: a plain
    process), one BLAS thread per rank unless ``env`` sets them, each rank pinned to a core (where
    the OS allows), the launcher variables of an enclosing MPI job removed. Returns its output (echoed line by line when ``echo``); a
    ``ConfigError`` when there is no ``mpiexec``, the command fails or runs past ``timeout_s``."""
    import subprocess
    import threading
    env = dict(os.environ if env is None else env)
    for v in _LAUNCHER_VARS:
        env.pop(v, None)
    for v in BLAS_VARS:
        env.setdefault(v, "1")
    env.setdefault(PIN_VAR, "1")     # each rank on its own core (``world`` pins it)
    if ranks > 1:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            raise ConfigError(f"running {ranks} processes needs mpiexec; install MPI with pip install -e \".[mpi]\" "
                              f"(mpi4py and the mpich wheel)")
        cmd = [mpiexec, "-n", str(ranks)] + list(cmd)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.daemon = True      # flexrt's own: never mistaken for a thread a model script left running
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.kill()
        raise
    finally:
        timer.cancel()
        timer.join()
    if rc != 0:
        tail = "".join(lines[-20:]).strip()
        raise ConfigError(f"{' '.join(cmd)} failed (exit {rc}{', killed after ' + str(timeout_s) + ' s' if rc < 0 else ''})"
                          + (f": {tail.splitlines()[-1]}" if tail else ""))
    return "".join(lines)


PIN_VAR = "FLEXRT_PIN_CORES"   # set by ``launch``: each rank pins itself to a core when MPI starts


def pin_to_core(rank: int) -> Optional[int]:
    """Pin this process to core ``rank`` mod the cores it may use, where the OS allows (Linux);
    returns the core, or None where it cannot."""
    try:
        cores = sorted(os.sched_getaffinity(0))
        core = cores[rank % len(cores)]
        os.sched_setaffinity(0, {core})
        return core
    except (AttributeError, OSError):
        return None


def launched_by_mpi() -> bool:
    return any(v in os.environ for v in _LAUNCHER_VARS)


def _abort_hook(comm):
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        else:
            text = "".join(traceback.format_exception_only(kind, value)).strip()
            sys.stderr.write(f"flexrt rank {comm.Get_rank()}/{comm.Get_size()}: {text}\n")
            if os.environ.get("FLEXRT_TRACEBACK"):
                traceback.print_tb(tb)
            sys.stderr.flush()
        comm.Abort(1)
    return hook


def world():
    """``MPI.COMM_WORLD`` when launched by MPI with more than one rank, else None (mpi4py not imported)."""
    global _WORLD
    if _WORLD is not None or not launched_by_mpi():
        return _WORLD
    try:
        from mpi4py import MPI
    except ImportError:
        raise ConfigError("started by an MPI launcher but mpi4py is not installed; install it with "
                          "pip install -e \".[mpi]\" (mpi4py and the mpich wheel)") from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return None
    sys.excepthook = _abort_hook(comm)
    _limit_blas_threads()
    if os.environ.get(PIN_VAR) == "1":
        pin_to_core(int(os.environ.get("MPI_LOCALRANKID", comm.Get_rank())))
    _WORLD = comm
    return comm


def _limit_blas_threads() -> None:
    """Ranks sharing a host share its cores, also when NumPy was imported before flexrt (then the
    environment variables came too late): threadpoolctl sets the loaded BLAS libraries' limits."""
    from flexrt import local_rank_threads
    threads = local_rank_threads()
    if not threads or any(v in os.environ for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                          if os.environ[v] != str(threads)):
        return  # one rank per host, or the user chose the thread counts
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=threads)


def comm_wait(comm, poll_s: float = 0.01) -> None:
    """A barrier that sleeps while it waits (MPICH's blocking barrier spins on a core)."""
    import time
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


def active_world():
    """The world communicator when MPI is already up with several ranks, else None (starts nothing)."""
    return _WORLD


@dataclass(frozen=True, slots=True)
class RankLayout:
    size: int
    rank: int
    owner: tuple            # device -> rank

    def owns(self, device: int) -> bool:
        return self.owner[device] == self.rank

    def devices(self, rank: Optional[int] = None) -> list[int]:
        r = self.rank if rank is None else rank
        return [d for d, o in enumerate(self.owner) if o == r]


def rank_layout(machine: Machine, size: int, rank: int) -> RankLayout:
    """Which rank owns each device (see the module docstring); a clear error when the world does not
    fit the machine."""
    n, g = machine.num_devices, machine.devices_per_node
    valid = [r for r in range(1, n + 1) if n % r == 0 and (g % (n // r) == 0 or (n // r) % g == 0)]
    if size not in valid:
        raise MachineSpecError(
            f"{size} MPI ranks do not fit machine '{machine.name}' ({machine.num_nodes} node(s) x {g} devices = "
            f"{n} devices): every rank must own the same number of devices, within one node or whole nodes; "
            f"valid world sizes: {', '.join(map(str, valid))} (e.g. one rank per node: mpiexec -n "
            f"{machine.num_nodes}; or describe the cluster with --nodes / the machine YAML)")
    k = n // size
    return RankLayout(size, rank, tuple(d // k for d in range(n)))
