"""Rule libraries: our shipped library (``configs/substitutions/*.json``, package data of
``flexrt.configs.substitutions``), FlexFlow's ``graph_subst_3_v2.json`` with a report of what we can
use of it, counts by size and operator kind, Unity's example rules (Figs. 10-11), and a concrete
check of a rule: both sides evaluated with the NumPy kernels on random tensors.

FlexFlow's file is read from where the user keeps it (it is Apache-2.0 data we do not ship).

Entry points: ``load_library``, ``library_files``, ``load_flexflow_rules``, ``library_stats``, ``rule_input_shapes``,
``unity_example_rules``, ``check_rule``, ``convention_report``.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from flexrt.errors import ConfigError, FlexrtError
from flexrt.ir.ops import InputAttrs, RepartitionAttrs, ReplicateAttrs
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.tensor_shape import TensorShape
from flexrt.search.substitutions.evaluate import evaluate
from flexrt.search.substitutions.fingerprint import to_pcg
from flexrt.ir.datatype import DataType
from flexrt.search.substitutions.rule import (OP_SPECS, OP_TYPES, PARALLEL_TYPES, UNARY_TYPES, OutputMap, PatternOp,
                                              Rule, Slot, load_rules)
from flexrt.search.substitutions.semantics import ACTI, to_attrs

DIM_KEYS = ("PM_AXIS", "PM_PARALLEL_DIM")
REQUIRED = {t: spec.required for t, spec in OP_SPECS.items() if spec.required}


def library_files() -> list[Path]:
    """The shipped library's JSON rule files (empty when none is installed); ``*.stats.json``, the
    generator's records beside them, are not rule files."""
    root = resources.files("flexrt.configs") / "substitutions"
    if not root.is_dir():
        return []
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith(".json") and not p.name.endswith(".stats.json"))


_SHIPPED: dict[tuple, tuple[Rule, ...]] = {}  # (file, mtime, size) -> its rules: each search reads the library


def _shipped_rules(path: Path) -> list[Rule]:
    """The rules of a shipped library file, read and checked once per process while it is unchanged."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _SHIPPED:
        _SHIPPED[key] = tuple(load_rules(path))
    return list(_SHIPPED[key])


def load_library(paths: Optional[Sequence[str | Path]] = None) -> list[Rule]:
    """Every rule of the shipped library (or of ``paths``); ConfigError when there is none."""
    files = [Path(p) for p in paths] if paths else library_files()
    if not files:
        raise ConfigError("no substitution library is installed (configs/substitutions/*.json is empty or "
                          "missing); create one with `flexrt substitutions generate`, or pass --file FILE")
    rules = [r for f in files for r in (load_rules(f) if paths else _shipped_rules(f))]
    if not rules:
        raise ConfigError(f"the substitution library {', '.join(map(str, files))} holds no rules; "
                          f"regenerate it with `flexrt substitutions generate`")
    return rules


def parse_problem(rule: Rule) -> Optional[str]:
    """Why a rule's operators have no meaning in our semantics, or None when they all do."""
    for side, ops in (("source", rule.src), ("destination", rule.dst)):
        for i, op in enumerate(ops):
            if op.type not in OP_TYPES:
                return f"{side} operator {i}: unknown type {op.type}"
            missing = [k for k in REQUIRED.get(op.type, ()) if op.param(k) is None]
            if missing:
                return f"{side} operator {i} ({op.type}): missing {', '.join(missing)}"
            if op.type == "OP_LINEAR" and op.param("PM_ACTI", 0) not in ACTI:
                return f"{side} operator {i}: PM_ACTI {op.param('PM_ACTI')} not supported"
    return None


def library_stats(rules: Iterable[Rule]) -> dict:
    """Counts: rules, by (source size, destination size), by operator kind (operators on either
    side), applicable / unusable, and whether they parse into our semantics."""
    rules = list(rules)
    sizes = Counter(f"{len(r.src)}->{len(r.dst)}" for r in rules)
    kinds = Counter(op.type for r in rules for op in r.src + r.dst)
    return {"rules": len(rules),
            "by_size": dict(sorted(sizes.items())),
            "by_source_size": dict(sorted(Counter(len(r.src) for r in rules).items())),
            "by_operator": dict(sorted(kinds.items())),
            "applicable": sum(r.applicable for r in rules),
            "unusable": sum(not r.applicable for r in rules),
            "parse": sum(parse_problem(r) is None for r in rules)}


