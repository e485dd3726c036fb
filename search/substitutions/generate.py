"""Generate PCG substitutions by enumeration and fingerprinting (TASO §3 as Unity §4 extends it).

1. **Enumerate** every graph of up to ``max_ops`` operators drawn from ``catalog()`` (linear, add,
   multiply, relu, transpose, concat, split, scalar multiply, and the parallelization operators
   Partition, Combine, Replicate, Reduce of one degree) over a few fixed external inputs: full,
   unpartitioned tensors; the parallelization operators create the degrees. flexrt's parallel shape
   inference (``infer_node_shapes``, what ``PCG.add_node`` runs) is the validity filter.
2. **Fingerprint** every tensor: evaluate exactly modulo a prime on two fixed random integer input
   sets, piece by piece (``fingerprint.apply_op``), and hash each parallel value with its parallel
   shape. Tensors are interned by the pair of hashes, and operator applications are memoized by
   (operator, input tensor ids), so each distinct tensor is computed once however many graphs share it.
   A graph's fingerprint is the multiset of the first-set hashes of its outputs (tensors no operator
   of the graph reads).
3. **Prune** (TASO): graphs with two equal tensors (an intermediate equal to another or to an input;
   the whole subtree of extensions goes with it) and duplicate operators (same operator on the same
   inputs) are never extended. Pairs of graphs with equal fingerprints lose, in this order, those
   with a common subgraph (an operator on the same inputs in both, fed only by external inputs or
   other shared operators), a common supergraph (both apply the same operator to equal tensors, e.g.
   both end in it), those that decompose (their outputs split into groups computed by disjoint
   operators on both sides), those equal to an earlier pair under renaming of same-shaped inputs,
   and those equal to an earlier pair modulo the size-1 laws (commutativity of add and multiply,
   ``x + x = 2x``; the laws themselves stay), and those whose two sides are both larger than the
   smallest graph of their class (they compose from two rules through it).
4. **Confirm** each remaining pair with the second input set, and keep it only where one side uses no
   external input the other lacks (that side is the destination; the larger side is the source).
   Last, a pair that another kept pair becomes when some of its inputs are merged (x, y := x, x) is
   dropped as a specialization (``drop_specializations``).

Entry point: ``generate``.

Example:
    >>> res = generate(max_ops=1)  # ew_add and ew_mul commute, and x + x = 2x
    >>> [(r.src[0].type, r.dst[0].type) for r in res.rules]
    [('OP_EW_ADD', 'OP_EW_ADD'), ('OP_EW_MUL', 'OP_EW_MUL'), ('OP_EW_ADD', 'OP_SCALAR_MULTIPLY')]
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flexrt.errors import FlexrtError
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.kernels.pieces import ParallelValue, scatter
from flexrt.search.substitutions.fingerprint import P, apply_op, infer_op, value_digest
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot

DEFAULT_SHAPES: tuple[tuple[int, ...], ...] = ((4, 4), (4, 4), (4, 4))  # three full tensors


@dataclass(frozen=True, slots=True)
class OpChoice:
    """One operator of the catalog: a pattern operator without inputs, and how many it reads."""

    type: str
    params: tuple = ()
    arity: int = 1

    def pattern(self, inputs: tuple) -> PatternOp:
        return PatternOp(self.type, inputs, self.params)

    def __str__(self) -> str:
        ps = ",".join(f"{k.removeprefix('PM_').lower()}={v}" for k, v in self.params)
        return f"{self.type.removeprefix('OP_').lower()}({ps})" if ps else self.type.removeprefix("OP_").lower()


def catalog(rank: int = 2, degree: int = 2, acti: Sequence[int] = (0,), scalar: int = 2) -> tuple[OpChoice, ...]:
    """The operators the generator draws from, for inputs of rank ``rank`` (dimensions and axes in
    FlexFlow's innermost-first numbering, as the rule format wants them)."""
    ops = [OpChoice("OP_LINEAR", (("PM_ACTI", a),), 2) for a in acti]
    ops += [OpChoice("OP_EW_ADD", (), 2), OpChoice("OP_EW_MUL", (), 2)]
    ops += [OpChoice("OP_CONCAT", (("PM_AXIS", a), ("PM_NUM_INPUTS", 2), ("PM_NUMDIM", rank)), 2) for a in range(rank)]
    ops += [OpChoice("OP_RELU"), OpChoice("OP_TRANSPOSE"), OpChoice("OP_SCALAR_MULTIPLY", (("PM_SCALAR", scalar),))]
    ops += [OpChoice("OP_SPLIT", (("PM_AXIS", a), ("PM_NUM_OUTPUTS", 2))) for a in range(rank)]
    ops += [OpChoice(t, (("PM_PARALLEL_DIM", d), ("PM_PARALLEL_DEGREE", degree)))
            for t in ("OP_PARTITION", "OP_COMBINE") for d in range(rank)]
    ops += [OpChoice(t, (("PM_PARALLEL_DEGREE", degree),)) for t in ("OP_REPLICATE", "OP_REDUCE")]
    return tuple(ops)


@dataclass(frozen=True, slots=True)
class Graph:
    """An enumerated graph: operators ``(choice index, input tensor ids, output tensor ids)`` in a
    topological order; tensor ids ``0 .. n_inputs - 1`` are the external inputs."""

    ops: tuple
    outputs: tuple          # tensor ids no operator of the graph reads, in order of creation

    def inputs(self, n_inputs: int) -> frozenset:
        return frozenset(t for _, ins, _ in self.ops for t in ins if t < n_inputs)


COUNT_LABELS = (  # (key of GenerationResult.counts, what it counts), in pipeline order
    ("enumerated", "graph extensions tried (operator on inputs, canonical order)"),
    ("dropped_duplicate_op", "  dropped: duplicate operator"),
    ("valid", "  accepted by flexrt's parallel shape inference"),
    ("dropped_equal_tensors", "  dropped: two equal tensors (subtree pruned)"),
    ("graphs", "distinct graphs"),
    ("tensors", "distinct tensors evaluated"),
    ("fingerprint_classes", "fingerprint classes"),
    ("candidate_pairs", "candidate pairs (equal fingerprints)"),
    ("after_common_subgraph", "  after common-subgraph pruning"),
    ("after_common_supergraph", "  after common-supergraph pruning"),
    ("after_decomposable", "  after dropping decomposable pairs"),
    ("after_renaming", "  after input-renaming canonicalization"),
    ("after_normal_form", "  after commutativity / x + x = 2x normal form"),
    ("after_via_smaller", "  after dropping pairs composed through a smaller graph"),
    ("confirmed", "confirmed by the second input set"),
    ("rejected_second_input_set", "  rejected by the second input set"),
    ("dropped_dst_inputs", "  dropped: each side reads an input the other lacks"),
    ("after_specializations", "after dropping specializations (merged inputs)"),
    ("rules", "rules"),
)


@dataclass(frozen=True, slots=True)
class GenerationResult:
    rules: tuple
    counts: dict
    elapsed_s: float
    cpu_s: float = 0.0                             # this process's CPU time (elapsed_s on a busy machine)
    input_shapes: tuple = ()                       # per rule: {external input (-1, ...): ParallelTensorShape}
    pairs: tuple = field(default=(), repr=False)   # (src Graph, dst Graph) of each rule

    def summary(self) -> str:
        """The counts, one per line, in pipeline order, with the time taken."""
        lines = [f"{label:<58} {self.counts[k]:>9}" for k, label in COUNT_LABELS if k in self.counts]
        return "\n".join(lines + [f"{'time, wall / cpu (s)':<58} {self.elapsed_s:.1f} / {self.cpu_s:.1f}"])


class _Tensors:
    """Interned tensors: a parallel shape and its values on both input sets; equal values, one id."""

    def __init__(self):
        self.shapes: list[ParallelTensorShape] = []
        self.values: list[tuple[ParallelValue, ParallelValue]] = []
        self.h1: list[bytes] = []
        self.h2: list[bytes] = []
        self._ids: dict[tuple[bytes, bytes], int] = {}

    def intern(self, v1: ParallelValue, v2: ParallelValue) -> int:
        key = (value_digest(v1), value_digest(v2))
        tid = self._ids.get(key)
        if tid is None:
            tid = self._ids[key] = len(self.shapes)
            self.shapes.append(v1.shape)
            self.values.append((v1, v2))
            self.h1.append(key[0])
            self.h2.append(key[1])
        return tid

    def __len__(self) -> int:
        return len(self.shapes)


COMMUTATIVE = frozenset({"OP_EW_ADD", "OP_EW_MUL"})  # a + b = b + a, a * b = b * a


def _expr(graph: Graph, choices, rename: dict, normal: bool = False) -> tuple:
    """Structure of a graph's outputs as sorted expression strings, inputs renamed by ``rename``.

    With ``normal``, modulo the size-1 laws: operands of commutative operators sorted, and
    ``ew_add(t, t)`` written as ``scalar_multiply(t)`` (scalar 2), so that pairs that differ from an
    earlier pair only by those laws compare equal.
    """
    made: dict[int, str] = {}
    for c, ins, outs in graph.ops:
        ch = choices[c]
        args = [made.get(t, f"${rename.get(t, t)}") for t in ins]
        head = str(ch)
        if normal and ch.type in COMMUTATIVE:
            args.sort()
            if ch.type == "OP_EW_ADD" and args[0] == args[1]:
                head, args = "scalar_multiply(scalar=2)", args[:1]
        for k, t in enumerate(outs):
            made[t] = f"{head}({','.join(args)})" + (f"#{k}" if len(outs) > 1 else "")
    return tuple(sorted(made[t] for t in graph.outputs))


def _pair_form(g1: Graph, g2: Graph, choices, rename: dict, normal: bool = False) -> tuple:
    return tuple(sorted((_expr(g1, choices, rename, normal), _expr(g2, choices, rename, normal))))


def _repeats(g: Graph) -> int:
    """Operators of ``g`` that read one tensor twice (x + x, x * x, linear(x, x))."""
    return sum(len(set(ins)) < len(ins) for _, ins, _ in g.ops)


def _common(g1: Graph, g2: Graph, n_inputs: int) -> str | None:
    """'subgraph' or 'supergraph' when the two graphs share an operator (same choice on the same
    tensors; tensors are interned by value, so equal tensors computed differently count as the same):
    a subgraph when a shared operator reads only external inputs or outputs of other shared ones,
    else a supergraph (both apply the same operator to equal tensors, e.g. both end in it)."""
    nodes2 = {(c, ins) for c, ins, _ in g2.ops}
    shared = [(c, ins, outs) for c, ins, outs in g1.ops if (c, ins) in nodes2]
    if not shared:
        return None
    common_tensors = set(range(n_inputs))
    for c, ins, outs in shared:  # topological order: a common subgraph grows from external inputs
        if all(t in common_tensors for t in ins):
            return "subgraph"
    return "supergraph"


def _decomposable(g1: Graph, g2: Graph) -> bool:
    """Whether the outputs split into groups computed by disjoint operators on both sides (the pair
    is then several smaller rules side by side)."""
    parent = {t: t for t in g1.outputs}

    def find(t):
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for g in (g1, g2):
        owner: dict[int, int] = {}  # operator index -> an output that depends on it
        feeds: dict[int, set] = {}  # tensor id -> operator indices it depends on (inclusive)
        for i, (_, ins, outs) in enumerate(g.ops):
            deps = {i}.union(*(feeds.get(t, set()) for t in ins))
            for t in outs:
                feeds[t] = deps
        for t in g.outputs:
            for i in feeds[t]:
                if i in owner:
                    parent[find(t)] = find(owner[i])
                else:
                    owner[i] = t
    return len({find(t) for t in g1.outputs}) > 1


def _drop_specializations(kept, choices, n_in: int, same_shape, perms) -> list:
    """Drop pairs that another kept pair becomes when some of its inputs are merged (e.g. a rule over
    x, x that holds because it holds over x, y); a pair that holds only for equal inputs stays."""
    index: dict[tuple, int] = {}
    for i, (g1, g2) in enumerate(kept):
        for p in perms:
            index.setdefault(_pair_form(g1, g2, choices, p), i)
    implied: set = set()
    for i, (g1, g2) in enumerate(kept):
        used = sorted(g1.inputs(n_in) | g2.inputs(n_in))
        for image in itertools.product(*(same_shape[t] for t in used)):
            if len(set(image)) == len(used):
                continue  # a renaming, not a merge
            j = index.get(_pair_form(g1, g2, choices, dict(zip(used, image))))
            if j is not None and j != i:
                implied.add(j)
    return [pair for i, pair in enumerate(kept) if i not in implied]


def _to_rule(name: str, src: Graph, dst: Graph, choices, n_inputs: int) -> tuple[Rule, dict[int, int]]:
    """The rule of a pair, and which enumeration input each of its external inputs (-1, -2, ...) is."""
    order: dict[int, int] = {}  # external inputs numbered -1, -2, ... by first use in src, then dst
    for g in (src, dst):
        for _, ins, _ in g.ops:
            for t in ins:
                if t < n_inputs and t not in order:
                    order[t] = -len(order) - 1

    def side(g: Graph):
        slot: dict[int, Slot] = {t: Slot(k, 0) for t, k in order.items()}
        ops = []
        for i, (c, ins, outs) in enumerate(g.ops):
            ops.append(choices[c].pattern(tuple(slot[t] for t in ins)))
            for k, t in enumerate(outs):
                slot[t] = Slot(i, k)
        return ops, slot

    src_ops, src_slot = side(src)
    dst_ops, dst_slot = side(dst)
    maps = tuple(OutputMap(src_slot[t].op, src_slot[t].ts, dst_slot[t].op, dst_slot[t].ts) for t in src.outputs)
    return Rule(name, tuple(src_ops), tuple(dst_ops), maps), {k: t for t, k in order.items()}


def _random_inputs(shapes: Sequence[ParallelTensorShape], seed: int) -> list[tuple[ParallelValue, ParallelValue]]:
    """Two random integer values (mod P) per input; partial sums of a parallel input split at random.
    An integer input holds indices: below the smallest first dimension of the matrices (the tables)."""
    rng = np.random.default_rng(seed)
    entries = min((s.sizes[0] for s in shapes if s.dtype.is_floating and s.rank == 2), default=P)
    out = []
    for pshape in shapes:
        pair = []
        hi = P if pshape.dtype.is_floating else entries
        for _ in range(2):
            v = scatter(np, rng.integers(0, hi, size=pshape.sizes, dtype=np.int64), pshape, rng)
            pair.append(ParallelValue(pshape, {k: a % P for k, a in v.pieces.items()}))
        out.append(tuple(pair))
    return out


def as_parallel_shape(shape) -> ParallelTensorShape:
    """An input shape: a ParallelTensorShape as given, or a tuple of sizes (unpartitioned)."""
    return shape if isinstance(shape, ParallelTensorShape) else ParallelTensorShape.of(tuple(int(d) for d in shape))


def _enumerate(choices, tensors: "_Tensors", n_in: int, max_ops: int, counts: dict) -> list[Graph]:
    """Every graph of up to ``max_ops`` operators over the ``n_in`` external inputs, each once, whose
    operators' outputs are new tensors (by their values on both input sets); ``counts`` tallied."""
    memo: dict[tuple, tuple | None] = {}

    def apply(c: int, ins: tuple) -> tuple | None:
        key = (c, ins)
        if key not in memo:
            try:
                op = choices[c].pattern(())
                attrs, _ = infer_op(op, [tensors.shapes[t] for t in ins])
                outs1 = apply_op(op, [tensors.values[t][0] for t in ins], P, attrs)
                outs2 = apply_op(op, [tensors.values[t][1] for t in ins], P, attrs)
                memo[key] = tuple(tensors.intern(a, b) for a, b in zip(outs1, outs2))
            except FlexrtError:
                memo[key] = None
        return memo[key]

    graphs: list[Graph] = []
    seen: set = set()

    def extend(ops: list, avail: list, last_key: tuple | None):
        produced_by_last = set(ops[-1][2]) if ops else set()
        in_graph = set(avail)
        nodes = {(c, ins) for c, ins, _ in ops}
        for c, ch in enumerate(choices):
            for ins in itertools.product(avail, repeat=ch.arity):
                key = (c, ins)
                # Canonical order of independent operators (the greedy smallest-ready topological
                # order always qualifies), so each DAG is built from few orders; ``seen`` drops the rest.
                if last_key is not None and not produced_by_last.intersection(ins) and key <= last_key:
                    continue
                counts["enumerated"] += 1
                if key in nodes:
                    counts["dropped_duplicate_op"] += 1
                    continue
                outs = apply(c, ins)
                if outs is None:
                    continue
                counts["valid"] += 1
                if in_graph.intersection(outs) or len(set(outs)) < len(outs):
                    counts["dropped_equal_tensors"] += 1
                    continue
                new_ops = ops + [(c, ins, outs)]
                ident = frozenset((c2, i2) for c2, i2, _ in new_ops)
                if ident not in seen:  # reached through another order: counted once, still extended
                    seen.add(ident)
                    read = {t for _, i2, _ in new_ops for t in i2}
                    graphs.append(Graph(tuple(new_ops), tuple(t for _, _, o in new_ops for t in o if t not in read)))
                if len(new_ops) < max_ops:
                    extend(new_ops, avail + list(outs), key)

    extend([], list(range(n_in)), None)
    return graphs


def _survivors(multi: list, graphs: list[Graph], n_in: int, after: dict) -> list[tuple]:
    """(order key, smallest graph size of the class, g1, g2) of every pair of a fingerprint class
    that is neither one graph inside the other nor decomposable; ``after`` tallied."""
    survivors = []
    for ids in multi:
        smallest = min(len(graphs[i].ops) for i in ids)
        for a, b in itertools.combinations(ids, 2):
            g1, g2 = graphs[a], graphs[b]
            common = _common(g1, g2, n_in)
            if common == "subgraph":
                continue
            after["after_common_subgraph"] += 1
            if common == "supergraph":
                continue
            after["after_common_supergraph"] += 1
            if _decomposable(g1, g2):
                continue
            after["after_decomposable"] += 1
            sizes = sorted((len(g1.ops), len(g2.ops)))
            survivors.append(((sizes[0] + sizes[1], sizes[1], _repeats(g1) + _repeats(g2), a, b), smallest, g1, g2))
    return survivors


def _confirmed(survivors: list, choices, perms: list, n_in: int, drop_via_smaller: bool,
               after: dict) -> list[tuple[Graph, Graph]]:
    """The (source, destination) pairs kept from ``survivors``: one per renaming and normal-form
    class, confirmed on the second input set, oriented so the destination reads only the source's
    inputs; ``after`` tallied."""
    canon_seen: set = set()
    normal_seen: set = set()
    kept: list[tuple[Graph, Graph]] = []
    # Smaller pairs first, then those reading no tensor twice in one operator: the pair kept from each
    # renaming / normal-form class is the simplest, whatever max_ops is.
    survivors.sort(key=lambda item: item[0])
    for _, smallest, g1, g2 in survivors:
        canon = min(_pair_form(g1, g2, choices, p) for p in perms)
        if canon in canon_seen:
            continue
        canon_seen.add(canon)
        after["after_renaming"] += 1
        if len(g1.ops) + len(g2.ops) > 2:  # the size-1 laws themselves stay
            if _expr(g1, choices, {}, True) == _expr(g2, choices, {}, True):
                continue
            normal = min(_pair_form(g1, g2, choices, p, True) for p in perms)
            if normal in normal_seen:
                continue
            normal_seen.add(normal)
        after["after_normal_form"] += 1
        if drop_via_smaller and min(len(g1.ops), len(g2.ops)) > smallest:
            continue  # both sides rewrite to a smaller graph of their class: two rules compose it
        after["after_via_smaller"] += 1
        if sorted(g1.outputs) != sorted(g2.outputs):  # ids intern both hashes
            after["rejected_second_input_set"] += 1
            continue
        after["confirmed"] += 1
        src, dst = (g1, g2) if len(g1.ops) >= len(g2.ops) else (g2, g1)
        if not dst.inputs(n_in) <= src.inputs(n_in):
            src, dst = dst, src
            if not dst.inputs(n_in) <= src.inputs(n_in):
                after["dropped_dst_inputs"] += 1
                continue
        kept.append((src, dst))
    return kept


def generate(max_ops: int = 3, shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES, seed: int = 0,
             degree: int = 2, acti: Sequence[int] = (0,), choices: Sequence[OpChoice] | None = None,
             drop_specializations: bool = True, drop_via_smaller: bool = True, both_directions: bool = False,
             progress: Callable[[str], None] | None = None) -> GenerationResult:
    """Enumerate graphs of up to ``max_ops`` operators over external inputs of ``shapes`` and return
    the rules between fingerprint-equal graphs that survive TASO's prunings, with counts.

    Args:
        max_ops: largest graph size (operators per side).
        shapes: the external inputs (all the same rank unless ``choices`` is given): sizes for a full,
            unpartitioned tensor, or a ``ParallelTensorShape`` for an input that already carries
            degrees (e.g. partial sums, so that rules with Reduce fit in ``max_ops``) or another dtype
            (an integer input holds embedding indices); ``GenerationResult.input_shapes`` says which
            each rule was found on.
        seed: seeds the two random integer input sets; same seed, same rules in the same order.
        degree: the degree of every parallelization operator.
        acti: ``PM_ACTI`` values of ``OP_LINEAR`` (0 none, 2 fused relu).
        choices: the operator catalog (default ``catalog(rank, degree, acti)``).
        drop_specializations: drop a pair that is another kept pair with some inputs merged.
        drop_via_smaller: drop a pair whose sides are both larger than the smallest graph of their
            fingerprint class (the rules to and from that graph compose it; this assumes rules are
            applied in both directions, as equivalences).
        both_directions: also emit each rule reversed where its destination reads every input of its
            source (rules are oriented larger side to smaller side otherwise).
        progress: called with a line of text after enumeration and after pairing.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    shapes = [as_parallel_shape(s) for s in shapes]
    ranks = {s.rank for s in shapes}
    if len(ranks) != 1 and choices is None:
        raise FlexrtError(f"generate: every input must have the same rank for the default catalog, got shapes "
                          f"{[str(s) for s in shapes]}; pass choices for inputs of several ranks")
    choices = tuple(choices) if choices is not None else catalog(ranks.pop(), degree, acti)
    n_in = len(shapes)
    tensors = _Tensors()
    for v1, v2 in _random_inputs(shapes, seed):
        if tensors.intern(v1, v2) != len(tensors) - 1:
            raise FlexrtError("generate: two external inputs drew equal values; use another seed")
    counts = {"enumerated": 0, "valid": 0, "dropped_duplicate_op": 0, "dropped_equal_tensors": 0, "graphs": 0}
    graphs = _enumerate(choices, tensors, n_in, max_ops, counts)
    counts["graphs"] = len(graphs)
    counts["tensors"] = len(tensors)
    if progress:
        progress(f"enumerated {counts['enumerated']} graphs, {counts['graphs']} kept, "
                 f"{len(tensors)} distinct tensors ({time.perf_counter() - t0:.1f} s)")

    classes: dict[tuple, list[int]] = {}
    for i, g in enumerate(graphs):
        classes.setdefault(tuple(sorted(tensors.h1[t] for t in g.outputs)), []).append(i)
    multi = [ids for ids in classes.values() if len(ids) > 1]
    counts["fingerprint_classes"] = len(classes)
    counts["classes_with_pairs"] = len(multi)
    counts["candidate_pairs"] = sum(len(ids) * (len(ids) - 1) // 2 for ids in multi)

    same_shape = [[j for j in range(n_in) if shapes[j] == shapes[i]] for i in range(n_in)]
    perms = [dict(zip(range(n_in), p)) for p in itertools.permutations(range(n_in))
             if all(p[i] in same_shape[i] for i in range(n_in))]
    after = {"after_common_subgraph": 0, "after_common_supergraph": 0, "after_decomposable": 0,
             "after_renaming": 0, "after_normal_form": 0, "after_via_smaller": 0, "confirmed": 0,
             "rejected_second_input_set": 0, "dropped_dst_inputs": 0}
    survivors = _survivors(multi, graphs, n_in, after)
    kept = _confirmed(survivors, choices, perms, n_in, drop_via_smaller, after)
    if drop_specializations:
        kept = _drop_specializations(kept, choices, n_in, same_shape, perms)
    after["after_specializations"] = len(kept)
    if both_directions:
        def symmetric(src, dst):  # its reverse is itself up to renaming (e.g. a + b -> b + a)
            me = (_expr(src, choices, {}), _expr(dst, choices, {}))
            return any((_expr(dst, choices, p), _expr(src, choices, p)) == me for p in perms)
        kept += [(dst, src) for src, dst in kept if src.inputs(n_in) <= dst.inputs(n_in) and not symmetric(src, dst)]
    made = [_to_rule(f"flexrt_rule_{i}", src, dst, choices, n_in) for i, (src, dst) in enumerate(kept)]
    rules = [r for r, _ in made]
    input_shapes = tuple({k: shapes[t] for k, t in m.items()} for _, m in made)
    pairs = kept
    counts.update(after)
    counts["rules"] = len(rules)
    elapsed = time.perf_counter() - t0
    if progress:
        progress(f"{counts['candidate_pairs']} candidate pairs, {len(rules)} rules ({elapsed:.1f} s)")
    return GenerationResult(tuple(rules), counts, elapsed, time.process_time() - c0, input_shapes, tuple(pairs))


__all__ = ["COUNT_LABELS", "DEFAULT_SHAPES", "GenerationResult", "Graph", "OpChoice", "as_parallel_shape", "catalog",
           "generate"]
