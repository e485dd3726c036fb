"""Reductions of partial sums on an operand edge (``ReshardPlan.reductions``).

A producer cut into partial sums (a Linear cut along its input features, an Add cut by operand)
feeding a consumer that needs the whole value:

- partial sums on a device group whose members all need the sum (the consumer's pieces are
  replicas on the same devices) become a ring AllReduce forward, and one of the consumer's
  gradients backward;
- otherwise the partial pieces are sent to the first consumer piece's device and summed there by a
  REDUCE task, the sum sent to each other consumer piece; going back, the consumers' gradients are
  summed there (one more REDUCE task when several) and sent to every partial piece, whose
  gradient is that sum.

Entry point: ``lower_reduction`` (called by ``Lowering._lower_edge`` per reduction of a plan).
"""

from __future__ import annotations

from flexrt.ir.tensor_shape import TensorShape
from flexrt.simulator.actions import Buf, Key, Sum
from flexrt.simulator.task_graph import Category


def _ring_of(low, red: tuple, cdev: list):
    """(order, producer piece by device, consumer piece by device) when the plan's reduction ``red``
    (box, partials, consumer pieces) is a ring AllReduce (partial sums on a device group whose
    members all need the sum), else None; asked once per plan (twin layouts share theirs)."""
    def classify():
        _, partials, consumers = red
        pdevs = [d for _, d in partials]
        if len(set(pdevs)) == len(pdevs) and sorted(pdevs) == sorted(cdev[p] for p in consumers) \
                and len(pdevs) > 1:
            return sorted(pdevs), {d: q for q, d in partials}, {cdev[p]: p for p in consumers}
        return None
    return low.derived("ring", (red, cdev), classify)

def lower_reduction(low, owner, e, red: tuple, dtype, cdev) -> None:
    """Lower the plan's reduction ``red`` (box, partials, consumer pieces) of edge ``e`` (module doc)."""
    box, partials, consumers = red
    np_dtype = dtype.numpy_name
    ring = _ring_of(low, red, cdev)
    if ring is not None:
        order, pidx, cidx = ring
        fwd_done, fkey = low._allreduce(owner, order, [[e.pfwd[pidx[d]]] for d in order], box, dtype,
                                         Category.ACTIVATION, f"allreduce {e.label}")
        bwd_done, bkey = low._allreduce(owner, order, [[e.cbwd[cidx[d]]] for d in order], box, dtype,
                                         Category.ACTIVATION, f"allreduce grad {e.label}") if e.grad else \
            ([[e.cbwd[cidx[d]]] for d in order], None)   # an integer sum (positions): no gradient, the order kept
        for d, fdone, bdone in zip(order, fwd_done, bwd_done):
            low._edges(owner, fdone, [e.cfwd[cidx[d]]])
            low._edges(owner, bdone, [e.pbwd[pidx[d]]])
            if not low.detail:     # the parts are what the runtime assembles
                continue
            low._part(owner, fkey, d, e.out(pidx[d]), d, box)
            low._part(owner, e.opd(cidx[d]), d, fkey, d, box)
            if e.grad:
                low._part(owner, bkey, d, e.gin(cidx[d]), d, box)
                low._part(owner, e.gout(pidx[d]), d, bkey, d, box, add=True)
        return
    shape = TensorShape(tuple(hi - lo for lo, hi in box), dtype)
    target = cdev[consumers[0]]
    gid = low._new_group()
    total_key = Key.sum(gid)
    arrivals = []
    for q, d in partials:
        if d == target:
            arrivals.append(e.pfwd[q])
            low._part(owner, total_key, target, e.out(q), d, box, add=True)
        else:
            hops, xkey = low._send(owner, e.out(q), d, target, box, dtype, Category.ACTIVATION,
                                    f"xfer {e.label} [{q}]->sum@{target}", [e.pfwd[q]])
            arrivals += hops
            low._part(owner, total_key, target, xkey, target, box, add=True)
    total = low._reduce(owner, target, shape, len(partials), f"sum {e.label} @{target}", arrivals,
                         action=Sum(Buf(total_key, target, tuple(box), np_dtype)))
    grads, grad_keys = [], []
    for p in consumers:
        if cdev[p] == target:
            low._edge(owner, total, e.cfwd[p])
            low._part(owner, e.opd(p), target, total_key, target, box)
            grads.append(e.cbwd[p])
            grad_keys.append(e.gin(p))
        else:
            hops, xkey = low._send(owner, total_key, target, cdev[p], box, dtype, Category.ACTIVATION,
                                    f"xfer {e.label} sum->[{p}]", [total])
            low._edges(owner, hops, [e.cfwd[p]])
            low._part(owner, e.opd(p), cdev[p], xkey, cdev[p], box)
            if not e.grad:
                continue
            hops, gkey = low._send(owner, e.gin(p), cdev[p], target, box, dtype, Category.ACTIVATION,
                                    f"grad {e.label} [{p}]->sum@{target}", [e.cbwd[p]])
            grads += hops
            grad_keys.append(gkey)
    if not e.grad:      # an integer sum (positions) has no gradient: its consumers' backwards still go first
        for q, _ in partials:
            low._edges(owner, [e.cbwd[p] for p in consumers], [e.pbwd[q]])
        return
    if len(consumers) > 1:
        gate_key = Key.grad_sum(gid)
        for key in grad_keys:
            low._part(owner, gate_key, target, key, target, box, add=True)
        gate = [low._reduce(owner, target, shape, len(consumers), f"grad sum {e.label} @{target}", grads,
                             action=Sum(Buf(gate_key, target, tuple(box), np_dtype)))]
    else:
        gate, gate_key = grads, grad_keys[0]
    for q, d in partials:
        if d == target:
            low._edges(owner, gate, [e.pbwd[q]])
            low._part(owner, e.gout(q), d, gate_key, d, box, add=True)
        else:
            hops, xkey = low._send(owner, gate_key, target, d, box, dtype, Category.ACTIVATION,
                                    f"grad {e.label} sum->[{q}]", gate)
            low._edges(owner, hops, [e.pbwd[q]])
            low._part(owner, e.gout(q), d, xkey, d, box, add=True)
