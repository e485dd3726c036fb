"""Named baseline strategies: what experts do by hand (FlexFlow §8.1's baselines, Unity §8).

Every function takes a model's sequential PCG and a machine and returns a
``flexrt.strategy.Strategy`` built from per-operator SOAP configurations, so a baseline
can be simulated, trained, saved, plotted and used as a search's starting point:

- ``data_parallel``: every operator split along its sample axis over all devices (re-exported);
- ``model_parallel``: whole operators (degree 1) in contiguous stages balanced by FLOPs in
  topological order, stage ``s`` on device ``s`` (classic model parallelism);
- ``one_weird_trick`` (Krizhevsky 2014): convolutions, pools and the rest data parallel, dense
  layers model parallel (their output/parameter dimension split over all devices);
- ``wu_rnn`` (Wu et al. 2016, GNMT): each layer (an embedding, an LSTM layer with all its unrolled
  steps, a dense layer; found as the operators sharing a weight) on its own GPU of a node, data
  parallel across nodes;
- ``megatron`` (Shoeybi et al. 2019): attention heads split over a node's devices, the two
  feed-forward linears split column-wise (parameter) then row-wise (reduction), other linears
  column-wise, the operators between them replicated within a node; data parallel across nodes;
- ``megatron_lm`` (Narayanan et al. 2021): Megatron-LM's 3-D parallelism with its degrees as
  arguments: tensor parallel within a node, a pipeline across nodes (``flexrt.strategy.pipeline``),
  data parallel over the rest, optionally sequence parallel;
- ``neo_dlrm`` (Mudigere et al. 2021): embedding tables whole and distributed round-robin over the
  devices (model parallel), every other operator data parallel.

An operator whose shapes do not admit the baseline's degrees on this machine falls back to a
smaller degree where the baseline names one, then to data parallelism, then to device 0, so
every baseline is valid on every machine.

Each baseline is also a registered search algorithm (``search("model-parallel", request)``: the
names of ``BASELINES`` with hyphens), scored by one full simulation, and so is ``"expert"``, the
expert strategy of the zoo model named by its ``model`` option.

Entry points: the functions above, ``BASELINES``, ``expert_strategy`` and ``expert_result``.

Example:
    >>> from flexrt.machine import load_machine                        # doctest: +SKIP
    >>> s = expert_strategy("alexnet", pcg, load_machine("flexflow_p100", 1))  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
from typing import Optional
from collections.abc import Callable, Iterable, Sequence

from flexrt.errors import ConfigError, ShapeError, StrategyError
from flexrt.ir.enums import ActiMode
from flexrt.ir.op_type import OpType
from flexrt.ir.parallel_tensor import divisors
from flexrt.ir.pcg import PCG, Node
from flexrt.ir.registry import AxisKind, SlotKind, op_def
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import Machine
from flexrt.machine.views import view_from_device_ids
from flexrt.search.api import SearchResult, fixed_result, register_algorithm
from flexrt.strategy import OpConfig, Strategy, all_axes, apply_single, data_parallel, is_compute
from flexrt.strategy.config import wiring_of
from flexrt.strategy.pipeline import batch_of, default_micro_batches, pipeline_strategy, source_of
from flexrt.strategy.recompute import checkpoint_cuts

__all__ = [
    "BASELINES",
    "EXPERTS",
    "data_parallel",
    "expert_result",
    "expert_strategy",
    "megatron",
    "megatron_best",
    "megatron_lm",
    "model_parallel",
    "neo_dlrm",
    "one_weird_trick",
    "wu_rnn",
]

# A split: (axis name, degree, device-id step between neighbouring pieces along that axis).
Split = tuple[str, int, int]


# ---- placing one operator -----------------------------------------------------------------------

def _placed(base: PCG, node: Node, machine: Machine, start: int, splits: Sequence[Split]) -> OpConfig | None:
    """The configuration putting piece ``(i_1, ..)`` on ``start + sum(i_k * step_k)``, or None when
    the degrees do not fit the operator's shapes or the pieces fall off the machine or collide."""
    degrees = {a: d for a, d, _ in splits if d > 1}
    try:
        apply_single(base, node, degrees)
    except (ShapeError, StrategyError):
        return None
    names = [a.name for a in all_axes(base, node)]
    deg = tuple(degrees.get(n, 1) for n in names)
    step = {a: s for a, _, s in splits}
    ids = [start + sum(i * step.get(n, 0) for i, n in zip(index, names))
           for index in itertools.product(*map(range, deg))]
    if max(ids) >= machine.num_devices or len(set(ids)) != len(ids):
        return None
    view = view_from_device_ids(machine, deg, ids)
    return None if view is None else OpConfig(tuple(degrees.items()), view)


