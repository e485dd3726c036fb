"""What a pipelined strategy (``flexrt.strategy.pipeline``) adds to the lowering (``Lowering``) of its
micro-batched model, in both consumers of the task graph:

- ``lower_schedule``: the schedule as dependencies. On every device, each unit (a stage's forward,
  or backward and recompute, tasks of one micro-batch there) runs after the one before it in its device block's
  order (``device_order``). Edges go from the earlier unit's tasks that nothing in it follows to
  the later unit's tasks that nothing in it precedes, owned by the later unit's first operator.
- ``accumulate_micro_batches``: gradient accumulation. A weight instance's gradient gets one
  contribution per micro-batch; they are summed as they come (a REDUCE task adding contribution
  ``j`` into the sum of those before it, on the instance's device), so that one contribution and
  the running sum are live at a time, as in a framework that accumulates into ``.grad``. They are
  not all held until the synchronization. Which micro-batches contribute first follows their index.

- ``idle_fractions``: the bubble, per device, of a simulated timeline (``steady_idle_fractions``: a
  ``2bw`` pipeline's, against its steady-state period).
- zero-bubble schedules (``Schedule.splits_backward``): an operator with weights gets, per piece, a
  B task (the gradients of its inputs: ``Backward`` with no weight gradient) and after it a W task
  (its weights' gradients: ``Backward`` with no input gradient), which the schedule orders apart
  (``split_backward``). W costs the forward's time (the same products: dW = X^T dY against
  Y = X W), at most half the backward; B the rest. W assembles the output gradients again from
  the parts B's came from, under its own keys (``weight_grad_parts``), so they live until W. The
  NumPy runtime's W task runs the operator's backward kernel and keeps only the weight gradients.

Entry points: ``lower_schedule``, ``accumulate_micro_batches``, ``idle_fractions``, ``steady_idle_fractions``,
``weight_grad_times``, ``split_backward``, ``weight_grad_parts``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from flexrt.ir.tensor_shape import TensorShape
from flexrt.ir.op_type import OpType
from flexrt.simulator.actions import Backward, Buf, BufKind, Key, Sum, own_buf
from flexrt.simulator.task_graph import KIND_CODE, Owner, TaskKind, sorted_runs
from flexrt.strategy.pipeline import device_order
from flexrt.strategy.reshard import overlap


def lower_schedule(low) -> None:
    """The pipeline's schedule as dependencies between the units of each device (module doc).

    Vectorized over the whole graph (a GPT-3 pipeline has tens of millions of tasks and edges): each
    task of a unit gets the key (unit, device); a unit's sinks on a device are its tasks without a
    successor of the same key, its sources those without such a predecessor."""
    plan = low.pipeline
    unit_ids: dict[tuple, int] = {}
    first_op: list[str] = []
    ids_of, labels = [], []          # every unit's tasks, and their unit
    for name in low.wiring.ops:
        stage, j = plan.unit_of(name)
        fwd, bwd = low.op_tasks[name]
        for phase, ids in (("F", fwd), ("B", list(low.recompute_tasks.get(name, ())) + list(bwd)),
                           ("W", low.wgrad.get(name, ()))):
            u = unit_ids.get((phase, stage, j))
            if u is None:
                u = unit_ids[(phase, stage, j)] = len(first_op)
                first_op.append(name)
            ids_of.extend(ids)
            labels.extend([u] * len(ids))
    if not ids_of:
        return
    tasks = np.array(ids_of, dtype=np.int64)
    devices = low.graph.columns()["device"]
    ndev = int(devices.max()) + 1
    key = np.full(len(devices), -1, dtype=np.int64)   # task -> unit * ndev + device (-1: in no unit)
    key[tasks] = np.array(labels, dtype=np.int64) * ndev + devices[tasks]
    src, dst = low.core.edge_arrays()
    inside = (key[src] >= 0) & (key[src] == key[dst])
    has_succ = np.zeros(len(key), dtype=bool)
    has_pred = np.zeros(len(key), dtype=bool)
    has_succ[src[inside]] = True
    has_pred[dst[inside]] = True
    del src, dst, inside
    order = np.argsort(key[tasks], kind="stable")     # grouped by key, each group in emission order
    tasks = tasks[order]
    keys = key[tasks]
    sinks, sources = ~has_succ[tasks], ~has_pred[tasks]
    ends = {}   # key -> (its sinks, its sources), in emission order
    for which, mask in ((0, sinks), (1, sources)):
        for k, part in sorted_runs(keys[mask], tasks[mask]):
            ends.setdefault(k, [[], []])[which] = part.tolist()
    del key, has_succ, has_pred, tasks, keys
    devices_of: dict[int, list] = defaultdict(list)   # unit -> its devices
    for k in sorted(ends):
        devices_of[k // ndev].append(k % ndev)
    for block in range(plan.stages):
        sched = device_order(plan.schedule, plan.stages, plan.micro_batches, plan.chunks, block)
        for before, after in zip(sched, sched[1:]):
            ub, ua = unit_ids.get(before), unit_ids.get(after)
            if ub is None or ua is None:
                continue
            owner = Owner.op(first_op[ua])
            for dev in devices_of.get(ua, ()):
                prev = ends.get(ub * ndev + dev)
                if prev is not None:
                    low._edges(owner, prev[0], ends[ua * ndev + dev][1])


def accumulate_micro_batches(low, owner, wname: str, users, plan, deps: dict, grad_parts: dict, sent) -> None:
    """Rewrites ``deps`` (instance ranges -> device -> the tasks its gradient waits for) and
    ``grad_parts`` ((ranges, device) -> the (key, box) parts assembling it, with detail) of one
    weight so that each instance's contributions are summed micro-batch by micro-batch (module doc)."""
    unit_of = low.pipeline.unit_of
    bwd = [low.wgrad.get(c) or low.op_tasks[c][1] for c, _ in users]
    mb = [unit_of(c)[1] for c, _ in users]
    if not low.detail and not plan.copies and all(type(b) is range for b in bwd):
        _running_sums_flat(low, owner, plan, bwd, mb, deps, low.wiring.weight_shape[wname].dtype)
        return
    contrib: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for u, p, ranges, dev in plan.reads:
        tasks, parts = contrib[(ranges, dev)][mb[u]]
        tasks.append(bwd[u][p])
        if low.detail:   # the parts are what the runtime assembles; a search needs none
            c, i = users[u]
            parts.append((Key.grad_operand(c, i, p), overlap(low.layout(c).operand_regions[i][p].ranges, ranges)))
    for (readers, ranges, src, dev, box), (_, _, bx) in zip(plan.copies, sent):
        # a copy's gradient comes back once, when its last micro-batch's readers are done
        tasks, parts = contrib[(ranges, src)][max(mb[u] for u, _ in readers)]
        tasks.extend(low.core.hops(bx))
        if low.detail:
            parts.append((Key.transfer(low.core.row(bx)[4]), box))
    dtype = low.wiring.weight_shape[wname].dtype
    if not low.detail:      # timing only: the same tasks, emitted in one call
        _running_sums(low, owner, contrib, deps, dtype)
        return
    for (ranges, dev), by_mb in contrib.items():
        if len(by_mb) < 2:
            continue
        piece = TensorShape(tuple(b - a for a, b in ranges), dtype)
        acc_tasks, acc_parts = None, None
        for j in sorted(by_mb):
            tasks, parts = by_mb[j]
            if acc_tasks is None:
                acc_tasks, acc_parts = tasks, parts
                continue
            key = Key.sum(low._new_group())
            t = low._reduce(owner, dev, piece, 2, f"accumulate {wname}@{dev} mb{j}", acc_tasks + tasks,
                            Sum(Buf(key, dev, ranges, dtype.numpy_name)))
            for k, box in acc_parts + parts:
                low._part(owner, key, dev, k, dev, box, add=True)
            acc_tasks, acc_parts = [t], [(key, ranges)]
        deps[ranges][dev] = acc_tasks
        if low.detail:
            grad_parts[(ranges, dev)] = acc_parts


