"""Fusion plans (DisCo §3): which operators of a strategy run as one task, and which weight gradients
are synchronized by one collective.

A ``FusionPlan`` changes the task graph of a strategy, not its model (DESIGN.md):

- a ``FusionGroup`` runs its operators as one task per piece, in one phase. A forward group's
  outputs exist only when the group ends (non-duplicate fusion). A backward group runs its
  operators' backward passes as one task: gradients they produce for weights are ready only when
  it ends (DisCo's Fig. 3: fusing backward operators delays their AllReduce). ``duplicate`` names
  members that are recomputed inside a forward group and still run on their own for their other
  consumers (duplicate fusion, DisCo's Fig. 1): the group then reads what they read;
- a gradient bucket (a tuple of weight names) is synchronized by one ring AllReduce over the
  concatenation of its gradients, started when every member's gradient is ready. Members are
  neighbours in the order the backward pass produces gradients (``gradient_order``, DisCo §3.2).

``check_fusion`` says why a plan is not valid for a strategy on a machine, naming the group or
bucket: an unknown name, a weight or input (parameter-like) in a group, an operator in two groups
of one phase, members on other devices or another piece layout, an edge between members that moves
data across devices or sums partial pieces, a member whose pieces read nothing of an operand (a
part axis: Concat's parts, Add's operands), a cycle through the fused tasks, a bucket member that
is not replicated, is replicated on other devices, has another dtype, or is not a neighbour.

Plans are values: ``to_json`` / ``from_json`` (inside a strategy file, see ``io``) round-trip them.

Entry points: ``FusionGroup``, ``FusionPlan``, ``check_fusion`` (with its parts ``check_group_layout``,
``check_acyclic``, ``ring_device_sets``, which a search reuses), ``gradient_order``, ``FusionError``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

from flexrt.errors import StrategyError
from flexrt.inputs import check_keys, check_type, short
from flexrt.ir.op_type import OpType
from flexrt.machine import Machine

PHASES = ("forward", "backward")


class FusionError(StrategyError):
    """A fusion plan that does not fit its strategy: names the group or bucket and what is valid."""


@dataclass(frozen=True)
class FusionGroup:
    """Operators that run as one task per piece in ``phase``; ``duplicate`` members (forward only) are
    recomputed inside the group and also run on their own."""

    ops: tuple
    phase: str = "forward"
    duplicate: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "duplicate", tuple(self.duplicate))

    @property
    def owned(self) -> tuple:
        """The members whose own task the group replaces (all but the duplicated ones)."""
        return tuple(o for o in self.ops if o not in self.duplicate)

    def to_json(self) -> dict:
        out = {"ops": list(self.ops), "phase": self.phase}
        if self.duplicate:
            out["duplicate"] = list(self.duplicate)
        return out


@dataclass(frozen=True)
class FusionPlan:
    """Operator groups and gradient buckets of a strategy (empty: no fusion)."""

    groups: tuple = ()
    buckets: tuple = ()
    name: str = field(default="", compare=False)   # the policy that made it ("xla", "disco", ...), for reports

    def __post_init__(self):
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "buckets", tuple(tuple(b) for b in self.buckets))

    def __bool__(self) -> bool:
        return bool(self.groups or self.buckets)

    def to_json(self) -> dict:
        out: dict = {"groups": [g.to_json() for g in self.groups], "buckets": [list(b) for b in self.buckets]}
        if self.name:
            out["name"] = self.name
        return out

    @classmethod
    def from_json(cls, data, where: str = "fusion") -> "FusionPlan":
        """A plan from its JSON; FusionError naming the field when malformed (names are checked
        against a strategy by ``check_fusion``)."""
        check_type(data, dict, where, FusionError)
        check_keys(data, ("groups", "buckets", "name"), where, FusionError, required=("groups", "buckets"))
        groups = []
        for i, g in enumerate(check_type(data["groups"], list, f"{where}.groups", FusionError)):
            at = f"{where}.groups[{i}]"
            check_type(g, dict, at, FusionError)
            check_keys(g, ("ops", "phase", "duplicate"), at, FusionError, required=("ops", "phase"))
            ops = _names(g["ops"], f"{at}.ops")
            phase = check_type(g["phase"], str, f"{at}.phase", FusionError)
            if phase not in PHASES:
                raise FusionError(f"{at}.phase: {short(phase)}; valid: {', '.join(PHASES)}")
            groups.append(FusionGroup(ops, phase, _names(g.get("duplicate", []), f"{at}.duplicate")))
        buckets = [_names(b, f"{where}.buckets[{i}]")
                   for i, b in enumerate(check_type(data["buckets"], list, f"{where}.buckets", FusionError))]
        name = check_type(data.get("name", ""), str, f"{where}.name", FusionError)
        return cls(tuple(groups), tuple(buckets), name)


def _names(value, where: str) -> tuple:
    check_type(value, list, where, FusionError)
    for j, v in enumerate(value):
        check_type(v, str, f"{where}[{j}]", FusionError)
    return tuple(value)


# ---- what the plan may refer to -----------------------------------------------------------------

def gradient_order(wiring) -> list[tuple[str, int]]:
    """(weight, rank) in the order the backward pass completes gradients: a weight's gradient is whole
    when its earliest user's backward ends, so later users' weights come first. Weights of one rank
    (one operator's kernel and bias) complete together."""
    first = {}
    for w in wiring.weights:
        users = wiring.consumers.get(w)
        if users:
            first[w] = min(wiring.position[c] for c, _ in users)
    ranks = {p: r for r, p in enumerate(sorted(set(first.values()), reverse=True))}
    return sorted(((w, ranks[p]) for w, p in first.items()), key=lambda x: (x[1], x[0]))


def _op_kind(wiring, name: str) -> str:
    """What a name a plan gives is, where it is not a compute operator: a weight, an input, or unknown."""
    node = wiring.nodes.get(name)
    if node is None:
        return "unknown"
    return {OpType.WEIGHT: "weight", OpType.INPUT: "input"}.get(node.op_type, node.op_type.value)


def check_fusion(strategy, plan: FusionPlan, machine: Machine, layouts=None, reshards=None) -> None:
    """FusionError naming the group or bucket unless ``plan`` is valid for ``strategy`` on ``machine``
    (the module doc lists the rules). ``layouts`` / ``reshards`` reuse a lowering's caches."""
    from flexrt.strategy.layout import Layouts
    from flexrt.strategy.reshard import Reshards

    wiring = strategy.wiring()
    layouts = layouts or Layouts(machine, wiring)
    reshards = reshards or Reshards()
    ops = set(wiring.ops)
    lay = lambda n: layouts.get(n, strategy.shapes(n), strategy.view(n))  # noqa: E731
    owner_of: dict = {}
    for gi, g in enumerate(plan.groups):
        where = f"fusion group {gi} ({', '.join(g.ops[:4])}{', ...' if len(g.ops) > 4 else ''})"
        if g.phase not in PHASES:
            raise FusionError(f"{where}: phase {short(g.phase)}; valid: {', '.join(PHASES)}")
        if len(set(g.ops)) != len(g.ops):
            raise FusionError(f"{where}: an operator is listed twice")
        for o in g.ops:
            if o not in ops:
                kind = _op_kind(wiring, o)
                why = {"weight": "is a weight (parameter-like): weights are not computed and cannot fuse",
                       "input": "is a model input (parameter-like) and cannot fuse",
                       "unknown": "is not an operator of this model"}.get(kind, f"is a {kind}, not a compute operator")
                raise FusionError(f"{where}: {short(o)} {why}; compute operators: "
                                  f"{', '.join(sorted(ops)[:8])}{' ...' if len(ops) > 8 else ''}")
        if len(g.owned) < 1 or len(g.ops) < 2:
            raise FusionError(f"{where}: a group fuses at least two operators, at least one not duplicated")
        for d in g.duplicate:
            if d not in g.ops:
                raise FusionError(f"{where}: duplicate {short(d)} is not a member of the group")
            if g.phase != "forward":
                raise FusionError(f"{where}: duplicate fusion recomputes forward operators; a backward group "
                                  f"cannot duplicate {short(d)}")
            users = [c for c, _ in wiring.consumers.get(d, ())]
            if not any(c in g.ops for c in users):
                raise FusionError(f"{where}: {short(d)} feeds no member of the group; duplicate fusion recomputes a "
                                  f"producer inside the group of its consumers")
            if all(c in g.ops for c in users):
                raise FusionError(f"{where}: {short(d)} has no consumer outside the group: fuse it without "
                                  f"duplicating it")
        for o in g.owned:
            prev = owner_of.get((o, g.phase))
            if prev is not None:
                raise FusionError(f"{where}: operator {short(o)} is already in {g.phase} group {prev}")
            owner_of[(o, g.phase)] = gi
        check_group_layout(g, where, wiring, lay, reshards, strategy)
    check_acyclic(plan, wiring)
    _check_buckets(plan, strategy, wiring, lay, reshards)


def _check_one_unit(g: "FusionGroup", where: str, pipeline) -> None:
    """A pipelined strategy's group stays in one unit of its schedule: one stage, one micro-batch
    (the schedule orders other units' tasks between two units' on a device)."""
    if pipeline is None:
        return
    units = {o: pipeline.unit_of(o) for o in g.ops}
    first = units[g.ops[0]]
    for o in g.ops[1:]:
        if units[o] != first:
            raise FusionError(f"{where}: {short(o)} is in pipeline stage {units[o][0]} micro-batch {units[o][1]} and "
                              f"{short(g.ops[0])} in stage {first[0]} micro-batch {first[1]}; a pipelined strategy's "
                              f"group stays in one stage and one micro-batch")


def check_group_layout(g: FusionGroup, where: str, wiring, lay, reshards, strategy) -> None:
    _check_one_unit(g, where, getattr(strategy, "pipeline", None))
    first = lay(g.ops[0])
    for o in g.ops[1:]:
        if lay(o).devices != first.devices:
            raise FusionError(f"{where}: {short(o)} runs on devices {list(lay(o).devices)} and {short(g.ops[0])} "
                              f"on {list(first.devices)}; a group stays on one device set with one piece layout")
    members = set(g.ops)
    for o in g.ops:
        if any(hi == lo for regions in lay(o).operand_regions for r in regions for lo, hi in r.ranges):
            raise FusionError(f"{where}: {short(o)} has pieces that read nothing of an operand (a part axis: "
                              f"Concat's parts, Add's operands); such an operator runs unfused")
    for c in g.ops:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)]
            if p.name not in members:
                continue
            k = strategy.shapes(p.name).outputs[p.index].sum_degree // strategy.shapes(c).operands[i].sum_degree
            plan = reshards.get(lay(p.name), p.index, lay(c), i, k)
            if plan.reductions:
                raise FusionError(f"{where}: the edge {p.name} -> {c} sums partial pieces (a reduction across "
                                  f"devices); fuse only operators whose edges stay on each piece's device")
            for q, qdev, pc, pdev, _ in plan.moves:
                if qdev != pdev or q != pc:
                    raise FusionError(f"{where}: the edge {p.name} -> {c} moves piece {q} (device {qdev}) to piece "
                                      f"{pc} (device {pdev}); a group cannot cross devices or piece layouts")


