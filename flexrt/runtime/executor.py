"""The executor: runs one training iteration of an ``ExecPlan`` on a backend's devices.

Each device runs its tasks in the order the simulator predicted; a task starts when every task it
depends on has finished. Two dispatchers share the task semantics:

- ``serial``: one loop pops the first runnable task in predicted order (deterministic; the
  reference, and the cheapest per task);
- ``threads`` (``flexrt.runtime.threads``): one worker thread per device and per link in use,
  each walking its own task list and waiting on its dependencies (NumPy releases the interpreter
  lock inside kernels and copies, so devices overlap).

A ring AllReduce runs as one collective (as NCCL's is) once each member's transfer is ready: the
members' buffers are assembled, then summed by the ring algorithm, 2(n-1) steps of chunk copies
between device memories and adds, leaving every member the same sum. A gradient bucket's ring
(``RingGroup.segments`` > 1) gives each member one flat buffer: each segment is assembled into its
view of it, the view is that segment's buffer (the updates read it: nothing is copied out), and
the ring sums the flat buffers. Buffers are allocated when written and freed after their last
reader (a flat buffer when its last segment is); live and peak bytes are kept per device. A
gradient with several contributions is summed as they come (``_accumulate``: each added into one
buffer and freed when its producer, a backward or a transfer, ends; in the order of their predicted
ends, so every dispatch makes the same sum), as FlexFlow's kernels accumulate into one gradient
buffer. Every task's real start and end are recorded (seconds from the start of the iteration).

A fused task (``Fused``) runs its members one after the other. A recomputed (duplicated) member
works on the task's own buffers: its operands are assembled into a dict local to the task and its
outputs kept there, and the members after it read them from there. A forward chain of element-wise
operators whose intermediates no other task reads (``ExecPlan.chains``) is evaluated as one
expression instead (``flexrt.kernels.fused``: numexpr on NumPy, one kernel on CuPy), its
intermediates never written; ``chain_runs`` counts those evaluations.

An iteration runs whole (``run``: inputs and labels given at once) or in two parts: ``forward``
runs the plan's forward phase (``ExecPlan.forward_phase``: no label needed) and keeps every
operator's output pieces until the next pass, so that ``read_output`` can gather any activation;
``finish`` then runs the rest (loss, backward, gradient synchronization, update) with the labels.
Both orders run the same tasks on the same data, so they compute the same values. ``weight``,
``set_weight`` read and write one weight's full array through its instances (replicas included).

Entry points: ``Executor``, ``IterationResult``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from flexrt.errors import FlexrtError, ShapeError, StrategyError
from flexrt.kernels.losses import LossType, fuses_with_softmax, loss_forward
from flexrt.kernels.metrics import MetricsAccumulator, MetricsType
from flexrt.kernels.bfloat16 import bfloat16_if, to_bfloat16
from flexrt.kernels.optimizers import (LossScaler, OptimizerKind, adagrad_update, adam_update, master_step, penalized,
                                      rmsprop_update, sgd_update)
from flexrt.kernels.fused import backward_reads
from flexrt.ir.ops.dropout import at_step
from flexrt.kernels.registry import backward_kernel, forward_kernel
from flexrt.runtime.plan import ExecPlan
from flexrt.runtime.reference import loss_gradient
from flexrt.runtime.threads import run_threads
from flexrt.simulator.actions import HOST, Backward, Buf, Forward, Fused, Key, Loss, Move, RingStep, Sum, Update
from flexrt.simulator.memory import Accumulation, ReadyQueue, released

MODES = ("serial", "threads")


class TaskFailed(FlexrtError):
    """A task raised: names the task, its device and the original error."""


@dataclass
class IterationResult:
    loss: float
    metrics: dict
    wall_s: float
    start: np.ndarray            # per planned task, seconds from the iteration's start
    end: np.ndarray
    peak_bytes: dict             # device -> peak bytes live during the iteration (weights included)
    skipped: bool = False        # mixed precision: the gradients overflowed and no weight was updated
    assembly: Optional[np.ndarray] = None   # per planned task, seconds of it spent assembling its operands


@dataclass
class _State:
    remaining: list
    readers: dict
    start: list
    end: list
    arrived: dict = field(default_factory=lambda: defaultdict(int))
    loss: float = 0.0
    losses: dict = field(default_factory=dict)   # loss task -> its share: summed in task order (threads finish in any)
    t0: float = 0.0
    done: list = field(default_factory=list)     # per task: it has run (a pass runs in phases)
    local_remaining: Optional[dict] = None       # SPMD: this rank's predecessor counts, across phases
    wall_s: float = 0.0                          # time spent in the phases run so far
    skipped: bool = False                        # mixed precision: the updates were skipped (overflow)
    assembly: list = field(default_factory=list)  # per task: seconds spent assembling buffers from parts
    summed: Optional[Accumulation] = None        # the gradients summed as their contributions come


def _slices(ranges, box) -> tuple:
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, ranges))


def _shape(b: Buf) -> tuple:
    return tuple(hi - lo for lo, hi in b.ranges)


def _fused_softmax(plan: ExecPlan, loss: LossType) -> frozenset:
    """The scored operators (the model's output; one per micro-batch when pipelined) whose loss fuses
    with them (``fuses_with_softmax``)."""
    scored = {t.action.output.key.name for t in plan.tasks if isinstance(t.action, Loss)}
    return frozenset(a.node for t in plan.tasks if isinstance((a := t.action), Backward) and a.node in scored
                     and fuses_with_softmax(loss, a.attrs, len(a.outputs[0].ranges)))


def _loss_backward(plan: ExecPlan, loss: LossType) -> Callable:
    """The loss tasks' gradient function (``reference.loss_gradient``'s rule for the scored operator)."""
    scored = {t.action.output.key.name for t in plan.tasks if isinstance(t.action, Loss)}
    for t in plan.tasks:
        a = t.action
        if isinstance(a, (Forward, Backward)) and a.node in scored:
            return loss_gradient(loss, a.attrs, len(a.outputs[0].ranges))[0]
    return loss_gradient(loss, None, 0)[0]


class Executor:
    def __init__(self, plan: ExecPlan, backend, update: Callable, loss: LossType | str, metrics=(),
                 mode: str = "serial") -> None:
        """``loss`` and each of ``metrics`` are a ``LossType`` / ``MetricsType`` or its name."""
        if mode not in MODES:
            raise StrategyError(f"unknown executor mode {mode!r}; valid: {', '.join(MODES)}")
        self.plan = plan
        self.backend = backend
        self.xp = backend.xp
        self.update_fn = update          # update_fn(xp, w, g, state) in place
        self.loss = LossType.parse(loss)
        self.metrics = MetricsAccumulator([MetricsType.parse(m) for m in metrics])
        self.mode = mode
        self.mem: dict[int, dict] = defaultdict(dict)
        self.opt_state: dict = {}
        self.live: dict[int, int] = defaultdict(int)
        self.peak: dict[int, int] = defaultdict(int)
        self.labels = None
        self._lock = threading.Lock()
        self._timing = threading.local()   # per worker thread: the running task's assembly seconds so far
        self._ring_members = plan.buffers.ring_members  # ring group -> its member tasks
        self._sum_locks = {bid: threading.Lock() for bid in plan.buffers.accumulated}
        self.fused_softmax = _fused_softmax(plan, self.loss)
        self.loss_backward = _loss_backward(plan, self.loss)
        self._pass = None                 # the _State of a forward pass whose rest has not run
        self._held: frozenset = frozenset()  # buffers kept for reading until the next pass
        self._has_pass = False            # a forward pass has run since the weights were placed
        self._views: dict = {}            # a bucket segment's buffer -> [live views, bytes] of its flat buffer
        self.chain_runs = 0               # fused element-wise chains evaluated as one expression
        # mixed precision: float16 weights train through float32 masters with the loss scaled
        half = any(np.dtype(b.dtype).itemsize == 2 for b in plan.weight_instances)
        self.scaler: Optional[LossScaler] = LossScaler() if half else None
        # bfloat16 (``flexrt.kernels.bfloat16``): every output and gradient rounded, float32 masters
        self.bfloat16 = plan.buffers.bfloat16_weights
        self._updates = [t.kind.value == "update" for t in plan.tasks]
        self._not_updates = [not u for u in self._updates]
        self.penalties: dict = {}         # weight name -> ("l1" | "l2", factor): added to its gradient
        self.step = -1                    # the training step running (dropout draws a mask per step)
        self.training = True              # False during an inference forward (dropout passes through)

    # ---- memory ------------------------------------------------------------------------------
    def _alloc(self, bid, arr) -> None:
        key, dev = bid
        with self._lock:
            self._drop(bid)
            self.mem[dev][key] = arr
            self.live[dev] += arr.nbytes
            if self.live[dev] > self.peak[dev]:
                self.peak[dev] = self.live[dev]

    def _alloc_views(self, views: list, dev: int, nbytes: int) -> None:
        """Register ``views`` ((buffer id, view) on ``dev``) of one flat buffer of ``nbytes``: the flat
        buffer counts once, until its last view is freed."""
        record = [len(views), nbytes]
        with self._lock:
            for bid, v in views:
                self._drop(bid)
                self.mem[dev][bid[0]] = v
                self._views[bid] = record
            self.live[dev] += nbytes
            if self.live[dev] > self.peak[dev]:
                self.peak[dev] = self.live[dev]

    def _drop(self, bid) -> None:
        """Forget buffer ``bid`` and its bytes (the caller holds the lock)."""
        key, dev = bid
        arr = self.mem[dev].pop(key, None)
        if arr is None:
            return
        record = self._views.pop(bid, None)
        if record is None:
            self.live[dev] -= arr.nbytes
            return
        record[0] -= 1
        if record[0] == 0:
            self.live[dev] -= record[1]

    def _free(self, bid) -> None:
        with self._lock:
            self._drop(bid)

    def get(self, bid):
        key, dev = self.plan.canonical(bid)
        try:
            return self.mem[dev][key]
        except KeyError:
            raise StrategyError(f"buffer {key} on device {dev} is read before it is written (or after it "
                                f"was freed)") from None

    def view(self, bid, box):
        cid = self.plan.canonical(bid)
        return self.get(cid)[_slices(self.plan.decl[cid].ranges, box)]

    # ---- weights -------------------------------------------------------------------------------
    def load_weights(self, full: dict) -> None:
        """Place every weight instance, cut from the full arrays (name -> array)."""
        for b in self.plan.weight_instances:
            name = b.key.name
            if name not in full:
                raise StrategyError(f"no initial value for weight '{name}'")
            arr = np.asarray(full[name])
            with self.backend.on(b.device):
                piece = arr[_slices(((0, 0),) * arr.ndim, b.ranges)].astype(b.dtype)
                self._alloc((b.key, b.device), self.backend.upload(self._rounded(piece, np), b.device))
            self.opt_state[(b.key, b.device)] = {}

    def weights(self) -> dict:
        """The full weight arrays, joined from the instances (replicas agree: one is read)."""
        out: dict = {}
        for b in self.plan.weight_instances:
            name = b.key.name
            shape = self.plan.weight_shapes[name]
            if name not in out:
                out[name] = np.empty(shape.dims, dtype=b.dtype)
            out[name][_slices(((0, 0),) * len(shape.dims), b.ranges)] = self.backend.to_host(self.get((b.key, b.device)))
        return out

    def weight_replicas(self) -> dict:
        """Every instance's value: (weight, ranges, device) -> array (to check that replicas agree)."""
        return {(b.key.name, b.ranges, b.device): self.backend.to_host(self.get((b.key, b.device)))
                for b in self.plan.weight_instances}

    # ---- actions -------------------------------------------------------------------------------
    def _source(self, bid, box, local: Optional[dict]):
        """The ``box`` of buffer ``bid``: from a fused task's ``local`` buffers when it is one of
        them, else from device memory."""
        if local is not None and bid in local:
            return local[bid][_slices(self.plan.decl[bid].ranges, box)]
        return self.view(bid, box)

    def _assemble(self, b: Buf, local: Optional[dict] = None, keep: bool = False, out=None) -> None:
        """Assemble ``b`` from its parts into device memory (an alias is its source already). A fused
        task passes its ``local`` buffers (parts whose source is there read it) and ``keep`` to
        hold ``b`` there instead (a recomputed member's operand); ``out`` is the (zeroed) array to
        assemble into, registered by the caller (a bucket's segment view)."""
        bid = (b.key, b.device)
        parts = self.plan.buffers.assembly_parts(bid)
        if bid in self.plan.alias:
            if keep:
                (p,) = parts
                local[bid] = self._source((p.src, p.device), p.box, local)
            return
        t0 = time.perf_counter()
        self._assemble_parts(b, bid, parts, local, keep, out)
        tl = self._timing   # (an SPMD ring member assembles outside _execute: nothing set yet)
        tl.assembly = getattr(tl, "assembly", 0.0) + (time.perf_counter() - t0)

    def _assemble_parts(self, b: Buf, bid, parts, local: Optional[dict], keep: bool, out) -> None:
        summed = bid in self.plan.buffers.accumulated   # its contributions are in it already
        if summed:
            arr = self.get(bid)
        elif out is None:
            arr = self.backend.full(_shape(b), b.dtype, b.fill, b.device)
        else:
            arr = out
            if b.fill != 0.0:
                arr[...] = b.fill
        for p in parts:
            src = self._source((p.src, p.device), p.box, local)
            if p.device == HOST:
                src = self.backend.upload(src, b.device)
            self.backend.put(arr[_slices(b.ranges, p.box)], src, p.add)
        if keep:
            local[bid] = arr
        elif out is None and not summed:
            self._alloc(bid, arr)

    def _accumulate(self, index: int, st: _State) -> None:
        """Add the gradient contributions task ``index`` wrote to their sums, each freed once added
        (``flexrt.simulator.memory.Accumulation``: in the order of their predicted ends, whatever the
        dispatch; a transfer and a device's task may add to one sum, so each sum has its lock)."""
        t0 = time.perf_counter()
        for src in self.plan.buffers.contributes[index]:
            bid = self.plan.buffers.contribution_of[src]
            with self._sum_locks[bid]:
                now = st.summed.produced(src)
                if now is None:
                    continue
                _, new, adds = now
                b = self.plan.decl[bid]
                with self.backend.on(b.device):
                    if new:
                        self._alloc(bid, self.backend.full(_shape(b), b.dtype, b.fill, b.device))
                    arr = self.get(bid)
                    for c, p in adds:
                        self.backend.put(arr[_slices(b.ranges, p.box)], self.view(c, p.box), True)
                        self._free(c)
        self._timing.assembly = getattr(self._timing, "assembly", 0.0) + (time.perf_counter() - t0)

    def _forward(self, a: Forward, local: Optional[dict] = None, keep: bool = False) -> None:
        """Run one forward piece; inside a fused task with ``local`` buffers, and with ``keep`` (a
        recomputed member) on and into them only."""
        for b in a.operands:
            self._assemble(b, local, keep)
        get = (lambda bid: local[bid]) if keep else self.get
        args = [self.xp.zeros_like(get((b.key, b.device))) if i in a.zeroed else get((b.key, b.device))
                for i, b in enumerate(a.operands)]
        results = forward_kernel(a.attrs.op_type)(self.xp, at_step(a.attrs, self.step, self.training), args)
        for b, r in zip(a.outputs, results):
            if tuple(r.shape) != _shape(b):
                raise ShapeError(f"{a.attrs.op_type.value} '{a.node}': piece computed shape {list(r.shape)}, "
                                 f"expected {list(_shape(b))}")
            r = self._rounded(r)
            if keep:
                local[(b.key, b.device)] = r
            else:
                self._alloc((b.key, b.device), r)

    def _fused(self, a: Fused, index: int) -> None:
        """Run a fused task's members in order (a backward group's gradients flow between them
        through device memory), or its element-wise chain as one expression."""
        if isinstance(a.members[0], Backward):
            for m in a.members:
                self._backward(m)
            return
        local: dict = {}
        chain = self.plan.chains.get(index)
        if chain is None or not self._runs_chain(chain, self._held):
            for m, r in zip(a.members, a.recomputed):
                self._forward(m, local, r)
            return
        args = []
        for k, j in chain.inputs:
            b = a.members[k].operands[j]
            self._assemble(b, local, a.recomputed[k])
            args.append(local[(b.key, b.device)] if a.recomputed[k] else self.get((b.key, b.device)))
        out = a.members[-1].outputs[0]
        self._alloc((out.key, out.device), self._rounded(chain.chain.evaluate(self.xp, args)))
        with self._lock:
            self.chain_runs += 1

    def _runs_chain(self, chain, held: frozenset) -> bool:
        """Whether a fused chain runs as one expression: not in a forward pass that keeps (``held``)
        its intermediates (compute them), nor where NumPy runs its kernels faster (member by member)."""
        return not chain.internal & held and chain.chain.one_pass_pays(self.xp)

    def unmaterialized(self) -> frozenset:
        """The buffers a whole iteration (``run``) never allocates: the intermediates of the fused
        chains it evaluates as one expression (what the memory replay leaves out)."""
        return frozenset(b for c in self.plan.chains.values() if self._runs_chain(c, frozenset()) for b in c.internal)

    def _backward(self, a: Backward) -> None:
        for b in a.grad_outputs:
            self._assemble(b)
        read_ops, read_outs = backward_reads(a.attrs.op_type, len(a.operands), len(a.outputs))
        ops = [self._backward_arg(b, i in read_ops, i in a.zeroed) for i, b in enumerate(a.operands)]
        outs = [self._backward_arg(b, k in read_outs, False) for k, b in enumerate(a.outputs)]
        gouts = [self.get((b.key, b.device)) for b in a.grad_outputs]
        if a.node in self.fused_softmax:  # the loss handed back d loss / d logits already
            grads = [gouts[0].copy()]
        else:
            grads = backward_kernel(a.attrs.op_type)(self.xp, at_step(a.attrs, self.step), ops, outs, gouts)
        for i, b in enumerate(a.grad_operands):
            if b is None:
                continue
            g = grads[i]
            if g is None or i in a.zeroed:
                g = self.xp.zeros_like(ops[i])
            self._alloc((b.key, b.device), self._rounded(g))

    def _rounded(self, arr, xp=None):
        """``arr`` as bfloat16 values where the model computes in bfloat16 (floating arrays only)."""
        return bfloat16_if(self.bfloat16, xp or self.xp, arr)

    def _backward_arg(self, b: Buf, read: bool, zeroed: bool):
        """An operand or output as a backward kernel takes it: its value where the kernel reads it
        (zeros where the piece zeroes it), else a stand-in of its shape and dtype holding no memory
        (the plan does not keep what no backward reads)."""
        if read:
            arr = self.get((b.key, b.device))
            return self.xp.zeros_like(arr) if zeroed else arr
        return self.xp.broadcast_to(self.xp.zeros((), dtype=b.dtype), _shape(b))

    def _move(self, a: Move) -> None:
        src = self.view((a.src, a.src_device), a.dst.ranges)
        self._alloc((a.dst.key, a.dst.device), self.backend.copy_to(src, a.dst.device, src_device=a.src_device))

    def _update(self, a: Update) -> None:
        if a.gather_grad:
            self._assemble(a.grad)
        bid = (a.weight.key, a.weight.device)
        state = self.opt_state.setdefault(bid, {})
        before = sum(int(v.nbytes) for v in state.values() if hasattr(v, "nbytes"))
        w, g = self.get(bid), self.get((a.grad.key, a.grad.device))
        penalty = self.penalties.get(a.weight.key.name)
        bf16 = a.weight.key.name in self.bfloat16
        if w.dtype.itemsize == 2 or bf16:
            master_step(self.update_fn, self.xp, w, g, state, 1.0 / self.scaler.scale if self.scaler else 1.0,
                        penalty, to_bfloat16 if bf16 else None)
        else:
            self.update_fn(self.xp, w, penalized(self.xp, g, w, penalty), state)
        after = sum(int(v.nbytes) for v in state.values() if hasattr(v, "nbytes"))
        if after != before:
            with self._lock:
                self.live[a.weight.device] += after - before
                self.peak[a.weight.device] = max(self.peak[a.weight.device], self.live[a.weight.device])

    def _loss(self, a: Loss, st: _State, index: int) -> None:
        self._assemble(a.output)
        out = self.get((a.output.key, a.output.device))
        (lo, hi), = a.rows
        labels = self.backend.upload(self.labels[lo:hi], a.output.device)
        share = out.size / a.full_elements
        value = loss_forward(self.xp, self.loss, out, labels) * share  # a device scalar: no host sync here
        grad = self.loss_backward(self.xp, self.loss, out, labels)
        if self.scaler is None:
            grad = grad * out.dtype.type(share)
        else:   # the scale (2^16 by default) is past float16's range: scaled in float32, then rounded
            grad = (grad.astype("float32") * np.float32(share * self.scaler.scale)).astype(out.dtype)
        self._alloc((a.grad.key, a.grad.device), self._rounded(grad))
        with self._lock:
            st.losses[index] = value
            if self.metrics.names:
                self.metrics.update(self.xp, out, labels)

    def _ring(self, group) -> None:
        """The collective: assemble every member's buffers, then ring reduce-scatter and all-gather."""
        n = group.num_members
        self._ring_sum([self._member_flat(group, i) for i in range(n)], [group.device(i) for i in range(n)])

    def _member_flat(self, group, i: int):
        """Member ``i``'s buffers of a ring, assembled, as one flat array the ring sums in place: its
        one buffer, or (a bucket) a flat buffer whose views are its segments' buffers."""
        bufs, dev = group.member_buffers(i), group.device(i)
        with self.backend.on(dev):
            if group.segments == 1:
                b = bufs[0]
                self._assemble(b)
                return self.get((b.key, b.device)).reshape(-1)
            sizes = [math.prod(_shape(b)) for b in bufs]
            flat = self.backend.full((sum(sizes),), bufs[0].dtype, 0.0, dev)
            views, off = [], 0
            for b, size in zip(bufs, sizes):
                v = flat[off:off + size].reshape(_shape(b))
                off += size
                self._assemble(b, out=v)
                views.append(((b.key, b.device), v))
            self._alloc_views(views, dev, flat.nbytes)
            return flat

    def _ring_sum(self, flat: list, devs: list) -> None:
        """Ring reduce-scatter then all-gather of the members' flat arrays (on ``devs``), in place."""
        n = len(flat)
        size = flat[0].size
        cuts = [size * c // n for c in range(n + 1)]
        chunk = lambda c: slice(cuts[c], cuts[c + 1])  # noqa: E731
        for phase in ("reduce-scatter", "all-gather"):  # after reduce-scatter member i holds chunk i+1 summed
            for s in range(n - 1):
                sends = [((i + 1) % n, (i - s) % n if phase == "reduce-scatter" else (i + 1 - s) % n)
                         for i in range(n)]
                data = [self.backend.copy_to(flat[i][chunk(c)], devs[j], src_device=devs[i])
                        for i, (j, c) in enumerate(sends)]
                for (j, c), d in zip(sends, data):
                    with self.backend.on(devs[j]):
                        if phase == "reduce-scatter":
                            flat[j][chunk(c)] += d
                        else:
                            flat[j][chunk(c)] = d

    def _execute(self, task, st: _State) -> bool:
        """Run one task (recording the time it spends assembling buffers from their parts); False when
        it is a collective member whose group is not complete yet."""
        self._timing.assembly = 0.0
        try:
            complete = self._execute_action(task, st)
            if complete and task.index in self.plan.buffers.contributes:
                self._accumulate(task.index, st)
            return complete
        finally:
            st.assembly[task.index] += self._timing.assembly

    def _execute_action(self, task, st: _State) -> bool:
        a = task.action
        if isinstance(a, RingStep):
            with self._lock:
                st.arrived[a.group.id] += 1
                last = st.arrived[a.group.id] == len(self._ring_members[a.group.id])   # every channel's steps
            if not last:
                return False
            self._ring(a.group)
            return True
        if a is None:  # a later hop of a transfer: it only holds its link
            return True
        if isinstance(a, Move):  # a transfer orders itself between its two devices (copy_to)
            self._move(a)
            return True
        # mixed precision: an overflow is expected now and then (the step is skipped), not warned about
        quiet = np.errstate(over="ignore", invalid="ignore") if self.scaler is not None else contextlib.nullcontext()
        with self.backend.on(task.device), quiet:
            if isinstance(a, Forward):
                self._forward(a)
            elif isinstance(a, Backward):
                self._backward(a)
            elif isinstance(a, Fused):
                self._fused(a, task.index)
            elif isinstance(a, Sum):
                self._assemble(a.dst)
            elif isinstance(a, Update):
                self._update(a)
            elif isinstance(a, Loss):
                self._loss(a, st, task.index)
        return True

    def _release(self, task, st: _State) -> None:
        for bid in released(task.reads, task.writes, st.readers, self.plan.buffers.kept, self._held, self._lock):
            self._free(bid)

    def _members(self, task) -> list:
        a = task.action
        if isinstance(a, RingStep):
            return self._ring_members[a.group.id]
        return [task.index]

    # ---- one iteration ---------------------------------------------------------------------------
    def run(self, inputs: dict, labels) -> IterationResult:
        """Execute every task with the batch ``inputs`` (input name -> array) and ``labels``."""
        st = self._begin(inputs, hold=False)
        self._set_labels(labels)
        self._scaled_phases(st, None)
        return self._result(st)

    def forward(self, inputs: dict, training: bool = True) -> None:
        """Run the forward phase on ``inputs`` (no labels needed), keeping every operator's output
        pieces for ``read_output`` until the next pass; ``finish`` runs the rest of the iteration.
        ``training=False``: an inference forward (dropout passes through; the training step does not
        advance, so training draws the same masks with or without inference passes between steps);
        ``finish`` refuses to complete it."""
        st = self._begin(inputs, hold=True, training=training)
        self.training = training
        try:
            self._phase(st, self.plan.forward_phase)
        finally:
            self.training = True
        self._pass = st if training else None

    def finish(self, labels) -> IterationResult:
        """The rest of the iteration begun by ``forward`` (loss, backward, synchronization, update)."""
        st = self._pass
        if st is None:
            raise StrategyError("finish: no training forward pass to complete; run forward(inputs) first (an "
                                "inference forward, training=False, has no backward)")
        self._set_labels(labels)
        self._pass = None
        st.t0 = time.perf_counter() - st.wall_s  # the time between the two calls is not the iteration's
        self._scaled_phases(st, [not f for f in self.plan.forward_phase])
        return self._result(st)

    def _scaled_phases(self, st: _State, phase) -> None:
        """Run ``phase`` (None: every task). With a loss scaler, the updates run last and only if
        no gradient they read overflowed anywhere (``_agree``); else they are skipped, every weight
        keeps its value, and the scale backs off."""
        if self.scaler is None:
            self._phase(st, phase)
            return
        if phase is None:
            before, updates = self._not_updates, self._updates
        else:
            before = [m and not u for m, u in zip(phase, self._updates)]
            updates = [m and u for m, u in zip(phase, self._updates)]
        self._phase(st, before)
        found = self._agree(self._overflowed())
        if found:
            for i, u in enumerate(updates):
                if u and not st.done[i]:
                    self._release(self.plan.tasks[i], st)
                    st.done[i] = True
        else:
            self._phase(st, updates)
        self.scaler.update(found)
        st.skipped = found

    def _overflowed(self) -> bool:
        """Whether a floating buffer live on this process's devices (after the backward: the
        gradients the updates read) holds an inf or a NaN."""
        xp = self.xp
        for dev, bufs in self.mem.items():
            for key, arr in bufs.items():
                if (key, dev) not in self.plan.persistent and arr.dtype.kind == "f" and \
                        not bool(xp.isfinite(arr).all()):
                    return True
        return False

    def _agree(self, found: bool) -> bool:
        """Every process's verdict on overflow combined (one process: its own)."""
        return found

    def _begin(self, inputs: dict, hold: bool, training: bool = True) -> _State:
        plan = self.plan
        for name, b in plan.inputs.items():
            if name not in inputs:
                raise StrategyError(f"no batch for input '{name}'; inputs given: {', '.join(inputs) or 'none'}")
            arr = np.asarray(inputs[name])
            want = tuple(hi for _, hi in b.ranges)
            if arr.shape != want:
                raise ShapeError(f"input '{name}': batch of shape {list(arr.shape)}, expected {list(want)}")
        self.discard()
        self.step += 1 if training else 0
        for name in plan.inputs:
            self.mem[HOST][Key.input(name)] = self._rounded(np.asarray(inputs[name]), np)
        self._held = plan.forward_outputs if hold else frozenset()
        self._has_pass = hold
        n = plan.num_tasks
        st = _State(plan.num_preds.tolist(), dict(plan.readers), [0.0] * n, [0.0] * n, done=[False] * n,
                    assembly=[0.0] * n, summed=Accumulation(plan.buffers))
        for dev in list(self.peak):
            self.peak[dev] = self.live[dev]
        return st

    def _set_labels(self, labels) -> None:
        self.labels = None if labels is None else np.asarray(labels)
        if self.labels is None and any(t.kind.value == "loss" for t in self.plan.tasks):
            raise StrategyError("training needs labels for the loss")

    def _phase(self, st: _State, phase) -> None:
        """Run the tasks of ``phase`` (per task: in it; None: every task) whose turn has come."""
        st.t0 = time.perf_counter() - st.wall_s
        if self.mode == "serial":
            self._run_serial(st, phase)
        else:
            self._run_threads(st, phase)
        self.backend.synchronize()
        st.wall_s = time.perf_counter() - st.t0

    def _result(self, st: _State) -> IterationResult:
        st.loss = float(sum(st.losses[i] for i in sorted(st.losses))) if st.losses else 0.0
        return IterationResult(st.loss, self.metrics.result(), st.wall_s, np.array(st.start), np.array(st.end),
                               dict(self.peak), st.skipped, np.array(st.assembly))

    def discard(self) -> None:
        """Drop what a pass left (a forward pass whose rest never ran, outputs kept for reading):
        every buffer but the weights and the host batch."""
        self._pass = None
        self._held = frozenset()
        self._has_pass = False
        for dev, bufs in list(self.mem.items()):
            for key in [k for k in bufs if (k, dev) not in self.plan.persistent]:
                self._free((key, dev))

    # ---- reading and writing whole tensors -----------------------------------------------------
    def read_output(self, node: str, k: int = 0) -> np.ndarray:
        """The full value of output ``k`` of operator ``node`` from the last forward pass, gathered
        from its pieces (replica 0 of each region; partial sums added)."""
        pieces = self.plan.output_pieces.get((node, k))
        if pieces is None:
            ops = sorted({n for n, _ in self.plan.output_pieces})
            raise StrategyError(f"operator '{node}' has no output {k} in this strategy's task graph; operators: "
                                f"{', '.join(ops)}")
        if not self._has_pass:
            raise StrategyError(f"output {k} of '{node}' is read before a forward pass computed it (since the "
                                f"last compile or weight placement); run a forward pass first")
        return self._join([(b.ranges, add) for b, add in pieces], self._collect([b for b, _ in pieces]),
                          pieces.dims, np.dtype(pieces.pieces[0][0].dtype))

    def weight(self, name: str) -> np.ndarray:
        """One weight's full array, joined from its instances."""
        bufs = [b for b in self.plan.weight_instances if b.key.name == name]
        if not bufs:
            raise StrategyError(f"no weight '{name}' in this strategy; weights: "
                                f"{', '.join(sorted(self.plan.weight_shapes)) or 'none'}")
        return self._join([(b.ranges, False) for b in bufs], self._collect(bufs),
                          self.plan.weight_shapes[name].dims, np.dtype(bufs[0].dtype))

    def set_weight(self, name: str, full) -> None:
        """Write one weight's full array into every instance (this process's) in place; the
        optimizer's state is kept."""
        if name not in self.plan.weight_shapes:
            raise StrategyError(f"no weight '{name}' in this strategy; weights: "
                                f"{', '.join(sorted(self.plan.weight_shapes)) or 'none'}")
        arr = np.asarray(full)
        for b in self._local_weight_instances():
            if b.key.name != name:
                continue
            piece = np.ascontiguousarray(arr[_slices(((0, 0),) * arr.ndim, b.ranges)], dtype=b.dtype)
            with self.backend.on(b.device):
                self.backend.put(self.get((b.key, b.device)), self.backend.upload(piece, b.device), False)
        self.backend.synchronize()

    def _local_weight_instances(self) -> list:
        return self.plan.weight_instances

    def _collect(self, bufs) -> list:
        """The host copy of each buffer (every process gets every one: see the SPMD executor)."""
        return [np.asarray(self.backend.to_host(self.get((b.key, b.device)))) for b in bufs]

    @staticmethod
    def _join(boxes, arrays, dims, dtype) -> np.ndarray:
        out = np.zeros(dims, dtype=dtype)
        for (ranges, add), arr in zip(boxes, arrays):
            sl = _slices(((0, 0),) * len(dims), ranges)
            if add:
                out[sl] += arr
            else:
                out[sl] = arr
        return out

    def _run_serial(self, st: _State, phase=None) -> None:
        plan = self.plan
        mine = (lambda i: True) if phase is None else phase.__getitem__
        queue = ReadyQueue(plan.succ, st.remaining, [i for i in range(plan.num_tasks)
                                                     if st.remaining[i] == 0 and not st.done[i] and mine(i)], mine)
        clock = time.perf_counter
        done, want = 0, sum(1 for i in range(plan.num_tasks) if mine(i))
        while queue:
            i = queue.pop()
            task = plan.tasks[i]
            t = clock()
            try:
                complete = self._execute(task, st)
            except FlexrtError as e:
                raise TaskFailed(f"task '{task.name}' (device {task.device}) failed: {e}") from e
            except Exception as e:  # noqa: BLE001  (a kernel's own error: name the task)
                raise TaskFailed(f"task '{task.name}' (device {task.device}) failed: "
                                 f"{type(e).__name__}: {e}") from e
            st.start[i] = t - st.t0
            if not complete:
                continue
            end = clock() - st.t0
            for m in self._members(task):
                st.end[m] = end
                if m != i:
                    st.start[m] = st.start[i]
                self._release(plan.tasks[m], st)
                st.done[m] = True
                done += 1
                queue.finish(m)
        if done != want:
            raise StrategyError(f"the task graph did not run to the end: {want - done} tasks never "
                                f"became ready (a dependency cycle?)")

    def _run_threads(self, st: _State, phase=None) -> None:
        failed = run_threads(self, st, phase)
        if failed is not None:
            task, e = failed
            raise TaskFailed(f"task '{task.name}' (device {task.device}) failed: {type(e).__name__}: {e}") from e


# The optimizers the runtime runs (SGD's momentum is a parameter of SGD here).
RUNTIME_OPTIMIZERS = (OptimizerKind.SGD, OptimizerKind.ADAM, OptimizerKind.RMSPROP, OptimizerKind.ADAGRAD)


def optimizer_step(kind: OptimizerKind | str, **params) -> Callable:
    """``update(xp, w, g, state)`` for optimizer ``kind`` (SGD, ADAM, RMSPROP or ADAGRAD, or its
    name "sgd" / "adam" / "rmsprop" / "adagrad") with its parameters."""
    kind = OptimizerKind.parse(kind, RUNTIME_OPTIMIZERS, StrategyError)
    if kind is OptimizerKind.SGD:
        params = {"lr": 0.01, **params}  # FlexFlow's SGDOptimizer default
        return lambda xp, w, g, state: sgd_update(xp, w, g, state, **params)
    if kind is OptimizerKind.RMSPROP:
        return lambda xp, w, g, state: rmsprop_update(xp, w, g, state, **params)
    stepped = adam_update if kind is OptimizerKind.ADAM else adagrad_update

    def counted(xp, w, g, state):   # Adam's bias correction and Adagrad's lr_decay count the steps
        state["step"] = state.get("step", 0) + 1
        stepped(xp, w, g, state, step=state["step"], **params)
    return counted


def relative_error(a, b) -> float:
    """max |a - b| / max(|b|, tiny): how far ``a`` is from the reference ``b``."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300)) if b.size else 0.0


