"""Named fusion policies (DisCo §6.1's baselines) and DisCo's fully overlapped bound.

A policy is a function ``(strategy, machine, cost_model=None) -> FusionPlan`` that fuses any
strategy (data parallel or hybrid) the way a framework's fixed rules do. Every plan it returns
passes ``check_fusion``: a group is formed only where its members share devices and piece layouts
and stays convex, a bucket only over consecutive gradients replicated on the same devices with one
dtype. ``FUSION_POLICIES`` maps names to them; ``fusion_policy(name)`` looks one up.

- ``none``: the empty plan (JAX_no_fusion; what the strategy is without fusion);
- ``xla``: XLA's greedy instruction fusion (JAX_op_fusion). Operators are visited in post order
  (consumers before producers); a producer is fused into its consumer's group when it is a loop
  fusible operator (element-wise, dropout, cast, reshape, flat, transpose) and the consumer is not a
  library call (convolution, matmul, attention, LSTM, embedding: cuDNN / cuBLAS take no fused
  inputs), or when the consumer is loop fusible (an element-wise epilogue absorbs its producer:
  conv + bias + relu). A producer all of whose consumers are in the group joins it; one with other
  consumers is duplicated into the group when it is cheap element-wise (not exp, tanh, divide, ...:
  XLA's ``IsExpensive``) and left alone otherwise. The backward pass is fused too (XLA fuses the
  whole HLO module): every forward group's owned members form a backward group (where the strategy
  recomputes activations, only one that stays within one recompute segment or outside them), which is what
  delays their gradients' AllReduces (DisCo's Fig. 3);
- ``combiner``: XLA's AllReduce combiner (JAX_AllReduce_fusion): consecutive gradients in the order
  the backward pass produces them are packed into one bucket while the bucket stays within 30 MiB;
- ``horovod``: Horovod's tensor fusion: 64 MiB buckets, and Horovod's 5 ms cycle: with a cost
  model the strategy is simulated once without fusion and a bucket is also closed when its
  gradients' ready times span more than the cycle (without a cost model only the threshold);
- ``ddp``: PyTorch DDP's buckets: parameters in reverse order of definition (DDP rebuilds its
  buckets after the first iteration in the order gradients arrive, which is ``gradient_order``;
  definition order breaks ties within one operator), a bucket closed once it holds 25 MiB (the first
  one 1 MiB, DDP's first-bucket cap), no operator fusion;
- ``jax``: JAX's default (JAX_default): ``xla`` operator fusion, then the ``combiner``.

Sizes count the bytes one ring synchronizes: a weight's gradient bytes over its partition degree.
Weights that are not replicated (nothing to synchronize) end a bucket, since buckets hold
consecutive gradients.

``fully_overlapped`` is DisCo's FO bound (§6.2): computation and communication perfectly overlapped
and dependencies ignored, so the iteration takes as long as its busiest resource.

Entry points: ``FUSION_POLICIES``, ``fusion_policy``, ``apply_policy``, ``fully_overlapped``,
``FusionContext`` (the rules as cheap local queries, shared with DisCo's moves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from flexrt.errors import ConfigError
from flexrt.ir.op_type import LOOP_FUSIBLE, OpType
from flexrt.machine import Machine
from flexrt.strategy.fusion import (FusionError, FusionGroup, FusionPlan, check_acyclic, check_group_layout,
                                    ring_device_sets, gradient_order)
from flexrt.strategy.layout import Layouts
from flexrt.strategy.reshard import Reshards

MiB = 1 << 20
XLA_COMBINE_BYTES = 30 * MiB        # xla_gpu_all_reduce_combine_threshold_bytes
HOROVOD_FUSION_BYTES = 64 * MiB     # HOROVOD_FUSION_THRESHOLD
HOROVOD_CYCLE_S = 5e-3              # HOROVOD_CYCLE_TIME
DDP_BUCKET_BYTES = 25 * MiB         # bucket_cap_mb
DDP_FIRST_BUCKET_BYTES = 1 * MiB    # dist._DEFAULT_FIRST_BUCKET_BYTES

EXPENSIVE = frozenset({OpType.EXP, OpType.LOG, OpType.TANH, OpType.SIGMOID, OpType.GELU, OpType.ELU, OpType.SIN, OpType.COS,
                       OpType.RSQRT, OpType.POW, OpType.EW_DIV, OpType.SCALAR_TRUE_DIV})
CHEAP = LOOP_FUSIBLE - EXPENSIVE
LIBRARY = frozenset({OpType.CONV2D, OpType.LINEAR, OpType.BATCH_MATMUL, OpType.MULTIHEAD_ATTENTION,
                     OpType.LSH_SELF_ATTENTION, OpType.LSTM, OpType.EMBEDDING})


@dataclass(frozen=True)
class WeightInfo:
    """What bucketing needs of one weight: its rank in ``gradient_order``, the device groups its
    gradient is synchronized over, its dtype and the bytes one ring synchronizes."""

    rank: int
    rings: tuple
    dtype: object
    nbytes: int

    @property
    def replicated(self) -> bool:
        return any(len(r) >= 2 for r in self.rings)

    @property
    def key(self) -> tuple:
        return self.rings, self.dtype


class FusionContext:
    """The fusion rules of ``check_fusion`` as cheap local queries on one strategy: the compute
    producers and consumers of each operator, whether a set of operators may form a group (same
    devices, local edges; cached per edge), whether groups are acyclic, and per weight its
    bucketing facts. ``layouts`` / ``reshards`` reuse a lowering's caches."""

    def __init__(self, strategy, machine: Machine, layouts=None, reshards=None) -> None:
        self.strategy, self.machine = strategy, machine
        w = self.wiring = strategy.wiring()
        self.layouts = layouts or Layouts(machine, w)
        self.reshards = reshards or Reshards()
        self.ops = list(w.ops)
        self.position = w.position
        compute = set(self.ops)
        self.producers: dict = {}
        self.consumers: dict = {o: [] for o in self.ops}
        for c in self.ops:
            ps = sorted({w.producer[(c, i)].name for i in range(len(w.nodes[c].inputs))} & compute,
                        key=self.position.__getitem__)
            self.producers[c] = ps
            for p in ps:
                self.consumers[p].append(c)
        self._devices: dict = {}
        self._pairs: dict = {}
        self._segment: Optional[dict] = None     # recomputed operator -> its segment (``one_segment``)
        self.order = gradient_order(w)
        self.weights = {name: self._weight_info(name, rank) for name, rank in self.order}

    def op_type(self, name: str) -> OpType:
        return self.wiring.nodes[name].op_type

    def lay(self, name: str):
        return self.layouts.get(name, self.strategy.shapes(name), self.strategy.view(name))

    def devices(self, name: str) -> tuple:
        d = self._devices.get(name)
        if d is None:
            d = self._devices[name] = tuple(self.lay(name).devices)
        return d

    def pair_ok(self, a: str, b: str) -> bool:
        """Whether every edge between ``a`` and ``b`` stays on each piece's device (same devices)."""
        key = (a, b) if self.position[a] < self.position[b] else (b, a)
        ok = self._pairs.get(key)
        if ok is None:
            try:
                check_group_layout(FusionGroup(key), "pair", self.wiring, self.lay, self.reshards, self.strategy)
                ok = True
            except FusionError:
                ok = False
            self._pairs[key] = ok
        return ok

    def can_join(self, members, op: str) -> bool:
        """Whether ``op`` may join a group of ``members`` as far as layouts go (not convexity)."""
        first = next(iter(members))
        if self.devices(op) != self.devices(first):
            return False
        linked = set(self.producers[op]) | set(self.consumers[op])
        return all(self.pair_ok(op, m) for m in members if m in linked)

    def one_segment(self, ops) -> bool:
        """Whether a backward group of ``ops`` keeps the strategy's recomputation apart: none of them
        recomputed, or all in one segment (recomputed operators connected through each other). A
        backward group reaching past a segment makes the segments it touches recompute, and hold
        their activations, together (``flexrt.simulator.recompute_lowering.trigger_groups``)."""
        if self._segment is None:
            from flexrt.simulator.recompute_lowering import recompute_copies, segments
            recomputed = recompute_copies(self.strategy.with_fusion(None))
            self._segment = {o: k for k, seg in enumerate(segments(self.wiring, recomputed)) for o in seg}
        seg = {self._segment.get(o) for o in ops}
        return seg == {None} or (len(seg) == 1 and None not in seg)

    def acyclic(self, groups) -> bool:
        """Whether the groups (FusionGroups) form no cycle (``check_fusion``'s convexity rule)."""
        try:
            check_acyclic(FusionPlan(tuple(groups)), self.wiring)
            return True
        except FusionError:
            return False

    def _weight_info(self, name: str, rank: int) -> WeightInfo:
        rings = tuple(ring_device_sets(name, self.wiring, self.lay, self.reshards))
        shape = self.wiring.weight_shape[name]
        nbytes = shape.num_elements * shape.dtype.size_bytes // max(1, len(rings))
        return WeightInfo(rank, rings, shape.dtype, nbytes)


