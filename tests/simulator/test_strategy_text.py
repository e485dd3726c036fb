"""FlexFlow's r22.07 strategy text format (simulator/strategy_text.py): exact round trips for data
parallel, hybrid, reduction and random strategies; the layout of degrees (Legion order) and device
ids; operators left out fall back to data parallelism; files for another model or machine fail
with the file and line.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.core import DataType
from flexrt.errors import StrategyError
from flexrt.machine import load_machine
from flexrt.machine.views import MachineView, Projection
from flexrt.strategy import OpConfig, GraphStrategy, data_parallel, is_compute, random_strategy
from flexrt.strategy import (load_text_strategy, save_text_strategy, strategy_from_text,
                                            strategy_to_text)
from tests.runtime.test_central_law import MODELS

INTRA, INTER = Projection.INTRA, Projection.INTER


@pytest.fixture(scope="module")
def p100():
    return load_machine("flexflow_p100", 2)   # 2 nodes x 4 GPUs


def model(name):
    return MODELS[name](DataType.DT_DOUBLE)[0].pcg


def block(text: str, name: str) -> list[str]:
    """The five lines after an operator's name."""
    lines = text.splitlines()
    i = lines.index(name)
    return lines[i + 1:i + 6]


def round_trip(strategy, pcg, machine):
    """Write and read back; a strategy that cuts an Add by operand (Unity Fig. 11b), which FlexFlow's
    format cannot tell from a replica, or a table along its rows (entries), which it cannot tell
    from a bag or column cut, must be refused with that reason instead."""
    for axis in ("operand", "entries"):
        if any(dict(c.degrees).get(axis, 1) > 1 for c in strategy.configs.values()):
            with pytest.raises(StrategyError, match=f"{axis}.*FlexFlow's format"):   # why, naming the axis
                strategy_to_text(strategy, machine)
            return None
    text = strategy_to_text(strategy, machine)
    again = strategy_from_text(text, pcg, machine)
    assert strategy_to_text(again, machine) == text
    assert again.configs == strategy.configs
    return text


def test_data_parallel_text(p100):
    pcg = model("mlp")
    text = round_trip(data_parallel(pcg, p100), pcg, p100)
    assert text.splitlines()[0] == "4"   # fc1, fc2, fc3, softmax
    # output [16, 16]: degrees innermost first (features 1, samples 8); GPUs; ids 0..7
    assert block(text, "fc1") == ["0", "2", "1\t8", "8", "\t".join(map(str, range(8)))]


def test_hybrid_layout_sample_slowest_in_device_ids(p100):
    """fc1 split 2 ways on samples across nodes and 4 ways on outputs within a node: FlexFlow lists
    the output dimension's degree first and varies it fastest in the device ids."""
    pcg = model("mlp")
    base = data_parallel(pcg, p100)
    fc1 = pcg.node_by_name("fc1").id
    view = MachineView(0, (1, 1), (INTER, INTRA))   # fc1's axes (it has a ReLU): dim0, out
    s = base.with_config(fc1, OpConfig((("dim0", 2), ("out", 4)), view))
    text = round_trip(s, pcg, p100)
    assert block(text, "fc1") == ["0", "2", "4\t2", "8", "0\t1\t2\t3\t4\t5\t6\t7"]
    # out across nodes, samples within: the same devices in another order
    view = MachineView(0, (1, 1), (INTRA, INTER))
    s = base.with_config(fc1, OpConfig((("dim0", 2), ("out", 2)), view))
    text = round_trip(s, pcg, p100)
    assert block(text, "fc1") == ["0", "2", "2\t2", "4", "0\t4\t1\t5"]


def test_reduction_axis_is_an_extra_outermost_dimension(p100):
    pcg = model("mlp")
    fc3 = pcg.node_by_name("fc3").id
    view = MachineView(2, (1, 1, 2, 1), (INTRA,) * 4)   # fc3's axes (no activation): dim0, out, in, partial
    s = data_parallel(pcg, p100).with_config(fc3, OpConfig((("in", 2),), view))
    text = round_trip(s, pcg, p100)
    assert block(text, "fc3") == ["0", "3", "1\t1\t2", "2", "2\t4"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_named_and_random_strategies_round_trip(name, p100):
    pcg = model(name)
    for seed in range(3):
        round_trip(random_strategy(pcg, p100, seed), pcg, p100)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 100_000), nodes=st.sampled_from([1, 2, 4]))
def test_random_strategies_round_trip_exactly(name, seed, nodes):
    machine = load_machine("flexflow_p100", nodes)
    pcg = model(name)
    round_trip(random_strategy(pcg, machine, seed), pcg, machine)


