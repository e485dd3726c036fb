"""``ONNXModel``: an ONNX graph into FFModel layers (FlexFlow's ``flexflow.onnx.model``).

Each ONNX node becomes ``IRNode``s of ``flexrt.torch._ir`` and goes through the builder the PyTorch
front end uses (``flexrt.torch._build``), so both map operators the same way. Initializers are
weights (copied in by ``load_weights`` after ``compile``) or constant arguments (a Reshape's
shape, a scalar of Add/Mul); graphs exported with ``export_params=False`` (FlexFlow's examples)
give weight shapes through their inputs. MatMul by a weight, plus an Add of a bias, is a dense
layer (FlexFlow's fusion). What a graph computes from constants alone (the sizes torch's exporter
reads from tensors, then Gather, Concat, Mod ... of them) is folded with the FFModel inputs' static
shapes (``flexrt.onnx._fold``). An operator or attribute with no FFModel equivalent raises
``ConfigError`` naming the node (name and op_type).

Example:
    >>> onnx_model = ONNXModel("mnist_mlp_pt.onnx")            # doctest: +SKIP
    >>> t = onnx_model.apply(ffmodel, {"input.1": input_tensor})  # doctest: +SKIP

Entry points: ``ONNXModel``, ``ONNXModelKeras``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, FrontendWarning, warn_caller
from flexrt.inputs import read_bytes, short
from flexrt.ir.enums import ActiMode, PoolType
from flexrt.model.composites import SELU_ALPHA, SELU_SCALE
from flexrt.onnx._composed import ComposedHandlers, ScatterHandlers
from flexrt.onnx._fold import FOLDABLE, fold, shape_of, static_shapes
from flexrt.onnx._proto import check_text, tensor_array
from flexrt.torch._build import build
from flexrt.torch._ir import IRNode
from flexrt.torch._weights import ff_layout, set_layer_weights
from flexrt.torch._windows import dilated_weight_kind

_NONE = ActiMode.AC_MODE_NONE.value
MAX_ONNX_BYTES = 2 ** 31     # protobuf's own limit of one message
_MAX_RANK = 64   # NumPy's limit of an array's dimensions
_DTYPES = {1: "torch.float32", 11: "torch.float64", 6: "torch.int32", 7: "torch.int64", 9: "torch.bool"}


def input_data_type(elem_type: int):
    """FFModel's DataType of an ONNX element type of a graph input, or None when it has none."""
    from flexrt.torch._build import DTYPES
    return DTYPES.get(_DTYPES.get(elem_type, ""))


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ConfigError("flexrt.onnx needs the onnx package: pip install onnx") from None
    return onnx


