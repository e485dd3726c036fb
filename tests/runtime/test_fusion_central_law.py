"""The central law under fusion plans (DisCo, issue 16): a strategy with operator groups and gradient
buckets trains to one device's losses and weights (float64, SGD with momentum, 3 steps, 1e-10).

Plans: forward groups, backward groups, both, a duplicated member (a producer with two consumers
recomputed into one consumer's group), one bucket of every weight, several buckets; on an MLP
with element-wise chains, a CNN (conv + relu + pool chains) and a transformer block; data
parallelism on 4 devices, a hybrid strategy with groups that stay valid, the threaded executor,
random valid plans (hypothesis), and under MPI. Also: a chain of element-wise operators whose
intermediates no other task reads runs as one numexpr expression (and gives the member kernels'
values), one whose intermediates a backward reads does not; the plan laws hold for fused plans; a
bucket costs at most its flat buffers in peak memory.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, DataType, FFConfig, FFModel, PoolType
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.runtime.session import Session
from flexrt.simulator.actions import Fused, RingStep
from flexrt.strategy import data_parallel
from flexrt.strategy.fusion import FusionGroup, FusionPlan, check_fusion, gradient_order

if __name__ == "__main__":  # run by mpiexec (``_mpi_law``): the repository root holds ``tests``
    sys.path.insert(0, str(Path(__file__).parents[2]))
from tests.runtime.test_central_law import batch, compare_with_one_device, strategy_of, weights_for  # noqa: E402
from tests.runtime.test_plan_laws import (Lowered, ancestors, check_aliases_are_exact_same_device_pieces,  # noqa: E402
                                          check_each_transient_buffer_written_once_before_its_readers)

STEPS = 3
TOL = 1e-10
SGD = {"lr": 0.05, "momentum": 0.9}
DT = DataType.DT_DOUBLE
LOSS = "mean_squared_error_avg"
MACHINE = load_machine("dgx1_v100")


# ---- models ------------------------------------------------------------------------------------

def mlp():
    """Dense layers around element-wise chains: s1 -> s2 -> t1 (no intermediate read by a backward:
    scalar ops read nothing, tanh its output) and t1 -> s3 (tanh's output is read by its backward);
    r2 feeds fc3 and res (a duplicate candidate)."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([16, 12], DT)
    t = m.dense(x, 16, name="fc1")
    t = m.scalar_multiply(t, 0.5, name="s1")
    t = m.scalar_add(t, 0.1, name="s2")
    t = m.tanh(t, name="t1")
    t = m.scalar_multiply(t, 2.0, name="s3")
    t = m.dense(t, 16, name="fc2")
    r = m.relu(t, name="r2")
    f = m.dense(r, 16, name="fc3")
    t = m.add(r, f, name="res")
    m.dense(t, 6, name="head")
    return m.pcg


def cnn():
    m = FFModel(FFConfig([]))
    x = m.create_tensor([8, 3, 8, 8], DT)
    t = m.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv1")
    t = m.relu(t, name="c1r")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    t = m.conv2d(t, 6, 3, 3, 1, 1, 1, 1, name="conv2")
    t = m.relu(t, name="c2r")
    t = m.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG, name="pool2")
    t = m.flat(t, name="flat")
    m.dense(t, 5, name="fc")
    return m.pcg


def transformer():
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 6, 8], DT)
    a = m.multihead_attention(x, x, x, 8, 2, name="attn")
    t = m.add(x, a, name="res1")
    t = m.layer_norm(t, [2], name="ln1")
    f = m.dense(t, 16, ActiMode.AC_MODE_RELU, name="ffn1")
    f = m.dense(f, 8, name="ffn2")
    t = m.add(t, f, name="res2")
    m.layer_norm(t, [2], name="ln2")
    return m.pcg


MODELS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}
_PCGS: dict = {}


def pcg_of(model: str):
    if model not in _PCGS:
        _PCGS[model] = MODELS[model]()
    return _PCGS[model]


