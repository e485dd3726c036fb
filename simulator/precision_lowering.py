"""What mixed precision (``flexrt.ir.precision``: 16-bit weights with float32 masters and a scaled
loss) adds to a lowering: the global overflow check before the optimizer's step.

A step whose gradients overflowed anywhere is skipped everywhere, so no weight may be updated before
every gradient is known to be finite (Megatron-LM and ``torch.cuda.amp.GradScaler`` check all of
them, then step). Each device therefore gets one check task (a REDUCE reading every gradient its
updates read, timed as one pass over them) after the tasks its updates wait for, and every update
waits for every device's check. The runtime's executor does the same: it runs everything but the
updates, checks, agrees across processes, and then updates or skips
(``flexrt.runtime.executor.Executor._scaled_phases``).

Entry points: ``lower_overflow_check``, ``is_overflow_check``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from flexrt.ir.datatype import DataType
from flexrt.ir.precision import is_half
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.task_graph import KIND_CODE, Owner, TaskKind


CHECK = "overflow check"


def is_overflow_check(task) -> bool:
    """Whether a (planned) task is a device's overflow check: across processes, what it hands the
    updates is the executors' agreement on overflow (an allreduce), not a message."""
    return task.kind is TaskKind.REDUCE and task.action is None and (task.name or "").startswith(CHECK)


def has_half_weights(wiring) -> bool:
    return any(is_half(s.dtype) for s in wiring.weight_shape.values())


def lower_overflow_check(low) -> list[int]:
    """Add the check tasks and their dependencies (module doc); returns the check tasks."""
    cols = low.graph.columns()
    kinds, devices, alive = cols["kind"], cols["device"], cols["alive"]
    updates = np.flatnonzero((kinds == KIND_CODE[TaskKind.UPDATE]) & (alive != 0)).tolist()
    if not updates:
        return []
    src, dst = low.core.edge_arrays()
    is_update = np.zeros(len(kinds), dtype=bool)
    is_update[updates] = True
    keep = is_update[dst]
    before: dict[int, set] = defaultdict(set)
    for a, b in zip(src[keep].tolist(), devices[dst[keep]].tolist()):
        before[b].add(a)
    memory = low.memory_by_device()
    owner = Owner.loss(low.loss_node)
    checks = []
    for dev in sorted({int(devices[u]) for u in updates}):
        grad_bytes = memory.get(dev, {}).get("gradients", 0)
        piece = TensorShape((max(1, grad_bytes // 2),), DataType.DT_HALF)
        checks.append(low._reduce(owner, dev, piece, 1, f"{CHECK} @{dev}", sorted(before[dev])))
    low._edges(owner, checks, updates)
    return checks
