"""Pipelines in the simulator: the bubble laws and the activation-memory laws of the schedules."""

from __future__ import annotations

import pytest

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import local_machine
from flexrt.experiments.host import UniformCost
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.pipeline_lowering import idle_fractions as idle_fractions_of
from flexrt.simulator.simulate import Simulator
from flexrt.simulator.task_graph import TaskKind
from flexrt.strategy.pipeline import pipeline_strategy


UniformFree = UniformCost   # every operator the same forward and backward time; the rest free


def chain(layers: int, batch: int, width: int = 32):
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, width], DataType.DT_FLOAT)
    for i in range(layers):
        t = m.dense(t, width, name=f"fc{i}")
    return m.pcg


def idle_fractions(schedule: str, p: int, m: int, v: int = 1, ratio: float = 2.0) -> list[float]:
    """Per device: the share of the pipeline's span (first forward to last backward) it is idle."""
    machine = local_machine(p)
    strategy = pipeline_strategy(chain(2 * p * v, 4 * m), machine, p, m, schedule, chunks=v)
    cost = type("Uniform", (UniformFree,), {"backward_ratio": ratio})()
    sim = Simulator(machine, cost, "sgd")
    timeline = sim.full(strategy).timeline
    got = idle_fractions_of(sim.graph, timeline)
    assert sorted(got) == list(range(p))
    return list(got.values())


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 16), (3, 5)])
def test_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, p, m):
    for f in idle_fractions(schedule, p, m):
        assert f == pytest.approx((p - 1) / (m + p - 1), abs=1e-6)


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (2, 6, 3)])
@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_interleaved_bubble_is_v_times_smaller(p, m, v, ratio):
    """Bubble over busy time: (p - 1) / m for 1F1B, (p - 1) / (v m) interleaved (Megatron-LM)."""
    for f in idle_fractions("interleaved", p, m, v, ratio):
        assert f / (1 - f) == pytest.approx((p - 1) / (v * m), abs=1e-6)
    plain = idle_fractions("1f1b", p, m, 1, ratio)[0]
    assert plain / (1 - plain) == pytest.approx(v * (p - 1) / (v * m), abs=1e-6)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 16), (3, 5), (8, 16), (4, 4)])
def test_zero_bubble_h1_bubble_is_a_third_of_1f1b(p, m):
    """F, B and W of equal time (the backward twice the forward, W the forward's): ZB-H1's bubble
    over busy time is (p - 1) / (3m) (Qi et al. 2024, §2.1), a third of 1F1B's (p - 1) / m."""
    zb = idle_fractions("zb-h1", p, m)
    for f in zb:
        assert f / (1 - f) == pytest.approx((p - 1) / (3 * m), abs=1e-6)
    one = idle_fractions("1f1b", p, m)[0]
    assert zb[0] < one


def test_zero_bubble_splits_backward_of_weighted_operators_only():
    machine = local_machine(2)
    m = FFModel(FFConfig([]))
    t = m.dense(m.create_tensor([16, 8], DataType.DT_FLOAT), 8, name="fc0")
    m.softmax(m.relu(m.dense(t, 8, name="fc1"), name="act"), name="sm")
    strategy = pipeline_strategy(m.pcg, machine, 2, 4, "zb-h1")
    sim = Simulator(machine, UniformFree(), "sgd")
    sim.full(strategy)
    names = [t.name for t in sim.graph.tasks.values()]
    assert sum(n.startswith("wgrad fc") for n in names) == 2 * 4          # 2 weighted operators x 4 micro-batches
    assert not any(n.startswith(("wgrad act", "wgrad sm")) for n in names)
    wgrad = [t for t in sim.graph.tasks.values() if t.name.startswith("wgrad fc0")]
    assert all(t.exe_s == pytest.approx(1e-3) for t in wgrad)            # W: the forward's time, B the rest


def peaks(schedule: str, p: int, m: int) -> list[int]:
    machine = local_machine(p)
    strategy = pipeline_strategy(chain(2 * p, 16 * m, 64), machine, p, m, schedule)
    r = Simulator(machine, AnalyticCostModel(), "sgd").full(strategy)
    return [r.peak_bytes[d] for d in range(p)]


