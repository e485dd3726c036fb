"""``flexrt substitutions generate | verify | stats | show N``: output, --json, exit codes; the
generator and verifier are replaced by fakes here (their own tests cover them)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from flexrt.cli import main
from flexrt.search.substitutions.library import unity_example_rules
from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot, load_rules, save_rules
from tests.search.test_library import FLEXFLOW_FILE, needs_flexflow

UNUSABLE = Rule("needs_y", (PatternOp("OP_RELU", (Slot(-1),)),), (PatternOp("OP_EW_ADD", (Slot(-1), Slot(-2))),),
                (OutputMap(0, 0, 0, 0),))


@pytest.fixture
def lib(tmp_path):
    return str(save_rules(tmp_path / "lib.json", [*unity_example_rules().values(), UNUSABLE]))


def fake_module(monkeypatch, name, **attrs):
    mod = types.ModuleType(f"flexrt.search.substitutions.{name}")
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


def test_stats_json(lib, capsys):
    assert main(["substitutions", "stats", "--file", lib, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rules"] == 6 and doc["unusable"] == 1 and doc["by_size"]["1->4"] == 1


def test_stats_text_and_check(lib, capsys):
    assert main(["substitutions", "stats", "--file", lib, "--check"]) == 0
    out = capsys.readouterr().out
    assert "6 rules, 5 applicable, 1 unusable" in out and "3->6: 1" in out
    assert "innermost: {'holds': 5, 'unusable': 1}" in out


def test_show_prints_two_graphs_and_the_output_map(lib, capsys):
    assert main(["substitutions", "show", "4", "--file", lib]) == 0
    out = capsys.readouterr().out
    assert "rule 4: megatron_row_parallel  (2 -> 3 operators)" in out
    assert "s1 = linear(s0, in2)  [acti=0]" in out
    assert "d0 = partition(in2)  [parallel_degree=2, parallel_dim=1]" in out
    assert "outputs: s1 -> d2" in out
    assert main(["substitutions", "show", "5", "--file", lib, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "needs_y" and doc["applicable"] is False


def test_show_cuts_a_long_name_and_json_keeps_it(tmp_path, capsys):
    rule = Rule("n" * 5000, UNUSABLE.src, UNUSABLE.src, UNUSABLE.outputs)
    lib = str(save_rules(tmp_path / "long.json", [rule]))
    assert main(["substitutions", "show", "0", "--file", lib]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("rule 0: nnn") and "... (5000 characters)  (1 -> 1 operators)" in first
    assert len(first) < 200
    assert main(["substitutions", "show", "0", "--file", lib, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "n" * 5000


def test_show_out_of_range_and_missing_file(lib, tmp_path, capsys):
    assert main(["substitutions", "show", "9", "--file", lib]) == 1
    assert "valid: 0..5" in capsys.readouterr().err
    assert main(["substitutions", "stats", "--file", str(tmp_path / "nope.json")]) == 1
    assert "not found" in capsys.readouterr().err


def test_no_library_is_a_clear_error(monkeypatch, capsys):
    from flexrt.search.substitutions import library
    monkeypatch.setattr(library, "library_files", lambda: [])
    assert main(["substitutions", "stats"]) == 1
    assert "flexrt substitutions generate" in capsys.readouterr().err


def test_verify_without_a_verifier_is_a_clear_error(monkeypatch, lib, capsys):
    monkeypatch.setitem(sys.modules, "flexrt.search.substitutions.verify", None)
    assert main(["substitutions", "verify", "--file", lib]) == 1
    assert "verify_rules" in capsys.readouterr().err


def test_verify_counts(monkeypatch, lib, capsys):
    seen = []

    def verify_rules(rules, timeout_s=None):
        seen.extend(r.name for r in rules)
        return ["proved" if "megatron" in r.name else "unknown" for r in rules]
    fake_module(monkeypatch, "verify", verify_rules=verify_rules)
    assert main(["substitutions", "verify", "--file", lib, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"proved": 3, "refuted": 0, "unknown": 2, "unusable": 1, "unparsed": 0, "total": 6}
    assert "needs_y" not in seen and doc["rules"][5]["status"] == "unusable"


def test_verify_fails_when_a_rule_is_refuted(monkeypatch, lib, capsys):
    """An unsound rule would let a search change what a model computes: exit 1, naming it."""
    fake_module(monkeypatch, "verify",
                verify_rules=lambda rules, timeout_s=None: ["refuted" if i == 1 else "proved" for i in range(len(rules))])
    assert main(["substitutions", "verify", "--file", lib]) == 1
    out, err = capsys.readouterr()
    assert "refuted: 1" in out and err.startswith("flexrt substitutions verify: 1 rule(s) refuted")


@needs_flexflow
def test_verify_flexflow_file_reports_unusable(monkeypatch, capsys):
    seen = {}

    def verify_rules(rules, **kw):
        seen.update((r.name, r) for r in rules)
        return [{"status": "refuted"} for _ in rules]
    fake_module(monkeypatch, "verify", verify_rules=verify_rules)
    assert main(["substitutions", "verify", "--file", str(FLEXFLOW_FILE), "--dims", "outermost"]) == 1
    out, err = capsys.readouterr()
    assert "640 rules" in out and "unusable: 112" in out and "refuted: 528" in out
    assert "528 rule(s) refuted (their two sides differ)" in err
    # converted to our numbering: rule 241's partition of the weight's dim 1 (outermost) is dim 0
    assert seen["taso_rule_241"].src[0].param("PM_PARALLEL_DIM") == 0


def test_generate_writes_the_proved_rules_and_a_stats_record_that_stats_reads(monkeypatch, tmp_path, capsys):
    rules = list(unity_example_rules().values())
    calls = {}

    def generate_library(families=None, max_ops=None, degree=2, seed=0, progress=None):
        calls.update(families=families, max_ops=max_ops, degree=degree, seed=seed)
        return types.SimpleNamespace(rules=tuple(rules), counts={"enumerated": 10})
    fake_module(monkeypatch, "families", generate_library=generate_library)
    fake_module(monkeypatch, "verify", verify_rules=lambda rs: ["proved", "refuted", "proved", "unknown", "proved"])
    out = tmp_path / "lib.json"
    assert main(["substitutions", "generate", "--max-ops", "2", "--family", "core", "--family", "bias",
                 "--output", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert calls == {"families": ["core", "bias"], "max_ops": 2, "degree": 2, "seed": 0}
    assert doc["counts"]["proved"] == 3 and doc["counts"]["refuted"] == 1 and doc["written"] == 3
    assert doc["counts"]["candidates"] == 5 and doc["counts"]["proved_percent"] == 60.0
    assert [r.name for r in load_rules(out)] == [rules[i].name for i in (0, 2, 4)]
    assert Path(doc["output"]) == out
    record = json.loads((tmp_path / "lib.stats.json").read_text())
    assert record["counts"]["unknown"] == 1 and record["by_operator"]["OP_RELU"]["candidates"] == 2
    assert [r["status"] for r in record["not_proved"]] == ["refuted", "unknown"]
    assert main(["substitutions", "stats", "--file", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["rules"] == 3 and stats["generation"]["counts"]["candidates"] == 5
    assert main(["substitutions", "stats", "--file", str(out)]) == 0
    assert "generated: 5 candidates, 3 proved (60.0%), 1 refuted, 1 unknown" in capsys.readouterr().out


def test_stats_of_the_shipped_library_reports_its_verification(capsys):
    assert main(["substitutions", "stats", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["generation"]["counts"]
    assert c["proved"] + c["refuted"] + c["unknown"] == c["candidates"] and c["proved"] == doc["rules"]
    assert c["proved"] >= 0.95 * c["candidates"]
    assert doc["generation"]["by_operator"]["OP_SOFTMAX"]["proved"] >= 1


def test_generate_without_a_generator_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "flexrt.search.substitutions.families", None)
    assert main(["substitutions", "generate", "--output", str(tmp_path / "x.json")]) == 1
    assert "generate" in capsys.readouterr().err
