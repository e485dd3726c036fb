"""FlexFlow's training calls on ``FFModel``: compile, init_layers, data loaders, fit, eval, the manual
loop (forward / zero_gradients / backward / update) and get_perf_metrics, on flexrt's runtime.

``compile`` picks the strategy (``--import FILE``; else ``--budget`` searches; else data
parallelism over the devices the config asks for: ``-ll:gpu`` per node times ``--nodes``, capped
at the machine's devices), writes it when ``--export FILE`` is given (FlexFlow's text format for a
``.txt`` name, as ``flexrt search --export``), and builds a ``flexrt.runtime.session.Session``: the
strategy simulated, checked against device memory, planned, the weights placed.
``ffmodel.strategy`` and ``ffmodel.session`` keep them. The machine is ``--machine`` (or
``--machine-model-file``); without one, the ``local`` machine with ``-ll:gpu`` devices per node and
``--nodes`` nodes when ``-ll:gpu`` is given (so that a search searches over those devices), else
the ``local`` preset.

How this differs from FlexFlow, honestly:

- The runtime runs a training iteration (forward, loss, backward, gradient synchronization,
  update) as one task graph. ``forward()`` runs its forward phase at once (no labels needed:
  FlexFlow's per-operator scripts read outputs after it with ``get_array``); the rest runs at
  ``update()``, with the labels the label tensor holds then. ``backward()`` only checks the order
  of the calls (``ConfigError`` when out of order) and ``zero_gradients()`` discards a
  ``backward()`` already recorded: gradients are never accumulated across iterations.
- ``forward(seq_length)``: FlexFlow hands ``seq_length`` to batch matmuls built with a
  sequence-length dimension, which then compute only that many positions. FlexFlow numbers those
  dimensions from the last (Fortran order) and acts only on 0 and 1 (its kernels; other values are
  asserted against in debug builds and ignored in release ones, so FlexFlow's BERT proxy, which
  passes 2 and 3, computes whole sequences). flexrt always computes the whole sequence:
  ``seq_length`` may be None, -1 or any integer where FlexFlow would ignore it; for a batch matmul
  with a sequence dimension 0 or 1, only None, -1 or that dimension's full length.
- ``eval`` runs the strategy's forward pass on each batch (the session's current weights) and
  scores it on the host. Dropout, where a model has it, runs as in training.
- ``fit``/``eval`` without data train on deterministic synthetic data (FlexFlow does too):
  ``SYNTHETIC_BATCHES`` batches of random inputs and labels valid for the loss.

Entry points: ``TrainingMixin`` (mixed into ``FFModel``), ``PerfMetrics``, ``forward_output``,
``synthetic_data``, ``resolve_loss``, ``resolve_metrics``.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any, Optional

import numpy as np

from flexrt.errors import ConfigError, StrategyError
from flexrt.inputs import short
from flexrt.ir.ops import BatchMatmulAttrs
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.kernels.initializers import fans, initialize
from flexrt.kernels.kinds import NamedKind
from flexrt.kernels.losses import loss_forward
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.kernels.metrics import MetricsAccumulator
from flexrt.kernels.registry import run_forward
from flexrt.model import _capture, _check
from flexrt.model.dataloader import SingleDataLoader, batch_dtype
from flexrt.model.enums import CompMode, LossType, MetricsType
from flexrt.model.initializers import (GlorotUniformInitializer, NormInitializer, UniformInitializer,
                                       ZeroInitializer)
from flexrt.model.optimizers import AdagradOptimizer, AdamOptimizer, Optimizer, RMSpropOptimizer, SGDOptimizer
from flexrt.model.tensor import Tensor
from flexrt.runtime.backend import BACKENDS
from flexrt.runtime.executor import MODES
from flexrt.runtime.reference import loss_output
from flexrt.runtime.session import Session, initial_weights

SYNTHETIC_BATCHES = 4   # batches per epoch of the synthetic dataset fit/eval use without data
LABEL = "label"


def _member_of(where: str, arg: str, value: Any, kind: type[NamedKind]) -> NamedKind:
    """An enum member or its name (``"sparse_categorical_crossentropy"``) -> the member."""
    try:
        return kind.parse(value)
    except ConfigError:
        raise ConfigError(f"{where}: {arg} must be a {kind.__name__} or one of "
                          f"{', '.join(m.short_name for m in kind)}; got {value!r} "
                          f"(valid {kind.__name__}: {', '.join(m.name for m in kind)})") from None


def resolve_loss(loss_type: Any) -> LossType:
    """``compile``'s ``loss_type`` (a LossType or its name; None: sparse categorical cross-entropy)."""
    if loss_type is None:
        return LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY
    return _member_of("compile", "loss_type", loss_type, LossType)


