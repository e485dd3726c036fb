"""The GPT zoo model: named sizes, causal attention, and training like one device, pipelined or not."""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import DataType, FFConfig
from flexrt.errors import FlexrtError
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.strategy import data_parallel, random_strategy
from flexrt.strategy.space import config_at
from flexrt.strategy.pipeline import pipeline_strategy
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session
from tests.runtime.test_central_law import SGD, TOL, weights_for


@pytest.mark.parametrize("config, params", [("gpt2", 124_439_808 + 50257 * 768), ("gpt2-medium", 354_823_168 + 50257 * 1024)])
def test_named_sizes_have_the_published_parameter_counts_plus_the_untied_head(config, params):
    loaded = load_model("gpt", ["-b", "1", "--config", config, "--seq-length", "1024"])
    assert loaded.model.num_parameters() == params


def test_every_attention_is_causal_and_flags_override_the_configuration():
    loaded = load_model("gpt", ["-b", "2", "--config", "gpt2", "--layers", "3", "--hidden", "64", "--heads", "4",
                                "--seq-length", "8", "--vocab", "100"])
    attn = [n for n in loaded.model.pcg.nodes if n.op_type.value == "multihead_attention"]
    assert len(attn) == 3 and all(n.attrs.causal and n.attrs.embed_dim == 64 for n in attn)
    with pytest.raises(FlexrtError, match="unknown --config 'gpt5'"):
        load_model("gpt", ["--config", "gpt5"])


def _tiny():
    from flexrt.examples.gpt import build_model
    return build_model(FFConfig(["-b", "4"]), config="gpt-tiny", dropout=0.0)


@pytest.mark.parametrize("kind", ["data", "1f1b", "interleaved", "seq", "random0", "random1", "random2"])
def test_gpt_tiny_trains_like_one_device(kind):
    machine = load_machine("dgx1_v100")
    m = _tiny()
    if kind == "data":
        strategy = data_parallel(m.pcg, machine, 4)
    elif kind == "seq":           # causal attention cut along its queries: each piece knows its offset
        strategy = data_parallel(m.pcg, machine, 1)
        for n in m.pcg.nodes:
            if n.op_type.value == "multihead_attention":
                strategy = strategy.with_config(n.id, config_at(m.pcg, n, machine, {"seq": 4}, 0))
    elif kind.startswith("random"):
        strategy = random_strategy(m.pcg, machine, int(kind[6:]))
    else:
        strategy = pipeline_strategy(m.pcg, machine, 2, 2, kind, chunks=2 if kind == "interleaved" else 1)
    _train_like_one_device(m, strategy, machine)


def _train_like_one_device(m, strategy, machine):
    """Next-token labels at every position; losses and weights as one device's within float32's 1e-4."""
    rng = np.random.default_rng(0)
    b, seq, vocab = 4, 16, 64
    tokens = rng.integers(0, vocab, size=(b, seq))
    names = sorted(n.name for n in m.pcg.nodes if n.op_type.value == "input")    # tokens first, then positions
    inputs = {names[0]: tokens, names[1]: np.tile(np.arange(seq), (b, 1))}
    labels = np.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)[..., None].astype(np.int32)
    w0 = weights_for(m.pcg, DataType.DT_FLOAT)
    ref = ReferenceTrainer(m.pcg, w0, optimizer_step("sgd", **SGD), "sparse_categorical_crossentropy")
    session = Session(strategy, machine, loss="sparse_categorical_crossentropy", weights=w0, **SGD)
    for _ in range(3):
        want, got = ref.step(inputs, labels), session.step(inputs, labels).loss
        assert abs(got - want) <= TOL[DataType.DT_FLOAT] * max(1.0, abs(want))
    got_w = session.weights()
    assert max(relative_error(got_w[k], w) for k, w in ref.weights.items()) <= TOL[DataType.DT_FLOAT]


def test_megatron_lm_defaults_are_megatron_and_its_3d_strategy_trains_like_one_device():
    from flexrt.search.baselines import megatron, megatron_lm
    machine = load_machine("dgx1_v100", nodes=2)          # 16 devices, 8 per node
    m = _tiny()
    assert megatron_lm(m.pcg, machine).configs == megatron(m.pcg, machine).configs
    for kw in ({"tensor": 4, "pipeline": 2, "micro_batches": 2}, {"tensor": 4, "sequence_parallel": True},
               {"tensor": 4, "pipeline": 2, "micro_batches": 2, "schedule": "interleaved", "chunks": 2}):
        s = megatron_lm(m.pcg, machine, **kw)
        attn = [n for n in s.base.nodes if n.op_type.value == "multihead_attention"]
        assert attn and all(dict(s.configs[n.id].degrees).get("heads") == kw["tensor"] for n in attn)
        _train_like_one_device(m, s, machine)
    with pytest.raises(FlexrtError, match="tensor parallel degree 3 must divide the 8 devices of a node"):
        megatron_lm(m.pcg, machine, tensor=3)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_megatron_micro_batches_of_one_split_the_sequence_over_the_tensor_group(sequence_parallel):
    """Megatron-LM's GPT-3 runs micro-batches of one sequence, which no sample split can spread over
    a tensor group: sequence parallelism splits the sequence (dimension 1), and an operator that is
    neither tensor parallel nor replicated (the softmax under the loss) splits it too instead of
    running whole on one device. The strategy still trains like one device."""
    from flexrt.search.baselines import megatron_lm
    machine = load_machine("dgx1_v100")                   # t 4 x p 2: one data-parallel replica
    m = _tiny()
    s = megatron_lm(m.pcg, machine, tensor=4, pipeline=2, micro_batches=4, sequence_parallel=sequence_parallel)
    degrees = {name: s.shapes(name).degree_map for name in s.wiring().ops if name.endswith(".mb0")}
    assert degrees["softmax.mb0"].get("dim1") == 4
    for name in ("h.0.ln1.mb0", "h.1.mlp.add.mb0", "ln_f.mb0"):
        assert degrees[name].get("dim1" if sequence_parallel else "replica") == 4, (name, degrees[name])
        assert degrees[name].get("dim0", 1) == 1
    _train_like_one_device(m, s, machine)
