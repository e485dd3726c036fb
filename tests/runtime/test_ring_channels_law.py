"""The central law where gradient rings run as several channels (two summit nodes: one ring per
network adapter, ``Machine.ring_channels``): data parallelism over both nodes, gradient buckets
and random strategies train to one device's losses and weights (float64, 1e-10), serially, on
threads and under ``mpiexec -n 2``. The runtime's collective rides on channel 0; the other
channels' tasks only take their time in the simulation the runtime follows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.fusion import FusionPlan, gradient_order

if __name__ == "__main__":  # run by mpiexec (``_mpi_law``): the repository root holds ``tests``
    sys.path.insert(0, str(Path(__file__).parents[2]))
from tests.runtime.test_central_law import compare_with_one_device, weights_for  # noqa: E402

DT = DataType.DT_DOUBLE
LOSS = "mean_squared_error_avg"
SGD = {"lr": 0.05, "momentum": 0.9}
MACHINE = load_machine("summit", nodes=2)


def mlp():
    m = FFModel(FFConfig([]))
    x = m.create_tensor([24, 12], DT)
    t = m.dense(x, 16, ActiMode.AC_MODE_RELU, name="fc1")
    t = m.dense(t, 13, ActiMode.AC_MODE_TANH, name="fc2")    # 13 x 16 + 13: odd element counts split
    m.dense(t, 6, name="fc3")
    return m.pcg


def _channels(session) -> int:
    return sum(1 for t in session.simulator.graph.tasks.values() if "channel 1 ring" in t.name)


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_data_parallel_over_two_nodes_with_two_channels(mode):
    pcg = mlp()
    session = compare_with_one_device("mlp", pcg, data_parallel(pcg, MACHINE), MACHINE, LOSS, 1e-10,
                                      weights_for(pcg, DT), "sgd", SGD, mode)
    assert _channels(session) > 0


@pytest.mark.parametrize("buckets", ["all", "pairs"])
def test_gradient_buckets_over_two_channels(buckets):
    pcg = mlp()
    strategy = data_parallel(pcg, MACHINE)
    order = [w for w, _ in gradient_order(strategy.wiring())]
    plan = FusionPlan((), (tuple(order),) if buckets == "all" else tuple(
        tuple(order[i:i + 2]) for i in range(0, len(order) - 1, 2)))
    session = compare_with_one_device("mlp", pcg, strategy.with_fusion(plan), MACHINE, LOSS, 1e-10,
                                      weights_for(pcg, DT), "sgd", SGD)
    rings = [g for g in session.plan.ring_groups.values() if g.segments > 1]
    assert len(rings) == len(plan.buckets)          # one collective per bucket: channel 0's
    assert any("channel 1" in t.name and "bucket" in t.name for t in session.simulator.graph.tasks.values())


@pytest.mark.parametrize("seed", range(3))
def test_random_strategies_on_two_nodes(seed):
    pcg = mlp()
    compare_with_one_device("mlp", pcg, random_strategy(pcg, MACHINE, seed), MACHINE, LOSS, 1e-10,
                            weights_for(pcg, DT), "sgd", SGD)


@pytest.mark.mpi
def test_two_channels_under_mpi():
    from tests.runtime.test_mpi import mpirun
    r = mpirun(2, "law", script=Path(__file__))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("OK ") == 2, r.stdout


def _mpi_law() -> None:
    """Under ``mpiexec -n 2``: data parallelism over both nodes, unfused and in one bucket."""
    from flexrt.runtime import mpi
    comm = mpi.world()
    for name in ("unfused", "bucket"):
        pcg = mlp()
        strategy = data_parallel(pcg, MACHINE)
        if name == "bucket":
            strategy = strategy.with_fusion(FusionPlan((), (tuple(w for w, _ in gradient_order(strategy.wiring())),)))
        session = compare_with_one_device("mlp", pcg, strategy, MACHINE, LOSS, 1e-10, weights_for(pcg, DT), "sgd",
                                          SGD)
        assert session.layout is not None and session.layout.size == comm.Get_size() == 2
        assert _channels(session) > 0
        if comm.Get_rank() == 0:
            print(f"OK {name}", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["law"]:
    _mpi_law()


def test_serial_peak_memory_equals_the_prediction_with_channels():
    from flexrt.runtime.session import Session
    from tests.runtime.test_central_law import batch
    from tests.runtime.test_memory_peak import assert_exact
    pcg = mlp()
    s = Session(data_parallel(pcg, MACHINE), MACHINE, optimizer="sgd", loss=LOSS, weights=weights_for(pcg, DT), **SGD)
    assert _channels(s) > 0
    inputs, labels = batch(pcg, LOSS)
    s.step(inputs, labels)
    for _ in range(2):
        assert_exact(s, s.step(inputs, labels))