def test_missing_operators_fall_back_to_data_parallel(p100):
    pcg = model("mlp")
    s = strategy_from_text("1\nfc2\n0\n2\n2\t1\n2\n0\t1\n", pcg, p100)
    dp = data_parallel(pcg, p100).configs
    fc2 = pcg.node_by_name("fc2").id
    assert s.configs[fc2].degree_map == {"out": 2}
    assert all(c == dp[nid] for nid, c in s.configs.items() if nid != fc2)
    assert strategy_from_text("0\n", pcg, p100).configs == dp


def test_save_and_load_file(p100, tmp_path):
    pcg = model("cnn")
    s = random_strategy(pcg, p100, 7)
    path = tmp_path / "cnn.txt"
    save_text_strategy(str(path), s, p100)
    assert load_text_strategy(str(path), pcg, p100).configs == s.configs
    assert path.read_text() == strategy_to_text(s, p100)


@pytest.mark.parametrize("text, message", [
    ("1\nconv9\n0\n2\n1\t8\n8\n0\t1\t2\t3\t4\t5\t6\t7\n", r"<text>:2: no operator named 'conv9'.*another model"),
    ("1\nfc1\n0\n2\n1\t16\n16\n" + "\t".join(map(str, range(16))) + "\n",
     r"<text>:7: 'fc1' uses device 8 but machine 'flexflow_p100' has devices 0..7.*another machine"),
    ("1\nfc1\n0\n2\n1\t4\n3\n0\t1\t2\n", r"<text>:6: 'fc1' lists 3 devices but its degrees \[1, 4\] make 4"),
    ("1\nfc1\n0\n2\n1\t4\n4\n0\t1\t2\n", r"<text>:7: expected 4 value\(s\) for the 4 device ids of 'fc1', got 3"),
    ("1\nfc1\n0\n4\n1\t1\t1\t4\n4\n0\t1\t2\t3\n", r"<text>:4: 'fc1' has 4 dimension\(s\) in the file but its output has 2"),
    ("1\nfc1\n0\n2\n1\t4\n4\n0\t1\t3\t2\n", r"<text>:7: the device ids \[0, 1, 3, 2\] of 'fc1' do not form a machine view"),
    ("1\nfc1\n1\n2\n1\t4\n4\n0\t1\t2\t3\n", r"<text>:7: 'fc1' has device type 1 \(cpu\) but its devices"),
    ("1\nfc1\n0\n2\n3\t1\n3\n0\t1\t2\n", r"<text>:5: degrees \[3, 1\] do not fit 'fc1'"),
    ("2\nfc1\n0\n2\n1\t2\n2\n0\t1\n", r"<text>:8: the file ends where an operator name was expected"),
    ("1\nfc1\n0\n2\n1\tx\n2\n0\t1\n", r"<text>:5: the 2 degrees of 'fc1' must be integers"),
    ("1\nfc1\n0\n2\n1\t2\n2\n0\t1\nfc2\n", r"<text>:8: text after the 1 operator\(s\)"),
    ("2\nfc1\n0\n2\n1\t2\n2\n0\t1\nfc1\n0\n2\n1\t2\n2\n0\t1\n", r"<text>:13: operator 'fc1' appears twice"),
    ("", r"<text>:1: the file ends where the number of operators was expected"),
])
def test_mismatched_files_name_the_mismatch_and_line(text, message, p100):
    with pytest.raises(StrategyError, match=message):
        strategy_from_text(text, model("mlp"), p100)


def test_file_for_a_bigger_machine_fails_with_path_and_line(tmp_path):
    pcg = model("mlp")
    big, small = load_machine("flexflow_p100", 4), load_machine("flexflow_p100", 1)
    path = tmp_path / "big.txt"
    save_text_strategy(str(path), data_parallel(pcg, big), big)
    with pytest.raises(StrategyError, match=rf"{path}:7: 'fc1' uses device 4 but machine"):
        load_text_strategy(str(path), pcg, small)
    with pytest.raises(StrategyError, match="strategy file .*missing.txt does not exist"):
        load_text_strategy(str(tmp_path / "missing.txt"), pcg, small)


def test_strategy_without_configurations_cannot_be_written(p100):
    s = data_parallel(model("mlp"), p100)
    with pytest.raises(StrategyError, match="per-operator configurations"):
        strategy_to_text(GraphStrategy(s.pcg, s.views), p100)


def test_every_compute_operator_is_written(p100):
    pcg = model("transformer")
    text = strategy_to_text(data_parallel(pcg, p100), p100)
    names = [n.name for n in pcg.nodes if is_compute(n)]
    assert int(text.splitlines()[0]) == len(names)
    assert all(n in text.splitlines() for n in names)
