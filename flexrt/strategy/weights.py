"""Folded weights: a concatenation of the model's weights computed by the graph becomes one weight.

TASO's merged convolutions (``conv(x, w1) ++ conv(x, w2) = split(conv(x, w1 ++ w2))``) leave a
Concat whose operands are weights: the kernel is computed, and a strategy places, synchronizes and
updates weights only as parameters of their own (``config.computed_weights``). Folding replaces
that Concat by one weight node that records its parts (``WeightAttrs.parts``). Training it trains
its parts exactly: the gradient of a concatenation is the concatenation of the parts' gradients,
and SGD (with momentum, weight decay) and Adam act element-wise, so every element follows the
trajectory it had in its own weight. A sum of weights (``linear(x, w1 + w2)``) does not fold: one
weight in place of two would take one step where the pair took two.

Weight *values* keep the model's names: ``fold_values`` joins the parts' arrays into the folded
weight's, ``unfold_values`` cuts them back, so a session started from, and read as, the model's
weights runs a folded graph.

Entry points: ``fold_weights``, ``folded``, ``fold_values``, ``unfold_values``, ``locate``.
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.ops.source import WeightAttrs
from flexrt.ir.pcg import PCG, Node, TensorRef
from flexrt.ir.serialize import attrs_to_json


def _parts(node: Node) -> tuple[tuple[str, int, int], ...]:
    """(name, size along the fold axis, model node id) of each weight ``node`` stands for."""
    a = node.attrs
    return tuple(zip(a.parts, a.part_sizes, a.part_ids))


def _foldable(pcg: PCG, node: Node) -> Optional[WeightAttrs]:
    """The folded weight that replaces ``node`` when it is a Concat of distinct weights that nothing
    else reads (a shared weight would be untied); folded operands must be folded along the same axis."""
    if node.op_type is not OpType.CONCAT or len(node.inputs) < 2:
        return None
    srcs = [pcg.node(r.node) for r in node.inputs]
    if len({s.id for s in srcs}) != len(srcs) or any(s.op_type is not OpType.WEIGHT for s in srcs):
        return None
    if any(pcg.consumers(s.id) != (node.id,) for s in srcs):
        return None
    shape = pcg.shape(TensorRef(node.id, 0)).tensor_shape
    axis = node.attrs.axis % len(shape.dims)
    parts: list[tuple[str, int, int]] = []
    for s in srcs:
        if s.attrs.parts:
            if s.attrs.part_axis != axis:
                return None
            parts.extend(_parts(s))
        else:
            parts.append((s.name, s.attrs.shape.dims[axis], s.id))
    names, sizes, ids = zip(*parts)
    return WeightAttrs(shape, names, sizes, ids, axis)


def fold_weights(pcg: PCG) -> PCG:
    """``pcg`` with every foldable Concat of weights replaced by one folded weight (named after its
    parts, keeping the Concat's node id so its readers are unchanged); ``pcg`` itself when none is."""
    while True:
        folds = {n.id: a for n in pcg.nodes for a in [_foldable(pcg, n)] if a is not None}
        if not folds:
            return pcg
        gone = {r.node for nid in folds for r in pcg.node(nid).inputs}
        data = pcg.to_json()
        names = {n.name for n in pcg.nodes if n.id not in gone}
        nodes = []
        for nd in data["nodes"]:
            if nd["id"] in gone:
                continue
            attrs = folds.get(nd["id"])
            if attrs is not None:
                name = "+".join(attrs.parts)
                while name in names:
                    name += "'"
                names.add(name)
                nd = dict(nd, name=name, op=OpType.WEIGHT.value, attrs=attrs_to_json(attrs), inputs=[])
            nodes.append(nd)
        pcg = PCG.from_json(dict(data, nodes=nodes), "folded weights")


def folded(pcg: PCG) -> dict[str, WeightAttrs]:
    """The folded weights of ``pcg`` by name."""
    return {n.name: n.attrs for n in pcg.nodes if n.op_type is OpType.WEIGHT and n.attrs.parts}


def _cuts(attrs: WeightAttrs) -> list[int]:
    return list(np.cumsum(attrs.part_sizes)[:-1])


def fold_values(pcg: PCG, values: Mapping[str, object]) -> dict:
    """``values`` (the model's weights by name) with each folded weight's parts joined into it; a
    folded weight given by its own name is taken as it is. StrategyError naming a missing part."""
    out = dict(values)
    for name, attrs in folded(pcg).items():
        if name in out:
            continue
        missing = [p for p in attrs.parts if p not in out]
        if missing:
            raise StrategyError(f"no value for weight(s) {', '.join(map(repr, missing))}, part(s) of the folded "
                                f"weight '{name}' ({len(attrs.parts)} weights concatenated along dimension "
                                f"{attrs.part_axis})")
        out[name] = np.concatenate([np.asarray(out.pop(p)) for p in attrs.parts], axis=attrs.part_axis)
    return out


def unfold_values(pcg: PCG, values: Mapping[str, object]) -> dict:
    """``values`` by the model's names: each folded weight's array cut into its parts."""
    out = dict(values)
    for name, attrs in folded(pcg).items():
        if name in out:
            for p, v in zip(attrs.parts, np.split(np.asarray(out.pop(name)), _cuts(attrs), axis=attrs.part_axis)):
                out[p] = v
    return out


def locate(pcg: PCG, name: str) -> Optional[tuple[str, tuple]]:
    """Where the model's weight ``name`` lives when the graph folded it: (the folded weight, the index
    of its part in the folded weight's array); None when ``name`` is not a part."""
    for fname, attrs in folded(pcg).items():
        if name in attrs.parts:
            k = attrs.parts.index(name)
            start = sum(attrs.part_sizes[:k])
            return fname, (slice(None),) * attrs.part_axis + (slice(start, start + attrs.part_sizes[k]),)
    return None