def all_weights(strategy) -> tuple:
    return tuple(w for w, _ in gradient_order(strategy.wiring()))


def train_like_one_device(model: str, strategy, mode: str = "serial") -> Session:
    pcg = pcg_of(model)
    return compare_with_one_device(model, pcg, strategy, MACHINE, LOSS, TOL, weights_for(pcg, DT), "sgd", SGD, mode)


def fused_tasks(session) -> list:
    return [t for t in session.plan.tasks if isinstance(t.action, Fused)]


# ---- named plans under data parallelism ------------------------------------------------------------

G = FusionGroup
# (groups, buckets): buckets "all" (one bucket of every weight), "split" (consecutive gradient ranks,
# two per bucket) or none
PLANS = {
    "mlp": {
        "forward": ((G(("fc1", "s1", "s2", "t1")), G(("fc2", "r2"))), None),
        "backward": ((G(("s3", "fc2", "r2"), "backward"), G(("res", "head"), "backward")), None),
        "both": ((G(("s1", "s2", "t1")), G(("fc3", "res", "head")), G(("t1", "s3", "fc2"), "backward")), None),
        "duplicate": ((G(("r2", "fc3"), duplicate=("r2",)), G(("s1", "s2"))), None),
        "one_bucket": ((), "all"),
        "buckets": ((), "split"),
        "everything": ((G(("fc1", "s1")), G(("s2", "t1")), G(("r2", "fc3"), duplicate=("r2",)),
                        G(("fc2", "r2"), "backward")), "split"),
    },
    "cnn": {
        "forward": ((G(("conv1", "c1r", "pool1")), G(("conv2", "c2r", "pool2"))), None),
        "backward": ((G(("conv2", "c2r", "pool2"), "backward"), G(("flat", "fc"), "backward")), None),
        "both": ((G(("conv1", "c1r", "pool1")), G(("conv1", "c1r", "pool1"), "backward")), "all"),
    },
    "transformer": {
        "forward": ((G(("res1", "ln1")), G(("ffn1", "ffn2", "res2"))), None),
        "backward": ((G(("ffn2", "res2", "ln2"), "backward"),), None),
        "duplicate": ((G(("ln1", "ffn1"), duplicate=("ln1",)),), "split"),
    },
}


def plan_of(model: str, name: str, strategy) -> FusionPlan:
    groups, spec = PLANS[model][name]
    if spec == "all":
        return FusionPlan(groups, (all_weights(strategy),))
    if spec == "split":
        order = gradient_order(strategy.wiring())
        ranks = sorted({r for _, r in order})
        buckets = [tuple(w for w, r in order if r in ranks[i:i + 2]) for i in range(0, len(ranks), 2)]
        return FusionPlan(groups, tuple(b for b in buckets if len(b) > 1))
    return FusionPlan(groups)


CASES = [(model, name) for model, plans in PLANS.items() for name in plans]


@pytest.mark.parametrize("model, name", CASES)
def test_fused_data_parallel_trains_like_one_device(model, name):
    strategy = data_parallel(pcg_of(model), MACHINE, 4)
    plan = plan_of(model, name, strategy)
    session = train_like_one_device(model, strategy.with_fusion(plan))
    assert len(fused_tasks(session)) == 4 * len(plan.groups)  # one task per piece of every group
    rings = [g for g in session.plan.ring_groups.values() if g.segments > 1]
    assert len(rings) == len(plan.buckets)
    assert sorted(g.segments for g in rings) == sorted(len(b) for b in plan.buckets)
    if any(g.duplicate for g in plan.groups):
        assert any(any(t.action.recomputed) for t in fused_tasks(session))


