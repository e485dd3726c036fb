"""Concat's part axis (Unity Fig. 16b): a concatenation cut where its inputs meet, placed where the
inputs lie, moves no data, and the Linear after it multiplies each part in place (reduction
parallelism) before one Reduction.

Checked: the pieces' regions (whole inputs or nothing), the reshard plans (every input read on its
own device), the refusal of degrees that cut an input, and the central law (serial, threads, random
strategies, and two MPI ranks in test_mpi.py) in float64 to 1e-10.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import ActiMode, AggrMode, DataType, FFConfig, FFModel
from flexrt.errors import ShapeError, StrategyError
from flexrt.machine import load_machine
from flexrt.simulator.cost_model import AnalyticCostModel
from flexrt.simulator.simulate import simulate
from flexrt.machine.views import view_from_device_ids
from flexrt.strategy import OpConfig, Strategy, all_axes, apply_single, data_parallel, is_compute, random_strategy
from flexrt.strategy.layout import operator_layout
from flexrt.strategy.reshard import reshard_plan
from tests.runtime.test_central_law import _config, compare_with_one_device, weights_for

TOL = 1e-10
LOSS = "mean_squared_error_avg"


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def dlrm_parts(dt=DataType.DT_DOUBLE, tables=3, width=4, hidden=6):
    """A small DLRM whose first top layer has no fused activation (so it may take partial sums):
    the bottom MLP's output and ``tables`` embedding bags of ``width``, concatenated."""
    m = FFModel(FFConfig([]))
    dense_in = m.create_tensor([8, 5], dt)
    sparse = [m.create_tensor([8, 2], DataType.DT_INT64) for _ in range(tables)]
    x = m.dense(dense_in, width, ActiMode.AC_MODE_RELU, name="bot0")
    embs = [m.embedding(s, 10, width, AggrMode.AGGR_MODE_SUM, name=f"emb{i}", dtype=dt) for i, s in enumerate(sparse)]
    z = m.concat([x] + embs, 1, name="interaction")
    z = m.dense(z, hidden, name="top0")
    z = m.relu(z, name="top0.relu")
    m.dense(z, 1, ActiMode.AC_MODE_SIGMOID, name="top1")
    return m.pcg


