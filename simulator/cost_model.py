"""Cost models: how long one operator piece, one weight update, one reduction and one transfer take.

One interface (``CostModel``), several implementations:

- ``AnalyticCostModel``: a roofline per phase from the device's peak FLOP/s, memory bandwidth and
  launch overhead (the machine YAML); simulates any cluster on any machine.
- ``ProfiledCostModel``: runs the operator's real forward kernel once per (operator attributes,
  piece shapes, dtype, backend, device) and caches the time on disk (FlexFlow §5.1, assumption A1);
  everything it cannot measure goes to a fallback model (analytic by default).
- ``transfer_time``: latency + bytes / bandwidth on one link (assumption A2), shared by both.

Every time is in seconds and strictly positive (the engine rejects zero-time tasks): at least the
device's launch overhead, and never below ``MIN_TASK_S``.

Entry points: ``CostModel``, ``OpTimes``, ``AnalyticCostModel``, ``ProfiledCostModel``,
``transfer_time``, ``FusedMember`` and ``fused_traffic`` (the cost of a fused task).

Example:
    >>> from flexrt.ir import TensorShape
    >>> from flexrt.ir.ops import LinearAttrs
    >>> x, w, y = TensorShape((64, 1024)), TensorShape((1024, 1024)), TensorShape((64, 1024))
    >>> t = AnalyticCostModel().op_times(LinearAttrs(1024), [x, w], [y], v100)  # doctest: +SKIP
    >>> t.forward_s < t.backward_s                                               # doctest: +SKIP
    True
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional, Protocol, Sequence, Union

from flexrt.errors import ConfigError, FlexrtError, MachineSpecError
from flexrt.ir.datatype import DataType
from flexrt.ir.costs import op_cost
from flexrt.ir.op_type import LOOP_FUSIBLE, PARALLEL_OPS, SOURCE_OPS
from flexrt.ir.registry import op_def
from flexrt.ir.serialize import attrs_to_json
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.kernels.registry import forward_kernel
from flexrt.simulator import profiling
from flexrt.simulator.profile_cache import CacheEntry, ProfileCache, canonical_json

if TYPE_CHECKING:
    from flexrt.machine import DeviceSpec, Link

log = logging.getLogger(__name__)

MIN_TASK_S = 1e-9  # floor of every compute time, for devices whose launch overhead is 0
# Passes over the weight's bytes and FLOPs per element of one optimizer step:
# sgd: w -= lr * g (read w, g; write w); momentum: v = m v + g; w -= lr v (read w, g, v; write w, v);
# adam: m, v moments, bias correction, sqrt, divide (read w, g, m, v; write w, m, v);
# rmsprop / adagrad: s = a s + b g^2 (or s += g^2); w -= lr g / (sqrt(s) + eps) (read w, g, s; write w, s).
OPTIMIZER_PASSES = {OptimizerKind.SGD: 3, OptimizerKind.MOMENTUM: 5, OptimizerKind.ADAM: 7, OptimizerKind.RMSPROP: 5,
                    OptimizerKind.ADAGRAD: 5}
OPTIMIZER_FLOPS_PER_ELEMENT = {OptimizerKind.SGD: 2, OptimizerKind.MOMENTUM: 4, OptimizerKind.ADAM: 12,
                               OptimizerKind.RMSPROP: 7, OptimizerKind.ADAGRAD: 6}
# Backward traffic relative to forward: it reads what forward read plus the output gradient and
# writes a gradient for every operand, so about twice forward's bytes.
BACKWARD_BYTES_FACTOR = 2


@dataclass(frozen=True, slots=True)
class OpTimes:
    """Seconds of one operator piece's forward and backward tasks.

    ``source`` says which model produced them: "analytic", "profiled:numpy", "profiled:cupy", or
    "fallback:<model>" with the reason in ``note``.
    """

    forward_s: float
    backward_s: float
    source: str = "analytic"
    note: str = ""

    def __post_init__(self):
        for name in ("forward_s", "backward_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"OpTimes.{name} is {v!r}; every task time must be finite and > 0 "
                                 f"(source {self.source})")


class CostModel(Protocol):
    """What the lowering asks of a cost model. Shapes are piece shapes; ``inputs`` are the data
    inputs followed by the weights."""

    name: str

    def op_times(self, attrs, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape],
                 device: "DeviceSpec") -> OpTimes: ...

    def update_time(self, weight: TensorShape, device: "DeviceSpec",
                    optimizer: OptimizerKind = OptimizerKind.SGD) -> float: ...

    def reduce_time(self, shape: TensorShape, n: int, device: "DeviceSpec") -> float: ...

    def transfer_time(self, link: "Link", num_bytes: int) -> float: ...


class CostModelWrapper:
    """A cost model that answers as ``base`` except where a subclass says otherwise: the questions of
    ``CostModel`` are passed on, any other attribute is read from ``base`` (``flush``, ``cache``,
    ``measurements`` ...) unless the subclass lists it in ``not_delegated``. Its transfers are
    linear (``has_linear_transfers``: the lowering then times hops itself) exactly when
    ``linear_with(base, ...)`` says so (by default: when ``base``'s are): the instance is then of a
    twin class that declares ``linear_transfers = True``. A subclass pickles through its constructor
    (``__reduce__``), which picks the class again.

    Example:
        >>> class Slower(CostModelWrapper):                                   # doctest: +SKIP
        ...     def op_times(self, attrs, inputs, outputs, device):
        ...         t = self.base.op_times(attrs, inputs, outputs, device)
        ...         return OpTimes(2 * t.forward_s, 2 * t.backward_s, "slower")
    """

    linear_transfers = False
    not_delegated: ClassVar[tuple] = ()
    _twins: ClassVar[dict] = {}

    def __new__(cls, base, *args, **kwargs):
        if cls.linear_with(base, *args, **kwargs):
            twin = CostModelWrapper._twins.get(cls)
            if twin is None:
                twin = CostModelWrapper._twins[cls] = type(cls.__name__, (cls,), {
                    "linear_transfers": True, "__module__": cls.__module__, "__qualname__": cls.__qualname__})
            cls = twin
        return super().__new__(cls)

    @classmethod
    def linear_with(cls, base, *args, **kwargs) -> bool:
        return has_linear_transfers(base)

    def __getattr__(self, name):
        if name == "base" or name.startswith("_") or name in self.not_delegated:
            raise AttributeError(name)   # (also: not set yet while unpickling)
        return getattr(self.base, name)

    def op_times(self, attrs, inputs, outputs, device: "DeviceSpec") -> OpTimes:
        return self.base.op_times(attrs, inputs, outputs, device)

    def update_time(self, weight: TensorShape, device: "DeviceSpec", *args, **kwargs) -> float:
        return self.base.update_time(weight, device, *args, **kwargs)

    def reduce_time(self, shape: TensorShape, n: int, device: "DeviceSpec") -> float:
        return self.base.reduce_time(shape, n, device)

    def transfer_time(self, link: "Link", num_bytes: int) -> float:
        return self.base.transfer_time(link, num_bytes)


class ScaledFusion(CostModelWrapper):
    """``base`` without its own ``fused_time``: a fused task then costs its members' own times scaled
    by the analytic model's fused / unfused ratio (``simulator.fusion.fused_piece_time``;
    ``--fused-cost analytic`` over a measured model)."""

    not_delegated = ("fused_time",)

    def __init__(self, base) -> None:
        self.base = base
        self.name = f"{getattr(base, 'name', type(base).__name__)}+analytic-fusion"

    def __reduce__(self):
        return ScaledFusion, (self.base,)


def ring_sum_time(cost, shape: TensorShape, device: "DeviceSpec") -> float:
    """A ring AllReduce member's sum of what it received into its own buffer (in place, two addends):
    ``cost.ring_sum_time`` where the model has one (a measured model: a ring's in-place add is not a
    partial sum assembled from parts), else ``cost.reduce_time(shape, 2, device)``."""
    own = getattr(cost, "ring_sum_time", None)
    return own(shape, device) if own is not None else cost.reduce_time(shape, 2, device)


def loss_time(cost, piece: TensorShape, device: "DeviceSpec") -> float:
    """A loss piece's time: ``cost.loss_time`` where the model has one (``MeasuredCostModel``), else
    the forward and backward of a softmax over it (the same passes: exp/log, a row reduction, the
    element-wise gradient; measured where ``cost`` profiles)."""
    own = getattr(cost, "loss_time", None)
    if own is not None:
        return own(piece, device)
    from flexrt.ir.ops.softmax import SoftmaxAttrs
    t = cost.op_times(SoftmaxAttrs(-1), [piece], [piece], device)
    return t.forward_s + t.backward_s


@dataclass(frozen=True, slots=True)
class FusedMember:
    """One operator piece inside a fused task (a fusion group, ``flexrt.strategy.fusion``): its
    attributes and piece shapes, which operands it reads from another member inside the task
    (``internal``: operand indices), and whether it is a recomputed duplicate (its outputs then stay
    inside the task)."""

    attrs: object
    inputs: tuple
    outputs: tuple
    internal: tuple = ()
    recomputed: bool = False
    sources: tuple = ()     # per operand: the earlier member (its output 0) it reads inside the task, or -1


ON_CHIP_BYTES = 4 << 20  # a GPU's L2 (2.75 MB on a GTX 1080 Ti, 4 MB on a T4, 6 MB on a V100): what a fused kernel keeps


def on_chip(member: FusedMember, i: int) -> bool:
    """Whether operand ``i`` of a fused task's member, made by another member, stays on chip: the
    member consumes it element by element (loop fusion: tile by tile as it is made), or the piece is
    small enough to stay whole. Otherwise (a convolution reading a large activation, a normalization
    needing all of it first) it is written and read back: the fusion saves only the launch."""
    return member.attrs.op_type in LOOP_FUSIBLE or member.inputs[i].size_bytes <= ON_CHIP_BYTES


def fused_traffic(members: Sequence[FusedMember], phase: str) -> list[tuple[float, float, DataType]]:
    """Per member of one fused task: (FLOPs, bytes it moves to and from device memory, compute dtype).
    Forward: an operand another member produced is read on chip (``on_chip``: its bytes are saved), and a
    recomputed member's outputs are never written (the task keeps them). Backward: reads and writes as
    ``BACKWARD_BYTES_FACTOR`` times forward's, less each internal edge's gradient written by one member
    and read by another (twice its bytes)."""
    out = []
    for m in members:
        cost = op_cost(m.attrs, m.inputs, m.outputs)
        internal = sum(m.inputs[i].size_bytes for i in m.internal if on_chip(m, i))
        if phase == "forward":
            moved = cost.bytes_read + cost.bytes_written - internal - (cost.bytes_written if m.recomputed else 0)
            flops = cost.forward_flops
        else:
            moved = BACKWARD_BYTES_FACTOR * (cost.bytes_read + cost.bytes_written) - 2 * internal
            flops = cost.backward_flops
        out.append((float(flops), float(max(moved, 0)), compute_dtype(m.inputs, m.outputs)))
    return out


def has_linear_transfers(cost_model) -> bool:
    """Whether ``cost_model.transfer_time(link, n)`` is ``link.latency_s + n / link.bandwidth``: its
    class (or the base that declares ``linear_transfers = True``) says so and no subclass below
    that base overrides ``transfer_time``."""
    for cls in type(cost_model).__mro__:
        if "transfer_time" in cls.__dict__ and "linear_transfers" not in cls.__dict__:
            return False  # overridden below the declaring class
        if "linear_transfers" in cls.__dict__:
            return bool(cls.__dict__["linear_transfers"])
    return False


def receive_time(cost_model, link: "Link", num_bytes: int) -> float:
    """How long the receiving device itself spends copying a message of ``num_bytes`` that arrived over
    ``link`` (a route whose last link it copies: ``Machine.copied_by_receiver``): the cost model's
    ``receive_time`` where it has one (the measured model adds the runtime's time per message and
    per byte there), else the link's latency and bytes at its bandwidth."""
    own = getattr(cost_model, "receive_time", None)
    return own(link, num_bytes) if own is not None else transfer_time(link, num_bytes)


