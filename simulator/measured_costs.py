"""Costs measured as the runtime executes tasks: per task key, the median of runtime-traced durations.

The profiled model (``ProfiledCostModel``) times a kernel alone. What a runtime task costs is more:
the task assembles its operands from their parts, allocates its outputs, runs the kernel (the
backward one too, which the profiled model only derives), releases what it read, and the executor
dispatches it. ``MeasuredTimes`` collects those durations from real iterations
(``harvest``: a lowered strategy, its runtime trace), keyed as the lowering asks its cost model:

- ``forward`` / ``backward``: (operator attributes, piece shapes, device kind);
- ``update``: (weight piece shape, optimizer, device kind);
- ``reduce``: (summed shape, number of addends, device kind);
- ``loss``: (scored piece shape, device kind);
- ``fused-forward`` / ``fused-backward``: (the members' attributes, shapes and wiring, device kind).

``MeasuredCostModel(base, times)`` answers from the table and, for a key never measured, gives
``a + b x^c`` of the base model's time ``x``, fitted on the harvested tasks of the same kind and
operator (``MeasuredTimes.fit``: a power law in logs), else of the kind. Every compute task also pays the
runtime's own time per task, and every transfer its time per message, and more for a message large
enough that MPI moves it only when the receiver polls (``RENDEZVOUS_BYTES``; all three from
``MeasuredTimes.fit_overheads``, fitted on the calibration runs). Transfers and collectives are the
base's (plus those times per message): their costs come
from the machine's calibrated links (``flexrt calibrate``: point to point and AllReduce under MPI).
The table is one JSON file (``save`` / ``load``) that records its backend, host and the strategies
it was harvested from (what calibrates is never what is scored).

Entry points: ``MeasuredTimes``, ``MeasuredCostModel``, ``harvest``.

Example:
    >>> times = MeasuredTimes(backend="numpy")                               # doctest: +SKIP
    >>> harvest(times, session.simulator, session.plan.tasks, durations, "sgd")   # doctest: +SKIP
    >>> times.fit(ProfiledCostModel(), machine)                               # doctest: +SKIP
    >>> cost = MeasuredCostModel(ProfiledCostModel(), times)                  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from flexrt.errors import ConfigError, FlexrtError
from flexrt.ir.serialize import attrs_to_json
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.simulator.actions import Backward, Forward, Fused, Loss, Sum, Update
from flexrt.simulator.cost_model import (MIN_TASK_S, CostModelWrapper, OpTimes, has_linear_transfers, loss_time,
                                         receive_time)
from flexrt.simulator.profile_cache import canonical_json

if TYPE_CHECKING:
    from flexrt.machine import DeviceSpec, Link

FORMAT = 1
# MPI moves a message of at least this many bytes between processes only when the receiver calls
# into MPI (rendezvous; MPICH's single-copy threshold between processes of one host, its
# MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD): measured on this project's host, 16 KiB reached an idle
# receiver in 6 us and one busy computing for 2 ms in 2,099 us. Below it a message is sent eagerly.
def _rendezvous_bytes(default: int = 8192) -> int:
    value = os.environ.get("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "")
    return int(value) if value.strip().isdigit() else default


RENDEZVOUS_BYTES = _rendezvous_bytes()
# The runtime's own times fitted on calibration runs (``MeasuredTimes.fit_overheads``), and the step
# each one's sensitivity is simulated with: per compute task; per message, on its links; per message
# of RENDEZVOUS_BYTES or more, on its links; per message and per byte on the receiving device where
# the receiver copies it (``Machine.copied_by_receiver``: handling its arrival, the copy's own speed
# when both ranks exchange at once).
OVERHEADS = ("dispatch_s", "message_s", "rendezvous_s", "receive_s", "receive_s_per_byte")
_STEPS = (1e-5, 1e-5, 1e-5, 1e-5, 1e-10)


def overheads_text(values) -> str:
    """The fitted runtime times (``OVERHEADS`` order) in words."""
    d = dict(zip(OVERHEADS, values))
    return (f"{d['dispatch_s'] * 1e6:.1f} us per compute task, {d['message_s'] * 1e6:.1f} us per message (and "
            f"{d['rendezvous_s'] * 1e6:.1f} us more from {RENDEZVOUS_BYTES} bytes), and where the receiver copies a "
            f"message, {d['receive_s'] * 1e6:.1f} us per message and {d['receive_s_per_byte'] * 1e9:.3f} ns per "
            f"byte on its device")


KINDS = ("forward", "backward", "update", "reduce", "loss", "fused-forward", "fused-backward")


# ---- keys: how the lowering asks, as canonical JSON ----------------------------------------------

def _shapes(shapes: Sequence[TensorShape]) -> list:
    return [[list(s.dims), s.dtype.name] for s in shapes]


def op_key(kind: str, attrs, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape], device: str) -> str:
    return canonical_json({"kind": kind, "op": attrs.op_type.value, "attrs": attrs_to_json(attrs),
                           "inputs": _shapes(inputs), "outputs": _shapes(outputs), "device": device})


def update_key(weight: TensorShape, optimizer, device: str) -> str:
    return canonical_json({"kind": "update", "weight": _shapes([weight])[0], "optimizer": OptimizerKind(optimizer).value,
                           "device": device})


def reduce_key(shape: TensorShape, n: int, device: str) -> str:
    return canonical_json({"kind": "reduce", "shape": _shapes([shape])[0], "n": int(n), "device": device})


def loss_key(piece: TensorShape, device: str) -> str:
    return canonical_json({"kind": "loss", "shape": _shapes([piece])[0], "device": device})


def fused_key(members, phase: str, device: str) -> str:
    return canonical_json({"kind": f"fused-{phase}", "device": device, "members": [
        {"op": m.attrs.op_type.value, "attrs": attrs_to_json(m.attrs), "inputs": _shapes(m.inputs),
         "outputs": _shapes(m.outputs), "sources": list(m.sources), "recomputed": m.recomputed} for m in members]})


def _kind_of(key: str) -> str:
    return json.loads(key)["kind"]


# ---- the table ------------------------------------------------------------------------------------

class MeasuredTimes:
    """Runtime-traced task durations per key (seconds; the median is the task's time), per task kind
    the fitted measured / base ratio for keys never measured, and the per-task dispatch cost.

    Args:
        backend: the runtime backend the durations were measured on ("numpy", "cupy").
        host: where (default: this host's name and CPU).
    """

    def __init__(self, backend: str = "numpy", host: Optional[str] = None):
        self.backend = backend
        self.host = host if host is not None else f"{platform.node()} {platform.machine()}".strip()
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.fits: dict[str, tuple] = {}   # "kind" or "kind:op" -> (a, b, c): a + b x^c
        self.dispatch_s = 0.0    # the runtime's own time per compute task beside it (``fit_overheads``)
        self.message_s = 0.0     # ... and per message between devices, on top of the link's time
        self.rendezvous_s = 0.0  # ... and per message of RENDEZVOUS_BYTES or more: the wait for the receiver
        self.receive_s = 0.0     # ... and per message on the device that copies it (copied_by_receiver) ...
        self.receive_s_per_byte = 0.0  # ... and per byte there, beyond the link's speed
        self.strategies: list[str] = []      # what the durations were harvested from

    def __len__(self) -> int:
        return len(self.samples)

    def add(self, key: str, seconds: float) -> None:
        if not seconds >= 0:
            raise ConfigError(f"MeasuredTimes.add: {seconds!r} seconds for {key}")
        self.samples[key].append(float(seconds))

    def get(self, key: str) -> Optional[float]:
        got = self.samples.get(key)
        return max(statistics.median(got), MIN_TASK_S) if got else None

    def fit(self, base, machine) -> dict[str, tuple]:
        """Per task kind, and per kind and operator type, ``(a, b, c)`` with measured ~ a + b x^c, x the
        ``base`` model's time for the same question (on ``machine``'s device kinds), over the measured
        keys (``_fit_group``): what a key never measured is timed by."""
        specs = {d.spec.name: d.spec for d in machine.devices}
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for key in self.samples:
            q = json.loads(key)
            spec = specs.get(q["device"])
            predicted = _base_time(base, q, spec) if spec is not None else None
            if predicted and predicted > 0:
                groups[q["kind"]].append((predicted, self.get(key)))
                if "op" in q:
                    groups[f"{q['kind']}:{q['op']}"].append((predicted, self.get(key)))
        self.fits = {name: _fit_group(pairs) for name, pairs in groups.items()}
        return self.fits

    def predict(self, kind: str, op: Optional[str], base_s: float) -> float:
        """A never-measured task's time from its base time: the fit of its kind and operator, else
        of its kind, else the base time."""
        a, b, c = self.fits.get(f"{kind}:{op}") or self.fits.get(kind) or (0.0, 1.0, 1.0)
        return max(a + b * max(base_s, MIN_TASK_S) ** c, MIN_TASK_S)

    def fit_overheads(self, base, machine, runs: Sequence[tuple], optimizer="sgd") -> tuple[float, ...]:
        """The runtime's own times (``OVERHEADS``): per compute task beside the task itself
        (``dispatch_s``: dispatching it, polling for messages, releasing buffers), per message
        (``message_s``: a transfer's send, its arrival handled, on top of the link's time), per message
        of ``RENDEZVOUS_BYTES`` or more (``rendezvous_s``), and on a device that copies a message it
        receives (``Machine.copied_by_receiver``) per message and per byte (``receive_s``,
        ``receive_s_per_byte``), that make the simulated iterations of ``runs`` ((strategy, measured
        seconds): the calibration strategies, never the scored ones) closest to their measured times,
        all >= 0 (least squared relative error). Gauss-Newton: each iteration's sensitivity to each is
        simulated (a step of ``_STEPS``) around the current values, the linear non-negative problem
        solved, and the step kept while the simulated error falls (the walls are piecewise linear in
        them: a longer message moves the critical path). Sets and returns them."""
        import numpy as np
        from flexrt.simulator.simulate import Simulator
        k = len(OVERHEADS)
        steps = np.array(_STEPS)

        def wall(x, strategy) -> float:
            self.set_overheads(x)
            return Simulator(machine, MeasuredCostModel(base, self), optimizer, detail=False).time_full(strategy)

        def linearized(x):
            rows, rhs = [], []
            for strategy, measured in runs:
                w0 = wall(x, strategy)
                rows.append([(wall(x + steps[j] * np.eye(k)[j], strategy) - w0) / steps[j] / measured for j in range(k)])
                rhs.append(1.0 - w0 / measured + float(np.dot(rows[-1], x)))
            return np.array(rows), np.array(rhs)

        def error(x) -> float:
            return float(sum((wall(x, strategy) / measured - 1.0) ** 2 for strategy, measured in runs))

        best = np.zeros(k)
        best_err = error(best)
        for _ in range(4):
            x = _nonnegative_least_squares(*linearized(best))
            err = error(x)
            if not err < best_err * (1 - 1e-9):
                break
            best, best_err = x, err
        self.set_overheads(best)
        return self.overheads()

    def overheads(self) -> tuple[float, ...]:
        """The fitted runtime times, in ``OVERHEADS`` order."""
        return tuple(getattr(self, name) for name in OVERHEADS)

    def set_overheads(self, values) -> None:
        for name, v in zip(OVERHEADS, values, strict=True):
            setattr(self, name, float(v))

    # ---- file ----------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": FORMAT, "backend": self.backend, "host": self.host, "strategies": list(self.strategies),
                "fits": {k: list(v) for k, v in self.fits.items()}, **dict(zip(OVERHEADS, self.overheads())),
                "samples": {k: v for k, v in sorted(self.samples.items())}}

    def save(self, path) -> None:
        """Write the table (atomically: a temporary file in the same folder, then a rename)."""
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".measured-", suffix=".json", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f, indent=0)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path) -> "MeasuredTimes":
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such measured-times file (write one with `flexrt accuracy` or "
                              f"`MeasuredTimes.save`)") from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not a measured-times file ({type(e).__name__}: {e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{path}: not a measured-times file of format {FORMAT}")
        try:
            out = cls(str(data["backend"]), str(data["host"]))
            out.strategies = [str(s) for s in data.get("strategies", [])]
            out.fits = {str(k): tuple(float(v) for v in f) for k, f in data.get("fits", {}).items()}
            if any(len(f) != 3 for f in out.fits.values()):
                raise ValueError("every fit is [a, b, c]")
            for name in OVERHEADS:
                value = float(data.get(name, 0.0))
                if not value >= 0:
                    raise ValueError(f"{name} is {value}; it must be >= 0")
                setattr(out, name, value)
            for k, v in data["samples"].items():
                for x in v:
                    out.add(str(k), float(x))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{path}: bad measured-times entry ({type(e).__name__}: {e})") from None
        return out


MIN_FIT = 3


def _fit_group(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(a, b, c) with measured ~ a + b x^c over (x, y) pairs (x the base model's time, y the measured
    one): a power law (a = 0), least squares in logs (a large kernel contends for the memory
    bandwidth the other processes use, a small one pays mostly fixed costs), where it fits better
    than the median ratio (c = 1) and its exponent is within [0.5, 1.5]; the median ratio for fewer
    than ``MIN_FIT`` pairs or sizes too alike. (An affine a + b x was tried: on this host's runs it
    scored worse, 8-10 % median error against 4-6 %.)"""
    import numpy as np
    x, y = np.array(pairs, dtype=float).T
    lx, ly = np.log(x), np.log(y)
    candidates = [(0.0, float(np.exp(np.median(ly - lx))), 1.0)]
    if len(pairs) >= MIN_FIT and np.ptp(lx) >= 0.5:
        c, lb = np.polyfit(lx, ly, 1)
        if 0.5 <= c <= 1.5:
            candidates.append((0.0, float(np.exp(lb)), float(c)))

    def log_error(f):
        return float(np.sum((np.log(f[0] + f[1] * x ** f[2]) - ly) ** 2))
    return min(candidates, key=log_error)


def _base_time(base, q: dict, spec) -> Optional[float]:
    """``base``'s answer to the question a key records (None where it cannot be rebuilt)."""
    from flexrt.ir.datatype import DataType
    from flexrt.ir.serialize import attrs_from_json

    def shape(s):
        return TensorShape(tuple(s[0]), DataType[s[1]])
    kind = q["kind"]
    try:
        if kind in ("forward", "backward"):
            attrs = attrs_from_json(q["op"], q["attrs"])
            t = base.op_times(attrs, [shape(s) for s in q["inputs"]], [shape(s) for s in q["outputs"]], spec)
            return t.forward_s if kind == "forward" else t.backward_s
        if kind == "update":
            return base.update_time(shape(q["weight"]), spec, OptimizerKind(q["optimizer"]))
        if kind == "reduce":
            return base.reduce_time(shape(q["shape"]), int(q["n"]), spec)
        if kind == "loss":
            return loss_time(base, shape(q["shape"]), spec)
    except (FlexrtError, KeyError, TypeError, ValueError):
        return None
    return None    # fused keys: their ratio is the forward / backward one


# ---- harvest --------------------------------------------------------------------------------------

def harvest(times: MeasuredTimes, simulator, tasks: Iterable, durations: Sequence[float], optimizer,
            label: str = "") -> int:
    """Add the runtime-measured ``durations`` (seconds, per task of ``tasks``, a plan's tasks whose
    ``id`` is the task's id in ``simulator.graph``) under the keys the lowering asked its cost model
    for them. Transfers, ring steps and tasks without an action are left out. Returns how many were
    added; ``label`` names the strategy in ``times.strategies``."""
    from flexrt.simulator.fusion import fused_members, FusedGraph
    low, graph = simulator.lowering, simulator.graph
    specs = [d.spec for d in simulator.machine.devices]
    parts = defaultdict(int)
    for entries in low.graph.parts.values():
        for key, device, _ in entries:
            parts[(key, device)] += 1
    added = 0
    for t, seconds in zip(tasks, durations):
        a = t.action
        if a is None or not 0 <= t.device < len(specs) or not seconds > 0:
            continue
        spec = specs[t.device].name
        task = graph.task(t.id)
        key = None
        if isinstance(a, (Forward, Backward)) and task.node:
            lay = low.layout(task.node)
            attrs, ins, outs = lay.classes[lay.piece_class[task.piece]]
            key = op_key("forward" if isinstance(a, Forward) else "backward", attrs, ins, outs, spec)
        elif isinstance(a, Update):
            key = update_key(_buf_shape(a.weight), optimizer, spec)
        elif isinstance(a, Sum):
            key = reduce_key(_buf_shape(a.dst), parts[(a.dst.key, a.dst.device)], spec)
        elif isinstance(a, Loss):
            key = loss_key(_buf_shape(a.output), spec)
        elif isinstance(a, Fused) and isinstance(graph, FusedGraph):
            group = graph.plan.groups[a.group]
            members = fused_members(low, [m.node for m in a.members], group, task.piece)
            key = fused_key(members, group.phase, spec)
        if key is not None:
            times.add(key, float(seconds))
            added += 1
    if label:
        times.strategies.append(label)
    return added


def _buf_shape(buf) -> TensorShape:
    from flexrt.ir.datatype import DataType
    dtype = next(d for d in DataType if d.numpy_name == buf.dtype)
    return TensorShape(tuple(hi - lo for lo, hi in buf.ranges), dtype)


def _nonnegative_least_squares(A, y):
    """argmin |A x - y| over x >= 0 for a few unknowns: least squares on every subset of columns,
    the best whose solution is non-negative (zero for the columns left out)."""
    import itertools

    import numpy as np
    n = A.shape[1]
    best, best_err = np.zeros(n), float(np.sum(y ** 2))
    for size in range(1, n + 1):
        for cols in itertools.combinations(range(n), size):
            x = np.linalg.lstsq(A[:, cols], y, rcond=None)[0]
            full = np.zeros(n)
            full[list(cols)] = x
            err = float(np.sum((A @ full - y) ** 2))
            if (x >= 0).all() and err < best_err:
                best, best_err = full, err
    return best


# ---- the cost model -------------------------------------------------------------------------------

class MeasuredCostModel(CostModelWrapper):
    """``base`` with every task time a runtime-traced median where ``times`` has its key, else
    ``times.predict`` of ``base``'s time (the fit of its kind and operator), each compute task plus
    ``times.dispatch_s``. Transfers are ``base``'s (calibrated links) plus ``times.message_s``.

    Example:
        >>> cost = MeasuredCostModel(ProfiledCostModel(), MeasuredTimes.load("times.json"))  # doctest: +SKIP
    """

    not_delegated = ("times", "hits", "misses")

    @classmethod
    def linear_with(cls, base, times=None) -> bool:
        # transfers stay latency + bytes / bandwidth (the lowering's fast path) unless a time per
        # message is added to them (every overhead but the one per compute task)
        return has_linear_transfers(base) and not any(getattr(times, name, 0.0) for name in OVERHEADS[1:])

    def __init__(self, base, times: MeasuredTimes):
        if not isinstance(times, MeasuredTimes):
            raise ConfigError(f"MeasuredCostModel: times is {type(times).__name__}; expected MeasuredTimes")
        self.base, self.times = base, times
        self.name = f"measured:{getattr(base, 'name', type(base).__name__)}"
        self.hits = self.misses = 0

    def __repr__(self) -> str:
        return f"MeasuredCostModel({self.base!r}, {len(self.times)} keys, {len(self.times.fits)} fits)"

    def __reduce__(self):
        return MeasuredCostModel, (self.base, self.times)

    @property
    def task_overhead_s(self) -> float:
        """The runtime's own seconds per compute task, in every compute task's time here (a fused
        task pays it once: ``LearnedCostModel``)."""
        return self.times.dispatch_s

    def _measured(self, key: str) -> Optional[float]:
        """The table's median for ``key`` plus the time per task, or None (counted as a miss)."""
        got = self.times.get(key)
        if got is None:
            self.misses += 1
            return None
        self.hits += 1
        return got + self.times.dispatch_s

    def _answer(self, key: str, kind: str, base_time, op: Optional[str] = None) -> float:
        got = self._measured(key)
        return got if got is not None else self.times.predict(kind, op, base_time()) + self.times.dispatch_s

    def op_times(self, attrs, inputs, outputs, device: "DeviceSpec") -> OpTimes:
        base = None

        def from_base():
            nonlocal base
            base = base or self.base.op_times(attrs, inputs, outputs, device)
            return base
        op = attrs.op_type.value
        f = self._answer(op_key("forward", attrs, inputs, outputs, device.name), "forward",
                         lambda: from_base().forward_s, op)
        b = self._answer(op_key("backward", attrs, inputs, outputs, device.name), "backward",
                         lambda: from_base().backward_s, op)
        return OpTimes(f, b, "measured" if base is None else "measured+scaled")

    def update_time(self, weight: TensorShape, device: "DeviceSpec", optimizer=OptimizerKind.SGD) -> float:
        return self._answer(update_key(weight, optimizer, device.name), "update",
                            lambda: self.base.update_time(weight, device, optimizer))

    def reduce_time(self, shape: TensorShape, n: int, device: "DeviceSpec") -> float:
        return self._answer(reduce_key(shape, n, device.name), "reduce", lambda: self.base.reduce_time(shape, n, device))

    def ring_sum_time(self, shape: TensorShape, device: "DeviceSpec") -> float:
        """A ring member's in-place add of what it received (the runtime does it as it handles the
        arrival, no assembly from parts): the base's two-addend sum, plus the runtime's time per task."""
        return max(self.base.reduce_time(shape, 2, device), MIN_TASK_S) + self.times.dispatch_s

    def loss_time(self, piece: TensorShape, device: "DeviceSpec") -> float:
        return self._answer(loss_key(piece, device.name), "loss", lambda: loss_time(self.base, piece, device))

    def fused_time(self, members, phase: str, device: "DeviceSpec") -> float:
        """A fused task's traced median where it was measured; else its members' measured times
        (without their time per task) scaled by what fusing them changes in ``base`` (its fused
        time over its members' summed times: a profiled base's real fused kernel), plus the time per
        task once. (The fit of a kind, made on single operators, would misjudge a fused kernel: it
        took a profiled transformer's fused plan 40 % fast.)"""
        got = self._measured(fused_key(members, phase, device.name))
        if got is not None:
            return got
        over = self.times.dispatch_s
        own = [getattr(self.op_times(m.attrs, list(m.inputs), list(m.outputs), device), f"{phase}_s") - over
               for m in members]
        fused = getattr(self.base, "fused_time", None)
        if fused is None:
            return sum(own) + over
        alone = sum(getattr(self.base.op_times(m.attrs, list(m.inputs), list(m.outputs), device), f"{phase}_s")
                    for m in members)
        return max(sum(own) * fused(members, phase, device) / alone, MIN_TASK_S) + over

    def transfer_time(self, link: "Link", num_bytes: int) -> float:
        """The base's (the calibrated link), plus the runtime's time per message (``message_s``), plus
        ``rendezvous_s`` for a message of ``RENDEZVOUS_BYTES`` or more: every hop of a transfer is held
        at once, so the transfer takes that much longer."""
        extra = self.times.message_s + (self.times.rendezvous_s if num_bytes >= RENDEZVOUS_BYTES else 0.0)
        return self.base.transfer_time(link, num_bytes) + extra

    def receive_time(self, link: "Link", num_bytes: int) -> float:
        """The receiving device's own copy of a message over ``link`` (``Machine.copied_by_receiver``):
        the base's copy, plus the runtime's time per message and per byte received there."""
        return (receive_time(self.base, link, num_bytes) + self.times.receive_s
                + num_bytes * self.times.receive_s_per_byte)