# ---- operator fusion --------------------------------------------------------------------------

def _fusible(ctx: FusionContext, p: str, c: str) -> bool:
    pt, ct = ctx.op_type(p), ctx.op_type(c)
    return (pt in LOOP_FUSIBLE and ct not in LIBRARY) or ct in LOOP_FUSIBLE


def _group(ctx: FusionContext, owned, dup=(), phase: str = "forward") -> FusionGroup:
    key = ctx.position.__getitem__
    return FusionGroup(tuple(sorted(set(owned) | set(dup), key=key)), phase, tuple(sorted(dup, key=key)))


def xla_groups(ctx: FusionContext) -> list[FusionGroup]:
    """XLA's greedy instruction fusion on ``ctx``'s strategy (module doc): forward groups, then
    their owned members as backward groups."""
    owner: dict = {}                  # op -> index of the forward group that owns it
    owned: list[list[str]] = []
    dups: list[list[str]] = []
    frozen: list[FusionGroup] = []    # current FusionGroups, for the convexity check
    for c in reversed(ctx.ops):
        gi = owner.get(c)
        if gi is None:
            gi = owner[c] = len(owned)
            owned.append([c])
            dups.append([])
            frozen.append(_group(ctx, [c]))
        for p in reversed(ctx.producers[c]):
            if p in owner or p in dups[gi] or not _fusible(ctx, p, c):
                continue
            members = owned[gi] + dups[gi]
            if not ctx.can_join(members, p):
                continue
            if all(u in owned[gi] for u in ctx.consumers[p]):
                trial = _group(ctx, owned[gi] + [p], dups[gi])
            elif ctx.op_type(p) in CHEAP:
                trial = _group(ctx, owned[gi], dups[gi] + [p])
            else:
                continue
            if not ctx.acyclic([g for g in frozen[:gi] + [trial] + frozen[gi + 1:] if len(g.ops) > 1]):
                continue
            frozen[gi] = trial
            if p in trial.owned:
                owned[gi].append(p)
                owner[p] = gi
            else:
                dups[gi].append(p)
    settled = [_settle(ctx, g, owner, gi) for gi, g in enumerate(frozen) if len(g.ops) > 1]
    forward = [g for g in settled if len(g.ops) > 1]
    if not ctx.acyclic(forward):   # a settled duplicate closed a cycle: keep the groups that do not
        kept: list = []
        for g in forward:
            if ctx.acyclic(kept + [g]):
                kept.append(g)
        forward = kept
    out = list(forward)
    for g in forward:   # the mirror of a convex forward set is convex; kept only where it stays acyclic
        if len(g.owned) > 1 and ctx.one_segment(g.owned) and \
                ctx.acyclic(out + [_group(ctx, g.owned, phase="backward")]):
            out.append(_group(ctx, g.owned, phase="backward"))
    return out


