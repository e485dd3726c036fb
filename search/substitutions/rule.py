"""A substitution rule: a source pattern graph, a destination pattern graph, and which outputs of
the source the destination's outputs replace, in FlexFlow's JSON rule format (REFERENCE.md).

A pattern operator has a FlexFlow operator type (``OP_LINEAR`` with an optional bias input,
``OP_BIAS_ADD``, ``OP_RELU``, the element-wise unary functions of ``UNARY_TYPES``, ``OP_SOFTMAX``,
``OP_BATCHMATMUL``, ``OP_LAYERNORM`` with optional gamma and beta, ``OP_EMBEDDING`` (a bag with
``PM_AGGR`` 1), ``OP_EW_ADD``, ``OP_EW_MUL``, ``OP_CONCAT``, ``OP_SPLIT``, ``OP_TRANSPOSE``,
``OP_SCALAR_MULTIPLY``, ``OP_CONV2D`` (x, kernel and an optional bias; its window, groups and fused
activation as parameters), ``OP_BATCHNORM`` (x, scale, bias; a fused ReLU as ``PM_ACTI`` 2),
``OP_REDUCE_SUM`` (the sum along ``PM_AXIS``, which it removes), and the
parallelization operators ``OP_PARTITION``, ``OP_COMBINE``,
``OP_REPLICATE``, ``OP_REDUCE``), its
parameters (``PM_*`` keys, integer values) and inputs: ``Slot(op, ts)`` is output ``ts`` of
operator ``op`` of the same side, or, for ``op < 0``, the external input ``-op - 1`` (FlexFlow
numbers external inputs -1, -2, ...; the same number on both sides is the same tensor).

``load_rules`` reads a file through ``flexrt.inputs`` and checks every rule before returning any:
fields and their types (``Rule.from_json``: unknown or missing keys, non-integral numbers, inputs
that are not earlier operators, output maps outside the rule), then the rule language
(``check_rule_ops``: operator types, their number of inputs, the parameters each type takes and
their ranges, output indices, each source and each destination output mapped at most once, every
operator read by a later one of its side or mapped; unique rule names). A name must not be blank or
hold control characters (a long one is cut where shown: ``short``); every integer must fit
FlexFlow's 32-bit C++ int (``INT_MIN``..``INT_MAX``); external inputs may skip numbers (FlexFlow's
file does). Each error is one ``GraphError`` naming the file,
the field path (``rule[3] ('r').srcOp[1].para``) and what is valid.

Entry points: ``Slot``, ``PatternOp``, ``OutputMap``, ``Rule``, ``OP_SPECS``, ``check_rule_ops``,
``load_rules``, ``save_rules``.

Example:
    >>> r = Rule("relu_idem", (PatternOp("OP_RELU", (Slot(-1, 0),)), PatternOp("OP_RELU", (Slot(0, 0),))),
    ...          (PatternOp("OP_RELU", (Slot(-1, 0),)),), (OutputMap(1, 0, 0, 0),))
    >>> Rule.from_json(r.to_json()) == r
    True
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from flexrt.errors import GraphError
from flexrt.inputs import check_int, check_keys, check_type, parse_json, read_text, short


@dataclass(frozen=True, slots=True)
class OpSpec:
    """What a rule operator type takes: its inputs, outputs, the parameters it may carry and those it
    must carry."""

    inputs: int
    outputs: int = 1
    params: tuple = ()
    required: tuple = ()
    optional: int = 0           # inputs that may follow the required ones (a bias, affine weights)

    def input_counts(self) -> tuple[int, ...]:
        return tuple(range(self.inputs, self.inputs + self.optional + 1))


_DIM, _DEGREE = "PM_PARALLEL_DIM", "PM_PARALLEL_DEGREE"
# Element-wise unary operators without parameters (FlexFlow's names), each an uninterpreted function
# of its input in the verifier and a hash of the exact value in fingerprints.
UNARY_TYPES = ("OP_SIGMOID", "OP_TANH", "OP_GELU", "OP_ELU", "OP_EXP", "OP_SIN", "OP_COS",
               "OP_IDENTITY")
# A convolution's window: kernel, stride and padding, each along height and width (FlexFlow's names).
CONV_PARAMS = ("PM_KERNEL_H", "PM_KERNEL_W", "PM_STRIDE_H", "PM_STRIDE_W", "PM_PADDING_H", "PM_PADDING_W")
CONV_DEFAULTS = {"PM_STRIDE_H": 1, "PM_STRIDE_W": 1, "PM_PADDING_H": 0, "PM_PADDING_W": 0, "PM_GROUP": 1}
OP_SPECS = {
    "OP_LINEAR": OpSpec(2, params=("PM_ACTI",), optional=1),       # (x, w) or (x, w, bias)
    "OP_RELU": OpSpec(1),
    **{t: OpSpec(1) for t in UNARY_TYPES},
    "OP_BIAS_ADD": OpSpec(2),                                        # (x, bias over x's innermost dim)
    "OP_SOFTMAX": OpSpec(1, params=("PM_SOFTMAX_DIM",), required=("PM_SOFTMAX_DIM",)),
    "OP_BATCHMATMUL": OpSpec(2),
    "OP_LAYERNORM": OpSpec(1, params=("PM_AXES",), required=("PM_AXES",), optional=2),  # (x[, gamma[, beta]])
    "OP_EMBEDDING": OpSpec(2, params=("PM_AGGR",)),                  # (indices, table)
    "OP_CONV2D": OpSpec(2, params=CONV_PARAMS + ("PM_GROUP", "PM_ACTI"), required=CONV_PARAMS[:2],
                        optional=1),                                  # (x, kernel) or (x, kernel, bias)
    "OP_BATCHNORM": OpSpec(3, params=("PM_ACTI",)),                  # (x NCHW, scale, bias); PM_ACTI 0 or 2
    "OP_REDUCE_SUM": OpSpec(1, params=("PM_AXIS",), required=("PM_AXIS",)),  # the dimension summed and removed
    "OP_EW_ADD": OpSpec(2),
    "OP_EW_MUL": OpSpec(2),
    "OP_CONCAT": OpSpec(2, params=("PM_AXIS", "PM_NUM_INPUTS", "PM_NUMDIM"), required=("PM_AXIS",)),
    "OP_SPLIT": OpSpec(1, 2, ("PM_AXIS", "PM_NUM_OUTPUTS"), ("PM_AXIS",)),
    "OP_TRANSPOSE": OpSpec(1),
    "OP_RESHAPE": OpSpec(1),                                         # to a target the rewriter chooses
    "OP_SCALAR_MULTIPLY": OpSpec(1, params=("PM_SCALAR",)),
    "OP_PARTITION": OpSpec(1, params=(_DIM, _DEGREE), required=(_DIM, _DEGREE)),
    "OP_COMBINE": OpSpec(1, params=(_DIM, _DEGREE), required=(_DIM, _DEGREE)),
    "OP_REPLICATE": OpSpec(1, params=(_DEGREE, _DIM), required=(_DEGREE,)),  # DIM: FlexFlow's replica dimension
    "OP_REDUCE": OpSpec(1, params=(_DEGREE, _DIM), required=(_DEGREE,)),
}
OP_TYPES = tuple(OP_SPECS)
PARALLEL_TYPES = ("OP_PARTITION", "OP_COMBINE", "OP_REPLICATE", "OP_REDUCE")
MAX_RANK = 8  # dimensions a rule's tensors may have (FlexFlow's rules use 3)
# Every integer of a rule file (operator and tensor ids, parameter values): FlexFlow's loader reads
# each into a C++ int (substitution_loader.h), so a value outside 32 bits means nothing there.
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
# parameter -> (least, greatest value), and what it means for messages
PARAM_RANGES = {
    "PM_ACTI": (0, 4, "TASO's activation: 0 none, 1 sigmoid, 2 relu, 3 tanh; and flexrt's 4 gelu"),
    "PM_SOFTMAX_DIM": (0, MAX_RANK - 1, "a dimension"),
    "PM_AXES": (1, MAX_RANK, "the number of innermost dimensions normalized"),
    "PM_AGGR": (0, 1, "the embedding's aggregation: 0 none, 1 sum (an embedding bag)"),
    "PM_AXIS": (0, MAX_RANK - 1, "a dimension"),
    "PM_PARALLEL_DIM": (0, MAX_RANK - 1, "a dimension"),
    "PM_PARALLEL_DEGREE": (2, INT_MAX, "a parallel degree"),
    "PM_NUM_INPUTS": (2, 2, "the number of inputs"),
    "PM_NUM_OUTPUTS": (2, 2, "the number of outputs"),
    "PM_NUMDIM": (1, MAX_RANK, "the number of dimensions"),
    "PM_SCALAR": (INT_MIN, INT_MAX, "an integer factor"),
    "PM_KERNEL_H": (1, 15, "a kernel height"),
    "PM_KERNEL_W": (1, 15, "a kernel width"),
    "PM_STRIDE_H": (1, 15, "a stride"),
    "PM_STRIDE_W": (1, 15, "a stride"),
    "PM_PADDING_H": (0, 15, "a padding"),
    "PM_PADDING_W": (0, 15, "a padding"),
    "PM_GROUP": (1, INT_MAX, "the number of groups"),
}


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    op: int
    ts: int = 0

    @property
    def external(self) -> bool:
        return self.op < 0


@dataclass(frozen=True, slots=True)
class PatternOp:
    type: str
    inputs: tuple
    params: tuple = ()          # ((key, value), ...) sorted by key

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "params", tuple(sorted(dict(self.params).items())))

    def param(self, key: str, default=None):
        return dict(self.params).get(key, default)


@dataclass(frozen=True, slots=True)
class OutputMap:
    src_op: int
    src_ts: int
    dst_op: int
    dst_ts: int


def _check_side(ops: tuple, side: str, name: str) -> None:
    for i, op in enumerate(ops):
        for s in op.inputs:
            if not s.external and not 0 <= s.op < i:
                raise GraphError(f"rule {short(name, 40)}: {side} operator {i} ({op.type}) reads operator {s.op}, "
                                 f"which is not an earlier operator of the {side} (valid: 0..{i - 1} or a negative "
                                 f"external input)")


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    src: tuple
    dst: tuple
    outputs: tuple

    def __post_init__(self):
        for field in ("src", "dst", "outputs"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        _check_side(self.src, "source", self.name)
        _check_side(self.dst, "destination", self.name)
        for m in self.outputs:
            if not (0 <= m.src_op < len(self.src) and 0 <= m.dst_op < len(self.dst)):
                raise GraphError(f"rule {short(self.name, 40)}: output map {m} names an operator outside the rule")

    def external_inputs(self, side: str = "src") -> set[int]:
        ops = self.src if side == "src" else self.dst
        return {s.op for op in ops for s in op.inputs if s.external}

    @property
    def applicable(self) -> bool:
        """A rewrite can only read tensors the matched source provides: the destination may use no
        external input the source lacks (about 112 of FlexFlow's 640 rules do)."""
        return self.external_inputs("dst") <= self.external_inputs("src")

    @property
    def size(self) -> tuple[int, int]:
        return len(self.src), len(self.dst)

    # ---- FlexFlow's JSON --------------------------------------------------------------------
    def to_json(self) -> dict:
        def ops(side):
            return [{"_t": "Operator", "type": op.type,
                     "input": [{"_t": "Tensor", "opId": s.op, "tsId": s.ts} for s in op.inputs],
                     "para": [{"_t": "Parameter", "key": k, "value": v} for k, v in op.params]} for op in side]
        return {"_t": "Rule", "name": self.name, "srcOp": ops(self.src), "dstOp": ops(self.dst),
                "mappedOutput": [{"_t": "MapOutput", "srcOpId": m.src_op, "srcTsId": m.src_ts,
                                  "dstOpId": m.dst_op, "dstTsId": m.dst_ts} for m in self.outputs]}

    @classmethod
    def from_json(cls, d: dict, where: str = "<json>") -> "Rule":
        """A rule from FlexFlow's JSON; GraphError naming ``where`` and the field when a field is missing,
        unknown or of the wrong type, or an operator reads one that is not earlier on its side."""
        _object(d, "Rule", where)
        name = _name(d["name"], f"{where}.name")
        where = f"{where} ({short(name, 40)})"
        src = _side_from_json(d["srcOp"], f"{where}.srcOp")
        dst = _side_from_json(d["dstOp"], f"{where}.dstOp")
        outputs = []
        keys, ops = _FIELDS["MapOutput"][0], {"srcOpId": len(src), "dstOpId": len(dst)}  # operator ids' ranges
        for k, m in enumerate(check_type(d["mappedOutput"], list, f"{where}.mappedOutput", GraphError)):
            at = f"{where}.mappedOutput[{k}]"
            _object(m, "MapOutput", at)
            for key in ops:
                if not ops[key]:
                    raise GraphError(f"{at}.{key}: the {'source' if key == 'srcOpId' else 'destination'} has "
                                     f"no operators")
            outputs.append(OutputMap(*(check_int(m[k], f"{at}.{k}", GraphError, 0, ops[k] - 1) if k in ops
                                       else _int32(m[k], f"{at}.{k}", minimum=0) for k in keys)))
        try:
            return cls(name, src, dst, tuple(outputs))
        except GraphError as e:
            raise GraphError(f"{where}: {e}") from None


# FlexFlow's object tags -> (the keys besides "_t", those required)
_FIELDS = {"Rule": (("name", "srcOp", "dstOp", "mappedOutput"),) * 2,
           "Operator": (("type", "input", "para"), ("type", "input")),
           "Tensor": (("opId", "tsId"),) * 2,
           "Parameter": (("key", "value"),) * 2,
           "MapOutput": (("srcOpId", "srcTsId", "dstOpId", "dstTsId"),) * 2}
_KEY_SETS = {tag: (frozenset(("_t", *keys)), frozenset(required)) for tag, (keys, required) in _FIELDS.items()}


def _name(name: Any, where: str) -> str:
    """A rule's name: text that is not blank, on one line (it names the rule in every message, in
    ``show`` and in the nodes a rewrite adds); a long one is cut where it is shown."""
    name = check_type(name, str, where, GraphError)
    if not name.strip():
        what = f"{len(name)} white-space character(s)" if name else "empty"
        raise GraphError(f"{where} is {what}; a rule needs a name that is not blank (as FlexFlow's 'taso_rule_0')")
    bad = next((c for c in name if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise GraphError(f"{where} {short(name, 40)} holds the control character {bad!r}; a name is one line of "
                         f"text without control characters")
    return name


def _int32(value: Any, where: str, minimum: int = INT_MIN) -> int:
    """An integer of a rule file, at least ``minimum``, that fits FlexFlow's C++ int (``INT_MAX``)."""
    if type(value) is int and minimum <= value <= INT_MAX:
        return value  # the common case
    value = check_int(value, where, GraphError, minimum=None if minimum == INT_MIN else minimum)
    if not INT_MIN <= value <= INT_MAX:
        raise GraphError(f"{where} is {short(value)}; valid: {minimum}..{INT_MAX} (FlexFlow reads a rule file's "
                         f"integers into 32-bit C++ ints)")
    return value


def _object(d: Any, tag: str, where: str) -> dict:
    """``d`` as a JSON object of FlexFlow's ``tag`` (its optional ``"_t"``) with that tag's keys."""
    allowed, required = _KEY_SETS[tag]
    if type(d) is dict and allowed.issuperset(d) and required.issubset(d) and d.get("_t", tag) == tag:
        return d  # the common case, checked at once (a library holds tens of thousands of objects)
    keys, required = _FIELDS[tag]
    check_type(d, dict, where, GraphError)
    check_keys(d, ("_t", *keys), where, GraphError, required=required)
    if d.get("_t", tag) != tag:
        raise GraphError(f"{where}._t is {short(d['_t'])}; here FlexFlow's format has {tag!r}")
    return d


def _side_from_json(side: Any, where: str) -> tuple:
    """The pattern operators of one side (``srcOp`` or ``dstOp``)."""
    ops = []
    for i, o in enumerate(check_type(side, list, where, GraphError)):
        at = f"{where}[{i}]"
        _object(o, "Operator", at)
        kind = check_type(o["type"], str, f"{at}.type", GraphError)
        inputs = []
        for k, t in enumerate(check_type(o["input"], list, f"{at}.input", GraphError)):
            _object(t, "Tensor", f"{at}.input[{k}]")
            op = _int32(t["opId"], f"{at}.input[{k}].opId")
            if op >= i:
                raise GraphError(f"{at}.input[{k}].opId is {op}; valid: an earlier operator of this side "
                                 f"({'0..' + str(i - 1) if i else 'none'}) or -1, -2, ... (an external input)")
            inputs.append(Slot(op, _int32(t["tsId"], f"{at}.input[{k}].tsId", minimum=0)))
        params = {}
        for k, p in enumerate(check_type(o.get("para", []), list, f"{at}.para", GraphError)):
            _object(p, "Parameter", f"{at}.para[{k}]")
            key = check_type(p["key"], str, f"{at}.para[{k}].key", GraphError)
            if key in params:
                raise GraphError(f"{at}.para[{k}]: parameter {short(key)} appears twice; give it once")
            params[key] = _int32(p["value"], f"{at}.para[{k}].value")
        ops.append(PatternOp(kind, tuple(inputs), tuple(params.items())))
    return tuple(ops)


def _check_op(op: PatternOp, ops: tuple, where: str) -> None:
    """One operator of a side in the rule language: type, inputs and parameters (see ``OP_SPECS``)."""
    spec = OP_SPECS.get(op.type)
    if spec is None:
        raise GraphError(f"{where}.type is {short(op.type)}; valid: {', '.join(OP_SPECS)}")
    where = f"{where} ({op.type})"
    if len(op.inputs) not in spec.input_counts():
        takes = " or ".join(map(str, spec.input_counts()))
        raise GraphError(f"{where}.input: {op.type} takes {takes} input(s), got {len(op.inputs)}")
    for k, s in enumerate(op.inputs):
        outs = 1 if s.external else OP_SPECS[ops[s.op].type].outputs
        if s.ts >= outs:
            of = "an external input" if s.external else f"operator {s.op} ({ops[s.op].type})"
            raise GraphError(f"{where}.input[{k}].tsId is {s.ts}; {of} has {outs} output(s) (valid: 0..{outs - 1})")
    for key, value in op.params:
        if key not in spec.params:
            raise GraphError(f"{where}.para: {op.type} takes no parameter {short(key)}; valid: "
                             f"{', '.join(spec.params) or 'none'}")
        lo, hi, meaning = PARAM_RANGES[key]
        if not lo <= value <= hi:
            raise GraphError(f"{where}.para: {key} is {short(value)}; valid: {lo}..{hi} ({meaning})")
    missing = [k for k in spec.required if op.param(k) is None]
    if missing:
        raise GraphError(f"{where}.para: {op.type} needs {', '.join(missing)}")


def check_rule_ops(rule: Rule, where: str) -> None:
    """GraphError (naming ``where`` and the field) unless every operator of ``rule`` is in the rule
    language (``OP_SPECS``), every output index exists, no output is mapped twice
    (``_check_mapped_once``) and every operator is used (``_check_used``)."""
    for side_name, ops in (("srcOp", rule.src), ("dstOp", rule.dst)):
        for i, op in enumerate(ops):
            _check_op(op, ops, f"{where}.{side_name}[{i}]")
    if not rule.outputs:
        raise GraphError(f"{where}.mappedOutput is empty; map at least one source output to a destination output")
    for k, m in enumerate(rule.outputs):
        for key, ops, op, ts in (("srcTsId", rule.src, m.src_op, m.src_ts), ("dstTsId", rule.dst, m.dst_op, m.dst_ts)):
            outs = OP_SPECS[ops[op].type].outputs
            if ts >= outs:
                raise GraphError(f"{where}.mappedOutput[{k}].{key} is {ts}; operator {op} ({ops[op].type}) has "
                                 f"{outs} output(s) (valid: 0..{outs - 1})")
    _check_mapped_once(rule, where)
    _check_used(rule, where)


def _check_mapped_once(rule: Rule, where: str) -> None:
    """Each source output is replaced by one destination output, and each destination output replaces
    one source output: a second entry for either is a repeated or contradictory map (FlexFlow keeps
    the last entry for a source output; the rewrite would read one of two)."""
    src_seen: dict[tuple, int] = {}
    dst_seen: dict[tuple, int] = {}
    for k, m in enumerate(rule.outputs):
        at = f"{where}.mappedOutput[{k}]"
        src, dst = (m.src_op, m.src_ts), (m.dst_op, m.dst_ts)
        if src in src_seen:
            raise GraphError(f"{at}: source output {src[1]} of operator {src[0]} ({rule.src[src[0]].type}) is "
                             f"already mapped by mappedOutput[{src_seen[src]}]; map each source output once")
        if dst in dst_seen:
            raise GraphError(f"{at}: destination output {dst[1]} of operator {dst[0]} ({rule.dst[dst[0]].type}) "
                             f"already replaces a source output in mappedOutput[{dst_seen[dst]}]; each destination "
                             f"output replaces one source output")
        src_seen[src], dst_seen[dst] = k, k


def _check_used(rule: Rule, where: str) -> None:
    """Every operator's result is used: read by a later operator of its side or mapped. A source
    operator that is neither is no part of the pattern's result (a match would lose its output, so
    the matcher never applies the rule); a destination operator that is neither computes nothing the
    rewrite keeps."""
    for side_name, ops, mapped in (("srcOp", rule.src, {m.src_op for m in rule.outputs}),
                                   ("dstOp", rule.dst, {m.dst_op for m in rule.outputs})):
        read = {s.op for op in ops for s in op.inputs if not s.external}
        for i, op in enumerate(ops):
            if i not in read and i not in mapped:
                side = "source" if side_name == "srcOp" else "destination"
                raise GraphError(f"{where}.{side_name}[{i}] ({op.type}): no later {side} operator reads its output "
                                 f"and mappedOutput does not map it; use it or remove the operator")


def load_rules(path: str | Path) -> list[Rule]:
    """Every rule of a FlexFlow ``RuleCollection`` JSON file, each checked (see the module doc)."""
    data = parse_json(read_text(path, "rule file", GraphError), str(path), GraphError)
    if not isinstance(data, dict) or not isinstance(data.get("rule"), list):
        raise GraphError(f"{path}: not a FlexFlow RuleCollection (expected {{\"_t\": \"RuleCollection\", "
                         f"\"rule\": [...]}})")
    check_keys(data, ("_t", "rule"), str(path), GraphError)
    if data.get("_t", "RuleCollection") != "RuleCollection":
        raise GraphError(f"{path}: _t is {short(data['_t'])}; here FlexFlow's format has 'RuleCollection'")
    rules, first = [], {}
    for i, d in enumerate(data["rule"]):
        where = f"{path}: rule[{i}]"
        rule = Rule.from_json(d, where)
        check_rule_ops(rule, f"{where} ({short(rule.name, 40)})")
        if rule.name in first:
            raise GraphError(f"{where}.name: {short(rule.name)} is also the name of rule[{first[rule.name]}]; "
                             f"names must be unique")
        first[rule.name] = i
        rules.append(rule)
    return rules


def save_rules(path: str | Path, rules: Iterable[Rule]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"_t": "RuleCollection", "rule": [r.to_json() for r in rules]}, indent=1) + "\n",
                    encoding="utf-8")
    return path