def resolve_metrics(metrics: Any) -> tuple[MetricsType, ...]:
    """``compile``'s ``metrics`` (a list of MetricsType or their names; None: none)."""
    if metrics is None:
        return ()
    if not isinstance(metrics, (list, tuple)):
        raise ConfigError(f"compile: metrics must be a list of MetricsType, got {metrics!r}")
    return tuple(_member_of("compile", f"metrics[{i}]", m, MetricsType) for i, m in enumerate(metrics))


def optimizer_args(opt: Optimizer) -> tuple[OptimizerKind, dict]:
    """(Session optimizer kind, its parameters) of an SGDOptimizer / AdamOptimizer."""
    if isinstance(opt, SGDOptimizer):
        return OptimizerKind.SGD, {"lr": opt.lr, "momentum": opt.momentum, "nesterov": opt.nesterov,
                                   "weight_decay": opt.weight_decay}
    if isinstance(opt, AdamOptimizer):
        return OptimizerKind.ADAM, {"alpha": opt.alpha, "beta1": opt.beta1, "beta2": opt.beta2, "epsilon": opt.epsilon,
                        "weight_decay": opt.weight_decay}
    if isinstance(opt, RMSpropOptimizer):
        return OptimizerKind.RMSPROP, {"lr": opt.lr, "alpha": opt.alpha, "eps": opt.eps, "weight_decay": opt.weight_decay}
    if isinstance(opt, AdagradOptimizer):
        return OptimizerKind.ADAGRAD, {"lr": opt.lr, "lr_decay": opt.lr_decay, "weight_decay": opt.weight_decay,
                                       "initial_accumulator_value": opt.initial_accumulator_value, "eps": opt.eps}
    raise ConfigError(f"compile: optimizer must be SGDOptimizer(...), AdamOptimizer(...), RMSpropOptimizer(...) or "
                      f"AdagradOptimizer(...), got {opt!r}")


def _initializer_kind(init: Any) -> tuple[str, dict, int]:
    if isinstance(init, GlorotUniformInitializer):
        return "glorot_uniform", {}, init.seed
    if isinstance(init, ZeroInitializer):
        return "zero", {}, 0
    if isinstance(init, UniformInitializer):
        return "uniform", {"min": init.min, "max": init.max}, init.seed
    if isinstance(init, NormInitializer):
        return "normal", {"mean": init.mean, "stddev": init.stddev}, init.seed
    raise ConfigError(f"unknown initializer {init!r}")


def model_initial_weights(pcg: PCG, layers, seed: int = 0) -> dict:
    """Every weight's initial array: its layer's initializer (with the initializer's own seed)
    where one was given, else the runtime's default (Glorot uniform for kernels, zeros for biases)."""
    out = initial_weights(pcg, seed)
    for layer in layers:
        for w in layer.weights:
            if w.initializer is None or w.owner != layer.name:
                continue
            kind, params, wseed = _initializer_kind(w.initializer)
            dims = w.shape.dims
            fan_in = fan_out = None
            if kind == "glorot_uniform":
                fan_in, fan_out = fans(dims, "conv") if len(dims) == 4 else (
                    (int(np.prod(dims[:-1])), dims[-1]) if len(dims) >= 2 else (dims[0], dims[0]))
            out[w.node_name] = initialize(np, kind, dims, w.shape.dtype.numpy_name, wseed, fan_in, fan_out, **params)
    return out


def forward_output(pcg: PCG, weights: dict, inputs: dict, output: str):
    """The full output of operator ``output`` for one batch, on one device (the reference walk)."""
    values: dict[TensorRef, Any] = {}
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type is OpType.INPUT:
            values[TensorRef(nid, 0)] = np.asarray(inputs[node.name])
        elif node.op_type is OpType.WEIGHT:
            values[TensorRef(nid, 0)] = weights[node.name]
        else:
            for k, o in enumerate(run_forward(np, node.attrs, [values[r] for r in node.inputs])):
                values[TensorRef(nid, k)] = o
    return values[TensorRef(pcg.node_by_name(output).id, 0)]


def _int_bound(pcg: PCG, nid: int) -> int:
    """Exclusive upper bound for synthetic ids fed to an integer input (embedding rows, else 2)."""
    bounds = [n.attrs.num_entries for n in pcg.nodes if n.op_type is OpType.EMBEDDING
              and any(r.node == nid for r in n.inputs)]
    return min(bounds) if bounds else 2