class ONNXModel:
    """FlexFlow's ``ONNXModel(filename)``: ``filename`` is a path or an ``onnx.ModelProto``."""

    def __init__(self, filename) -> None:
        onnx = _onnx()
        if isinstance(filename, str):
            data = read_bytes(filename, "ONNX file (ONNXModel)", max_bytes=MAX_ONNX_BYTES)
            try:
                model = onnx.load_model_from_string(data)
            except Exception as e:  # noqa: BLE001 - onnx raises DecodeError, OSError ...
                raise ConfigError(f"ONNXModel: cannot load {filename}: {e}") from None
            if not model.graph.node:
                raise ConfigError(f"ONNXModel: {filename} ({len(data)} bytes) holds no graph nodes; not an ONNX "
                                  f"model file?")
        elif isinstance(filename, onnx.ModelProto):
            model = filename
        else:
            raise ConfigError(f"ONNXModel: give a file name or an onnx.ModelProto, got {type(filename).__name__}")
        source = filename if isinstance(filename, str) else "the ModelProto"
        check_text(model, source)
        self.model = model
        self.onnx = onnx
        self.constants: dict[str, np.ndarray] = {
            t.name: tensor_array(onnx, t, f"ONNXModel: {source}: initializer {i} ({short(t.name, 60)})")
            for i, t in enumerate(model.graph.initializer)}
        self.shapes: dict[str, tuple] = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
                                         for i in model.graph.input}
        self.shapes.update({k: v.shape for k, v in self.constants.items()})
        # the file's weights, and views of one (Unsqueeze, Reshape ... of it, folded); the rest of the
        # constants: Constant nodes and what is folded from them
        self.initializers = set(self.constants)
        self.weights: list[tuple[str, str, dict]] = []   # (layer, kind, source names of its parameters)
        self.symbol_table: dict[str, Any] = {}

    # ---- graph -> IR ---------------------------------------------------------------------------
    def _nodes(self, input_names: list[str], input_dims: Mapping[str, tuple] | None = None) -> list[IRNode]:
        """The IR of the graph; ``input_dims`` (the FFModel inputs' sizes) make its size arithmetic
        constants (``flexrt.onnx._fold``)."""
        g = self.model.graph
        for name in input_names:
            if name not in self.shapes:
                raise ConfigError(f"apply: the graph has no input {name!r}; its inputs: "
                                  f"{', '.join(i.name for i in g.input if i.name not in self.constants)}")
        for i in g.input:       # an input not given is a weight (export_params=False): its shape must be static
            dims = i.type.tensor_type.shape.dim
            symbolic = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
            if i.name not in input_names and i.name not in self.constants and symbolic:
                raise ConfigError(f"apply: graph input {i.name!r} is not given, so it is a weight (exported with "
                                  f"export_params=False), but its shape has symbolic dimension(s) "
                                  f"{', '.join(symbolic)}; export it with static shapes, or give it to apply")
        self.weights = []
        self.input_dims = dict(input_dims or {})
        self.inferred = static_shapes(self.model, self.input_dims) | self.input_dims
        self.reinferred_at = len(self.constants)
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 13)
        consumers: dict[str, list] = {}
        for n in g.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        conv = _Converter(self, consumers, set(input_names))
        out = [IRNode(name, (), (), "INPUT") for name in input_names]
        for i, node in enumerate(g.node):
            out += conv.node(node, node.name or f"{node.op_type}_{i}")
        out.append(IRNode("output", tuple(o.name for o in g.output), (), "OUTPUT"))
        return conv.materialize(out)

    def apply(self, ffmodel, input_dict: Mapping[str, Any]):
        """Add the graph's layers to ``ffmodel``; ``input_dict`` maps graph input names to tensors.
        Returns the tensor of the graph's first output (FlexFlow's return value)."""
        if not isinstance(input_dict, Mapping) or not input_dict:
            raise ConfigError("apply: input_dict must map graph input names to FFModel tensors")
        input_dict = self._one_input_renamed(input_dict)
        names = list(input_dict)
        dims = {n: tuple(t.dims) for n, t in input_dict.items() if hasattr(t, "dims")}
        outputs = build(ffmodel, self._nodes(names, dims), [input_dict[n] for n in names])
        self.symbol_table = dict(input_dict) | dict(zip((o.name for o in self.model.graph.output), outputs))
        return outputs[0]

    def _one_input_renamed(self, input_dict: Mapping[str, Any]) -> Mapping[str, Any]:
        """One tensor given under a name the graph lacks goes to the graph's first input, with a
        warning: torch's exporters list the forward's arguments first (then, with
        export_params=False, the weights), and name them apart: the TorchScript exporter
        ``input.1`` or ``onnx::Gemm_0`` (FlexFlow's examples pass ``input.1``), the dynamo exporter
        (torch >= 2.9's default) the argument's name. With two tensors or more, names must match."""
        data = [i.name for i in self.model.graph.input if i.name not in self.constants]
        (given,) = input_dict if len(input_dict) == 1 else (None,)
        if given is None or not data or given in self.shapes:
            return input_dict
        warn_caller(f"apply: the graph has no input {given!r}; its first input {data[0]!r} takes that tensor "
                    f"(exporters name inputs differently: torch's TorchScript exporter input.1, its dynamo exporter "
                    f"the forward's argument)", FrontendWarning)
        return {data[0]: input_dict[given]}

    # ---- weights -------------------------------------------------------------------------------
    def ff_weights(self) -> dict:
        """The initializers in FFModel's layout, by FFModel weight name (after ``apply``)."""
        out = {}
        for layer, kind, params in self.weights:
            for wname, arr in ff_layout(kind, self._arrays(layer, params)).items():
                out[f"{layer}.{wname}"] = arr
        return out

    def load_weights(self, ffmodel) -> None:
        """Copy the initializers into ``ffmodel`` (compiled, built by ``apply``)."""
        for layer, kind, params in self.weights:
            set_layer_weights(ffmodel, layer, ff_layout(kind, self._arrays(layer, params)))

    def _arrays(self, layer: str, params: dict) -> dict:
        out = {}
        for key, (name, transpose) in params.items():
            if name not in self.constants:
                raise ConfigError(f"load_weights: layer '{layer}' takes its {key} from '{name}', which the file does "
                                  f"not hold (exported with export_params=False?)")
            arr = self.constants[name]
            out[key] = arr.T if transpose else arr
        return out


class ONNXModelKeras(ONNXModel):
    """FlexFlow's ``ONNXModelKeras(filename, ffconfig, ffmodel)`` for keras2onnx graphs: the same
    mapping (MatMul + Add of a bias is a dense layer; Transpose is a real transpose)."""

    def __init__(self, filename, ffconfig=None, ffmodel=None) -> None:
        super().__init__(filename)


_FILL_LIMIT = -1e9   # a masked fill at most this zeroes the probability in float32 and float64
_GROWS = frozenset({"Expand", "Tile", "Concat"})   # ops whose folding would turn a weight into a constant
_VIEWS = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Transpose"})   # same values


def _is_weight_array(m, tensor: str) -> bool:
    """An initializer of more than one floating value: a weight of the file."""
    v = m.constants.get(tensor)
    return tensor in m.initializers and v is not None and v.dtype.kind == "f" and v.size > 1


def _square(arr: np.ndarray):
    """``arr`` [1, ..., 1, T, T] as [T, T], else None."""
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2] or any(d != 1 for d in arr.shape[:-2]):
        return None
    return arr.reshape(arr.shape[-2:])


def _causal_hide(arr: np.ndarray) -> bool:
    """True exactly where a key lies after its query (above the diagonal)."""
    sq = _square(arr)
    return sq is not None and bool(np.array_equal(sq.astype(bool), np.triu(np.ones(sq.shape, bool), 1)))


def _additive_causal(arr: np.ndarray) -> bool:
    """0 on and below the diagonal, <= -1e9 (or -inf) above: an additive causal mask."""
    sq = _square(arr)
    if sq is None or sq.dtype.kind != "f":
        return False
    above = np.triu(np.ones(sq.shape, bool), 1)
    return bool(np.all(sq[~above] == 0) and np.all(sq[above] <= _FILL_LIMIT))