def operand_ranks(rule: Rule) -> dict[int, int]:
    """Ranks of a FlexFlow rule's external inputs: 2 for a linear's weight (its second input, directly
    or through parallelization operators), else 3 (FlexFlow's rules are written for 3-d tensors)."""
    weights: set[int] = set()
    for ops in (rule.src, rule.dst):
        role = [False] * len(ops)   # does operator i's output feed a linear's weight?
        for i in reversed(range(len(ops))):
            op = ops[i]
            for k, s in enumerate(op.inputs):
                feeds = (op.type == "OP_LINEAR" and k == 1) or (op.type in PARALLEL_TYPES and role[i])
                if feeds and s.external:
                    weights.add(-s.op - 1)
                elif feeds:
                    role[s.op] = True
    return {k: 2 if k in weights else 3
            for k in sorted(-o - 1 for o in rule.external_inputs("src") | rule.external_inputs("dst"))}


# Operators whose output has the rank and role of their first input (a vector stays a vector).
_KEEPS_ROLE = frozenset(PARALLEL_TYPES) | {"OP_CONCAT", "OP_SPLIT", "OP_EW_ADD", "OP_EW_MUL", "OP_RELU",
                                           "OP_SCALAR_MULTIPLY"} | set(UNARY_TYPES)
_VECTOR_SLOTS = {("OP_BIAS_ADD", 1), ("OP_LINEAR", 2), ("OP_LAYERNORM", 1), ("OP_LAYERNORM", 2), ("OP_CONV2D", 2),
                 ("OP_BATCHNORM", 1), ("OP_BATCHNORM", 2)}


def _slot_role(op: PatternOp, k: int):
    """The role an operator gives its input ``k`` (None: none of its own)."""
    if (op.type, k) in _VECTOR_SLOTS:
        return "vector"
    if (op.type, k) == ("OP_EMBEDDING", 0):
        return "index"
    if (op.type, k) == ("OP_EMBEDDING", 1):
        return "table"
    if op.type == "OP_BATCHNORM":
        return "image"
    if op.type == "OP_CONV2D":
        return "image" if k == 0 else ("kernel", op.param("PM_KERNEL_H"), op.param("PM_KERNEL_W"))
    return None


def rule_input_shapes(rule: Rule, size: int = 4) -> dict[int, TensorShape]:
    """Shapes on which the generator found a rule of ours, from the roles of its external inputs
    (FlexFlow numbering, -1, -2, ...): a bias or layer norm weight is a vector [size]; embedding
    indices are an int64 [size, size] matrix and its table a [size, size] matrix; a convolution's input is an NCHW [2, size, size, size]
    and its kernel [size, size, kh, kw]; with a batch matmul every other input is [size]*3; else
    [size, size]."""
    roles: dict[int, str] = {}
    for ops in (rule.src, rule.dst):
        role: dict[int, str] = {}
        for i in reversed(range(len(ops))):
            op = ops[i]
            for k, s in enumerate(op.inputs):
                r = _slot_role(op, k) or (role.get(i) if op.type in _KEEPS_ROLE else None)
                if r and s.external:
                    roles.setdefault(s.op, r)
                elif r:
                    role.setdefault(s.op, r)
    bmm = any(op.type == "OP_BATCHMATMUL" for op in rule.src + rule.dst)
    named = [op.param(key) for op in rule.src + rule.dst for key in DIM_KEYS if op.param(key) is not None]
    rank = max([3 if bmm else 2] + [d + 1 for d in named])   # a dim a parameter names exists
    shapes = {}
    for k in rule.external_inputs("src") | rule.external_inputs("dst"):
        r = roles.get(k)
        shapes[k] = (TensorShape((size,)) if r == "vector" else TensorShape((size, size), DataType.DT_INT64)
                     if r == "index" else TensorShape((size, size)) if r == "table"
                     else TensorShape((2, size, size, size)) if r == "image"
                     else TensorShape((size, size) + r[1:]) if isinstance(r, tuple)
                     else TensorShape((size,) * rank))
    convs = [op for op in rule.src + rule.dst if op.type == "OP_CONV2D"]
    return _conv_input_shapes(rule, shapes, convs, size) if convs else shapes


