"""The parallel computation graph (Unity §3): operators (computations, parallelization operators,
inputs, weights) as nodes with stable integer ids, tensors as edges (``TensorRef``).

Every node's output parallel shapes are inferred when it is added, so a PCG is valid by
construction; ``validate`` re-checks a graph built or edited elsewhere (e.g. loaded from JSON) and
reports the first bad node with its inputs' shapes.

Example:
    >>> from flexrt.ir.ops import InputAttrs, ElementUnaryAttrs
    >>> g = PCG()
    >>> x = g.add_node(InputAttrs(TensorShape((8, 4))), name="x")
    >>> r = g.add_node(ElementUnaryAttrs(OpType.RELU), [TensorRef(x)], name="relu")
    >>> str(g.shape(TensorRef(r)))
    '[8, 4] f32'

Entry point: ``PCG``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from flexrt.errors import FlexrtError, GraphError, ShapeError
from flexrt.inputs import check_int, check_keys, check_type, parse_json, short
from flexrt.ir import graph_algos
from flexrt.ir.op_type import PARALLEL_OPS, SOURCE_OPS, OpType
from flexrt.ir.parallel_axes import infer_parallel
from flexrt.ir.parallel_tensor import ParallelTensorShape
from flexrt.ir.registry import op_def
from flexrt.ir.serialize import attrs_from_json, attrs_to_json, pshape_to_json
from flexrt.ir.tensor_shape import TensorShape

FORMAT = "flexrt.pcg"
VERSION = 1


@dataclass(frozen=True, slots=True)
class TensorRef:
    """Output ``index`` of node ``node``."""

    node: int
    index: int = 0

    def __str__(self) -> str:
        return f"{self.node}:{self.index}"


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    attrs: Any
    inputs: tuple[TensorRef, ...]
    name: str

    @property
    def op_type(self) -> OpType:
        return self.attrs.op_type


_SHAPES: dict = {}          # (attrs, operand shapes) -> output shapes, for inferences that succeeded
_SHAPES_LIMIT = 200_000


def infer_node_shapes(attrs, input_shapes: Sequence[ParallelTensorShape], name: str) -> tuple[
        ParallelTensorShape, ...]:
    """Output parallel shapes of an operator given its operands' (data inputs, then weights).

    A pure function of the attributes and operand shapes (the name only labels errors), so
    successful inferences are remembered: searches rebuild parallel graphs from the same pieces
    over and over."""
    try:
        key = (attrs, tuple(input_shapes))
        hit = _SHAPES.get(key)
    except TypeError:  # attributes holding something unhashable: no memo
        return _infer_node_shapes(attrs, input_shapes, name)
    if hit is None:
        hit = _infer_node_shapes(attrs, input_shapes, name)
        if len(_SHAPES) >= _SHAPES_LIMIT:
            _SHAPES.clear()
        _SHAPES[key] = hit
    return hit


def _infer_node_shapes(attrs, input_shapes: Sequence[ParallelTensorShape], name: str) -> tuple[
        ParallelTensorShape, ...]:
    opdef = op_def(attrs.op_type)
    label = f"{attrs.op_type.value} '{name}'"
    if opdef.parallel_rule is not None:
        if not opdef.data_input_count_ok(len(input_shapes)):
            raise GraphError(f"{label} takes {opdef.num_inputs} input(s), got {len(input_shapes)}")
        opdef.output_shapes(attrs, [s.tensor_shape for s in input_shapes])
        try:
            return tuple(opdef.parallel_rule(attrs, list(input_shapes)))
        except ShapeError as e:
            msg = str(e).removeprefix(f"{attrs.op_type.value}: ")
            raise ShapeError(f"{label}: {msg}") from None
    nw = opdef.num_weights(attrs)
    n_data = len(input_shapes) - nw
    if n_data < 0 or not opdef.data_input_count_ok(n_data):
        want = "at least 1" if opdef.num_inputs is None else str(opdef.num_inputs)
        raise GraphError(f"{label} takes {want} data input(s) and {nw} weight(s) "
                         f"({', '.join(opdef.weight_names(attrs)) or 'none'}), got {len(input_shapes)} operands")
    try:
        return infer_parallel(opdef, attrs, name, list(input_shapes))
    except ShapeError as e:
        msg = str(e)
        raise ShapeError(msg if msg.startswith(label) else f"{label}: {msg}") from None


class PCG:
    """A parallel computation graph. Nodes get increasing ids that never change or get reused."""

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        self._shapes: dict[int, tuple[ParallelTensorShape, ...]] = {}
        self._consumers: dict[int, list[int]] = {}
        self._names: dict[str, int] = {}
        self._next_id = 0
        self._hash: str | None = None

    # ---- building -------------------------------------------------------------------------
    def add_node(self, attrs, inputs: Iterable[TensorRef] = (), name: str | None = None) -> int:
        """Add an operator reading ``inputs`` (data inputs, then weights); returns its id.

        Raises ShapeError / GraphError naming the operator when its inputs do not fit it.
        """
        inputs = tuple(inputs)
        nid = self._next_id
        name = name if name is not None else f"{attrs.op_type.value}_{nid}"
        if name in self._names:
            raise GraphError(f"a node named '{name}' already exists (id {self._names[name]}); names must be unique")
        shapes = []
        for i, ref in enumerate(inputs):
            if not isinstance(ref, TensorRef):
                raise GraphError(f"{attrs.op_type.value} '{name}': input {i} is {ref!r}, not a TensorRef")
            shapes.append(self.shape(ref, f"{attrs.op_type.value} '{name}' input {i}"))
        out = infer_node_shapes(attrs, shapes, name)
        self._nodes[nid] = Node(nid, attrs, inputs, name)
        self._shapes[nid] = out
        self._consumers[nid] = []
        for ref in inputs:
            self._consumers[ref.node].append(nid)
        self._names[name] = nid
        self._next_id += 1
        self._hash = None
        return nid

    def remove_node(self, nid: int) -> None:
        """Remove a node that nothing reads."""
        node = self.node(nid)
        if self._consumers[nid]:
            raise GraphError(f"cannot remove '{node.name}' (id {nid}): read by "
                             f"{', '.join(self._nodes[c].name for c in self._consumers[nid])}")
        for ref in node.inputs:
            self._consumers[ref.node].remove(nid)
        del self._nodes[nid], self._shapes[nid], self._consumers[nid], self._names[node.name]
        self._hash = None

    def copy(self) -> "PCG":
        g = PCG()
        g._nodes = dict(self._nodes)
        g._shapes = dict(self._shapes)
        g._consumers = {k: list(v) for k, v in self._consumers.items()}
        g._names = dict(self._names)
        g._next_id = self._next_id
        g._hash = self._hash
        return g

    # ---- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, nid: int) -> bool:
        return nid in self._nodes

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes[k] for k in sorted(self._nodes))

    def node(self, nid: int) -> Node:
        try:
            return self._nodes[nid]
        except KeyError:
            raise GraphError(f"no node with id {nid}") from None

    def node_by_name(self, name: str) -> Node:
        try:
            return self._nodes[self._names[name]]
        except KeyError:
            raise GraphError(f"no node named '{name}'") from None

    def output_shapes(self, nid: int) -> tuple[ParallelTensorShape, ...]:
        self.node(nid)
        return self._shapes[nid]

    def outputs(self, nid: int) -> tuple[TensorRef, ...]:
        return tuple(TensorRef(nid, i) for i in range(len(self.output_shapes(nid))))

    def shape(self, ref: TensorRef, where: str = "") -> ParallelTensorShape:
        if ref.node not in self._nodes:
            raise GraphError(f"{where + ': ' if where else ''}tensor {ref} refers to a missing node {ref.node}")
        outs = self._shapes[ref.node]
        if not 0 <= ref.index < len(outs):
            raise GraphError(f"{where + ': ' if where else ''}node '{self._nodes[ref.node].name}' has "
                             f"{len(outs)} output(s), not {ref.index + 1}")
        return outs[ref.index]

    def consumers(self, nid: int) -> tuple[int, ...]:
        self.node(nid)
        return tuple(self._consumers[nid])

    def sources(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes if not n.inputs)

    def sinks(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes if not self._consumers[n.id])

    def operators(self) -> tuple[Node, ...]:
        """Nodes that compute or move data (everything but inputs and weights)."""
        return tuple(n for n in self.nodes if n.op_type not in SOURCE_OPS)

    # ---- graph algorithms -----------------------------------------------------------------
    def _dense(self) -> tuple[list[int], list[list[int]]]:
        ids = sorted(self._nodes)
        index = {nid: i for i, nid in enumerate(ids)}
        succ = [sorted({index[c] for c in self._consumers[nid]}) for nid in ids]
        return ids, succ

    def topological_order(self) -> list[int]:
        """Node ids in a deterministic topological order (smallest ready id first)."""
        ids, succ = self._dense()
        order = graph_algos.topo_order(succ)
        if order is None:  # cannot happen through add_node; kept for graphs edited by hand
            raise GraphError("the graph has a cycle")
        return [ids[i] for i in order]

    def dominators(self) -> dict[int, int | None]:
        """Immediate dominator of every node (None where only the virtual root joining all sources
        dominates it)."""
        ids, succ = self._dense()
        return {ids[i]: (None if d < 0 else ids[d]) for i, d in enumerate(graph_algos.dominators(succ))}

    def post_dominators(self) -> dict[int, int | None]:
        """Immediate post-dominator of every node (None where only the virtual sink does)."""
        ids, succ = self._dense()
        return {ids[i]: (None if d < 0 else ids[d]) for i, d in enumerate(graph_algos.post_dominators(succ))}

    # ---- identity -------------------------------------------------------------------------
    def structural_hash(self) -> str:
        """A hash equal for isomorphic graphs with equal attributes (ids and names ignored)."""
        if self._hash is None:
            node_hash: dict[int, bytes] = {}
            for nid in self.topological_order():
                n = self._nodes[nid]
                h = hashlib.blake2b(digest_size=16)
                h.update(n.op_type.value.encode())
                h.update(json.dumps(attrs_to_json(n.attrs), sort_keys=True).encode())
                for ref in n.inputs:
                    h.update(node_hash[ref.node])
                    h.update(ref.index.to_bytes(2, "little"))
                node_hash[nid] = h.digest()
            total = hashlib.blake2b(digest_size=16)
            for d in sorted(node_hash.values()):
                total.update(d)
            self._hash = total.hexdigest()
        return self._hash

    def __eq__(self, other) -> bool:
        """Exact equality: same ids, names, attributes and edges."""
        if not isinstance(other, PCG):
            return NotImplemented
        return self._nodes == other._nodes and self._next_id == other._next_id

    __hash__ = None  # mutable

    # ---- checking -------------------------------------------------------------------------
    def validate(self) -> None:
        """Re-infer every node in topological order; raise on the first node that does not fit."""
        order = self.topological_order()
        shapes: dict[int, tuple[ParallelTensorShape, ...]] = {}
        for nid in order:
            n = self._nodes[nid]
            ins = []
            for ref in n.inputs:
                outs = shapes.get(ref.node)
                if outs is None or ref.index >= len(outs):
                    raise GraphError(f"node {nid} '{n.name}' ({n.op_type.value}) reads missing tensor {ref}")
                ins.append(outs[ref.index])
            try:
                shapes[nid] = infer_node_shapes(n.attrs, ins, n.name)
            except FlexrtError as e:
                raise type(e)(f"node {nid} '{n.name}' ({n.op_type.value}) is invalid: {e}; its inputs: "
                              f"{', '.join(str(s) for s in ins) or 'none'}") from None
            if shapes[nid] != self._shapes[nid]:
                raise GraphError(f"node {nid} '{n.name}': stored output shapes "
                                 f"{[str(s) for s in self._shapes[nid]]} differ from inferred "
                                 f"{[str(s) for s in shapes[nid]]}")

    # ---- files ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": VERSION, "next_id": self._next_id,
            "nodes": [{"id": n.id, "name": n.name, "op": n.op_type.value, "attrs": attrs_to_json(n.attrs),
                       "inputs": [[r.node, r.index] for r in n.inputs],
                       "outputs": [pshape_to_json(s) for s in self._shapes[n.id]]} for n in self.nodes],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: dict, source: str = "<json>") -> "PCG":
        """Rebuild a PCG; every node is re-inferred and must match the stored output shapes. GraphError
        (ShapeError for a node its inputs do not fit) naming ``source``, the node and the field."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise GraphError(f"{source}: not a flexrt PCG file (missing \"format\": \"{FORMAT}\")")
        check_keys(data, _PCG_KEYS, source, GraphError, required=("format", "version", "nodes"))
        if data["version"] != VERSION or isinstance(data["version"], bool):
            raise GraphError(f"{source}: PCG format version {short(data['version'])}; this flexrt reads {VERSION}")
        raw = {}
        for i, nd in enumerate(check_type(data["nodes"], list, f"{source}: nodes", GraphError)):
            nid, attrs, inputs, name = _node_from_json(nd, source, i)
            if nid in raw:
                raise GraphError(f"{source}: nodes[{i}]: duplicate node id {nid}")
            raw[nid] = (attrs, inputs, name, nd.get("outputs"))
        ids = sorted(raw)
        next_id = check_int(data.get("next_id", ids[-1] + 1 if ids else 0), f"{source}: next_id", GraphError,
                            minimum=ids[-1] + 1 if ids else 0)
        index = {nid: i for i, nid in enumerate(ids)}
        succ: list[list[int]] = [[] for _ in ids]
        for nid, (_, inputs, name, _) in raw.items():
            for r in inputs:
                if r.node not in index:
                    raise GraphError(f"{source}: node {nid} {short(name)} reads tensor {r} of a missing node")
                succ[index[r.node]].append(index[nid])
        order = graph_algos.topo_order(succ)
        if order is None:
            stuck = sorted(ids[i] for i in range(len(ids)) if i not in set(graph_algos.py_topo_order_partial(succ)))
            raise GraphError(f"{source}: the graph has a cycle through nodes {short(stuck)}")
        g = cls()
        for i in order:
            nid = ids[i]
            attrs, inputs, name, stored = raw[nid]
            g._next_id = nid
            try:
                g.add_node(attrs, inputs, name)
            except FlexrtError as e:
                raise type(e)(f"{source}: node {nid}: {e}") from None
            if stored is not None:
                got = [pshape_to_json(s) for s in g._shapes[nid]]
                if got != stored:
                    raise GraphError(f"{source}: node {nid} {short(name)}: stored output shapes {short(stored)} "
                                     f"differ from inferred {short(got)}")
        g._nodes = {k: g._nodes[k] for k in sorted(g._nodes)}
        g._next_id = next_id
        return g

    @classmethod
    def loads(cls, text: str, source: str = "<json>") -> "PCG":
        return cls.from_json(parse_json(text, source, GraphError), source)

    def to_dot(self, name: str = "pcg") -> str:
        """Graphviz source: operators as boxes, weights and inputs as ellipses, parallel ops as diamonds."""
        lines = [f"digraph {json.dumps(name)} {{", "  rankdir=TB;", "  node [fontname=Helvetica fontsize=10];"]
        for n in self.nodes:
            label = "\\n".join(_dot_escape(str(t)) for t in (n.name, n.op_type.value, *self._shapes[n.id]))
            if n.op_type in SOURCE_OPS:
                style = 'shape=ellipse style=filled fillcolor="#e8e8e8"'
            elif n.op_type in PARALLEL_OPS:
                style = 'shape=diamond style=filled fillcolor="#ffe0b0"'
            else:
                style = 'shape=box style="rounded,filled" fillcolor="#d0e4ff"'
            lines.append(f'  n{n.id} [label="{label}" {style}];')
        for n in self.nodes:
            for r in n.inputs:
                lines.append(f"  n{r.node} -> n{n.id}" + (f' [label="{r.index}"]' if r.index else "") + ";")
        lines.append("}")
        return "\n".join(lines) + "\n"


