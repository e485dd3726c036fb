"""A Keras model's graph: the layer calls (nodes) between its inputs and its output, their order,
replaying them on new tensors (a model used as a layer), and lowering them into an ``FFModel``.

Order: FlexFlow's depth-first walk from the inputs, which takes a call once every tensor it reads
is ready (so ``get_layer(index=i)`` numbers layers as FlexFlow's Keras does).

Entry points: ``collect``, ``replay``, ``lower``.
"""

from __future__ import annotations

from typing import Any, Sequence

from flexrt.errors import ConfigError, FlexrtError, GraphError, NotYetAvailableError
from flexrt.keras._tensor import Tensor


def collect(inputs: Sequence[Tensor], output: Tensor, where: str) -> list:
    """The nodes computing ``output`` from ``inputs``, in FlexFlow's order; GraphError when the output
    reads an input the model does not list, or an input is unused."""
    ins = {id(t) for t in inputs}
    found: dict[int, Any] = {}
    reached: set[int] = set()
    stack = [output]
    while stack:
        t = stack.pop()
        if id(t) in ins:
            reached.add(id(t))
            continue
        if t.node is None:
            raise GraphError(f"{where}: the output depends on input '{t.name}' {t.batch_shape}, which is not among "
                             f"the model's inputs ({', '.join(repr(i.name) for i in inputs)})")
        if id(t.node) not in found:
            found[id(t.node)] = t.node
            stack.extend(t.node.inputs)
    unused = [t.name for t in inputs if id(t) not in reached]
    if unused:
        raise GraphError(f"{where}: input(s) {', '.join(repr(n) for n in unused)} do not reach the output; every "
                         f"model input must be used")
    return _order(inputs, list(found.values()))


def _order(inputs: Sequence[Tensor], nodes: list) -> list:
    pending = {id(n): len(n.inputs) for n in nodes}
    rank = {id(n): i for i, n in enumerate(sorted(nodes, key=_created))}
    readers: dict[int, list] = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(id(t), []).append(n)
    order: list = []
    stack: list = [("t", t) for t in reversed(inputs)]
    while stack:
        kind, item = stack.pop()
        outs = [item] if kind == "t" else list(item.outputs)
        if kind == "n":
            order.append(item)
        ready = []
        for t in outs:
            for child in readers.get(id(t), ()):
                pending[id(child)] -= 1
                if pending[id(child)] == 0:
                    ready.append(child)
        for child in sorted(ready, key=lambda n: rank[id(n)], reverse=True):
            stack.append(("n", child))
    return order


def _created(node) -> int:
    return node.outputs[0].serial


def layers_of(nodes: Sequence) -> list:
    """The distinct layers of ``nodes``, in order of their first call."""
    seen: dict[int, Any] = {}
    for n in nodes:
        seen.setdefault(id(n.layer), n.layer)
    return list(seen.values())


def replay(model_inputs: Sequence[Tensor], nodes: Sequence, output: Tensor, new_inputs, where: str) -> Tensor:
    """Call every layer of ``nodes`` again on ``new_inputs`` (in place of ``model_inputs``): the model
    as a layer, sharing its layers (and so their weights, within one compiled model)."""
    given = list(new_inputs) if isinstance(new_inputs, (list, tuple)) else [new_inputs]
    if len(given) != len(model_inputs):
        raise ConfigError(f"{where}: the model takes {len(model_inputs)} input(s), called on {len(given)}")
    for i, t in enumerate(given):
        if not isinstance(t, Tensor):
            raise ConfigError(f"{where}: input {i} must be a Keras tensor, got {t!r:.80}")
    mapped = {id(a): b for a, b in zip(model_inputs, given)}
    for node in nodes:
        args = [mapped[id(t)] for t in node.inputs]
        out = node.layer(args if node.layer.multi_input else args[0])
        mapped[id(node.outputs[0])] = out
    return mapped[id(output)]


def lower(ffmodel, inputs: Sequence[Tensor], nodes: Sequence, batch: int) -> dict:
    """Build the graph into ``ffmodel``: inputs as ``create_tensor`` of ``batch`` samples, each node
    through its layer. Sets every tensor's ``ffhandle``; returns each layer's owner name by id."""
    for t in inputs:
        declared = getattr(t.from_layer, "batch_size", None)
        if declared is not None and declared != batch:
            raise ConfigError(f"compile: Input '{t.name}' was made with batch_size={declared}, but the config's "
                              f"batch is {batch} (-b); give -b {declared} or leave batch_size out")
        t.ffhandle = ffmodel.create_tensor((batch,) + t.sample_shape(), t.dtype)
    owner: dict[int, str] = {}
    for node in nodes:
        layer = node.layer
        first = owner.get(id(layer))
        if first is not None and not layer.shares_weights and layer.count_params():
            raise NotYetAvailableError(f"compile: {layer.layer_type} '{layer.name}' is called more than once in this "
                                       f"model; sharing its weights across calls is not available for "
                                       f"{layer.layer_type}")
        name = _free_name(ffmodel, layer.name)
        try:
            out = layer.lower(ffmodel, [t.ffhandle for t in node.inputs], name,
                              first if layer.shares_weights else None)
        except FlexrtError as e:
            raise type(e)(f"compile: {layer.layer_type} '{layer.name}': {e}") from None
        node.outputs[0].ffhandle = out
        owner.setdefault(id(layer), name)
    return owner


def _free_name(ffmodel, base: str) -> str:
    def taken(name: str) -> bool:
        try:
            ffmodel.get_layer_by_name(name)
        except ConfigError:
            return False
        return True
    if not taken(base):
        return base
    k = 1
    while taken(f"{base}_{k}"):
        k += 1
    return f"{base}_{k}"
