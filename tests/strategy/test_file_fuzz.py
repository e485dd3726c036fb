"""Strategy files broken at random (``mutations.py``) load or fail with a flexrt error: never a
TypeError, a RecursionError or any other exception a user cannot act on. A file that still loads is
a valid strategy of the model."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from flexrt.errors import FlexrtError
from flexrt.examples.strategies import unity_fig2
from flexrt.machine import load_machine
from flexrt.model import load_model
from flexrt.strategy import (ConfigStrategy, Strategy, load_strategy, random_strategy, strategy_to_json,
                             strategy_to_text)
from tests.strategy.mutations import mangled, mutated_json

MACHINE = load_machine("dgx1_v100")
MLP = load_model("mlp", []).model.pcg
FIG2 = load_model("mlp_unity_fig2", []).model.pcg
RANDOM = random_strategy(MLP, MACHINE, 5)
CONFIG_JSON = strategy_to_json(RANDOM, MACHINE)
GRAPH_JSON = json.loads(unity_fig2.FILE.read_text())
TEXT = strategy_to_text(RANDOM, MACHINE).encode()
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FOLDER = Path(tempfile.mkdtemp(prefix="flexrt-fuzz-"))  # hypothesis' examples outlive tmp_path; removed below


def teardown_module():
    shutil.rmtree(FOLDER, ignore_errors=True)


def _load(data: bytes, name: str, base):
    """Load ``data`` written to ``name``; a flexrt error is a fine answer, anything else fails the test."""
    path = FOLDER / name
    path.write_bytes(data)
    try:
        s = load_strategy(str(path), base, MACHINE)
    except FlexrtError:
        return None
    assert isinstance(s, Strategy)
    s.check_views(MACHINE)
    return s


def test_the_valid_files_load():
    assert _load(json.dumps(CONFIG_JSON).encode(), "s.json", MLP).configs == RANDOM.configs
    assert _load(TEXT, "s.txt", MLP).configs == RANDOM.configs
    assert _load(TEXT, "text-named.json", MLP).configs == RANDOM.configs   # recognised by its content
    assert _load(json.dumps(GRAPH_JSON).encode(), "g.json", FIG2) is not None


@FUZZ
@given(mutated_json(CONFIG_JSON))
def test_mutated_per_operator_strategy_json(data):
    s = _load(data, "s.json", MLP)
    assert s is None or isinstance(s, ConfigStrategy)


@FUZZ
@given(mutated_json(GRAPH_JSON))
def test_mutated_whole_pcg_strategy_json(data):
    _load(data, "g.json", FIG2)


@FUZZ
@given(mangled(TEXT))
def test_mangled_flexflow_text_strategy(data):
    _load(data, "s.txt", MLP)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"format": ' * 5000, "1" * 5000, "\x00\x01", ""])
def test_pathological_files(text):
    for name in ("s.json", "s.txt"):
        path = FOLDER / name
        path.write_text(text)
        with pytest.raises(FlexrtError):
            load_strategy(str(path), MLP, MACHINE)