class _Converter(ComposedHandlers, ScatterHandlers):
    def __init__(self, model: ONNXModel, consumers: dict, inputs: set) -> None:
        self.m = model
        self.inputs = inputs
        self.consumers = consumers
        self.fused: dict[str, str] = {}    # Add output folded into a dense layer -> that layer's output
        self.causal: dict[str, str] = {}   # scores masked causally (no IR node) -> the scores' name
        self.free: dict[str, str] = {}     # initializer read as a tensor -> its PARAMETER layer

    def is_weight(self, tensor: str) -> bool:
        """An initializer, or a graph input that ``apply`` was not given (export_params=False)."""
        return tensor in self.m.constants or tensor in self.m.shapes and tensor not in self.inputs

    def error(self, node, name: str, message: str) -> ConfigError:
        return ConfigError(f"ONNX node '{name}' ({node.op_type}): {message}")

    def attrs(self, node) -> dict:
        from onnx import helper
        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def const(self, node, name: str, i: int, what: str) -> np.ndarray:
        if i >= len(node.input) or node.input[i] not in self.m.constants:
            raise self.error(node, name, f"its {what} (input {i}) must be a constant (an initializer or a Constant "
                                         f"node); FFModel takes it when the graph is built")
        return self.m.constants[node.input[i]]

    def shape(self, node, name: str, tensor: str) -> tuple:
        if tensor not in self.m.shapes:
            made = any(tensor in n.output for n in self.m.model.graph.node)
            hint = "" if made else (": no node makes it and the graph does not declare it (torch's dynamo exporter, "
                                    "torch >= 2.9's default, leaves weights so with export_params=False; export "
                                    "with export_params=True, or dynamo=False to have them as graph inputs)")
            raise self.error(node, name, f"the shape of '{tensor}' is unknown (not an initializer or graph input)"
                                         f"{hint}")
        return self.m.shapes[tensor]

    def node(self, node, name: str) -> list[IRNode]:
        op = node.op_type
        if node.output and node.output[0] in self.fused.values():
            return []
        if op in FOLDABLE and self._fold(node, name):
            return []
        handler = getattr(self, f"_{op}", None)
        if handler is None:
            raise self.error(node, name, f"operator {op} has no FFModel mapping; supported: "
                                         f"{', '.join(sorted(k[1:] for k in dir(self) if k[1:2].isupper()))}")
        try:
            return handler(node, name, self.attrs(node))
        except FlexrtError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError) as e:
            raise self.error(node, name, f"malformed attributes or inputs ({type(e).__name__}: {e}); attributes "
                                         f"{sorted(self.attrs(node))}, inputs {list(node.input)}") from None

    def _fold(self, node, name: str) -> bool:
        """Make ``node``'s outputs constants when it computes from constants only (a Shape: from a
        tensor of static shape); False when it does not."""
        m = self.m
        if node.op_type == "Shape":
            if not node.input or not node.input[0]:
                raise self.error(node, name, "takes one input (the tensor whose shape it gives), got none")
            src = node.input[0]
            shape = m.shapes[src] if src in m.constants else m.inferred.get(src)
            if shape is None and m.reinferred_at != len(m.constants):   # ONNX's inference stopped short:
                m.reinferred_at = len(m.constants)                         # again with what is folded since
                m.inferred = static_shapes(m.model, m.input_dims, m.constants) | m.inferred
                shape = m.inferred.get(src)
            if shape is None:
                return False
            values = [shape_of(self.attrs(node), shape)]
        else:
            given = [i for i in node.input if i]
            if not given or any(i not in m.constants for i in given):
                return False
            if node.op_type in _GROWS and any(_is_weight_array(m, i) for i in given):
                return False   # a weight made larger (ViT's class token expanded) stays a trainable weight
            try:
                values = fold(node, m.constants, m.opset)
            except Exception as e:  # noqa: BLE001 - the evaluator's own errors: the graph is malformed
                raise self.error(node, name, f"cannot evaluate it on its constant inputs: {e}") from None
        for out, v in zip(node.output, values):
            m.constants[out] = np.asarray(v)
            m.shapes[out] = m.constants[out].shape
        if node.op_type in _VIEWS and _is_weight_array(m, node.input[0]):
            m.initializers.update(node.output)     # a weight reshaped (GroupNorm's scale, unsqueezed) stays one
        return True

    def ir(self, node, name, op, inputs, fields=(), keywords=(), output: str | None = None) -> IRNode:
        return IRNode(output or node.output[0], tuple(inputs), (), op, tuple(fields), tuple(keywords),
                      f"ONNX node '{name}' ({node.op_type})")

    def _layer(self, node, name, op, inputs, fields, keywords, kind, params) -> list[IRNode]:
        """A node with weights: the FFModel layer is named after the ONNX node; its value is
        published under the ONNX output name by an identity-free alias (a GETATTR-less rename)."""
        self.m.weights.append((name, kind, params))
        out = node.output[0]
        n = IRNode(name, tuple(inputs), (), op, tuple(fields), tuple(keywords), f"ONNX node '{name}' ({node.op_type})")
        return [n, IRNode(out, (name,), (), "CONTIGUOUS")] if out != name else [n]

    # ---- dense and convolution -------------------------------------------------------------
    def _Gemm(self, node, name, a):
        if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
            raise self.error(node, name, "Gemm with alpha, beta != 1 or transA is not supported")
        b = self.shape(node, name, node.input[1])
        trans = bool(a.get("transB", 0))
        out_dim, in_dim = (b[0], b[1]) if trans else (b[1], b[0])
        bias = len(node.input) > 2 and node.input[2] != ""
        params = {"weight": (node.input[1], not trans)} | ({"bias": (node.input[2], False)} if bias else {})
        return self._layer(node, name, "LINEAR", [node.input[0]], [out_dim, _NONE, int(bias)],
                           [("in_features", in_dim)], "dense", params)

    def _MatMul(self, node, name, a):
        w = node.input[1]
        if not self.is_weight(w) or len(self.m.shapes[w]) != 2:
            return [self.ir(node, name, "BATCH_MATMUL", node.input[:2])]
        in_dim, out_dim = self.m.shapes[w]
        params = {"weight": (w, True)}
        users = self.consumers.get(node.output[0], [])
        if len(users) == 1 and users[0].op_type == "Add":
            other = [i for i in users[0].input if i != node.output[0]]
            if other and self.m.shapes.get(other[0]) == (out_dim,):
                params["bias"] = (other[0], False)
                self.fused[node.output[0]] = users[0].output[0]
                nodes = self._layer(node, name, "LINEAR", [node.input[0]], [out_dim, _NONE, 1],
                                    [("in_features", in_dim)], "dense", params)
                return nodes + [IRNode(users[0].output[0], (nodes[-1].name,), (), "CONTIGUOUS")]
        return self._layer(node, name, "LINEAR", [node.input[0]], [out_dim, _NONE, 0], [("in_features", in_dim)],
                           "dense", params)

    def _pads(self, node, name, a, kernel) -> tuple[int, int]:
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if any(k % 2 == 0 for k in kernel) or any(s != 1 for s in a.get("strides", [1, 1])):
                raise self.error(node, name, f"auto_pad={auto} with an even kernel or a stride pads unevenly")
            return kernel[0] // 2, kernel[1] // 2
        pads = list(a.get("pads", [0, 0, 0, 0])) if auto != "VALID" else [0, 0, 0, 0]
        if pads[:2] != pads[2:]:
            raise self.error(node, name, f"pads {pads} are uneven (begin != end); FFModel pads both sides equally")
        return pads[0], pads[1]

    def _Conv(self, node, name, a):
        w = self.shape(node, name, node.input[1])
        if len(w) == 3:
            return self._conv1d(node, name, a, w)
        dilation = tuple(a.get("dilations", [1, 1]))
        groups = a.get("group", 1)
        bias = len(node.input) > 2 and node.input[2] != ""
        kind = dilated_weight_kind(groups, w[1] * groups, w[0], bias) if len(w) == 4 else None
        if len(w) != 4 or dilation != (1, 1) and kind is None:
            raise self.error(node, name, f"a convolution of weight {list(w)}, dilations {list(dilation)} and "
                                         f"group {groups}; valid: 2-D, and group 1 (or depthwise without a bias) "
                                         f"where dilated")
        kh, kw = a.get("kernel_shape", w[2:])
        sh, sw = a.get("strides", [1, 1])
        ph, pw = self._pads(node, name, a, (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1))
        params = {"weight": (node.input[1], False)} | ({"bias": (node.input[2], False)} if bias else {})
        fields = [w[0], kh, kw, sh, sw, ph, pw, _NONE, groups, int(bias)]
        if dilation != (1, 1):      # windows and a dense layer (flexrt.torch._windows), as torch's
            return self._layer(node, name, "CONV2D_DILATED", [node.input[0]], fields,
                               [("in_channels", w[1] * groups), ("dilation", dilation)], kind, params)
        return self._layer(node, name, "CONV2D", [node.input[0]], fields, [("in_channels", w[1] * groups)], "conv2d",
                           params)

    def _BatchNormalization(self, node, name, a):
        """Training form (torch's TrainingMode.TRAINING export, FlexFlow's examples): FFModel's
        batch_norm. Inference form (the default export): a BatchNorm with the file's running
        statistics (torch's eval mode), its scale and shift trainable."""
        if not a.get("training_mode", 0) and len(node.output) == 1:
            where = f"ONNX node '{name}' (BatchNormalization)"
            made, ins = [], [node.input[0]]
            for i, part in ((3, "running_mean"), (4, "running_var")):
                ins.append(f"{name}.{part}")
                made.append(IRNode(ins[-1], (), (), "CONSTANT", (self.const(node, name, i, part),), (), where))
            for i, part in ((1, "scale"), (2, "shift")):
                nodes, ref = self._array_operand(where, node.input[i], self.const(node, name, i, part), f"{name}.{part}")
                made, ins = made + nodes, ins + [ref]
            return made + [self.ir(node, name, "FROZEN_BATCH_NORM", ins, [], [("eps", a.get("epsilon", 1e-5))])]
        kws = [("eps", a["epsilon"])] if abs(a.get("epsilon", 1e-5) - 1e-5) > 1e-12 else []
        return self._layer(node, name, "BATCH_NORM", [node.input[0]], [], kws, "batch_norm",
                           {"weight": (node.input[1], False), "bias": (node.input[2], False)})

    def _LayerNormalization(self, node, name, a):
        axis = a.get("axis", -1)
        x = self.shape(node, name, node.input[0]) if node.input[0] in self.m.shapes else None
        scale = self.shape(node, name, node.input[1])
        if x is not None and tuple(x[axis:]) != tuple(scale):
            raise self.error(node, name, f"axis {axis} normalizes {list(x[axis:])}, the scale is {list(scale)}")
        bias = len(node.input) > 2 and node.input[2] != ""
        params = {"weight": (node.input[1], False)} | ({"bias": (node.input[2], False)} if bias else {})
        kws = [("shape", tuple(scale)), ("eps", a.get("epsilon", 1e-5))] + ([] if bias else [("bias", False)])
        return self._layer(node, name, "LAYER_NORM", [node.input[0]], [], kws, "layer_norm", params)

    def _Gather(self, node, name, a):
        data = node.input[0]
        if self.is_weight(data) and len(self.m.shapes[data]) == 2 and a.get("axis", 0) == 0 \
                and not self.is_weight(node.input[1]):
            num, dim = self.m.shapes[data]
            return self._layer(node, name, "EMBEDDING", [node.input[1]], [num, dim], [], "embedding",
                               {"weight": (data, False)})
        index = self.m.constants.get(node.input[1])
        if index is not None and index.size == 1 and index.ndim <= 1 and not self.is_weight(data):
            # one position of a dimension (q, k, v = the stacked projections [0], [1], [2]): torch's x[:, i];
            # a 1-element index keeps the dimension (x[:, [-1], :], a GPT's last position)
            axis, rank = int(a.get("axis", 0)), len(self.m.inferred.get(data, ()))
            if axis < 0 and not rank:
                raise self.error(node, name, f"axis {axis} of '{data}', whose rank is unknown; export with axis >= 0")
            if not -(rank or _MAX_RANK) <= axis < (rank or _MAX_RANK):
                raise self.error(node, name, f"axis {short(axis)} of '{data}' is out of range; valid: " +
                                 (f"{-rank}..{rank - 1} (its rank is {rank})" if rank else f"0..{_MAX_RANK - 1}"))
            axis += rank if axis < 0 else 0
            k = int(index.reshape(()))
            item = k if index.ndim == 0 else slice(k, k + 1 if k != -1 else None)
            return [self.ir(node, name, "GETITEM", [data], [(slice(None),) * axis + (item,)])]
        raise self.error(node, name, "only Gather of rows of a 2-D weight by computed indices (an embedding), or of "
                                     "one constant position of a tensor, maps")

    # ---- pooling ---------------------------------------------------------------------------
    def _pool(self, node, name, a, pool: PoolType):
        if len(a["kernel_shape"]) == 1:       # a 1-D pool, as torch's MaxPool1d / AvgPool1d
            pads = list(a.get("pads", [0, 0]))
            if pads[0] != pads[-1] or a.get("ceil_mode", 0) or pool is PoolType.POOL_AVG and pads[0] and \
                    not a.get("count_include_pad", 0):
                raise self.error(node, name, f"1-D pooling with pads {pads}, ceil_mode or count_include_pad=0 does "
                                             f"not map")
            k = a["kernel_shape"][0]
            return [self.ir(node, name, "POOL1D", [node.input[0]], [k, a.get("strides", [k])[0], pads[0], pool.value])]
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides", [1, 1])
        ph, pw = self._pads(node, name, a, (kh, kw))
        kws = [(k, v) for k, v, h in (("kernel_w", kw, kh), ("stride_w", sw, sh), ("padding_w", pw, ph)) if v != h]
        if pool is PoolType.POOL_AVG and (ph or pw) and not a.get("count_include_pad", 0):   # ONNX's default
            kws.append(("exclude_pad", True))
        kws += [("ceil_mode", True)] if a.get("ceil_mode", 0) else []
        return [self.ir(node, name, "POOL2D", [node.input[0]], [kh, sh, ph, pool.value, _NONE], kws)]

    def _MaxPool(self, node, name, a):
        if len(node.output) > 1 and node.output[1]:
            raise self.error(node, name, "MaxPool's indices output is not supported")
        return self._pool(node, name, a, PoolType.POOL_MAX)

    def _AveragePool(self, node, name, a):
        return self._pool(node, name, a, PoolType.POOL_AVG)

    def _global_pool(self, node, name, pool: PoolType):
        """Over every spatial axis: a pool2d of one window for images, else a mean / max (1-D data)."""
        rank = len(self.m.inferred.get(node.input[0], ()) or self.m.shapes.get(node.input[0], ()))
        if rank and rank != 4:
            op = "MEAN" if pool is PoolType.POOL_AVG else "REDUCE_MAX"
            return [self.ir(node, name, op, [node.input[0]], list(range(2, rank)), [("keepdim", True)])]
        return [self.ir(node, name, "POOL2D", [node.input[0]], [3, 1, 0, pool.value, _NONE], [("output_size", (1, 1))])]

    def _GlobalAveragePool(self, node, name, a):
        return self._global_pool(node, name, PoolType.POOL_AVG)

    def _GlobalMaxPool(self, node, name, a):
        return self._global_pool(node, name, PoolType.POOL_MAX)

    # ---- element-wise ----------------------------------------------------------------------
    def _unary(op):
        def handler(self, node, name, a):
            approximate = a.get("approximate", "none")
            approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
            if node.op_type == "Gelu" and approximate not in ("none", "tanh"):
                raise self.error(node, name, f"Gelu approximate={approximate!r}; valid: none, tanh")
            if node.op_type == "Gelu" and approximate == "tanh":
                return [self.ir(node, name, "GELU_TANH", [node.input[0]], [])]
            if node.op_type == "Selu" and (abs(a.get("alpha", SELU_ALPHA) - SELU_ALPHA) > 1e-6 or
                                           abs(a.get("gamma", SELU_SCALE) - SELU_SCALE) > 1e-6):
                raise self.error(node, name, f"Selu alpha={a.get('alpha')}, gamma={a.get('gamma')}: only the "
                                             f"standard ones ({SELU_ALPHA:.6f}, {SELU_SCALE:.6f}) are available")
            fields = [float(a.get("alpha", 1.0))] if op in ("ELU", "CELU") else []
            return [self.ir(node, name, op, [node.input[0]], fields)]
        return handler

    _Relu, _Sigmoid, _Tanh, _Elu, _Gelu = _unary("RELU"), _unary("SIGMOID"), _unary("TANH"), _unary("ELU"), _unary("GELU")
    _Exp, _Sin, _Cos, _Log = _unary("EXP"), _unary("SIN"), _unary("COS"), _unary("LOG")
    _Softplus, _Mish, _Abs = _unary("SOFTPLUS"), _unary("MISH"), _unary("ABS")
    _Celu, _Selu, _Softsign = _unary("CELU"), _unary("SELU"), _unary("SOFTSIGN")

    def _Clip(self, node, name, a):
        """Clip to [0, 6] (ReLU6: torch's export of nn.ReLU6 and F.relu6), to [0, inf) (ReLU), or to
        other bounds (CLAMP: F.normalize's floor); the bounds are attributes (opset < 11) or constant
        inputs."""
        def bound(i, key, default):
            if i < len(node.input) and node.input[i]:
                return float(self.const(node, name, i, key).reshape(()))
            return float(a.get(key, default))
        lo, hi = bound(1, "min", -np.inf), bound(2, "max", np.inf)
        if lo == 0.0 and hi in (6.0, np.inf):
            return [self.ir(node, name, "RELU6" if hi == 6.0 else "RELU", [node.input[0]])]
        if np.isnan(lo) or np.isnan(hi) or lo == np.inf or hi == -np.inf:
            raise self.error(node, name, f"Clip to [{lo:g}, {hi:g}]: the bounds must be numbers")
        bounds = [None if np.isinf(v) else v for v in (lo, hi)]
        return [self.ir(node, name, "CLAMP", [node.input[0]], bounds)] if bounds != [None, None] else \
            [self.ir(node, name, "IDENTITY", [node.input[0]])]

    def _HardSigmoid(self, node, name, a):
        alpha, beta = a.get("alpha", 0.2), a.get("beta", 0.5)
        if not (np.isclose(alpha, 1 / 6) and np.isclose(beta, 0.5)):
            raise self.error(node, name, f"HardSigmoid alpha={alpha:g}, beta={beta:g}: only torch's (alpha 1/6, beta "
                                         f"0.5) has an FFModel form, relu6(x + 3) / 6")
        return [self.ir(node, name, "HARDSIGMOID", [node.input[0]])]

    def _HardSwish(self, node, name, a):
        return [self.ir(node, name, "HARDSWISH", [node.input[0]])]

    # an Identity of an initializer (torch's exporter shares equal initializers so) is folded
    _Identity = _unary("IDENTITY")

    def _binary(op, scalar_op):
        def handler(self, node, name, a):
            x, y = node.input[:2]
            scal = {i: self.m.constants[t] for i, t in enumerate((x, y)) if t in self.m.constants}
            arrays = {i: v for i, v in scal.items() if v.size != 1}
            if arrays and len(scal) == 1:
                i, v = next(iter(arrays.items()))
                tensor = y if i == 0 else x
                if op == "ADD" and _additive_causal(v) and self._softmax_alone(node):   # SDPA's causal mask
                    self.causal[node.output[0]] = tensor
                    return []
                made, ref = self._array_operand(f"ONNX node '{name}' ({node.op_type})", (x, y)[i], v,
                                                f"{name}.{'param' if (x, y)[i] in self.m.initializers else 'const'}{i}")
                return made + [self.ir(node, name, op, [ref, y] if i == 0 else [x, ref])]
            if not scal:
                return [self.ir(node, name, op, [x, y])]
            if len(scal) == 2:
                raise self.error(node, name, "both operands are constants (fold them before export)")
            i, v = next(iter(scal.items()))
            tensor = y if i == 0 else x
            rev = [("reverse", True)] if i == 0 and op in ("SUBTRACT", "DIVIDE") else []
            num = v.reshape(()).item() if v.dtype.kind in "iuf" else float(v.reshape(()))   # its kind: int or float
            return [self.ir(node, name, scalar_op, [tensor], [num], rev)]
        return handler

    _Add = _binary("ADD", "SCALAR_ADD")
    _Sub = _binary("SUBTRACT", "SCALAR_SUB")
    _Mul = _binary("MULTIPLY", "SCALAR_MULTIPLY")
    _Div = _binary("DIVIDE", "SCALAR_TRUEDIV")

    def _LeakyRelu(self, node, name, a):
        return [self.ir(node, name, "LEAKY_RELU", [node.input[0]], [float(a.get("alpha", 0.01))])]

    def _Neg(self, node, name, a):
        return [self.ir(node, name, "SCALAR_MULTIPLY", [node.input[0]], [-1.0])]

    def _Pow(self, node, name, a):
        e = self.const(node, name, 1, "exponent")
        return [self.ir(node, name, "POW", [node.input[0]], [float(e.reshape(()))])]

    def _Sqrt(self, node, name, a):
        return [self.ir(node, name, "POW", [node.input[0]], [0.5])]

    def _Reciprocal(self, node, name, a):
        return [self.ir(node, name, "POW", [node.input[0]], [-1.0])]

    # ---- shapes ----------------------------------------------------------------------------

    def _Softmax(self, node, name, a):
        x = node.input[0]
        if x in self.causal:
            return [self.ir(node, name, "SOFTMAX", [self.causal[x]], [], [("dim", -1), ("causal", True)])]
        return [self.ir(node, name, "SOFTMAX", [x], [], [("dim", a.get("axis", -1))])]

    def materialize(self, nodes: list) -> list:
        """``nodes`` with a node before the first reader of each array no node defines: an
        initializer (a weight: a PARAMETER, trainable) or another constant (a CONSTANT), read as a
        tensor by an op that does not take it as its own weight (ViT's class token, a Concat)."""
        defined, out, moved = set(), [], set()
        params = {n.name: n for n in nodes if n.op == "PARAMETER"}
        for n in nodes:
            if n.name in moved:
                continue
            for t in n.inputs:
                if t not in defined and t in self.m.constants:
                    made, ref = self._array_operand(n.origin, t, self.m.constants[t], t)
                    if ref != t:   # the initializer's layer exists under another name: read it by an alias
                        if ref not in defined and ref in params:   # made by a later reader: defined here first
                            made = made + [params[ref]]
                            moved.add(ref)
                            defined.add(ref)
                        made = made + [IRNode(t, (ref,), (), "CONTIGUOUS", (), (), n.origin)]
                    out += made
                    defined.add(t)
            out.append(n)
            defined.add(n.name)
        return out

    def _array_operand(self, where: str, tensor: str, value: np.ndarray, name: str) -> tuple[list, str]:
        """(IR nodes, the name to read) for an array read as a tensor, the new node named ``name``:
        an initializer is a weight (a PARAMETER, trainable, as the torch front end makes a parameter
        read directly; one layer per initializer), any other constant a model constant."""
        value = value.reshape(1) if value.ndim == 0 else value     # a 0-d one (CLIP's logit scale): one element
        if tensor not in self.m.initializers:
            return [IRNode(name, (), (), "CONSTANT", (value,), (), where)], name
        if tensor in self.free:
            return [], self.free[tensor]
        self.free[tensor] = name
        self.m.weights.append((name, "parameter", {"weight": (tensor, False)}))
        return [IRNode(name, (), (), "PARAMETER", tuple(value.shape), (("dtype", str(value.dtype)),), where)], name

    def _softmax_alone(self, node) -> bool:
        """Whether only softmaxes over the last axis read ``node``'s output (a causal mask's scores)."""
        out = node.output[0]
        users = self.consumers.get(out, [])
        rank = len(self.m.shapes[out]) if out in self.m.shapes else None
        return bool(users) and all(u.op_type == "Softmax" and self.attrs(u).get("axis", -1) in (-1, rank and rank - 1)
                                   for u in users)

    def _Where(self, node, name, a):
        """Where(mask, fill, scores) of torch's masked_fill by a causal mask (the mask and the fill
        constants: a fill <= -1e9 or -inf where a key lies in the future), read by softmaxes over
        the last axis only: their causal softmax of the scores."""
        cond, fill, scores = node.input[:3]
        c, f = self.m.constants.get(cond), self.m.constants.get(fill)
        if c is None or f is None or scores in self.m.constants or not _causal_hide(c) or \
                not bool(np.all(f <= _FILL_LIMIT)) or not self._softmax_alone(node):
            return self._with_constants(node, name, "WHERE", [])   # any other selection (a padding mask's)
        self.causal[node.output[0]] = scores
        return []

    def _with_constants(self, node, name, op, fields) -> list[IRNode]:
        """``op`` of the node's inputs, each constant one given as a CONSTANT node of its values (the
        builder folds a comparison or selection of constants alone: shapes, masks)."""
        made, refs = [], []
        for i, t in enumerate(node.input):
            if t in self.m.constants:
                refs.append(f"{name}.const{i}")
                made.append(IRNode(refs[-1], (), (), "CONSTANT", (self.m.constants[t],), (),
                                   f"ONNX node '{name}' ({node.op_type})"))
            else:
                refs.append(t)
        return made + [self.ir(node, name, op, refs, fields)]

    def _compare(op):
        def handler(self, node, name, a):
            return self._with_constants(node, name, "COMPARE", [op])
        return handler

    _Equal, _Less, _Greater = _compare("EQ"), _compare("LT"), _compare("GT")
    _LessOrEqual, _GreaterOrEqual = _compare("LE"), _compare("GE")

    def _Not(self, node, name, a):
        return self._with_constants(node, name, "LOGICAL_NOT", [])

    def _extreme(op):
        def handler(self, node, name, a):
            """Min / Max of two operands, element-wise (of constants: folded)."""
            if len(node.input) != 2:
                raise self.error(node, name, f"{node.op_type} of {len(node.input)} operands; valid: 2")
            return self._with_constants(node, name, op, [])
        return handler

    _Min, _Max = _extreme("MIN"), _extreme("MAX")

    def _Dropout(self, node, name, a):
        ratio = a.get("ratio", 0.5)
        if len(node.input) > 1 and node.input[1]:
            ratio = float(self.const(node, name, 1, "ratio").reshape(()))
        if len(node.input) > 2 and node.input[2] and not bool(self.const(node, name, 2, "training_mode")):
            return [self.ir(node, name, "IDENTITY", [node.input[0]])]
        return [self.ir(node, name, "DROPOUT", [node.input[0]], [ratio])]

    def _Flatten(self, node, name, a):
        """ONNX Flatten at ``axis``: [prod(d[:axis]), prod(d[axis:])]."""
        axis = a.get("axis", 1)
        if axis == 0:
            return [self.ir(node, name, "RESHAPE", [node.input[0]], [1, -1])]
        if axis == 1:
            return [self.ir(node, name, "FLAT", [node.input[0]])]
        tail = IRNode(f"{node.output[0]}.tail", (node.input[0],), (), "FLAT", (), (("start_dim", axis),),
                      f"ONNX node '{name}' (Flatten)")
        return [tail, self.ir(node, name, "FLAT", [tail.name], [], [("start_dim", 0), ("end_dim", -2)])]

    def _Reshape(self, node, name, a):
        shape = [int(v) for v in self.const(node, name, 1, "shape")]
        zeros = 0 in shape and not a.get("allowzero", 0)   # 0 copies the input's size (ONNX's rule)
        return [self.ir(node, name, "RESHAPE", [node.input[0]], shape, [("copy_zeros", True)] if zeros else [])]

    def _Transpose(self, node, name, a):
        perm = a.get("perm")
        if perm is None:
            raise self.error(node, name, "Transpose without perm (a full reversal) is not supported")
        return [self.ir(node, name, "PERMUTE", [node.input[0]], list(perm))]

    def _Expand(self, node, name, a):
        """Expand of a tensor (ViT's class token, an initializer, to the batch): torch's expand to
        the broadcast of its shape and the constant target shape."""
        x = node.input[0]
        target = [int(d) for d in self.const(node, name, 1, "shape")]
        shape = self.m.shapes.get(x) or self.m.inferred.get(x)
        if shape is None:   # broadcast when the graph is built, from the tensor's shape
            return [self.ir(node, name, "EXPAND", [x], target, [("broadcast", True)])]
        try:
            sizes = np.broadcast_shapes(tuple(shape), tuple(target))
        except ValueError as e:
            raise self.error(node, name, f"cannot expand {list(shape)} to {target}: {e}") from None
        return [self.ir(node, name, "EXPAND", [x], [int(d) for d in sizes])]

    def _Concat(self, node, name, a):
        return [self.ir(node, name, "CONCAT", list(node.input), [a["axis"]])]

    def _Split(self, node, name, a):
        axis = a.get("axis", 0)
        split = a.get("split")
        if len(node.input) > 1 and node.input[1]:
            split = [int(s) for s in self.const(node, name, 1, "split")]
        kw = [("sections", tuple(split))] if split is not None else [("chunks", len(node.output))]
        whole = f"{node.output[0]}.pieces"
        nodes = [IRNode(whole, (node.input[0],), (), "SPLIT", (axis,), tuple(kw), f"ONNX node '{name}' (Split)")]
        nodes += [IRNode(o, (whole,), ("used",), "GETITEM", (i,), (), nodes[0].origin) for i, o in enumerate(node.output)]
        return nodes

    def _Slice(self, node, name, a):
        """A Slice of a tensor with constant starts, ends, axes and positive steps: torch's x[:, lo:hi:k]
        (ONNX clamps ends beyond the size, as Python's slices do)."""
        starts, ends = (self.const(node, name, i, what).tolist() for i, what in ((1, "starts"), (2, "ends")))
        rank = len(self.m.inferred.get(node.input[0], ()))
        axes = self.const(node, name, 3, "axes").tolist() if len(node.input) > 3 and node.input[3] else \
            list(range(len(starts)))
        steps = self.const(node, name, 4, "steps").tolist() if len(node.input) > 4 and node.input[4] else \
            [1] * len(starts)
        if any(st < 1 for st in steps):
            raise self.error(node, name, f"steps {steps}: only positive steps map (FFModel's split and reshape)")
        if any(ax < 0 for ax in axes) and not rank:
            raise self.error(node, name, f"axes {axes} of '{node.input[0]}', whose rank is unknown; export with "
                                         f"axes >= 0")
        index = [slice(None)] * (max(ax % rank if rank else ax for ax in axes) + 1)
        for ax, lo, hi, st in zip(axes, starts, ends, steps):
            index[ax % rank if rank else ax] = slice(int(lo), int(min(hi, 2 ** 62)), int(st))
        return [self.ir(node, name, "GETITEM", [node.input[0]], [tuple(index)])]

    def _axes(self, node, name, a):
        if "axes" in a:
            return list(a["axes"])
        if len(node.input) > 1 and node.input[1]:
            return [int(v) for v in self.const(node, name, 1, "axes")]
        return []

    def _Unsqueeze(self, node, name, a):
        axes = sorted(self._axes(node, name, a))
        nodes, src = [], node.input[0]
        for i, ax in enumerate(axes):
            out = node.output[0] if i == len(axes) - 1 else f"{node.output[0]}.{i}"
            nodes.append(IRNode(out, (src,), (), "UNSQUEEZE", (ax,), (), f"ONNX node '{name}' (Unsqueeze)"))
            src = out
        return nodes

    def _Squeeze(self, node, name, a):
        return [self.ir(node, name, "SQUEEZE", [node.input[0]], self._axes(node, name, a))]

    def _reduce(op):
        def handler(self, node, name, a):
            return [self.ir(node, name, op, [node.input[0]], self._axes(node, name, a),
                            [("keepdim", bool(a.get("keepdims", 1)))])]
        return handler

    _ReduceMean, _ReduceSum, _ReduceMax = _reduce("MEAN"), _reduce("REDUCE_SUM"), _reduce("REDUCE_MAX")
    _ReduceL2, _ReduceLogSumExp = _reduce("REDUCE_L2"), _reduce("LOGSUMEXP")

    def _Cast(self, node, name, a):
        to = a.get("to")
        if to not in _DTYPES:
            raise self.error(node, name, f"cast to ONNX type {to} is not supported; valid: {sorted(_DTYPES)}")
        return [self.ir(node, name, "TO", [node.input[0]], [_DTYPES[to]])]

    def _Constant(self, node, name, a):
        if "value" not in a:
            raise self.error(node, name, "only Constant nodes with a 'value' tensor are supported")
        if not isinstance(a["value"], self.m.onnx.TensorProto):
            raise self.error(node, name, f"its attribute 'value' must be a tensor, got {type(a['value']).__name__} "
                                         f"{short(a['value'])}")
        arr = tensor_array(self.m.onnx, a["value"], f"ONNX node '{name}' (Constant): attribute 'value'")
        self.m.constants[node.output[0]] = arr
        self.m.shapes[node.output[0]] = arr.shape
        return []

    del _unary, _binary, _reduce, _compare, _extreme