def synthetic_data(pcg: PCG, loss: LossType | str, num_samples: int, seed: int = 0) -> tuple[dict, np.ndarray]:
    """Deterministic random data for every input of ``pcg`` (by input name) and labels valid for
    ``loss`` (a LossType or its name) on the scored output: class ids ``[n, ..., 1]`` int32 for sparse
    cross-entropy, one-hot rows for cross-entropy, standard normal values for the mean squared errors.
    Float inputs are standard normal; integer inputs are ids below the embedding size they feed (else
    0 or 1)."""
    loss = LossType.parse(loss)
    rng = np.random.Generator(np.random.PCG64(seed))
    xs = {}
    for node in pcg.nodes:
        if node.op_type is not OpType.INPUT:
            continue
        shape = (num_samples, *node.attrs.shape.dims[1:])
        dt = batch_dtype(node.attrs.shape.dtype)
        if dt.kind == "f":
            xs[node.name] = rng.standard_normal(shape).astype(dt)
        else:
            xs[node.name] = rng.integers(0, 2 if dt.kind == "b" else _int_bound(pcg, node.id), shape).astype(dt)
    out = pcg.shape(TensorRef(pcg.node_by_name(loss_output(pcg)).id, 0)).tensor_shape
    odt = batch_dtype(out.dtype)
    classes = out.dims[-1]
    if loss is LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
        labels = rng.integers(0, classes, (num_samples, *out.dims[1:-1], 1)).astype(np.int32)
    elif loss is LossType.LOSS_CATEGORICAL_CROSSENTROPY:
        labels = np.eye(classes, dtype=odt)[rng.integers(0, classes, (num_samples, *out.dims[1:-1]))]
    else:
        labels = rng.standard_normal((num_samples, *out.dims[1:])).astype(odt)
    return xs, labels


def _check_aligned(where: str, loaders) -> None:
    """Every loader must give the same number of batches, or their batches would pair different
    samples: a tensor whose first dimension is not the batch's (a model output of 1 row, a split
    along the samples) takes a loader of another batch size."""
    counts = {dl.num_batches for dl in loaders}
    if len(counts) > 1:
        rows = "; ".join(f"{dl.name}: {dl.num_samples} samples, {dl.batch_size} a batch ({dl.num_batches} batches)"
                         for dl in loaders)
        raise ConfigError(f"{where}: the data loaders give different numbers of batches, so their batches would "
                          f"not pair the same samples ({rows}); each tensor's first dimension is its batch (the "
                          f"label tensor's is the output's: an output whose first dimension is not the batch, "
                          f"as after a split along the samples, cannot train)")


class PerfMetrics:
    """FlexFlow's PerfMetrics: ``get_accuracy()`` (percent) and every metric's mean over the samples
    seen since the last reset (``result()``, ``get(name)``), plus the mean loss (``loss``)."""

    def __init__(self, values: dict, loss: Optional[float] = None) -> None:
        self._values = dict(values)
        self.loss = loss

    def get_accuracy(self) -> float:
        if "accuracy" not in self._values:
            raise ConfigError(f"get_accuracy: METRICS_ACCURACY is not among the compiled metrics "
                              f"({', '.join(self._values) or 'none'})")
        return self._values["accuracy"]

    def get(self, name: str) -> float:
        if not isinstance(name, str) or name not in self._values:
            raise ConfigError(f"no metric {short(name)}; compiled: {', '.join(self._values) or 'none'}")
        return self._values[name]

    def result(self) -> dict:
        return dict(self._values)

    def __repr__(self) -> str:
        return f"PerfMetrics({self._values}, loss={self.loss})"


def _fmt_metrics(values: dict) -> str:
    return ", ".join(f"{k} {v:.2f}%" if k == "accuracy" else f"{k} {v:.4g}" for k, v in values.items())


