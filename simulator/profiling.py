"""Running one operator's forward kernel on made-up operands and timing it.

Operands are built deterministically from a fixed seed: floating-point operands uniform in
[0.5, 1.5) (positive and away from zero, so rsqrt, pow and divide stay finite), booleans fair coin
flips, integer operands in [0, 8), and index operands in range for the operator that reads them
(embedding indices in [0, number of table rows), gather indices in [0, input size along ``dim``)).
Only the shapes and dtypes matter for the time (FlexFlow's assumption A1).

Entry points: ``Backend``, ``backend``, ``make_operands``, ``time_forward``, ``time_fused``.

Example:
    >>> from flexrt.ir import DataType, TensorShape
    >>> from flexrt.ir.ops import EmbeddingAttrs
    >>> idx, table = make_operands(backend("numpy"), EmbeddingAttrs(10, 4),
    ...                            [TensorShape((8,), DataType.DT_INT64), TensorShape((10, 4))])
    >>> bool(idx.min() >= 0 and idx.max() < 10), table.shape
    (True, (10, 4))
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.op_type import OpType
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.registry import run_forward

SEED = 20240101
INT_HIGH = 8
BACKENDS = ("numpy", "cupy")
# backend -> the device kind it runs on (numpy times the host CPU, cupy a GPU)
DEVICE_KIND_OF_BACKEND = {"numpy": "cpu", "cupy": "gpu"}


@dataclass(frozen=True, slots=True)
class Backend:
    """An array module and how to wait for it (CuPy runs asynchronously)."""

    name: str
    xp: Any
    synchronize: Callable[[], None]
    asarray: Callable[[Any], Any]
    device_name: str


def _index_operands(attrs, inputs: Sequence[TensorShape]) -> dict[int, int]:
    """operand position -> exclusive upper bound of its values, for operands that index something."""
    if attrs.op_type is OpType.EMBEDDING:
        rows = inputs[1].dims[0] if len(inputs) > 1 else attrs.num_entries
        return {0: min(attrs.num_entries, rows)}  # the kernel checks indices against the table's rows
    if attrs.op_type is OpType.GATHER:
        x = inputs[0]
        return {1: x.dims[attrs.dim % x.rank]}
    return {}


def make_operands(be: Backend, attrs, inputs: Sequence[TensorShape], seed: int = SEED) -> list:
    """Arrays of the given shapes and dtypes on ``be`` (data inputs, then weights), deterministic.

    Raises:
        ShapeError: for an operand of dtype DT_NONE.
    """
    rng = np.random.default_rng(seed)
    bounds = _index_operands(attrs, inputs)
    arrays = []
    for i, s in enumerate(inputs):
        dtype = s.dtype
        if dtype is DataType.DT_NONE:
            raise ShapeError(f"{attrs.op_type.value}: operand {i} {s} has no element type; cannot make data")
        if i in bounds:
            a = rng.integers(0, bounds[i], s.dims)
        elif dtype.is_floating:
            a = rng.uniform(0.5, 1.5, s.dims)
        elif dtype is DataType.DT_BOOLEAN:
            a = rng.random(s.dims) < 0.5
        else:
            a = rng.integers(0, INT_HIGH, s.dims)
        arrays.append(be.asarray(np.ascontiguousarray(a.astype(dtype.numpy_name))))
    return arrays


def time_forward(be: Backend, attrs, operands: Sequence, repeats: int, warmup: int) -> list[float]:
    """Seconds of each of ``repeats`` forward runs after ``warmup`` untimed ones (perf_counter,
    waiting for the device before and after each run)."""
    for _ in range(warmup):
        run_forward(be.xp, attrs, operands)
    be.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_forward(be.xp, attrs, operands)
        be.synchronize()
        samples.append(time.perf_counter() - start)
    return samples


def _fused_runner(be: Backend, members: Sequence) -> tuple[Callable, list]:
    """(run, per member its own operands): ``run()`` executes a fused task (``FusedMember``s) as
    the runtime does: one numexpr / CuPy expression when every member is a chainable element-wise
    operator on one shape (``kernels.fused.ElementwiseChain``), else the members' forward kernels
    one after the other, each internal operand being the output of the member it comes from
    (``FusedMember.sources``)."""
    from flexrt.kernels.fused import CHAIN_OPS, ChainStep, ElementwiseChain
    operands = [make_operands(be, m.attrs, m.inputs, SEED + k) for k, m in enumerate(members)]
    chain = None
    if all(m.attrs.op_type in CHAIN_OPS and len(m.outputs) == 1 and m.outputs[0].dtype.is_floating
           and all(x.dims == m.outputs[0].dims for x in m.inputs) for m in members) and \
            len({m.outputs[0] for m in members}) == 1:
        ins, steps = [], []
        for k, m in enumerate(members):
            args = []
            for i, src in enumerate(m.sources or (-1,) * len(m.inputs)):
                if 0 <= src < k:
                    args.append(("step", src))
                else:
                    args.append(("in", len(ins)))
                    ins.append(operands[k][i])
            steps.append(ChainStep(m.attrs, tuple(args)))
        chain = ElementwiseChain(tuple(steps))
        chain = chain if chain.fits() and chain.one_pass_pays(be.xp) else None   # as the runtime decides

    def run():
        if chain is not None:
            return chain.evaluate(be.xp, ins)
        outs: list = []
        for k, m in enumerate(members):
            args = [outs[src][0] if 0 <= src < k and outs[src][0].shape == operands[k][i].shape
                    else operands[k][i] for i, src in enumerate(m.sources or (-1,) * len(m.inputs))]
            outs.append(run_forward(be.xp, m.attrs, args))
        return outs
    return run, operands


def _timed(be: Backend, fn: Callable) -> float:
    start = time.perf_counter()
    fn()
    be.synchronize()
    return time.perf_counter() - start


def time_fused(be: Backend, members: Sequence, repeats: int, warmup: int) -> list[float]:
    """Seconds of each of ``repeats`` runs of a fused task (``_fused_runner``) after ``warmup``."""
    run, _ = _fused_runner(be, members)
    for _ in range(warmup):
        run()
    be.synchronize()
    return [_timed(be, run) for _ in range(repeats)]


def time_group(be: Backend, members: Sequence, repeats: int, warmup: int) -> tuple[list[float], float]:
    """(per member its median forward seconds, the fused task's median): each of ``repeats``
    rounds times every member alone and then the fused task, back to back, on the same operands,
    so that the two sides of a fused/members ratio see the same state of the host (timed in
    separate processes or minutes apart, their ratios scattered by tens of percent)."""
    run, operands = _fused_runner(be, members)
    alone = [functools.partial(run_forward, be.xp, m.attrs, operands[k]) for k, m in enumerate(members)]
    for _ in range(warmup):
        for fn in alone:
            fn()
        run()
    be.synchronize()
    member_samples: list[list[float]] = [[] for _ in members]
    fused_samples = []
    for _ in range(repeats):
        for k, fn in enumerate(alone):
            member_samples[k].append(_timed(be, fn))
        fused_samples.append(_timed(be, run))
    return [median(x) for x in member_samples], median(fused_samples)


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples))


def _no_wait() -> None:
    pass


@functools.cache
def _numpy_backend() -> Backend:
    return Backend("numpy", np, _no_wait, lambda a: a, "host")


def backend_unavailable(name: str) -> Optional[str]:
    """Why backend ``name`` cannot run here, or None."""
    if name == "cupy":
        from flexrt.simulator import _profile_cupy
        return _profile_cupy.unavailable_reason()
    return None


def backend(name: str) -> Backend:
    """The backend called ``name`` ("numpy" or "cupy").

    Raises:
        ConfigError: for another name, or for "cupy" where CuPy cannot reach a GPU.
    """
    if name == "numpy":
        return _numpy_backend()
    if name == "cupy":
        from flexrt.simulator import _profile_cupy
        reason = _profile_cupy.unavailable_reason()
        if reason is not None:
            raise ConfigError(f"profiling backend 'cupy' is unavailable: {reason}")
        cupy, sync, gpu = _profile_cupy.load()
        return Backend("cupy", cupy, sync, cupy.asarray, gpu)
    raise ConfigError(f"unknown profiling backend {name!r}; valid: {', '.join(BACKENDS)}")