def test_fused_plan_keeps_the_plan_laws():
    pcg = pcg_of("mlp")
    strategy = data_parallel(pcg, MACHINE, 4)
    groups = FusionPlan(PLANS["mlp"]["everything"][0])
    session = Session(strategy.with_fusion(groups), MACHINE, optimizer="sgd", loss=LOSS, **SGD)
    lowered = Lowered(pcg, None, session.simulator.graph, session.plan, MACHINE)
    check_aliases_are_exact_same_device_pieces(lowered)
    check_each_transient_buffer_written_once_before_its_readers(lowered)
    for t in fused_tasks(session):
        private = t.action.private
        assert private.isdisjoint(t.reads) and private.isdisjoint(t.writes)


def test_bucket_segments_are_written_by_the_collective_before_their_updates():
    # the collective runs whole once every member is ready, so a segment's reader needs one member
    # of its ring before it (the member that assembles the segments need not be that one)
    pcg = pcg_of("mlp")
    strategy = data_parallel(pcg, MACHINE, 4)
    session = Session(strategy.with_fusion(plan_of("mlp", "buckets", strategy)), MACHINE, optimizer="sgd",
                      loss=LOSS, **SGD)
    plan = session.plan
    lowered = Lowered(pcg, None, session.simulator.graph, plan, MACHINE)
    check_aliases_are_exact_same_device_pieces(lowered)
    anc = ancestors(plan)
    members, segment_of = defaultdict(int), {}
    for t in plan.tasks:
        if isinstance(t.action, RingStep):
            members[t.action.group.id] |= 1 << t.index
            if t.action.group.segments > 1:
                segment_of.update({(b.key, b.device): t.action.group.id for b in t.action.group.buffers})
    assert segment_of and not set(segment_of) & set(plan.alias)
    readers = 0
    for t in plan.tasks:
        for r in t.reads:
            if r in segment_of and not isinstance(t.action, RingStep):
                readers += 1
                assert anc[t.index] & members[segment_of[r]], f"{t.name} may read {r} before its ring"
    assert readers == len(segment_of)  # each segment is read by its weight instance's update


@pytest.fixture
def vml(monkeypatch):
    """numexpr as if built with VML: its transcendental loops then pay, so tanh chains run as one
    expression whatever this host's numexpr build (``ElementwiseChain.one_pass_pays``)."""
    import numexpr
    monkeypatch.setattr(numexpr, "use_vml", True, raising=False)


def test_fused_threads_mode_trains_like_one_device(vml):
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    session = train_like_one_device("mlp", strategy.with_fusion(plan_of("mlp", "everything", strategy)),
                                    mode="threads")
    assert session.executor.chain_runs == STEPS * 4  # (s2, t1) on every piece, as one expression


# ---- hybrid: groups chosen where they stay valid ---------------------------------------------------

def valid_runs(strategy, length: int) -> list[tuple]:
    """Runs of ``length`` consecutive operators (topological order) that one forward group may hold."""
    ops = list(strategy.wiring().ops)
    out = []
    for i in range(len(ops) - length + 1):
        run = tuple(ops[i:i + length])
        try:
            check_fusion(strategy, FusionPlan((G(run),)), MACHINE)
        except StrategyError:
            continue
        out.append(run)
    return out


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_fused_hybrid_trains_like_one_device(model):
    strategy = strategy_of("hybrid", pcg_of(model), MACHINE)
    runs = valid_runs(strategy, 2)
    assert runs, "no two consecutive operators share a layout"
    fwd = runs[0]
    bwd = next((r for r in runs if not set(r) & set(fwd)), runs[-1])
    plan = FusionPlan((G(fwd), G(bwd, "backward")))
    check_fusion(strategy, plan, MACHINE)
    session = train_like_one_device(model, strategy.with_fusion(plan))
    assert fused_tasks(session)


# ---- random valid plans --------------------------------------------------------------------------

@st.composite
def random_plans(draw, strategy):
    ops = list(strategy.wiring().ops)
    groups, owned = [], set()
    for _ in range(draw(st.integers(0, 3))):
        n = draw(st.integers(2, 4))
        i = draw(st.integers(0, len(ops) - n))
        phase = draw(st.sampled_from(["forward", "backward"]))
        run = tuple(ops[i:i + n])
        if any((o, phase) in owned for o in run):
            continue
        groups.append(G(run, phase))
        owned.update((o, phase) for o in run)
    order = all_weights(strategy)
    buckets, i = [], 0
    while i < len(order):
        n = draw(st.integers(1, 4))
        if n > 1:
            buckets.append(order[i:i + n])
        i += n
    return FusionPlan(tuple(groups), tuple(b for b in buckets if len(b) > 1))


