"""The generator's operator families: which operators are enumerated together, over which inputs,
up to how many operators per graph (the bounds of the shipped library).

Enumerating every operator with every other is exponential in the catalog (the core catalog's 3-op
graphs alone are 560,000 extensions); TASO bounds it the same way. So:

- ``core``: TASO's and Unity's operators (linear, add, multiply, relu, transpose, concat, split,
  scalar multiply, partition, combine, replicate, reduce) on three 4 x 4 inputs, graphs of up to 3
  operators (as FlexFlow's graph_subst_3_v2.json);
- one family per new operator, graphs of up to 2 operators (3 for the bias family, whose fusion
  ``linear(x, w, b) = relu(bias_add(linear(x, w), b))`` needs a 3-operator side), each with the data
  movement that operator commutes with (concat, split, transpose, partition, combine, replicate, and
  reduce where partial sums pass): ``activations`` (sigmoid, tanh, gelu, elu, exp, sin, cos, and
  linear with a fused sigmoid / tanh / gelu), ``bias`` (linear with a bias, bias add, fused activations),
  ``softmax``, ``bmm`` (batch matmul on 4 x 4 x 4 inputs), ``layernorm`` (without and with affine
  weights) and ``embedding`` (lookups and bags: integer indices into a 4 x 4 table);
- ``conv`` (a 1 x 1 convolution without and with a fused ReLU, add, relu, concat and split along the
  batch and channel dims, on two [2, 4, 4, 4] NCHW inputs and two 4 x 4 x 1 x 1 kernels) and
  ``conv_parallel`` (a 3 x 3 convolution padded by 1 with the parallelization operators along those
  dims), graphs of up to 3 operators and 5 on both sides together (``Family.max_total``); the
  verifier's laws hold for every window, the rules state the window they were found with;
- ``batchnorm`` (training-mode batch norm without and with a fused ReLU, relu, and the data
  movement along the channels of one [2, 4, 4, 4] input and two [4] vectors);
- ``reduce`` (a sum along one dimension, embedding lookups and bags, add, and the data movement
  of 4 x 4 x 4 tensors): Unity Fig. 16c's ``embedding_bag(idx, t) = reduce_sum(embedding(idx, t))``
  and the sum's moves through the parallelization operators (only rules with a sum are kept: the
  family's other rules are the older families' on 3-d tensors).

The core family's rules are oriented from the larger side to the smaller (as FlexFlow's library);
the other families also emit each rule reversed (where the reverse reads no input its source
lacks), since real models hold the fused forms: ``linear(x, w, b)`` with a GELU unfuses to
``gelu(bias_add(linear(x, w), b))`` only in that direction.

A family's rules whose source is not one connected piece (``connected_source``) are dropped: they
match every pair of unrelated operators (the reversed ``relu(a), relu(b) -> split(relu(concat(a,
b)))``); the families before ``conv`` produce none.

Entry points: ``Family``, ``FAMILIES``, ``family_names``, ``generate_library``, ``connected_source``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from flexrt.errors import ConfigError
from flexrt.ir.datatype import DataType
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.search.substitutions.generate import GenerationResult, OpChoice, catalog, generate
from flexrt.search.substitutions.rule import PARALLEL_TYPES, UNARY_TYPES, Rule


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    choices: Callable          # degree -> tuple[OpChoice, ...]
    shapes: tuple              # the external inputs (sizes, or ParallelTensorShape)
    max_ops: int
    both_directions: bool = True   # also each rule reversed (where it reads no input its source lacks)
    max_total: int | None = None   # at most this many operators on both sides together
    requires: tuple = ()           # keep only rules with one of these operator types (the family's new ones)
    in_source: bool = False        # ... in their source (a rule that only adds them is of no use)


def _axis(t: str, key: str, axes, **extra) -> list[OpChoice]:
    arity = 2 if t == "OP_CONCAT" else 1
    return [OpChoice(t, ((key, a),) + tuple(extra.items()), arity) for a in axes]


def _moves(rank: int, degree: int, reduce: bool = False, dims=None) -> list[OpChoice]:
    """Concat, split, and the parallel operators along ``dims`` (default: every dim). Concat states no
    ``PM_NUMDIM``: it also joins outputs of another rank (an embedding's), and matches any rank."""
    dims = range(rank) if dims is None else dims
    ops = _axis("OP_CONCAT", "PM_AXIS", dims, PM_NUM_INPUTS=2)
    ops += _axis("OP_SPLIT", "PM_AXIS", dims, PM_NUM_OUTPUTS=2)
    ops += [OpChoice(t, (("PM_PARALLEL_DIM", d), ("PM_PARALLEL_DEGREE", degree))) for t in ("OP_PARTITION", "OP_COMBINE")
            for d in dims]
    ops += [OpChoice("OP_REPLICATE", (("PM_PARALLEL_DEGREE", degree),))]
    if reduce:
        ops += [OpChoice("OP_REDUCE", (("PM_PARALLEL_DEGREE", degree),))]
    return ops


_WINDOW_1X1 = (("PM_KERNEL_H", 1), ("PM_KERNEL_W", 1), ("PM_PADDING_H", 0), ("PM_PADDING_W", 0))
_WINDOW_3X3 = (("PM_KERNEL_H", 3), ("PM_KERNEL_W", 3), ("PM_PADDING_H", 1), ("PM_PADDING_W", 1))


def _conv(window, k: int, parallel: bool) -> tuple:
    """A conv family's operators: the convolution of one window, without and with a fused ReLU, and
    either add, relu, concat and split along the batch (3) and channel (2) dims, or the parallel
    operators along them."""
    convs = [OpChoice("OP_CONV2D", window + (("PM_ACTI", a),), 2) for a in (0, 2)]
    if parallel:
        return tuple(convs + [m for m in _moves(4, k, reduce=True, dims=(2, 3)) if m.type in PARALLEL_TYPES])
    return tuple(convs + [OpChoice("OP_EW_ADD", (), 2), OpChoice("OP_RELU")]
                 + [m for m in _moves(4, k, dims=(2, 3)) if m.type in ("OP_CONCAT", "OP_SPLIT")])


def _linear(acti, arity: int = 2) -> list[OpChoice]:
    return [OpChoice("OP_LINEAR", (("PM_ACTI", a),), arity) for a in acti]


_UNARY = [t for t in UNARY_TYPES if t != "OP_IDENTITY"]   # identity(x) = x: every graph with it is pruned
_M = (4, 4)
_VECTOR = (4,)
_NCHW = (2, 4, 4, 4)
_INDICES = ParallelTensorShape.of((4, 4), dtype=DataType.DT_INT64)

FAMILIES: tuple[Family, ...] = (
    Family("core", lambda k: catalog(2, k, (0,)), (_M, _M, _M), 3, both_directions=False),
    Family("activations", lambda k: tuple([OpChoice(t) for t in _UNARY] + _linear((0, 1, 3, 4)) + [OpChoice("OP_TRANSPOSE")]
                                          + _moves(2, k)), (_M, _M), 2),
    Family("bias", lambda k: tuple(_linear((0, 2), 3) + _linear((0,)) + [
        OpChoice("OP_BIAS_ADD", (), 2), OpChoice("OP_RELU")]
        + [OpChoice(t, (("PM_PARALLEL_DIM", d), ("PM_PARALLEL_DEGREE", k))) for t in ("OP_PARTITION", "OP_COMBINE")
           for d in (0, 1)] + [OpChoice("OP_REPLICATE", (("PM_PARALLEL_DEGREE", k),))]), (_M, _M, _VECTOR), 3),
    Family("softmax", lambda k: tuple(_axis("OP_SOFTMAX", "PM_SOFTMAX_DIM", (0, 1)) + [OpChoice("OP_TRANSPOSE")]
                                      + _moves(2, k)), (_M, _M), 2),
    Family("bmm", lambda k: tuple([OpChoice("OP_BATCHMATMUL", (), 2), OpChoice("OP_TRANSPOSE"),
                                   OpChoice("OP_EW_ADD", (), 2)] + _moves(3, k, reduce=True)), ((4, 4, 4),) * 3, 2),
    Family("layernorm", lambda k: tuple([OpChoice("OP_LAYERNORM", (("PM_AXES", 1),), n) for n in (1, 3)]
                                        + _moves(2, k)), (_M, _M, _VECTOR, _VECTOR), 2),
    Family("embedding", lambda k: tuple([OpChoice("OP_EMBEDDING", (("PM_AGGR", g),), 2) for g in (0, 1)]
                                        + [OpChoice("OP_EW_ADD", (), 2)] + _moves(2, k, reduce=True)),
           (_INDICES, _INDICES, _M, _M), 2),
    Family("conv", lambda k: _conv(_WINDOW_1X1, k, False), (_NCHW, _NCHW, (4, 4, 1, 1), (4, 4, 1, 1)), 3,
           max_total=5),
    Family("conv_parallel", lambda k: _conv(_WINDOW_3X3, k, True), (_NCHW, (4, 4, 3, 3)), 3, max_total=5),
    Family("batchnorm", lambda k: tuple([OpChoice("OP_BATCHNORM", (("PM_ACTI", a),), 3) for a in (0, 2)]
                                        + [OpChoice("OP_RELU")] + _moves(4, k, dims=(2,))),
           (_NCHW, _VECTOR, _VECTOR), 2),
    Family("reduce", lambda k: tuple(_axis("OP_REDUCE_SUM", "PM_AXIS", (0, 1, 2))
                                     + [OpChoice("OP_EMBEDDING", (("PM_AGGR", g),), 2) for g in (0, 1)]
                                     + [OpChoice("OP_EW_ADD", (), 2)] + _moves(3, k, reduce=True)),
           (_INDICES, _M, (4, 4, 4), (4, 4, 4)), 2, requires=("OP_REDUCE_SUM",)),
    Family("reshape", lambda k: (OpChoice("OP_RESHAPE"), OpChoice("OP_RELU"), OpChoice("OP_SIGMOID"),
                                 OpChoice("OP_EW_ADD", (), 2), *_linear((0,)),
                                 OpChoice("OP_SOFTMAX", (("PM_SOFTMAX_DIM", 0),)),
                                 OpChoice("OP_REPLICATE", (("PM_PARALLEL_DEGREE", k),))),
           ((4, 4, 4), (4, 4, 4), _M), 3, max_total=5, requires=("OP_RESHAPE",), in_source=True),
)


def family_names() -> tuple[str, ...]:
    return tuple(f.name for f in FAMILIES)


def connected_source(rule: Rule) -> bool:
    """True when the source's operators form one piece, linked by the tensors they share (an
    external input read by two of them links them too). A source of unrelated operators (relu(a),
    relu(b)) matches every pair of them in a graph: quadratically many matches for one rewrite."""
    parent = list(range(len(rule.src)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    readers: dict[int, int] = {}
    for i, op in enumerate(rule.src):
        for s in op.inputs:
            j = readers.setdefault(s.op, i) if s.external else s.op
            parent[root(i)] = root(j)
    return len({root(i) for i in range(len(rule.src))}) <= 1


def _key(rule: Rule) -> str:
    d = rule.to_json()
    d.pop("name")
    return json.dumps(d, sort_keys=True)


def generate_library(families: Sequence[str] | None = None, max_ops: int | None = None, degree: int = 2,
                     seed: int = 0, progress: Callable[[str], None] | None = None) -> GenerationResult:
    """Generate every family (or those named), merge their rules (a rule found by two families is
    kept once) and name them ``flexrt_rule_0``, ... in order. ``max_ops`` caps every family's bound.

    ``counts`` sums the families' counts and adds ``family_<name>_rules`` and ``family_<name>_s``.
    """
    names = family_names() if not families else tuple(families)
    unknown = [n for n in names if n not in family_names()]
    if unknown:
        raise ConfigError(f"unknown generator famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                          f"valid: {', '.join(family_names())}")
    t0, c0 = time.perf_counter(), time.process_time()
    rules, shapes, pairs, seen = [], [], [], set()
    counts: dict = {}
    for fam in FAMILIES:
        if fam.name not in names:
            continue
        f0 = time.perf_counter()
        bound = fam.max_ops if max_ops is None else min(fam.max_ops, max_ops)
        res = generate(bound, fam.shapes, seed, degree, choices=fam.choices(degree),
                       both_directions=fam.both_directions, progress=progress)
        kept = 0
        for rule, shape, pair in zip(res.rules, res.input_shapes, res.pairs):
            why = ("over_max_total" if fam.max_total is not None and len(rule.src) + len(rule.dst) > fam.max_total
                   else "without_required" if fam.requires and not {
                       op.type for op in rule.src + (() if fam.in_source else rule.dst)} & set(fam.requires)
                   else None if connected_source(rule) else "disconnected_source")
            if why:
                counts[f"family_{fam.name}_{why}"] = counts.get(f"family_{fam.name}_{why}", 0) + 1
                continue
            k = _key(rule)
            if k not in seen:
                seen.add(k)
                rules.append(rule)
                shapes.append(shape)
                pairs.append(pair)
                kept += 1
        for k, v in res.counts.items():
            counts[k] = counts.get(k, 0) + v
        counts[f"family_{fam.name}_rules"] = kept
        counts[f"family_{fam.name}_s"] = round(time.perf_counter() - f0, 1)
        if progress:
            progress(f"family {fam.name}: {kept} new rules ({time.perf_counter() - f0:.1f} s)")
    rules = [replace(r, name=f"flexrt_rule_{i}") for i, r in enumerate(rules)]
    counts["rules"] = len(rules)
    return GenerationResult(tuple(rules), counts, time.perf_counter() - t0, time.process_time() - c0, tuple(shapes),
                            tuple(pairs))


__all__ = ["FAMILIES", "Family", "family_names", "generate_library"]