def test_activation_memory_gpipe_holds_m_micro_batches_1f1b_at_most_p():
    p = 4
    per_mb = 3 * 16 * 64 * 4    # a stage's operand, output and next operand of one micro-batch (float32)
    g8, g16 = peaks("gpipe", p, 8), peaks("gpipe", p, 16)
    assert all(b - a == 8 * per_mb for a, b in zip(g8[:-1], g16[:-1]))   # GPipe: m micro-batches live
    o8, o16, o32 = peaks("1f1b", p, 8), peaks("1f1b", p, 16), peaks("1f1b", p, 32)
    assert o8 == o16 == o32                                              # 1F1B: bounded, whatever m
    assert all(o < g for o, g in zip(o16, g16))
    # stage s holds p - s micro-batches at most: the first stage the most, each later one less
    assert o16 == sorted(o16, reverse=True) and o16[0] > o16[-1]
    # ZB-H1: every stage holds p micro-batches (until their W), bounded whatever m; the first stage
    # as under 1F1B, the later ones more (their W's keep what the backward reads: flexrt's W reads
    # the whole backward's operands, where the paper counts only the weight operators' inputs)
    z16, z32 = peaks("zb-h1", p, 16), peaks("zb-h1", p, 32)
    assert z16 == z32 and z16[0] == o16[0] and all(z >= o for z, o in zip(z16, o16))


def test_gradients_accumulate_as_micro_batches_finish():
    """One REDUCE per weight instance and micro-batch after the first, each after that micro-batch's
    backward; the synchronization and update run once."""
    p, m = 2, 4
    machine = local_machine(p)
    strategy = pipeline_strategy(chain(2 * p, 8 * m), machine, p, m, "1f1b")
    sim = Simulator(machine, AnalyticCostModel(), "sgd")
    sim.full(strategy)
    tasks = [sim.graph.task(t) for t in sim.graph.ids()]
    weights = 2 * (2 * p)       # kernel and bias per layer
    assert sum(t.kind is TaskKind.REDUCE and t.name.startswith("accumulate") for t in tasks) == weights * (m - 1)
    assert sum(t.kind is TaskKind.UPDATE for t in tasks) == weights


def test_static_activation_memory_counts_the_micro_batches_in_flight():
    """What the simulator checks against device memory before running: the activations of as many
    micro-batches as the schedule holds at once (GPipe m, 1F1B p - s on stage s), not all m."""
    p, m = 4, 16
    machine = local_machine(p)
    acts = {}
    for schedule in ("gpipe", "1f1b"):
        strategy = pipeline_strategy(chain(2 * p, 16 * m, 64), machine, p, m, schedule)
        r = Simulator(machine, AnalyticCostModel(), "sgd").full(strategy)
        acts[schedule] = [r.memory_bytes[d]["activations"] for d in range(p)]
        assert [strategy.pipeline.in_flight(s) for s in range(p)] == ([m] * p if schedule == "gpipe"
                                                                     else [p - s for s in range(p)])
    per_mb = acts["gpipe"][0] // m
    assert acts["1f1b"] == [(p - s) * per_mb for s in range(p)]


@pytest.mark.parametrize("schedule, chunks, recompute, precision", [
    ("gpipe", 1, "none", "fp32"), ("1f1b", 1, "full", "bf16"), ("interleaved", 2, "selective", "fp32"),
    ("zb-h1", 1, "full", "fp32"), ("1f1b", 1, "selective", "bf16"), ("zb-h1", 1, "none", "bf16")])
def test_timing_only_graph_equals_the_runtimes(schedule, chunks, recompute, precision):
    """Lowered for timing only (no detail: gradient accumulation in one compiled call, no parts or
    actions) a pipelined Megatron-LM strategy has exactly the tasks (kinds, devices, times,
    priorities, owners), dependencies and memory of the graph the runtime executes (both one-shot
    builds: an incremental one numbers priorities within owners, with the same order)."""
    from flexrt.examples.gpt import build_model
    from flexrt.ir.precision import with_precision
    from flexrt.machine import load_machine
    from flexrt.search.baselines import megatron_lm
    from flexrt.strategy.config import wiring_of
    from flexrt.strategy.recompute import recompute_set
    base = build_model(FFConfig(["-b", "16"]), "gpt-tiny", layers=4, hidden=64, heads=8, seq_length=32,
                       vocab=128).pcg
    if precision == "bf16":
        base = with_precision(base, "bf16")
    machine = load_machine("dgx_a100", nodes=1)
    strategy = megatron_lm(base, machine, tensor=4, pipeline=2, micro_batches=4, schedule=schedule, chunks=chunks)
    if recompute != "none":
        strategy = strategy.with_recompute(recompute_set(wiring_of(base), recompute))
    graphs = []
    for detail in (True, False):
        sim = Simulator(machine, AnalyticCostModel(), "adam", detail=detail, incremental=False)
        sim.full(strategy)
        core = sim.lowering.graph.core
        cols = core.columns()
        graphs.append(([cols[k].tolist() for k in ("kind", "device", "exe", "priority", "owner", "transfer")],
                       [a.tolist() for a in core.edge_arrays()], sim.lowering.memory_by_device()))
    assert graphs[0] == graphs[1]
    assert any(k == 3 for k in graphs[0][0][0])            # REDUCE tasks: micro-batches accumulated