class TrainingMixin:
    """The training half of ``FFModel`` (see the module docstring for what differs from FlexFlow)."""

    # set by FFModel.__init__ through _init_training
    def _init_training(self) -> None:
        self.strategy = None
        self.machine = None
        self.session: Optional[Session] = None
        self.history: list[dict] = []
        self.runtime_options = {"backend": "numpy", "mode": "serial", "seed": 0}
        self._loss = None
        self._output_shape = None
        self._batch: dict = {}         # input name (or "label") -> its batch: what forward / update use
        self._mapped: dict = {}        # tensor -> its array while inline_map'ed or attached
        self._phase = "idle"           # manual loop: idle -> forward -> backward -> (update) idle
        self._initial: Optional[dict] = None
        self._dirty = False            # weights changed since they were placed
        self._perf: Optional[PerfMetrics] = None
        self._iteration = 0

    def set_runtime(self, backend: str = "numpy", mode: str = "serial", seed: int = 0) -> None:
        """flexrt's runtime choices (not FlexFlow's): array backend, executor mode and the seed of the
        default initializers and synthetic data. Call before ``compile``."""
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ConfigError(f"set_runtime: unknown backend {short(backend)}; valid: {', '.join(BACKENDS)}")
        if not isinstance(mode, str) or mode not in MODES:
            raise ConfigError(f"set_runtime: unknown mode {short(mode)}; valid: {', '.join(MODES)}")
        seed = _check.integer("set_runtime", "seed", seed, low=0)
        self.runtime_options = {"backend": backend, "mode": mode, "seed": seed}

    # ---- compile ------------------------------------------------------------------------------
    def _compile_runtime(self, loss: LossType, metrics: tuple[MetricsType, ...]) -> None:
        from flexrt.strategy import data_parallel, export_strategy, load_strategy
        cfg = self.ffconfig
        if not self.inputs:
            raise ConfigError("compile: the model has no inputs (create_tensor) to train on")
        machine = _script_machine(cfg)
        if cfg.import_strategy_file:
            strategy = load_strategy(cfg.import_strategy_file, self.pcg, machine)
        elif _search_requested(cfg):
            strategy = _search_strategy(self.pcg, machine, cfg)
        else:
            strategy = data_parallel(self.pcg, machine, min(cfg.total_workers, machine.num_devices))
        strategy = _fused_strategy(strategy, machine, cfg)
        if cfg.export_strategy_file:
            try:
                export_strategy(cfg.export_strategy_file, strategy, machine)
            except StrategyError as e:
                raise ConfigError(f"compile (--export): {e}") from None
        opt_kind, params = optimizer_args(self.optimizer)
        out = loss_output(self.pcg)
        self._output_shape = self.pcg.shape(TensorRef(self.pcg.node_by_name(out).id, 0)).tensor_shape
        self._make_label_tensor(loss)
        opts = self.runtime_options

        def draw() -> dict:   # after the session's memory checks: a model too big is refused before it is drawn
            self._initial = model_initial_weights(self.pcg, self._layers, opts["seed"])
            return self._initial
        try:
            self.session = Session(strategy, machine, backend=opts["backend"], mode=opts["mode"],
                                   optimizer=opt_kind, loss=loss, metrics=metrics, weights=draw,
                                   seed=opts["seed"], loss_output=out, penalties=self._penalties(), **params)
        except ModuleNotFoundError as e:
            if opts["backend"] != "cupy":
                raise
            raise ConfigError(f"compile: the cupy backend cannot be loaded ({e}); CuPy installs with "
                              f'pip install -e ".[gpu]"') from None
        self._write_graphs(cfg)
        self.strategy, self.machine = strategy, machine
        self._loss = loss
        self._dirty = False
        self._batch.pop(LABEL, None)  # inputs set before compile stay (FlexFlow's bert_proxy_native.py)
        self._mapped = {t: a for t, a in self._mapped.items() if t.owner_layer != LABEL}
        self._phase = "idle"
        self.history = []

    def _write_graphs(self, cfg) -> None:
        """FlexFlow's --compgraph FILE and --taskgraph FILE: the computation graph and the simulated
        task graph of one iteration, as Graphviz dot."""
        for path, what, text in ((cfg.compgraph_file, "--compgraph", lambda: self.pcg.to_dot()),
                                 (cfg.taskgraph_file, "--taskgraph",
                                  lambda: self.session.simulator.graph.to_dot())):
            if path:
                try:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(text())
                except OSError as e:
                    raise ConfigError(f"compile: cannot write {what} {path}: {e.strerror or e}") from None

    def _penalties(self) -> dict:
        """Weight node name -> its penalty (``kernel_regularizer`` of the layer that made it)."""
        out = {}
        for layer in self._layers:
            penalty = layer.option("kernel_regularizer")
            if penalty is not None and layer.weights:
                out[layer.weights[0].node_name] = penalty
        return out

    def _make_label_tensor(self, loss: LossType) -> None:
        from flexrt.ir.datatype import DataType
        from flexrt.ir.tensor_shape import TensorShape
        dims = self._output_shape.dims
        if loss is LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
            shape = TensorShape((*dims[:-1], 1), DataType.DT_INT32)
        else:
            shape = TensorShape(dims, self._output_shape.dtype)
        self.label_tensor = Tensor(self, TensorRef(-1, 0), shape, LABEL)

    def _need_session(self, what: str) -> Session:
        if self.session is None:
            raise ConfigError(f"{what}: call compile(...) first")
        return self.session

    # ---- weights ------------------------------------------------------------------------------
    def init_layers(self) -> None:
        """Place every weight's initial value (its initializer, FlexFlow's defaults otherwise).

        ``compile`` already placed them; calling ``init_layers`` after training starts over."""
        if _capture.active() is not None and self.session is None:
            return
        s = self._need_session("init_layers")
        if self._dirty:
            s.load_weights(self._initial)
            self._dirty = False
        s.reset_metrics()

    def get_weights(self) -> dict:
        """Every weight's current full array, by weight name (``dense_1.kernel``); flexrt's."""
        return self._need_session("get_weights").weights()

    # ---- data ---------------------------------------------------------------------------------
    def create_data_loader(self, batch_tensor, full_array) -> SingleDataLoader:
        """A loader of ``full_array`` for an input tensor or ``ffmodel.label_tensor``."""
        if not isinstance(batch_tensor, Tensor) or batch_tensor.model is not self:
            raise ConfigError(f"create_data_loader: batch_tensor must be an input of this model (create_tensor) or "
                              f"ffmodel.label_tensor (after compile), got {batch_tensor!r}")
        if batch_tensor.owner_layer == LABEL:
            return SingleDataLoader(self, batch_tensor, full_array, LABEL)
        if batch_tensor not in self.inputs:
            raise ConfigError(f"create_data_loader: {batch_tensor!r} is not a model input; inputs: "
                              f"{', '.join(t.owner_layer for t in self.inputs)} (and label_tensor)")
        return SingleDataLoader(self, batch_tensor, full_array, batch_tensor.owner_layer)

    def _set_batch(self, name: str, arr) -> None:
        self._batch[name] = arr

    def current_batch(self, name: str):
        """The batch the last ``next_batch`` handed over for input ``name`` (or ``"label"``)."""
        if not isinstance(name, str) or name not in self._batch:
            raise ConfigError(f"no batch for {short(name)} yet; call its loader's next_batch(ffmodel)")
        return self._batch[name]

    def _loaders(self, where: str, x, y, batch_size) -> list[SingleDataLoader]:
        self._need_session(where)
        bs = self.inputs[0].dims[0]
        if batch_size is not None:
            _check.integer(where, "batch_size", batch_size, low=1)
        if batch_size is not None and batch_size != bs:
            raise ConfigError(f"{where}: batch_size={batch_size}, but the model's tensors were made for batch "
                              f"{bs} (-b {bs}); the batch size is fixed when the graph is built")
        if x is None and y is None:
            xs, labels = synthetic_data(self.pcg, self._loss, bs * SYNTHETIC_BATCHES, self.runtime_options["seed"])
            return [SingleDataLoader(self, t, xs[t.owner_layer], t.owner_layer) for t in self.inputs] + \
                [SingleDataLoader(self, self.label_tensor, labels, LABEL)]
        if x is None or y is None:
            raise ConfigError(f"{where}: give both x and y (or neither, for synthetic data); got "
                              f"{'y' if x is None else 'x'} only")
        xs = list(x) if isinstance(x, (list, tuple)) else [x]
        if len(xs) != len(self.inputs):
            raise ConfigError(f"{where}: x has {len(xs)} entr(y/ies); the model has {len(self.inputs)} input(s) "
                              f"({', '.join(t.owner_layer for t in self.inputs)}), one loader or array each, "
                              f"in create_tensor order")
        loaders = []
        for t, v in zip(self.inputs, xs):
            if isinstance(v, SingleDataLoader):
                if v.name != t.owner_layer or v.ffmodel is not self:
                    raise ConfigError(f"{where}: the loader for {t.owner_layer} holds {v.name}")
                loaders.append(v)
            else:
                loaders.append(self.create_data_loader(t, v))
        if isinstance(y, SingleDataLoader):
            if y.name != LABEL:
                raise ConfigError(f"{where}: y must be a loader of ffmodel.label_tensor, got one of {y.name}")
            loaders.append(y)
        else:
            loaders.append(self.create_data_loader(self.label_tensor, y))
        _check_aligned(where, loaders)
        return loaders

    def _step_batch(self) -> tuple[dict, Any]:
        missing = [n for n in [t.owner_layer for t in self.inputs] + [LABEL] if n not in self._batch]
        if missing:
            raise ConfigError(f"no current batch for {', '.join(missing)}; call each data loader's "
                              f"next_batch(ffmodel) first")
        return self._forward_inputs("forward"), self._batch[LABEL]

    def _forward_inputs(self, where: str) -> dict:
        """Every input's current batch, and the constants' values, by input name."""
        missing = [t.owner_layer for t in self.inputs if t.owner_layer not in self._batch]
        if missing:
            also = [LABEL] if LABEL not in self._batch and self.comp_mode is not CompMode.COMP_MODE_INFERENCE else []
            raise ConfigError(f"{where}: no current batch for {', '.join(missing + also)}; call each data loader's "
                              f"next_batch(ffmodel) first (or give the tensor a value: set_tensor, "
                              f"attach_numpy_array)")
        out = {t.owner_layer: self._batch[t.owner_layer] for t in self.inputs}
        for name, value in self._constants.items():
            shape = self._by_name[name].attrs.shape
            out[name] = np.broadcast_to(np.asarray(value, dtype=batch_dtype(shape.dtype)), shape.dims)
        return out

    def _train_step(self, epoch: int, labels=None) -> dict:
        """One iteration: a whole one on the current batch, or (``labels`` given) the rest of the one
        ``forward()`` began."""
        s = self.session
        if labels is None:
            inputs, labels = self._step_batch()
            r = s.step(inputs, labels)
        else:
            r = s.finish(labels)
        self._dirty = True
        self._iteration += 1
        rec = {"epoch": epoch, "iteration": self._iteration, "loss": r.loss, "metrics": dict(r.metrics),
               "wall_s": r.wall_s}
        self.history.append(rec)
        self._perf = PerfMetrics(r.metrics, r.loss)
        return rec

    # ---- fit / eval ---------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1) -> None:
        """Train ``epochs`` epochs of ``num_samples // batch_size`` iterations each (synthetic data
        when x and y are None); prints one line per epoch and keeps ``ffmodel.history``."""
        if self.comp_mode is CompMode.COMP_MODE_INFERENCE:
            raise ConfigError("fit: the model was compiled with comp_mode=COMP_MODE_INFERENCE")
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
            raise ConfigError(f"fit: epochs must be an integer >= 1, got {epochs!r}")
        loaders = self._loaders("fit", x, y, batch_size)
        iterations = min(dl.num_batches for dl in loaders)
        s = self.session
        for epoch in range(1, epochs + 1):
            for dl in loaders:
                dl.reset()
            s.reset_metrics()
            walls = []
            for _ in range(iterations):
                for dl in loaders:
                    dl.next_batch(self)
                walls.append(self._train_step(epoch)["wall_s"])
            last = self.history[-1]
            mean_loss = float(np.mean([h["loss"] for h in self.history[-iterations:]])) if iterations else float("nan")
            if s.is_root:  # under MPI every rank trains; one prints
                print(f"epoch {epoch}/{epochs}: {iterations} iterations, loss {mean_loss:.4f} (mean)"
                      + (f", {_fmt_metrics(last['metrics'])}" if last["metrics"] else "")
                      + f"; {statistics.median(walls) * 1e3:.3f} ms/iteration measured (median), "
                      f"{s.predicted_time_s * 1e3:.3f} ms simulated", file=sys.stdout)
        self._phase = "idle"

    def eval(self, x=None, y=None, batch_size=None) -> PerfMetrics:
        """Forward and metrics over the dataset without updating (the strategy's forward pass with
        the session's current weights); prints and returns the metrics (also ``get_perf_metrics``)."""
        return self.evaluate_quietly(x, y, batch_size, verbose=True)

    def evaluate_quietly(self, x=None, y=None, batch_size=None, verbose: bool = False,
                         training: bool | None = None) -> PerfMetrics:
        """``eval`` (FlexFlow's signature, which prints) without the printed line unless ``verbose``:
        for Keras' ``evaluate(verbose=0)`` and ``fit``'s validation. ``training``: as ``forward``'s
        (Keras' ``evaluate`` and validation pass False: dropout passes through)."""
        training = self._training_mode("eval", training)
        loaders = self._loaders("eval", x, y, batch_size)
        iterations = min(dl.num_batches for dl in loaders)
        s = self.session
        acc = MetricsAccumulator(list(self._metric_types))
        losses = []
        for dl in loaders:
            dl.reset()
        for _ in range(iterations):
            for dl in loaders:
                dl.next_batch(self)
            inputs, labels = self._step_batch()
            s.forward(inputs, training)
            out = s.output(s.loss_output)
            losses.append(float(loss_forward(np, self._loss, out, labels)))
            acc.update(np, out, labels)
        self._perf = PerfMetrics(acc.result(), float(np.mean(losses)) if losses else None)
        if s.is_root and verbose:
            print(f"eval: {iterations} iterations, loss {self._perf.loss:.4f}"
                  + (f", {_fmt_metrics(acc.result())}" if acc.names else ""), file=sys.stdout)
        self._phase = "idle"
        return self._perf

    # ---- FlexFlow's manual loop ---------------------------------------------------------------
    def reset_metrics(self) -> None:
        """Start the metrics over (FlexFlow's ``reset_metrics``, called at each epoch's start)."""
        self._need_session("reset_metrics").reset_metrics()
        self._perf = None

    def forward(self, seq_length=None, *, training: bool | None = None) -> None:
        """Run the forward pass now on the inputs' current batches (no labels needed); every tensor's
        value can then be read (``get_array``, ``get_tensor``). ``update()`` completes the iteration.
        ``seq_length``: see the module doc (None, -1, or what FlexFlow would ignore).
        ``training`` (a flexrt extension): False runs an inference forward, dropout passing its
        input through (``torch.nn.Dropout`` in eval mode, Keras' ``predict``), which ``backward``
        cannot follow; the default is training mode, as FlexFlow's forward, unless the model was
        compiled with ``comp_mode=COMP_MODE_INFERENCE``. BatchNorm normalizes with the batch's
        statistics in both (FFModel keeps no running statistics)."""
        s = self._need_session("forward")
        self._check_seq_length("forward", seq_length)
        training = self._training_mode("forward", training)
        s.forward(self._forward_inputs("forward"), training)
        self._phase = "forward" if training else "inference"

    def _training_mode(self, where: str, training) -> bool:
        if training is None:
            return self.comp_mode is not CompMode.COMP_MODE_INFERENCE
        if not isinstance(training, bool):
            raise ConfigError(f"{where}: training must be True, False or None (the compiled mode), got "
                              f"{short(training)}")
        if training and self.comp_mode is CompMode.COMP_MODE_INFERENCE:
            raise ConfigError(f"{where}: training=True, but the model was compiled with "
                              f"comp_mode=COMP_MODE_INFERENCE")
        return training

    def zero_gradients(self) -> None:
        """Discard a recorded ``backward()`` (the runtime never accumulates gradients across
        iterations, so nothing else needs zeroing)."""
        self._need_session("zero_gradients")
        if self._phase == "backward":
            self._phase = "forward"

    def backward(self, seq_length=None) -> None:
        """Record the backward pass (after ``forward()``); it runs at ``update()``, with the labels
        ``label_tensor`` holds then."""
        self._need_session("backward")
        self._check_seq_length("backward", seq_length)
        if self.comp_mode is CompMode.COMP_MODE_INFERENCE:
            raise ConfigError("backward: the model was compiled with comp_mode=COMP_MODE_INFERENCE")
        if self._phase == "inference":
            raise ConfigError("backward: the last forward() ran in inference mode (training=False), which has no "
                              "backward; run forward() (training mode) first")
        if self._phase != "forward":
            raise ConfigError("backward: call forward() first (after the loaders' next_batch(ffmodel)); order: "
                              "forward(), zero_gradients(), backward(), update()")
        self._phase = "backward"

    def update(self) -> None:
        """Run the rest of the iteration ``forward()`` began (loss, backward, gradient sync, update)
        with the current labels; needs ``forward()`` and ``backward()`` first."""
        self._need_session("update")
        if self._phase != "backward":
            raise ConfigError(f"update: call forward() and backward() first (state: "
                              f"{'forward() only' if self._phase == 'forward' else 'nothing recorded'}); order: "
                              f"forward(), zero_gradients(), backward(), update()")
        if LABEL not in self._batch:
            raise ConfigError("update: no labels; give ffmodel.label_tensor a batch (its data loader's "
                              "next_batch(ffmodel), set_tensor or attach_numpy_array)")
        self._phase = "idle"
        self._train_step(0, labels=self._batch[LABEL])

    def _check_seq_length(self, where: str, seq_length) -> None:
        if seq_length is None:
            return
        if isinstance(seq_length, bool) or not isinstance(seq_length, int):
            raise ConfigError(f"{where}: seq_length must be an integer or None, got {short(seq_length)}")
        if seq_length == -1:
            return
        for node in self.pcg.nodes:
            if not isinstance(node.attrs, BatchMatmulAttrs):
                continue
            for ref, dim in zip(node.inputs, (node.attrs.a_seq_length_dim, node.attrs.b_seq_length_dim)):
                dims = self.pcg.shape(ref).tensor_shape.dims
                if dim not in (0, 1):  # FlexFlow acts on Fortran dimensions 0 and 1 only
                    continue
                size = dims[len(dims) - 1 - dim]
                if seq_length != size:
                    raise ConfigError(f"{where}: seq_length={seq_length}: batch_matmul '{node.name}' has a "
                                      f"sequence of {size} along dimension {dim} (from the last); FlexFlow would "
                                      f"compute only the first {seq_length} positions, flexrt computes whole "
                                      f"sequences; valid: None, -1 or {size}")

    def get_perf_metrics(self) -> PerfMetrics:
        """The metrics since the last reset (of the last fit/update iterations, or of the last eval)."""
        s = self._need_session("get_perf_metrics")
        if self._perf is None:
            return PerfMetrics(s.executor.metrics.result())
        return self._perf


