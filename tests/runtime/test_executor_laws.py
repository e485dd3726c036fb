"""The executor (flexrt/runtime/executor.py) driven directly, beyond ``test_executor.py``:

- a model of the threaded dispatcher (each device runs its ready tasks, earliest in plan order first;
  a ring AllReduce completes when its last member arrives) says whether a plan can run to the end; on orders that keep each
  collective's members together it always can, and there serial and threaded execution train
  bit-identically to the predicted order and like the single-device reference, on random strategies;
- the threaded dispatch finishes the simulator's own predicted order too (it once deadlocked there:
  those strategies are kept as cases);
- memory after an iteration is exactly the weight instances (and optimizer state) of each device,
  the live counters agree with the arrays held, and the serial executor's peak is reproducible;
- recorded times respect every dependency; weights placed are the weights read back;
- bad input and bad plans get clear errors (a dependency cycle, an unknown mode, missing weights or
  labels, a failing task in threaded mode).
"""

from __future__ import annotations

import random
import re
import threading
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.runtime.backend import NumpyBackend
from flexrt.runtime.executor import Executor, TaskFailed, optimizer_step, relative_error
from flexrt.runtime.plan import ExecPlan
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.simulator.actions import Key, RingStep
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Schedule, Simulator
from flexrt.strategy import data_parallel, random_strategy

from .test_central_law import MODELS, batch, weights_for

COST = AnalyticCostModel()
SGD = {"lr": 0.05, "momentum": 0.9}
WATCHDOG_S = 60
MACHINES = {"dgx1": lambda: load_machine("dgx1_v100"), "p100x2": lambda: load_machine("flexflow_p100", nodes=2)}


class Case:
    """A model lowered for one strategy: its graph, predicted plan, batch and initial weights."""

    def __init__(self, model: str, seed: int, machine: str = "dgx1", kind: str = "random") -> None:
        m, self.loss = MODELS[model](DataType.DT_DOUBLE)
        self.pcg = m.pcg
        self.machine = MACHINES[machine]()
        if kind == "data":
            strategy = data_parallel(self.pcg, self.machine, 4)
        else:
            try:
                strategy = random_strategy(self.pcg, self.machine, seed)
            except StrategyError:
                strategy = data_parallel(self.pcg, self.machine, 2)
        sim = Simulator(self.machine, COST)
        sim.full(strategy)
        self.graph = sim.lowering.graph
        self.plan = ExecPlan(self.graph, sim.schedule())
        self.inputs, self.labels = batch(self.pcg, self.loss)
        self.w0 = weights_for(self.pcg, DataType.DT_DOUBLE)

    def executor(self, plan=None, mode="serial", **sgd) -> Executor:
        ex = Executor(plan or self.plan, NumpyBackend(self.machine.num_devices), optimizer_step("sgd", **(sgd or SGD)),
                      self.loss, (), mode)
        ex.load_weights(self.w0)
        return ex

    def train(self, plan=None, mode="serial", steps=2):
        ex = self.executor(plan, mode)
        out = {}
        # a watchdog: a deadlocked threaded run fails the test instead of hanging the suite
        runner = threading.Thread(target=lambda: out.setdefault("losses", [ex.run(self.inputs, self.labels).loss
                                                                           for _ in range(steps)]), daemon=True)
        runner.start()
        runner.join(WATCHDOG_S)
        if runner.is_alive():
            pytest.fail(f"the {mode} executor did not finish {steps} iterations in {WATCHDOG_S} s (deadlock?)")
        return out["losses"], ex.weights(), ex


def dispatch_finishes(plan: ExecPlan) -> bool:
    """Whether the threaded executor's dispatch can run ``plan`` to the end: every device runs its
    ready tasks, earliest in plan order first; a ring member that is not the last to arrive is
    passed, and every member completes when the last arrives (``flexrt.runtime.threads``)."""
    members = defaultdict(list)
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            members[t.action.group.id].append(t.index)
    ready = defaultdict(list)
    remaining = plan.num_preds.tolist()
    for i, r in enumerate(remaining):
        if r == 0:
            ready[plan.tasks[i].device].append(i)
    arrived = Counter()
    done = 0
    progress = True
    while progress:
        progress = False
        for dev in list(ready):
            while ready[dev]:
                i = min(ready[dev])
                ready[dev].remove(i)
                progress = True
                finished = [i]
                a = plan.tasks[i].action
                if isinstance(a, RingStep):
                    arrived[a.group.id] += 1
                    finished = members[a.group.id] if arrived[a.group.id] == len(a.group.buffers) else []
                for f in finished:
                    done += 1
                    for s in plan.succ[f]:
                        remaining[s] -= 1
                        if remaining[s] == 0:
                            ready[plan.tasks[s].device].append(s)
    return done == plan.num_tasks


