"""The executor: any order that respects the task graph's dependencies gives the same numbers, in
serial and threaded mode, and memory is back to the persistent buffers after an iteration."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from flexrt.core import DataType
from flexrt.machine import load_machine
from flexrt.runtime.executor import Executor, optimizer_step
from flexrt.runtime.plan import ExecPlan
from flexrt.runtime.session import Session
from flexrt.simulator.simulate import Schedule

from .test_central_law import MODELS, batch, strategy_of


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def _other_order(graph, pick_last: bool) -> Schedule:
    """A topological order of the graph other than the simulator's: Kahn's algorithm taking the
    largest (or smallest) ready task id first."""
    succ = graph.successors()
    preds = {t: 0 for t in succ}
    for ss in succ.values():
        for s in ss:
            preds[s] += 1
    ready = [(-t if pick_last else t) for t, n in preds.items() if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        t = abs(heapq.heappop(ready))
        order.append(t)
        for s in succ[t]:
            preds[s] -= 1
            if preds[s] == 0:
                heapq.heappush(ready, -s if pick_last else s)
    zeros = np.zeros(len(order))
    return Schedule(tuple(order), zeros, zeros)


@pytest.mark.parametrize("model", ["mlp", "transformer"])
@pytest.mark.parametrize("kind", ["data", "hybrid"])
@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_any_dependency_order_gives_the_same_step(machine, model, kind, mode):
    """The executor only waits for dependencies: running the graph in another topological order
    gives bit-identical loss and weights (every sum adds its parts in a fixed order)."""
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    inputs, labels = batch(m.pcg, loss)
    session = Session(strategy_of(kind, m.pcg, machine), machine, loss=loss, lr=0.1, seed=3)
    start = session.executor.weights()
    ref = session.step(inputs, labels)
    graph = session.simulator.lowering.graph
    for pick_last in (True, False):
        plan = ExecPlan(graph, _other_order(graph, pick_last))
        ex = Executor(plan, session.backend, optimizer_step("sgd", lr=0.1), loss, (), mode)
        ex.load_weights(start)
        got = ex.run(inputs, labels)
        assert got.loss == ref.loss
        for name, w in session.executor.weights().items():
            np.testing.assert_array_equal(ex.weights()[name], w)


def test_memory_returns_to_the_persistent_buffers_after_an_iteration(machine):
    m, loss = MODELS["mlp"](DataType.DT_DOUBLE)
    inputs, labels = batch(m.pcg, loss)
    session = Session(strategy_of("hybrid", m.pcg, machine), machine, loss=loss, lr=0.1, seed=3)
    session.step(inputs, labels)
    ex = session.executor
    for dev, buffers in ex.mem.items():
        for key in buffers:
            assert (key, dev) in ex.plan.persistent, (key, dev)
    assert all(ex.live[d] <= ex.peak[d] for d in ex.live)
