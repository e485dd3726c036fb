"""Pipeline parallelism as a strategy value (Unity §3.3 and §5; GPipe; PipeDream-Flush; Megatron-LM).

A pipelined strategy cuts the model's operators into stages, puts each stage on a block of devices
and splits the batch into ``m`` micro-batches that flow through the stages.

**Micro-batches are copies of the model that share its weights** (``micro_batch_pcg``). Copy ``j``
of every operator reads copy ``j`` of its operands and the model's own weight nodes, and its inputs
are rows ``j*b .. (j+1)*b`` of the batch (``b = B / m``). Lowering therefore gives every stage a
forward and a backward task per micro-batch and piece, and activation and gradient transfers
between stages per micro-batch. A weight's gradient is the sum of its copies' contributions, which
is exactly a gradient accumulated over micro-batches. It is synchronized and applied once per
iteration, after the flush. Each copy of the model's output is scored by its own loss task, on its
rows of the labels, weighted by its share of the whole batch, so the loss and every gradient are
the whole batch's. A stage may itself be data, tensor or reduction parallel, since its operators'
copies have ordinary configurations on its device block.

**A schedule is an order of those tasks per device** (``device_order``), which the lowering turns
into dependencies. The simulator and the runtime therefore run the same order:

- ``gpipe``: all forwards, then all backwards;
- ``1f1b`` (PipeDream-Flush): ``p - s - 1`` forwards to warm up stage ``s``, then one forward and one
  backward in turn, then the remaining backwards. At most ``p - s`` micro-batches' activations are
  live on stage ``s``, where GPipe holds ``m``;
- ``interleaved`` (Megatron-LM): ``v`` chunks of stages per device (stage ``c * p + b`` on device
  block ``b``), in Megatron's order. Needs ``m`` divisible by ``p``; the bubble is ``v`` times
  smaller;
- ``zb-h1`` (zero bubble, Qi et al. 2024): the backward split into input-gradient (B) and
  weight-gradient (W) tasks, the W's deferred into what would be the bubble, at 1F1B's memory
  (``_zero_bubble_order``);
- ``2bw`` (PipeDream-2BW, Narayanan et al. 2021; Unity §5's pipelines): 1F1B's order with no flush
  between iterations and two versions of the weights: iteration t's micro-batches run on the
  weights of t - 1 while the update makes t + 1's, ``W(t+1) = W(t) - lr * grad f(W(t-1))``. The
  next iteration's forwards therefore need not wait for this one's synchronization and update, and
  in steady state the pipeline never drains (``flexrt.strategy.pipeline_2bw``). Its training
  differs from one device's synchronous SGD by that one-step delay (the law compares it with one
  device under the same delayed update).

Batch statistics (batch norm) are taken per micro-batch, as in GPipe and PyTorch, so a model with
batch norm trains differently pipelined; every other operator trains to the same weights.

Entry points: ``Schedule``, ``PipelinePlan``, ``micro_batch_pcg``, ``pipeline_strategy``,
``device_order``, ``split_batch``, ``pipeline_to_json`` / ``pipeline_from_json`` (strategy files).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from flexrt.errors import FlexrtError, StrategyError
from flexrt.gc_pause import no_gc
from flexrt.inputs import listing, parse_enum, short
from flexrt.ir.costs import op_cost
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.ops import InputAttrs
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.ir.registry import op_def
from flexrt.machine import Machine
from flexrt.machine.views import check_placement
from flexrt.strategy.config import ConfigStrategy, OpConfig, data_shapes, is_compute, op_shapes, wiring_of
from flexrt.strategy.space import all_axes, config_at
from flexrt.strategy.stage_cuts import crossing_bytes, cut_stages, seconds_per_byte

SEP = ".mb"   # copy j of operator or input "x" is named "x.mb{j}"


class Schedule(enum.Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    TWO_BW = "2bw"

    @property
    def splits_backward(self) -> bool:
        """Whether the schedule orders input-gradient (B) and weight-gradient (W) tasks apart."""
        return self is Schedule.ZB_H1

    @property
    def delays_updates(self) -> bool:
        """Whether iterations overlap on double-buffered weights (PipeDream-2BW): an iteration's
        gradient updates the weights the iteration after next reads."""
        return self is Schedule.TWO_BW

    @classmethod
    def parse(cls, value) -> "Schedule":
        return parse_enum(cls, value, "pipeline schedule", StrategyError)


def copy_name(name: str, j: int) -> str:
    return f"{name}{SEP}{j}"


def source_of(copy: str) -> tuple[str, int]:
    """(original operator, micro-batch) of a copy's name (``copy_name``)."""
    name, _, j = copy.rpartition(SEP)
    return name, int(j)


