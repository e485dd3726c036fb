"""Pattern matching and rewriting of PCGs with substitution rules (Unity §4, TASO's rewriting).

A ``Match`` assigns every source operator of a rule to a PCG node such that

- operator types and parameters agree (``semantics.pattern_of`` of the node on its input shapes,
  so dimensions are compared in FlexFlow's innermost-first numbering, and degrees are compared too);
- edges inside the source are edges of the PCG (same producer, same output index);
- each external input number of the rule is bound to one tensor of the PCG (an input, a weight or
  any other operator's output outside the match);
- the match is convex (no external input depends on a matched node, else the rewrite makes a cycle)
  and every source result that is read outside the match, or is a final output of the graph, is one
  of the rule's mapped outputs (else removing the source would break its readers).

``apply`` builds a new PCG: destination operators are added (``semantics.to_attrs`` on their input
shapes; a destination split cuts, and a destination reshape reshapes, where both sides are well typed
and each replaced output keeps its shape, the conditions ``translate`` gives the verifier: ``_plan``), readers of the mapped source outputs read the destination's outputs instead, the source
operators are removed, and every node is re-inferred; a rewrite that produces an invalid shape
raises ShapeError (``try_apply`` returns None). Nodes outside the match keep their ids and names,
so the graph's inputs, weights and final outputs are kept; rules compose by applying again.

Degrees: a rule whose parallel operators all have one degree d (the generator's default, 2) and no
scalar multiply (whose scalar may be tied to d: Reduce(Replicate(x)) = 2x) is instantiated for any
degree k: it matches parallel operators of degree k and its destination uses k.

Entry points: ``Match``, ``find_matches``, ``apply``, ``try_apply``, ``rewrite``, ``rewrites``.

Example:
    >>> from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
    >>> comm = Rule("add_comm", (PatternOp("OP_EW_ADD", (Slot(-1), Slot(-2))),),
    ...             (PatternOp("OP_EW_ADD", (Slot(-2), Slot(-1))),), (OutputMap(0, 0, 0, 0),))
    >>> # for m in find_matches(pcg, comm): new = apply(pcg, comm, m)
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from flexrt.errors import FlexrtError, GraphError, ShapeError
from flexrt.ir.op_type import SOURCE_OPS
from flexrt.ir.pcg import PCG, TensorRef, infer_node_shapes
from flexrt.ir.serialize import attrs_to_json
from flexrt.search.substitutions.rule import CONV_DEFAULTS, PatternOp, Rule, Slot
from flexrt.search.substitutions.semantics import RESHAPE_RANK, flexrt_dim, pattern_of, to_attrs

DEGREE = "PM_PARALLEL_DEGREE"
# Parameters a rule may leave out, and the value that then applies (semantics.to_attrs' defaults).
DEFAULTS = {"PM_ACTI": 0, "PM_SCALAR": 2, "PM_NUM_INPUTS": 2, "PM_NUM_OUTPUTS": 2, **CONV_DEFAULTS}
# FlexFlow writes a replica dimension on Replicate and Reduce; flexrt's have none, so it is not compared.
IGNORED = {("OP_REPLICATE", "PM_PARALLEL_DIM"), ("OP_REDUCE", "PM_PARALLEL_DIM")}


@dataclass(frozen=True, slots=True)
class Match:
    """Where a rule's source sits in a PCG.

    ``nodes[i]`` is the node of source operator i; ``inputs`` binds external input numbers (0 for
    FlexFlow's -1, 1 for -2, ...) to tensors; ``degrees`` maps the rule's degree to the PCG's
    (empty when the rule is matched literally).
    """

    nodes: tuple[int, ...]
    inputs: tuple[tuple[int, TensorRef], ...]
    degrees: tuple[tuple[int, int], ...] = ()

    def input(self, k: int) -> TensorRef:
        return dict(self.inputs)[k]

    def __str__(self) -> str:
        ins = ", ".join(f"in{k}={r}" for k, r in self.inputs)
        deg = f" degree {self.degrees[0][0]}->{self.degrees[0][1]}" if self.degrees else ""
        return f"nodes {list(self.nodes)} ({ins}){deg}"


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The result of applying a rule: the new graph and where each replaced tensor went."""

    pcg: PCG
    replaced: tuple[tuple[TensorRef, TensorRef], ...]   # (old tensor, new tensor)
    added: tuple[int, ...]                              # ids of the destination's nodes


def rule_degrees(rule: Rule) -> set[int]:
    return {op.param(DEGREE) for op in rule.src + rule.dst if op.param(DEGREE) is not None}


def degree_generic(rule: Rule) -> bool:
    """True when the rule may be instantiated for any degree (see the module docstring)."""
    return (len(rule_degrees(rule)) == 1 and
            not any(op.type == "OP_SCALAR_MULTIPLY" for op in rule.src + rule.dst))


def _params_agree(rule_op: PatternOp, node_op: PatternOp, degree: dict) -> bool:
    """Compare parameters; ``degree`` (rule degree -> PCG degree) is extended in place when it is
    not None, else degrees must be equal."""
    have = dict(node_op.params)
    want = {k: v for k, v in rule_op.params if (rule_op.type, k) not in IGNORED}
    for k in want:
        if k not in have:
            return False
    for k, v in have.items():
        r = want.get(k, DEFAULTS.get(k))
        if r is None and k == "PM_NUMDIM":
            continue  # a rule without PM_NUMDIM matches any rank
        if k == DEGREE and degree is not None:
            bound = degree.setdefault(r, v)
            if bound != v:
                return False
        elif r != v:
            return False
    return True


def node_patterns(pcg: PCG) -> dict[int, PatternOp]:
    """The rule operator of every node that has one (``semantics.pattern_of`` on its input shapes)."""
    out = {}
    for n in pcg.nodes:
        if n.op_type in SOURCE_OPS:
            continue
        p = pattern_of(n.attrs, [pcg.shape(r).tensor_shape for r in n.inputs])
        if p is not None:
            out[n.id] = p
    return out


def _descendants(pcg: PCG, roots: Iterable[int]) -> set[int]:
    seen, stack = set(), list(roots)
    while stack:
        nid = stack.pop()
        for c in pcg.consumers(nid):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def _outputs_safe(pcg: PCG, rule: Rule, nodes: tuple[int, ...]) -> bool:
    """Every source result read outside the match (or left as a final output) is a mapped output."""
    mapped = {(m.src_op, m.src_ts) for m in rule.outputs}
    inside = set(nodes)
    readers: dict[TensorRef, bool] = {}
    for i, nid in enumerate(nodes):
        consumers = pcg.consumers(nid)
        for c in set(consumers):
            for r in pcg.node(c).inputs:
                if r.node == nid and c not in inside:
                    readers[r] = True
        if not consumers and any((i, k) not in mapped for k in range(len(pcg.output_shapes(nid)))):
            return False  # an unmapped final output would disappear
    for ref in readers:
        if (nodes.index(ref.node), ref.index) not in mapped:
            return False
    return True


def find_matches(pcg: PCG, rule: Rule, generalize_degrees: bool = True, limit: Optional[int] = None,
                 patterns: Optional[dict[int, PatternOp]] = None) -> list[Match]:
    """Every match of ``rule``'s source in ``pcg`` (none when the rule is not applicable: its
    destination reads an input its source lacks).

    Args:
        generalize_degrees: instantiate a degree-generic rule for the degrees found in the PCG.
        limit: stop after this many matches.
        patterns: ``node_patterns(pcg)``, when the caller matches many rules on one graph.
    """
    if not rule.applicable or not rule.src:
        return []
    patterns = node_patterns(pcg) if patterns is None else patterns
    by_type: dict[str, list[int]] = {}
    for nid, p in patterns.items():
        by_type.setdefault(p.type, []).append(nid)
    generic = generalize_degrees and degree_generic(rule)
    found: list[Match] = []

    def candidates(i: int, assign: list[int]) -> list[int]:
        op = rule.src[i]
        for k, s in enumerate(op.inputs):
            if not s.external:  # follow an internal edge: only readers of that tensor qualify
                producer = assign[s.op]
                return [c for c in dict.fromkeys(pcg.consumers(producer))
                        if k < len(pcg.node(c).inputs) and pcg.node(c).inputs[k] == TensorRef(producer, s.ts)]
        return by_type.get(op.type, [])

    def extend(i: int, assign: list[int], ext: dict[int, TensorRef], degree: Optional[dict]) -> None:
        if limit is not None and len(found) >= limit:
            return
        if i == len(rule.src):
            nodes = tuple(assign)
            if any(r.node in assign for r in ext.values()):
                return  # an external input may not be a matched node's output (it is removed)
            if _descendants(pcg, nodes) & {r.node for r in ext.values()}:
                return  # not convex: the destination would read a tensor computed from itself
            if not _outputs_safe(pcg, rule, nodes):
                return
            degs = tuple(sorted(degree.items())) if degree else ()
            found.append(Match(nodes, tuple(sorted(ext.items())), degs))
            return
        op = rule.src[i]
        for nid in candidates(i, assign):
            if nid in assign:
                continue
            p = patterns.get(nid)
            node = pcg.node(nid)
            if p is None or p.type != op.type or len(node.inputs) != len(op.inputs):
                continue
            deg = dict(degree) if degree is not None else None
            if not _params_agree(op, p, deg):
                continue
            new_ext, ok = dict(ext), True
            for s, ref in zip(op.inputs, node.inputs):
                if s.external:
                    k = -s.op - 1
                    if new_ext.setdefault(k, ref) != ref:
                        ok = False
                        break
                elif ref != TensorRef(assign[s.op], s.ts):
                    ok = False
                    break
            if ok:
                extend(i + 1, assign + [nid], new_ext, deg)

    extend(0, [], {}, {} if generic else None)
    return found


def _instantiate(op: PatternOp, degrees: dict[int, int]) -> PatternOp:
    if not degrees or op.param(DEGREE) is None:
        return op
    params = dict(op.params)
    params[DEGREE] = degrees.get(params[DEGREE], params[DEGREE])
    return dataclasses.replace(op, params=tuple(params.items()))


def _dst_shapes(pcg: PCG, rule: Rule, match: Match, degrees: dict, choices: dict, only=None) -> dict:
    """Destination operator -> (its attributes, its input shapes, its output shapes), parallel shapes,
    for the operators in ``only`` (every one when None); ``choices``: where each destination split
    cuts, each destination reshape's target (``_plan``)."""
    out: dict[int, tuple] = {}
    for j, op in enumerate(rule.dst):
        if only is not None and j not in only:
            continue
        op = _instantiate(op, degrees)
        ins = [pcg.shape(match.input(-s.op - 1)) if s.external else out[s.op][2][s.ts] for s in op.inputs]
        logical = [t.tensor_shape for t in ins]
        choice = choices.get(j)
        if choice is not None and choice[0] != "target":   # ("first" | "rest", size): a split's part
            n = logical[0].dims[flexrt_dim(op.param("PM_AXIS"), logical[0].rank)]
            choice = choice[1] if choice[0] == "first" else n - choice[1]
        elif choice is not None:
            choice = choice[1]
        attrs = to_attrs(op, logical, choice)
        out[j] = (attrs, ins, infer_node_shapes(attrs, ins, f"{rule.name}.{j}"))
    return out


def _options(rule: Rule, j: int, tensors: list) -> list:
    """What the rewriter tries for destination operator ``j`` (a split or a reshape), first to last:
    a split cuts in the middle, or after each size along its dimension of a matched tensor, as the
    first part or the second; a reshape's target is a matched tensor's shape, or one with its
    innermost size replaced by another's (a linear's features changed), of rank at most 4."""
    op = rule.dst[j]
    if op.type == "OP_SPLIT":
        dim = op.param("PM_AXIS")
        sizes = sorted({t.dims[t.rank - 1 - dim] for t in tensors if 0 <= dim < t.rank})
        return [None] + [(side, size) for size in sizes for side in ("first", "rest")]
    shapes = [t.dims for t in tensors if t.rank <= RESHAPE_RANK]
    inner = dict.fromkeys(d[-1] for d in shapes)
    return [("target", d) for d in dict.fromkeys(shapes + [d[:-1] + (n,) for d in shapes for n in inner])]


def _plan(pcg: PCG, rule: Rule, match: Match, needed: set) -> dict:
    """``_dst_shapes`` of the destination operators in ``needed``. Where the destination has splits or
    reshapes, each cuts or reshapes as the verifier assumes (``translate``): so that every destination
    operator is well typed and every mapped output has the shape of the source tensor it replaces.
    Tried in turn (``_options``); the first that fits is taken; where several fit, the proof covers
    each (a rule is proved for every point and target its typing allows)."""
    degrees = dict(match.degrees)
    chosen = [j for j, op in enumerate(rule.dst) if op.type in ("OP_SPLIT", "OP_RESHAPE")]
    if not chosen:
        return _dst_shapes(pcg, rule, match, degrees, {}, needed)
    tensors = [pcg.shape(TensorRef(n, k)).tensor_shape for n in match.nodes
               for k in range(len(pcg.output_shapes(n)))] + [pcg.shape(r).tensor_shape for _, r in match.inputs]
    options = [_options(rule, j, tensors) for j in chosen]
    want = [(TensorRef(match.nodes[m.src_op], m.src_ts), m.dst_op, m.dst_ts) for m in rule.outputs]
    for combo in itertools.product(*options):
        choices = {j: c for j, c in zip(chosen, combo) if c is not None}
        try:
            planned = _dst_shapes(pcg, rule, match, degrees, choices)
        except FlexrtError:
            continue
        if all(pcg.shape(ref) == planned[j][2][k] for ref, j, k in want):
            return {j: planned[j] for j in needed}
    raise ShapeError(f"rule {rule.name}: no cut or target of its destination split(s) and reshape(s) {chosen} "
                     f"gives the source outputs' shapes")


def _live(pcg: PCG, rule: Rule, match: Match) -> tuple[dict, set]:
    """(live mapped outputs: source tensor -> (destination operator, output), the destination
    operators they need). A mapped output is live when it is read outside the match or is a final
    output of the graph."""
    inside = set(match.nodes)
    live: dict[TensorRef, tuple[int, int]] = {}
    for m in rule.outputs:
        ref = TensorRef(match.nodes[m.src_op], m.src_ts)
        consumers = pcg.consumers(ref.node)
        if not consumers or any(c not in inside and ref in pcg.node(c).inputs for c in consumers):
            live[ref] = (m.dst_op, m.dst_ts)
    needed: set[int] = set()
    stack = [d_op for d_op, _ in live.values()]
    while stack:
        j = stack.pop()
        if j not in needed:
            needed.add(j)
            stack.extend(s.op for s in rule.dst[j].inputs if not s.external)
    return live, needed


def planned_ops(pcg: PCG, rule: Rule, match: Match) -> list[tuple]:
    """What ``rewrite`` would add, without building the graph: per destination operator it adds,
    (attributes, input shapes, output shapes), logical shapes. Raises as ``rewrite`` does."""
    _, needed = _live(pcg, rule, match)
    planned = _plan(pcg, rule, match, needed)
    return [(attrs, [t.tensor_shape for t in ins], [t.tensor_shape for t in outs])
            for attrs, ins, outs in (planned[j] for j in sorted(planned))]


def rewrite(pcg: PCG, rule: Rule, match: Match) -> Rewrite:
    """Apply ``rule`` at ``match``; raises ShapeError / GraphError when the result is invalid."""
    if not rule.applicable:
        raise GraphError(f"rule {rule.name} is not applicable: its destination reads external input(s) "
                         f"{sorted(rule.external_inputs('dst') - rule.external_inputs('src'), reverse=True)} "
                         f"that its source lacks")
    inside = set(match.nodes)
    live, needed = _live(pcg, rule, match)
    data = pcg.to_json()
    next_id = data["next_id"]
    names = {n.name for n in pcg.nodes}
    dst_ref: dict[int, int] = {}        # destination operator -> new node id
    planned = _plan(pcg, rule, match, needed)
    dst_shapes = {j: outs for j, (_, _, outs) in planned.items()}
    new_nodes = []

    def ref_of(slot: Slot) -> TensorRef:
        return match.input(-slot.op - 1) if slot.external else TensorRef(dst_ref[slot.op], slot.ts)

    for j, op in enumerate(rule.dst):
        if j not in needed:
            continue
        attrs = planned[j][0]
        name = f"{rule.name}.{j}@{next_id}"
        while name in names:
            name += "'"
        names.add(name)
        dst_ref[j] = next_id
        new_nodes.append({"id": next_id, "name": name, "op": attrs.op_type.value, "attrs": attrs_to_json(attrs),
                          "inputs": [[r.node, r.index] for r in map(ref_of, op.inputs)]})
        next_id += 1
    redirect = {}
    for ref, (d_op, d_ts) in live.items():
        if pcg.shape(ref) != dst_shapes[d_op][d_ts]:
            raise ShapeError(f"rule {rule.name}: destination operator {d_op} output {d_ts} has shape "
                             f"{dst_shapes[d_op][d_ts]}, but the source output it replaces ({ref}) has "
                             f"{pcg.shape(ref)}")
        redirect[ref] = TensorRef(dst_ref[d_op], d_ts)
    nodes = []
    for nd in data["nodes"]:
        if nd["id"] in inside:
            continue
        ins = []
        for a, b in nd["inputs"]:
            r = redirect.get(TensorRef(a, b), TensorRef(a, b))
            ins.append([r.node, r.index])
        nd = dict(nd, inputs=ins)
        nd.pop("outputs", None)
        nodes.append(nd)
    data = dict(data, nodes=nodes + new_nodes, next_id=next_id)
    new = PCG.from_json(data, f"rewrite with {rule.name}")
    return Rewrite(new, tuple(redirect.items()), tuple(dst_ref[j] for j in sorted(dst_ref)))


def apply(pcg: PCG, rule: Rule, match: Match) -> PCG:
    """A new PCG with ``rule`` applied at ``match`` (ShapeError / GraphError when invalid).

    Example:
        >>> # new = apply(pcg, rule, find_matches(pcg, rule)[0])
    """
    return rewrite(pcg, rule, match).pcg


def try_apply(pcg: PCG, rule: Rule, match: Match) -> Optional[PCG]:
    """``apply``, or None when the rewrite produces an invalid graph (rejected rewrites)."""
    try:
        return apply(pcg, rule, match)
    except FlexrtError:
        return None


def rewrites(pcg: PCG, rules: Iterable[Rule], generalize_degrees: bool = True) -> Iterator[tuple[Rule, Match, PCG]]:
    """Every valid single-step rewrite of ``pcg`` by ``rules`` (invalid ones are skipped)."""
    patterns = node_patterns(pcg)
    for rule in rules:
        for m in find_matches(pcg, rule, generalize_degrees, patterns=patterns):
            new = try_apply(pcg, rule, m)
            if new is not None:
                yield rule, m, new