def _conv_input_shapes(rule: Rule, shapes: dict, convs, size: int) -> dict:
    """A convolution family reads images [2, size, size, size] and kernels [size, size / groups, kh,
    kw] (groups 1 and each convolution's own), and any of them in either role (a kernel is an image
    of 1 x 1 pixels): the first assignment of these shapes (the roles' first) on which both sides
    build."""
    image = TensorShape((2, size, size, size))
    kernels = list(dict.fromkeys(TensorShape((size, size // g, op.param("PM_KERNEL_H", 1), op.param("PM_KERNEL_W", 1)))
                                 for op in convs for g in dict.fromkeys((1, op.param("PM_GROUP", 1)))
                                 if size % g == 0))
    keys = sorted(shapes, reverse=True)
    options = [[shapes[k]] + ([t for t in [image] + kernels if t != shapes[k]] if shapes[k].rank in (2, 4) else [])
               for k in keys]
    for combo in itertools.product(*options):
        trial = dict(zip(keys, combo))
        try:
            to_pcg(rule.src, trial)
            to_pcg(rule.dst, trial)
        except FlexrtError:
            continue
        return trial
    return shapes


def to_innermost(rule: Rule) -> Rule:
    """A rule whose PM_AXIS / PM_PARALLEL_DIM count from the outermost dimension (FlexFlow's file,
    as TASO numbers them) rewritten in semantics.py's innermost-first numbering, with each operator's
    rank from ``operand_ranks`` (every operator's output has its first input's rank); PM_NUMDIM is
    set to that rank."""
    ranks = operand_ranks(rule)

    def side(ops):
        out, out_rank = [], []
        for op in ops:
            first = op.inputs[0]
            rank = ranks[-first.op - 1] if first.external else out_rank[first.op]
            params = dict(op.params)
            for k in DIM_KEYS:
                if k in params and (op.type, k) not in (("OP_REPLICATE", "PM_PARALLEL_DIM"),
                                                         ("OP_REDUCE", "PM_PARALLEL_DIM")):
                    params[k] = rank - 1 - params[k]
            if "PM_NUMDIM" in params:
                params["PM_NUMDIM"] = rank
            out.append(PatternOp(op.type, op.inputs, tuple(params.items())))
            out_rank.append(rank)
        return tuple(out)
    return Rule(rule.name, side(rule.src), side(rule.dst), rule.outputs)


@dataclass
class FlexFlowReport:
    path: Path
    rules: list[Rule]                                       # in semantics.py's numbering (see ``dims``)
    raw: list[Rule] = field(default_factory=list)           # as written in the file
    stats: dict = field(default_factory=dict)
    unusable: list[str] = field(default_factory=list)       # names of rules whose dst reads inputs the src lacks
    unparsed: dict = field(default_factory=dict)            # name -> why


def load_flexflow_rules(path: str | Path, dims: str = "outermost") -> FlexFlowReport:
    """FlexFlow's ``graph_subst_3_v2.json`` (or any file in its format) with a report of its rules.

    Args:
        dims: how the file numbers PM_AXIS / PM_PARALLEL_DIM. FlexFlow's file counts from the
            outermost dimension (TASO's NumPy order: evaluating its rules concretely, 255 of the 528
            usable ones hold that way, 246 the other way, and none only the other way), so by
            default the rules are converted (``to_innermost``) for the matcher and verifier;
            ``"innermost"`` takes them as written.

    Example:
        >>> # rep = load_flexflow_rules("../shared/data/graph_subst_3_v2.json"); len(rep.unusable) == 112
    """
    path = Path(path)
    if dims not in ("innermost", "outermost"):
        raise ConfigError(f"dims must be 'innermost' or 'outermost', got {dims!r}")
    if not path.exists():
        raise ConfigError(f"FlexFlow rule file {path} not found (FlexFlow ships it as "
                          f"substitutions/graph_subst_3_v2.json in the flexflow-train repository)")
    raw = load_rules(path)
    rules = [to_innermost(r) for r in raw] if dims == "outermost" else list(raw)
    rep = FlexFlowReport(path, rules, raw, library_stats(raw))
    rep.unusable = [r.name for r in rules if not r.applicable]
    rep.unparsed = {r.name: why for r in rules for why in [parse_problem(r)] if why}
    return rep


# ---- concrete checks -----------------------------------------------------------------------
# How a rule file numbers dimensions: which of PM_AXIS / PM_PARALLEL_DIM count from the outermost
# dimension (NumPy order, as TASO does) instead of the innermost (Legion order, semantics.py's).
CONVENTIONS = {"innermost": (), "outermost": DIM_KEYS, "axis-outermost": ("PM_AXIS",),
               "parallel-dim-outermost": ("PM_PARALLEL_DIM",)}


def _convert(op: PatternOp, rank: int, convention: str) -> PatternOp:
    """Dimension parameters in semantics.py's innermost-first numbering."""
    flip = CONVENTIONS[convention]
    if not flip:
        return op
    params = dict(op.params)
    for k in flip:
        if k in params:
            params[k] = rank - 1 - params[k]
    return PatternOp(op.type, op.inputs, tuple(params.items()))


def _build_side(g: PCG, ops: Sequence[PatternOp], ext: dict[int, TensorRef], convention: str) -> list[int]:
    ids: list[int] = []
    for op in ops:
        refs = [ext[-s.op - 1] if s.external else TensorRef(ids[s.op], s.ts) for s in op.inputs]
        shapes = [g.shape(r).tensor_shape for r in refs]
        op = _convert(op, shapes[0].rank if shapes else 0, convention)
        ids.append(g.add_node(to_attrs(op, shapes), refs))
    return ids


def _guess_shapes(rule: Rule, base: int) -> dict[int, TensorShape]:
    """Full shapes for the external inputs: [b, b] for a linear's weight, else [b, b, b]."""
    return {k: TensorShape((base,) * r) for k, r in operand_ranks(rule).items()}


def _input_layouts(rank: int) -> list[tuple]:
    return [()] + [("partition", d) for d in range(rank)] + [("replicate",)]


def check_rule(rule: Rule, convention: str = "innermost", seed: int = 0, base: int = 4,
               max_layouts: int = 256, equal_nan: bool = False, strict: bool = False) -> str:
    """Evaluate both sides on random tensors: ``"holds"``, ``"fails"`` (values differ) or
    ``"invalid"`` (no parallel layout of the inputs, among degree 1, partitioned in 2 along one
    dimension or replicated twice, makes both sides valid in our semantics). ``equal_nan``: NaNs in
    the same places are equal; ``strict``: only differing values fail (replicas the evaluator finds
    disagreeing make the layout ``"invalid"``), as the verifier's concrete refutation needs."""
    if not rule.applicable:
        return "unusable"
    shapes = _guess_shapes(rule, base)
    keys = sorted(shapes)
    rng = np.random.default_rng(seed)
    for n, layout in enumerate(itertools.product(*(_input_layouts(shapes[k].rank) for k in keys))):
        if n >= max_layouts:
            break
        g = PCG()
        try:
            ext, arrays = {}, {}
            for k, lay in zip(keys, layout):
                nid = g.add_node(InputAttrs(shapes[k]), name=f"in{k}")
                arrays[nid] = rng.standard_normal(shapes[k].dims)
                ref = TensorRef(nid)
                if lay and lay[0] == "partition":
                    ref = TensorRef(g.add_node(RepartitionAttrs(lay[1], 2), [ref]))
                elif lay:
                    ref = TensorRef(g.add_node(ReplicateAttrs(2), [ref]))
                ext[k] = ref
            src = _build_side(g, rule.src, ext, convention)
            dst = _build_side(g, rule.dst, ext, convention)
            pairs = [(TensorRef(src[m.src_op], m.src_ts), TensorRef(dst[m.dst_op], m.dst_ts)) for m in rule.outputs]
            if any(g.shape(a) != g.shape(b) for a, b in pairs):
                continue
        except (FlexrtError, IndexError, TypeError):
            continue
        try:
            vals = evaluate(g, arrays, [r for p in pairs for r in p])
        except FlexrtError:
            if strict:
                continue
            return "fails"  # replicas disagree
        ok = all(np.allclose(vals[a], vals[b], rtol=1e-7, atol=1e-9, equal_nan=equal_nan) for a, b in pairs)
        return "holds" if ok else "fails"
    return "invalid"


def convention_report(rules: Sequence[Rule], seed: int = 0) -> dict:
    """For each dimension convention, how many applicable rules hold / fail / are invalid."""
    out = {}
    for conv in CONVENTIONS:
        c = Counter(check_rule(r, conv, seed) for r in rules if r.applicable)
        out[conv] = {k: c.get(k, 0) for k in ("holds", "fails", "invalid")}
    return out


def keeps_values(pcg: PCG, rule: Rule, match, seed: int = 0) -> bool:
    """Whether rewriting ``pcg`` with ``rule`` at ``match`` leaves every value the same (both graphs
    evaluated on one draw of random inputs; a destination may leave an output unused, e.g. the other
    part of a split: not compared). Raises as ``match.rewrite`` where the rewrite is invalid."""
    from flexrt.search.substitutions.evaluate import random_inputs
    from flexrt.search.substitutions.match import rewrite
    rw = rewrite(pcg, rule, match)
    rw.pcg.validate()
    inputs = random_inputs(pcg, np.random.default_rng(seed))
    before = evaluate(pcg, inputs)
    moved = dict(rw.replaced)
    after = evaluate(rw.pcg, inputs, [moved.get(ref, ref) for ref in before])
    return all(np.allclose(before[ref], after[moved.get(ref, ref)], rtol=1e-8, atol=1e-9) for ref in before)


def _other_innermost(x: TensorShape) -> tuple[int, int]:
    """A reshape target that changes the innermost size: [n / k, k], k the least divisor of the
    element count above 1 that is not x's innermost size (or x's shape where there is none)."""
    n = math.prod(x.dims)
    k = next((k for k in range(2, n + 1) if n % k == 0 and k != x.dims[-1]), None)
    return x.dims if k is None else (n // k, k)


def cut_source(rule: Rule) -> Optional[tuple]:
    """(the rule's source as a PCG with every split cut after its first entry and every reshape to
    another innermost size (``_other_innermost``), on ``rule_input_shapes``; the rule's matches in
    it), or None when the rule's source has neither or does not type so. A source split matches a
    split at any point and a source reshape any reshape (``semantics``)."""
    from flexrt.search.substitutions.match import find_matches
    if not any(op.type in ("OP_SPLIT", "OP_RESHAPE") for op in rule.src):
        return None
    try:
        g, _ = to_pcg(rule.src, rule_input_shapes(rule), cut=lambda n: 1, reshape=_other_innermost)
    except FlexrtError:
        return None
    return g, find_matches(g, rule)


def cut_counterexample(rule: Rule, seed: int = 0) -> Optional[str]:
    """A concrete counterexample where the rule's source splits cut unequally and its reshapes change
    the innermost size (``cut_source``): at a match whose rewrite changes the values, what differs;
    None where none does (also where the source does not type so or a rewrite is refused). The
    generator's fingerprints cut in the middle and reshape with ``semantics.default_reshape``, so it
    proposes rules true only there (a split whose halves swap, a softmax through a reshape)."""
    found = cut_source(rule)
    for m in found[1] if found else ():
        try:
            if not keeps_values(found[0], rule, m, seed):
                return (f"with its source split(s) cut after the first entry and reshape(s) to another innermost "
                        f"size, the rewrite at {m} changes the values")
        except FlexrtError:
            continue
    return None


# ---- Unity's examples (Figs. 10 and 11), in semantics.py's innermost-first dimensions ------------
def _op(t: str, *inputs, **params) -> PatternOp:
    return PatternOp(t, tuple(Slot(i) if isinstance(i, int) else Slot(*i) for i in inputs),
                     tuple((f"PM_{k.upper()}", v) for k, v in params.items()))


def _rule(name: str, src, dst, *maps) -> Rule:
    return Rule(name, tuple(src), tuple(dst), tuple(OutputMap(*m) for m in (maps or [(len(src) - 1, 0, len(dst) - 1, 0)])))


def unity_example_rules(degree: int = 2) -> dict[str, Rule]:
    """Unity's example substitutions as rules (dimension 0 = innermost, 1 = rows / the sample of a matrix).

    - ``fig11a_relu_spatial``: ReLU accepts spatial (row) partitioning.
    - ``fig11b_add_concat_reduce``: Add = Concat then Reduce. Our Reduction sums partial sums, so the
      two addends are the two halves of a reduction-parallel linear: linear(x1,w1) + linear(x2,w2) =
      Reduce(linear(Partition(Concat(x1,x2)), Partition(Concat(w1,w2)))); each device holds one
      addend's operands (the Concat moves no data) and the Add becomes a Reduce (an AllReduce with
      a Replicate).
    - the Megatron chain of Fig. 10 on an MLP block linear-relu-linear: ``megatron_column_parallel``
      (first linear column-parallel), ``megatron_relu_past_combine`` (ReLU moves before the Combine),
      ``megatron_row_parallel`` (second linear reads the column-split tensor, row-parallel, Reduce).
    """
    d = degree
    return {
        "fig11a_relu_spatial": _rule(
            "fig11a_relu_spatial", [_op("OP_RELU", -1)],
            [_op("OP_PARTITION", -1, parallel_dim=1, parallel_degree=d), _op("OP_RELU", 0),
             _op("OP_COMBINE", 1, parallel_dim=1, parallel_degree=d)]),
        "fig11b_add_concat_reduce": _rule(
            "fig11b_add_concat_reduce",
            [_op("OP_LINEAR", -1, -2, acti=0), _op("OP_LINEAR", -3, -4, acti=0), _op("OP_EW_ADD", 0, 1)],
            [_op("OP_CONCAT", -1, -3, axis=0, num_inputs=2), _op("OP_CONCAT", -2, -4, axis=1, num_inputs=2),
             _op("OP_PARTITION", 0, parallel_dim=0, parallel_degree=d),
             _op("OP_PARTITION", 1, parallel_dim=1, parallel_degree=d),
             _op("OP_LINEAR", 2, 3, acti=0), _op("OP_REDUCE", 4, parallel_degree=d)]),
        "megatron_column_parallel": _rule(
            "megatron_column_parallel", [_op("OP_LINEAR", -1, -2, acti=0)],
            [_op("OP_REPLICATE", -1, parallel_degree=d), _op("OP_PARTITION", -2, parallel_dim=0, parallel_degree=d),
             _op("OP_LINEAR", 0, 1, acti=0), _op("OP_COMBINE", 2, parallel_dim=0, parallel_degree=d)]),
        "megatron_relu_past_combine": _rule(
            "megatron_relu_past_combine",
            [_op("OP_COMBINE", -1, parallel_dim=0, parallel_degree=d), _op("OP_RELU", 0)],
            [_op("OP_RELU", -1), _op("OP_COMBINE", 0, parallel_dim=0, parallel_degree=d)]),
        "megatron_row_parallel": _rule(
            "megatron_row_parallel",
            [_op("OP_COMBINE", -1, parallel_dim=0, parallel_degree=d), _op("OP_LINEAR", 0, -2, acti=0)],
            [_op("OP_PARTITION", -2, parallel_dim=1, parallel_degree=d), _op("OP_LINEAR", -1, 0, acti=0),
             _op("OP_REDUCE", 1, parallel_degree=d)]),
    }


MEGATRON_CHAIN = ("megatron_column_parallel", "megatron_relu_past_combine", "megatron_row_parallel")


def activation_fusion_rules() -> list[Rule]:
    """Fusing a ReLU into the MatMul before it, and unfusing it (TASO's and Unity's Fig. 1-2
    fusion; the axiom ``linear(2, x, w) = relu(linear(0, x, w))`` proves both)."""
    fused = [_op("OP_LINEAR", -1, -2, acti=2)]
    unfused = [_op("OP_LINEAR", -1, -2, acti=0), _op("OP_RELU", 0)]
    return [_rule("fuse_linear_relu", unfused, fused), _rule("unfuse_linear_relu", fused, unfused)]
