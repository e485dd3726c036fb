"""``PyTorchModel``: a PyTorch module traced with torch.fx into FFModel layers (FlexFlow's
``flexflow.torch.model``), and FlexFlow's text format of the trace, both ways.

Example:
    >>> import torch.nn as nn
    >>> from flexrt.core import FFConfig, FFModel, DataType
    >>> from flexrt.torch.model import PyTorchModel
    >>> ffmodel = FFModel(FFConfig(["-b", "8"]))
    >>> x = ffmodel.create_tensor([8, 784], DataType.DT_FLOAT)
    >>> torch_model = PyTorchModel(nn.Sequential(nn.Linear(784, 10), nn.Softmax(dim=-1)))
    >>> [t.dims for t in torch_model.torch_to_ff(ffmodel, [x])]
    [(8, 10)]

After ``ffmodel.compile(...)``, ``torch_model.load_weights(ffmodel)`` copies the module's parameters
into the FFModel (layouts converted); ``torch_model.ff_weights()`` gives them by FFModel weight
name, for comparing with ``ffmodel.get_weights()``. ``file_to_ff`` needs no torch.

torch itself is imported only when a ``PyTorchModel`` is made; without it that raises ConfigError.

Entry points: ``PyTorchModel``, ``file_to_ff``.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

from flexrt.errors import ConfigError, FlexrtError, FrontendWarning, warn_caller
from flexrt.torch._build import build
from flexrt.torch._ir import IRNode, format_line, read_ir, write_ir


def _torch():
    try:
        import torch
    except ImportError:
        raise ConfigError("flexrt.torch needs PyTorch: pip install torch --index-url "
                          "https://download.pytorch.org/whl/cpu") from None
    return torch


def _torch_functions_hf_patches() -> dict:
    """The torch functions HuggingFace's tracer patches while it traces (``HFTracer._TORCH_METHODS_TO_PATCH``),
    as they are now."""
    torch = _torch()
    try:
        from transformers.utils import fx as hf_fx
    except ImportError:
        return {}
    names = getattr(getattr(hf_fx, "HFTracer", None), "_TORCH_METHODS_TO_PATCH", ())
    return {n: getattr(torch, n) for n in names if isinstance(n, str) and hasattr(torch, n)}


class PyTorchModel:
    """FlexFlow's ``PyTorchModel(model, is_hf_model=False, input_names=None, batch_size=1,
    seq_length=None)``: ``model`` is a ``torch.nn.Module``; the other arguments are FlexFlow's
    HuggingFace tracing options (``is_hf_model=True`` needs the ``transformers`` package; where its
    tracer fails, flexrt's own traces the tensors named by ``input_names``, with a warning).

    FlexFlow's older form (r21.09 and before) is accepted too: ``PyTorchModel(filename)`` (a file of
    FlexFlow's format, no torch needed) or ``PyTorchModel(model=module)``, then
    ``apply(ffmodel, input_tensors)``."""

    def __init__(self, model=None, is_hf_model: bool = False, input_names: Sequence[str] | None = None,
                 batch_size: int = 1, seq_length: Any | None = None, *, filename: str | None = None) -> None:
        if isinstance(model, (str, os.PathLike)):   # the older PyTorchModel(filename)
            model, filename = None, model
        if model is None and filename is None:
            raise ConfigError("PyTorchModel: give a torch.nn.Module (or, FlexFlow's older form, the file "
                              "torch_to_file wrote)")
        self.filename = None if filename is None else os.fspath(filename)
        if model is not None:
            torch = _torch()
            if not isinstance(model, torch.nn.Module):
                raise ConfigError(f"PyTorchModel: model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.is_hf_model = bool(is_hf_model)
        self.input_names = input_names
        self.batch_size = batch_size
        self.seq_length = seq_length
        self._input_specs = None   # (dims, DataType name) of torch_to_ff's inputs: tracing may read sizes
        self._converted = None     # (input specs, (IR nodes, weight sources)) of the last trace

    # ---- tracing -------------------------------------------------------------------------------
    def _graph_module(self):
        from flexrt.torch import _trace
        if self.model is None:
            raise ConfigError(f"PyTorchModel({self.filename!r}) holds a file, not a module: build it with "
                              f"apply(ffmodel, inputs) or file_to_ff")
        if not self.is_hf_model:
            return _trace.trace(self.model, self._input_specs)
        try:
            from transformers.utils.fx import symbolic_trace
        except ImportError:
            raise ConfigError("PyTorchModel(is_hf_model=True) traces with HuggingFace's symbolic_trace: "
                              "pip install transformers") from None
        import inspect
        kwargs = {"input_names": self.input_names, "batch_size": self.batch_size}
        if self.seq_length is not None:
            kwargs["sequence_length"] = self.seq_length
        takes = inspect.signature(symbolic_trace).parameters   # transformers >= 4.2x: no sizes (traced as meta)
        saved = _torch_functions_hf_patches()
        try:
            return symbolic_trace(self.model, **{k: v for k, v in kwargs.items() if k in takes})
        except Exception as e:    # HuggingFace's tracer fails on models and versions it does not support
            import transformers
            hf_error = (f"HuggingFace's symbolic_trace (transformers {transformers.__version__}) could not trace "
                        f"{type(self.model).__name__} with input_names={self.input_names}: {type(e).__name__}: {e}")
        finally:    # its tracer leaves torch.tensor, torch.zeros ... patched when tracing fails: put them back
            torch = _torch()
            for name, fn in saved.items():
                setattr(torch, name, fn)
        return self._own_trace(hf_error)

    def _own_trace(self, hf_error: str):
        """flexrt's tracer where HuggingFace's failed (XLM-RoBERTa, CamemBERT: architectures it does
        not list), the inputs by ``input_names``, with a warning; both errors when it fails too."""
        from flexrt.torch import _trace
        names = list(self.input_names) if self.input_names else None
        try:
            gm = _trace.trace(self.model, self._input_specs, names)
        except ConfigError as e:
            raise ConfigError(f"PyTorchModel(is_hf_model=True): {hf_error}; flexrt's own tracer could not either: "
                              f"{e}") from None
        warn_caller(f"PyTorchModel(is_hf_model=True): {hf_error.split(': ')[0]}; traced with flexrt's own tracer "
                    f"instead", FrontendWarning)
        return gm

    def _convert(self):
        """(IR nodes, weight sources) of the traced module, traced once per input shapes given
        (``load_weights`` and ``ff_weights`` read the parameters' values through the sources)."""
        key = None if self._input_specs is None else tuple(self._input_specs)
        if self._converted is None or self._converted[0] != key:
            self._converted = (key, self._trace_and_convert())
        return self._converted[1]

    def _trace_and_convert(self):
        from flexrt.torch import _fx
        gm = self._graph_module()
        ctx = _fx._Ctx(gm)
        ctx.live = live_nodes(gm.graph)
        for node in gm.graph.nodes:
            try:
                _convert_node(ctx, node)
            except FlexrtError:
                raise
            except (TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError) as e:
                raise ctx.error(node, f"arguments flexrt cannot read ({type(e).__name__}: {e})") from None
        return ctx.nodes, ctx.weights

    def torch_to_string(self) -> list[str]:
        """Every node of the trace as a line of FlexFlow's format, in topological order."""
        return [format_line(n) for n in self._convert()[0]]

    def torch_to_file(self, filename: str) -> None:
        """Write ``torch_to_string()`` to ``filename``, one line per node."""
        write_ir(filename, self._convert()[0])

    def torch_to_ff(self, ffmodel, input_tensors: Sequence[Any], verbose: bool = False) -> list:
        """Add the module's layers to ``ffmodel`` reading ``input_tensors`` (one per ``forward``
        argument, in order); returns the output tensors (a list, as FlexFlow)."""
        specs = [(tuple(t.dims), t.data_type.name) for t in input_tensors if hasattr(t, "dims")]
        self._input_specs = specs if len(specs) == len(input_tensors) else None
        nodes, _ = self._convert()
        if verbose:
            for n in nodes:
                print(format_line(n))
        return build(ffmodel, nodes, list(input_tensors))

    to_ff = torch_to_ff   # FlexFlow's mt5 README calls it so

    def apply(self, ffmodel, input_tensors: Sequence[Any]) -> list:
        """FlexFlow's older entry point: the layers of the file given (``PyTorchModel(filename)``),
        else of the module, added to ``ffmodel``."""
        if self.filename is not None and self.model is None:
            return self.file_to_ff(self.filename, ffmodel, input_tensors)
        return self.torch_to_ff(ffmodel, input_tensors)

    @staticmethod
    def file_to_ff(filename: str, ffmodel, input_tensors: Sequence[Any]) -> list:
        """Add the layers of a ``torch_to_file`` file (flexrt's or FlexFlow's) to ``ffmodel``."""
        return build(ffmodel, read_ir(filename), list(input_tensors))

    # ---- weights -------------------------------------------------------------------------------
    def ff_weights(self) -> dict:
        """The module's current parameters in FFModel's layout, by FFModel weight name
        (``linear1.kernel``), for the layers ``torch_to_ff`` makes."""
        from flexrt.torch._weights import ff_layout
        out = {}
        for src in self._convert()[1]:
            for wname, arr in ff_layout(src.kind, _params(src.kind, src.module)).items():
                out[f"{src.layer}.{wname}"] = arr
        return out

    def load_weights(self, ffmodel) -> None:
        """Copy the module's parameters into ``ffmodel`` (compiled, built by ``torch_to_ff``)."""
        from flexrt.torch._weights import ff_layout, set_layer_weights
        for src in self._convert()[1]:
            set_layer_weights(ffmodel, src.layer, ff_layout(src.kind, _params(src.kind, src.module)))


def _convert_node(ctx, node) -> None:
    """One fx node into ``ctx``'s IR nodes (by its op: placeholder, output, module, attribute, call)."""
    from flexrt.torch import _fx
    from flexrt.torch._fx_functions import convert_call
    from flexrt.torch._fx_transformer import TAKES_MASKS
    if node.name in ctx.held:      # fx's check of an argument held at its default: no layer
        return
    if node.op == "placeholder":
        if str(node.target).startswith("*"):    # forward(..., *args, **kwargs): nothing given to them
            if node.users:
                raise ctx.error(node, f"forward reads its {node.target}, which the FFModel's inputs cannot fill; give "
                                      f"the tensors as named arguments")
            ctx.ignored.add(node.name)
            return
        checks = _default_checks(node)
        if checks is not None:         # an argument held at its default (targets=None, is_causal=False)
            ctx.ignored.add(node.name)
            ctx.held.update(checks)
            return
        ctx.add(node, "INPUT", [])
    elif node.op == "output":
        value = _unpacked(node.args[0], ctx.packs)
        ctx.check_inputs(node, packs_ok=True)
        ctx.add(node, "OUTPUT", [n.name for n in _output_nodes(value)], users=())
    elif node.op == "call_module":
        module = ctx.modules[node.target]
        ctx.check_inputs(node, masks_ok=type(module) in TAKES_MASKS)
        convert = _fx.MODULES.get(type(module))
        if convert is None:
            raise ctx.error(node, f"module {type(module).__module__}.{type(module).__name__} has no FFModel "
                                  f"mapping; supported modules: "
                                  f"{', '.join(sorted(t.__name__ for t in _fx.MODULES))}")
        convert(ctx, node, module)
    elif node.op == "get_attr":
        _fx.attribute(ctx, node)
    elif ctx.live is not None and node.name not in ctx.live:   # a value no output needs (HuggingFace's device checks): no layer
        ctx.ignored.add(node.name)
    else:
        convert_call(ctx, node)


def _writes(node) -> bool:
    """Whether ``node`` writes in place (``x[i] = v``, a method ending in ``_``) or checks
    (torch._assert): kept though nothing reads its value."""
    import torch
    if node.op == "call_method":
        return node.target.endswith("_")
    return node.op == "call_function" and (node.target in (operator.setitem, torch._assert) or
                                           getattr(node.target, "__name__", "").endswith("_"))


def live_nodes(graph) -> set[str]:
    """The names of the nodes the outputs and the writes in place need (the others are dead code)."""
    todo = [n for n in graph.nodes if n.op == "output" or _writes(n)]
    live = set()
    while todo:
        n = todo.pop()
        if n.name not in live:
            live.add(n.name)
            todo.extend(n.all_input_nodes)
    return live


def _default_checks(node):
    """The names of the nodes fx adds to check a forward argument it held at its default (``_assert_is_none(x)``,
    or ``torch._assert(x == value)``), when those checks are all that read the placeholder ``node``;
    else None (a real input)."""
    import torch
    checks = []
    for u in node.users:
        if getattr(u.target, "__name__", "") == "_assert_is_none":
            checks.append(u.name)
        elif node.args and u.target is operator.eq and u.users and all(w.target is torch._assert for w in u.users):
            checks += [u.name] + [w.name for w in u.users]
        else:
            return None
    return checks if node.users else None


def _unpacked(value, packs: dict):
    """``value`` with the named tuples made in forward (``packs``) replaced by their items."""
    from torch import fx
    if isinstance(value, fx.Node) and value.name in packs:
        return tuple(_unpacked(v, packs) for v in packs[value.name])
    if isinstance(value, dict):
        return {k: _unpacked(v, packs) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_unpacked(v, packs) for v in value)
    return value


def _output_nodes(value) -> list:
    from torch import fx
    if isinstance(value, fx.Node):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [n for v in value for n in _output_nodes(v)]
    return []


def _params(kind: str, module) -> dict:
    def arr(t):
        return None if t is None else t.detach().cpu().numpy().copy()
    if kind == "lstm":
        return {n: arr(getattr(module, n)) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
    if kind == "multihead_attention":
        names = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias")
        out = {n: arr(getattr(module, n, None)) for n in names}
        return out | {"out_proj_weight": arr(module.out_proj.weight), "out_proj_bias": arr(module.out_proj.bias)}
    out = {"weight": arr(getattr(module, "weight", None)), "bias": arr(getattr(module, "bias", None))}
    return out | ({"groups": module.groups} if kind == "conv_transpose2d" else {})


# FlexFlow's module-level name: reading a file needs no torch
file_to_ff = PyTorchModel.file_to_ff

__all__ = ["IRNode", "PyTorchModel", "file_to_ff"]
