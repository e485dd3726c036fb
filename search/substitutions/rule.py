"""A substitution rule: a source pattern graph, a destination pattern graph, and which outputs of
the source the destination's outputs replace, in FlexFlow's JSON rule format (REFERENCE.md).

A pattern operator has a FlexFlow operator type (``OP_LINEAR``, ``OP_RELU``, ``OP_EW_ADD``,
``OP_EW_MUL``, ``OP_CONCAT``, ``OP_SPLIT``, ``OP_TRANSPOSE``, ``OP_SCALAR_MULTIPLY``, and the
parallelization operators ``OP_PARTITION``, ``OP_COMBINE``, ``OP_REPLICATE``, ``OP_REDUCE``), its
parameters (``PM_*`` keys, integer values) and inputs: ``Slot(op, ts)`` is output ``ts`` of
operator ``op`` of the same side, or, for ``op < 0``, the external input ``-op - 1`` (FlexFlow
numbers external inputs -1, -2, ...; the same number on both sides is the same tensor).

Entry points: ``Slot``, ``PatternOp``, ``OutputMap``, ``Rule``, ``load_rules``, ``save_rules``.

Example:
    >>> r = Rule("relu_idem", (PatternOp("OP_RELU", (Slot(-1, 0),)), PatternOp("OP_RELU", (Slot(0, 0),))),
    ...          (PatternOp("OP_RELU", (Slot(-1, 0),)),), (OutputMap(1, 0, 0, 0),))
    >>> Rule.from_json(r.to_json()) == r
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from flexrt.errors import GraphError

OP_TYPES = ("OP_LINEAR", "OP_RELU", "OP_EW_ADD", "OP_EW_MUL", "OP_CONCAT", "OP_SPLIT", "OP_TRANSPOSE",
            "OP_SCALAR_MULTIPLY", "OP_PARTITION", "OP_COMBINE", "OP_REPLICATE", "OP_REDUCE")
PARALLEL_TYPES = ("OP_PARTITION", "OP_COMBINE", "OP_REPLICATE", "OP_REDUCE")


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
                raise GraphError(f"rule {name}: {side} operator {i} ({op.type}) reads operator {s.op}, which is not "
                                 f"an earlier operator of the {side} (valid: 0..{i - 1} or a negative external input)")


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
                raise GraphError(f"rule {self.name}: output map {m} names an operator outside the rule")

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
        try:
            def ops(side):
                return tuple(PatternOp(o["type"], tuple(Slot(int(t["opId"]), int(t["tsId"])) for t in o["input"]),
                                       tuple((p["key"], int(p["value"])) for p in o.get("para", ()))) for o in side)
            return cls(str(d["name"]), ops(d["srcOp"]), ops(d["dstOp"]),
                       tuple(OutputMap(int(m["srcOpId"]), int(m["srcTsId"]), int(m["dstOpId"]), int(m["dstTsId"]))
                             for m in d["mappedOutput"]))
        except (KeyError, TypeError, ValueError) as e:
            raise GraphError(f"{where}: not a FlexFlow rule ({type(e).__name__}: {e})") from None


def load_rules(path: str | Path) -> list[Rule]:
    """Every rule of a FlexFlow ``RuleCollection`` JSON file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise GraphError(f"cannot read rule file {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise GraphError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rule"), list):
        raise GraphError(f"{path}: not a FlexFlow RuleCollection (expected {{\"_t\": \"RuleCollection\", \"rule\": [...]}})")
    return [Rule.from_json(r, f"{path}: rule[{i}]") for i, r in enumerate(data["rule"])]


def save_rules(path: str | Path, rules: Iterable[Rule]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"_t": "RuleCollection", "rule": [r.to_json() for r in rules]}, indent=1) + "\n",
                    encoding="utf-8")
    return path