def _running_sums(low, owner, contrib: dict, deps: dict, dtype) -> None:
    """``accumulate_micro_batches`` without detail: the same REDUCE tasks and dependencies, in the
    same order, from one ``GraphCore.chains_flat`` call."""
    keys = list(contrib)
    tasks, group_ptr, inst_ptr = [], [0], [0]
    for key in keys:
        by_mb = contrib[key]
        for j in sorted(by_mb):
            tasks.extend(by_mb[j][0])
            group_ptr.append(len(tasks))
        inst_ptr.append(len(group_ptr) - 1)
    _sums(low, owner, keys, np.array(tasks, dtype=np.int64), group_ptr, np.array(inst_ptr, dtype=np.int64), deps,
          dtype)


def _sums(low, owner, keys: list, tasks, group_ptr, inst_ptr, deps: dict, dtype) -> None:
    """The running sums of instances ``keys`` [(ranges, device)] (``GraphCore.chains_flat``'s flat
    arrays); each summed instance's gradient then waits for its last sum."""
    exe = [low.reduce_time(dev, TensorShape(tuple(b - a for a, b in ranges), dtype), 2) for ranges, dev in keys]
    done = low.core.chains_flat(low._oid(owner), KIND_CODE[TaskKind.REDUCE], [dev for _, dev in keys], exe, tasks,
                                group_ptr, inst_ptr)
    low._group_ids += sum(int(inst_ptr[i + 1] - inst_ptr[i]) - 1 for i, d in enumerate(done) if d is not None)
    for (ranges, dev), d in zip(keys, done):    # the sums' keys, as with detail (above)
        if d is not None:
            deps[ranges][dev] = d


