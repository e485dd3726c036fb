"""FlexFlow's text format of a traced PyTorch model, both ways, without torch.

One line per graph node, items separated by ``"; "`` (FlexFlow's ``IR_DELIMITER``)::

    name; in1,in2,; out1,out2,; OPTYPE; field; field; ...

``in``/``out`` list the node's input and user nodes, each name followed by ``,`` (FlexFlow's
``INOUT_NODE_DELIMITER``); OPTYPE is FlexFlow's ``OpType`` name (``LINEAR``, ``CONV2D``, ...); the
fields are FlexFlow's positional arguments of that op (``LINEAR; 10; 10; 1``: out_dim, activation,
use_bias). An attribute node is ``name; ATTRIBUTE``.

flexrt writes exactly FlexFlow's positional fields and appends what FlexFlow's lines cannot say as
``key=value`` items after them (``LAYER_NORM; shape=(16,); eps=1e-05``, ``shares=conv1`` for a
module applied twice); FlexFlow's reader ignores items past the ones it reads, and flexrt reads
FlexFlow's files (no keywords) with FlexFlow's meaning. Field values are Python literals (ints,
floats, ``None``, ``True``, tuples, ``slice(None, 2, None)``, ``torch.float32``) or ``%name``, a
reference to another node's value (``VIEW; %size; -1`` for ``x.view(x.size(0), -1)``).

Entry points: ``IRNode``, ``Ref``, ``format_line``, ``parse_line``, ``read_ir``, ``write_ir``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flexrt.errors import ConfigError
from flexrt.inputs import read_text

IR_DELIMITER = "; "
INOUT_NODE_DELIMITER = ","
_KEYWORD = re.compile(r"^([A-Za-z_]\w*)=(.*)$", re.DOTALL)
_REF = re.compile(r"%([A-Za-z_][\w.]*)")


@dataclass(frozen=True, slots=True)
class Ref:
    """A field that is another node's value (a size, a shape, a tensor)."""

    name: str