class _Plan:
    """Per-operator configurations with the fallbacks every baseline shares."""

    def __init__(self, base: PCG, machine: Machine) -> None:
        self.base, self.machine = base, machine
        self.dp = data_parallel(base, machine).configs
        self.configs: dict[int, OpConfig] = {}

    def set(self, node: Node, candidates: Iterable[tuple[int, Sequence[Split]]] = ()) -> OpConfig:
        """The first candidate (start, splits) that fits; else data parallel; else device 0."""
        for start, splits in candidates:
            cfg = _placed(self.base, node, self.machine, start, splits)
            if cfg is not None:
                break
        else:
            cfg = self.dp.get(node.id) or _placed(self.base, node, self.machine, 0, ())
        self.configs[node.id] = cfg
        return cfg

    def strategy(self) -> Strategy:
        for node in _compute(self.base):
            if node.id not in self.configs:
                self.set(node)
        return Strategy.from_configs(self.base, self.configs)


def _compute(base: PCG) -> list[Node]:
    return [base.node(n) for n in base.topological_order() if is_compute(base.node(n))]


def _sample_axis(base: PCG, node: Node) -> str | None:
    return next((a.name for a in all_axes(base, node) if a.kind is AxisKind.SAMPLE), None)


def _sequence_axis(base: PCG, node: Node) -> str | None:
    """The axis splitting dimension 1 of a [batch, sequence, hidden] output: what Megatron-LM's
    sequence parallelism splits (None for other ranks)."""
    if len(base.output_shapes(node.id)[0].tensor_shape.dims) != 3:
        return None
    return next((a.name for a in all_axes(base, node)
                 if any(k == 0 and s.kind is SlotKind.SHARD and s.dim == 1 for k, s in a.outputs)), None)


def _falling(n: int) -> list[int]:
    """Divisors of ``n`` above 1, largest first: the degrees a baseline tries in turn."""
    return [d for d in sorted(divisors(n), reverse=True) if d > 1]


def _across_nodes(base: PCG, node: Node, machine: Machine) -> list[Split]:
    """The sample axis split over the nodes (one piece per node), when the machine has several."""
    s = _sample_axis(base, node)
    return [(s, machine.num_nodes, machine.devices_per_node)] if s and machine.num_nodes > 1 else []


def _node_flops(base: PCG, node: Node) -> int:
    opdef = op_def(node.op_type)
    nw = opdef.num_weights(node.attrs)
    ins = [base.shape(r).tensor_shape for r in node.inputs]
    outs = opdef.output_shapes(node.attrs, ins[:len(ins) - nw])
    return int(opdef.flops(node.attrs, ins, outs))


def _consumers(base: PCG) -> dict[int, list[Node]]:
    out: dict[int, list[Node]] = {n.id: [] for n in base.nodes}
    for n in base.nodes:
        for r in n.inputs:
            out[r.node].append(n)
    return out


# ---- the baselines ------------------------------------------------------------------------------

def model_parallel(base: PCG, machine: Machine) -> Strategy:
    """Whole operators in contiguous stages of about equal forward FLOPs, in topological order;
    stage ``s`` runs on device ``s`` (neighbouring stages on neighbouring devices)."""
    ops = _compute(base)
    plan = _Plan(base, machine)
    k = max(1, min(machine.num_devices, len(ops)))
    flops = [_node_flops(base, n) for n in ops]
    total = sum(flops)
    before = 0
    for i, (node, f) in enumerate(zip(ops, flops)):
        # the stage holding the operator's FLOP midpoint; by position where the model has no FLOPs
        frac = (before + f / 2) / total if total else (i + 0.5) / len(ops)
        before += f
        plan.set(node, [(min(k - 1, int(frac * k)), ())])
    return plan.strategy()