def transfer_time(link: "Link", num_bytes: int) -> float:
    """``link.latency_s + num_bytes / link.bandwidth`` (FlexFlow's A2: bandwidth fully used); 0 bytes
    cost the latency alone.

    Example:
        >>> transfer_time(nvlink_25GBps_5us, 25_000_000)  # doctest: +SKIP
        0.001005
    """
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 0:
        raise ConfigError(f"transfer over link {link.id}: num_bytes is {num_bytes!r}; expected an int >= 0")
    if not link.bandwidth > 0:
        raise MachineSpecError(f"link {link.id} ({link.src} -> {link.dst}) has bandwidth {link.bandwidth!r} "
                               f"bytes/s; it must be > 0")
    return link.latency_s + num_bytes / link.bandwidth


def compute_dtype(inputs: Sequence[TensorShape], outputs: Sequence[TensorShape]) -> DataType:
    """The dtype whose peak FLOP/s applies: the first floating-point dtype among the outputs, then
    the inputs (an embedding's float table, not its int indices); DT_FLOAT when there is none."""
    for s in list(outputs) + list(inputs):
        if s.dtype.is_floating:
            return s.dtype
    return DataType.DT_FLOAT


def _floor(device: "DeviceSpec") -> float:
    return max(device.launch_overhead_s, MIN_TASK_S)


