"""Training samples for the learned fused-operator cost model (DisCo §5.2, §6.5).

DisCo trains its Fused Op Estimator on fused operators generated at random in real models: pick an
operator, fuse it with one of its predecessors (the producer of one of its operands), then fuse the
growing group with one of *its* predecessors a random number of times. Each sample is labelled with
the fused kernel's measured time on this host.

- ``random_groups(strategy, machine, rng, count, max_size)``: forward ``FusionGroup``s grown that
  way, each valid on its own (``check_fusion`` with a one-group plan); invalid ones (a group that is
  not convex, members on other devices or piece layouts) are skipped. A grown member that also feeds
  operators outside the group is sometimes recomputed instead (duplicate fusion, DisCo's (ii)).
- ``group_members(lowering, group, piece=0)``: the group's ``FusedMember``s for one piece, as
  ``FusedGraph`` builds them (operators in model order, internal operands and their sources).
- ``collect(strategy, machine, cost, spec, count, seed, model_name)``: ``FusedSample``s labelled with
  ``cost.fused_time(members, "forward", spec)`` and the members' own ``op_times(...).forward_s``;
  with a ``ProfiledCostModel`` both are measured once and then read from its profile cache.

Only compute operators with a forward kernel join a group (a group the profiler cannot run would be
labelled by the analytic fallback, not by a measurement).
"""

from __future__ import annotations

import random
from typing import Callable, Optional

from flexrt.errors import ConfigError, FlexrtError
from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS
from flexrt.kernels.registry import forward_kernel
from flexrt.simulator.cost_model import FusedMember
from flexrt.simulator.fusion import fused_members
from flexrt.strategy.fusion import FusionError, FusionGroup, FusionPlan, check_fusion

MAX_SIZE = 6            # members of a generated group at most (our operators are coarse: DisCo's HLO ops are not)
DUPLICATE_SHARE = 0.25  # chance that a grown member feeding outside the group is recomputed instead
TRIES_PER_GROUP = 20    # attempts per wanted group before the generator gives up on a model


def _fusible(wiring) -> list[str]:
    """Compute operators (model order) whose forward kernel the profiler can run."""
    out = []
    for o in wiring.ops:
        op = wiring.nodes[o].op_type
        if op in PARALLEL_OPS or op in SOURCE_OPS:
            continue
        try:
            forward_kernel(op)
        except FlexrtError:
            continue
        out.append(o)
    return out


def _predecessors(wiring, members, allowed: set) -> list[str]:
    """Producers of the members' operands that are fusible operators outside the group (model order)."""
    seen = set()
    for c in members:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)].name
            if p in allowed and p not in members:
                seen.add(p)
    return sorted(seen, key=wiring.position.__getitem__)


def _grow(wiring, rng: random.Random, fusible: list, allowed: set, max_size: int) -> Optional[FusionGroup]:
    """One group grown from a random operator by fusing predecessors; None when the operator has none."""
    root = fusible[rng.randrange(len(fusible))]
    members = [root]
    target = rng.randint(2, max_size)
    while len(members) < target:
        preds = _predecessors(wiring, members, allowed)
        if not preds:
            break
        members.append(preds[rng.randrange(len(preds))])
    if len(members) < 2:
        return None
    group = set(members)
    dups = tuple(o for o in members[1:]
                 if any(c not in group for c, _ in wiring.consumers.get(o, ())) and rng.random() < DUPLICATE_SHARE)
    order = tuple(sorted(members, key=wiring.position.__getitem__))
    return FusionGroup(order, "forward", tuple(sorted(dups, key=wiring.position.__getitem__)))


