"""torch.fx tracing for flexrt's front end (see ``flexrt.torch._fx``): modules with an FFModel layer
stay leaves, stack traces are kept, ``x[i] = v`` is recorded, and where torch.fx's symbolic trace
fails, the trace on meta tensors of the inputs' shapes (torch.fx's MetaTracer), where sizes, and
conditions and loops on them, are numbers.

Entry points: ``trace``, ``TORCH_DTYPES``.
"""

from __future__ import annotations

import inspect
import operator

import torch
from torch import fx, nn

from flexrt.errors import ConfigError


class _Rules:
    """What flexrt's tracers share: modules with an FFModel layer stay leaves, stack traces are kept
    (errors name the source line), and buffers become get_attr nodes (a causal mask buffer sliced by
    a traced length is traceable)."""
    proxy_buffer_attributes = True

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        from flexrt.torch._fx import MODULES   # the module table (imports this module)
        return type(m) in MODULES or super().is_leaf_module(m, qualname)


class _Writes:
    """A proxy that records ``x[index] = value`` (operator.setitem; torch.fx's own Proxy refuses it),
    which flexrt builds as a write in place (``flexrt.torch._values``: SETITEM)."""

    def __setitem__(self, key, value) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


class _Proxy(_Writes, fx.Proxy):
    pass


class _Tracer(_Rules, fx.Tracer):
    def proxy(self, node):
        return _Proxy(node, self)


def _meta_tracer():
    """torch.fx's MetaTracer with flexrt's rules: every operation runs on meta tensors, so sizes
    (``x.size()``) are numbers, for modules whose Python reads them (``assert t <= block_size``)."""
    from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer

    class _Sized(_Writes, MetaProxy):
        """A size the module's Python uses as a number (``range(n)``, ``torch.tensor([...])`` of a
        loop over it): its value on the meta tensors, so the trace holds the constant it makes."""

        def _number(self):
            v = getattr(self, "_tensor_meta", None)
            if isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):
                return int(v)
            raise TypeError(f"'{self.node.name}' is not a size known when tracing")

        def __index__(self):
            return self._number()

        def __bool__(self):   # a condition on sizes (``if mask.dim() == 2``): its value when traced
            v = getattr(self, "_tensor_meta", None)
            if isinstance(v, (bool, int, torch.SymBool, torch.SymInt)):
                return bool(v)
            raise TypeError(f"'{self.node.name}' is not a condition known when tracing (it depends on the data)")

        def __getattr__(self, k):   # x.ndim, x.dtype ...: the attribute's value on the meta tensor, known
            attr = super().__getattr__(k)
            meta = self.__dict__.get("_tensor_meta")
            value = getattr(meta, k, None) if isinstance(meta, torch.Tensor) else None
            if value is not None and not callable(value):
                attr._tensor_meta = value
            return attr

        def __iter__(self):   # ``for part in x.split(n)``: as many items as the traced value has
            v = getattr(self, "_tensor_meta", None)
            if isinstance(v, (tuple, list)):
                return (self[i] for i in range(len(v)))
            return super().__iter__()

        def __int__(self):
            return self._number()

        def size(self, dim=None):   # MetaProxy.size(0) returns the whole size (it tests ``if dim``)
            meta = getattr(self, "_tensor_meta", None)
            if isinstance(meta, torch.Tensor):
                return meta.size() if dim is None else meta.size(dim)
            return super().size(dim)

    class _Meta(_Rules, MetaTracer):
        def proxy(self, node):
            return _Sized(node, self)
    return _Meta()


# FFModel data types -> torch's, for the meta tensors of a traced module's inputs
TORCH_DTYPES = {"DT_FLOAT": torch.float32, "DT_DOUBLE": torch.float64, "DT_HALF": torch.float16,
                "DT_BFLOAT16": torch.bfloat16, "DT_INT32": torch.int32, "DT_INT64": torch.int64,
                "DT_BOOLEAN": torch.bool}