@dataclass(frozen=True)
class MicroBatched:
    """The micro-batched model: ``pcg``; per original compute operator its copies' names
    (``copies``); per copied input its origin and rows (``inputs``: copy -> (input, first row, rows));
    per copy of the model's output the label rows it scores (``losses``: copy -> (first row, rows)),
    and the structural hash of the model (``source_hash``)."""

    pcg: PCG
    micro_batches: int
    copies: Mapping[str, tuple]
    inputs: Mapping[str, tuple]
    losses: Mapping[str, tuple]
    source_hash: str


def _per_micro_batch(attrs, m: int):
    """Attributes that name the batch's size, for a micro-batch: a reshape's target keeps its batch
    (merged or not) in its first dimension, which is divided by ``m`` (an inferred -1 stays -1)."""
    if attrs.op_type is OpType.RESHAPE and attrs.shape and attrs.shape[0] > 0 and attrs.shape[0] % m == 0:
        return dataclasses.replace(attrs, shape=(attrs.shape[0] // m,) + tuple(attrs.shape[1:]))
    return attrs


def batch_of(pcg: PCG) -> int:
    """The batch a pipeline splits: the first input's first dimension."""
    inputs = [n for n in pcg.nodes if n.op_type is OpType.INPUT]
    if not inputs or not inputs[0].attrs.shape.dims:
        raise StrategyError("pipelines need a model with an input whose first dimension is the batch")
    return inputs[0].attrs.shape.dims[0]


def default_micro_batches(pcg: PCG, stages: int, chunks: int = 1, replicas: int = 1) -> int:
    """The micro-batches a pipeline of ``stages`` (p) device blocks runs when none are given: 4p
    (GPipe's m >= 4p keeps the bubble (p-1)/(m+p-1) under a fifth) where they divide the batch, else
    the most below 4p that do (multiples of p where a block holds ``chunks`` > 1 stages, as the
    interleaved schedule needs). With ``replicas`` (data-parallel copies of each stage, Megatron-LM's
    d) those whose micro-batch also divides over the replicas come first, as Megatron-LM's global
    batch is micro-batch x m x d. StrategyError naming the batch where none divides it."""
    _count("pipeline stages", stages)
    batch = batch_of(pcg)
    fits = [m for m in sorted(divisors(batch), reverse=True) if m <= 4 * stages and (chunks == 1 or m % stages == 0)]
    fits = [m for m in fits if batch % (m * replicas) == 0] + [m for m in fits if batch % (m * replicas)]
    if not fits:
        raise StrategyError(f"no micro-batch count divides the batch of {batch} into multiples of the {stages} "
                            f"pipeline stages (the interleaved schedule needs them); give a batch divisible by {stages}")
    return fits[0]


# The most operator copies (micro-batches x the model's operators) a pipelined graph holds: GPT 1T's
# replica under Megatron-LM (128 layers, 512 micro-batches: 0.7 M copies, 33 M tasks, 17 GB) fits
# with room; a million micro-batches of any model would not fit a host's memory.
MAX_COPIES = 1 << 21


def micro_batch_pcg(pcg: PCG, micro_batches: int, loss_output: Optional[str] = None,
                    built: Optional[int] = None) -> MicroBatched:
    """``pcg`` (a sequential model) as ``micro_batches`` copies sharing its weights (see the module
    doc). Every input's first dimension is the batch and must divide evenly; the model's output is
    ``loss_output`` or its last operator nobody consumes. ``built`` (1 .. micro_batches) builds only
    the first copies: one micro-batch's shapes, to cost or map it, without the others."""
    m = micro_batches
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise StrategyError(f"micro-batches must be an integer >= 1, got {micro_batches!r}")
    k = m if built is None else built
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= m:
        raise StrategyError(f"built: the copies to build must be an integer in 1..{m}, got {built!r}")
    ops = sum(1 for n in pcg.nodes if n.op_type is not OpType.WEIGHT)
    if k * ops > MAX_COPIES:
        raise StrategyError(f"{m} micro-batches of a model of {ops} operators make {k * ops:,} operator copies, more "
                            f"than the {MAX_COPIES:,} flexrt builds (each becomes tasks and buffers in memory); give "
                            f"at most {max(MAX_COPIES // ops, 1):,} micro-batches")
    out, refs, copies, inputs = PCG(), {}, {}, {}
    batch = None
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type is OpType.WEIGHT:
            refs[nid] = [out.add_node(node.attrs, (), name=node.name)] * k
        elif node.op_type is OpType.INPUT:
            dims = node.attrs.shape.dims
            if batch is None:
                batch = dims[0]
            if not dims or dims[0] != batch or batch % m:
                raise StrategyError(f"input '{node.name}' {list(dims)}: its first dimension must be the batch "
                                    f"({batch}) and divide into {m} micro-batches"
                                    + (f"; micro-batch counts that divide it: {listing(divisors(batch))}"
                                       if dims and dims[0] == batch else ""))
            b = batch // m
            shape = TensorShape((b,) + tuple(dims[1:]), node.attrs.shape.dtype)
            refs[nid] = [out.add_node(InputAttrs(shape), (), name=copy_name(node.name, j)) for j in range(k)]
            inputs.update({copy_name(node.name, j): (node.name, j * b, b) for j in range(k)})
        elif not is_compute(node):
            raise StrategyError(f"operator '{node.name}' ({node.op_type.value}): micro-batching takes a sequential "
                                f"model (no parallelization operators)")
        else:
            ids = []
            attrs = _per_micro_batch(node.attrs, m)
            for j in range(k):
                operands = [TensorRef(refs[r.node][j], r.index) for r in node.inputs]
                try:
                    ids.append(out.add_node(attrs, operands, name=copy_name(node.name, j)))
                except FlexrtError as e:
                    raise StrategyError(f"operator '{node.name}' cannot run on micro-batches of {batch // m} "
                                        f"samples (its attributes fix the batch size?): {e}") from None
            refs[nid] = ids
            copies[node.name] = tuple(copy_name(node.name, j) for j in range(k))
    if batch is None:
        raise StrategyError("micro-batching needs a model with an input")
    sinks = [n.name for n in pcg.operators() if not pcg.consumers(n.id)]
    last = loss_output if loss_output is not None else (sinks[-1] if sinks else None)
    if last not in copies:
        raise StrategyError(f"loss output {last!r} is not a compute operator of the model")
    rows = pcg.node_by_name(last)
    total = pcg.shape(TensorRef(rows.id)).tensor_shape.dims[0]
    if total % m:
        raise StrategyError(f"the output of '{last}' has {total} rows: they do not divide into {m} micro-batches")
    losses = {c: (j * (total // m), total // m) for j, c in enumerate(copies[last])}
    return MicroBatched(out, m, copies, inputs, losses, pcg.structural_hash())


@dataclass(frozen=True, eq=False)
class PipelinePlan:
    """What makes a strategy pipelined: its micro-batched model (``model``), the schedule, ``stages``
    (``p``: device blocks) and ``chunks`` (``v``: stages per block, interleaved), and per original
    compute operator its stage index (``stage_of``, 0 .. p*v - 1)."""

    model: MicroBatched
    schedule: Schedule
    stages: int
    chunks: int
    stage_of: Mapping[str, int]

    @property
    def micro_batches(self) -> int:
        return self.model.micro_batches

    def unit_of(self, copy: str) -> tuple[int, int]:
        """(stage, micro-batch) of a compute operator's copy."""
        name, j = source_of(copy)
        return self.stage_of[name], j

    def in_flight(self, stage: int) -> int:
        """The most micro-batches whose activations stage ``stage`` holds at once under the schedule
        (forwards run minus backwards run, over its block's order): m for GPipe, at most p - s for
        1F1B."""
        return _in_flight(self.schedule, self.stages, self.micro_batches, self.chunks, stage)

    def holds_activations(self, copy: str) -> bool:
        """Whether a copy's activations count in the stage's static memory: the first ``in_flight``
        micro-batches' do, as many as are ever live at once (the timeline replay is exact)."""
        stage, j = self.unit_of(copy)
        return j < self.in_flight(stage)

    def describe(self) -> str:
        """One line: device blocks, chunks, micro-batches, schedule and each stage's operators."""
        stages: dict = {}
        for name, s in self.stage_of.items():
            stages.setdefault(s, []).append(name)
        spans = "; ".join(f"{s}: {ops[0]}" + (f"..{ops[-1]}" if len(ops) > 1 else "")
                          for s, ops in sorted(stages.items()))
        return (f"pipeline of {self.stages} device blocks x {self.chunks} chunk(s), {self.micro_batches} "
                f"micro-batches, schedule {self.schedule.value}; stages {spans}")

    def loss_rows(self, copy: str) -> Optional[tuple]:
        """(first row, rows, rows of the whole batch) a copy of the output scores, or None."""
        got = self.model.losses.get(copy)
        return None if got is None else (got[0], got[1], got[1] * self.micro_batches)


MAX_UNITS = 1 << 20      # micro-batches x chunks one block orders at most


def _count(what: str, value, minimum: int = 1, maximum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or \
            (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise StrategyError(f"{what} must be an integer {bound}, got {value!r}")
    return value


@functools.lru_cache(maxsize=4096)
def _in_flight(schedule, stages: int, micro_batches: int, chunks: int, stage: int) -> int:
    frees = "W" if Schedule.parse(schedule).splits_backward else "B"   # the pass after which activations go
    live = most = 0
    for phase, s, _ in device_order(schedule, stages, micro_batches, chunks, stage % stages):
        if s == stage:
            live += 1 if phase == "F" else -1 if phase == frees else 0
            most = max(most, live)
    return most


def _zero_bubble_order(p: int, m: int, stage: int) -> list:
    """ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §2.1) on stage ``i``: 1F1B's
    p - 1 - i warm-up forwards, then one forward and one B (input gradient) in turn, each B followed
    by a W (weight gradient) delayed by i micro-batches, so that every stage holds p micro-batches
    in flight (the first stage's 1F1B count) and the B's, freed of the W's, reach the first stage
    sooner; the delayed W's fill what is 1F1B's cool-down bubble. The bubble is (p-1)/(3m) of the
    busy time when F, B and W take equal time (a third of 1F1B's)."""
    i = stage
    warm = min(p - 1 - i, m)
    order = [("F", i, k) for k in range(warm)]
    w = 0

    def after_b(k: int) -> None:
        nonlocal w
        if k - i >= 0:
            order.append(("W", i, w))
            w += 1
    for k in range(m - warm):
        order += [("F", i, warm + k), ("B", i, k)]
        after_b(k)
    for k in range(m - warm, m):
        order.append(("B", i, k))
        after_b(k)
    order += [("W", i, k) for k in range(w, m)]
    return order


def device_order(schedule, stages: int, micro_batches: int, chunks: int = 1, block: int = 0) -> list[tuple]:
    """The order in which device block ``block`` runs its units: ("F", "B" or "W", stage,
    micro-batch); "W" (weight gradients apart) only where the schedule ``splits_backward``."""
    s = Schedule.parse(schedule)
    p, m, v = _count("stages", stages), _count("micro-batches", micro_batches), _count("chunks", chunks)
    b = _count("block", block, 0, p - 1)
    if m * v > MAX_UNITS:
        raise StrategyError(f"{m} micro-batches x {v} chunks is more than the {MAX_UNITS} units a device orders")
    if s is Schedule.ZB_H1:
        if v != 1:
            raise StrategyError(f"the {s.value} schedule runs one chunk of stages per device; got {v}")
        return _zero_bubble_order(p, m, b)
    if s is Schedule.INTERLEAVED:
        if v < 2 or m % p:
            raise StrategyError(f"the interleaved schedule needs 2 or more chunks per device and micro-batches "
                                f"divisible by the {p} stages; got {v} chunks and {m} micro-batches")
        total = m * v

        def unit(phase: str, k: int) -> tuple:
            c = (k // p) % v
            return phase, (c if phase == "F" else v - 1 - c) * p + b, (k // (p * v)) * p + k % p
        warm = min((p - b - 1) * 2 + (v - 1) * p, total)
    else:
        if v != 1:
            raise StrategyError(f"the {s.value} schedule runs one chunk of stages per device; got {v} "
                                f"(use the interleaved schedule)")
        total = m

        def unit(phase: str, k: int) -> tuple:
            return phase, b, k
        warm = m if s is Schedule.GPIPE else min(p - b - 1, m)
    order = [unit("F", k) for k in range(warm)]
    for k in range(total - warm):
        order += [unit("F", warm + k), unit("B", k)]
    order += [unit("B", k) for k in range(total - warm, total)]
    return order


def _flops(pcg: PCG, node) -> float:
    ins = [pcg.shape(r).tensor_shape for r in node.inputs]
    outs = [s.tensor_shape for s in pcg.output_shapes(node.id)]
    c = op_cost(node.attrs, ins, outs)
    return c.forward_flops + c.backward_flops


def _balanced_stages(pcg: PCG, count: int, weight: Optional[Callable] = None) -> dict[str, int]:
    """The compute operators in topological order cut into ``count`` contiguous stages of about
    equal weight (every stage at least one operator): ``weight(node)``, else forward + backward
    FLOPs."""
    wiring = wiring_of(pcg)
    ops = [wiring.nodes[name] for name in wiring.ops]
    if len(ops) < count:
        raise StrategyError(f"{count} pipeline stages need at least {count} operators; the model has {len(ops)}")
    weights = [max(weight(node), 1e-30) if weight is not None else max(_flops(pcg, node), 1) for node in ops]
    total, before, stage_of, prev = float(sum(weights)), 0.0, {}, -1
    for i, (node, w) in enumerate(zip(ops, weights)):
        want = int(count * (before + w / 2) / total)          # the stage its middle falls in
        prev = stage_of[node.name] = max(min(want, prev + 1, count - 1), count - (len(ops) - i))
        before += w
    return stage_of


def piece_seconds(mb: "MicroBatched", name: str, config, cost_model, spec) -> tuple[float, float, float]:
    """(forward, backward, weight update) seconds of operator ``name``'s first piece under ``config``
    on a device ``spec``, for one micro-batch (``cost_model.op_times`` and ``update_time`` on the
    piece shapes of the micro-batched model ``mb``; SGD's update)."""
    first = mb.pcg.node_by_name(mb.copies[name][0])
    shapes = op_shapes(first, data_shapes(mb.pcg, first), dict(config.degrees))
    ins = [t.piece_shape for t in shapes.operands]
    t = cost_model.op_times(first.attrs, ins, [t.piece_shape for t in shapes.outputs], spec)
    nw = op_def(first.op_type).num_weights(first.attrs)
    update = sum(cost_model.update_time(w, spec) for w in ins[len(ins) - nw:]) if nw else 0.0
    return t.forward_s, t.backward_s, update


def _time_weight(mb: "MicroBatched", machine: Machine, cost_model, config_of: Callable) -> Callable:
    """An operator's seconds in an iteration on its block (``piece_seconds`` on the first device:
    forward and backward times the micro-batches, plus its weights' updates). Memory-bound operators
    (an embedding's dense gradient, normalizations) weigh what they cost, not their FLOPs."""
    spec = machine.devices[0].spec

    def weight(node) -> float:
        f, b, update = piece_seconds(mb, node.name, config_of(node.name), cost_model, spec)
        return mb.micro_batches * (f + b) + update
    return weight


def _checked_stages(pcg: PCG, mb: "MicroBatched", stage_of, count: int) -> dict[str, int]:
    """``stage_of`` given by the caller: a stage 0..count-1 for every compute operator of ``pcg`` and
    nothing else, non-decreasing along every edge (a stage never feeds an earlier one)."""
    if not isinstance(stage_of, Mapping):
        raise StrategyError(f"stage_of: expected operator -> stage, got {type(stage_of).__name__}")
    stage_of = dict(stage_of)
    unknown = [k for k in stage_of if k not in mb.copies]
    if unknown:
        raise StrategyError(f"stage_of: {short(unknown[0])} is not a compute operator of the model; its "
                            f"operators: {listing(short(n, 30) for n in mb.copies)}")
    missing = [name for name in mb.copies if name not in stage_of]
    bad = {k: v for k, v in stage_of.items() if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < count}
    if missing or bad:
        raise StrategyError(f"stage_of: {'no stage for ' + repr(missing[0]) if missing else f'bad stages {bad}'}; "
                            f"every operator needs a stage 0..{count - 1}")
    for node in pcg.nodes:
        for ref in node.inputs if node.name in stage_of else ():
            producer = pcg.node(ref.node).name
            if stage_of.get(producer, 0) > stage_of[node.name]:
                raise StrategyError(f"stage_of: '{node.name}' (stage {stage_of[node.name]}) reads the output of "
                                    f"'{producer}' (stage {stage_of[producer]}); stages must not decrease along "
                                    f"the graph (an operator's stage >= each of its producers')")
    return {name: stage_of[name] for name in mb.copies}     # in the model's order (``describe``)


def _block_split(width: int) -> list[dict[str, int]]:
    """Data parallelism over a block of ``width`` devices, as alternatives for ``config_at``: the
    whole block, else the largest part of it that the micro-batch divides over."""
    return [{"sample": d, "dim0": d} for d in sorted(divisors(width), reverse=True)]


CUTS = ("busiest", "work")   # stage cuts under a cost model: least busiest stage (stage_cuts), or balanced work


def pipeline_strategy(pcg: PCG, machine: Machine, stages: int, micro_batches: int, schedule="1f1b",
                      chunks: int = 1, stage_of: Optional[Mapping[str, int]] = None,
                      degrees: Optional[Mapping[str, dict]] = None, loss_output: Optional[str] = None,
                      place: Optional[Callable] = None, cost_model=None, cut: str = "busiest") -> ConfigStrategy:
    """A pipelined strategy of ``pcg`` on ``machine``: ``stages`` (p) device blocks of n / p devices,
    ``chunks`` (v) stages per block, ``micro_batches`` (m). ``stage_of`` (operator -> stage, 0 ..
    p*v - 1, non-decreasing along the graph) defaults to stages of balanced FLOPs, or under ``cost_model`` (a simulator cost
    model: ``op_times``, ``update_time``) to the cuts whose busiest stage, its seconds or what crosses
    its cuts, takes least (``flexrt.strategy.stage_cuts``; ``cut="work"``: balanced seconds alone). Within a stage
    every operator is data parallel over its block (or the largest part of it its micro-batch divides
    over); ``degrees`` (operator -> degrees per axis) chooses otherwise, and ``place(pcg, node, block
    start)`` -> an ``OpConfig`` or None places an operator exactly (``node`` is its first
    micro-batch's copy in the micro-batched ``pcg``; every copy gets the same configuration)."""
    if cut not in CUTS:
        raise StrategyError(f"pipeline stage cut {cut!r}: expected one of {', '.join(CUTS)}")
    with no_gc():       # millions of small acyclic objects at scale (``flexrt.gc_pause``)
        return _pipeline_strategy(pcg, machine, stages, micro_batches, schedule, chunks, stage_of, degrees,
                                  loss_output, place, cost_model, cut)


def _pipeline_strategy(pcg, machine, stages, micro_batches, schedule, chunks, stage_of, degrees, loss_output, place,
                       cost_model, cut) -> ConfigStrategy:
    sched = Schedule.parse(schedule)
    n = machine.num_devices
    _count("pipeline stages", stages)
    if n % stages:
        raise StrategyError(f"{stages!r} pipeline stages do not divide the machine's {n} devices")
    mb = micro_batch_pcg(pcg, micro_batches, loss_output)    # micro-batches: an integer dividing the batch
    device_order(sched, stages, micro_batches, chunks)      # checks schedule and chunks
    count = stages * chunks
    width = n // stages
    at_zero: dict[str, OpConfig] = {}

    def config_for(name: str, start: int) -> OpConfig:
        first = mb.pcg.node_by_name(mb.copies[name][0])
        cfg = place(mb.pcg, first, start) if place is not None else None
        if cfg is None:
            want = (degrees or {}).get(name)
            cfg = config_at(mb.pcg, first, machine, want if want is not None else _block_split(width), start)
        return cfg

    def first_block(name: str) -> OpConfig:
        if name not in at_zero:
            at_zero[name] = config_for(name, 0)
        return at_zero[name]

    if stage_of is not None:
        stage_of = _checked_stages(pcg, mb, stage_of, count)
    elif cost_model is None:
        stage_of = _balanced_stages(pcg, count)
    else:
        weight = _time_weight(mb, machine, cost_model, first_block)
        if cut == "work":
            stage_of = _balanced_stages(pcg, count, weight)
        else:                     # the busiest stage's time least, what crosses the cuts included
            wiring = wiring_of(pcg)
            stage_of = cut_stages(wiring.ops, [weight(wiring.nodes[name]) for name in wiring.ops],
                                  crossing_bytes(wiring), count, seconds_per_byte(machine, stages))
    configs = {}
    for name, names in mb.copies.items():
        start = (stage_of[name] % stages) * width
        cfg = first_block(name) if start == 0 else config_for(name, start)
        for c in names:
            configs[mb.pcg.node_by_name(c).id] = cfg
    strategy = ConfigStrategy(mb.pcg, configs)
    return strategy.with_pipeline(PipelinePlan(mb, sched, stages, chunks, stage_of))


def pipeline_to_json(strategy, view_json: Callable) -> dict:
    """A pipelined strategy's plan as JSON: what ``pipeline_from_json`` rebuilds it from, with the
    model (``pipeline_strategy``): stages, micro-batches, schedule, chunks, each operator's stage,
    and the configuration its copies share (degrees and ``view_json`` of the view)."""
    plan = strategy.pipeline
    ops = {}
    for name, copies in plan.model.copies.items():
        cfg = strategy.configs[plan.model.pcg.node_by_name(copies[0]).id]
        ops[name] = {"degrees": dict(cfg.degrees), "view": view_json(cfg.view)}
    return {"stages": plan.stages, "micro_batches": plan.micro_batches, "schedule": plan.schedule.value,
            "chunks": plan.chunks, "stage_of": dict(plan.stage_of), "operators": ops}


_PIPELINE_FIELDS = ("stages", "micro_batches", "schedule", "chunks", "stage_of", "operators")


def pipeline_from_json(data, base: PCG, machine: Machine, where: str, view_from_json: Callable) -> ConfigStrategy:
    """The strategy ``pipeline_to_json`` described, rebuilt on ``base``; ``view_from_json(d, where,
    machine, axes)`` reads a view. StrategyError naming ``where`` and the field when it is not one."""
    if not isinstance(data, dict):
        raise StrategyError(f"{where}: expected an object with {', '.join(_PIPELINE_FIELDS)}; got "
                            f"{type(data).__name__}")
    missing = [k for k in _PIPELINE_FIELDS if k not in data]
    unknown = [k for k in data if k not in _PIPELINE_FIELDS]
    if missing or unknown:
        raise StrategyError(f"{where}: {'missing ' + ', '.join(missing) if missing else 'unknown key ' + unknown[0]}; "
                            f"valid keys: {', '.join(_PIPELINE_FIELDS)}")
    ops = _operator_entries(data["operators"], base, f"{where}.operators")
    stages = data["stages"]
    width = machine.num_devices // stages if isinstance(stages, int) and not isinstance(stages, bool) and \
        stages >= 1 else machine.num_devices

    def place(pcg, node, start):
        name = source_of(node.name)[0]
        if name not in ops:
            raise StrategyError(f"{where}.operators: no configuration for operator '{name}'")
        at = f"{where}.operators['{name}'].view"
        axes = [a.name for a in all_axes(pcg, node)]
        view = view_from_json(ops[name]["view"], at, machine, axes)
        degrees = ops[name]["degrees"]
        devices = check_placement(machine, view, tuple(degrees.get(a, 1) for a in axes), at)
        outside = sorted({d for d in devices if not start <= d < start + width})
        if outside:
            raise StrategyError(f"{at}: view {view} puts pieces on devices {outside[:8]}, outside the device block "
                                f"{start}..{start + width - 1} of its stage; valid: views within the block")
        return OpConfig(tuple(degrees.items()), view)
    try:
        return pipeline_strategy(base, machine, data["stages"], data["micro_batches"], data["schedule"],
                                 chunks=data["chunks"], stage_of=data["stage_of"], place=place)
    except FlexrtError as e:
        msg = str(e)
        raise StrategyError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def _operator_entries(ops, base: PCG, where: str) -> dict:
    """``pipeline.operators``: per compute operator of ``base`` {"degrees": {axis: degree}, "view": ...}."""
    if not isinstance(ops, dict):
        raise StrategyError(f"{where}: expected operator -> {{\"degrees\": {{axis: degree}}, \"view\": ...}}, got "
                            f"{type(ops).__name__}")
    names = [n.name for n in base.nodes if is_compute(n)]
    for name, v in ops.items():
        at = f"{where}[{short(name, 40)}]"
        if name not in names:
            raise StrategyError(f"{at}: no compute operator of that name in this model; its operators: "
                                f"{listing(short(n, 30) for n in names)}")
        if not isinstance(v, dict) or set(v) != {"degrees", "view"}:
            got = f"keys {', '.join(map(short, v))}" if isinstance(v, dict) else type(v).__name__
            raise StrategyError(f"{at}: expected {{\"degrees\": {{axis: degree}}, \"view\": ...}}, got {got}")
        if not isinstance(v["degrees"], dict):
            raise StrategyError(f"{at}.degrees must be a mapping axis -> degree, got {short(v['degrees'])}")
        for a, d in v["degrees"].items():
            if not isinstance(a, str) or isinstance(d, bool) or not isinstance(d, int) or d < 1:
                axis = a if isinstance(a, str) and len(a) <= 40 else short(a, 40)
                raise StrategyError(f"{at}.degrees.{axis} must be an integer >= 1, got {short(d)}")
    return ops


def split_batch(plan: PipelinePlan, inputs: Mapping[str, object]) -> dict:
    """The micro-batched model's inputs from the whole batch's (by the original input names); inputs
    already given per micro-batch pass through."""
    out = {}
    for copy, (name, first, rows) in plan.model.inputs.items():
        if copy in inputs:
            out[copy] = inputs[copy]
        elif name in inputs:
            out[copy] = inputs[name][first:first + rows]
    return out


__all__ = ["Schedule", "PipelinePlan", "MicroBatched", "micro_batch_pcg", "pipeline_strategy", "device_order",
           "piece_seconds", "split_batch", "copy_name", "source_of", "pipeline_to_json", "pipeline_from_json"]