def fig16b(pcg, machine, parts: int = 4, devices=(0, 1, 2, 3)) -> Strategy:
    """Concat input j on ``devices[j // (inputs / parts)]``, the concat cut in ``parts`` there, the
    first top layer cut along its input features alike; the rest on ``devices[0]``."""
    nodes = {n.name: n for n in pcg.nodes if is_compute(n)}
    concat = nodes["interaction"]
    order = [pcg.node(r.node).name for r in concat.inputs]
    per_part = len(order) // parts
    configs = {}
    for name, node in nodes.items():
        axes = [a.name for a in all_axes(pcg, node)]
        split = {"interaction": "part", "top0": "in"}.get(name)
        degrees = {split: parts} if split else {}
        ids = devices[:parts] if split else [devices[order.index(name) // per_part if name in order else 0]]
        view = view_from_device_ids(machine, tuple(degrees.get(a, 1) for a in axes), ids)
        configs[node.id] = OpConfig(tuple(degrees.items()), view)
    return Strategy.from_configs(pcg, configs)


def _layout(s, machine, name):
    return operator_layout(machine, s.wiring(), name, s.shapes(name), s.view(name))


@pytest.mark.parametrize("parts", [2, 4])
def test_each_piece_reads_its_whole_inputs_and_nothing_else(parts, machine):
    s = fig16b(dlrm_parts(), machine, parts)
    lay = _layout(s, machine, "interaction")
    assert lay.degree["part"] == parts and len(lay.devices) == parts
    per_part = 4 // parts
    for p in range(parts):
        for i, regions in enumerate(lay.operand_regions):
            width = regions[p].ranges[1][1] - regions[p].ranges[1][0]
            assert width == (4 if i // per_part == p else 0), (p, i, regions[p])
            assert regions[p].ranges[0] == (0, 8)
        assert lay.output_regions[0][p].ranges == ((0, 8), (p * 16 // parts, (p + 1) * 16 // parts))
    assert s.shapes("interaction").outputs[0].dims[1].degree == parts
    assert all(x.dims[1].degree == 1 for x in s.shapes("interaction").operands)


def test_fig16b_placement_reads_every_input_where_it_lies(machine):
    pcg = dlrm_parts()
    s = fig16b(pcg, machine)
    w = s.wiring()
    C = _layout(s, machine, "interaction")
    for i in range(4):
        producer = w.producer[("interaction", i)].name
        plan = reshard_plan(_layout(s, machine, producer), 0, C, i, 1)
        assert len(plan.moves) == 1 and not plan.reductions
        q, qdev, p, pdev, box = plan.moves[0]
        assert qdev == pdev == C.devices[p] and p == i, plan.moves
    # the top layer's pieces read the concat's pieces in place and leave partial sums
    T = _layout(s, machine, "top0")
    plan = reshard_plan(C, 0, T, 0, 1)
    assert all(qdev == pdev for _, qdev, _, pdev, _ in plan.moves)
    assert s.shapes("top0").outputs[0].sum_degree == 4
    # against the concat gathered on device 0: the partial sums (6 wide) move instead of the inputs (4 wide)
    gathered = Strategy.from_configs(pcg, {**s.configs, **{
        n.id: _config(pcg, n, {}, 0, machine) for n in pcg.nodes if n.name in ("interaction", "top0")}})
    a = simulate(s, machine, AnalyticCostModel()).moved_elements["activation"]
    b = simulate(gathered, machine, AnalyticCostModel()).moved_elements["activation"]
    assert (a, b) == (2 * 3 * 8 * 6, 2 * 3 * 8 * 4)


def test_part_degrees_that_cut_an_input_are_refused():
    pcg = dlrm_parts()
    concat = next(n for n in pcg.nodes if n.name == "interaction")
    apply_single(pcg, concat, {"part": 2})
    with pytest.raises(ShapeError, match="part degree 3 does not divide"):
        apply_single(pcg, concat, {"part": 3})
    with pytest.raises(ShapeError, match="part degree 8 cuts the output at .*inside an input"):
        apply_single(pcg, concat, {"part": 8})
    m = FFModel(FFConfig([]))
    a, b = m.create_tensor([4, 2]), m.create_tensor([4, 6])
    m.concat([a, b], 1, name="c")
    c = next(n for n in m.pcg.nodes if n.name == "c")
    with pytest.raises(ShapeError, match=r"cuts the output at \[4\], inside an input; the inputs end at \[2, 8\]"):
        apply_single(m.pcg, c, {"part": 2})


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_fig16b_trains_like_one_device(parts, mode, machine):
    pcg = dlrm_parts()
    compare_with_one_device(f"fig16b x{parts}", pcg, fig16b(pcg, machine, parts), machine, LOSS, TOL,
                            weights_for(pcg, DataType.DT_DOUBLE), mode=mode)


def test_part_with_data_parallel_pieces_trains_like_one_device(machine):
    """The part axis beside the sample axis: 2 parts x 2 sample shards on 4 devices."""
    pcg = dlrm_parts()
    s = data_parallel(pcg, machine, 2)
    concat = next(n for n in pcg.nodes if n.name == "interaction")
    s = s.with_config(concat.id, _config(pcg, concat, {"dim0": 2, "part": 2}, 0, machine))
    assert s.shapes("interaction").outputs[0].dims[1].degree == 2
    compare_with_one_device("part x sample", pcg, s, machine, LOSS, TOL, weights_for(pcg, DataType.DT_DOUBLE))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000))
def test_random_strategies_with_parts_train_like_one_device(seed, machine):
    pcg = dlrm_parts()
    try:
        s = random_strategy(pcg, machine, seed)
    except StrategyError:
        s = data_parallel(pcg, machine, 2)
    compare_with_one_device(f"random {seed}", pcg, s, machine, LOSS, TOL, weights_for(pcg, DataType.DT_DOUBLE))


def degrees_drawn(pcg, machine, name: str, axis: str, seeds: int) -> set:
    """The degrees of ``name``'s ``axis`` that random strategies of seeds 0 .. seeds-1 draw."""
    drawn = set()
    for seed in range(seeds):
        try:
            drawn.add(random_strategy(pcg, machine, seed).shapes(name).degree_map.get(axis, 1))
        except StrategyError:
            continue
    return drawn


def test_random_strategies_draw_parts(machine):
    drawn = degrees_drawn(dlrm_parts(), machine, "interaction", "part", 40)
    assert {2, 4} <= drawn


@pytest.mark.parametrize("parts", [2, 4])
def test_measured_peak_memory_equals_the_prediction(parts, machine):
    """A piece that reads nothing of an input holds no buffer for it: the replayed peak per device
    is the measured one, first iteration and steady."""
    from flexrt.runtime.session import Session
    from tests.runtime.test_central_law import SGD, batch
    from tests.runtime.test_memory_peak import check_serial_exact
    pcg = dlrm_parts()
    s = Session(fig16b(pcg, machine, parts), machine, loss=LOSS, weights=weights_for(pcg, DataType.DT_DOUBLE), **SGD)
    check_serial_exact(s, *batch(pcg, LOSS))


def test_a_strategy_file_written_before_the_part_axis_still_loads(machine, tmp_path):
    """A view that stops before the trailing unsplit axes (a file written when Concat had no part
    axis) means them unsplit; one that splits the missing axis, or gives lists of unequal length,
    is still refused."""
    import json
    from flexrt.strategy import load_strategy, save_strategy
    pcg = dlrm_parts()
    s = data_parallel(pcg, machine, 4)
    path = tmp_path / "s.json"
    save_strategy(str(path), s, machine)
    data = json.loads(path.read_text())
    (op,) = [o for o in data["operators"] if o["name"] == "interaction"]
    assert len(op["view"]["strides"]) == 4  # dim0, replica, partial, part
    op["view"]["strides"], op["view"]["projections"] = op["view"]["strides"][:3], op["view"]["projections"][:3]
    path.write_text(json.dumps(data))
    assert load_strategy(str(path), pcg, machine).configs == s.configs
    op["degrees"] = {"part": 2}
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyError, match="strides has 3 entries; give one per axis"):
        load_strategy(str(path), pcg, machine)