def _read_groups(plan) -> tuple:
    """Of a weight plan's reads: per read its user, its piece and its instance (numbered by first
    appearance), and each instance's (ranges, device)."""
    index: dict = {}
    inst = [index.setdefault((ranges, dev), len(index)) for _, _, ranges, dev in plan.reads]
    return (np.array([u for u, _, _, _ in plan.reads], dtype=np.int64),
            np.array([p for _, p, _, _ in plan.reads], dtype=np.int64), np.array(inst, dtype=np.int64), list(index))


def _running_sums_flat(low, owner, plan, bwd, mb, deps: dict, dtype) -> None:
    """``_running_sums`` for a weight without copies whose users' backward tasks are id ranges
    (no zero-bubble W tasks): the contributions grouped with NumPy, the sums emitted by one
    ``GraphCore.chains_flat`` call; the same tasks, in the same order."""
    users, pieces, inst, keys = low.derived("read groups", (plan,), lambda: _read_groups(plan))   # twins share plans
    if not len(users):
        return
    start = np.array([b.start for b in bwd], dtype=np.int64)
    step = np.array([b.step for b in bwd], dtype=np.int64)
    tasks = start[users] + step[users] * pieces
    mbs = np.array(mb, dtype=np.int64)[users]
    key = inst * (int(mbs.max()) + 1) + mbs
    order = np.argsort(key, kind="stable")      # by instance (first appearance), then micro-batch; reads' order
    key, tasks, inst = key[order], tasks[order], inst[order]
    group_start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    group_ptr = np.r_[group_start, len(key)]
    inst_ptr = np.searchsorted(inst[group_start], np.arange(len(keys) + 1), side="left")
    _sums(low, owner, keys, tasks, group_ptr, inst_ptr, deps, dtype)


WGRAD = "@w"   # the W task's own keys for the output gradients it reads


def _weight_operands(low, name: str) -> list[int]:
    node = low.wiring.nodes[name]
    return [i for i in range(len(node.inputs)) if low.producer[(name, i)].op_type is OpType.WEIGHT
            and low.wiring.needs_grad(name, i)]


