"""The pipeline searches' operator configurations within a stage's block: MCMC's configuration move
(``pipeline_mcmc`` with a space) and Unity's DP mapping each block (``mapped_blocks``)."""

from __future__ import annotations

import math

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.search import SearchRequest, search
from flexrt.search.pipelines import BlockDegrees, mapped_blocks
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import SearchSpace, data_parallel
from flexrt.strategy.pipeline import micro_batch_pcg, pipeline_strategy


def mlp(batch=64, layers=6, width=64):
    m = FFModel(FFConfig([]))
    t = m.create_tensor([batch, width], DataType.DT_FLOAT)
    for i in range(layers):
        t = m.dense(t, width, ActiMode.AC_MODE_RELU, name=f"fc{i}")
    m.softmax(t, name="sm")
    return m.pcg


def test_one_micro_batch_is_the_first_copy_of_all():
    pcg = mlp(64)
    whole, one = micro_batch_pcg(pcg, 8), micro_batch_pcg(pcg, 8, built=1)
    assert set(one.copies) == set(whole.copies) and all(len(c) == 1 for c in one.copies.values())
    for name, copies in one.copies.items():
        a, b = one.pcg.node_by_name(copies[0]), whole.pcg.node_by_name(whole.copies[name][0])
        assert one.pcg.output_shapes(a.id) == whole.pcg.output_shapes(b.id)
    for bad in (0, 9, True, "1"):
        with pytest.raises(StrategyError, match="built"):
            micro_batch_pcg(pcg, 8, built=bad)