def _quiet(fn):
    """``fn()`` without the meta tracer's warnings about values it could not give sizes (they stay
    traced values, as in the symbolic trace)."""
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not compute metadata")
        return fn()


def trace(module: nn.Module, inputs=None, names=None) -> fx.GraphModule:
    """The fx trace of ``module``: every ``forward`` argument traced, as FlexFlow's front end does
    (when fewer inputs are given than it takes, the arguments after them that have defaults are
    held at them first); when that fails, the arguments after the given inputs that have defaults
    (``targets=None``) held at them; when that fails too and the inputs' shapes are known (``inputs``: (dims, DataType name)
    per input, from ``torch_to_ff``), traced on meta tensors of those shapes, so sizes are numbers."""
    params = [p for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if names is not None:   # the inputs by name (HuggingFace's input_names), in the signature's order
        unknown = [n for n in names if n not in {p.name for p in params}]
        if unknown:
            raise ConfigError(f"{type(module).__name__}.forward takes no argument named {', '.join(unknown)}; it takes "
                              f"{', '.join(p.name for p in params)}")
        params = [p for p in params if p.name in names] + [p for p in params if p.name not in names]
    given = len(inputs) if inputs is not None else len([p for p in params if p.default is p.empty])
    concrete = {p.name: p.default for p in params[given:] if p.default is not p.empty}
    attempts = [lambda: _Tracer().trace(module)]
    if concrete:   # fewer inputs given than arguments: those after them at their defaults, first
        held = lambda: _Tracer().trace(module, concrete_args=concrete)  # noqa: E731
        attempts.insert(0 if inputs is not None and len(inputs) < len(params) else 1, held)
    if inputs is not None and len(inputs) <= len(params):
        meta = {p.name: torch.empty(tuple(dims), dtype=TORCH_DTYPES.get(dtype, torch.float32), device="meta")
                for p, (dims, dtype) in zip(params, inputs)}
        attempts.append(lambda: _meta_trace(module, meta, concrete))
    errors = []
    for attempt in attempts:
        try:
            graph = attempt()
            return graph if isinstance(graph, fx.GraphModule) else fx.GraphModule(module, graph)
        except Exception as e:  # noqa: BLE001 - fx raises many kinds; say which module and why
            errors.append(e)
    hint = "" if inputs is not None else "; torch_to_ff, given the inputs, also traces with their shapes"
    first, last = errors[0], errors[-1]
    also = f"; on the inputs' shapes: {type(last).__name__}: {str(last)[:300]}" if \
        inputs is not None and str(last) != str(first) else ""
    raise ConfigError(f"torch.fx cannot trace {type(module).__name__}: {type(first).__name__}: {first}{also} "
                      f"(data-dependent control flow and Proxy arguments to C functions cannot be traced{hint})"
                      ) from None


def _meta_trace(module: nn.Module, meta: dict, concrete: dict) -> fx.GraphModule:
    """The MetaTracer's trace of a copy of ``module`` whose parameters and buffers are meta tensors
    (so its leaf modules run on the meta inputs too, and the sizes after them are numbers); the
    graph module takes its attributes from ``module`` (real values), and the constants the trace
    made (``torch.tensor`` of a list built from sizes) from the copy."""
    import copy
    import itertools
    memo = {}
    for t in itertools.chain(module.parameters(), module.buffers()):
        if id(t) not in memo:
            m = t.detach().to("meta")
            memo[id(t)] = nn.Parameter(m, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else m
    twin = copy.deepcopy(module, memo)
    graph = _quiet(lambda: _meta_tracer().trace(twin, meta, concrete_args=concrete or None))
    root = {}
    for node in graph.nodes:
        if node.op in ("get_attr", "call_module"):
            try:
                root[node.target] = module.get_submodule(node.target) if node.op == "call_module" else \
                    _attr(module, node.target)
            except AttributeError:
                root[node.target] = _attr(twin, node.target)
    return fx.GraphModule(root, graph, class_name=type(module).__name__)


def _attr(module: nn.Module, target: str):
    value = module
    for atom in target.split("."):
        value = getattr(value, atom)
    return value
