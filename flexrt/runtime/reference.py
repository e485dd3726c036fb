"""One device, whole tensors: the reference every parallel strategy must reproduce.

Walks the base PCG in topological order with the full arrays (no pieces, no task graph), scores
the output like the runtime's loss tasks, back-propagates in reverse order and updates the weights.
The central law of the runtime (tests/runtime) compares every strategy with this.

A cross-entropy scoring an output that is not a softmax is trained as FlexFlow trains it: its loss
kernels write ``(output - onehot) / batch`` as the output's gradient whatever the last operator is
(as if a softmax were fused); ``loss_gradient`` is that rule, shared with the executors.

Entry points: ``ReferenceTrainer``, ``loss_gradient``, ``loss_output``.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.ir.ops.dropout import at_step
from flexrt.kernels.losses import (CROSS_ENTROPIES, LossType, fuses_with_softmax, loss_backward, loss_forward,
                                   softmax_cross_entropy_backward)
from flexrt.ir.precision import is_bfloat16
from flexrt.kernels.bfloat16 import bfloat16_if, to_bfloat16
from flexrt.kernels.optimizers import LossScaler, master_step, penalized
from flexrt.kernels.registry import run_backward, run_forward


def loss_output(pcg: PCG) -> str:
    """The operator the loss scores: the last-added operator whose output nobody consumes."""
    used = {r.node for n in pcg.nodes for r in n.inputs}
    sinks = [n for n in pcg.nodes if n.op_type not in (OpType.INPUT, OpType.WEIGHT) and n.id not in used]
    if not sinks:
        raise StrategyError("the model has no operator whose output could be scored by a loss")
    return max(sinks, key=lambda n: n.id).name


def loss_gradient(loss: LossType, attrs, rank: int) -> tuple[Callable, bool]:
    """(the gradient function the loss hands back, whether it is taken w.r.t. the softmax's input)
    for a loss scoring the output (of ``rank`` dimensions) of an operator with ``attrs`` (None: not
    known): the fused softmax cross-entropy (``fuses_with_softmax``); FlexFlow's
    ``(output - onehot) / batch`` for a cross-entropy over an output that is not a softmax; else the
    loss's own gradient."""
    if attrs is not None and fuses_with_softmax(loss, attrs, rank):
        return softmax_cross_entropy_backward, True
    if loss in CROSS_ENTROPIES and attrs is not None and attrs.op_type is not OpType.SOFTMAX:
        return softmax_cross_entropy_backward, False
    return loss_backward, False


class ReferenceTrainer:
    def __init__(self, pcg: PCG, weights: dict, update: Callable, loss: LossType | str,
                 output: Optional[str] = None, loss_scale: Optional[float] = None,
                 penalties: Optional[dict] = None) -> None:
        """``loss`` is a ``LossType`` or its name; ``update`` is ``optimizer_step(...)``'s. Float16
        weights train as the runtime trains them: float32 masters, the loss scaled (dynamically, or by
        a fixed ``loss_scale``), a step skipped when a gradient overflows."""
        self.pcg = pcg
        self.weights = {k: np.array(v, copy=True) for k, v in weights.items()}
        self.update = update
        self.loss = LossType.parse(loss)
        self.output = output or loss_output(pcg)
        self.state: dict = {name: {} for name in self.weights}
        half = any(w.dtype.itemsize == 2 and w.dtype.kind == "f" for w in self.weights.values())
        # bfloat16 weights (float32 arrays of bfloat16 values) train through float32 masters, and
        # every output and gradient is rounded to bfloat16, as the runtime does
        self.bfloat16 = frozenset(n.name for n in pcg.nodes if n.op_type is OpType.WEIGHT and
                                  is_bfloat16(pcg.shape(TensorRef(n.id, 0)).dtype))
        for name in self.bfloat16 & set(self.weights):
            self.weights[name] = to_bfloat16(np, self.weights[name])
        self.scaler = None if not half else LossScaler(loss_scale, dynamic=False) if loss_scale else LossScaler()
        self.skipped = False
        self.steps = 0                            # dropout draws a mask per step (``at_step``)
        self.penalties = dict(penalties or {})   # weight name -> ("l1" | "l2", factor), as the runtime's

    def step(self, inputs: dict, labels) -> float:
        pcg = self.pcg
        order = pcg.topological_order()
        values: dict[TensorRef, np.ndarray] = {}
        for nid in order:
            node = pcg.node(nid)
            if node.op_type is OpType.INPUT:
                values[TensorRef(nid, 0)] = self._rounded(np.asarray(inputs[node.name]))
            elif node.op_type is OpType.WEIGHT:
                values[TensorRef(nid, 0)] = self.weights[node.name]
            else:
                outs = run_forward(np, at_step(node.attrs, self.steps), [values[r] for r in node.inputs])
                for k, o in enumerate(outs):
                    values[TensorRef(nid, k)] = self._rounded(o)
        out_ref = TensorRef(pcg.node_by_name(self.output).id, 0)
        out = values[out_ref]
        labels = np.asarray(labels)
        value = float(loss_forward(np, self.loss, out, labels))
        out_node = pcg.node(out_ref.node)
        backward, fused = loss_gradient(self.loss, out_node.attrs, out.ndim)
        seed = self._rounded(backward(np, self.loss, out, labels))
        if self.scaler is not None:   # in float32: the scale (2^16 by default) is past float16's range
            seed = (seed.astype(np.float32) * np.float32(self.scaler.scale)).astype(seed.dtype)
        grads: dict[TensorRef, np.ndarray] = (  # fused: d loss / d logits, the softmax's backward skipped
            {out_node.inputs[0]: seed} if fused else {out_ref: seed})
        for nid in reversed(order):
            node = pcg.node(nid)
            if node.op_type in (OpType.INPUT, OpType.WEIGHT) or (fused and nid == out_node.id):
                continue
            outs = [values[TensorRef(nid, k)] for k in range(len(pcg.output_shapes(nid)))]
            gouts = [grads.get(TensorRef(nid, k), np.zeros_like(o)) for k, o in enumerate(outs)]
            gins = run_backward(np, at_step(node.attrs, self.steps), [values[r] for r in node.inputs], outs, gouts)
            for r, g in zip(node.inputs, gins):
                if g is None or pcg.node(r.node).op_type is OpType.INPUT:
                    continue
                g = self._rounded(g)
                grads[r] = grads[r] + g if r in grads else g
        self._apply({name: grads.get(TensorRef(pcg.node_by_name(name).id, 0)) for name in self.weights})
        self.steps += 1
        return value

    def _rounded(self, arr):
        return bfloat16_if(self.bfloat16, np, arr)

    def _apply(self, grads: dict) -> None:
        """The optimizer's step on every weight with a gradient (mixed precision: unless one overflowed)."""
        inv_scale = 1.0
        if self.scaler is not None:
            self.skipped = any(g is not None and not np.isfinite(g).all() for g in grads.values())
            inv_scale = 1.0 / self.scaler.scale
            self.scaler.update(self.skipped)
            if self.skipped:
                return
        for name, w in self.weights.items():
            g = grads[name]
            if g is None:
                continue
            penalty = self.penalties.get(name)
            bf16 = name in self.bfloat16
            if w.dtype.itemsize == 2 or bf16:
                master_step(self.update, np, w, g, self.state[name], inv_scale, penalty, to_bfloat16 if bf16 else None)
            else:
                self.update(np, w, penalized(np, g, w, penalty), self.state[name])
