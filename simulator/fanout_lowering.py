"""Operand edges that read one producer output: each remote box crosses once.

An operator output read by several operands (a residual's two readers, attention's query, key and
value, the tensor one pipeline stage hands the next) reaches a device once, whatever the number of
operands there that read the same box of it: a task-based runtime copies a region's instance to a
memory once for all the tasks there that read it. Going back, each consumer task sends its
gradient of the box when its backward is done, as a Legion task's reduction goes back on its own:
the operands of one task that read the box (attention's query, key and value) have their gradients
summed first (a REDUCE task) and cross once; different tasks' cross separately, so one that
finishes early (a residual's add, whose backward runs before the attention's) overlaps the rest.
(Summing every task's gradient before sending, as a pipeline framework's autograd does, was
measured: BERT-Large at sequence 128 on 96 summit GPUs, 16 stages x 16 micro-batches under 2BW,
112.9 ms, against 105.5 ms so and 107.6 ms with every operand's transfers apart.)

The operand edges of one producer output (``siblings``) are lowered together when the last of them
in graph order is; a move that only one edge needs is lowered as before, under that edge's owner,
and a shared transfer belongs to the first edge that reads it. ``Lowering.update`` re-lowers
siblings together. A recomputed producer's edges are lowered one by one: the recomputation's
trigger (``recompute_lowering``) classifies each gradient entering a segment by the consumer that
sends it, which a sum over consumers inside and outside the segment would blur.
"""

from __future__ import annotations

from collections import defaultdict

from flexrt.ir.op_type import OpType
from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.actions import Buf, Key, Sum
from flexrt.simulator.task_graph import Category
from flexrt.strategy.reshard import ReshardPlan


def fanout_siblings(wiring) -> dict[tuple[str, int], tuple[tuple[str, int], ...]]:
    """Operand edge (consumer, operand) -> every operand edge reading the same producer output, in
    graph order, for outputs of compute operators read by more than one operand."""
    readers: dict[tuple[str, int], list] = defaultdict(list)
    for c in wiring.ops:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)]
            if p.op_type not in (OpType.WEIGHT, OpType.INPUT):
                readers[(p.name, p.index)].append((c, i))
    return {e: tuple(edges) for edges in readers.values() if len(edges) > 1 for e in edges}


def lower_fanout(low, owner, ends, plan, dtype, siblings) -> None:
    """Hold edge ``ends``'s moves (``plan``) until every one of ``siblings`` has been seen, then
    lower them all: shared boxes once, the others edge by edge (``Lowering._moves``)."""
    key = (ends.pname, ends.k)
    pending = low.fanout_pending.setdefault(key, [])
    pending.append((owner, ends, plan))
    if len(pending) < len(siblings):
        return
    del low.fanout_pending[key]
    readers: dict[tuple, list] = defaultdict(list)   # (q, its device, consumer device, box) -> [(edge, move)]
    for k, (_, _, pl) in enumerate(pending):
        _, qdevs, _, pdevs, _ = pl.columns
        for m in [m for m, (a, b) in enumerate(zip(qdevs, pdevs)) if a != b]:
            q, qdev, _, pdev, box = pl.moves[m]
            readers[(q, qdev, pdev, box)].append((k, m))
    shared = [users for users in readers.values() if len(users) > 1]
    taken: list[set] = [set() for _ in pending]
    for users in shared:
        _shared_move(low, pending, users, dtype)
        for k, m in users:
            taken[k].add(m)
    for (o, e, pl), gone in zip(pending, taken):
        if gone:
            pl = ReshardPlan(tuple(mv for m, mv in enumerate(pl.moves) if m not in gone), ())
        if pl.moves:
            low._moves(o, e, pl, dtype)


def _shared_move(low, pending, users, dtype) -> None:
    """One producer piece's box sent once to one device for every (edge, move) in ``users``; each
    consumer task's gradient of it sent back once."""
    owner, first, plan = pending[users[0][0]]
    q, qdev, _, pdev, box = plan.moves[users[0][1]]
    label = f"{first.pname}.out{first.k}"
    hops, xkey = low._send(owner, first.out(q), qdev, pdev, box, dtype, Category.ACTIVATION,
                           f"xfer {label} [{q}]->@{pdev}", [first.pfwd[q]])
    grads: dict[int, list] = defaultdict(list)       # consumer backward task -> its (edge, piece)s
    for k, m in users:
        e, p = pending[k][1], pending[k][2].moves[m][2]
        low._edges(owner, hops, [e.cfwd[p]])
        low._part(owner, e.opd(p), pdev, xkey, pdev, box)
        if e.grad:
            grads[e.cbwd[p]].append((e, p))
        else:       # no gradient (an integer operand): its backward still orders before the producer's
            low._edge(owner, e.cbwd[p], first.pbwd[q])
    for task, parts in grads.items():
        if len(parts) == 1:
            e, p = parts[0]
            src, before = e.gin(p), [task]
        else:      # one task's operands that read the box: their gradients summed before they cross
            src = Key.grad_sum(low._new_group())
            for e, p in parts:
                low._part(owner, src, pdev, e.gin(p), pdev, box, add=True)
            shape = TensorShape(tuple(hi - lo for lo, hi in box), dtype)
            action = Sum(Buf(src, pdev, tuple(box), dtype.numpy_name)) if low.detail else None
            before = [low._reduce(owner, pdev, shape, len(parts), f"grad sum {label} [{q}] @{pdev}", [task],
                                  action=action)]
        back, gkey = low._send(owner, src, pdev, qdev, box, dtype, Category.ACTIVATION,
                               f"grad {label} @{pdev}->[{q}]", before)
        low._edges(owner, back, [first.pbwd[q]])
        low._part(owner, first.gout(q), qdev, gkey, qdev, box, add=True)
