"""PipeDream-2BW's steady state as a task graph one can simulate (Narayanan et al. 2021, "Memory-
Efficient Pipeline-Parallel DNN Training"; Unity §5 uses its weight-update semantics).

Under ``2bw`` the pipeline never flushes: iteration t + 1's forwards run on the weights of t, which
exist before iteration t's synchronization and update end (those make t + 2's weights). So in steady
state an iteration costs less than one flushed iteration: the fill and drain of the pipeline and the
gradient synchronization overlap the neighbouring iterations. ``unrolled`` builds k consecutive
iterations (two by default) as one strategy: the micro-batched model with ``k m`` copies, iteration
i's copies ``i m .. (i + 1) m - 1`` reading their own weight nodes (``w@it1``, ...: that iteration's
own gradient accumulation, synchronization and update), every copy configured as its
first-iteration twin, and 1F1B's device order running on through all the micro-batches (a ``1f1b``
plan: 2bw orders a device as 1F1B does). Nothing orders an iteration after the previous one's
update, which is 2BW's double buffering; the iterations share the devices and links, so one's
synchronization and update compete with the next one's work. The simulator's period,
``T(two iterations) - T(one iteration)`` (at least the busiest device's or link's work), is the
steady state's time per iteration (``flexrt.simulator.simulate``); a third iteration adds the
same within 3% (tests/simulator/test_pipeline_2bw.py).

Entry points: ``delays_updates``, ``unrolled``, ``ITERATION_SUFFIX``.
"""

from __future__ import annotations

from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG, TensorRef
from flexrt.strategy.config import ConfigStrategy
from flexrt.strategy.pipeline import MicroBatched, PipelinePlan, Schedule, copy_name, source_of

ITERATION_SUFFIX = "@it"   # + the iteration (1, 2, ...): a later iteration's weight nodes


def delays_updates(strategy) -> bool:
    """Whether ``strategy`` is a ``2bw`` pipeline (its iterations overlap on double-buffered weights)."""
    plan = getattr(strategy, "pipeline", None)
    return plan is not None and plan.schedule.delays_updates


def _weight_name(name: str, i: int) -> str:
    """Iteration ``i``'s copy of weight ``name`` (the first iteration's is the weight itself)."""
    return name + (f"{ITERATION_SUFFIX}{i}" if i else "")


def _unrolled_model(mb: MicroBatched, iterations: int) -> tuple[MicroBatched, dict[int, int]]:
    """``mb`` for ``iterations`` consecutive iterations (module doc) and, per node of the result, its
    first-iteration twin in ``mb.pcg``."""
    m, src, k = mb.micro_batches, mb.pcg, range(iterations)
    out = PCG()
    refs: dict[int, tuple] = {}                 # node of mb.pcg -> its id in each iteration
    twin: dict[int, int] = {}
    inputs, copies = dict(mb.inputs), {}
    for nid in src.topological_order():
        node = src.node(nid)
        if node.op_type is OpType.WEIGHT:
            ids = tuple(out.add_node(node.attrs, (), name=_weight_name(node.name, i)) for i in k)
        elif node.op_type is OpType.INPUT:
            base, j = source_of(node.name)
            ids = tuple(out.add_node(node.attrs, (), name=copy_name(base, j + i * m)) for i in k)
            inputs.update({copy_name(base, j + i * m): mb.inputs[node.name] for i in k})   # same rows: timing only
        else:
            base, j = source_of(node.name)
            ids = tuple(out.add_node(node.attrs, [TensorRef(refs[r.node][i], r.index) for r in node.inputs],
                                     name=copy_name(base, j + i * m)) for i in k)
        refs[nid] = ids
        twin.update({x: nid for x in ids})
    for name, names in mb.copies.items():
        copies[name] = tuple(copy_name(name, j) for j in range(iterations * m))
    losses = {copy_name(source_of(c)[0], source_of(c)[1] + i * m): rows for c, rows in mb.losses.items() for i in k}
    return MicroBatched(out, iterations * m, copies, inputs, losses, mb.source_hash), twin


def unrolled(strategy, iterations: int = 2) -> ConfigStrategy:
    """``iterations`` consecutive iterations of the ``2bw`` pipelined ``strategy`` as one pipelined
    strategy (module doc), with its recomputation and its fusion plan (each group and bucket also on
    the later iterations' copies and weights)."""
    if not delays_updates(strategy):
        raise StrategyError("unrolled: takes a pipelined strategy with the 2bw schedule")
    if not isinstance(strategy, ConfigStrategy):
        raise StrategyError("unrolled: takes a pipelined strategy of per-operator configurations")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise StrategyError(f"unrolled: iterations must be an integer >= 1, got {iterations!r}")
    plan = strategy.pipeline
    mb2, twin = _unrolled_model(plan.model, iterations)
    configs = {nid: strategy.configs[twin[nid]] for nid in twin if twin[nid] in strategy.configs}
    # 2bw orders each device as 1F1B does, now through all the iterations' micro-batches
    out = ConfigStrategy(mb2.pcg, configs).with_pipeline(PipelinePlan(mb2, Schedule.ONE_F_ONE_B, plan.stages,
                                                                      plan.chunks, plan.stage_of))
    out = out.with_recompute(getattr(strategy, "recompute", ()))
    fusion = getattr(strategy, "fusion", None)
    return out.with_fusion(_later_iterations(fusion, plan.micro_batches, iterations)) if fusion else out


def _later_iterations(fusion, m: int, iterations: int):
    """``fusion`` with each group and bucket repeated on every later iteration's copies and weights."""
    from flexrt.strategy.fusion import FusionGroup, FusionPlan

    def later(name: str, i: int) -> str:
        base, j = source_of(name)
        return copy_name(base, j + i * m)
    groups = tuple(FusionGroup(tuple(later(o, i) for o in g.ops), g.phase, tuple(later(o, i) for o in g.duplicate))
                   for i in range(iterations) for g in fusion.groups)
    buckets = tuple(tuple(_weight_name(w, i) for w in b) for i in range(iterations) for b in fusion.buckets)
    return FusionPlan(groups, buckets)
