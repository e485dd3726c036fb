"""Measure this host with NumPy and write the calibrated ``local`` machine.

What is measured (each a median of repeats after a warm-up; nothing global is set, so NumPy and its
BLAS run as configured, with all their threads):

- peak FLOP/s per dtype: GEMMs through the ``linear`` kernel, the best median over a few sizes
  (float32, float64 through BLAS; float16 and integers through NumPy's own loops; bfloat16 is the
  float32 number, since flexrt computes bfloat16 in float32 on NumPy),
- memory bandwidth: a large array copy, bytes read + written / time,
- launch overhead: ``relu`` on one element through ``run_forward``,
- copy bandwidth and latency between two workers' buffers, as the runtime copies them
  (``np.copyto`` between preallocated buffers): latency from 8-byte copies, bandwidth from 64 MB,
- throughput per operator class (matmul, conv2d, elementwise, reduction), for information only.

The machine file gives each of ``devices`` workers an equal share of the host: peak FLOP/s, memory
bandwidth and memory divided by ``devices`` (the workers run at once); launch overhead and the
``membus`` link are per worker and not divided. ``efficiency`` is 1.0: the measured GEMM rate *is*
the peak. The ``nic``/``network`` links (between ranks) keep the built-in estimate unless
``flexrt calibrate`` runs under ``mpiexec -n R`` (R >= 2): then rank 0 measures the host while the
others sleep, with the BLAS threads of one rank's share of the cores, then ranks 0 and 1 measure
MPI point-to-point latency and bandwidth (:func:`mpi_point_to_point`).

The file is checked before it is written (it must load as a machine) and written atomically (a
temporary file in the same folder, then ``os.replace``), so a failed run never leaves an unloadable
``local.yaml`` behind; :func:`check_output_path` refuses a path that cannot take it before anything
is measured.

The machine file's ``nic``/``network`` links (between ranks) are those point-to-point messages:
what the runtime sends between ranks, a ring AllReduce spanning ranks included (its members
exchange partial sums as messages). Under ``mpiexec`` the ranks also time ``MPI.Allreduce`` from
8 B to 16 MB over all of them (:func:`mpi_allreduce`) and fit DisCo's collective model T = C x + D
(:func:`fit_linear`, printed).

They also time it per device group (DisCo §4): for every g = 2..R, the first g ranks (a
sub-communicator; the other ranks sleep meanwhile) time ``MPI.Allreduce`` over the same sizes
(:func:`mpi_allreduce_groups`), and T_g = C_g x + D_g is fitted per group with its error: r2 and the
largest and median relative error over the sizes measured (:func:`fit_collective`). A group is one
device per rank, keyed by (g devices, the hosts its ranks run on); the fits go into the machine
file's ``collectives.allreduce`` section, which ``--comm-cost measured`` times ring AllReduces with
(``flexrt.simulator.collectives``).

Entry points: :func:`calibrate`, :func:`check_devices`, :func:`check_output_path`, :func:`write_machine_yaml`,
:func:`mpi_allreduce`, :func:`mpi_allreduce_groups`, :func:`fit_linear`, :func:`fit_collective`.

Example:
    >>> result = calibrate(devices=4, quick=True)              # doctest: +SKIP
    >>> write_machine_yaml(result, "/tmp/local.yaml", 4)       # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexrt.errors import ConfigError, MachineSpecError
from flexrt.inputs import short, writable_file
from flexrt.ir.op_type import OpType
from flexrt.ir.ops.conv2d import Conv2DAttrs
from flexrt.ir.ops.element_unary import ElementUnaryAttrs
from flexrt.ir.ops.linear import LinearAttrs
from flexrt.ir.ops.reduce import ReduceAttrs
from flexrt.kernels import run_forward
from flexrt.machine.limits import FIT_R2, FIT_REL_ERROR, MAX_DEVICES_PER_NODE, named
from flexrt.machine.machine import Collective, CollectiveFit, LinkType
from flexrt.machine.presets import LOCAL, preset_spec
from flexrt.machine.spec import build_machine, shown
from flexrt.machine.yaml_format import parse_yaml_spec

DEVICE_KIND = "host-cpu"   # the built-in preset's name, which flexflow_format also uses
MB = 2**20


@dataclass(frozen=True, slots=True)
class Sizes:
    """Problem sizes and repeat counts of one calibration run."""

    gemm: tuple[int, ...]          # square GEMM sizes for float32 / float64
    gemm_slow: int                 # square GEMM size for float16 / integers (no BLAS)
    copy_bytes: int                # the memory-bandwidth copy
    link_bytes: int                # the copy-bandwidth copy between two buffers
    conv: tuple[int, int, int, int]  # N, C (= K), H (= W), kernel size
    elementwise: int               # elements
    reduction: tuple[int, int]     # [rows, cols], summed over cols
    repeats: int
    tiny_inner: int                # calls per timed batch for tiny operations


FULL = Sizes(gemm=(512, 1024, 2048), gemm_slow=256, copy_bytes=256 * MB, link_bytes=64 * MB,
             conv=(8, 64, 32, 3), elementwise=8 * 2**20, reduction=(1024, 8192), repeats=5, tiny_inner=1000)
QUICK = Sizes(gemm=(128, 256), gemm_slow=48, copy_bytes=8 * MB, link_bytes=4 * MB,
              conv=(1, 8, 16, 3), elementwise=2**18, reduction=(64, 4096), repeats=3, tiny_inner=100)


@dataclass(frozen=True, slots=True)
class Throughput:
    """What one operator class achieved: ``rate`` in ``unit`` (``FLOP/s`` or ``B/s``) on ``shape``."""

    op_class: str
    shape: str
    rate: float
    unit: str


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """This host's measured numbers, whole host (not divided among workers); SI units."""

    peak_flops: tuple[tuple[str, float], ...]   # (dtype name as in machine YAML, FLOP/s)
    memory_bandwidth: float                     # bytes/s, read + written
    launch_overhead_s: float
    copy_bandwidth: float                       # bytes/s copied between two buffers
    copy_latency_s: float
    throughput: tuple[Throughput, ...]
    memory_bytes: int                           # physical memory of the host
    cpu_count: int
    quick: bool
    elapsed_s: float
    mpi_bandwidth: float = 0.0                  # bytes/s between two MPI ranks (0: not measured)
    mpi_latency_s: float = 0.0
    ranks: int = 1                              # MPI ranks sharing this host when measured
    allreduce: tuple = ()                       # (bytes, seconds) of MPI AllReduces over ``allreduce_ranks``
    allreduce_ranks: int = 0
    allreduce_groups: tuple = ()                # per device group: (devices, nodes, ((bytes, seconds), ...))

    def __post_init__(self):
        numbers = [f for _, f in self.peak_flops] + [self.memory_bandwidth, self.launch_overhead_s,
                                                     self.copy_bandwidth, self.copy_latency_s]
        if not all(math.isfinite(x) and x > 0 for x in numbers):
            raise MachineSpecError(f"calibration gave a non-positive or non-finite number: {numbers}")

    def flops(self, dtype: str) -> float:
        return dict(self.peak_flops)[dtype]

    def to_json(self) -> dict:
        return {"peak_flops": dict(self.peak_flops), "memory_bandwidth": self.memory_bandwidth,
                "launch_overhead_s": self.launch_overhead_s, "copy_bandwidth": self.copy_bandwidth,
                "copy_latency_s": self.copy_latency_s, "memory_bytes": self.memory_bytes,
                "cpu_count": self.cpu_count, "quick": self.quick, "elapsed_s": self.elapsed_s,
                "throughput": [{"op_class": t.op_class, "shape": t.shape, "rate": t.rate, "unit": t.unit}
                               for t in self.throughput],
                "mpi_bandwidth": self.mpi_bandwidth, "mpi_latency_s": self.mpi_latency_s, "ranks": self.ranks,
                "allreduce": [list(x) for x in self.allreduce], "allreduce_ranks": self.allreduce_ranks,
                "allreduce_fit": dict(zip(("c_s_per_byte", "d_s", "r2"), fit_linear(*zip(*self.allreduce))))
                if len(self.allreduce) >= 2 else None,
                "allreduce_groups": [{"devices": f.devices, "nodes": f.nodes, "c_s_per_byte": f.c_s_per_byte,
                                      "d_s": f.d_s, "r2": f.r2, "max_rel_error": f.max_rel_error,
                                      "median_rel_error": f.median_rel_error, "sizes": f.sizes,
                                      "samples": [list(x) for x in samples]}
                                     for f, (_, _, samples) in zip(self.group_fits(), self.allreduce_groups)]}

    def group_fits(self) -> tuple[CollectiveFit, ...]:
        """T = C x + D of each measured device group (:func:`fit_collective`)."""
        return tuple(fit_collective(*zip(*samples), devices=g, nodes=k) for g, k, samples in self.allreduce_groups)


