"""PipeDream-2BW's steady state as a task graph one can simulate (Narayanan et al. 2021, "Memory-
Efficient Pipeline-Parallel DNN Training"; Unity §5 uses its weight-update semantics).

Under ``2bw`` the pipeline never flushes: iteration t + 1's forwards run on the weights of t, which
exist before iteration t's synchronization and update end (those make t + 2's weights). So in steady
state an iteration costs less than one flushed iteration: the fill and drain of the pipeline and the
gradient synchronization overlap the neighbouring iterations. ``unrolled`` builds two consecutive
iterations as one strategy: the micro-batched model with ``2m`` copies, copies ``m .. 2m - 1`` (the
second iteration) reading a second set of weight nodes (``w@it1``: that iteration's own gradient
accumulation, synchronization and update), every copy configured as its first-iteration twin, and
1F1B's device order running on through the ``2m`` micro-batches (a ``1f1b`` plan: 2bw orders a
device as 1F1B does). Nothing orders the second
iteration after the first one's update, which is 2BW's double buffering; the two iterations share
the devices and links, so the first one's synchronization and update compete with the second one's
work. The simulator's period, ``T(two iterations) - T(one iteration)``, is the steady state's time
per iteration (``flexrt.simulator.simulate``).

Entry points: ``unrolled``, ``ITERATION_SUFFIX``.
"""

from __future__ import annotations

from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.strategy.config import ConfigStrategy
from flexrt.strategy.pipeline import MicroBatched, PipelinePlan, Schedule, copy_name, source_of

ITERATION_SUFFIX = "@it1"   # the second iteration's weight nodes


def _unrolled_model(mb: MicroBatched) -> tuple[MicroBatched, dict[int, int]]:
    """``mb`` for two iterations (module doc) and, per node of the result, its first-iteration twin
    in ``mb.pcg``."""
    m, src = mb.micro_batches, mb.pcg
    out = PCG()
    refs: dict[int, tuple[int, int]] = {}       # node of mb.pcg -> (its id, its second iteration's id)
    twin: dict[int, int] = {}
    inputs, copies = dict(mb.inputs), {}
    for nid in src.topological_order():
        node = src.node(nid)
        if node.op_type is OpType.WEIGHT:
            ids = (out.add_node(node.attrs, (), name=node.name),
                   out.add_node(node.attrs, (), name=node.name + ITERATION_SUFFIX))
        elif node.op_type is OpType.INPUT:
            base, j = source_of(node.name)
            second = copy_name(base, j + m)
            ids = (out.add_node(node.attrs, (), name=node.name), out.add_node(node.attrs, (), name=second))
            inputs[second] = mb.inputs[node.name]          # the same rows: only its timing is simulated
        else:
            base, j = source_of(node.name)
            ids = tuple(out.add_node(node.attrs, [TensorRef(refs[r.node][k], r.index) for r in node.inputs],
                                     name=copy_name(base, j + k * m)) for k in (0, 1))
        refs[nid] = ids
        twin.update({ids[0]: nid, ids[1]: nid})
    for name, names in mb.copies.items():
        copies[name] = tuple(names) + tuple(copy_name(name, j + m) for j in range(m))
    losses = dict(mb.losses)
    losses.update({copy_name(source_of(c)[0], source_of(c)[1] + m): rows for c, rows in mb.losses.items()})
    return MicroBatched(out, 2 * m, copies, inputs, losses, mb.source_hash), twin


def unrolled(strategy) -> ConfigStrategy:
    """Two consecutive iterations of the ``2bw`` pipelined ``strategy`` as one pipelined strategy
    (module doc), with its recomputation and its fusion plan (each group and bucket also on the
    second iteration's copies and weights)."""
    plan = getattr(strategy, "pipeline", None)
    if plan is None or not plan.schedule.delays_updates:
        raise StrategyError("unrolled: takes a pipelined strategy with the 2bw schedule")
    if not isinstance(strategy, ConfigStrategy):
        raise StrategyError("unrolled: takes a pipelined strategy of per-operator configurations")
    mb2, twin = _unrolled_model(plan.model)
    configs = {nid: strategy.configs[twin[nid]] for nid in twin if twin[nid] in strategy.configs}
    # 2bw orders each device as 1F1B does, now through 2m micro-batches
    out = ConfigStrategy(mb2.pcg, configs).with_pipeline(PipelinePlan(mb2, Schedule.ONE_F_ONE_B, plan.stages,
                                                                      plan.chunks, plan.stage_of))
    out = out.with_recompute(getattr(strategy, "recompute", ()))
    fusion = getattr(strategy, "fusion", None)
    return out.with_fusion(_second_iteration(fusion, plan.micro_batches)) if fusion else out


def _second_iteration(fusion, m: int):
    """``fusion`` with each group and bucket repeated on the second iteration's copies and weights."""
    from flexrt.strategy.fusion import FusionGroup, FusionPlan

    def later(name: str) -> str:
        base, j = source_of(name)
        return copy_name(base, j + m)
    groups = tuple(fusion.groups) + tuple(FusionGroup(tuple(map(later, g.ops)), g.phase, tuple(map(later, g.duplicate)))
                                          for g in fusion.groups)
    buckets = tuple(fusion.buckets) + tuple(tuple(w + ITERATION_SUFFIX for w in b) for b in fusion.buckets)
    return FusionPlan(groups, buckets)
