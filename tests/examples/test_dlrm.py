"""The DLRM zoo model's FlexFlow flags (dlrm.cc's ``--arch-*``): the default is Criteo Kaggle's, the
flags build other shapes, and bad values are refused naming the flag."""

from __future__ import annotations

import pytest

from flexrt.errors import FlexrtError
from flexrt.model.loader import load_model


def _shapes(pcg) -> dict:
    return {n.name: pcg.output_shapes(n.id)[0].sizes for n in pcg.nodes if n.op_type.value != "weight"}


def test_the_default_is_criteo_kaggle():
    model = load_model("dlrm", ["-b", "8"]).model
    assert model.num_parameters() == 103_424_161
    assert _shapes(model.pcg)["interaction"] == (8, 432)


def test_unity_artifact_shape_from_flags():
    """Unity's artifact run: 4 tables of 10^6 x 64, bottom MLP 4-64-64, top 64-64-2."""
    model = load_model("dlrm", ["-b", "16", "--arch-sparse-feature-size", "64", "--arch-embedding-size",
                                "1000000-1000000-1000000-1000000", "--arch-mlp-bot", "4-64-64",
                                "--arch-mlp-top", "64-64-2", "--embedding-bag-size", "3"]).model
    shapes = _shapes(model.pcg)
    assert shapes["interaction"] == (16, 5 * 64) and shapes["top_mlp.1"] == (16, 2)
    assert [k for k in shapes if k.startswith("emb")] == ["emb0", "emb1", "emb2", "emb3"]
    inputs = [s for k, s in shapes.items() if k.startswith("input")]
    assert (16, 4) in inputs and inputs.count((16, 3)) == 4
    assert model.num_parameters() == 4 * 64_000_000 + (4 * 64 + 64 + 64 * 64 + 64) + (320 * 64 + 64 + 64 * 2 + 2)


@pytest.mark.parametrize("flags, message", [
    (["--arch-mlp-bot", "13-x"], r"--arch-mlp-bot '13-x' must be at least 2 positive ints"),
    (["--arch-embedding-size", "10--4"], r"--arch-embedding-size '10--4' must be at least 1 positive ints"),
    (["--arch-mlp-top", "7"], r"--arch-mlp-top '7' must be at least 2 positive ints"),
    (["--arch-sparse-feature-size", "32"], r"the bottom MLP's last width \(16\) must equal --arch-sparse-feature-size"),
    (["--arch-sparse-feature-size", "x"], r"flag --arch-sparse-feature-size takes an int, got 'x'"),
])
def test_bad_flags_are_refused_naming_the_flag(flags, message):
    with pytest.raises(FlexrtError, match=message):
        load_model("dlrm", ["-b", "8", *flags])