def mpi_point_to_point(comm, quick: bool = False) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of MPI messages between ranks 0 and 1, by ping-pong: latency
    from 8-byte round trips / 2, bandwidth from one-way 16 MB (4 MB quick) sends. Every rank calls it
    (ranks above 1 only wait at the barriers); ranks 0 and 1 get the numbers."""
    rank = comm.Get_rank()
    small, big = np.zeros(1), np.zeros((4 if quick else 16) * 2**20 // 8)
    reps = 20 if quick else 200
    times = []
    for buf, n in ((small, reps), (big, 3 if quick else 7)):
        comm.Barrier()
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            if rank == 0:
                comm.Send(buf, dest=1, tag=7)
                comm.Recv(buf, source=1, tag=7)
            elif rank == 1:
                comm.Recv(buf, source=0, tag=7)
                comm.Send(buf, dest=0, tag=7)
            samples.append((time.perf_counter() - t) / 2)
        times.append(statistics.median(samples))
    comm.Barrier()
    latency = max(times[0], 1e-9)
    bandwidth = big.nbytes / max(times[1] - latency, 1e-12)
    return comm.bcast((bandwidth, latency), root=0)


def mpi_allreduce(comm, quick: bool = False) -> tuple[tuple[int, float], ...]:
    """(bytes, seconds) of ``MPI.Allreduce`` (sum) of float64 buffers over every rank, from 8 bytes to
    16 MB (4 MB quick), each the median of repeats of the slowest rank's time: the samples DisCo's
    collective model T = C x + D is fitted to (``fit_linear``). Every rank calls it."""
    from mpi4py import MPI
    sizes = [8, 64 << 10, 1 << 20, 4 << 20] if quick else [8, 4 << 10, 64 << 10, 512 << 10, 2 << 20, 8 << 20,
                                                             16 << 20]
    out = []
    for size in sizes:
        send, recv = np.ones(size // 8), np.empty(size // 8)
        samples = []
        for _ in range(3 if quick else (20 if size <= 64 << 10 else 5)):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(send, recv, op=MPI.SUM)
            samples.append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
        out.append((size, statistics.median(samples)))
    return tuple(out)


def mpi_allreduce_groups(comm, quick: bool = False, world=None) -> tuple:
    """Per device group g = 2..R, the first g ranks' ``MPI.Allreduce`` samples (:func:`mpi_allreduce` over a
    sub-communicator made with ``comm.Split``; the other ranks sleep in ``comm_wait`` meanwhile, so they
    take no core from it): ``((g, nodes, ((bytes, seconds), ...)), ...)`` on every rank, ``nodes`` the
    hosts (MPI processor names) the g ranks run on. ``world``: the whole world's samples when
    already measured, reused for g = R. Every rank calls it."""
    from mpi4py import MPI
    from flexrt.runtime.mpi import comm_wait
    size, rank = comm.Get_size(), comm.Get_rank()
    hosts = comm.allgather(MPI.Get_processor_name())
    out = []
    for g in range(2, size + 1):
        if g == size and world is not None:
            samples = tuple(world)
        else:
            sub = comm.Split(0 if rank < g else MPI.UNDEFINED, rank)
            samples = None
            if sub != MPI.COMM_NULL:
                samples = mpi_allreduce(sub, quick)
                sub.Free()
            comm_wait(comm)
            samples = comm.bcast(samples, root=0)
        out.append((g, len(set(hosts[:g])), tuple(samples)))
    return tuple(out)


def fit_collective(sizes, times, devices: int = 2, nodes: int = 1) -> CollectiveFit:
    """DisCo's T = C x + D of one device group (``devices`` devices on ``nodes`` nodes), fitted to
    (bytes, seconds) by least squares of the *relative* error, so that 8 B and 16 MB count alike (D is
    set by the small messages, C by the large), with C and D kept >= 0 (a negative one is fixed at 0
    and the other refitted). Its error over the samples: r2 (of the seconds), the largest and the
    median relative error |C x + D - T| / T.

    Example:
        >>> f = fit_collective([8, 1 << 20, 16 << 20], [10e-6 + 1e-9 * x for x in (8, 1 << 20, 16 << 20)])
        >>> round(f.c_s_per_byte * 1e9, 6), round(f.d_s * 1e6, 6), f.max_rel_error < 1e-9
        (1.0, 10.0, True)
    """
    x, y = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise MachineSpecError(f"fitting T = C x + D needs two or more message sizes, got {list(sizes)}")
    if not np.all(np.isfinite(y) & (y > 0)):
        raise MachineSpecError(f"fitting T = C x + D needs positive times, got {list(times)}")
    a = np.stack([x / y, 1.0 / y], axis=1)        # (C x + D) / T = 1, for every sample
    c, d = np.linalg.lstsq(a, np.ones_like(y), rcond=None)[0]
    if d < 0:
        c, d = float(a[:, 0].sum() / (a[:, 0] ** 2).sum()), 0.0
    elif c < 0:
        c, d = 0.0, float(a[:, 1].sum() / (a[:, 1] ** 2).sum())
    predicted = c * x + d
    rel = np.abs(predicted - y) / y
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - predicted) ** 2)) / total if total > 0 else 1.0
    return CollectiveFit(Collective.ALLREDUCE, devices, nodes, float(c), float(d), max(r2, FIT_R2[0]),
                         min(float(rel.max()), FIT_REL_ERROR[1]), min(float(np.median(rel)), FIT_REL_ERROR[1]),
                         len(x))


def fit_linear(sizes, times) -> tuple[float, float, float]:
    """DisCo's linear model of a collective, T = C x + D, fitted by least squares to (bytes, seconds):
    (C in s/byte, D in s, r squared)."""
    x, y = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise MachineSpecError(f"fitting T = C x + D needs two or more message sizes, got {list(sizes)}")
    c, d = np.polyfit(x, y, 1)
    resid = y - (c * x + d)
    total = float(np.sum((y - y.mean()) ** 2))
    return float(c), float(d), (1.0 - float(np.sum(resid ** 2)) / total) if total > 0 else 1.0


def _median_s(fn: Callable[[], object], repeats: int, inner: int = 1) -> float:
    """Median seconds of one call of ``fn`` over ``repeats`` batches of ``inner`` calls, after one
    warm-up batch (batches keep the timer's own cost out of tiny operations)."""
    for _ in range(inner):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return max(statistics.median(times), 1e-12)


def _gemm_flops(n: int, dtype, repeats: int) -> float:
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    attrs = LinearAttrs(n, use_bias=False)
    return 2.0 * n ** 3 / _median_s(lambda: run_forward(np, attrs, (x, w)), repeats)


def _peak_flops(s: Sizes) -> tuple[tuple[str, float], ...]:
    f32 = max(_gemm_flops(n, np.float32, s.repeats) for n in s.gemm)
    f64 = max(_gemm_flops(n, np.float64, s.repeats) for n in s.gemm)
    slow = {name: _gemm_flops(s.gemm_slow, dtype, s.repeats)
            for name, dtype in (("float16", np.float16), ("int32", np.int32), ("int64", np.int64))}
    return (("float32", f32), ("float64", f64), ("float16", slow["float16"]), ("bfloat16", f32),
            ("int32", slow["int32"]), ("int64", slow["int64"]))


def _memory_bandwidth(s: Sizes) -> float:
    src = np.ones(s.copy_bytes // 8)
    dst = np.empty_like(src)
    return 2.0 * src.nbytes / _median_s(lambda: np.copyto(dst, src), s.repeats)


def _launch_overhead_s(s: Sizes) -> float:
    x, attrs = np.ones(1, np.float32), ElementUnaryAttrs(OpType.RELU)
    return _median_s(lambda: run_forward(np, attrs, (x,)), s.repeats * 3, s.tiny_inner)


def _copy(s: Sizes) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of ``np.copyto`` between two preallocated buffers."""
    a, b = np.ones(1), np.empty(1)
    latency = _median_s(lambda: np.copyto(b, a), s.repeats * 3, s.tiny_inner)
    src = np.ones(s.link_bytes // 8)
    dst = np.empty_like(src)
    seconds = _median_s(lambda: np.copyto(dst, src), s.repeats)
    return src.nbytes / max(seconds - latency, seconds / 2), latency


def _throughput(s: Sizes) -> tuple[Throughput, ...]:
    rng = np.random.default_rng(0)
    n = s.gemm[-1] // 2
    x, w = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    attrs = LinearAttrs(n, use_bias=False)
    matmul = 2.0 * n ** 3 / _median_s(lambda: run_forward(np, attrs, (x, w)), s.repeats)

    bn, c, hw, k = s.conv
    img = rng.standard_normal((bn, c, hw, hw)).astype(np.float32)
    kern = rng.standard_normal((c, c, k, k)).astype(np.float32)
    conv_attrs = Conv2DAttrs(c, k, k, padding_h=k // 2, padding_w=k // 2, use_bias=False)
    conv = 2.0 * bn * c * c * k * k * hw * hw / _median_s(lambda: run_forward(np, conv_attrs, (img, kern)),
                                                          s.repeats)

    v = rng.standard_normal(s.elementwise).astype(np.float32)
    relu = ElementUnaryAttrs(OpType.RELU)
    elementwise = 2.0 * v.nbytes / _median_s(lambda: run_forward(np, relu, (v,)), s.repeats)

    rows, cols = s.reduction
    r = rng.standard_normal((rows, cols)).astype(np.float32)
    red = ReduceAttrs(OpType.REDUCE_SUM, (1,))
    reduction = r.nbytes / _median_s(lambda: run_forward(np, red, (r,)), s.repeats)
    return (Throughput("matmul", f"linear float32 [{n}, {n}] x [{n}, {n}]", matmul, "FLOP/s"),
            Throughput("conv2d", f"conv2d float32 [{bn}, {c}, {hw}, {hw}] {c}x{k}x{k} pad {k // 2}", conv, "FLOP/s"),
            Throughput("elementwise", f"relu float32 [{s.elementwise}] (read + write)", elementwise, "B/s"),
            Throughput("reduction", f"reduce_sum float32 [{rows}, {cols}] axis 1 (read)", reduction, "B/s"))


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB
        return 16 * 2**30


def check_devices(devices: int, flag: str = "the number of local devices") -> int:
    """``devices`` when it is an integer 1..``MAX_DEVICES_PER_NODE`` (the workers are one node's
    devices); a MachineSpecError naming ``flag`` and the limit otherwise."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise MachineSpecError(f"{flag} must be a positive integer, got {short(devices)}; valid: "
                               f"1..{MAX_DEVICES_PER_NODE}")
    if devices > MAX_DEVICES_PER_NODE:
        raise MachineSpecError(f"{flag} must be at most {named('MAX_DEVICES_PER_NODE')}, the devices of one "
                               f"node, got {devices}")
    return devices


def calibrate(devices: int = 4, quick: bool = False) -> CalibrationResult:
    """Measure this host (whole-host numbers; :func:`write_machine_yaml` splits them among ``devices``).

    ``quick`` uses small sizes and few repeats (well under 5 s), for tests; its numbers are rough.

    Example:
        >>> r = calibrate(quick=True)                     # doctest: +SKIP
        >>> r.flops("float32") > 0
        True
    """
    check_devices(devices)
    s = QUICK if quick else FULL
    t0 = time.perf_counter()
    peak = _peak_flops(s)
    memory_bandwidth = _memory_bandwidth(s)
    launch = _launch_overhead_s(s)
    copy_bandwidth, copy_latency = _copy(s)
    throughput = _throughput(s)
    return CalibrationResult(peak, memory_bandwidth, launch, copy_bandwidth, copy_latency, throughput,
                             _host_memory_bytes(), os.cpu_count() or 1, quick, time.perf_counter() - t0)


# --- the machine file ---

def _g(x: float) -> str:
    return f"{x:.6g}"


def _description(result: CalibrationResult, devices: int) -> str:
    if result.ranks > 1:
        return f"this host's CPU as {result.ranks} processes of {devices} NumPy worker(s)"
    return f"this host's CPU as {devices} NumPy workers"


def machine_yaml(result: CalibrationResult, devices: int) -> str:
    """The machine YAML of the calibrated ``local`` machine with ``devices`` workers (see the module
    docstring for how the host's numbers are shared)."""
    check_devices(devices)
    estimate = {link.type: link for link in preset_spec(LOCAL).links}
    nic, network = estimate[LinkType.NIC], estimate[LinkType.NETWORK]
    if result.mpi_bandwidth > 0:
        # what the runtime sends between ranks are point-to-point messages (a ring AllReduce spanning
        # ranks too: its members exchange partial sums), so the links are the measured messages; the
        # measured MPI AllReduces are the collectives section's fits (--comm-cost measured).
        # Between processes the route is nic, network (up to the switch), network (down), nic; the
        # measured message cost goes on the two network links, the NICs only pass it on (cut-through
        # adds the route's latencies, so the route's total is the measured latency)
        nic_bw, nic_lat = result.mpi_bandwidth / 1e9, 0.001
        net_bw, net_lat = result.mpi_bandwidth / 1e9, max((result.mpi_latency_s * 1e6 - 2 * nic_lat) / 2, 0.001)
        between = (f"nic and network are MPI messages between two ranks measured here "
                   f"({_g(result.mpi_bandwidth / 1e9)} GB/s, {_g(result.mpi_latency_s * 1e6)} us); run with "
                   f"--nodes R under mpiexec -n R. The receiving rank copies a message (moved_by: receiver) "
                   f"when it next calls into MPI, between its tasks.")
        moved = ", moved_by: receiver"   # MPI between processes of one host: no asynchronous progress
    else:
        nic_bw, nic_lat, net_bw, net_lat = nic.bandwidth_gbs, nic.latency_us, network.bandwidth_gbs, network.latency_us
        between = "nic and network are the built-in estimate (not measured; calibrate under mpiexec -n 2 to measure)."
        moved = ""
    # under MPI each rank measured with its own share of the cores (its BLAS threads): its workers
    # split that share
    share = devices
    flops = ", ".join(f"{name}: {_g(f / share / 1e12)}" for name, f in result.peak_flops)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    quick = " (quick: rough)" if result.quick else ""
    return f"""\
# Written by `flexrt calibrate`{quick} on {platform.node() or 'this host'} at {when}. The host's measured
# numbers (measured by one of {result.ranks} rank(s) on this host, with its share of the cores), each of
# the {devices} workers of a rank getting 1/{devices} of FLOP/s, memory bandwidth and memory; the membus
# link is one np.copyto between two workers' buffers. {between}
# Host: float32 {_g(result.flops('float32') / 1e9)} GFLOP/s, memory {_g(result.memory_bandwidth / 1e9)} GB/s.

name: local
description: "{_description(result, devices)} (calibrated by `flexrt calibrate`{quick}, {when})"
nodes: {result.ranks}                      # processes (MPI ranks) on this host; `flexrt train --machine local` starts them

device_kinds:
  {DEVICE_KIND}:
    kind: cpu
    peak_flops: {{{flops}}}
    memory_bandwidth: {_g(result.memory_bandwidth / share / 1e9)}
    memory: {_g(result.memory_bytes / (share * result.ranks) / 2**30)}
    launch_overhead_us: {_g(result.launch_overhead_s * 1e6)}
    efficiency: 1.0               # the measured GEMM rate is the peak

node:
  sockets:
    - {{cpu: null, devices: {{{DEVICE_KIND}: {devices}}}}}

links:
  membus: {{bandwidth: {_g(result.copy_bandwidth / 1e9)}, latency_us: {_g(result.copy_latency_s * 1e6)}}}
  nic: {{bandwidth: {_g(nic_bw)}, latency_us: {_g(nic_lat)}{moved}}}
  network: {{bandwidth: {_g(net_bw)}, latency_us: {_g(net_lat)}}}

intra_node:
  devices:
    - {{all_to_all: all, link: membus}}

inter_node:
  nics: 1
  attach: devices
""" + _collectives_yaml(result)


def _collectives_yaml(result: CalibrationResult) -> str:
    """The ``collectives`` section of the measured device groups ("" when none were measured)."""
    fits = result.group_fits()
    if not fits:
        return ""
    ranks = max(f.devices for f in fits)
    rows = "".join(f"    - {{devices: {f.devices}, nodes: {f.nodes}, c_ns_per_byte: {_g(f.c_s_per_byte * 1e9)}, "
                   f"d_us: {_g(f.d_s * 1e6)}, r2: {_g(f.r2)}, max_rel_error: {_g(f.max_rel_error)}, "
                   f"median_rel_error: {_g(f.median_rel_error)}, sizes: {f.sizes}}}\n" for f in fits)
    return f"""
# DisCo's T = C x + D (x bytes) of MPI.Allreduce per device group: the first g of the {ranks} ranks, one device
# each, on `nodes` hosts; fitted to the relative error over `sizes` message sizes. --comm-cost measured
# times a ring AllReduce of g devices on k nodes with the fit for (g, k), or derives one from these.
collectives:
  allreduce:
{rows}"""


def check_output_path(path: str | Path, flag: str = "the calibrated machine's path", parents: bool = True) -> Path:
    """``path`` (``~`` expanded) when the machine YAML can be written there: it ends in ``.yaml`` or
    ``.yml`` (so ``--machine PATH`` reads it as a file) and a file can be written there
    (``flexrt.inputs.writable_file``; with ``parents``, missing folders are made: the cache's; a
    path the user gives must be in a folder that exists, as every other output). A ConfigError
    naming ``flag`` otherwise."""
    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError(f"{flag} {shown(str(path))}: a machine file must end in .yaml or .yml")
    return writable_file(path, flag, parents=parents)


def write_machine_yaml(result: CalibrationResult, path: str | Path, devices: int) -> Path:
    """Write :func:`machine_yaml` to ``path`` (creating its folder); returns the path.

    The text is loaded as a machine first (a MachineSpecError naming the line, and nothing written,
    when a measured number is outside what machine files accept), then written atomically.
    ``flexrt.machine.load_machine(path)`` loads it; written to
    ``flexrt.machine.calibrated_local_path()``, it becomes ``load_machine("local")``.
    """
    path = check_output_path(path)
    text = machine_yaml(result, devices)
    try:
        build_machine(parse_yaml_spec(text, str(path)))
    except MachineSpecError as e:
        raise MachineSpecError(f"the calibrated machine would not load, so nothing was written: {e}") from None
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0o22)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private; the machine file is an ordinary one
        os.replace(tmp, path)  # a reader never sees half a file
    except OSError as e:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)
        raise MachineSpecError(f"cannot write the calibrated machine to {path}: {e.strerror or e}") from None
    return path