def collective_order(case: Case, seed: int) -> Schedule:
    """A random topological order of the graph in which the members of every ring AllReduce are
    consecutive (Kahn's algorithm on the graph with each collective contracted to one node)."""
    rng = random.Random(seed)
    unit = {}  # task id -> its node in the contracted graph
    group_members = defaultdict(list)
    for t in case.plan.tasks:
        if isinstance(t.action, RingStep):
            unit[t.id] = ("ring", t.action.group.id)
            group_members[unit[t.id]].append((t.action.member, t.id))
        else:
            unit[t.id] = t.id
    succ = defaultdict(set)
    indeg = Counter()
    for a, ss in case.graph.successors().items():
        for b in ss:
            ua, ub = unit[a], unit[b]
            assert ua != ub, "a collective depends on itself"
            if ub not in succ[ua]:
                succ[ua].add(ub)
                indeg[ub] += 1
    nodes = set(unit.values())
    ready = sorted((u for u in nodes if indeg[u] == 0), key=repr)
    order = []
    while ready:
        u = ready.pop(rng.randrange(len(ready)))
        order += [tid for _, tid in sorted(group_members[u])] if u in group_members else [u]
        for v in sorted(succ[u], key=repr):
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    assert len(order) == len(case.plan.tasks), "the contracted graph has a cycle"
    # each task keeps its predicted times: a gradient summed as its contributions come takes them in
    # the order of their predicted ends (flexrt.simulator.memory.Accumulation), whatever the dispatch
    at = {t.id: i for i, t in enumerate(case.plan.tasks)}
    start, end = case.plan.predicted_start, case.plan.predicted_end
    return Schedule(tuple(order), np.array([start[at[t]] for t in order]), np.array([end[at[t]] for t in order]))


def assert_same_training(got, want) -> None:
    """Bit-identical weights; losses to the last bits (the loss adds its pieces in execution order)."""
    (got_losses, got_w, _), (want_losses, want_w, _) = got, want
    assert got_losses == pytest.approx(want_losses, rel=1e-14, abs=0)
    assert set(got_w) == set(want_w)
    for name, w in want_w.items():
        np.testing.assert_array_equal(got_w[name], w, err_msg=name)


# ---- orders and modes ---------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000), order_seed=st.integers(0, 10_000))
def test_orders_keeping_collectives_together_train_identically_in_both_modes(model, seed, order_seed):
    case = Case(model, seed)
    want = case.train()
    plan = ExecPlan(case.graph, collective_order(case, order_seed))
    assert dispatch_finishes(plan)
    for mode in ("serial", "threads"):
        assert_same_training(case.train(plan, mode), want)
    # and what they compute is what one device computes
    ref = ReferenceTrainer(case.pcg, case.w0, optimizer_step("sgd", **SGD), case.loss)
    for got in want[0]:
        assert got == pytest.approx(ref.step(case.inputs, case.labels), rel=1e-10)
    assert all(relative_error(want[1][k], w) <= 1e-10 for k, w in ref.weights.items())


@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000))
def test_threads_match_serial_on_the_predicted_order(model, seed):
    case = Case(model, seed)
    assert dispatch_finishes(case.plan)
    assert_same_training(case.train(mode="threads"), case.train())


# Strategies whose predicted order deadlocked the threaded executor when each worker waited for its
# next task in that order (a device holding a ring member another device needed, behind a task that
# waited for the ring's sum); more random strategies follow.
DEADLOCKS = [("transformer", 17, "dgx1"), ("dlrm", 11, "dgx1"), ("mlp", 17, "p100x2")]
MORE = [(model, seed, "p100x2") for seed in range(20) for model in ("mlp", "cnn", "dlrm")]


def test_threaded_dispatch_finishes_the_predicted_order_of_random_strategies():
    for model, seed, machine in DEADLOCKS + MORE:
        assert dispatch_finishes(Case(model, seed, machine).plan), (model, seed, machine)


@pytest.mark.parametrize("model, seed, machine", DEADLOCKS)
def test_strategies_that_deadlocked_the_threads_now_train_like_serial(model, seed, machine):
    case = Case(model, seed, machine)
    assert_same_training(case.train(mode="threads"), case.train())


# ---- memory and times ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["serial", "threads"])
@pytest.mark.parametrize("model, seed", [("mlp", 1), ("cnn", 2), ("dlrm", 3)])
def test_after_each_iteration_devices_hold_exactly_their_weights_and_optimizer_state(model, seed, mode):
    case = Case(model, seed)
    ex = case.executor(mode=mode)
    instances = defaultdict(set)
    for b in case.plan.weight_instances:
        instances[b.device].add(b.key)
    for _ in range(2):
        result = ex.run(case.inputs, case.labels)
        for dev, held in ex.mem.items():
            if dev < 0:
                assert set(held) == {Key.input(name) for name in case.plan.inputs}
                continue
            assert set(held) == instances[dev], f"device {dev} holds {sorted(set(held) - instances[dev])}"
            state = sum(int(v.nbytes) for (_, d), s in ex.opt_state.items() if d == dev for v in s.values())
            assert state == sum(a.nbytes for a in held.values())  # momentum: one buffer per weight element
            assert ex.live[dev] == sum(a.nbytes for a in held.values()) + state
            assert result.peak_bytes[dev] >= ex.live[dev]