def weight_grad_times(low, name: str, fx: list, bx: list):
    """Per piece the W pass's time of an operator with weights under a zero-bubble schedule (the
    forward's, at most half the backward), else None."""
    plan = low.pipeline
    if plan is None or not plan.schedule.splits_backward or not _weight_operands(low, name):
        return None
    return [min(f, b / 2) for f, b in zip(fx, bx)]


def split_backward(low, name: str, lay, wx: list) -> None:
    """The W task of each piece (after its B, the backward task), and both tasks' actions."""
    owner = Owner.op(name)
    _, bwd = low.op_tasks[name]
    weights = set(_weight_operands(low, name))
    tasks = []
    for p, dev in enumerate(lay.devices):
        w = low._task(owner, TaskKind.BACKWARD, dev, wx[p], f"wgrad {name}[{p}]", node=name, piece=p)
        low._edge(owner, bwd[p], w)
        tasks.append(w)
        if low.detail:
            _, ba = low._piece_actions(name, lay, p, dev)
            low.graph.annotate(bwd[p], f"bwd {name}[{p}]", name, p, (), Backward(
                name, ba.attrs, ba.zeroed, ba.operands, ba.outputs, ba.grad_outputs,
                tuple(None if i in weights else g for i, g in enumerate(ba.grad_operands))))
            low.graph.annotate(w, f"wgrad {name}[{p}]", name, p, (), Backward(
                name, ba.attrs, ba.zeroed, ba.operands, ba.outputs,
                tuple(own_buf(b, WGRAD) for b in ba.grad_outputs),
                tuple(g if i in weights else None for i, g in enumerate(ba.grad_operands))))
    low.wgrad[name] = tasks


def weight_grad_parts(low) -> None:
    """Each W task's output gradients assembled from the parts of its B's (module doc)."""
    if not low.wgrad or not low.detail:
        return
    for plist in list(low.parts.values()):
        for key, dev, part in list(plist):
            if key.kind is BufKind.GRAD_OUTPUT and key.name in low.wgrad:
                low._part(Owner.op(key.name), key.own(WGRAD), dev, part.src,
                          part.device, part.box, part.add)


def steady_idle_fractions(graph, period: float) -> dict[int, float]:
    """A ``2bw`` pipeline's bubble in steady state: per compute device running forward or backward
    tasks, the share of the iteration (``period``, the simulator's steady-state time) it has no
    forward, backward or recomputation to run."""
    import numpy as np
    from flexrt.simulator.task_graph import KIND_CODE, TaskKind
    col = graph.columns()
    mask = col["alive"] & np.isin(col["kind"], [KIND_CODE[TaskKind.FORWARD], KIND_CODE[TaskKind.BACKWARD],
                                                KIND_CODE[TaskKind.RECOMPUTE]])
    if not mask.any() or not period > 0:
        return {}
    dev = col["device"][mask]
    busy = np.bincount(dev, weights=col["exe"][mask])
    return {int(d): 1.0 - float(busy[d]) / period for d in np.unique(dev).tolist()}


def idle_fractions(graph, timeline: dict) -> dict[int, float]:
    """Per compute device running forward or backward tasks: the share of the pipeline's span (the
    first forward's start to the last backward's end, over all devices) it spends idle: the bubble."""
    import numpy as np
    from flexrt.simulator.task_graph import KIND_CODE, TaskKind
    ids = np.asarray(timeline["ids"])
    kinds = graph.columns()["kind"][ids]
    mask = np.isin(kinds, [KIND_CODE[TaskKind.FORWARD], KIND_CODE[TaskKind.BACKWARD], KIND_CODE[TaskKind.RECOMPUTE]])
    if not mask.any():
        return {}
    dev, start, end = np.asarray(timeline["device"])[mask], np.asarray(timeline["start"])[mask], \
        np.asarray(timeline["end"])[mask]
    span = float(end.max() - start.min())
    busy = np.bincount(dev, weights=end - start)
    return {int(d): 1.0 - float(busy[d]) / span for d in np.unique(dev).tolist()}
