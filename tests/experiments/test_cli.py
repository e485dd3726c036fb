"""``flexrt run`` and ``flexrt experiments``: lists, shows, runs and resumes, and bad input is one
line with exit status 1 (usage mistakes 2)."""

from __future__ import annotations

import json

from flexrt.cli import main
from flexrt.experiments import shipped

TINY = """\
name: bubbles
title: bubbles
paper: host
reproduces: the 1F1B law
kind: pipeline_bubble
params: {schedule: 1f1b}
axes: {stages: [2, 4], micro_batches: [4]}
quick:
  axes: {stages: [2]}
"""


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_experiments_lists_every_shipped_one(capsys):
    rc, out, _ = run(capsys, "experiments", "--json")
    names = [e["name"] for e in json.loads(out)["experiments"]]
    assert rc == 0 and names == sorted(shipped())
    rc, out, _ = run(capsys, "experiments")
    assert rc == 0 and "unity_fig15b" in out and "up to 1.4x" in out


def test_experiments_show_and_kinds(capsys):
    rc, out, _ = run(capsys, "experiments", "show", "unity_fig2", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["kind"] == "unity_fig2" and {"metric": "dp_moved_elements", "paper": "813056",
                                                         "where": {}, "source": doc["references"][0]["source"]} \
        == doc["references"][0]
    rc, out, _ = run(capsys, "experiments", "kinds")
    assert rc == 0 and "joint_vs_sequential:" in out and "parameters: model, machine=summit" in out


def test_run_then_resume_then_refuse(tmp_path, capsys):
    f = tmp_path / "bubbles.yaml"
    f.write_text(TINY)
    out = tmp_path / "out"
    rc, _, _ = run(capsys, "run", str(f), "--output", str(out), "--json")
    assert rc == 0 and (out / "report.md").is_file()
    rc, text, _ = run(capsys, "run", str(f), "--output", str(out), "--resume", "--json")
    doc = json.loads(text)
    assert rc == 0 and doc["computed"] == 0 and doc["cached"] == 2
    rc, _, err = run(capsys, "run", str(f), "--output", str(out))
    assert rc == 1 and "already holds the results of 2 runs" in err and "--resume" in err
    rc, text, _ = run(capsys, "run", str(f), "--quick", "--output", str(tmp_path / "q"), "--jobs", "2")
    assert rc == 0 and "1 runs, 1 computed" in text


def test_bad_input_is_one_line(tmp_path, capsys):
    f = tmp_path / "bubbles.yaml"
    f.write_text(TINY.replace("stages: [2, 4]", "stages: [2, -4]"))
    rc, _, err = run(capsys, "run", str(f))
    assert rc == 1 and err.count("\n") == 1
    assert "bubbles.yaml:7: field 'axes.stages[1]' must be between 1 and 64, got -4" in err
    rc, _, err = run(capsys, "run", "no_such_experiment")
    assert rc == 1 and "unknown experiment 'no_such_experiment'; shipped: disco_fig10" in err
    assert "unity_fig16b" in err and "in all" not in err        # every shipped name, not the first 13
    rc, _, err = run(capsys, "run", "unity_fig15")
    assert rc == 1 and "unknown experiment 'unity_fig15' (did you mean unity_fig15b, unity_fig15a" in err
    rc, _, err = run(capsys, "run", "unity_fig2", "--jobs", "0")
    assert rc == 2 and "--jobs" in err
