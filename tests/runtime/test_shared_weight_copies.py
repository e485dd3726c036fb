"""A weight read on a device that holds no instance of it is copied there once per iteration.

An unrolled RNN reads one LSTM's weights at every step (``shared_op``), and a pipelined model reads
them once per micro-batch: placed on other devices than the weight's instances, every such reader
needs the weight there. The lowering copies each part a device needs once (``WeightPlan.copies``,
one entry per part and device, with all its readers there), sums the readers' gradients of it on
that device, and sends the sum back once (as Legion keeps a valid instance until the weight is
written, and folds reductions locally). Laws: one copy and one gradient transfer per (part,
device); the readers all read it; every such strategy still trains like one device in float64,
serially and threaded, pipelined or not.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import local_machine
from flexrt.model.accuracy import hand_made
from flexrt.simulator.actions import Move
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import random_strategy
from flexrt.strategy.pipeline import pipeline_strategy
from tests.runtime.test_central_law import TOL, compare_with_one_device, weights_for

STEPS, WIDTH, HIDDEN = 4, 6, 8


def rnn(dt=DataType.DT_DOUBLE, batch=8):
    """One LSTM unrolled over ``STEPS`` steps, every step reading the first step's weights."""
    m = FFModel(FFConfig([]))
    h = m.create_tensor([batch, HIDDEN], dt)
    c = m.create_tensor([batch, HIDDEN], dt)
    for s in range(STEPS):
        x = m.create_tensor([batch, WIDTH], dt)
        h, c = m.lstm(x, h, c, HIDDEN, shared_op="lstm0" if s else None, name=f"lstm{s}")
    m.softmax(m.dense(h, 5, name="head"), name="sm")
    return m.pcg


MACHINE = local_machine(2)


def strategies(pcg):
    return {"roundrobin": hand_made(pcg, MACHINE, lambda k, node: ({}, k)),
            "gpipe2x4": pipeline_strategy(pcg, MACHINE, 2, 4, "gpipe"),
            "1f1b2x2": pipeline_strategy(pcg, MACHINE, 2, 2, "1f1b")}


def weight_moves(strategy):
    """(weight, ranges, device, box) of every forward copy of a weight part, and the number of the
    copies' gradient transfers, in the detailed task graph of ``strategy``."""
    sim = Simulator(MACHINE, AnalyticCostModel(), detail=True)
    sim.time_full(strategy)
    moves = [sim.graph.task(i) for i in sim.graph.ids() if isinstance(sim.graph.task(i).action, Move)]
    copies = [(t.action.src.name, t.action.src.index, t.action.dst.device, t.action.dst.ranges) for t in moves
              if t.action.src.kind.name == "WEIGHT"]
    weights = {w for w, *_ in copies}
    # a copy's gradient goes back to a weight instance's gradient: named "grad WEIGHT DEVICE->"
    grads = sum(1 for t in moves if t.name.split(" ")[:2][-1] in weights and t.name.startswith("grad "))
    return copies, grads, sim


@pytest.mark.parametrize("label", ["roundrobin", "gpipe2x4", "1f1b2x2"])
def test_a_weight_part_reaches_a_device_once_per_iteration(label):
    pcg = rnn()
    copies, grads, _ = weight_moves(strategies(pcg)[label])
    assert copies, "the strategy copies no weight: the test would prove nothing"
    # one copy per (part, device), one gradient transfer back per copy
    assert max(Counter(copies).values()) == 1, Counter(copies).most_common(3)
    assert grads == len(copies)


def test_the_copies_shrink_the_pipelined_iteration():
    """Before, the pipelined RNN copied each shared weight to the other stage once per step and
    micro-batch (and its gradient back): 4 steps x 4 micro-batches / 2 stages = 8 copies of it."""
    pcg = rnn()
    copies, _, _ = weight_moves(strategies(pcg)["gpipe2x4"])
    per_weight = Counter(w for w, *_ in copies)
    assert set(per_weight.values()) == {1}


@pytest.mark.parametrize("mode", ["serial", "threads"])
@pytest.mark.parametrize("label", ["roundrobin", "gpipe2x4", "1f1b2x2"])
def test_copied_weights_train_like_one_device(label, mode):
    pcg = rnn()
    compare_with_one_device(label, pcg, strategies(pcg)[label], MACHINE, "sparse_categorical_crossentropy",
                            TOL[DataType.DT_DOUBLE], weights_for(pcg, DataType.DT_DOUBLE), mode=mode)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_random_strategies_of_a_shared_weight_train_like_one_device(seed):
    pcg = rnn()
    strategy = random_strategy(pcg, MACHINE, seed)
    copies, grads, _ = weight_moves(strategy)
    assert max(Counter(copies).values(), default=1) == 1 and grads == len(copies)
    compare_with_one_device(f"random{seed}", pcg, strategy, MACHINE, "sparse_categorical_crossentropy",
                            TOL[DataType.DT_DOUBLE], weights_for(pcg, DataType.DT_DOUBLE))
