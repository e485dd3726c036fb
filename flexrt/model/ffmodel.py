"""``FFModel``: FlexFlow's model-building API, building a PCG (one device, every degree 1).

Every layer method has FlexFlow's name, argument names, defaults and order, so a FlexFlow script
runs after changing ``from flexflow.core import *`` to ``from flexrt.core import *``. The layer
methods live in mixins by family (``_layers_dense``, ``_layers_shape``, ``_layers_elementwise``);
this module holds the model itself: inputs and constants, the shared layer-building step, lookups
(layers, weights as ``Parameter``), the summary, ``set_optimizer`` and ``compile``; the other
training calls (``fit``, ``eval``, data loaders, the manual loop) are in ``flexrt.model.training``.

Example:
    >>> from flexrt.model import FFConfig, FFModel, ActiMode
    >>> m = FFModel(FFConfig(["-b", "64"]))
    >>> x = m.create_tensor([64, 784])
    >>> t = m.dense(x, 512, ActiMode.AC_MODE_RELU)
    >>> t = m.softmax(m.dense(t, 10))
    >>> t.dims, m.num_parameters()
    ((64, 10), 407050)

Entry point: ``FFModel``.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional, Sequence, TextIO

import numpy as np

from flexrt.errors import ConfigError, FlexrtError, GraphError, NotYetAvailableError, ShapeError
from flexrt.ir.datatype import DataType
from flexrt.ir.ops import InputAttrs, WeightAttrs
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.model import _capture, _check
from flexrt.model._layers_dense import DenseLayers
from flexrt.model._layers_elementwise import ElementwiseLayers
from flexrt.model._layers_fused import FusedLayers
from flexrt.model._layers_shape import ShapeLayers
from flexrt.inputs import short
from flexrt.model.config import FFConfig
from flexrt.model.dataloader import batch_dtype
from flexrt.model.enums import CompMode, LossType, MetricsType
from flexrt.kernels.metrics import check_metrics_for_loss
from flexrt.model.initializers import Initializer
from flexrt.model.layer import Layer, Weight
from flexrt.model.optimizers import Optimizer, SGDOptimizer
from flexrt.model.report import format_table
from flexrt.model.tensor import Parameter, Tensor
from flexrt.model.training import TrainingMixin, optimizer_args, resolve_loss, resolve_metrics

# FlexFlow Serve's FFModel methods (LLM inference: incremental decoding, speculative inference,
# sampling); flexrt trains models and leaves them out (README, "Porting a FlexFlow script")
MAX_LAYERS = 1_000_000   # a script adding layers in an endless loop stops here (~1.5 GB), not at memory's end
SERVE_ONLY = ("arg_top_k", "argmax", "beam_top_k", "sampling", "inc_multihead_self_attention",
              "inc_multihead_self_attention_verify", "inc_multiquery_self_attention",
              "inc_multiquery_self_attention_verify", "spec_inc_multihead_self_attention",
              "spec_inc_multiquery_self_attention", "groupquery_self_attention",
              "spec_inc_multiquery_self_attention_verify", "generate", "init_operators_inference")


class ServeOnlyError(NotYetAvailableError, AttributeError):
    """A FlexFlow Serve method called on ``FFModel`` (``SERVE_ONLY``); an AttributeError too, so that
    ``hasattr`` says False as it would in a FlexFlow without Serve."""


def _constant_array(where: str, value: np.ndarray, sizes: tuple, data_type: DataType) -> np.ndarray:
    """``value`` checked as a constant's array: shape ``sizes``, finite numbers, cast to ``data_type``
    (exactly: integers must be whole and fit), read-only."""
    if tuple(value.shape) != tuple(sizes):
        raise ConfigError(f"{where}: value has shape {list(value.shape)}; dims are {list(sizes)}")
    if value.dtype.kind not in "iufb":
        raise ConfigError(f"{where}: value must hold numbers, got dtype {value.dtype}")
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise ConfigError(f"{where}: value holds NaN or inf, which would poison the model")
    out = value.astype(batch_dtype(data_type))
    if not np.array_equal(out.astype(np.float64), value.astype(np.float64)):
        raise ConfigError(f"{where}: value does not fit {data_type.name} exactly (whole numbers in range for "
                          f"integers)")
    out.setflags(write=False)
    return out


class FFModel(DenseLayers, ShapeLayers, ElementwiseLayers, FusedLayers, TrainingMixin):
    """A model under construction: ``pcg`` holds its graph, ``get_layers()`` its layers in call order.

    Layer names default to ``{method}_{n}`` (``dense_1``, ``dense_2``, ``relu_1``) and must be
    unique within a model; weights are PCG nodes named ``{layer}.{weight}`` (``dense_1.kernel``).
    """

    def __init__(self, ffconfig: FFConfig) -> None:
        if not isinstance(ffconfig, FFConfig):
            raise ConfigError(f"FFModel: ffconfig must be an FFConfig, got {ffconfig!r} (FFModel(FFConfig()))")
        self.ffconfig = ffconfig
        self.pcg = PCG()
        self._optimizer: Optional[Optimizer] = None
        self.loss_type: Optional[LossType] = None
        self.metrics: tuple[MetricsType, ...] = ()
        self.comp_mode: Optional[CompMode] = None
        self.label_tensor: Optional[Tensor] = None
        self._layers: list[Layer] = []
        self._inputs: list[Layer] = []
        self._by_name: dict[str, Layer] = {}
        self._counters: dict[str, int] = {}
        self._metric_types: tuple[MetricsType, ...] = ()
        self._constants: dict[str, Any] = {}     # constant input name -> its value (a number or an array)
        self._init_training()
        state = _capture.active()
        if state is not None:
            state.models.append(self)

    def __getattr__(self, name: str):
        """Only for names FFModel does not have: FlexFlow Serve's methods are refused saying so."""
        if name in SERVE_ONLY:
            raise ServeOnlyError(f"FFModel.{name} is FlexFlow Serve's (LLM inference: incremental decoding, "
                                 f"speculative inference, sampling); flexrt builds and trains models and does not "
                                 f"have it. Training layers: dense, conv2d, multihead_attention, softmax, ...")
        raise AttributeError(f"'FFModel' object has no attribute {name!r}", name=name, obj=self)

    # ---- inputs -------------------------------------------------------------------------------
    def create_tensor(self, dims, data_type=DataType.DT_FLOAT, create_grad=True) -> Tensor:
        """A model input of sizes ``dims`` (sample dimension first), named ``input_{n}``."""
        where = "create_tensor"
        sizes = _check.int_tuple(where, "dims", dims, low=1)
        if not sizes:
            raise ConfigError(f"{where}: dims must name at least one dimension, got {dims!r}")
        _check.member(where, "data_type", data_type, DataType)
        _check.flag(where, "create_grad", create_grad)
        attrs = InputAttrs(TensorShape(sizes, data_type))
        name = self._layer_name("input", None)
        nid = self.pcg.add_node(attrs, (), name=name)
        out = Tensor(self, TensorRef(nid), attrs.shape, name)
        layer = Layer(len(self._inputs), name, "input", attrs, nid, (), (out,), (), (("create_grad", create_grad),))
        self._inputs.append(layer)
        self._named("input", layer, True)
        return out

    def create_constant(self, dims, value, data_type=DataType.DT_FLOAT) -> Tensor:
        """A tensor of sizes ``dims`` holding ``value`` everywhere (FlexFlow's ``create_constant``),
        named ``constant_{n}``: an input the model feeds itself, not among ``inputs``. ``value`` may
        also be an array of shape ``dims`` (flexrt's: the positions ``torch.arange`` gives a GPT)."""
        where = "create_constant"
        sizes = _check.int_tuple(where, "dims", dims, low=1)
        if not sizes:
            raise ConfigError(f"{where}: dims must name at least one dimension, got {dims!r}")
        _check.member(where, "data_type", data_type, DataType)
        if isinstance(value, np.ndarray):
            value = _constant_array(where, value, sizes, data_type)
        elif isinstance(value, float):
            _check.number(where, "value", value)     # finite: a NaN or inf constant poisons the model
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: value must be a number or an array of shape {list(sizes)}, got "
                              f"{short(value)}")
        attrs = InputAttrs(TensorShape(sizes, data_type))
        name = self._layer_name("constant", None)
        nid = self.pcg.add_node(attrs, (), name=name)
        out = Tensor(self, TensorRef(nid), attrs.shape, name)
        shown = f"array {list(value.shape)}" if isinstance(value, np.ndarray) else value
        layer = Layer(len(self._inputs), name, "constant", attrs, nid, (), (out,), (), (("value", shown),))
        self._inputs.append(layer)
        self._constants[name] = value
        self._named("constant", layer, True)
        return out

    # ---- the one way a layer is added ---------------------------------------------------------
    def _add_layer(self, kind: str, attrs, inputs: Sequence[Tensor], name: Optional[str], *,
                   shared_op: Any = None, kernel_initializer: Any = None, bias_initializer: Any = None,
                   options: Iterable[tuple[str, Any]] = ()) -> Layer:
        """Add operator ``attrs`` reading ``inputs`` plus its weights (new ones, or ``shared_op``'s).

        A new weight of rank 1 (a bias) keeps ``bias_initializer``, every other one
        ``kernel_initializer`` (None: the runtime's default); a layer with ``shared_op`` reads the
        owner's weights and so keeps the owner's initializers.
        """
        if len(self._by_name) >= MAX_LAYERS:
            raise ConfigError(f"{kind}: the model already has {MAX_LAYERS:,} layers, flexrt's limit (a GPT-3-sized "
                              f"model has a few thousand); does the script add layers in a loop without end?")
        automatic = name is None
        name = self._layer_name(kind, name)
        label = f"{kind} '{name}'"
        inputs = tuple(inputs)
        refs = [self._ref_of(t, label, i) for i, t in enumerate(inputs)]
        shapes = [t.get_shape() for t in inputs]
        opdef = op_def(attrs.op_type)
        if not opdef.data_input_count_ok(len(inputs)):
            raise GraphError(f"{label}: takes {opdef.num_inputs} input(s), got {len(inputs)}")
        try:
            outs = opdef.output_shapes(attrs, shapes)
            wshapes = tuple(opdef.weight_shapes(attrs, shapes)) if opdef.weight_shapes is not None else ()
        except ShapeError as e:
            raise ShapeError(f"{label}: {e}") from None
        if any(o.rank == 0 for o in outs):
            raise ShapeError(f"{label}: its output would have no dimension (a reduction over every dimension); "
                             f"FFModel's tensors have at least one: keep the reduced dimensions (keepdims=True)")
        wnames = tuple(opdef.weight_names(attrs))
        for arg, init in (("kernel_initializer", kernel_initializer), ("bias_initializer", bias_initializer)):
            if init is not None and not isinstance(init, Initializer):
                raise ConfigError(f"{label}: {arg} must be an initializer such as GlorotUniformInitializer(seed) "
                                  f"or ZeroInitializer(), got {init!r}")
        created: list[int] = []
        if shared_op is not None:
            weights = self._shared_weights(label, shared_op, wnames, wshapes)
        else:
            weights = []
            for wname, wshape in zip(wnames, wshapes):
                wid = self.pcg.add_node(WeightAttrs(wshape), (), name=f"{name}.{wname}")
                created.append(wid)
                init = bias_initializer if wshape.rank == 1 else kernel_initializer
                weights.append(Weight(wname, wid, wshape, name, init))
        try:
            nid = self.pcg.add_node(attrs, refs + [TensorRef(w.node) for w in weights], name=name)
        except FlexrtError:
            for wid in reversed(created):
                self.pcg.remove_node(wid)
            raise
        outputs = tuple(Tensor(self, ref, self.pcg.shape(ref).tensor_shape, name) for ref in self.pcg.outputs(nid))
        layer = Layer(len(self._layers), name, kind, attrs, nid, inputs, outputs, tuple(weights), tuple(options))
        self._layers.append(layer)
        self._named(kind, layer, automatic)
        return layer

    def _layer_name(self, kind: str, name: Optional[str]) -> str:
        """``name`` checked for uniqueness, or the next free ``{kind}_{n}`` (committed by ``_named``)."""
        if name is None:
            n = self._counters.get(kind, 0)
            while True:
                n += 1
                candidate = f"{kind}_{n}"
                if not self._name_taken(candidate):
                    return candidate
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{kind}: name must be a non-empty string, got {name!r}")
        if not name.isprintable():   # a newline or tab would cut the name in strategy and dot files
            raise ConfigError(f"{kind}: name {name!r} holds a control character; give a printable name")
        if self._name_taken(name):
            raise ConfigError(f"{kind}: the name '{name}' is already used in this model; layer names must be unique")
        return name

    def _named(self, kind: str, layer: Layer, automatic: bool) -> None:
        """Record a layer that was added; a failed call leaves the automatic numbering untouched."""
        self._by_name[layer.name] = layer
        if automatic:
            self._counters[kind] = int(layer.name.rpartition("_")[2])

    def _name_taken(self, name: str) -> bool:
        if name in self._by_name:
            return True
        try:
            self.pcg.node_by_name(name)
        except GraphError:
            return False
        return True

    def _ref_of(self, t: Any, label: str, i: int) -> TensorRef:
        if not isinstance(t, Tensor):
            raise ConfigError(f"{label}: input {i} must be a Tensor made by this FFModel, got {t!r}")
        if t.model is not self:
            raise ConfigError(f"{label}: input {i} ({t!r}) belongs to another FFModel")
        return t.ref

    def _shared_weights(self, label: str, shared_op: Any, wnames, wshapes) -> list[Weight]:
        src = self._resolve_layer(shared_op, f"{label}: shared_op")
        if not src.weights:
            raise ConfigError(f"{label}: shared_op '{src.name}' ({src.kind}) has no weights to share")
        have = tuple((w.name, w.shape) for w in src.weights)
        need = tuple(zip(wnames, wshapes))
        if have != need:
            def fmt(ws):
                return ", ".join(f"{n} {s}" for n, s in ws) or "none"
            raise ShapeError(f"{label}: shared_op '{src.name}' has weights {fmt(have)}; this layer needs "
                             f"{fmt(need)}; shared weights must have the same names and shapes")
        return list(src.weights)

    def _resolve_layer(self, ref: Any, where: str) -> Layer:
        if isinstance(ref, Tensor):
            if ref.model is not self:
                raise ConfigError(f"{where}: {ref!r} belongs to another FFModel")
            if ref.owner_layer not in self._by_name:    # an input or the label tensor: no layer made it
                raise ConfigError(f"{where}: {ref!r} is not the output of a layer (an input or the label tensor)")
            return self._by_name[ref.owner_layer]
        if isinstance(ref, Layer):
            if self._by_name.get(ref.name) is not ref:
                raise ConfigError(f"{where}: layer '{ref.name}' belongs to another FFModel")
            return ref
        if isinstance(ref, str):
            return self.get_layer_by_name(ref)
        raise ConfigError(f"{where} must be a layer (from get_layers()), a layer name or a tensor it made, "
                          f"got {ref!r}")

    # ---- lookups ------------------------------------------------------------------------------
    def get_layers(self) -> dict[int, Layer]:
        """Every layer (not the inputs) by index, in call order (FlexFlow's ``get_layers``)."""
        return {layer.index: layer for layer in self._layers}

    def get_layer_by_id(self, layer_id: int) -> Layer:
        if isinstance(layer_id, bool) or not isinstance(layer_id, int) or not 0 <= layer_id < len(self._layers):
            raise ConfigError(f"get_layer_by_id: no layer {layer_id!r}; valid: 0..{len(self._layers) - 1}")
        return self._layers[layer_id]

    def get_layer_by_name(self, layer_name: str) -> Layer:
        try:
            return self._by_name[layer_name]
        except (KeyError, TypeError):
            raise ConfigError(f"no layer named {layer_name!r}; layers: "
                              f"{', '.join(self._by_name) or 'none'}") from None

    def get_last_layer(self) -> Layer:
        """The layer added last (FlexFlow's ``get_last_layer``)."""
        if not self._layers:
            raise ConfigError("get_last_layer: the model has no layers yet")
        return self._layers[-1]

    def parameters(self) -> list[Parameter]:
        """Every weight as a ``Parameter``, in the order the layers created them."""
        return [layer.get_parameter_by_id(i) for layer in self._layers for i, w in enumerate(layer.weights)
                if w.owner == layer.name]

    def get_tensor_by_id(self, id: int) -> Parameter:
        """Weight ``id`` of the model, counting every layer's weights in order (FlexFlow's
        ``get_tensor_by_id``: its parameters by id)."""
        params = self.parameters()
        if isinstance(id, bool) or not isinstance(id, int) or not 0 <= id < len(params):
            raise ConfigError(f"get_tensor_by_id: no weight {id!r}; the model has {len(params)} "
                              f"({', '.join(p.name for p in params[:8])}{', ...' if len(params) > 8 else ''})")
        return params[id]

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Every tensor made by ``create_tensor``, in order (constants are not inputs)."""
        return tuple(layer.outputs[0] for layer in self._inputs if layer.name not in self._constants)

    # ---- the optimizer ------------------------------------------------------------------------
    @property
    def optimizer(self) -> Optional[Optimizer]:
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer) -> None:
        self.set_optimizer(optimizer)

    def set_optimizer(self, optimizer) -> None:
        """The optimizer of the next updates (FlexFlow's ``set_optimizer``; ``ffmodel.optimizer = ...``
        too); after ``compile`` the running session switches to it (another kind of optimizer starts
        its state afresh)."""
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise ConfigError(f"set_optimizer: optimizer must be SGDOptimizer(...), AdamOptimizer(...), "
                              f"RMSpropOptimizer(...) or AdagradOptimizer(...), got {optimizer!r}")
        if optimizer is not None and optimizer.ffmodel is not self:
            raise ConfigError("set_optimizer: the optimizer was made for another FFModel")
        self._optimizer = optimizer
        session = getattr(self, "session", None)
        if session is not None and optimizer is not None:
            kind, params = optimizer_args(optimizer)
            session.set_optimizer(kind, **params)

    def num_parameters(self) -> int:
        """Elements of every weight, each shared weight counted once."""
        return sum(n.attrs.shape.num_elements for n in self.pcg.nodes if isinstance(n.attrs, WeightAttrs))

    def summary(self, file: Optional[TextIO] = None) -> None:
        """Print the operator table: name, type, output shape, parameters, forward FLOPs, and totals."""
        print(format_table(self.pcg), file=file if file is not None else sys.stdout)

    def print_layers(self, id: int = -1) -> None:  # noqa: A002 (FlexFlow's argument name)
        """Print every layer (``id=-1``, FlexFlow's default) or one layer by index."""
        _check.integer("print_layers", "id", id, low=-1)
        if id == -1:
            self.summary()
            return
        layer = self.get_layer_by_id(id)
        outs = ", ".join(str(t.get_shape()) for t in layer.outputs)
        ws = ", ".join(f"{w.node_name} {w.shape}" for w in layer.weights) or "none"
        print(f"{layer.index} {layer.name} ({layer.kind}): outputs {outs}; weights {ws}")

    # ---- training (the rest is in flexrt.model.training) ---------------------------------------
    def compile(self, optimizer=None, loss_type=None, metrics=None, comp_mode=None) -> None:
        """Set the optimizer (default ``SGDOptimizer(ffmodel, --lr)``), loss (default sparse categorical
        cross-entropy) and metrics, pick the strategy (``--import FILE``, else data parallelism over
        ``-ll:gpu`` x ``--nodes`` devices of ``--machine``, default ``local``), write it when
        ``--export FILE`` is given, and build the runtime session (``ffmodel.session``)."""
        where = "compile"
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise ConfigError(f"{where}: optimizer must be SGDOptimizer(...), AdamOptimizer(...), "
                              f"RMSpropOptimizer(...) or AdagradOptimizer(...), got {optimizer!r}")
        if optimizer is not None and optimizer.ffmodel is not self:
            raise ConfigError(f"{where}: the optimizer was made for another FFModel")
        loss = resolve_loss(loss_type)
        metric_types = resolve_metrics(metrics)
        check_metrics_for_loss(loss, metric_types, where)
        if comp_mode is not None:
            _check.member(where, "comp_mode", comp_mode, CompMode)
        self._optimizer = optimizer if optimizer is not None else (
            self._optimizer or SGDOptimizer(self, self.ffconfig.learning_rate))
        self.loss_type = None if loss_type is None else loss
        self.metrics = metric_types
        self.comp_mode = comp_mode if comp_mode is not None else CompMode.COMP_MODE_TRAINING
        if _capture.active() is not None:
            raise _capture.ModelCaptured(self)
        self._metric_types = metric_types
        self._compile_runtime(loss, metric_types)
