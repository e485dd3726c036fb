"""Evaluate a parallel PCG on concrete arrays with the NumPy kernels, piece by piece.

Every tensor is held as a ``ParallelValue`` (its pieces, partial sums and copies): inputs and
weights are scattered, compute operators run piece by piece (``run_pieces``), parallelization
operators move pieces (``apply_parallel_op``), and the graph's outputs are gathered back into full
arrays (shards joined, partial sums added, replicas checked to agree). This is the reference the
substitution law is checked against: a rewrite must leave every output of the graph unchanged.

Entry points: ``evaluate``, ``random_inputs``, ``graph_outputs``.

Example:
    >>> import numpy as np
    >>> from flexrt.ir.pcg import PCG, TensorRef
    >>> from flexrt.ir.op_type import OpType
    >>> from flexrt.ir.ops import ElementUnaryAttrs, InputAttrs
    >>> from flexrt.ir.tensor_shape import TensorShape
    >>> g = PCG(); x = g.add_node(InputAttrs(TensorShape((2, 2))))
    >>> r = g.add_node(ElementUnaryAttrs(OpType.RELU), [TensorRef(x)])
    >>> evaluate(g, {x: np.array([[-1.0, 2.0], [3.0, -4.0]])})[TensorRef(r)].tolist()
    [[0.0, 2.0], [3.0, 0.0]]
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from flexrt.errors import GraphError
from flexrt.ir.op_type import SOURCE_OPS, OpType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.kernels.pieces import apply_parallel_op, gather, run_pieces, scatter

PIECE_MOVERS = frozenset({OpType.REPARTITION, OpType.COMBINE, OpType.REPLICATE, OpType.REDUCTION,
                          OpType.ALLREDUCE})


def graph_outputs(pcg: PCG) -> list[TensorRef]:
    """The graph's final outputs: every output of every node that nothing reads (inputs and weights
    excepted), in node-id order."""
    return [ref for nid in pcg.sinks() if pcg.node(nid).op_type not in SOURCE_OPS for ref in pcg.outputs(nid)]


def random_inputs(pcg: PCG, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """A float64 standard-normal array for every input and weight node, keyed by node id; an integer
    input holds indices below the smallest table of the embeddings that read it (through any chain
    of operators), or 0 and 1 when none does."""
    out = {}
    for n in pcg.nodes:
        if n.op_type not in SOURCE_OPS:
            continue
        shape = pcg.output_shapes(n.id)[0]
        if shape.dtype.is_floating:
            out[n.id] = rng.standard_normal(shape.sizes)
        else:
            out[n.id] = rng.integers(0, _index_bound(pcg, n.id), shape.sizes)
    return out


def _index_bound(pcg: PCG, nid: int) -> int:
    reached, stack, bound = set(), [nid], None
    while stack:
        for c in pcg.consumers(stack.pop()):
            if c not in reached:
                reached.add(c)
                attrs = pcg.node(c).attrs
                if attrs.op_type is OpType.EMBEDDING:
                    bound = attrs.num_entries if bound is None else min(bound, attrs.num_entries)
                else:
                    stack.append(c)
    return bound or 2


def evaluate(pcg: PCG, inputs: Mapping[int, np.ndarray], outputs: Optional[Sequence[TensorRef]] = None,
             rng: Optional[np.random.Generator] = None) -> dict[TensorRef, np.ndarray]:
    """Full arrays of ``outputs`` (default: ``graph_outputs``) given an array per input/weight node.

    ``rng``, when given, splits any partial-sum input randomly (inputs normally have degree 1).
    Raises GraphError for a missing input or an operator with no piece-wise evaluation.
    """
    values: dict[TensorRef, object] = {}
    for nid in pcg.topological_order():
        node = pcg.node(nid)
        if node.op_type in SOURCE_OPS:
            if nid not in inputs:
                raise GraphError(f"evaluate: no array for {node.op_type.value} '{node.name}' (id {nid})")
            values[TensorRef(nid)] = scatter(np, np.asarray(inputs[nid]), pcg.output_shapes(nid)[0], rng)
            continue
        operands = [values[r] for r in node.inputs]
        if node.op_type in PIECE_MOVERS:
            outs = [apply_parallel_op(np, node.attrs, operands[0])]
        else:
            outs = run_pieces(np, node.attrs, operands, node.name)
        for i, v in enumerate(outs):
            values[TensorRef(nid, i)] = v
    wanted = graph_outputs(pcg) if outputs is None else list(outputs)
    return {ref: gather(np, values[ref]) for ref in wanted}