def check_acyclic(plan: FusionPlan, wiring) -> None:
    """The (operator, phase) graph with each group's owned members contracted into one node, and each
    duplicated member feeding its group from its own producers, has no cycle."""
    ops = set(wiring.ops)
    node_of: dict = {}
    for gi, g in enumerate(plan.groups):
        for o in g.owned:
            node_of[(o, g.phase)] = ("group", gi)
    succ: dict = defaultdict(set)

    def add(a, b):
        a, b = node_of.get(a, a), node_of.get(b, b)
        if a != b:
            succ[a].add(b)

    for c in wiring.ops:
        add((c, "forward"), (c, "backward"))
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)].name
            if p not in ops:
                continue
            add((p, "forward"), (c, "forward"))
            add((c, "backward"), (p, "backward"))
    for gi, g in enumerate(plan.groups):
        for d in g.duplicate:   # the group reads what the duplicated member reads
            for i in range(len(wiring.nodes[d].inputs)):
                p = wiring.producer[(d, i)].name
                if p in ops:
                    add((p, "forward"), ("dup", gi))
            succ[("dup", gi)].add(("group", gi))
            succ[node_of.get((d, "forward"), (d, "forward"))].discard(("group", gi))
    nodes = set(succ) | {b for bs in succ.values() for b in bs}
    indeg = {n: 0 for n in nodes}
    for bs in succ.values():
        for b in bs:
            indeg[b] += 1
    ready = [n for n, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for b in succ.get(n, ()):
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    if seen != len(nodes):
        stuck = sorted(n[1] for n in nodes if indeg[n] > 0 and n[0] == "group")
        raise FusionError(f"fusion groups {stuck} form a cycle (a group is not convex: a path leaves it and comes "
                          f"back, or two groups wait on each other); split them")


def ring_device_sets(wname: str, wiring, lay, reshards) -> list[tuple]:
    users = sorted(wiring.consumers.get(wname, []), key=lambda u: wiring.position[u[0]])
    plan = reshards.weight([(lay(c), i) for c, i in users])
    return sorted(tuple(d for _, d in reps) for _, reps in plan.instances)


def _check_buckets(plan: FusionPlan, strategy, wiring, lay, reshards) -> None:
    order = dict(gradient_order(wiring))
    seen: dict = {}
    for bi, bucket in enumerate(plan.buckets):
        where = f"gradient bucket {bi} ({', '.join(bucket[:4])}{', ...' if len(bucket) > 4 else ''})"
        if len(bucket) < 2:
            raise FusionError(f"{where}: a bucket synchronizes at least two weights")
        dtypes, sets = set(), None
        for w in bucket:
            if w not in order:
                kind = _op_kind(wiring, w)
                raise FusionError(f"{where}: {short(w)} is {'an unused weight' if kind == 'weight' else 'not a weight'}"
                                  f" of this model; weights: {', '.join(sorted(order)[:8])}"
                                  f"{' ...' if len(order) > 8 else ''}")
            if w in seen:
                raise FusionError(f"{where}: weight {short(w)} is already in bucket {seen[w]}")
            seen[w] = bi
            rings = ring_device_sets(w, wiring, lay, reshards)
            if all(len(r) < 2 for r in rings):
                raise FusionError(f"{where}: weight {short(w)} is not replicated (no gradient to synchronize)")
            if sets is not None and rings != sets:
                raise FusionError(f"{where}: weight {short(w)} is replicated on {rings}, {short(bucket[0])} on "
                                  f"{sets}; a bucket is one collective over one group of devices")
            sets = rings
            dtypes.add(wiring.weight_shape[w].dtype)
        if len(dtypes) > 1:
            raise FusionError(f"{where}: the weights have dtypes {sorted(d.name for d in dtypes)}; a bucket "
                              f"concatenates gradients of one dtype")
        ranks = sorted({order[w] for w in bucket})
        gap = [w for w, r in order.items() if ranks[0] < r < ranks[-1] and w not in bucket]
        if gap:
            raise FusionError(f"{where}: not neighbours in the order the backward pass produces gradients: "
                              f"{short(gap[0])} comes between its members; buckets hold consecutive gradients")


def fusion_of(strategy) -> Optional[FusionPlan]:
    """The strategy's fusion plan, or None."""
    return getattr(strategy, "fusion", None) or None