# ---- the machine and the search of compile ----------------------------------------------------------

def _gpus_given(cfg) -> bool:
    from flexrt.model.flags import defaults
    return any(a == "-ll:gpu" or a.startswith("-ll:gpu=") for a in cfg.argv) or \
        cfg.workers_per_node != defaults()["workers_per_node"]


def _script_machine(cfg):
    """``--machine`` (or FlexFlow's ``--machine-model-file``) scaled to ``--nodes``; without one, the
    ``local`` machine with ``-ll:gpu`` devices per node and ``--nodes`` nodes when ``-ll:gpu`` is
    given, else the ``local`` preset."""
    from flexrt.machine import load_machine, local_machine
    if cfg.machine_file and cfg.machine_model_file:
        raise ConfigError(f"compile: --machine {cfg.machine_file} and --machine-model-file "
                          f"{cfg.machine_model_file} both name the machine; give one")
    nodes = cfg.num_nodes if cfg.num_nodes > 1 else None
    path = cfg.machine_file or cfg.machine_model_file
    if path:
        return load_machine(path, nodes=nodes)
    if _gpus_given(cfg):
        return local_machine(cfg.workers_per_node, nodes=cfg.num_nodes)
    return load_machine("local", nodes=nodes)


def _fused_strategy(strategy, machine, cfg):
    """The strategy fused as ``--fusion-policy`` says (FlexFlow's bare ``--fusion``: the xla policy,
    greedy fusion of operators with one layout): a named policy, or ``disco``: DisCo's search from
    the strategy (bounded by ``--budget``). A strategy read with its own plan keeps it unless a policy
    is asked for."""
    policy = cfg.fusion_policy
    if policy == "off" and cfg.perform_fusion:
        policy = "xla"
    if policy == "off":
        return strategy
    from flexrt.search import SearchRequest, search
    from flexrt.search.fusion_policies import apply_policy
    from flexrt.simulator.cost_model import AnalyticCostModel
    if policy != "disco":
        return apply_policy(policy, strategy, machine, AnalyticCostModel())
    base = strategy.base if hasattr(strategy, "base") else strategy.pcg
    request = SearchRequest(base, machine, AnalyticCostModel(), budget=cfg.search_budget, initial=(strategy,))
    return search("disco", request).strategy