def test_block_degrees_divide_the_block_and_fit_the_micro_batch():
    machine = load_machine("dgx1_v100")
    blocks = BlockDegrees(mlp(64), machine, SearchSpace.full())
    for m, width in ((4, 4), (16, 2), (64, 8)):
        options = blocks.of("fc1", m, width)
        assert options and all(width % math.prod(d.values()) == 0 for d in options)
        # the sample degree divides the micro-batch (64 / m rows)
        assert all((64 // m) % d.get("sample", 1) == 0 for d in options)
        assert any(d.get("out", 1) > 1 for d in options)           # parameter splits are offered
    only = BlockDegrees(mlp(64), machine, SearchSpace())
    assert all(set(k for k, v in d.items() if v > 1) <= {"sample", "dim0"} for d in only.of("fc1", 4, 4))
    assert blocks.kept({"fc1": {"sample": 8, "dim0": 8}}, 16, 8) == {}          # 4 rows: no longer valid


def test_pipeline_mcmc_searches_operator_configurations_within_blocks():
    machine = load_machine("dgx1_v100")
    pcg = mlp(64)
    request = SearchRequest(pcg, machine, AnalyticCostModel(), budget=40, seed=2, space=SearchSpace.full())
    a, b = search("pipeline", request), search("pipeline", request)
    assert a.cost_s == b.cost_s and a.log.notes == b.log.notes                # deterministic for a seed
    plan = a.strategy.pipeline
    width = machine.num_devices // plan.stages
    degrees = a.log.notes["operator_degrees"]
    assert degrees, "no configuration move was ever kept"
    for name, want in degrees.items():
        for copy in plan.model.copies[name]:
            node = plan.model.pcg.node_by_name(copy)
            got = {k: v for k, v in a.strategy.configs[node.id].degrees if v > 1}
            assert got == want
            start = (plan.stage_of[name] % plan.stages) * width
            assert a.strategy.configs[node.id].view.start == start
    # the result is what the simulator says of it
    sim = Simulator(machine, AnalyticCostModel(), detail=False, incremental=False)
    assert sim.full(a.strategy).iteration_time_s == pytest.approx(a.cost_s, rel=1e-12)


@pytest.mark.parametrize("stages,micro_batches", [(2, 4), (4, 8), (8, 8)])
def test_blocks_mapped_by_data_parallelism_are_the_default_pipeline(stages, micro_batches):
    """``mapped_blocks`` given each block's data parallelism places every operator as ``pipeline_strategy``
    does by default: the same configurations, the same simulated time."""
    machine, cost = load_machine("dgx1_v100"), AnalyticCostModel()
    pcg = mlp(64, layers=8)
    width = machine.num_devices // stages

    def block_data_parallel(graph, w):
        return data_parallel(graph, machine, w).configs

    kw = {"stages": stages, "micro_batches": micro_batches, "schedule": "1f1b"}
    plain = pipeline_strategy(pcg, machine, cost_model=cost, **kw)
    mapped = pipeline_strategy(pcg, machine, cost_model=cost, place=mapped_blocks(pcg, width, block_data_parallel),
                               **kw)
    assert mapped.configs == plain.configs
    sim = Simulator(machine, cost, detail=False, incremental=False)
    assert sim.full(mapped).iteration_time_s == sim.full(plain).iteration_time_s


def test_unity_with_pipelines_maps_blocks_and_keeps_the_fastest():
    from flexrt.search.unity import unity
    machine, cost = load_machine("dgx1_v100"), AnalyticCostModel()
    pcg = mlp(64)
    r = unity(pcg, machine, cost, budget=5, progress=False, enable_pipeline=True)
    times = r.log.notes["pipeline_candidates_s"]
    mapped = [label for label in times if label.endswith("blocks mapped")]
    assert mapped
    # distinct plans: a plan's second stage cut does not take another plan's place (it hid the
    # 16-stage x 32-micro-batch plan that maps to 131.7 ms on BERT-Large at 96 GPUs)
    plain = sorted((t, label) for label, t in times.items() if not label.endswith("blocks mapped"))
    best_plans = list(dict.fromkeys(label.split(",")[0] for _, label in plain))[:3]
    assert set(best_plans) <= {label.split(",")[0] for label in mapped}
    assert r.cost_s <= min(times.values()) * (1 + 1e-9)


def test_a_block_mapping_that_does_not_fit_the_micro_batches_is_left_out():
    """The DP maps the whole batch; where its sample split does not divide a micro-batch, that mapped
    candidate is not simulated (and nothing fails)."""
    from flexrt.search.pipelines import best_pipeline
    machine, cost = load_machine("dgx1_v100"), AnalyticCostModel()
    pcg = mlp(16)          # 16 rows: 2 blocks of 4 devices; at 8 micro-batches 2 rows each

    def whole_block_data_parallel(graph, w):
        return data_parallel(graph, machine, w).configs

    notes = {}
    found = best_pipeline(pcg, machine, cost, "sgd", budget=0, log_notes=notes, block_mapping=whole_block_data_parallel,
                          mapped=100)
    assert found
    mapped = [label for label in notes["pipeline_candidates_s"] if label.endswith("blocks mapped")]
    assert mapped and not any(" m=8 " in label or " m=16 " in label for label in mapped if "p=2 " in label)


def test_no_pipeline_says_why():
    request = SearchRequest(mlp(7), load_machine("dgx1_v100"), AnalyticCostModel(), budget=3)
    with pytest.raises(StrategyError, match=r"none of those divides 7; give a batch divisible by 2"):
        search("pipeline", request)
    one = FFModel(FFConfig([]))
    one.dense(one.create_tensor([8, 4], DataType.DT_FLOAT), 4, name="only")
    with pytest.raises(StrategyError, match=r"1 operator\(s\) on 8 device\(s\)"):
        search("pipeline", SearchRequest(one.pcg, load_machine("dgx1_v100"), AnalyticCostModel(), budget=3))


def test_schedules_are_chosen_only_among_those_asked_for():
    """The flushed schedules by default; ``2bw`` (one-step-old weights) only where asked; an unknown
    name is our error naming the valid ones."""
    from flexrt.errors import ConfigError
    from flexrt.search.pipelines import FLUSHED, checked_schedules, pipeline_candidates
    machine = load_machine("dgx1_v100")
    pcg = load_model("transformer", ["-b", "16"]).model.pcg
    assert {kw["schedule"] for _, kw in pipeline_candidates(pcg, machine)} == set(FLUSHED)
    assert {kw["schedule"] for _, kw in pipeline_candidates(pcg, machine, ("2bw",))} == {"2bw"}
    assert checked_schedules("1f1b, 2bw") == ("1f1b", "2bw")
    for bad in ("3bw", "", ["1f1b", "nope"]):
        with pytest.raises(ConfigError, match="valid: gpipe, 1f1b, interleaved, zb-h1, 2bw"):
            checked_schedules(bad)


def test_unity_with_2bw_pipelines_searches_only_them_and_they_beat_the_flushed_ones():
    from flexrt.search.pipelines import FLUSHED, best_pipeline
    from flexrt.search.unity import unity
    machine = load_machine("dgx1_v100")
    pcg = load_model("mlp", ["-b", "64"]).model.pcg
    cost = AnalyticCostModel()
    r = unity(pcg, machine, cost, budget=2, progress=False, enable_pipeline=True, pipeline_schedules=("2bw",))
    tried = r.log.notes["pipeline_candidates_s"]
    assert tried and all("2bw" in label for label in tried)
    assert Simulator(machine, cost, detail=False).time_full(r.strategy) == pytest.approx(r.cost_s, rel=1e-9)
    best = {}
    for schedules in (FLUSHED, ("2bw",)):
        notes = {}
        best_pipeline(pcg, machine, cost, "sgd", budget=0, log_notes=notes, schedules=schedules)
        best[schedules[0]] = min(notes["pipeline_candidates_s"].values())
    assert best["2bw"] < best["gpipe"]          # no fill, drain or waiting synchronization in steady state
