"""The model zoo (``examples/``): every definition script builds its model at the papers' sizes.

For each zoo model, built with batch 2: the parameter count (within 1% of the published figure
where there is one, and exactly against arithmetic on the configuration the script's docstring
states), a valid PCG, and a JSON round trip that keeps the graph and its structural hash. Plus
Inception-v3's operator count (Unity reports 323), weight sharing across unrolled steps, and the
scripts running on their own as FlexFlow users run them.

The expected counts below are computed here from the documented configurations, never read from
the models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

import flexrt.examples
from flexrt.core import FFConfig
from flexrt.ir.op_type import OpType
from flexrt.ir.pcg import PCG

EXAMPLES_DIR = Path(flexrt.examples.__file__).resolve().parent
ZOO = sorted(p.stem for p in EXAMPLES_DIR.glob("*.py") if not p.stem.startswith("_"))
BATCH = 2


# ---- parameter arithmetic ----------------------------------------------------------------------

def dense(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def mlp(dims, bias: bool = True) -> int:
    return sum(dense(a, b, bias) for a, b in zip(dims, dims[1:]))


def lstm(n_in: int, hidden: int) -> int:
    """w_ih [in, 4H] + w_hh [H, 4H] + one bias [4H]."""
    return 4 * hidden * (n_in + hidden) + 4 * hidden


def attention(e: int) -> int:
    """Q, K, V and output projections with biases."""
    return 4 * e * e + 4 * e


def layer_norm(e: int) -> int:
    return 2 * e


def encoder_layer(e: int, ff: int) -> int:
    return attention(e) + layer_norm(e) + dense(e, ff) + dense(ff, e) + layer_norm(e)


def decoder_layer(e: int, ff: int) -> int:
    return 2 * attention(e) + 3 * layer_norm(e) + dense(e, ff) + dense(ff, e)


# Published sizes in millions (REFERENCE.md "Model sizes"; Inception-v3 without its auxiliary head).
PUBLISHED_MILLIONS = {
    "alexnet": 61.1, "vgg19": 143.7, "resnet50": 25.6, "resnet101": 44.5, "resnext50": 25.0,
    "inception_v3": 23.8, "bert_large": 335.0,
}

EXACT_PARAMETERS = {
    # torchvision's model documentation (BatchNorm scale and bias included).
    "alexnet": 61_100_840,
    "vgg19": 143_667_240,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnext50": 25_028_904,
    # torchvision's 27,161,264 less the auxiliary head: conv 768->128 1x1 + BN, conv 128->768 5x5 + BN, fc 768->1000.
    "inception_v3": 27_161_264 - (768 * 128 + 2 * 128 + 128 * 768 * 25 + 2 * 768 + dense(768, 1000)),
    # Embeddings (word, 512 positions, 2 token types, LayerNorm), 24 layers, pooler, 2-way classifier.
    "bert_large": (30522 * 1024 + 512 * 1024 + 2 * 1024 + layer_norm(1024) + 24 * encoder_layer(1024, 4096)
                   + dense(1024, 1024) + dense(1024, 2)),
    "mlp_unity_fig2": 784 * 512 + 512 * 10,
    # GPT-2 small as published (124,439,808 with the head tied to the token embedding), plus the untied head
    "gpt": 124_439_808 + 50257 * 768,
    "mlp": 2 * mlp([1024] + [8192] * 8, bias=False),
    # 26 Criteo Kaggle tables, 6,432,181 rows of 16; bottom MLP on 13 dense features; top MLP on 16 + 26 x 16.
    "dlrm": 6_432_181 * 16 + mlp([13, 512, 256, 64, 16]) + mlp([16 + 26 * 16, 512, 256, 1]),
    "xdl": 4 * 1_000_000 * 64 + mlp([4 * 64, 256, 256, 2], bias=False),
    # Towers for cell.rnaseq, 2 x drug descriptors, 2 x drug fingerprints; 2 doses pass through.
    "candle_uno": (sum(mlp([width] + [4192] * 8, bias=False) for width in (942, 5270, 5270, 2048, 2048))
                   + mlp([5 * 4192 + 2] + [4192] * 4 + [1], bias=False)),
    "rnntc": 10_000 * 1024 + lstm(1024, 1024) * 4 + dense(1024, 2),
    "rnnlm": 10_000 * 2048 + lstm(2048, 2048) * 2 + dense(2048, 10_000),
    # RNNLM unrolled 2 steps (FlexFlow §8.3): the same weights as rnnlm.
    "rnnlm_2step": 10_000 * 2048 + lstm(2048, 2048) * 2 + dense(2048, 10_000),
    # LeNet-5 on 1x32x32: conv 6@5x5, conv 16@5x5 (on 6 maps), dense 400-120-84-10.
    "lenet": (6 * 25 + 6) + (16 * 6 * 25 + 16) + mlp([16 * 5 * 5, 120, 84, 10]),
    # Source and target embeddings, 2 + 2 LSTM layers, W_a, W_c (no biases), output layer.
    "nmt": 2 * 32_000 * 1024 + 4 * lstm(1024, 1024) + 1024 * 1024 + 2048 * 1024 + dense(1024, 32_000),
    # Shared token embedding, 512 learned positions, 6 + 6 layers, untied output projection without bias.
    "transformer": (32_000 * 512 + 512 * 512 + 6 * encoder_layer(512, 2048) + 6 * decoder_layer(512, 2048)
                    + 512 * 32_000),
    # Byte embedding and 4096 learned positions of 1024; 12 reversible layers on halves of 512 (LSH
    # attention's wqk, wv, wo without biases, two LayerNorms, the FFN); final LayerNorm; output layer.
    "reformer": (256 * 1024 + 4096 * 1024 + 12 * (3 * 512 * 512 + 2 * layer_norm(512) + dense(512, 2048)
                                                  + dense(2048, 512)) + layer_norm(1024) + dense(1024, 256)),
}

SEQUENCE_MODELS = ("bert_large", "transformer", "reformer", "rnntc", "rnnlm", "nmt")


def module(name: str):
    return __import__(f"flexrt.examples.{name}", fromlist=["build_model"])


@lru_cache(maxsize=None)
def built(name: str, seq_length: int | None = None):
    kwargs = {} if seq_length is None else {"seq_length": seq_length}
    return module(name).build_model(FFConfig(["-b", str(BATCH)]), **kwargs)


def operator_nodes(pcg: PCG):
    return [n for n in pcg.nodes if n.op_type not in (OpType.INPUT, OpType.WEIGHT)]


# ---- tests -------------------------------------------------------------------------------------

def test_zoo_lists_every_expected_model():
    assert set(ZOO) == set(EXACT_PARAMETERS), "a zoo script without an expected size, or a missing script"


@pytest.mark.parametrize("name", ZOO)
def test_zoo_script_has_description_and_entry_points(name):
    mod = module(name)
    doc = mod.__doc__ or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    assert first.endswith("parameters.") and len(first) <= 130, f"{name}: first docstring line {first!r}"
    assert "Source:" in doc, f"{name}: the docstring names no source"
    assert callable(mod.build_model) and callable(mod.top_level_task)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_parameter_count_exact(name):
    assert built(name).num_parameters() == EXACT_PARAMETERS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_MILLIONS))
def test_zoo_parameter_count_within_one_percent_of_published(name):
    published = PUBLISHED_MILLIONS[name] * 1e6
    assert abs(built(name).num_parameters() - published) <= 0.01 * published


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_uses_the_batch_size(name):
    model = built(name)
    assert model.inputs and all(t.dims[0] == BATCH for t in model.inputs)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_pcg_validates(name):
    built(name).pcg.validate()


@pytest.mark.parametrize("name", ZOO)
def test_zoo_pcg_json_round_trip(name):
    pcg = built(name).pcg
    again = PCG.from_json(json.loads(json.dumps(pcg.to_json())))
    assert again == pcg
    assert again.structural_hash() == pcg.structural_hash()


def test_inception_v3_operator_count_near_unitys_323():
    ops = operator_nodes(built("inception_v3").pcg)
    convs = [n for n in ops if n.op_type is OpType.CONV2D]
    assert len(convs) == 94  # torchvision's BasicConv2d count
    assert 300 <= len(ops) <= 340, len(ops)


@pytest.mark.parametrize("name", SEQUENCE_MODELS)
def test_sequence_model_weights_do_not_depend_on_sequence_length(name):
    """Unrolled steps share weights (shared_op) and attention weights do not grow with the sequence."""
    short, long_ = built(name, 4), built(name, 8)
    assert short.num_parameters() == long_.num_parameters() == EXACT_PARAMETERS[name]
    assert {t.dims[1] for t in short.inputs if t.num_dims == 2 and t.dims[1] in (4, 8)} == {4}
    assert {t.dims[1] for t in long_.inputs if t.num_dims == 2 and t.dims[1] in (4, 8)} == {8}


@pytest.mark.parametrize("name, layers", [("rnntc", 4), ("rnnlm", 2), ("nmt", 4)])
def test_rnn_unrolls_one_lstm_cell_per_layer_per_step(name, layers):
    steps = module(name).SEQ_LENGTH
    assert steps == 40  # FlexFlow §8: "the number of unrolling steps for each recurrent layer to 40"
    cells = [n for n in operator_nodes(built(name).pcg) if n.op_type is OpType.LSTM]
    assert len(cells) == layers * steps


def test_script_runs_standalone():
    script = EXAMPLES_DIR / "mlp_unity_fig2.py"
    proc = subprocess.run([sys.executable, str(script), "-b", "64"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "406,528" in proc.stdout  # the summary's parameter total


def test_script_takes_sequence_length_flag_beside_ffconfig_flags():
    script = EXAMPLES_DIR / "rnntc.py"
    proc = subprocess.run([sys.executable, str(script), "-b", "2", "--seq-length", "3"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lstm.l3.t2" in proc.stdout and "lstm.l3.t3" not in proc.stdout


def test_take_int_flag_removes_flag_and_value():
    from flexrt.examples._blocks import take_int_flag
    argv = ["prog", "-b", "4", "--seq-length", "128", "--budget", "10"]
    assert take_int_flag("--seq-length", 512, argv) == 128
    assert argv == ["prog", "-b", "4", "--budget", "10"]
    argv = ["prog", "--seq-length=16"]
    assert take_int_flag("--seq-length", 512, argv) == 16 and argv == ["prog"]
    assert take_int_flag("--seq-length", 512, ["prog"]) == 512
    with pytest.raises(SystemExit, match="positive integer"):
        take_int_flag("--seq-length", 512, ["prog", "--seq-length", "zero"])


def test_rnnlm_2step_is_rnnlm_unrolled_two_steps():
    """FlexFlow §8.3's variant: RNNLM's weights, each of the 2 LSTM layers unrolled 2 steps."""
    cells = [n for n in operator_nodes(built("rnnlm_2step").pcg) if n.op_type is OpType.LSTM]
    assert module("rnnlm_2step").SEQ_LENGTH == 2 and len(cells) == 2 * 2
    assert built("rnnlm_2step").num_parameters() == built("rnnlm").num_parameters()


def _int_flags(name: str) -> list[str]:
    """The ``--flags`` of a zoo script's ``build_model`` that take integers."""
    import inspect
    build = getattr(module(name), "build_model", None)
    if build is None:
        return []
    return ["--" + p.name.replace("_", "-") for p in inspect.signature(build).parameters.values()
            if isinstance(p.default, int) and not isinstance(p.default, bool)]


@pytest.mark.parametrize("name", ZOO)
def test_a_negative_size_flag_is_refused_with_our_error(name):
    """Every integer flag of every zoo script refuses -1 with flexrt's error naming the script (gpt's
    overrides used to take -1 as a size: ``--layers -1`` built a GPT without layers)."""
    from flexrt.errors import FlexrtError
    from flexrt.model import load_model
    for flag in _int_flags(name):
        with pytest.raises(FlexrtError, match=name):
            load_model(name, ["-b", str(BATCH), flag, "-1"])