def _search_requested(cfg) -> bool:
    """FlexFlow's behaviour: ``compile`` searches when the script got ``--budget`` (or a config set a
    budget other than the default); ``--only-data-parallel`` or a zero budget keeps data parallelism."""
    from flexrt.model.flags import defaults
    given = any(a in ("--budget", "--search-budget") for a in cfg.argv) or \
        cfg.search_budget != defaults()["search_budget"]
    return given and cfg.search_budget > 0 and not cfg.only_data_parallel


def _search_strategy(pcg, machine, cfg):
    """The strategy of ``--search-algorithm`` (FlexFlow's MCMC by default; Unity's, exhaustive or
    sequential) for the config's budget, alpha and axis flags, scored by the analytic cost model:
    one ``flexrt.search.search`` call. Unity and sequential search every axis unless
    ``--enable-parameter-parallel`` or ``--enable-attribute-parallel`` narrows it, and take alpha
    (their pruning threshold) as at least 1."""
    from flexrt.search import SearchRequest, algorithm, algorithms, search
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.strategy import SearchSpace
    searches = [a for a in algorithms() if "space" in algorithm(a).fields]
    algo = cfg.search_algorithm
    if algo not in searches:
        raise ConfigError(f"--search-algorithm: unknown search {algo!r}; valid: {', '.join(searches)}")
    space = SearchSpace.from_config(cfg)
    options = {}
    if algo in ("unity", "sequential"):
        if not (cfg.enable_parameter_parallel or cfg.enable_attribute_parallel):
            space = SearchSpace.full()
        options["alpha"] = max(cfg.search_alpha, 1.0)
    elif "alpha" in algorithm(algo).options:
        options["alpha"] = cfg.search_alpha
    request = SearchRequest(pcg, machine, AnalyticCostModel(), budget=cfg.search_budget, space=space, options=options)
    return search(algo, request).strategy

