"""Running experiments: one JSON line per finished run, resume recomputes nothing that finished
(also after an interruption), a folder with results is refused without --resume, workers give the
same results, failures are recorded and rerun, and the report puts the paper beside ours."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from flexrt.errors import ConfigError
from flexrt.experiments import Outcome, Param, SkipRun, load_results, parse_experiment, register_kind, run_experiment

CALLS: list[dict] = []


@register_kind("test_square", params=(Param("x", "int", minimum=0), Param("seed", "int", 0)),
               metrics=("square", "half"), description="x squared (tests)")
def _square(inputs) -> Outcome:
    CALLS.append(dict(inputs))
    x = inputs["x"]
    if x == 13:
        raise SkipRun("13 is unlucky")
    if x == 99:
        raise ConfigError("99 is refused")
    if x == 66:
        raise KeyboardInterrupt
    if x == 77:   # a search caught Ctrl-C and returned its best so far
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            return Outcome({"square": -1, "half": -1})
    return Outcome({"square": x * x, "half": x / 2}, strategy={"x": x}, convergence={"c": [[0.0, float(x)], [1.0, 1.0]]})


def experiment(xs, extra: str = ""):
    # the paper's numbers for the runs there are (a reference matching no run is refused)
    refs = [line for x, line in ((3, '  - {where: {x: 3}, metric: square, value: 9, source: "arithmetic"}'),
                                 (4, '  - {where: {x: 4}, metric: square, range: [10, 12], source: "a range"}'))
            if x in xs]
    reference = "\n".join(["reference:"] + refs) if refs else ""
    text = f"""\
name: sq
title: squares
paper: host
reproduces: x squared
kind: test_square
axes: {{x: {json.dumps(xs)}}}
measure: [square, half]
{reference}
plots:
  - {{type: bar, x: x, y: square}}
  - {{type: convergence}}
  - {{type: scatter, x: half, y: square}}
{extra}"""
    return parse_experiment(text, "sq.yaml")


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()


def test_a_run_writes_one_line_per_run_and_the_report(tmp_path):
    s = run_experiment(experiment([1, 2, 3, 4]), tmp_path)
    rows = load_results(tmp_path / "results.jsonl")
    assert [r["inputs"]["x"] for r in rows] == [1, 2, 3, 4] and len(CALLS) == 4
    assert [r["metrics"]["square"] for r in rows] == [1, 4, 9, 16]
    row = rows[0]
    assert row["status"] == "ok" and row["flexrt"]["version"] and row["host"]["cpus"] >= 1 and row["seed"] == 0
    assert json.loads((tmp_path / row["strategy_file"]).read_text()) == {"x": 1}
    report = s.report.read_text()
    assert "| 3 | 9 | 9 | 1x |" in report and "| 4 | 16 | 10-12 | 1.33x of high |" in report
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["1_bar_square.png", "2_convergence_curves.png",
                                                                      "3_scatter_square.png"]


def test_results_round_trip_through_json(tmp_path):
    run_experiment(experiment([2, 5]), tmp_path, report=False)
    rows = load_results(tmp_path / "results.jsonl")
    again = [json.loads(json.dumps(r)) for r in rows]
    assert again == rows and rows[1]["convergence"] == {"c": [[0.0, 5.0], [1.0, 1.0]]}


def test_resume_recomputes_nothing_that_finished(tmp_path):
    exp = experiment([1, 2, 3])
    run_experiment(exp, tmp_path)
    assert len(CALLS) == 3
    s = run_experiment(exp, tmp_path, resume=True)
    assert len(CALLS) == 3 and s.computed == [] and len(s.cached) == 3
    bigger = experiment([1, 2, 3, 4, 5])
    s = run_experiment(bigger, tmp_path, resume=True)
    assert [c["x"] for c in CALLS[3:]] == [4, 5] and len(s.cached) == 3


def test_resume_after_an_interruption_runs_only_the_rest(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(experiment([1, 2, 66, 4]), tmp_path)
    assert [r["inputs"]["x"] for r in load_results(tmp_path / "results.jsonl")] == [1, 2]
    assert "2 of 4 runs finished" in (tmp_path / "report.md").read_text()
    CALLS.clear()
    run_experiment(experiment([1, 2, 3, 4]), tmp_path, resume=True)
    assert [c["x"] for c in CALLS] == [3, 4]


def test_a_run_whose_search_caught_ctrl_c_is_not_recorded(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_experiment(experiment([1, 77, 2]), tmp_path)
    assert [r["inputs"]["x"] for r in load_results(tmp_path / "results.jsonl")] == [1]


def test_a_folder_with_results_is_refused_without_resume(tmp_path):
    run_experiment(experiment([1]), tmp_path)
    with pytest.raises(ConfigError, match=r"already holds the results of 1 runs .* pass --resume"):
        run_experiment(experiment([1]), tmp_path)


def test_skips_are_kept_and_failures_rerun(tmp_path):
    s = run_experiment(experiment([13, 99, 2]), tmp_path)
    rows = {r["inputs"]["x"]: r for r in load_results(tmp_path / "results.jsonl")}
    assert rows[13]["status"] == "skipped" and rows[13]["reason"] == "13 is unlucky"
    assert rows[99]["status"] == "failed" and "99 is refused" in rows[99]["reason"] and len(s.failed) == 1
    CALLS.clear()
    run_experiment(experiment([13, 99, 2]), tmp_path, resume=True)
    assert [c["x"] for c in CALLS] == [99]
    assert "- failed: seed: 0, x: 99: ConfigError: 99 is refused" in (tmp_path / "report.md").read_text()


def test_a_cut_last_line_is_a_run_that_did_not_finish(tmp_path):
    run_experiment(experiment([1, 2]), tmp_path)
    path = tmp_path / "results.jsonl"
    path.write_text(path.read_text() + '{"key": "abc", "status": "o')
    CALLS.clear()
    run_experiment(experiment([1, 2]), tmp_path, resume=True)
    assert CALLS == []


def test_workers_give_the_same_results(tmp_path):
    exp = experiment([1, 2, 3, 4, 5])
    run_experiment(exp, tmp_path / "one", report=False)
    run_experiment(exp, tmp_path / "two", jobs=2, report=False)
    one, two = ({r["key"]: r["metrics"] for r in load_results(tmp_path / d / "results.jsonl")} for d in ("one", "two"))
    assert one == two and len(one) == 5


@pytest.mark.parametrize("make, where", [
    (lambda out, key: (out / "strategies").write_text("x"), "strategies is not a folder"),
    (lambda out, key: (out / "plots").write_text("x"), "plots is not a folder"),
    (lambda out, key: (out / "report.md").mkdir(), "report.md is not a regular file"),
    (lambda out, key: (out / "strategies" / f"{key}.json").mkdir(parents=True), ".json is not a regular file"),
])
def test_an_output_entry_of_the_wrong_kind_is_refused_before_any_run(tmp_path, make, where):
    exp = experiment([3])
    out = tmp_path / "out"
    out.mkdir()
    make(out, exp.runs[0].key)
    CALLS.clear()
    with pytest.raises(ConfigError, match=where):
        run_experiment(exp, out)
    assert CALLS == [] and not (out / "results.jsonl").exists()
