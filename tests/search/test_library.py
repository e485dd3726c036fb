"""Rule libraries: our shipped library (missing / empty / present), FlexFlow's graph_subst_3_v2.json
(counts, unusable rules, its dimension convention checked concretely), counts, concrete checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexrt.errors import ConfigError
from flexrt.search.substitutions import library
from flexrt.search.substitutions.library import (check_rule, convention_report, library_stats, load_flexflow_rules,
                                                 load_library, parse_problem, unity_example_rules)
from flexrt.search.substitutions.rule import save_rules
from tests.search.test_match import CORRECT, WRONG

FLEXFLOW_FILE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "graph_subst_3_v2.json"
needs_flexflow = pytest.mark.skipif(not FLEXFLOW_FILE.is_file(),
                                    reason=f"FlexFlow's rule file is not at {FLEXFLOW_FILE} (it is not shipped)")


def test_load_library_without_a_library_says_how_to_make_one(monkeypatch):
    monkeypatch.setattr(library, "library_files", lambda: [])
    with pytest.raises(ConfigError, match="flexrt substitutions generate"):
        load_library()


def test_load_library_empty_file_is_an_error(tmp_path):
    save_rules(tmp_path / "empty.json", [])
    with pytest.raises(ConfigError, match="holds no rules"):
        load_library([tmp_path / "empty.json"])


def test_load_library_reads_every_file(tmp_path, monkeypatch):
    save_rules(tmp_path / "a.json", CORRECT[:3])
    save_rules(tmp_path / "b.json", CORRECT[3:5])
    monkeypatch.setattr(library, "library_files", lambda: sorted(tmp_path.glob("*.json")))
    assert [r.name for r in load_library()] == [r.name for r in CORRECT[:5]]


def test_library_files_are_package_data():
    for f in library.library_files():
        assert f.suffix == ".json" and f.parent.name == "substitutions"


def test_library_stats_counts_sizes_and_operators():
    rules = list(unity_example_rules().values())
    s = library_stats(rules)
    assert s["rules"] == 5 and s["applicable"] == 5 and s["unusable"] == 0 and s["parse"] == 5
    assert s["by_size"] == {"1->3": 1, "1->4": 1, "2->2": 1, "2->3": 1, "3->6": 1}
    assert s["by_operator"]["OP_LINEAR"] == 3 + 2 + 2  # fig11b 2 + 1, column-parallel 1 + 1, row-parallel 1 + 1
    assert s["by_operator"]["OP_REDUCE"] == 2


def test_check_rule_holds_for_correct_rules_and_fails_for_wrong_ones():
    for r in CORRECT:
        assert check_rule(r, base=8) == "holds", r.name
    for r in WRONG:
        assert check_rule(r, base=8) == "fails", r.name


def test_parse_problem_names_the_operator():
    from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
    r = Rule("x", (PatternOp("OP_CONV2D", (Slot(-1),)),), (PatternOp("OP_RELU", (Slot(-1),)),), (OutputMap(0, 0, 0, 0),))
    assert "OP_CONV2D" in parse_problem(r)


@needs_flexflow
def test_flexflow_file_report():
    rep = load_flexflow_rules(FLEXFLOW_FILE)
    assert rep.stats["rules"] == 640 == len(rep.rules)
    assert len(rep.unusable) == rep.stats["unusable"] == 112
    assert sum(rep.stats["by_size"].values()) == 640 and rep.stats["by_source_size"] == {1: 3, 2: 48, 3: 589}
    assert rep.unparsed == {}  # every operator and parameter has a meaning in semantics.py
    assert set(rep.stats["by_operator"]) == {"OP_REPLICATE", "OP_REDUCE", "OP_PARTITION", "OP_COMBINE", "OP_CONCAT",
                                             "OP_SPLIT", "OP_LINEAR", "OP_RELU", "OP_EW_ADD", "OP_EW_MUL"}


@needs_flexflow
def test_flexflow_dimensions_count_from_the_outermost():
    """Rules 472-476 (concat of two linears = linear of concatenated weights: PM_AXIS) and 241, 243
    (linear of a replicated input and a column-split weight = split output: PM_PARALLEL_DIM) hold
    only when dimensions count from the outermost (NumPy order, TASO's), not the innermost
    (semantics.py's); no rule holds only under the innermost numbering."""
    rep = load_flexflow_rules(FLEXFLOW_FILE)
    rules = rep.raw
    for i in (241, 243, 472, 473, 474, 475, 476):
        assert check_rule(rules[i], "outermost") == "holds", i
        assert check_rule(rules[i], "innermost") == "invalid", i
        assert check_rule(rep.rules[i], "innermost") == "holds", i   # converted by to_innermost
    sample = rules[440:500]
    rep = convention_report(sample)
    assert rep["outermost"]["holds"] > rep["innermost"]["holds"]
    assert all(v["fails"] == 0 for v in rep.values())


def test_flexflow_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_flexflow_rules(tmp_path / "graph_subst_3_v2.json")


@needs_flexflow
def test_flexflow_rule_applies_to_a_pcg_and_keeps_the_computation():
    """FlexFlow's rule 241 (linear of a replicated input and a column-split weight = the linear's
    output split along its last dimension), converted to our numbering, rewrites a rank-3 PCG."""
    from flexrt.ir.ops import InputAttrs, LinearAttrs, RepartitionAttrs, ReplicateAttrs, WeightAttrs
    from flexrt.ir.pcg import PCG, TensorRef
    from flexrt.ir.tensor_shape import TensorShape
    from flexrt.search.substitutions.match import find_matches
    from tests.search.test_match import RELU, law_holds
    rule = load_flexflow_rules(FLEXFLOW_FILE).rules[241]
    g = PCG()
    x = g.add_node(InputAttrs(TensorShape((4, 6, 8))))
    w = g.add_node(WeightAttrs(TensorShape((8, 10))))
    lin = g.add_node(LinearAttrs(10, False), [TensorRef(g.add_node(ReplicateAttrs(2), [TensorRef(x)])),
                                              TensorRef(g.add_node(RepartitionAttrs(1, 2), [TensorRef(w)]))])
    g.add_node(RELU, [TensorRef(lin)])
    (m,) = find_matches(g, rule)
    assert law_holds(g, rule, m)
    assert find_matches(g, load_flexflow_rules(FLEXFLOW_FILE, dims="innermost").rules[241]) == []