@dataclass(frozen=True, slots=True)
class IRNode:
    """One node of the format: ``op`` is FlexFlow's OpType name; ``fields`` the positional values,
    ``keywords`` flexrt's extensions; ``origin`` where it came from (a torch source line or
    ``file:line``), for error messages only (not written)."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    op: str
    fields: tuple = ()
    keywords: tuple[tuple[str, Any], ...] = ()
    origin: str = field(default="", compare=False)

    def kw(self, key: str, default: Any = None) -> Any:
        return dict(self.keywords).get(key, default)

    def refs(self) -> list[str]:
        """Every node this one reads: its inputs and the references in its fields."""
        out = list(self.inputs)
        stack = list(self.fields) + [v for _, v in self.keywords]
        while stack:
            v = stack.pop()
            if isinstance(v, Ref):
                out.append(v.name)
            elif isinstance(v, (tuple, list)):
                stack.extend(v)
        return out


# ---- values ------------------------------------------------------------------------------------
def format_value(v: Any) -> str:
    """A field value as text that ``parse_value`` reads back to an equal value."""
    if isinstance(v, Ref):
        return f"%{v.name}"
    if isinstance(v, (tuple, list)):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, slice):
        return f"slice({format_value(v.start)}, {format_value(v.stop)}, {format_value(v.step)})"
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    if v is Ellipsis:
        return "..."
    if isinstance(v, str):
        if v.startswith("torch.") or re.fullmatch(r"[A-Za-z_]\w*", v):
            return v
        if not re.search(r"[;%\n\r]", v):      # quoted (an einsum equation): ';' separates items, '%' refers
            return repr(v)
        raise ConfigError(f"a field of the format cannot hold the string {v!r} ('; ' separates items, '%' refers "
                          f"to a node)")
    raise ConfigError(f"a field of the format cannot hold {type(v).__name__} {v!r}")


def parse_value(text: str, where: str) -> Any:
    """The value of one field (see the module doc for the grammar)."""
    text = text.strip()
    if re.fullmatch(r"[A-Za-z_]\w*", text) and text not in ("None", "True", "False"):
        return text                                  # a bare word: an attribute name such as shape
    if text.startswith("torch."):
        return text                                  # a dtype, kept as its name
    try:
        tree = ast.parse(_REF.sub(lambda m: f"__ref__({m.group(1)!r})", text), mode="eval")
        return _literal(tree.body)
    except (SyntaxError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read the field {text!r}: {e}; valid: numbers, None, True, False, "
                          f"tuples, slice(a, b, c), %node") from None


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and (isinstance(node.value, (int, float, str, bool, type(None)))
                                           or node.value is Ellipsis):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_literal(a) for a in node.args]
        if node.func.id == "__ref__" and len(args) == 1:
            return Ref(args[0])
        if node.func.id == "slice" and 1 <= len(args) <= 3:
            return slice(*args)
    raise ValueError(f"unsupported expression {ast.dump(node)[:60]}")


# ---- lines -------------------------------------------------------------------------------------
def _names(names: Iterable[str]) -> str:
    return "".join(f"{n}{INOUT_NODE_DELIMITER}" for n in names)


def format_line(node: IRNode) -> str:
    """The node as one line of FlexFlow's format. A constant array (a buffer the module reads) is
    written as FlexFlow writes an attribute, its name alone: the format holds no values."""
    if node.op in ("ATTRIBUTE", "CONSTANT"):
        return IR_DELIMITER.join([node.name, "ATTRIBUTE"])
    items = [node.name, _names(node.inputs), _names(node.outputs), node.op]
    items += [format_value(v) for v in node.fields]
    items += [f"{k}={format_value(v)}" for k, v in node.keywords]
    return IR_DELIMITER.join(items)


def parse_line(line: str, where: str) -> IRNode:
    """One line of FlexFlow's format (``where``: its file and line, for errors)."""
    items = [i.strip() for i in line.strip().split(";")]
    if len(items) == 2 and items[1] == "ATTRIBUTE":
        return IRNode(items[0], (), (), "ATTRIBUTE", origin=where)
    if len(items) < 4 or not items[0] or not re.fullmatch(r"[A-Z_0-9]+", items[3]):
        raise ConfigError(f"{where}: expected 'name; inputs,; users,; OPTYPE; fields...' (FlexFlow's torch_to_file "
                          f"format), got {line.strip()[:120]!r}")

    def names(s: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in s.split(INOUT_NODE_DELIMITER) if n.strip())

    fields, keywords = [], []
    for item in items[4:]:
        m = _KEYWORD.match(item)
        if m:
            keywords.append((m.group(1), parse_value(m.group(2), where)))
        elif keywords:
            raise ConfigError(f"{where}: positional field {item!r} after key=value items; positional fields "
                              f"come first")
        else:
            fields.append(parse_value(item, where))
    return IRNode(items[0], names(items[1]), names(items[2]), items[3], tuple(fields), tuple(keywords), where)


def write_ir(path: str, nodes: Iterable[IRNode]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(format_line(node) + "\n" for node in nodes)


def read_ir(path: str) -> list[IRNode]:
    """The nodes of a FlexFlow text file (read through ``flexrt.inputs``: a regular UTF-8 file);
    one without nodes, or without its OUTPUT line, is refused."""
    lines = read_text(path, "FlexFlow model file (file_to_ff)").splitlines()
    nodes = [parse_line(line, f"{path}:{i}") for i, line in enumerate(lines, 1) if line.strip()]
    if not nodes:
        raise ConfigError(f"{path}: the file holds no nodes (one line per node: name; inputs; outputs; OP; "
                          f"fields, written by torch_to_file)")
    if not any(n.op == "OUTPUT" for n in nodes):
        raise ConfigError(f"{path}:{len(lines)}: the file has no OUTPUT line (the last line written by "
                          f"torch_to_file names the model's outputs); cut short?")
    return nodes
