"""A tiny variant of every shipped experiment runs end to end (the smallest model and budget its
file's ``tiny`` section names) and reports every run finished; the slower ones are marked slow."""

from __future__ import annotations

import pytest

from flexrt.experiments import load_experiment, load_results, run_experiment, shipped

SHIPPED = shipped()
# tiny variants that take more than a few seconds on a 2-core host
SLOW = {"flexflow_fig7", "unity_fig14", "unity_fig15a", "disco_table1", "disco_table3", "disco_table4", "disco_fig9",
        "disco_fig10"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(SHIPPED)])
def test_the_tiny_variant_runs(name, tmp_path):
    exp = load_experiment(SHIPPED[name], "tiny")
    summary = run_experiment(exp, tmp_path)
    rows = load_results(tmp_path / "results.jsonl")
    assert summary.failed == [] and all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert len(rows) == len(exp.runs)
    for r in rows:
        assert set(r["metrics"]) <= set(exp.metrics)
    report = summary.report.read_text()
    assert report.startswith(f"# {exp.title}") and f"{len(exp.runs)} of {len(exp.runs)} runs finished" in report