def _roofline(device: "DeviceSpec", flops: float, num_bytes: float, dtype: DataType,
              efficiency: float) -> float:
    """launch overhead + max(compute time, memory time), at least ``MIN_TASK_S``."""
    peak = device.flops(dtype)
    if not peak > 0:
        raise MachineSpecError(f"device {device.name}: peak FLOP/s for {dtype.name} is {peak!r}; it must be > 0")
    if not device.memory_bandwidth > 0:
        raise MachineSpecError(f"device {device.name}: memory_bandwidth is {device.memory_bandwidth!r} "
                               f"bytes/s; it must be > 0")
    busy = max(flops / (peak * efficiency), num_bytes / device.memory_bandwidth)
    return max(device.launch_overhead_s + busy, MIN_TASK_S)


def _check_efficiency(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{what} is {value!r}; expected a number in (0, 1]")
    return float(value)


# How attention is implemented, for the analytic model: "fused" keeps the [n, heads, Lq, Lk] scores on
# chip (FlashAttention, one kernel); "materialized" writes them to device memory and reads them back
# between its kernels (cuDNN's attention, Megatron-LM's before FlashAttention), which costs
# ``OpDef.intermediate_bytes`` at the memory bandwidth on top of the operator's roofline.
ATTENTION_KERNELS = ("fused", "materialized")


def intermediate_times(attrs, inputs, outputs, device: "DeviceSpec") -> tuple[float, float]:
    """(forward, backward) seconds an implementation that materializes ``attrs``'s internal tensors
    spends moving them (memory-bound kernels of their own: they add to the operator's roofline)."""
    hook = op_def(attrs.op_type).intermediate_bytes
    if hook is None:
        return 0.0, 0.0
    fwd, bwd = hook(attrs, inputs, outputs)
    return fwd / device.memory_bandwidth, bwd / device.memory_bandwidth


@dataclass(frozen=True, slots=True)
class AnalyticCostModel:
    """Roofline per phase: ``launch + max(flops / (peak(dtype) * efficiency), bytes / bandwidth)``.

    Forward uses ``op_cost``'s forward FLOPs and bytes read + written; backward its backward FLOPs
    and ``BACKWARD_BYTES_FACTOR`` (2) times forward's bytes (it reads the inputs, weights and the
    output gradient and writes the input and weight gradients). Parallelization operators and
    sources compute nothing (the lowering turns their data movement into transfers), so they cost
    the launch overhead. ``efficiency_override`` replaces every device's ``efficiency``.
    ``attention`` (``ATTENTION_KERNELS``): "materialized" adds the traffic of attention's scores
    (``intermediate_times``); "fused" (the default) keeps them on chip.

    Example:
        >>> from flexrt.ir import TensorShape
        >>> from flexrt.ir.ops import ElementUnaryAttrs
        >>> from flexrt.ir.op_type import OpType
        >>> s = TensorShape((1024, 1024))
        >>> AnalyticCostModel().op_times(ElementUnaryAttrs(OpType.RELU), [s], [s], v100)  # doctest: +SKIP
        OpTimes(forward_s=1.432e-05, backward_s=2.364e-05, source='analytic', note='')
    """

    # transfer_time(link, n) is link.latency_s + n / link.bandwidth: lowering computes hop times itself
    linear_transfers = True

    efficiency_override: Optional[float] = None
    attention: str = "fused"
    name: ClassVar[str] = "analytic"

    def __post_init__(self):
        if self.efficiency_override is not None:
            _check_efficiency(self.efficiency_override, "AnalyticCostModel.efficiency_override")
        if self.attention not in ATTENTION_KERNELS:
            raise ConfigError(f"AnalyticCostModel.attention is {self.attention!r}; valid: {', '.join(ATTENTION_KERNELS)}")

    def _intermediates(self, attrs, inputs, outputs, device) -> tuple[float, float]:
        if self.attention == "fused":
            return 0.0, 0.0
        return intermediate_times(attrs, inputs, outputs, device)

    def efficiency(self, device: "DeviceSpec") -> float:
        if self.efficiency_override is not None:
            return self.efficiency_override
        return _check_efficiency(device.efficiency, f"device {device.name}: efficiency")

    def op_times(self, attrs, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape],
                 device: "DeviceSpec") -> OpTimes:
        if attrs.op_type in PARALLEL_OPS or attrs.op_type in SOURCE_OPS:
            t = _floor(device)
            return OpTimes(t, t, self.name)
        cost = op_cost(attrs, inputs, outputs)
        dtype, eff = compute_dtype(inputs, outputs), self.efficiency(device)
        moved = cost.bytes_read + cost.bytes_written
        fwd, bwd = self._intermediates(attrs, inputs, outputs, device)
        return OpTimes(_roofline(device, cost.forward_flops, moved, dtype, eff) + fwd,
                       _roofline(device, cost.backward_flops, BACKWARD_BYTES_FACTOR * moved, dtype, eff) + bwd,
                       self.name)

    def fused_time(self, members: Sequence[FusedMember], phase: str, device: "DeviceSpec") -> float:
        """One fused task (DisCo's fused operator): one launch, then each member's roofline on the bytes
        it still moves (``fused_traffic``: intermediates stay on chip). Members run one after the other
        inside the kernel: one member's memory time does not hide behind another's FLOPs."""
        eff = self.efficiency(device)
        busy = sum(_roofline(device, f, b, dt, eff) - device.launch_overhead_s for f, b, dt in
                   fused_traffic(members, phase))
        busy += sum(self._intermediates(m.attrs, m.inputs, m.outputs, device)[phase != "forward"] for m in members)
        return max(device.launch_overhead_s + busy, MIN_TASK_S)

    def update_time(self, weight: TensorShape, device: "DeviceSpec",
                    optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
        """One optimizer step on one weight piece: ``OPTIMIZER_PASSES`` passes over its bytes
        (memory bound in practice) against ``OPTIMIZER_FLOPS_PER_ELEMENT`` FLOPs per element."""
        dtype = weight.dtype if weight.dtype.is_floating else DataType.DT_FLOAT
        return _roofline(device, OPTIMIZER_FLOPS_PER_ELEMENT[optimizer] * weight.num_elements,
                         OPTIMIZER_PASSES[optimizer] * weight.size_bytes, dtype, self.efficiency(device))

    def reduce_time(self, shape: TensorShape, n: int, device: "DeviceSpec") -> float:
        """Summing ``n`` partial pieces of ``shape`` into one: n - 1 adds per element, reads n pieces
        and writes one. ``n == 1`` is a no-op that still costs the launch overhead."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"reduce time of {shape}: n is {n!r}; expected an int >= 1 (pieces summed)")
        if n == 1:
            return _floor(device)
        dtype = shape.dtype if shape.dtype.is_floating else DataType.DT_FLOAT
        return _roofline(device, (n - 1) * shape.num_elements, (n + 1) * shape.size_bytes, dtype,
                         self.efficiency(device))

    def transfer_time(self, link: "Link", num_bytes: int) -> float:
        return transfer_time(link, num_bytes)


_DEFAULT_FALLBACK = AnalyticCostModel()


def derived_fused_backward(forward_s: float, members: Sequence[FusedMember], device: "DeviceSpec") -> float:
    """A fused task's backward time from its known (measured or predicted) forward time: scaled by the
    analytic model's fused backward / forward ratio, as single operators' backward times are."""
    ratio = _DEFAULT_FALLBACK.fused_time(members, "backward", device) / \
        _DEFAULT_FALLBACK.fused_time(members, "forward", device)
    return max(forward_s * ratio, MIN_TASK_S)


class ProfiledCostModel:
    """Measured forward times, cached on disk; everything else from ``fallback``.

    For each distinct (op type, attributes as canonical JSON, piece shapes, compute dtype, backend,
    device kind and name) the operator's forward kernel runs ``warmup`` times untimed and
    ``repeats`` times timed (``time.perf_counter``); the median is the forward time. There are no
    backward kernels yet (they arrive with the runtime issue), so the backward time is *derived*:
    measured forward x (analytic backward / analytic forward) on the same device; the cache entry
    records ``"backward": "derived"`` and the ratio is recomputed from the current device spec at
    every read.

    Only devices of the backend's kind are measured ("numpy" times "cpu" devices on this host;
    "cupy" times "gpu" devices when CuPy and a GPU are present). Other devices, parallelization
    operators, sources, operators without a kernel and kernels that raise go to ``fallback``; the
    result's ``source`` is then "fallback:<name>" and ``note`` says why. ``update_time``,
    ``reduce_time`` and ``transfer_time`` are the fallback's.

    Args:
        backend: "numpy" or "cupy".
        cache_path: the cache file; default ``$FLEXRT_CACHE_DIR/profile.json`` or
            ``~/.cache/flexrt/profile.json`` (see ``flexrt.simulator.profile_cache``).
        repeats, warmup: timed and untimed runs per measurement.
        fallback: the model for what is not measured.
        flush_interval_s: the least time between two writes of the cache file (``flush()`` and
            interpreter exit write the rest).

    Example:
        >>> model = ProfiledCostModel(cache_path=tmp_path / "profile.json")      # doctest: +SKIP
        >>> model.op_times(relu, [s], [s], cpu_device).source                    # doctest: +SKIP
        'profiled:numpy'
        >>> model.measurements                                                   # doctest: +SKIP
        1
    """

    # transfer_time(link, n) is link.latency_s + n / link.bandwidth: lowering computes hop times itself
    linear_transfers = True

    def __init__(self, backend: str = "numpy", cache_path=None, repeats: int = 5, warmup: int = 1,
                 fallback: CostModel = _DEFAULT_FALLBACK, flush_interval_s: float = 1.0):
        if backend not in profiling.BACKENDS:
            raise ConfigError(f"ProfiledCostModel: unknown backend {backend!r}; valid: {', '.join(profiling.BACKENDS)}")
        for what, v, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"ProfiledCostModel: {what} is {v!r}; expected an int >= {low}")
        self.backend, self.repeats, self.warmup, self.fallback = backend, repeats, warmup, fallback
        self.name = f"profiled:{backend}"
        self.cache = ProfileCache(cache_path, flush_interval_s=flush_interval_s)
        self.measurements = 0  # kernels measured by this instance (cache misses)
        self._analytic = AnalyticCostModel()
        self._memo: dict[str, CacheEntry] = {}
        self._answers: dict[tuple, OpTimes] = {}
        self._failed: dict[str, str] = {}  # key -> why its kernel failed (not retried)
        self._reported: set = set()

    def __repr__(self) -> str:
        return (f"ProfiledCostModel(backend={self.backend!r}, cache_path='{self.cache.path}', "
                f"repeats={self.repeats}, warmup={self.warmup}, fallback={self.fallback!r})")

    def flush(self) -> None:
        """Write pending measurements to the cache file now."""
        self.cache.flush()

    def op_times(self, attrs, inputs: Sequence[TensorShape], outputs: Sequence[TensorShape],
                 device: "DeviceSpec") -> OpTimes:
        try:  # the simulator asks again and again for the same pieces: answer from memory
            fast = (attrs, tuple(inputs), tuple(outputs), device)
            return self._answers[fast]
        except TypeError:  # something unhashable: take the long way
            return self._op_times(attrs, inputs, outputs, device)
        except KeyError:
            pass
        t = self._answers[fast] = self._op_times(attrs, inputs, outputs, device)
        return t

    def _op_times(self, attrs, inputs, outputs, device) -> OpTimes:
        reason = self._why_not_measured(attrs, device)
        if reason is not None:
            return self._fall_back(attrs, inputs, outputs, device, reason)
        dtype = compute_dtype(inputs, outputs)
        try:
            key = {"op": attrs.op_type.value, "attrs": attrs_to_json(attrs),
                   "inputs": [[list(s.dims), s.dtype.name] for s in inputs],
                   "outputs": [[list(s.dims), s.dtype.name] for s in outputs],
                   "dtype": dtype.name, "backend": self.backend,
                   "device": {"kind": device.kind, "name": device.name}}
            memo_key = canonical_json(key)
        except (FlexrtError, TypeError, ValueError) as e:
            return self._fall_back(attrs, inputs, outputs, device, f"attributes are not JSON ({e})")
        if memo_key in self._failed:
            return self._fall_back(attrs, inputs, outputs, device, self._failed[memo_key])
        entry = self._memo.get(memo_key) or self.cache.get(key)
        if entry is None:
            entry = self._measure(attrs, inputs, outputs, device)
            if isinstance(entry, str):
                self._failed[memo_key] = entry
                return self._fall_back(attrs, inputs, outputs, device, entry, warn_once=attrs.op_type)
            self.cache.put(key, entry)
        self._memo[memo_key] = entry
        backward = entry.backward_s
        if entry.backward == "derived":
            backward = entry.forward_s * self._backward_ratio(attrs, inputs, outputs, device)
        return OpTimes(entry.forward_s, max(backward, MIN_TASK_S), self.name)

    def fused_time(self, members: Sequence[FusedMember], phase: str, device: "DeviceSpec") -> float:
        """A fused task measured: its members' forward kernels run as the runtime runs the fused task
        (one numexpr expression for an element-wise chain, else one after the other, internal operands
        fed from the members that make them), cached like single operators. Backward is derived by
        the analytic fused backward / forward ratio. What cannot be measured here goes to the
        fallback's ``fused_time`` (or its members' times scaled by the analytic fusion ratio)."""
        reason = next((r for r in (self._why_not_measured(m.attrs, device) for m in members) if r), None)
        if reason is None:
            try:
                key = {"fused": [{"op": m.attrs.op_type.value, "attrs": attrs_to_json(m.attrs),
                                  "inputs": [[list(x.dims), x.dtype.name] for x in m.inputs],
                                  "outputs": [[list(x.dims), x.dtype.name] for x in m.outputs],
                                  "sources": list(m.sources), "recomputed": m.recomputed} for m in members],
                       "backend": self.backend, "device": {"kind": device.kind, "name": device.name}}
                memo_key = canonical_json(key)
            except (FlexrtError, TypeError, ValueError) as e:
                reason = f"attributes are not JSON ({e})"
        if reason is not None:
            log.info("%s: fused task not measured: %s", self.name, reason)
            if hasattr(self.fallback, "fused_time"):
                return self.fallback.fused_time(members, phase, device)
            return self._analytic.fused_time(members, phase, device)
        entry = self._memo.get(memo_key) or self.cache.get(key)
        if entry is None:
            be = profiling.backend(self.backend)
            try:
                samples = profiling.time_fused(be, members, self.repeats, self.warmup)
            except Exception as e:  # a member kernel that rejects these shapes must not stop a search
                log.info("%s: fused task failed (%s: %s); analytic time", self.name, type(e).__name__, e)
                return self._analytic.fused_time(members, phase, device)
            self.measurements += 1
            forward = max(profiling.median(samples), MIN_TASK_S)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            entry = CacheEntry(forward, forward, "derived", self.repeats, self.warmup, stamp)
            self.cache.put(key, entry)
        self._memo[memo_key] = entry
        return entry.forward_s if phase == "forward" else derived_fused_backward(entry.forward_s, members, device)

    def update_time(self, weight: TensorShape, device: "DeviceSpec",
                    optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
        return self.fallback.update_time(weight, device, optimizer)

    def reduce_time(self, shape: TensorShape, n: int, device: "DeviceSpec") -> float:
        return self.fallback.reduce_time(shape, n, device)

    def transfer_time(self, link: "Link", num_bytes: int) -> float:
        return transfer_time(link, num_bytes)

    def _why_not_measured(self, attrs, device: "DeviceSpec") -> Optional[str]:
        op = attrs.op_type
        if op in PARALLEL_OPS:
            return f"{op.value} is a parallelization operator (its data movement is the lowering's)"
        if op in SOURCE_OPS:
            return f"{op.value} is a source"
        want = profiling.DEVICE_KIND_OF_BACKEND[self.backend]
        if device.kind != want:
            return f"backend {self.backend} profiles {want} devices; {device.name} is a {device.kind}"
        unavailable = profiling.backend_unavailable(self.backend)
        if unavailable is not None:
            return f"backend {self.backend} is unavailable: {unavailable}"
        try:
            forward_kernel(op)
        except FlexrtError:
            return f"{op.value} has no forward kernel"
        return None

    def _measure(self, attrs, inputs, outputs, device) -> Union[CacheEntry, str]:
        """A fresh measurement, or why the kernel could not run."""
        be = profiling.backend(self.backend)
        try:
            operands = profiling.make_operands(be, attrs, inputs)
            samples = profiling.time_forward(be, attrs, operands, self.repeats, self.warmup)
        except Exception as e:  # a kernel that rejects these piece shapes must not stop a search
            return f"the {attrs.op_type.value} kernel failed on {', '.join(map(str, inputs))} ({type(e).__name__}: {e})"
        self.measurements += 1
        forward = max(profiling.median(samples), MIN_TASK_S)
        backward = forward * self._backward_ratio(attrs, inputs, outputs, device)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return CacheEntry(forward, max(backward, MIN_TASK_S), "derived", self.repeats, self.warmup, stamp)

    def _backward_ratio(self, attrs, inputs, outputs, device) -> float:
        t = self._analytic.op_times(attrs, inputs, outputs, device)
        return t.backward_s / t.forward_s

    def _fall_back(self, attrs, inputs, outputs, device, reason: str, warn_once=None) -> OpTimes:
        """The fallback's times; a kernel failure warns once per op type, the expected cases
        (other device kinds, parallel ops) are logged once per reason at INFO."""
        once = ("warn", warn_once) if warn_once is not None else ("log", reason)
        if once not in self._reported:
            self._reported.add(once)
            if warn_once is not None:
                warnings.warn(f"{self.name}: {reason}; using the {self.fallback.name} cost model", stacklevel=3)
            else:
                log.info("%s: %s; using the %s cost model", self.name, reason, self.fallback.name)
        t = self.fallback.op_times(attrs, inputs, outputs, device)
        return dataclasses.replace(t, source=f"fallback:{self.fallback.name}", note=reason)