def test_serial_peak_memory_is_the_same_every_iteration():
    case = Case("transformer", 4)
    ex = case.executor(lr=0.05)  # no momentum: no optimizer state appears during the first iteration
    peaks = [ex.run(case.inputs, case.labels).peak_bytes for _ in range(3)]
    assert peaks[0] == peaks[1] == peaks[2]
    assert all(peaks[0][d] > ex.live[d] for d in ex.live if d >= 0 and ex.live[d])  # transients did exist


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_recorded_times_respect_every_dependency(mode):
    case = Case("cnn", 6, kind="data")
    r = case.executor(mode=mode).run(case.inputs, case.labels)
    assert np.all(r.start >= 0) and np.all(r.end >= r.start) and float(r.end.max()) <= r.wall_s
    late = [(case.plan.tasks[i].name, case.plan.tasks[s].name) for i, ss in enumerate(case.plan.succ) for s in ss
            if r.end[i] > r.start[s]]
    assert not late, late[:3]


@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 10_000))
def test_weights_placed_are_the_weights_read_back(model, seed):
    case = Case(model, seed)
    ex = case.executor()
    back = ex.weights()
    assert set(back) == set(case.w0)
    for name, w in case.w0.items():
        np.testing.assert_array_equal(back[name], w)
    for (name, ranges, _), arr in ex.weight_replicas().items():
        np.testing.assert_array_equal(arr, case.w0[name][tuple(slice(lo, hi) for lo, hi in ranges)])


# ---- errors -------------------------------------------------------------------------------------

def test_dependency_cycle_is_reported_by_the_serial_executor():
    """A plan whose first task also waits for one of its own descendants: it, everything it leads
    to and every collective with a member among those (members complete together) never become
    ready, and the executor says how many."""
    case = Case("mlp", 0, kind="data")
    plan = case.plan
    members = defaultdict(list)
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            members[t.action.group.id].append(t.index)

    def never_ready(start: int) -> set:
        stuck, frontier = {start}, [start]
        while frontier:
            i = frontier.pop()
            a = plan.tasks[i].action
            for s in plan.succ[i] + (members[a.group.id] if isinstance(a, RingStep) else []):
                if s not in stuck:
                    stuck.add(s)
                    frontier.append(s)
        return stuck

    last = max(never_ready(0))
    assert last != 0
    plan.succ[last] = plan.succ[last] + [0]
    plan.num_preds[0] += 1
    stuck = never_ready(0)
    assert len(stuck) < plan.num_tasks
    with pytest.raises(StrategyError, match=rf"did not run to the end: {len(stuck)} tasks never became ready "
                                            r"\(a dependency cycle\?\)"):
        case.executor().run(case.inputs, case.labels)


def test_failing_task_in_threaded_mode_is_named_and_every_worker_stops():
    case = Case("mlp", 0, kind="data")
    ex = case.executor(mode="threads")
    with pytest.raises(TaskFailed, match=r"task 'loss softmax\[\d\]' \(device \d\) failed: .*integer class ids"):
        ex.run(case.inputs, case.labels.astype(np.float64))
    assert not [t.name for t in threading.enumerate() if t.name.startswith("flexrt-dev")]


def test_bad_mode_missing_weight_and_missing_labels_are_clear_errors():
    case = Case("mlp", 0, kind="data")
    backend, update = NumpyBackend(8), optimizer_step("sgd", lr=0.1)
    with pytest.raises(StrategyError, match="unknown executor mode 'gpu'; valid: serial, threads"):
        Executor(case.plan, backend, update, case.loss, (), "gpu")
    ex = Executor(case.plan, backend, update, case.loss)
    with pytest.raises(StrategyError, match="no initial value for weight 'fc1.kernel'"):
        ex.load_weights({k: v for k, v in case.w0.items() if k != "fc1.kernel"})
    ex.load_weights(case.w0)
    with pytest.raises(StrategyError, match="training needs labels for the loss"):
        ex.run(case.inputs, None)
    with pytest.raises(StrategyError, match=re.escape("buffer Key.output('fc1', 0, 0) on device 0 is read before it is written")):
        ex.get((Key.output("fc1", 0, 0), 0))
    with pytest.raises(StrategyError, match="unknown optimizer 'lamb'; valid: sgd, adam, rmsprop, adagrad"):
        optimizer_step("lamb")