_PCG_KEYS = ("format", "version", "next_id", "nodes")
_NODE_KEYS = ("id", "name", "op", "attrs", "inputs", "outputs")
# what building attributes from untrusted values can raise besides flexrt's own errors
_BAD_VALUE = (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError)
_OP_NAMES = [t.value for t in OpType]
_OP_SET = frozenset(_OP_NAMES)
_NODE_KEY_SET, _NODE_REQUIRED = frozenset(_NODE_KEYS), frozenset(_NODE_KEYS[:5])


def _is_index(v: Any) -> bool:
    return type(v) is int and v >= 0


def _node_from_json(nd: Any, source: str, i: int) -> tuple[int, Any, tuple[TensorRef, ...], str]:
    """(id, attributes, inputs, name) of entry ``i`` of a PCG file's ``nodes`` (checked at once: rewrites
    rebuild graphs through here; ``_refuse_node`` says what is wrong)."""
    if not (type(nd) is dict and _NODE_KEY_SET.issuperset(nd) and _NODE_REQUIRED.issubset(nd)
            and _is_index(nd["id"]) and type(nd["name"]) is str and type(nd["op"]) is str and nd["op"] in _OP_SET
            and type(nd["attrs"]) is dict and type(nd["inputs"]) is list
            and all(type(r) is list and len(r) == 2 and _is_index(r[0]) and _is_index(r[1]) for r in nd["inputs"])):
        _refuse_node(nd, f"{source}: nodes[{i}]")
    where = f"{source}: nodes[{i}] ({short(nd['name'], 40)}).attrs"
    try:
        attrs = attrs_from_json(nd["op"], nd["attrs"], where)
    except FlexrtError:
        raise
    except _BAD_VALUE as e:
        raise GraphError(f"{where}: not valid attributes of a {short(nd['op'])} ({type(e).__name__}: "
                         f"{short(str(e), 120)})") from None
    return nd["id"], attrs, tuple(TensorRef(a, b) for a, b in nd["inputs"]), nd["name"]


