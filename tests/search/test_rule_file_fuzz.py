"""Rule files broken at random (``tests/strategy/mutations.py``) load or fail with a flexrt error,
never another exception; the rules of a file that still loads are in the rule language, so counting
them and converting their dimensions raise nothing either."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from flexrt.errors import FlexrtError, GraphError
from flexrt.search.substitutions.library import (activation_fusion_rules, library_files, library_stats,
                                                 parse_problem, to_innermost, unity_example_rules)
from flexrt.search.substitutions.rule import OP_SPECS, Rule, check_rule_ops, load_rules, save_rules
from tests.strategy.mutations import mangled, mutated_json

FOLDER = Path(tempfile.mkdtemp(prefix="flexrt-rule-fuzz-"))
SHIPPED = json.loads(library_files()[0].read_text())["rule"][:3] if library_files() else []
EXAMPLES = [r.to_json() for r in [*unity_example_rules().values(), *activation_fusion_rules()]]
VALID = {"_t": "RuleCollection", "rule": SHIPPED + EXAMPLES}
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load(data: bytes):
    path = FOLDER / "r.json"
    path.write_bytes(data)
    try:
        rules = load_rules(path)
    except FlexrtError:
        return None
    for r in rules:
        assert all(op.type in OP_SPECS for op in r.src + r.dst)
        parse_problem(r)
        to_innermost(r)
    library_stats(rules)
    return rules


def test_the_valid_file_loads_and_round_trips():
    rules = _load(json.dumps(VALID).encode())
    assert [r.to_json() for r in rules] == [Rule.from_json(d).to_json() for d in VALID["rule"]]
    save_rules(FOLDER / "again.json", rules)
    assert load_rules(FOLDER / "again.json") == rules


@FUZZ
@given(mutated_json(VALID))
def test_mutated_rule_file(data):
    _load(data)


@FUZZ
@given(mangled(json.dumps(VALID, indent=1).encode()))
def test_mangled_rule_file(data):
    _load(data)


def test_rules_made_in_code_are_checked_on_load_not_on_construction():
    """A Rule built in code may hold any operator (the verifier reports it as unknown); a file may not."""
    from flexrt.search.substitutions.rule import OutputMap, PatternOp, Slot
    r = Rule("softmax", (PatternOp("OP_SOFTMAX", (Slot(-1),)),), (PatternOp("OP_RELU", (Slot(-1),)),),
             (OutputMap(0, 0, 0, 0),))
    assert Rule.from_json(r.to_json()) == r
    with pytest.raises(GraphError, match=r"r\.json: rule\[0\]\.srcOp\[0\]\.type is 'OP_SOFTMAX'; valid: OP_LINEAR"):
        check_rule_ops(r, "r.json: rule[0]")
