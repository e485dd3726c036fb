"""The central law for Reformer (LSH self-attention, reversible layers, chunked feed-forward with
shared weights): a small float64 Reformer trains to one device's losses and weights under data
parallelism, a strategy splitting the attention's heads, both at once, and random valid strategies.
Plus the zoo script's graph and a simulator smoke run."""

from __future__ import annotations

import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.machine.views import enumerate_views
from flexrt.strategy import OpConfig, Strategy, all_axes, data_parallel, is_compute, random_strategy
from tests.runtime._mse_law import train_like_one_device

BATCH, SEQ, D_MODEL = 8, 6, 8
HALF = D_MODEL // 2


@pytest.fixture(scope="module")
def machine():
    return load_machine("dgx1_v100")


def _chunked_ffn(m, x, name):
    """Two sequence chunks of 3, each through the same two dense layers (the first chunk's weights)."""
    outs, shared = [], {}
    for i, chunk in enumerate(m.split(x, 2, 1, name=name + ".split")):
        h = m.dense(chunk, 6, ActiMode.AC_MODE_TANH, shared_op=shared.get("fc1"), name=f"{name}.fc1.{i}")
        o = m.dense(h, HALF, shared_op=shared.get("fc2"), name=f"{name}.fc2.{i}")
        shared.setdefault("fc1", h.owner_op)
        shared.setdefault("fc2", o.owner_op)
        outs.append(o)
    return m.concat(outs, 1, name=name + ".concat")


def model(causal=False):
    """x [8, 6, 8] -> halves -> 2 reversible layers (y1 = x1 + LSH(x2), y2 = x2 + FFN(y1)) -> concat -> dense."""
    m = FFModel(FFConfig([]))
    x = m.create_tensor([BATCH, SEQ, D_MODEL], DataType.DT_DOUBLE)
    x1, x2 = m.split(x, 2, 2, name="halves")
    for i in range(2):
        a = m.lsh_self_attention(x2, HALF, 2, 4, 2, 2, causal=causal, seed=i, name=f"l{i}.attn")
        x1 = m.add(x1, a, name=f"l{i}.y1")
        x2 = m.add(x2, _chunked_ffn(m, x1, f"l{i}.ffn"), name=f"l{i}.y2")
    t = m.concat([x1, x2], 2, name="concat")
    m.dense(t, 4, name="out")
    return m.pcg


def _lsh_nodes(pcg):
    return [n for n in pcg.nodes if n.op_type is OpType.LSH_SELF_ATTENTION]


def heads_strategy(pcg, machine, sample: int = 1) -> Strategy:
    """Each LSH attention cut in two along its heads (and ``sample`` ways along the batch) from device
    2i; every other operator whole on device 1."""
    configs = {}
    for i, node in enumerate(n for n in pcg.nodes if is_compute(n)):
        degrees = ()
        if node.op_type is OpType.LSH_SELF_ATTENTION:
            degrees = (("heads", 2),) + ((("sample", sample),) if sample > 1 else ())
        shape = tuple(dict(degrees).get(a.name, 1) for a in all_axes(pcg, node))
        views = enumerate_views(machine, shape)
        start = (2 * i) % machine.num_devices if degrees else 1
        configs[node.id] = OpConfig(degrees, next((v for v in views if v.start == start), views[0]))
    return Strategy.from_configs(pcg, configs)


def train_and_compare(pcg, strategy, machine):
    return train_like_one_device(pcg, strategy, machine, (BATCH, SEQ, 4), must_train=True)


@pytest.mark.parametrize("causal", [False, True])
def test_reformer_trains_like_one_device_data_parallel(machine, causal):
    pcg = model(causal)
    strategy = data_parallel(pcg, machine, 4)
    assert [dict(strategy.configs[n.id].degrees) for n in _lsh_nodes(pcg)] == [{"sample": 4}] * 2
    train_and_compare(pcg, strategy, machine)


@pytest.mark.parametrize("sample", [1, 2])
def test_reformer_trains_like_one_device_heads_parallel(machine, sample):
    pcg = model()
    strategy = heads_strategy(pcg, machine, sample)
    want = {"heads": 2, **({"sample": sample} if sample > 1 else {})}
    assert [dict(strategy.configs[n.id].degrees) for n in _lsh_nodes(pcg)] == [want] * 2
    train_and_compare(pcg, strategy, machine)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reformer_trains_like_one_device_random_strategies(machine, seed):
    pcg = model(causal=True)
    train_and_compare(pcg, random_strategy(pcg, machine, seed), machine)


def test_reformer_shares_the_chunked_ffn_weights():
    """Both chunks of a layer's FFN read one set of weights: 2 x (3 x 4 x 4) attention + 2 x (4x6+6 + 6x4+4)
    FFN + the output dense (8 x 4 + 4)."""
    pcg = model()
    weights = [n for n in pcg.nodes if n.op_type is OpType.WEIGHT]
    assert sum(n.attrs.shape.num_elements for n in weights) == 2 * 3 * 16 + 2 * (30 + 28) + 36


def test_reformer_zoo_model_loads_and_simulates():
    """``flexrt simulate reformer --machine disco_a``, in Python: the zoo script builds at batch 64
    and its data-parallel strategy simulates."""
    from flexrt.model import load_model
    from flexrt.simulator.cost_model import AnalyticCostModel
    from flexrt.simulator.simulate import simulate
    loaded = load_model("reformer", ["-b", "64"])
    pcg = loaded.model.pcg
    assert len(_lsh_nodes(pcg)) == 12 and loaded.model.num_parameters() == 39_379_200
    disco_a = load_machine("disco_a")
    result = simulate(data_parallel(pcg, disco_a, 4), disco_a, AnalyticCostModel())
    assert result.iteration_time_s > 0 and result.num_tasks > 0


def test_reformer_simulate_cli(capsys):
    from flexrt.cli import main
    assert main(["simulate", "reformer", "--machine", "disco_a", "-b", "16", "--seq-length", "512"]) == 0
    out = capsys.readouterr().out
    assert "model reformer (batch 16) on disco_a" in out and "iteration time" in out