def _valid(strategy, plan) -> bool:
    try:
        check_fusion(strategy, plan, MACHINE)
    except StrategyError:
        return False
    return True


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data(), model=st.sampled_from(["mlp", "cnn"]))
def test_random_valid_plans_train_like_one_device(data, model):
    strategy = data_parallel(pcg_of(model), MACHINE, 4)
    plan = data.draw(random_plans(strategy))
    if not _valid(strategy, plan):  # buckets that end inside a gradient rank: drop the buckets
        plan = FusionPlan(plan.groups)
        if not _valid(strategy, plan):
            plan = FusionPlan()
    train_like_one_device(model, strategy.with_fusion(plan) if plan else strategy)


# ---- element-wise chains as one expression ---------------------------------------------------------

def _chain_session(plan):
    strategy = data_parallel(pcg_of("mlp"), MACHINE, 4)
    return train_like_one_device("mlp", strategy.with_fusion(plan))


def test_without_vml_a_transcendental_chain_runs_member_by_member(monkeypatch):
    import numexpr
    monkeypatch.setattr(numexpr, "use_vml", False, raising=False)
    session = _chain_session(FusionPlan((G(("s1", "s2", "t1")),)))
    assert session.plan.chains and session.executor.chain_runs == 0   # NumPy's SIMD tanh beats numexpr's libm


def test_elementwise_chain_runs_as_one_numexpr_expression(vml):
    session = _chain_session(FusionPlan((G(("s1", "s2", "t1")),)))
    tasks = fused_tasks(session)
    assert {t.index for t in tasks} == set(session.plan.chains)  # every piece's task is one expression
    assert session.executor.chain_runs == STEPS * len(tasks)
    chain = session.plan.chains[tasks[0].index]
    assert chain.chain.text() == "tanh(((x0 * c0) + c1))"
    assert len(chain.internal) >= 1  # s1's and s2's outputs are never written


def test_chain_whose_intermediate_a_backward_reads_runs_member_by_member():
    # t1's output is read by tanh's backward: it must exist, so no one-expression evaluation
    session = _chain_session(FusionPlan((G(("t1", "s3")),)))
    assert fused_tasks(session) and not session.plan.chains and session.executor.chain_runs == 0


def test_chain_gives_the_member_kernels_values_bitwise():
    plan = FusionPlan((G(("s1", "s2")),))   # arithmetic only: bitwise the member kernels' result
    pcg = pcg_of("mlp")
    strategy = data_parallel(pcg, MACHINE, 4).with_fusion(plan)
    w0 = weights_for(pcg, DT)
    inputs, labels = batch(pcg, LOSS)
    a = Session(strategy, MACHINE, optimizer="sgd", loss=LOSS, weights=w0, **SGD)
    b = Session(strategy, MACHINE, optimizer="sgd", loss=LOSS, weights=w0, **SGD)
    assert a.plan.chains
    b.plan.chains.clear()   # the member-by-member path
    for _ in range(STEPS):
        assert a.step(inputs, labels).loss == b.step(inputs, labels).loss
    assert a.executor.chain_runs > 0 and b.executor.chain_runs == 0
    wa, wb = a.weights(), b.weights()
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_forward_pass_that_keeps_outputs_computes_the_chains_intermediates():
    pcg = pcg_of("mlp")
    strategy = data_parallel(pcg, MACHINE, 4).with_fusion(FusionPlan((G(("s1", "s2", "t1")),)))
    session = Session(strategy, MACHINE, optimizer="sgd", loss=LOSS, weights=weights_for(pcg, DT), **SGD)
    inputs, _ = batch(pcg, LOSS)
    session.forward(inputs)
    s1 = session.output("s1")
    assert session.executor.chain_runs == 0
    np.testing.assert_allclose(session.output("s2"), s1 + 0.1, rtol=0, atol=1e-15)
    np.testing.assert_allclose(session.output("t1"), np.tanh(s1 + 0.1), rtol=1e-14, atol=0)


