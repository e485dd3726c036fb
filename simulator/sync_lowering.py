"""When gradients are synchronized: during the backward pass (``overlap``, the default) or after it
(``after_backward``).

By default a weight's gradient synchronization (its ring AllReduce, the copies' sums sent back, the
update) starts as soon as the backward tasks it reads are done, overlapping the rest of the backward
pass, as PyTorch's DistributedDataParallel does with its gradient buckets. Megatron-LM does not by
default: its data-parallel all-reduce runs once the whole forward-backward of the iteration (every
micro-batch, the pipeline's flush) is done on the rank (``overlap_grad_reduce=False`` in Megatron
Core's ``DistributedDataParallelConfig``; the 2021 ``LocalDDP``'s ``allreduce_gradients`` after
``forward_backward_func``). FlexFlow's simulator likewise puts a barrier between the backward tasks and
the updates unless ``--overlap`` is given.

``after_backward`` lowers that order: per compute device one barrier task (a REDUCE of one element:
the launch of the gradient reduction) after every backward-phase task on the device (backward,
recompute, weight-gradient), and every task of a weight's synchronization that waits for a backward
task on the device waits for the barrier too. Only the tasks' order changes, never what they compute
(the runtime runs the barrier as a no-op): the law holds unchanged.

The choice travels with the cost model (``with_grad_sync``, as ``--comm-cost`` does), so every
lowering a search, a training session or a simulation builds from it orders the synchronization alike;
``Lowering(..., grad_sync=...)`` and ``Simulator(..., grad_sync=...)`` set it explicitly.

Entry points: ``GRAD_SYNCS``, ``parse_grad_sync``, ``with_grad_sync``, ``grad_sync_of``,
``lower_sync_after_backward``.
"""

from __future__ import annotations

import numpy as np

from flexrt.errors import ConfigError, StrategyError
from flexrt.ir.datatype import DataType
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.cost_model import CostModelWrapper
from flexrt.simulator.task_graph import KIND_CODE, Owner, OwnerKind, TaskKind
from flexrt.strategy.pipeline_2bw import delays_updates

GRAD_SYNCS = ("overlap", "after_backward")
BARRIER = "backward done"


def parse_grad_sync(value) -> str:
    """``value`` as one of ``GRAD_SYNCS`` (a hyphen may stand for the underscore); a ConfigError else."""
    name = str(value).replace("-", "_")
    if name not in GRAD_SYNCS:
        raise ConfigError(f"gradient synchronization {value!r}: expected one of {', '.join(GRAD_SYNCS)} "
                          f"(overlap: during the backward pass; after_backward: once it is done, as Megatron-LM)")
    return name


class SyncAfterBackward(CostModelWrapper):
    """``base`` carrying ``grad_sync = "after_backward"`` to the lowerings built from it; every time is
    ``base``'s."""

    grad_sync = "after_backward"

    def __init__(self, base) -> None:
        self.base = base
        self.name = f"{getattr(base, 'name', type(base).__name__)}+sync-after-backward"

    def __repr__(self) -> str:
        return f"SyncAfterBackward({self.base!r})"

    def __reduce__(self):
        return SyncAfterBackward, (self.base,)


def with_grad_sync(cost_model, grad_sync):
    """``cost_model`` carrying ``grad_sync``: itself for overlap (one that carries after_backward is
    unwrapped), else wrapped in ``SyncAfterBackward``."""
    base = cost_model.base if isinstance(cost_model, SyncAfterBackward) else cost_model
    return base if parse_grad_sync(grad_sync) == "overlap" else SyncAfterBackward(base)


def grad_sync_of(cost_model) -> str:
    """The gradient synchronization a cost model carries (``with_grad_sync``); overlap for any other."""
    return getattr(cost_model, "grad_sync", "overlap")


def lower_sync_after_backward(low, strategy) -> list[int]:
    """Add the barriers and their dependencies (module doc); returns the barrier tasks. A ``2bw``
    pipeline, whose iterations overlap by design, is refused."""
    if delays_updates(strategy):
        raise StrategyError("gradient synchronization after the backward pass cannot apply to a 2bw pipeline: its "
                            "iterations overlap on double-buffered weights (PipeDream-2BW); give another schedule "
                            "or grad sync overlap")
    cols = low.graph.columns()
    kinds, devices, alive, owner = cols["kind"], cols["device"], cols["alive"], cols["owner"]
    backward = np.isin(kinds, [KIND_CODE[TaskKind.BACKWARD], KIND_CODE[TaskKind.RECOMPUTE]]) & alive \
        & (devices < low.num_compute)
    of_weight = np.array([k.kind is OwnerKind.WEIGHT for k in low.graph.owner_keys], dtype=bool)[owner] & alive
    src, dst = low.core.edge_arrays()
    entry = backward[src] & of_weight[dst]                       # a weight's task waiting for a backward task
    pairs = np.unique(np.stack([devices[src[entry]], dst[entry]]), axis=1) if entry.any() else np.zeros((2, 0), int)
    same = backward[src] & backward[dst] & (devices[src] == devices[dst])
    has_succ = np.zeros(len(kinds), dtype=bool)
    has_succ[src[same]] = True
    del src, dst, entry, same
    sinks = np.flatnonzero(backward & ~has_succ)                # the last backward-phase tasks of each device
    sink_dev = devices[sinks]
    owner_key = Owner.loss(low.loss_node if low.loss_node is not None else low.wiring.ops[-1])
    one = TensorShape((1,), DataType.DT_FLOAT)
    barriers = []
    for dev in np.unique(pairs[0]).tolist():
        before = sinks[sink_dev == dev].tolist()
        b = low._reduce(owner_key, dev, one, 1, f"{BARRIER} @{dev}", before)
        low._edges(owner_key, [b], pairs[1][pairs[0] == dev].tolist())
        barriers.append(b)
    return barriers