def _refuse_node(nd: Any, where: str) -> None:
    """GraphError naming the first field of node entry ``nd`` that is missing, unknown or wrong."""
    check_type(nd, dict, where, GraphError)
    check_keys(nd, _NODE_KEYS, where, GraphError, required=_NODE_KEYS[:5])
    check_int(nd["id"], f"{where}.id", GraphError, minimum=0)
    name = check_type(nd["name"], str, f"{where}.name", GraphError)
    op = check_type(nd["op"], str, f"{where}.op", GraphError)
    where = f"{where} ({short(name, 40)})"
    if op not in _OP_SET:
        raise GraphError(f"{where}.op: unknown operator {short(op)}; valid: {', '.join(_OP_NAMES[:10])}, ... "
                         f"({len(_OP_NAMES)} in all, see flexrt.ir.OpType)")
    check_type(nd["attrs"], dict, f"{where}.attrs", GraphError)
    for k, ref in enumerate(check_type(nd["inputs"], list, f"{where}.inputs", GraphError)):
        if not isinstance(ref, list) or len(ref) != 2:
            raise GraphError(f"{where}.inputs[{k}] must be a pair [node id, output index], got {short(ref)}")
        for j in (0, 1):
            check_int(ref[j], f"{where}.inputs[{k}][{j}]", GraphError, minimum=0)
    raise GraphError(f"{where}: malformed node {short(nd)}")  # an integral float such as 1.0 where an int belongs


def input_shapes_of(pcg: PCG, node: Node) -> list[TensorShape]:
    """Full (logical) shapes of a node's operands."""
    return [pcg.shape(r).tensor_shape for r in node.inputs]


def _dot_escape(text: str) -> str:
    """``text`` inside a Graphviz double-quoted string: backslashes and quotes escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')