# ---- memory -------------------------------------------------------------------------------------

def test_buckets_cost_at_most_their_flat_buffers_in_peak_memory():
    pcg = pcg_of("mlp")
    strategy = data_parallel(pcg, MACHINE, 4)
    w0 = weights_for(pcg, DT)
    inputs, labels = batch(pcg, LOSS)
    peaks, flats = [], defaultdict(int)
    for plan in (None, FusionPlan((), (all_weights(strategy),))):
        s = Session(strategy.with_fusion(plan) if plan else strategy, MACHINE, optimizer="sgd", loss=LOSS,
                    weights=w0, **SGD)
        for _ in range(2):
            r = s.step(inputs, labels)
        peaks.append(r.peak_bytes)
        ex = s.executor
        assert all(ex.live[d] <= ex.peak[d] for d in ex.live)
        held = defaultdict(int)  # after the iteration only weights, optimizer state and the batch are live
        for dev, bufs in ex.mem.items():
            for arr in bufs.values():
                held[dev] += arr.nbytes
        state = defaultdict(int)
        for (key, dev), st_ in ex.opt_state.items():
            state[dev] += sum(v.nbytes for v in st_.values() if hasattr(v, "nbytes"))
        assert all(ex.live[d] == held[d] + state[d] for d in held if d >= 0), (dict(ex.live), dict(held), dict(state))
        if plan:
            for g in s.plan.ring_groups.values():
                if g.segments > 1:
                    for i in range(g.num_members):
                        flats[g.device(i)] += sum(math.prod(hi - lo for lo, hi in b.ranges) * 8
                                                  for b in g.member_buffers(i))
    without, with_ = peaks
    assert flats and set(flats) <= set(with_)
    for dev, peak in with_.items():
        assert peak <= without.get(dev, 0) + flats.get(dev, 0), (dev, peak, without.get(dev), flats.get(dev))


# ---- MPI ----------------------------------------------------------------------------------------

@pytest.mark.mpi
def test_fused_plans_spanning_ranks_train_like_one_device():
    from tests.runtime.test_mpi import mpirun
    r = mpirun(2, "law", script=Path(__file__))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("OK ") == 4, r.stdout


def _mpi_law() -> None:
    """Under ``mpiexec -n 2``: fused data-parallel plans on a 4-device machine (two devices per rank)
    train like one device, their rings (buckets included) spanning the ranks; one with full
    activation recomputation too."""
    global MACHINE
    from flexrt.machine import local_machine
    from flexrt.runtime import mpi
    MACHINE = local_machine(4)
    comm = mpi.world()
    from flexrt.strategy.config import wiring_of
    from flexrt.strategy.recompute import recompute_set
    for model, name, again in [("mlp", "everything", False), ("cnn", "both", False), ("transformer", "duplicate", False),
                               ("mlp", "everything", True)]:
        strategy = data_parallel(pcg_of(model), MACHINE, 4).with_recompute(
            recompute_set(wiring_of(pcg_of(model)), "full", segment_ops=2) if again else ())
        session = train_like_one_device(model, strategy.with_fusion(plan_of(model, name, strategy)))
        assert session.layout is not None and session.layout.size == comm.Get_size() == 2
        spanning = session.executor.group_ranks
        assert any(session.plan.ring_groups[g].segments > 1 for g in spanning), "no bucket spans the ranks"
        assert any(session.executor.role.get(t.index) for t in fused_tasks(session))
        if comm.Get_rank() == 0:
            print(f"OK {model} {name}{' recomputed' if again else ''}", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["law"]:
    _mpi_law()