def _settle(ctx: FusionContext, g: FusionGroup, owner: dict, gi: int) -> FusionGroup:
    """A duplicated member all of whose consumers joined the group later is owned by it (or, where
    another group owns it, no longer duplicated here): duplicates need a consumer outside."""
    dup = [d for d in g.duplicate if any(u not in g.ops for u in ctx.consumers[d])]
    take = [d for d in g.duplicate if d not in dup and owner.get(d, gi) == gi]
    for d in take:
        owner[d] = gi
    return _group(ctx, list(g.owned) + take, dup)


# ---- gradient buckets -------------------------------------------------------------------------

def pack_buckets(ctx: FusionContext, cap: int, first_cap: Optional[int] = None, close_at_cap: bool = False,
                 order: Optional[list] = None, ready: Optional[dict] = None,
                 span_s: Optional[float] = None) -> list[tuple]:
    """Consecutive gradients of ``order`` (default ``gradient_order``) packed into buckets.

    A bucket holds weights synchronized over the same devices with one dtype; a weight that is not
    replicated ends it. ``close_at_cap`` False (XLA, Horovod): a weight joins while the bucket stays
    within ``cap`` bytes; True (DDP): a bucket closes once it holds ``cap`` bytes or more
    (``first_cap`` for the first). ``ready`` / ``span_s``: a bucket also closes when a weight's
    gradient is ready more than ``span_s`` after its first member's (Horovod's cycle). Buckets of
    one weight are left out (no fusion)."""
    order = [w for w, _ in ctx.order] if order is None else order
    buckets: list[tuple] = []
    cur: list[str] = []
    size = 0
    closed = 0

    def flush():
        nonlocal size, closed
        if len(cur) >= 2:
            buckets.append(tuple(cur))
        if cur:
            closed += 1
        cur.clear()
        size = 0

    for w in order:
        info = ctx.weights[w]
        if not info.replicated:
            flush()
            continue
        limit = first_cap if first_cap is not None and closed == 0 else cap
        if cur:
            head = ctx.weights[cur[0]]
            late = span_s is not None and ready is not None and ready[w] - ready[cur[0]] > span_s
            if info.key != head.key or late or (not close_at_cap and size + info.nbytes > limit):
                flush()
                limit = first_cap if first_cap is not None and closed == 0 else cap
        cur.append(w)
        size += info.nbytes
        if close_at_cap and size >= limit:
            flush()
    flush()
    return buckets


