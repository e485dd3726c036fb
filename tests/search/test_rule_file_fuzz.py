"""Rule files broken at random (``tests/strategy/mutations.py``) load or fail with a flexrt error,
never another exception; the rules of a file that still loads are in the rule language, so counting
them and converting their dimensions raise nothing either."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from flexrt.errors import FlexrtError, GraphError
from flexrt.search.substitutions.library import (activation_fusion_rules, library_files, library_stats,
                                                 parse_problem, to_innermost, unity_example_rules)
from flexrt.search.substitutions.rule import OP_SPECS, Rule, check_rule_ops, load_rules, save_rules
from tests.strategy.mutations import mangled, mutated_json

FOLDER = Path(tempfile.mkdtemp(prefix="flexrt-rule-fuzz-"))  # hypothesis' examples outlive tmp_path; removed below


def teardown_module():
    shutil.rmtree(FOLDER, ignore_errors=True)


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
    r = Rule("pool", (PatternOp("OP_POOL2D", (Slot(-1),)),), (PatternOp("OP_RELU", (Slot(-1),)),),
             (OutputMap(0, 0, 0, 0),))
    assert Rule.from_json(r.to_json()) == r
    with pytest.raises(GraphError, match=r"r\.json: rule\[0\]\.srcOp\[0\]\.type is 'OP_POOL2D'; valid: OP_LINEAR"):
        check_rule_ops(r, "r.json: rule[0]")


def _one_op_file(t: str, n_inputs: int, params: dict) -> bytes:
    op = {"_t": "Operator", "type": t, "input": [{"_t": "Tensor", "opId": -1 - k, "tsId": 0} for k in range(n_inputs)],
          "para": [{"_t": "Parameter", "key": k, "value": v} for k, v in params.items()]}
    rule = {"_t": "Rule", "name": "r", "srcOp": [op], "dstOp": [op],
            "mappedOutput": [{"_t": "MapOutput", "srcOpId": 0, "srcTsId": 0, "dstOpId": 0, "dstTsId": 0}]}
    return json.dumps({"_t": "RuleCollection", "rule": [rule]}).encode()


@pytest.mark.parametrize("t, n, params, message", [
    ("OP_SOFTMAX", 1, {}, r"\(OP_SOFTMAX\)\.para: OP_SOFTMAX needs PM_SOFTMAX_DIM"),
    ("OP_SOFTMAX", 1, {"PM_SOFTMAX_DIM": 8}, r"PM_SOFTMAX_DIM is 8; valid: 0\.\.7 \(a dimension\)"),
    ("OP_LAYERNORM", 1, {"PM_AXES": 0}, r"PM_AXES is 0; valid: 1\.\.8 \(the number of innermost dimensions"),
    ("OP_LAYERNORM", 4, {"PM_AXES": 1}, r"\.input: OP_LAYERNORM takes 1 or 2 or 3 input\(s\), got 4"),
    ("OP_LINEAR", 4, {"PM_ACTI": 0}, r"\.input: OP_LINEAR takes 2 or 3 input\(s\), got 4"),
    ("OP_LINEAR", 3, {"PM_ACTI": 5}, r"PM_ACTI is 5; valid: 0\.\.4"),
    ("OP_EMBEDDING", 2, {"PM_AGGR": 2}, r"PM_AGGR is 2; valid: 0\.\.1 \(the embedding's aggregation"),
    ("OP_SIGMOID", 1, {"PM_AXIS": 0}, r"OP_SIGMOID takes no parameter 'PM_AXIS'; valid: none"),
    ("OP_BATCHMATMUL", 1, {}, r"OP_BATCHMATMUL takes 2 input\(s\), got 1"),
    ("OP_BIAS_ADD", 2, {"PM_ACTI": 0}, r"OP_BIAS_ADD takes no parameter 'PM_ACTI'"),
])
def test_new_operators_with_bad_inputs_or_parameters_name_file_field_and_valid_values(t, n, params, message):
    path = FOLDER / "bad.json"
    path.write_bytes(_one_op_file(t, n, params))
    with pytest.raises(GraphError, match=r"bad\.json: rule\[0\] \('r'\)\.srcOp\[0\].*" + message):
        load_rules(path)


@pytest.mark.parametrize("t, n, params", [("OP_SOFTMAX", 1, {"PM_SOFTMAX_DIM": 1}), ("OP_LAYERNORM", 3, {"PM_AXES": 1}),
                                          ("OP_LINEAR", 3, {"PM_ACTI": 3}), ("OP_EMBEDDING", 2, {"PM_AGGR": 1}),
                                          ("OP_GELU", 1, {}), ("OP_BATCHMATMUL", 2, {}), ("OP_BIAS_ADD", 2, {})])
def test_new_operators_with_good_parameters_load(t, n, params):
    path = FOLDER / "good.json"
    path.write_bytes(_one_op_file(t, n, params))
    (rule,) = load_rules(path)
    assert rule.src[0].type == t and len(rule.src[0].inputs) == n and dict(rule.src[0].params) == params


def _rule_file(rule: dict, *more: dict) -> Path:
    path = FOLDER / "bad.json"
    path.write_text(json.dumps({"_t": "RuleCollection", "rule": [rule, *more]}))
    return path


def _ops(*types_and_inputs) -> list:
    return [{"_t": "Operator", "type": t, "input": [{"_t": "Tensor", "opId": i, "tsId": 0} for i in ins], "para": []}
            for t, ins in types_and_inputs]


def _map(src_op: int, dst_op: int, src_ts: int = 0, dst_ts: int = 0) -> dict:
    return {"_t": "MapOutput", "srcOpId": src_op, "srcTsId": src_ts, "dstOpId": dst_op, "dstTsId": dst_ts}


ADD = {"_t": "Rule", "name": "r", "srcOp": _ops(("OP_EW_ADD", (-1, -2))), "dstOp": _ops(("OP_EW_ADD", (-2, -1))),
       "mappedOutput": [_map(0, 0)]}


@pytest.mark.parametrize("change, message", [
    ({"name": ""}, r"bad\.json: rule\[0\]\.name is empty; a rule needs a name that is not blank"),
    ({"name": " \t"}, r"bad\.json: rule\[0\]\.name is 2 white-space character\(s\); a rule needs a name"),
    ({"name": "a\nb"}, r"rule\[0\]\.name 'a\\nb' holds the control character '\\n'"),
    ({"mappedOutput": [_map(0, 0), _map(0, 0)]},
     r"rule\[0\] \('r'\)\.mappedOutput\[1\]: source output 0 of operator 0 \(OP_EW_ADD\) is already mapped by "
     r"mappedOutput\[0\]; map each source output once"),
    ({"dstOp": _ops(("OP_RELU", (-1,)), ("OP_RELU", (-1,))), "mappedOutput": [_map(0, 0), _map(0, 1)]},
     r"mappedOutput\[1\]: source output 0 of operator 0 \(OP_EW_ADD\) is already mapped by mappedOutput\[0\]"),
    ({"srcOp": _ops(("OP_RELU", (-1,)), ("OP_RELU", (-1,))), "dstOp": _ops(("OP_RELU", (-1,))),
      "mappedOutput": [_map(0, 0), _map(1, 0)]},
     r"mappedOutput\[1\]: destination output 0 of operator 0 \(OP_RELU\) already replaces a source output in "
     r"mappedOutput\[0\]; each destination output replaces one source output"),
    ({"srcOp": _ops(("OP_EW_ADD", (-1, -2)), ("OP_RELU", (0,)))},
     r"rule\[0\] \('r'\)\.srcOp\[1\] \(OP_RELU\): no later source operator reads its output and mappedOutput does "
     r"not map it"),
    ({"dstOp": _ops(("OP_RELU", (-1,)), ("OP_EW_ADD", (-2, -1)))}, r"\.dstOp\[1\] \(OP_EW_ADD\): no later "
                                                                  r"destination operator reads its output"),
    ({"dstOp": [{"type": "OP_SCALAR_MULTIPLY", "input": [{"opId": -1, "tsId": 0}],
                 "para": [{"key": "PM_SCALAR", "value": 2 ** 31}]}]},
     r"dstOp\[0\]\.para\[0\]\.value is 2147483648; valid: -2147483648\.\.2147483647 \(FlexFlow reads"),
    ({"dstOp": [{"type": "OP_PARTITION", "input": [{"opId": -1, "tsId": 0}],
                 "para": [{"key": "PM_PARALLEL_DIM", "value": 0}, {"key": "PM_PARALLEL_DEGREE", "value": 10 ** 40}]}]},
     r"dstOp\[0\]\.para\[1\]\.value is 1{1}0{40}; valid: -2147483648\.\.2147483647"),
    ({"srcOp": _ops(("OP_EW_ADD", (-10 ** 12, -2)))}, r"srcOp\[0\]\.input\[0\]\.opId is -1000000000000; valid: "),
    ({"mappedOutput": [_map(0, 0, src_ts=2 ** 40)]},
     r"mappedOutput\[0\]\.srcTsId is 1099511627776; valid: 0\.\.2147483647"),
])
def test_structural_nonsense_is_a_graph_error_naming_rule_and_field(change, message):
    with pytest.raises(GraphError, match=message):
        load_rules(_rule_file({**ADD, **change}))


def test_a_long_name_is_cut_in_messages():
    long = {**ADD, "name": "n" * 5000}
    with pytest.raises(GraphError) as e:
        load_rules(_rule_file(long, long))
    assert "is also the name of rule[0]" in str(e.value) and "(5002 characters)" in str(e.value)
    assert len(str(e.value)) < 300
    with pytest.raises(GraphError) as e:
        load_rules(_rule_file({**long, "srcOp": _ops(("OP_WARP", (-1,)))}))
    assert "(5002 characters)).srcOp[0].type is 'OP_WARP'" in str(e.value) and len(str(e.value)) < 1000
    (rule,) = load_rules(_rule_file(long))   # a long name that is not blank is a name
    assert rule.name == "n" * 5000


@pytest.mark.parametrize("change", [
    {"srcOp": _ops(("OP_EW_ADD", (-1, -3))), "dstOp": _ops(("OP_EW_ADD", (-3, -1)))},  # FlexFlow's numbering has gaps
    {"dstOp": _ops(("OP_EW_ADD", (-2, -4)))},                                     # unusable, reported, not refused
    {"dstOp": [{"type": "OP_SCALAR_MULTIPLY", "input": [{"opId": -1, "tsId": 0}],
                "para": [{"key": "PM_SCALAR", "value": -2 ** 31}]}]},
    {"srcOp": [{"type": "OP_SPLIT", "input": [{"opId": -1, "tsId": 0}], "para": [{"key": "PM_AXIS", "value": 0}]}],
     "dstOp": _ops(("OP_RELU", (-1,)), ("OP_RELU", (-2,))), "mappedOutput": [_map(0, 0), _map(0, 1, 1, 0)]},
])
def test_legitimate_rules_still_load(change):
    (rule,) = load_rules(_rule_file({**ADD, **change}))
    assert rule.name == "r"


def test_an_empty_rule_list_loads_as_no_rules():
    """FlexFlow's format allows it and ``generate`` writes one when nothing is proved (its record beside
    it says why); ``load_library`` and ``show`` refuse it."""
    path = FOLDER / "empty.json"
    save_rules(path, [])
    assert load_rules(path) == []


def test_the_shipped_rule_files_still_load():
    for path in library_files():
        assert len(load_rules(path)) == len(json.loads(path.read_text())["rule"])
    from tests.search.test_library import FLEXFLOW_FILE
    if FLEXFLOW_FILE.is_file():   # FlexFlow's own file (not shipped): every rule, names unique, maps one to one
        assert len(load_rules(FLEXFLOW_FILE)) == 640
