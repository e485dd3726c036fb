"""Stage cuts (flexrt.strategy.stage_cuts): the bytes crossing each cut, the links' seconds per byte,
and the partition against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import load_machine
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.strategy import pipeline as P
from flexrt.strategy.config import wiring_of
from flexrt.strategy.stage_cuts import crossing_bytes, cut_stages, seconds_per_byte


def _residual_chain():
    m = FFModel(FFConfig([]))
    x = m.create_tensor([4, 8], DataType.DT_FLOAT)
    a = m.dense(x, 8, name="a")            # read by b and by the add: crosses once
    b = m.dense(a, 16, name="b")
    c = m.dense(b, 8, name="c")
    m.add(a, c, name="add")
    return m.pcg


def test_crossing_bytes_count_each_tensor_once_per_cut():
    w = wiring_of(_residual_chain())
    assert w.ops == ["a", "b", "c", "add"]
    a, b, c = 4 * 8 * 4, 4 * 16 * 4, 4 * 8 * 4
    # cut j falls before operator j; the input is loaded in place and never crosses
    assert crossing_bytes(w).tolist() == [0, a, a + b, a + c, 0]


def test_seconds_per_byte_is_the_busiest_links_share():
    summit = load_machine("summit", nodes=2)
    # six pairs node 0 -> node 1, three through each network port of 12.5 GB/s: 25 GB/s for the block
    assert seconds_per_byte(summit, 2) == pytest.approx(1 / 25e9)
    assert seconds_per_byte(summit, 1) == 0.0


def _cost(work, comm, cuts):
    bounds = [0, *cuts, len(work)]
    return [max(sum(work[i:j]), comm[i] + comm[j]) for i, j in zip(bounds, bounds[1:])]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_partition_is_the_brute_forces_best(data):
    n = data.draw(st.integers(1, 10))
    count = data.draw(st.integers(1, n))
    work = data.draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    crossing = [0] + data.draw(st.lists(st.integers(0, 30), min_size=n - 1, max_size=n - 1)) + [0]
    ops = [f"op{k}" for k in range(n)]
    stage_of = cut_stages(ops, work, np.array(crossing, dtype=float), count, 1.0)
    stages = [stage_of[o] for o in ops]
    assert stages == sorted(stages) and set(stages) == set(range(count))
    cuts = [k for k in range(1, n) if stages[k] != stages[k - 1]]
    every = [_cost(work, crossing, list(c)) for c in itertools.combinations(range(1, n), count - 1)]
    best = min(max(c) for c in every)
    ours = _cost(work, crossing, cuts)
    assert max(ours) == best
    assert sum(x * x for x in ours) == min(sum(x * x for x in c) for c in every if max(c) == best)


@pytest.mark.parametrize("model, flags", [("transformer", ["-b", "16"]), ("bert_large", ["-b", "24", "--seq-length", "64"])])
def test_cuts_are_never_worse_than_balancing_work_alone(model, flags):
    """By the cost the cuts minimize, the work-balanced stages are never better."""
    from flexrt.model import load_model
    pcg = load_model(model, flags).model.pcg
    machine, cm = load_machine("summit", nodes=4), AnalyticCostModel()
    for p in (2, 4, 8):
        mb = P.micro_batch_pcg(pcg, p)
        weight = P._time_weight(mb, machine, cm, lambda name: P.config_at(
            mb.pcg, mb.pcg.node_by_name(mb.copies[name][0]), machine, P._block_split(machine.num_devices // p), 0))
        w = wiring_of(pcg)
        work = [weight(w.nodes[o]) for o in w.ops]
        comm = crossing_bytes(w) * seconds_per_byte(machine, p)
        ours = cut_stages(w.ops, work, crossing_bytes(w), p, seconds_per_byte(machine, p))
        balanced = P._balanced_stages(pcg, p, weight)

        def worst(stage_of):
            st_ = [stage_of[o] for o in w.ops]
            return max(_cost(work, comm, [k for k in range(1, len(st_)) if st_[k] != st_[k - 1]]))
        assert worst(ours) <= worst(balanced) * (1 + 1e-12)


def test_a_pipeline_cut_by_work_alone_and_a_bad_cut():
    from flexrt.errors import StrategyError
    from flexrt.model import load_model
    pcg = load_model("transformer", ["-b", "16"]).model.pcg
    machine, cm = load_machine("summit", nodes=2), AnalyticCostModel()
    mb = P.micro_batch_pcg(pcg, 4)
    weight = P._time_weight(mb, machine, cm, lambda name: P.config_at(
        mb.pcg, mb.pcg.node_by_name(mb.copies[name][0]), machine, P._block_split(machine.num_devices // 4), 0))
    s = P.pipeline_strategy(pcg, machine, 4, 4, "1f1b", cost_model=cm, cut="work")
    assert s.pipeline.stage_of == P._balanced_stages(pcg, 4, weight)
    with pytest.raises(StrategyError, match="expected one of busiest, work"):
        P.pipeline_strategy(pcg, machine, 4, 4, "1f1b", cost_model=cm, cut="flops")


def test_the_pipeline_search_tries_its_best_candidates_cut_by_work_too():
    from flexrt.kernels.optimizers import OptimizerKind
    from flexrt.model import load_model
    from flexrt.search.pipelines import best_pipeline
    from flexrt.search.pipelines import pipeline_candidates
    from flexrt.simulator.simulate import Simulator
    pcg = load_model("transformer", ["-b", "16"]).model.pcg
    machine, cm = load_machine("summit", nodes=2), AnalyticCostModel()
    notes = {}
    best_pipeline(pcg, machine, cm, OptimizerKind.SGD, budget=2, log_notes=notes)
    times = notes["pipeline_candidates_s"]
    by_work = [k for k in times if k.endswith(", stages by work")]
    assert len(by_work) == 3
    kwargs = dict(pipeline_candidates(pcg, machine))[by_work[0][:-len(", stages by work")]]
    sim = Simulator(machine, cm, detail=False, incremental=False)
    sim.full(P.pipeline_strategy(pcg, machine, cost_model=cm, cut="work", **kwargs))
    assert times[by_work[0]] == pytest.approx(sim.iteration_time(), rel=1e-12)   # that cut, simulated
