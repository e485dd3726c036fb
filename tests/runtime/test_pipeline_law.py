"""The pipeline law: a pipelined strategy, whatever its schedule, stages and micro-batches, trains to
the same losses and weights as one device (float64 to 1e-10: gradient accumulation over
micro-batches is exact up to summation order), in the serial and the threaded executor."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.strategy.pipeline import pipeline_strategy
from tests.runtime.test_central_law import (MODELS, PIPELINES, TOL, compare_with_one_device, machine, strategy_of,
                                            train_and_compare, weights_for)

__all__ = ["machine"]  # the fixture


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("schedule", PIPELINES)
def test_pipelined_strategies_train_like_one_device(model, schedule, machine):
    train_and_compare(model, DataType.DT_DOUBLE, lambda pcg: strategy_of(schedule, pcg, machine), machine)


@pytest.mark.parametrize("schedule", PIPELINES)
def test_pipelined_strategies_with_threads_and_adam(schedule, machine):
    train_and_compare("mlp", DataType.DT_DOUBLE, lambda pcg: strategy_of(schedule, pcg, machine), machine,
                      optimizer="adam", params={"alpha": 0.01}, mode="threads")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(["mlp", "cnn", "transformer"]), stages=st.sampled_from([1, 2, 4]),
       micro_batches=st.sampled_from([1, 2, 4, 8]), schedule=st.sampled_from(["gpipe", "1f1b"]))
def test_any_stages_and_micro_batches_train_like_one_device(model, stages, micro_batches, schedule, machine):
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    rows = next(n for n in m.pcg.nodes if n.op_type.value == "input").attrs.shape.dims[0]
    if rows % micro_batches:
        return
    ops = sum(1 for n in m.pcg.nodes if n.op_type.value not in ("input", "weight"))
    if ops < stages:
        return
    strategy = pipeline_strategy(m.pcg, machine, stages, micro_batches, schedule)
    compare_with_one_device(f"{model} {schedule} p={stages} m={micro_batches}", m.pcg, strategy, machine, loss,
                            TOL[DataType.DT_DOUBLE], weights_for(m.pcg, DataType.DT_DOUBLE))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(["mlp", "cnn", "transformer", "dlrm"]), stages=st.sampled_from([2, 4]),
       micro_batches=st.sampled_from([2, 4]), schedule=st.sampled_from(["1f1b", "zb-h1"]), seed=st.integers(0, 10**6))
def test_stages_split_any_way_the_pipeline_search_may_train_like_one_device(model, stages, micro_batches, schedule,
                                                                            seed, machine):
    """Every operator takes random degrees of the whole space within its block (what ``pipeline_mcmc``'s
    configuration move draws from: tensor, reduction and sample splits, or one device)."""
    import random
    from flexrt.search.pipelines import BlockDegrees
    from flexrt.strategy import SearchSpace
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    rows = next(n for n in m.pcg.nodes if n.op_type.value == "input").attrs.shape.dims[0]
    ops = [n.name for n in m.pcg.nodes if n.op_type.value not in ("input", "weight")]
    if rows % micro_batches or len(ops) < stages:
        return
    rng, blocks = random.Random(seed), BlockDegrees(m.pcg, machine, SearchSpace.full())
    width = machine.num_devices // stages
    degrees = {name: rng.choice(blocks.of(name, micro_batches, width)) for name in ops}
    strategy = pipeline_strategy(m.pcg, machine, stages, micro_batches, schedule, degrees=degrees)
    split = sum(1 for d in degrees.values() if any(v > 1 and k != "sample" for k, v in d.items()))
    compare_with_one_device(f"{model} {schedule} p={stages} m={micro_batches} seed={seed} ({split} split)", m.pcg,
                            strategy, machine, loss, TOL[DataType.DT_DOUBLE], weights_for(m.pcg, DataType.DT_DOUBLE))


@pytest.mark.parametrize("model, micro_batches", [("mlp", 2), ("transformer", 2), ("dlrm", 2), ("transformer", 4)])
def test_stages_mapped_by_unitys_dp_train_like_one_device(model, micro_batches, machine):
    """``best_pipeline``'s mapped candidates: every block as Unity's DP maps the whole batch on it
    (``mapped_blocks``), moved to its stage's block. The transformer's 4 micro-batches hold one
    sample each, where a residual add has no batch axis (it failed: 'view ... has 6 dimensions but
    the degrees ... have 5')."""
    from flexrt.kernels.optimizers import OptimizerKind
    from flexrt.search.pipelines import mapped_blocks
    from flexrt.search.unity.costs import LocalCosts
    from flexrt.search.unity.mapping import MappingDP
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.strategy import SearchSpace
    m, loss = MODELS[model](DataType.DT_DOUBLE)
    # every operator on 2 or more devices: the DP's tensor, reduction, head and replica splits and
    # placements inside the block (these tiny models would otherwise stay whole on one device)
    costs = LocalCosts(machine, AnalyticCostModel(), SearchSpace.full().kinds, OptimizerKind.SGD, 2)

    def block_mapping(graph, width):
        return MappingDP(machine, costs, devices=width).solve(graph).configs

    strategy = pipeline_strategy(m.pcg, machine, 2, micro_batches, "1f1b", place=mapped_blocks(m.pcg, 4, block_mapping))
    compare_with_one_device(f"{model} mapped blocks", m.pcg, strategy, machine, loss, TOL[DataType.DT_DOUBLE],
                            weights_for(m.pcg, DataType.DT_DOUBLE))