def _ddp_order(ctx: FusionContext) -> list[str]:
    """gradient_order, ties (one operator's weights) in reverse order of definition."""
    defined = {w: i for i, w in enumerate(ctx.wiring.weights)}
    return [w for w, _ in sorted(ctx.order, key=lambda x: (x[1], -defined.get(x[0], 0)))]


def gradient_ready_times(strategy, machine: Machine, cost_model) -> dict[str, float]:
    """Seconds into the unfused iteration at which each synchronized weight's gradient is ready
    (the ready time of its ring's first transfers), by one full simulation."""
    from flexrt.simulator.lowering import Lowering
    low = Lowering(machine, cost_model, detail=False, incremental=False)
    low.build(strategy.with_fusion(None))
    low.engine.simulate_full()
    ids, _, ready, _, _ = low.engine.timeline()
    at = dict(zip(ids.tolist(), ready.tolist()))
    return {w: min(at[t] for r in rings for t in r.firsts) for w, rings in low.rings.items() if rings}


# ---- the policies -----------------------------------------------------------------------------

def none_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """No fusion: the empty plan."""
    return FusionPlan(name="none")


def xla_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """XLA's operator fusion (forward and backward), no gradient buckets."""
    return FusionPlan(tuple(xla_groups(FusionContext(strategy, machine))), (), name="xla")