def one_weird_trick(base: PCG, machine: Machine) -> Strategy:
    """Krizhevsky's "one weird trick": dense layers split along their output (parameter) dimension
    over all devices, every other operator data parallel."""
    plan = _Plan(base, machine)
    for node in _compute(base):
        if node.op_type is OpType.LINEAR:
            plan.set(node, [(0, [("out", d, 1)]) for d in _falling(machine.num_devices)])
        else:
            plan.set(node)
    return plan.strategy()


def _layers(base: PCG) -> dict[int, int]:
    """Layer index of every compute operator: operators reading the same weight are one layer
    (an LSTM layer's unrolled steps, a shared embedding or dense); an operator without weights
    joins its first producer's layer, or else its first consumer's. Layers are numbered in
    topological order of their first operator."""
    key: dict[int, int] = {}      # node id -> layer key (a weight node id)
    ops = _compute(base)
    for node in ops:
        nw = op_def(node.op_type).num_weights(node.attrs)
        if nw:
            key[node.id] = node.inputs[len(node.inputs) - nw].node
    for node in ops:
        if node.id not in key:
            owner = next((key[r.node] for r in node.inputs if r.node in key), None)
            if owner is not None:
                key[node.id] = owner
    consumers = _consumers(base)
    for node in reversed(ops):
        if node.id not in key:
            owner = next((key[c.id] for c in consumers[node.id] if c.id in key), None)
            key[node.id] = owner if owner is not None else -1
    numbers: dict[int, int] = {}
    for node in ops:
        numbers.setdefault(key[node.id], len(numbers))
    return {n.id: numbers[key[n.id]] for n in ops}


def wu_rnn(base: PCG, machine: Machine) -> Strategy:
    """Wu et al.'s GNMT placement: layer ``l`` (embedding, LSTM layer, dense; all its unrolled steps)
    on GPU ``l mod devices_per_node`` of every node, the batch split across nodes."""
    plan = _Plan(base, machine)
    layer = _layers(base)
    for node in _compute(base):
        local = layer[node.id] % machine.devices_per_node
        plan.set(node, [(local, _across_nodes(base, node, machine)), (local, ())])
    return plan.strategy()


def _ffn_pairs(base: PCG) -> tuple[set[int], set[int]]:
    """Megatron's feed-forward pairs: a linear with an activation whose only consumer is a linear
    without one. Returns (first linears, second linears)."""
    consumers = _consumers(base)
    first, second = set(), set()
    for node in base.nodes:
        if node.op_type is not OpType.LINEAR or node.attrs.activation is ActiMode.AC_MODE_NONE:
            continue
        after = consumers[node.id]
        if len(after) == 1 and after[0].op_type is OpType.LINEAR and \
                after[0].attrs.activation is ActiMode.AC_MODE_NONE and after[0].inputs[0].node == node.id:
            first.add(node.id)
            second.add(after[0].id)
    return first, second


def megatron(base: PCG, machine: Machine) -> Strategy:
    """Megatron-LM's tensor model parallelism within a node and data parallelism across nodes
    (``megatron_lm`` with its defaults: the largest tensor degree that divides a node's devices and
    the attention heads, no pipeline; ``megatron_best`` tries every supported configuration).

    Attention: heads split over a node's devices (each device computes its heads and a partial
    output projection, all-reduced). Feed-forward: the first linear split column-wise (``out``),
    the second row-wise (``in``, a reduction, all-reduced). Other linears (output projections,
    classifiers) column-wise. The operators between them (dropout, residual adds, LayerNorm) are
    replicated over the node's devices (their ``replica`` axis), as Megatron runs them, wherever
    every consumer takes copies (a split operator of the node's full degree, or another replicated
    one): copies only multiply, so an operator feeding anything else is data parallel instead.
    Smaller degrees where shapes require.
    """
    return megatron_lm(base, machine)