def random_groups(strategy, machine, rng: random.Random, count: int, max_size: int = MAX_SIZE) -> list[FusionGroup]:
    """``count`` distinct valid forward groups of 2..``max_size`` operators of ``strategy`` (fewer when
    the model has fewer: the generator stops after ``TRIES_PER_GROUP`` x ``count`` attempts).
    Deterministic for the state of ``rng``."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"random_groups: count is {count!r}; expected an int >= 0")
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 2:
        raise ConfigError(f"random_groups: max_size is {max_size!r}; expected an int >= 2 (a group fuses two or more)")
    from flexrt.strategy.layout import Layouts
    from flexrt.strategy.reshard import Reshards
    wiring = strategy.wiring()
    fusible = _fusible(wiring)
    if not fusible:
        return []
    allowed = set(fusible)
    layouts, reshards = Layouts(machine, wiring), Reshards()
    out: list[FusionGroup] = []
    seen: set = set()
    for _ in range(TRIES_PER_GROUP * count):
        if len(out) == count:
            break
        g = _grow(wiring, rng, fusible, allowed, max_size)
        if g is None or (g.ops, g.duplicate) in seen:
            continue
        seen.add((g.ops, g.duplicate))
        try:
            check_fusion(strategy, FusionPlan((g,)), machine, layouts, reshards)
        except FusionError:
            continue
        out.append(g)
    return out


def group_members(lowering, group: FusionGroup, piece: int = 0) -> list[FusedMember]:
    """The ``FusedMember``s of ``group``'s fused task on piece ``piece`` of ``lowering``'s strategy:
    members in model order, each with its piece's attributes and shapes, the operands it reads from an
    earlier member (``internal``, ``sources``) and whether it is a recomputed duplicate. The same
    construction as ``FusedGraph`` (``fusion.fused_members``, forward phase)."""
    order = sorted(group.ops, key=lowering.wiring.position.__getitem__)
    for o in order:
        count = len(lowering.layout(o).piece_class)
        if not 0 <= piece < count:
            raise ConfigError(f"group_members: piece {piece} of {o}; it has pieces 0..{count - 1}")
    return fused_members(lowering, order, group, piece)


def _sample_class():
    try:
        from flexrt.simulator.fused_model import FusedSample
    except ImportError as e:   # the model module arrives with the learned cost model
        raise ConfigError(f"fused samples need flexrt.simulator.fused_model.FusedSample ({e})") from None
    return FusedSample


MIN_LABEL_S = 1e-9     # a measured time of 0 (a timer's resolution) still labels a sample


def _measurable(cost, members, spec) -> bool:
    """Whether ``cost`` profiles every member here (a ``ProfiledCostModel`` whose backend runs them)."""
    why = getattr(cost, "_why_not_measured", None)
    return why is not None and hasattr(cost, "backend") and all(why(m.attrs, spec) is None for m in members)


def collect(strategy, machine, cost, spec, count: int, seed: int, model_name: str,
            max_size: int = MAX_SIZE, progress: Optional[Callable[[int], None]] = None, sample_cls=None,
            paired: bool = False) -> list:
    """Up to ``count`` ``FusedSample``s of ``strategy`` on ``machine``: random groups (``random_groups``
    with ``random.Random(seed)``), piece 0 of each, labelled by ``cost.fused_time(members, "forward",
    spec)``, with each member's ``cost.op_times(...).forward_s``. With ``paired`` (and a profiling
    ``cost``: its backend, repeats and warmup) the members and the fused task are instead timed
    back to back in rounds (``profiling.time_group``), not taken from the profile cache, so that a
    sample's two sides see the same host state. ``progress(n)`` is called after each sample.
    ``sample_cls`` replaces ``FusedSample`` (tests)."""
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.simulator.lowering import Lowering
    make = sample_cls or _sample_class()
    groups = random_groups(strategy, machine, random.Random(seed), count, max_size)
    low = Lowering(machine, AnalyticCostModel(), detail=False, incremental=False)  # layouts only: no measuring
    low.build(strategy)
    out = []
    for g in groups:
        members = tuple(group_members(low, g))
        if paired and _measurable(cost, members, spec):
            from flexrt.simulator import profiling
            member_times, label = profiling.time_group(profiling.backend(cost.backend), members, cost.repeats,
                                                      cost.warmup)
            times = tuple(max(t, MIN_LABEL_S) for t in member_times)
            label = max(label, MIN_LABEL_S)
        else:
            times = tuple(float(cost.op_times(m.attrs, list(m.inputs), list(m.outputs), spec).forward_s)
                          for m in members)
            label = float(cost.fused_time(members, "forward", spec))
        if not label > 0:
            raise ConfigError(f"the cost model gave a non-positive fused time {label!r} for {', '.join(g.ops)}")
        out.append(make(members=members, member_times=times, time_s=label, model=model_name))
        if progress is not None:
            progress(1)
    return out
