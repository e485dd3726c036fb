"""``flexrt calibrate [--devices N] [--quick] [--output FILE] [--json]``: measure this host with NumPy,
print the numbers and write the calibrated ``local`` machine (default
``flexrt.machine.calibrated_local_path()``, which ``load_machine("local")`` then uses).

Without ``--devices`` (and outside mpiexec) the host is calibrated as one process per core, one
device each: the command starts ``mpiexec -n CORES flexrt calibrate --devices 1`` itself where mpiexec
and mpi4py are installed (the machine file then has one node per process; ``flexrt train --machine
local`` starts them), else this process calibrates one worker per core. ``--devices N``: one process
of N workers.

Under ``mpiexec -n R`` it also times MPI messages and ``MPI.Allreduce`` between the ranks: over all R
(the links between ranks) and per device group g = 2..R (the first g ranks, one device each), whose
fits T_g = C_g x + D_g (DisCo) go into the machine file's ``collectives`` section for
``--comm-cost measured``."""

from __future__ import annotations

import dataclasses
import os

from flexrt.cli._common import add_json_flag, emit_json
from flexrt.errors import MachineSpecError
from flexrt.machine import calibrated_local_path
from flexrt.machine.limits import MAX_DEVICES_PER_NODE
from flexrt.runtime import mpi
from flexrt.runtime.calibrate import (calibrate, check_devices, check_output_path, fit_linear, mpi_allreduce,
                                      mpi_allreduce_groups, mpi_point_to_point, write_machine_yaml)
from flexrt.runtime.mpi import comm_wait

NAME = "calibrate"
HELP = ("measure this host (FLOP/s, memory and copy bandwidth, launch overhead) and write the `local` machine; "
        "under `mpiexec -n R` also MPI messages and AllReduce per device group 2..R (DisCo's T = C x + D, for "
        "--comm-cost measured)")
ACCEPTS_MODEL_FLAGS = False


def add_arguments(parser) -> None:
    parser.add_argument("--devices", type=int, metavar="N",
                        help=f"workers per process (1..{MAX_DEVICES_PER_NODE}); without it the host is calibrated as "
                             f"one process per core, one device each, started with mpiexec (where mpiexec and mpi4py "
                             f"are installed; else one process of one worker per core)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (rough, ~1 s; under "
                        "mpiexec 4 AllReduce sizes, 8 B..4 MB, 3 repeats per group)")
    parser.add_argument("--output", metavar="FILE",
                        help=f"machine YAML to write (default {calibrated_local_path()}, "
                             f"which `--machine local` then uses)")
    add_json_flag(parser)


def _rate(x: float, unit: str) -> str:
    return f"{x / 1e9:10.2f} G{unit}"


def _as_processes(args, output) -> bool:
    """Without ``--devices``, outside mpiexec: calibrate the host as one process per core (the ``local``
    machine whose devices truly run in parallel) by starting ``mpiexec -n cores flexrt calibrate
    --devices 1``. False where that cannot be (one core, or no mpiexec / mpi4py): then this process
    calibrates one worker per core itself."""
    import importlib.util
    cores = os.cpu_count() or 1
    if cores < 2 or mpi.find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None:
        return False
    flags = ["--devices", "1", "--output", str(output)] + (["--quick"] if args.quick else []) + \
        (["--json"] if args.json else [])
    if not args.json:
        print(f"calibrating this host as {cores} processes of one device each: mpiexec -n {cores} flexrt calibrate "
              f"{' '.join(flags)} (give --devices N for one process of N workers)", flush=True)
    mpi.launch(cores, mpi.flexrt_command() + ["calibrate"] + flags, echo=True)
    return True


def run(args, extra) -> int:
    # every flag is checked before anything is measured
    try:
        if args.devices is not None:
            check_devices(args.devices, "--devices")
    except MachineSpecError as e:
        args._parser.error(str(e))
    output = check_output_path(args.output or calibrated_local_path(),
                               "--output" if args.output else "the calibrated machine's path (FLEXRT_CACHE_DIR)",
                               parents=not args.output)
    if args.devices is None:
        if not mpi.launched_by_mpi() and _as_processes(args, output):
            return 0
        args.devices = 1 if mpi.launched_by_mpi() else (os.cpu_count() or 1)
    comm = mpi.world()
    if comm is None:
        result = calibrate(args.devices, quick=args.quick)
    else:  # rank 0 measures the host alone, then ranks 0 and 1 time MPI messages; rank 0 writes
        if comm.Get_rank() == 0:
            result = calibrate(args.devices, quick=args.quick)
        comm_wait(comm)  # the other ranks sleep meanwhile (a busy barrier would steal the cores measured)
        bandwidth, latency = mpi_point_to_point(comm, quick=args.quick)
        allreduce = mpi_allreduce(comm, quick=args.quick)
        groups = mpi_allreduce_groups(comm, quick=args.quick, world=allreduce)  # g = 2..R; R reuses the above
        if comm.Get_rank() != 0:
            return 0
        result = dataclasses.replace(result, mpi_bandwidth=bandwidth, mpi_latency_s=latency,
                                     ranks=int(os.environ.get("MPI_LOCALNRANKS") or comm.Get_size()),
                                     allreduce=allreduce, allreduce_ranks=comm.Get_size(), allreduce_groups=groups)
    path = write_machine_yaml(result, output, args.devices)  # loads the text first: a bad file is never written
    if args.json:
        emit_json({"machine_file": str(path), "devices": args.devices, "host": result.to_json()})
        return 0
    rows = [(f"peak {name}", _rate(f, "FLOP/s")) for name, f in result.peak_flops if name in ("float32", "float64")]
    rows += [("memory bandwidth", _rate(result.memory_bandwidth, "B/s")),
             ("launch overhead", f"{result.launch_overhead_s * 1e6:10.2f} us"),
             ("copy bandwidth", _rate(result.copy_bandwidth, "B/s")),
             ("copy latency", f"{result.copy_latency_s * 1e6:10.2f} us")]
    if result.mpi_bandwidth:
        rows += [("MPI bandwidth", _rate(result.mpi_bandwidth, "B/s")),
                 ("MPI latency", f"{result.mpi_latency_s * 1e6:10.2f} us")]
    if len(result.allreduce) >= 2:
        c, d, r2 = fit_linear(*zip(*result.allreduce))
        rows += [(f"AllReduce fit ({result.allreduce_ranks} ranks)",
                  f"T = {c * 1e9:.4g} ns/B x + {d * 1e6:.4g} us (r2 {r2:.4f}, {len(result.allreduce)} sizes)")]
    for f in result.group_fits():
        rows += [(f"AllReduce {f.devices} devices, {f.nodes} node{'s' if f.nodes > 1 else ''}",
                  f"T = {f.c_s_per_byte * 1e9:.4g} ns/B x + {f.d_s * 1e6:.4g} us (r2 {f.r2:.4f}, max error "
                  f"{f.max_rel_error:.1%}, median {f.median_rel_error:.1%}, {f.sizes} sizes)")]
    rows += [(f"{t.op_class}", f"{_rate(t.rate, t.unit)}  {t.shape}") for t in result.throughput]
    width = max(len(name) for name, _ in rows)
    print(f"host ({result.cpu_count} CPUs{', quick' if result.quick else ''}; {result.elapsed_s:.1f} s):")
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    what = "the host's" if result.ranks == 1 else f"this rank's share ({result.ranks} ranks on the host)"
    print(f"wrote {path} ({args.devices} devices per rank, each 1/{args.devices} of {what} FLOP/s and memory "
          f"bandwidth)")
    return 0