def combiner_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """XLA's AllReduce combiner: 30 MiB buckets of consecutive gradients."""
    return FusionPlan((), tuple(pack_buckets(FusionContext(strategy, machine), XLA_COMBINE_BYTES)), name="combiner")


def horovod_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """Horovod's tensor fusion: 64 MiB buckets; with ``cost_model``, also closed at the 5 ms cycle."""
    ctx = FusionContext(strategy, machine)
    ready = gradient_ready_times(strategy, machine, cost_model) if cost_model is not None else None
    return FusionPlan((), tuple(pack_buckets(ctx, HOROVOD_FUSION_BYTES, ready=ready, span_s=HOROVOD_CYCLE_S)),
                      name="horovod")


def ddp_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """PyTorch DDP: 25 MiB buckets (the first 1 MiB), closed once full; no operator fusion."""
    ctx = FusionContext(strategy, machine)
    buckets = pack_buckets(ctx, DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, close_at_cap=True, order=_ddp_order(ctx))
    return FusionPlan((), tuple(buckets), name="ddp")


def jax_policy(strategy, machine: Machine, cost_model=None) -> FusionPlan:
    """JAX's default: XLA's operator fusion, then the AllReduce combiner."""
    ctx = FusionContext(strategy, machine)
    return FusionPlan(tuple(xla_groups(ctx)), tuple(pack_buckets(ctx, XLA_COMBINE_BYTES)), name="jax")


FUSION_POLICIES: dict[str, Callable[..., FusionPlan]] = {
    "none": none_policy, "xla": xla_policy, "combiner": combiner_policy, "horovod": horovod_policy,
    "ddp": ddp_policy, "jax": jax_policy}


def fusion_policy(name: str) -> Callable[..., FusionPlan]:
    """The policy ``name`` (ConfigError listing the valid names otherwise)."""
    if name not in FUSION_POLICIES:
        raise ConfigError(f"unknown fusion policy {name!r}; valid: {', '.join(FUSION_POLICIES)}")
    return FUSION_POLICIES[name]


def apply_policy(name: str, strategy, machine: Machine, cost_model=None):
    """``strategy`` with the plan of policy ``name`` (replacing any plan it had)."""
    return strategy.with_fusion(fusion_policy(name)(strategy, machine, cost_model))


# ---- DisCo's fully overlapped bound -----------------------------------------------------------

def fully_overlapped(source) -> float:
    """DisCo's FO time (§6.2) in seconds: every dependency ignored and computation overlapped with
    communication perfectly, an iteration lasts as long as its busiest resource:

        max(max over compute devices of the summed times of their tasks (forward, backward,
            update, gradient sums), max over links of the summed times of their transfer hops)

    ``source`` is a task graph (``TaskGraph`` or ``FusedGraph``), a ``Simulator`` (its last
    graph) or a ``SimResult`` (its ``busy_s``: links are the entries named ``link...``). No
    schedule beats it: each device and link runs one task at a time."""
    if hasattr(source, "busy_s") and not hasattr(source, "columns"):
        links = [v for k, v in source.busy_s.items() if k.startswith("link")]
        comps = [v for k, v in source.busy_s.items() if not k.startswith("link")]
        return max([0.0] + links + comps)
    graph = source.graph if hasattr(source, "lowering") else source
    col = graph.columns()
    live = col["alive"]
    busy = np.bincount(col["device"][live], weights=col["exe"][live], minlength=graph.num_devices)
    nc = graph.num_compute_devices
    compute = float(busy[:nc].max()) if nc else 0.0
    link = float(busy[nc:].max()) if len(busy) > nc else 0.0
    return max(compute, link)
