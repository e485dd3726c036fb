"""A strategy made runnable: simulated, checked against device memory, planned, weights placed.

``Session`` is what ``FFModel.compile`` and ``flexrt train`` build: it lowers the strategy once
(the simulator's task graph), refuses it when the simulator predicts a device over its memory,
plans the execution, places the initial weights on their devices, and then runs training
iterations, each returning the loss, the metrics, the measured time and the per-device peak memory
beside the simulator's predictions. ``chrome_trace`` writes a run in the simulator's trace layout.
``forward`` runs a forward pass alone (no labels) and ``finish`` the rest of its iteration;
``output`` gathers any operator's output of the last forward pass, ``weight`` / ``set_weight``
read and write one weight's full array, ``set_optimizer`` changes the optimizer (or its learning
rate) for the next updates.

A cross-entropy loss over an output that is not a softmax trains as FlexFlow trains it (its loss
kernels hand back ``(output - onehot) / batch`` whatever the last operator is); the session warns
once on standard error that this is not a true cross-entropy.

Example:
    >>> import numpy as np
    >>> from flexrt.core import FFConfig, FFModel, DataType, ActiMode
    >>> from flexrt.machine import load_machine
    >>> from flexrt.strategy import data_parallel
    >>> m = FFModel(FFConfig([]))
    >>> x = m.create_tensor([8, 4], DataType.DT_DOUBLE)
    >>> _ = m.softmax(m.dense(x, 3, ActiMode.AC_MODE_NONE, name="fc"), name="sm")
    >>> machine = load_machine("dgx1_v100")
    >>> zeros = {k: np.zeros_like(v) for k, v in initial_weights(m.pcg).items()}
    >>> s = Session(data_parallel(m.pcg, machine, 2), machine, optimizer="sgd", lr=0.1, weights=zeros)
    >>> r = s.step({s.input_names[0]: np.ones((8, 4))}, np.zeros((8, 1), dtype=np.int32))
    >>> round(r.loss, 6)  # zero weights: uniform over 3 classes, -log(1/3)
    1.098612

Entry points: ``Session``, ``initial_weights``.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import numpy as np

from flexrt.errors import ConfigError, GraphError, StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG
from flexrt.ir.registry import op_def
from flexrt.ir.tensor_shape import TensorShape
from flexrt.kernels.initializers import fans, initialize
from flexrt.kernels.losses import CROSS_ENTROPIES, LossType
from flexrt.kernels.metrics import MetricsType
from flexrt.kernels.optimizers import OptimizerKind, delayed
from flexrt.machine import Machine
from flexrt.runtime import mpi
from flexrt.runtime.backend import available_host_bytes, get_backend
from flexrt.runtime.executor import Executor, IterationResult, optimizer_step
from flexrt.runtime.plan import ExecPlan
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.memory import combined_peak, replay, serial_times
from flexrt.kernels.optimizers import LossScaler
from flexrt.simulator.simulate import SimResult, Simulator, chrome_trace
from flexrt.strategy import ConfigStrategy, Strategy
from flexrt.strategy.pipeline import split_batch
from flexrt.strategy.pipeline_2bw import delays_updates
from flexrt.strategy.weights import fold_values, folded, locate, unfold_values

OPTIMIZER_PARAMS = {OptimizerKind.SGD: ("lr", "momentum", "nesterov", "weight_decay"),
                    OptimizerKind.ADAM: ("alpha", "beta1", "beta2", "epsilon", "weight_decay"),
                    OptimizerKind.RMSPROP: ("lr", "alpha", "eps", "weight_decay"),
                    OptimizerKind.ADAGRAD: ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")}
_WARNED: set = set()   # warnings already printed by this process


def _warn_once(text: str) -> None:
    if text not in _WARNED:
        _WARNED.add(text)
        print(f"flexrt: warning: {text}", file=sys.stderr)


def default_initializer(pcg: PCG, weight) -> str:
    """The initializer kind of a weight node that names none: its operator's (``OpDef.weight_inits``:
    normalization scales start at one), else Glorot uniform for matrices and kernels and zeros for
    rank-1 biases (FlexFlow's defaults)."""
    for c in pcg.consumers(weight.id):
        user = pcg.node(c)
        opdef = op_def(user.op_type)
        kinds = opdef.weight_inits(user.attrs) if opdef.op_type is not OpType.WEIGHT else ()
        if kinds:
            first = len(user.inputs) - opdef.num_weights(user.attrs)  # weights follow the data inputs
            slots = [i - first for i, r in enumerate(user.inputs) if r.node == weight.id and i >= first]
            if slots and slots[0] < len(kinds):
                return kinds[slots[0]]
    return "zero" if len(weight.attrs.shape.dims) == 1 else "glorot_uniform"


def _model_weights(pcg: PCG) -> list:
    """(node id in the model, name, shape, the graph's weight node) of each of the model's weights,
    in the model's graph order: a folded weight stands for its parts, each with its own."""
    out = []
    for node in pcg.nodes:
        if node.op_type is not OpType.WEIGHT:
            continue
        a = node.attrs
        if not a.parts:
            out.append((node.id, node.name, a.shape, node))
            continue
        for name, size, nid in zip(a.parts, a.part_sizes, a.part_ids):
            dims = a.shape.dims[:a.part_axis] + (size,) + a.shape.dims[a.part_axis + 1:]
            out.append((nid, name, TensorShape(dims, a.shape.dtype), node))
    return sorted(out, key=lambda e: e[0])


def initial_weights(pcg: PCG, seed: int = 0, initializers: Optional[dict] = None) -> dict:
    """Full initial arrays of every weight of the model, by its names: ``initializers`` (weight name ->
    (kind, params)) where given, else ``default_initializer``; weight ``k`` (in graph order) draws from
    ``seed + k``. A folded weight's parts (``flexrt.strategy.weights``) are drawn as the model's own
    weights, so a folded graph starts where its model does (``fold_values`` joins them)."""
    out = {}
    for k, (_, name, shape, node) in enumerate(_model_weights(pcg)):
        kind, params = (initializers or {}).get(name, (None, {}))
        if kind is None:
            kind = default_initializer(pcg, node)
        fan_in = fan_out = None
        if kind == "glorot_uniform":
            dims = shape.dims
            fan_in, fan_out = fans(dims, "conv") if len(dims) == 4 else (
                (int(np.prod(dims[:-1])), dims[-1]) if len(dims) >= 2 else (dims[0], dims[0]))
        out[name] = initialize(np, kind, shape.dims, shape.dtype.numpy_name, seed + k, fan_in, fan_out, **params)
    return out


def largest_tensor(pcg: PCG) -> str:
    """The largest tensor of the model (an operator's output or a weight), said with its operator:
    where to look when a strategy does not fit."""
    best = max(((t.size_bytes, node.name, "weight" if node.op_type is OpType.WEIGHT else "output", t)
                for node in pcg.nodes for t in (s.tensor_shape for s in pcg.output_shapes(node.id))),
               default=None, key=lambda t: t[0])
    if best is None:
        return "the model is empty"
    size, name, what, shape = best
    return f"the largest tensor is the {what} of '{name}', {list(shape.dims)} ({size / 2**20:.1f} MiB)"


def _check_optimizer_params(optimizer: OptimizerKind, params: dict) -> None:
    bad = sorted(set(params) - set(OPTIMIZER_PARAMS[optimizer]))
    if bad:
        raise ConfigError(f"optimizer {optimizer.short_name!r} takes "
                          f"{', '.join(OPTIMIZER_PARAMS[optimizer])}; got {', '.join(bad)}")


def _is_root(comm) -> bool:
    comm = comm if comm is not None else mpi.world()
    return comm is None or comm.Get_rank() == 0


def _host_totals(comm, need: int, devices: int, avail) -> tuple:
    """Under MPI: (the bytes and devices of the ranks on this rank's host, summed; the available
    memory, where any rank's host is short: the most short host's, so that every rank refuses
    together and none waits for a rank that stopped), and where they are."""
    from mpi4py import MPI  # only reached under an MPI launcher
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        host_need, host_devices = local.allreduce(need), local.allreduce(devices)
    finally:
        local.Free()
    short = host_need - avail if avail is not None else -1
    worst = comm.allreduce((short, comm.Get_rank()), op=MPI.MAX)
    told = comm.bcast((host_need, host_devices, avail), root=worst[1])
    if worst[0] <= 0 or short > 0:   # every host fits, or this one is short: tell this host's
        return host_need, host_devices, avail, "in the ranks on this host"
    return told + (f"in the ranks on rank {worst[1]}'s host",)


class Session:
    def __init__(self, strategy: Strategy, machine: Machine, *, cost_model=None, backend: str = "numpy",
                 mode: str = "serial", optimizer: OptimizerKind | str = OptimizerKind.SGD,
                 loss: LossType | str = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                 metrics=(), weights: Optional[dict | Callable[[], dict]] = None, seed: int = 0,
                 loss_output: Optional[str] = None,
                 check_memory: bool = True, comm=None, loss_scale=None, penalties: Optional[dict] = None,
                 **optimizer_params) -> None:
        """``optimizer`` (SGD or ADAM), ``loss`` and each of ``metrics`` are an ``OptimizerKind`` /
        ``LossType`` / ``MetricsType`` or its name ("adam", "mean_squared_error_avg", "accuracy").
        A model with float16 weights (``flexrt.ir.precision``) trains through float32 master weights
        with its loss scaled: dynamically (``loss_scale`` None or "dynamic": torch's GradScaler
        defaults) or by a fixed ``loss_scale``. ``penalties`` (weight name -> ("l1" | "l2", factor),
        FlexFlow's ``kernel_regularizer``) add their gradient to those weights' at every update.
        ``check_memory`` refuses, before anything runs, a strategy the simulator predicts over a
        device's memory and, on the NumPy backend, one whose devices together would need more host
        memory than is available (``_check_host_memory``). ``weights`` may be a function drawing them:
        it is called after those checks (a model too big is refused before its weights exist)."""
        optimizer = OptimizerKind.parse(optimizer, OPTIMIZER_PARAMS)
        loss = LossType.parse(loss)
        metrics = [MetricsType.parse(m) for m in metrics]
        _check_optimizer_params(optimizer, optimizer_params)
        self.optimizer = optimizer
        self.strategy = strategy
        self.machine = machine
        self.base = strategy.base if isinstance(strategy, ConfigStrategy) else strategy.pcg  # weights and inputs are named alike
        state = optimizer if optimizer is not OptimizerKind.SGD else (
            OptimizerKind.MOMENTUM if optimizer_params.get("momentum") else OptimizerKind.SGD)
        self.simulator = Simulator(machine, cost_model or AnalyticCostModel(), state, loss_output=loss_output,
                                   incremental=False)
        self.predicted: SimResult = self.simulator.full(strategy)
        self.loss_output = self.simulator.lowering.loss_node
        out_type = strategy.wiring().nodes[self.loss_output].op_type
        self._check_loss_output(loss)
        if loss in CROSS_ENTROPIES and out_type is not OpType.SOFTMAX and _is_root(comm):
            _warn_once(f"loss {loss.short_name!r} scores the model's output operator '{self.loss_output}' "
                       f"({out_type.value}), which is not a softmax: training uses FlexFlow's gradient "
                       f"(output - onehot) / batch, so the loss is not a true cross-entropy")
        if check_memory and self.predicted.over_capacity:
            d = self.predicted.over_capacity[0]
            need, have = self.predicted.memory_bytes[d]["total"], self.predicted.memory_capacity[d]
            raise StrategyError(f"strategy does not fit: device {d} needs {need / 2**20:.1f} MiB "
                                f"({', '.join(f'{k} {v / 2**20:.1f}' for k, v in self.predicted.memory_bytes[d].items() if k != 'total')}) "
                                f"but has {have / 2**20:.1f} MiB; devices over capacity: "
                                f"{', '.join(map(str, self.predicted.over_capacity))}; {largest_tensor(self.base)}")
        self.plan = ExecPlan(self.simulator.graph, self.simulator.schedule())
        self.backend = get_backend(backend, machine.num_devices)
        update = self._update_of(optimizer, optimizer_params)
        self.comm = comm if comm is not None else mpi.world()
        if self.comm is None:
            self.layout = None
            self.executor = Executor(self.plan, self.backend, update, loss, metrics, mode)
        else:
            if mode != "serial":
                raise ConfigError(f"executor mode {mode!r} is not available across MPI ranks; use serial (each rank "
                                  f"runs its devices' tasks in one loop, messages overlap with compute)")
            from flexrt.runtime.spmd import SpmdExecutor
            self.layout = mpi.rank_layout(machine, self.comm.Get_size(), self.comm.Get_rank())
            self.executor = SpmdExecutor(self.plan, self.backend, update, loss, metrics, self.comm, self.layout)
        if check_memory and backend == "numpy":
            self._check_host_memory()
        self._set_loss_scale(loss_scale)
        self.executor.penalties = self._checked_penalties(penalties or {})
        if callable(weights):
            weights = weights()
        self.load_weights(weights if weights is not None else initial_weights(self.base, seed))
        self.last: Optional[IterationResult] = None

    def _check_loss_output(self, loss: LossType) -> None:
        """A cross-entropy scores a [batch, classes] output: refuse one of rank 1 (one value per
        sample) before anything runs, naming the output and the losses that take it."""
        try:
            node = self.base.node_by_name(self.loss_output)
        except GraphError:  # (a strategy holding its own graph: its node names may differ)
            return
        dims = [d.size for d in self.base.output_shapes(node.id)[0].dims]
        if loss in CROSS_ENTROPIES and len(dims) < 2:
            raise ConfigError(f"loss {loss.short_name!r} scores output '{self.loss_output}' of shape {list(dims)}, one "
                              f"value per sample; a cross-entropy needs [batch, classes]: use loss identity or "
                              f"mean_squared_error_avg (--loss)")

    def _checked_penalties(self, penalties: dict) -> dict:
        """By the graph's weights: a folded weight's parts must carry one penalty (or none)."""
        out = dict(penalties)
        for name, attrs in folded(self.base).items():
            given = {p: out.pop(p) for p in attrs.parts if p in out}
            if given and (len(given) < len(attrs.parts) or len(set(given.values())) > 1):
                raise ConfigError(f"penalties: the strategy folds {', '.join(map(repr, attrs.parts))} into one "
                                  f"weight '{name}'; their penalties must be equal, got "
                                  f"{', '.join(f'{p}: {given.get(p)}' for p in attrs.parts)}")
            if given:
                out[name] = next(iter(given.values()))
        unknown = sorted(set(out) - set(self.strategy.wiring().weight_shape))
        if unknown:
            raise ConfigError(f"penalties: {', '.join(map(repr, unknown[:5]))} not a weight of the model")
        return out

    def _set_loss_scale(self, loss_scale) -> None:
        if loss_scale is None or loss_scale == "dynamic":
            return
        if self.executor.scaler is None:
            raise ConfigError(f"loss_scale {loss_scale!r}: loss scaling applies to models with float16 weights "
                              f"(train with precision fp16)")
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)):
            raise ConfigError(f"loss_scale must be \"dynamic\" or a number > 0, got {loss_scale!r}")
        self.executor.scaler = LossScaler(float(loss_scale), dynamic=False)

    def set_optimizer(self, optimizer: OptimizerKind | str, **optimizer_params) -> None:
        """The optimizer of the next updates (a new learning rate, or another optimizer: then each
        weight's optimizer state starts afresh). The simulator's prediction is not redone."""
        optimizer = OptimizerKind.parse(optimizer, OPTIMIZER_PARAMS)
        _check_optimizer_params(optimizer, optimizer_params)
        self.executor.update_fn = self._update_of(optimizer, optimizer_params)
        if optimizer is not self.optimizer:
            for state in self.executor.opt_state.values():
                state.clear()
        self.optimizer = optimizer

    def _update_of(self, optimizer, params: dict):
        """The optimizer's step, with PipeDream-2BW's one-step delay under a ``2bw`` pipeline
        (``flexrt.kernels.optimizers.delayed``)."""
        update = optimizer_step(optimizer, **params)
        return delayed(update) if delays_updates(self.strategy) else update

    @property
    def predicted_time_s(self) -> float:
        return self.predicted.iteration_time_s

    @property
    def is_root(self) -> bool:
        """True on the rank that prints and writes files (the only one without MPI)."""
        return self.comm is None or self.comm.Get_rank() == 0

    @property
    def predicted_summed_s(self) -> float:
        """Every task's simulated time added up: what one worker running all devices' tasks one
        after the other (the serial executor in one process) should take."""
        return float(sum(t.exe_s for t in self.simulator.graph.tasks.values()))

    @property
    def input_names(self) -> list[str]:
        """The model's inputs the batch is given by (a pipelined model's, not its micro-batches')."""
        plan = getattr(self.strategy, "pipeline", None)
        if plan is not None:
            return sorted({name for name, _, _ in plan.model.inputs.values()})
        return sorted(self.plan.inputs)

    def _batch(self, inputs: dict) -> dict:
        """A pipelined strategy's model reads each micro-batch's rows as inputs of their own
        (``flexrt.strategy.pipeline.split_batch``); the whole batch is given by the model's names."""
        plan = getattr(self.strategy, "pipeline", None)
        return inputs if plan is None else split_batch(plan, inputs)

    def step(self, inputs: dict, labels) -> IterationResult:
        """One training iteration (forward, loss, backward, gradient sync, update) on the batch."""
        self.last = self.executor.run(self._batch(inputs), labels)
        return self.last

    def forward(self, inputs: dict, training: bool = True) -> None:
        """The forward pass alone on the batch; ``output`` reads what it computed, ``finish`` completes
        the iteration (a later ``forward`` or ``step`` abandons it). ``training=False``: an inference
        forward (dropout passes through), which ``finish`` cannot complete."""
        self.executor.forward(self._batch(inputs), training)

    def finish(self, labels) -> IterationResult:
        """The rest of the iteration ``forward`` began: loss, backward, gradient sync, update."""
        self.last = self.executor.finish(labels)
        return self.last

    def output(self, node: str, k: int = 0) -> np.ndarray:
        """Output ``k`` of operator ``node`` of the last forward pass, whole (gathered from its pieces)."""
        return self.executor.read_output(node, k)

    def load_weights(self, full: dict) -> None:
        """Place every weight from full arrays by the model's names (a folded weight's parts joined)."""
        self.executor.load_weights(fold_values(self.base, full))

    def weights(self) -> dict:
        """Every weight's full array, by the model's names (a folded weight's parts cut apart)."""
        return unfold_values(self.base, self.executor.weights())

    def weight(self, name: str) -> np.ndarray:
        """One weight's current full array (a part of a folded weight: its slice, copied)."""
        where = locate(self.base, name)
        if where is None:
            return self.executor.weight(name)
        fname, index = where
        return self.executor.weight(fname)[index].copy()

    def set_weight(self, name: str, value) -> None:
        """Write one weight's full array into its instances; the next iteration uses it."""
        where = locate(self.base, name)
        if where is None:
            self.executor.set_weight(name, value)
            return
        fname, index = where
        full = self.executor.weight(fname)
        value = np.asarray(value)
        if value.shape != full[index].shape:
            raise ConfigError(f"weight '{name}' has shape {full[index].shape}; got an array of shape {value.shape}")
        full[index] = value
        self.executor.set_weight(fname, full)

    def reset_metrics(self) -> None:
        self.executor.metrics.reset()

    def _replayed(self):
        """The replay of the buffers' lifetimes in the order this session's executor runs its tasks
        (``memory_report``), computed once."""
        timeline = getattr(self, "_timeline", None)
        if timeline is None:
            plan = self.plan
            if self.executor.mode == "serial" and self.layout is None:
                start, end = serial_times(plan.succ, plan.num_preds, plan.buffers.ring_members)
            else:
                start, end = plan.predicted_start, plan.predicted_end
            state = self.simulator.state_factor()
            timeline = self._timeline = replay(plan.buffers, start, end, state,
                                               unmaterialized=self.executor.unmaterialized(),
                                               rank_of=None if self.layout is None else self.layout.owner,
                                               succ=plan.succ)
        return timeline

    def _check_host_memory(self) -> None:
        """The NumPy backend holds every device of this process in host memory: refuse, before
        anything is allocated, a run whose replayed peak (its devices together) exceeds what the
        host has available, rather than be killed by the system halfway."""
        avail = available_host_bytes()
        mine = [d for d in range(self.machine.num_devices) if self.layout is None or self.layout.owns(d)]
        need = combined_peak(self._replayed(), mine) if avail is not None else 0
        where, devices = "in this process", len(mine)
        if self.comm is not None:   # the ranks on one host share its memory; every rank refuses alike
            need, devices, avail, where = _host_totals(self.comm, need, len(mine), avail)
        if avail is not None and need > avail:
            raise StrategyError(
                f"strategy does not fit this host: the NumPy runtime holds the arrays of {devices} simulated "
                f"device(s) {where}, {need / 2**30:.2f} GiB at their replayed peak (weights, gradients, "
                f"optimizer state and activations), but {avail / 2**30:.2f} GiB of host memory is available; "
                f"use a smaller batch or model, fewer devices (--nodes), MPI ranks on several hosts, or "
                f"--backend cupy (Session(..., check_memory=False) skips this check)")

    def memory_report(self, result: Optional[IterationResult] = None) -> dict:
        """Per compute device: the predicted peak bytes live at once (``predicted_peak``), the measured
        peak (``measured_peak``, the runtime's) and the relative error of the prediction
        ((predicted - measured) / measured), beside the simulator's total of weights, gradients,
        optimizer state and kept activations (``predicted_total``; also ``predicted``, its older
        name), which is no bound of the peak (operand copies, activation gradients and a
        contribution to a gradient while it is being added are not in it).

        The predicted peak replays the buffers' lifetimes (``flexrt.simulator.memory.replay``) in the
        order this session's executor runs its tasks: the serial executor's dispatch order (the
        measured peak then equals it), else the simulated timeline; in a steady iteration (the
        optimizer's state held from the start: every iteration but the first)."""
        result = result or self.last
        if result is None:
            raise StrategyError("memory_report: no iteration has run yet")
        peak = self._replayed().peak_bytes
        report = {}
        for d in range(self.machine.num_devices):
            total = self.predicted.memory_bytes.get(d, {}).get("total", 0)
            measured, predicted = int(result.peak_bytes.get(d, 0)), peak.get(d, 0)
            if total or measured or predicted:
                report[d] = {"predicted_peak": predicted, "measured_peak": measured,
                             "relative_error": (predicted - measured) / measured if measured else None,
                             "predicted_total": total, "predicted": total}
        return report

    def chrome_trace(self, result: Optional[IterationResult] = None) -> dict:
        """The measured iteration as Chrome trace events, in the simulator's layout."""
        result = result or self.last
        if result is None:
            raise StrategyError("chrome_trace: no iteration has run yet")
        tasks = {t.id: self.simulator.graph.tasks[t.id] for t in self.plan.tasks}
        ids = [t.id for t in self.plan.tasks]
        devices = [t.device for t in self.plan.tasks]
        return chrome_trace(self.machine, tasks, ids, devices, result.start, result.end,
                            {"iteration_time_s": result.wall_s, "predicted_iteration_time_s": self.predicted_time_s,
                             "source": "runtime"})