def megatron_lm(base: PCG, machine: Machine, tensor: Optional[int] = None, pipeline: int = 1,
                micro_batches: Optional[int] = None, schedule: str = "1f1b", chunks: int = 1,
                sequence_parallel: bool = False, data: Optional[int] = None) -> Strategy:
    """Megatron-LM's 3-D parallelism (Narayanan et al., SC'21): ``tensor`` (t, default the largest of
    ``tensor_degrees`` that leaves whole pipeline blocks: a node's devices where they divide the attention heads) tensor parallel within a node, ``pipeline`` (p) stages across nodes, each a block of
    n / p devices, and data parallel over the remaining d = n / (t p).

    Tensor parallelism is ``megatron``'s: attention split on its heads, the feed-forward's first
    linear on its outputs and the second on its inputs (partial sums all-reduced), other linears
    and embedding tables on their rows (Megatron-LM's vocabulary-parallel embedding: partial sums
    all-reduced; on their outputs where the rows do not divide, as Megatron-LM pads the vocabulary); piece k of a tensor-parallel group on device block start + k, the group
    repeated d times with stride t. The operators between (LayerNorm, residual adds, dropout) are
    replicated over the group, or with ``sequence_parallel`` split over it along the sequence
    (dimension 1 of a [batch, sequence, hidden] tensor, as Megatron-LM does; the sample axis where
    the operator has no such dimension). Pipelines: ``pipeline_strategy`` with
    ``micro_batches`` (default ``default_micro_batches``: 4p where they divide the batch), ``schedule`` and ``chunks``;
    ``micro_batches`` > 1 with one stage is Megatron-LM's gradient accumulation (a one-stage
    pipeline: the micro-batches run in turn, their gradients summed). Where shapes forbid a split the
    operator is data parallel over its block. ``data`` (d, default n / (t p)) smaller than that uses
    only the first t p d devices (Megatron-LM's weak-scaling runs: one tensor group, no data
    parallelism, ``data=1``); it needs ``pipeline=1``."""
    t = _megatron_degree(base, machine, tensor, pipeline)
    n = machine.num_devices
    d = n // (t * pipeline)
    if data is not None:
        if isinstance(data, bool) or not isinstance(data, int) or not 1 <= data <= d or d % data or pipeline > 1:
            raise StrategyError(f"megatron: data parallel degree {data!r} must divide {d} (the machine's devices / "
                                f"(tensor {t} x pipeline {pipeline})) and needs pipeline 1")
        d = data
    m = micro_batches or (default_micro_batches(base, pipeline, chunks, d) if pipeline > 1 else 1)
    batch = batch_of(base)
    if isinstance(m, int) and m >= 1 and batch % m == 0 and (batch // m) % d:
        raise StrategyError(f"megatron: the batch of {batch} in {m} micro-batch(es) of {batch // m} does not divide "
                            f"over the {d} data-parallel replicas (Megatron-LM's batch is micro-batch size x "
                            f"micro-batches x replicas); give a batch that is a multiple of {m * d}"
                            + (", or fewer micro-batches" if m > 1 else "")
                            + (", or fewer replicas (more --tensor-parallel or --pipeline)" if d > 1 else ""))
    splits = _megatron_splits(base, machine, t, d, sequence_parallel)

    def place(pcg: PCG, node: Node, start: int) -> Optional[OpConfig]:
        name = source_of(node.name)[0] if pipeline > 1 or m > 1 else node.name
        # the first alternative that the operator's (micro-batch's) shapes take
        return next((cfg for alt in splits[name] if (cfg := _placed(pcg, node, machine, start, alt)) is not None), None)

    if pipeline == 1 and m == 1:
        configs = {node.id: place(base, node, 0) or data_parallel(base, machine).configs[node.id]
                   for node in _compute(base)}
        return Strategy.from_configs(base, configs)
    return pipeline_strategy(base, machine, pipeline, m, schedule, chunks=chunks, place=place,
                             stage_of=megatron_stages(base, pipeline * chunks))


def megatron_stages(base: PCG, count: int) -> Optional[dict[str, int]]:
    """Megatron-LM's pipeline stages: ``count`` (p v) stages of L / (p v) transformer layers each,
    the embedding with the first and the final norm and head with the last (Megatron-LM asserts
    that the layers divide). A layer is an attention operator with what follows it up to the next
    layer's start, and a layer starts right after the last checkpoint cut before its attention (the
    residual stream alone alive: ``recompute.checkpoint_cuts``). None where the model has no
    attention, its layers do not divide into ``count`` stages, or two layers start at one cut (no
    residual stream alone between them): ``pipeline_strategy`` then balances the stages by FLOPs."""
    wiring = wiring_of(base)
    order = list(wiring.ops)
    attention = [i for i, name in enumerate(order) if wiring.nodes[name].op_type is OpType.MULTIHEAD_ATTENTION]
    if not attention or len(attention) % count:
        return None
    cuts = set(checkpoint_cuts(wiring))
    cut_at = [i for i, name in enumerate(order) if name in cuts]
    starts = [max((c + 1 for c in cut_at if c < a), default=0) for a in attention]
    if any(b <= a for a, b in zip(starts, starts[1:])):
        return None     # layers not separated by the residual stream alone (an encoder-decoder's cross attention)
    per_stage = len(attention) // count
    stage_of, layer = {}, 0
    for i, name in enumerate(order):
        while layer + 1 < len(starts) and i >= starts[layer + 1]:
            layer += 1
        stage_of[name] = layer // per_stage
    return stage_of


def _attention_heads(base: PCG) -> set[int]:
    return {n.attrs.num_heads for n in base.nodes if n.op_type is OpType.MULTIHEAD_ATTENTION}


def tensor_degrees(base: PCG, machine: Machine) -> list[int]:
    """Megatron-LM's valid tensor-parallel degrees of ``base`` on ``machine``, largest first: the
    divisors of a node's devices that divide every attention's heads (Megatron-LM asserts
    ``num_attention_heads % tensor_model_parallel_size == 0``)."""
    heads = _attention_heads(base)
    return [t for t in sorted(divisors(machine.devices_per_node), reverse=True) if not any(h % t for h in heads)]


def megatron_best(base: PCG, machine: Machine, cost_model, optimizer: OptimizerKind = OptimizerKind.SGD,
                  pipelines: bool = True) -> SearchResult:
    """Megatron-LM at its best on ``base``: every supported (tensor t, pipeline p) configuration
    (``tensor_degrees``; p a divisor of the machine's devices / t, with ``default_micro_batches``: 4p
    where they divide the batch) scored by full simulation, the fastest returned,
    as Unity's evaluation reports Megatron (§6.2: "we explore different combinations of the
    supported parallelism degrees and report the best"). ``log.notes['configurations']`` holds
    every (t, p) tried and its simulated seconds."""
    tried: dict[str, float] = {}
    best: Optional[SearchResult] = None
    for t in tensor_degrees(base, machine):
        for p in (divisors(machine.num_devices // t) if pipelines else [1]):
            try:
                r = fixed_result("megatron", megatron_lm(base, machine, tensor=t, pipeline=p), machine, cost_model,
                                 optimizer)
            except (StrategyError, ShapeError):
                continue                  # micro-batches or stages the model's shapes cannot take
            tried[f"t{t} p{p}"] = r.cost_s
            if best is None or r.cost_s < best.cost_s:
                best = r
    if best is None:
        raise StrategyError("megatron: no tensor/pipeline configuration fits this model and machine")
    best.log.notes["configurations"] = tried
    best.log.notes["chosen"] = min(tried, key=tried.get)
    return best


def _megatron_degree(base: PCG, machine: Machine, tensor: Optional[int], pipeline: int) -> int:
    """The tensor parallel degree ``megatron_lm`` uses (``tensor``, default the largest of
    ``tensor_degrees``), checked with ``pipeline``: StrategyError saying what is valid otherwise."""
    n = machine.num_devices
    t = tensor
    if tensor is None:      # the largest valid degree that leaves whole pipeline blocks (a bad pipeline fails below)
        degrees = tensor_degrees(base, machine)
        whole = [d for d in degrees if type(pipeline) is int and pipeline >= 1 and n % (d * pipeline) == 0]
        t = (whole or degrees)[0]
    if isinstance(t, bool) or not isinstance(t, int) or t < 1 or machine.devices_per_node % t:
        raise StrategyError(f"megatron: tensor parallel degree {tensor!r} must divide the {machine.devices_per_node} "
                            f"devices of a node")
    heads = _attention_heads(base)
    if any(h % t for h in heads):
        raise StrategyError(f"megatron: tensor parallel degree {t} must divide the attention heads ({sorted(heads)}), as "
                            f"Megatron-LM requires; valid here: {', '.join(map(str, tensor_degrees(base, machine)))}")
    if isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < 1 or n % (t * pipeline):
        raise StrategyError(f"megatron: tensor {t} x pipeline {pipeline!r} does not divide the machine's {n} devices")
    return t


def megatron_shortfalls(base: PCG, machine: Machine, tensor: Optional[int] = None, pipeline: int = 1) -> dict[str, int]:
    """The operators ``megatron_lm`` means to split over the tensor group (attention, linears,
    embeddings) that ``base``'s shapes let it split only ``k < t`` ways: name -> k. Megatron-LM
    itself never meets one: it pads the vocabulary to a multiple of 128 x t
    (``--make-vocab-size-divisible-by``), where an odd vocabulary (GPT's 50,257) leaves the
    language-model head whole on one device here, and the residual stream split instead of
    replicated over the group (its consumers no longer all take copies)."""
    t = _megatron_degree(base, machine, tensor, pipeline)
    short: dict[str, int] = {}
    _megatron_splits(base, machine, t, max(1, machine.num_devices // (t * pipeline)), False, short)
    return short


def _megatron_splits(base: PCG, machine: Machine, t: int, d: int, sequence_parallel: bool,
                     short: Optional[dict] = None) -> dict[str, list]:
    """Per operator of ``base`` the splits ``megatron_lm`` gives it on a block starting at device 0:
    tensor-parallel operators first, then the others, last to first, replicated over the tensor
    group only where every consumer takes copies (a tensor-parallel operator of the group's full
    degree on its heads or outputs, or another replicated one), else data parallel over the block.
    ``short`` collects the tensor-parallel operators split fewer than ``t`` ways (name -> degree)."""
    _, second = _ffn_pairs(base)
    out: dict[str, list] = {}
    takes_copies: set[int] = set()
    for node in _compute(base):
        sample = _sample_axis(base, node)
        data = [(sample, d, t)] if sample and d > 1 else []
        if node.op_type is OpType.MULTIHEAD_ATTENTION:
            axis = "heads"
        elif node.op_type is OpType.LINEAR:
            axis = "in" if node.id in second else "out"
        elif node.op_type is OpType.EMBEDDING:
            axis = "entries"         # Megatron's vocabulary-parallel table: its rows split, partial sums all-reduced
        else:
            continue
        for k in _falling(t):            # smaller tensor degrees where shapes need, else data parallel on the block
            # rows that do not divide (Megatron-LM pads the vocabulary): the columns
            ax = "out" if axis == "entries" and node.attrs.num_entries % k else axis
            tried = [(ax, k, 1)] + data
            if _placed(base, node, machine, 0, tried) is not None:
                out[node.name] = [tried]
                if k == t and ax not in ("in", "entries"):   # those give partial sums
                    takes_copies.add(node.id)
                elif k < t and short is not None:
                    short[node.name] = k
                break
        else:
            out[node.name] = _data_splits(base, node, t * d)
            if short is not None and t > 1:      # a group of one device splits nothing short
                short[node.name] = 1
    consumers = _consumers(base)
    for node in reversed(_compute(base)):
        if node.name in out:
            continue
        sample = _sample_axis(base, node)
        data = [(sample, d, t)] if sample and d > 1 else []
        replica = [("replica", t, 1)] + data
        after = consumers[node.id]
        seq = _sequence_axis(base, node) if t > 1 else None
        by_sequence = [(seq, t, 1)] + data
        if not sequence_parallel and t > 1 and any(a.name == "replica" for a in all_axes(base, node)) and after \
                and all(c.id in takes_copies for c in after) and _placed(base, node, machine, 0, replica) is not None:
            out[node.name] = [replica]
            takes_copies.add(node.id)
        else:
            # data parallel over the block; where a micro-batch is too small for that (Megatron-LM's
            # GPT-3 runs micro-batches of one sequence) the sequence split over the group, as its
            # sequence parallelism and vocabulary-parallel loss spread the work; with
            # ``sequence_parallel``, that first (Megatron-LM's layout)
            whole, *fewer = _data_splits(base, node, t * d)
            sequence = [by_sequence] if seq is not None else []
            out[node.name] = (sequence + [whole] if sequence_parallel else [whole] + sequence) + fewer
    return out


def _data_splits(base: PCG, node: Node, width: int) -> list[list]:
    """The sample axis split over ``width`` devices, then each smaller degree, then unsplit: the
    alternatives ``megatron_lm`` places in turn (the first its shapes take)."""
    sample = _sample_axis(base, node)
    return [[(sample, k, 1)] for k in (_falling(width) if sample else ())] + [[]]


def neo_dlrm(base: PCG, machine: Machine) -> Strategy:
    """Neo's DLRM placement: embedding table ``i`` whole on device ``i mod devices`` (model parallel),
    the MLPs, interaction and everything else data parallel."""
    plan = _Plan(base, machine)
    table = 0
    for node in _compute(base):
        if node.op_type is OpType.EMBEDDING:
            plan.set(node, [(table % machine.num_devices, ())])
            table += 1
        else:
            plan.set(node)
    return plan.strategy()


BASELINES: dict[str, Callable[[PCG, Machine], Strategy]] = {
    "data_parallel": data_parallel,
    "model_parallel": model_parallel,
    "one_weird_trick": one_weird_trick,
    "wu_rnn": wu_rnn,
    "megatron": megatron,
    "megatron_lm": megatron_lm,
    "neo_dlrm": neo_dlrm,
}

# The expert baseline of each zoo model family (FlexFlow §8.1; Unity §8): zoo-name prefix -> baseline.
EXPERTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("alexnet", "vgg", "resnet", "resnext", "inception", "lenet"), "one_weird_trick"),
    (("rnnlm", "rnntc", "nmt"), "wu_rnn"),
    (("transformer", "bert"), "megatron"),
    (("dlrm", "xdl"), "neo_dlrm"),
)


def expert_name(model_name: str) -> str | None:
    """The name of the expert baseline for a zoo model (``"resnet50"`` -> ``"one_weird_trick"``), or None."""
    for prefixes, name in EXPERTS:
        if model_name.lower().startswith(prefixes):
            return name
    return None


def expert_strategy(model_name: str, base: PCG, machine: Machine) -> Strategy | None:
    """The expert-designed strategy for a zoo model: one weird trick for CNNs (alexnet, vgg,
    resnet, resnext, inception, lenet), Wu et al. for RNNs (rnnlm, rnntc, nmt, rnnlm_2step),
    Megatron-LM for transformer and bert_large, Neo for dlrm and xdl; None for other models.

    Example:
        >>> expert_strategy("mlp", pcg, machine) is None   # doctest: +SKIP
        True
    """
    name = expert_name(model_name)
    return None if name is None else BASELINES[name](base, machine)


# ---- as search algorithms -----------------------------------------------------------------------

def _fixed(name: str, build: Callable[[PCG, Machine], Strategy]) -> Callable[..., SearchResult]:
    """The search algorithm of one baseline: its strategy, scored by one full simulation."""
    def run(pcg: PCG, machine: Machine, cost_model, budget: int = 0, seed: int = 0,
            optimizer: OptimizerKind = OptimizerKind.SGD) -> SearchResult:
        return fixed_result(name, build(pcg, machine), machine, cost_model, optimizer, seed)

    run.__doc__ = f"The {name} baseline scored by full simulation (no search: the budget is unused)."
    return run


def expert_result(pcg: PCG, machine: Machine, cost_model, budget: int = 0, seed: int = 0,
                  optimizer: OptimizerKind = OptimizerKind.SGD, model: str | None = None) -> SearchResult:
    """The expert strategy of the zoo model ``model`` (:func:`expert_strategy`), scored by one
    full simulation (the "expert" algorithm; the budget is unused).

    Example:
        >>> search("expert", SearchRequest(pcg, machine, cost, options={"model": "lenet"}))  # doctest: +SKIP
    """
    families = "; ".join(f"{name} for {', '.join(prefixes)}" for prefixes, name in EXPERTS)
    if not isinstance(model, str) or not model:
        raise ConfigError(f"the expert baseline needs option 'model', the zoo model's name (experts: {families}); "
                          f"got {model!r}")
    strategy = expert_strategy(model, pcg, machine)
    if strategy is None:
        raise ConfigError(f"model {model} has no expert strategy (experts: {families}); "
                          "try the mcmc or model-parallel algorithm (--algo)")
    return fixed_result("expert", strategy, machine, cost_model, optimizer, seed)


def _register() -> None:
    for name, build in BASELINES.items():
        register_algorithm(name.replace("_", "-"), _fixed(name.replace("_", "-"), build))
    register_algorithm("expert", expert_result)


_register()
