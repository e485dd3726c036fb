"""Experiment files: every shipped one is valid in each variant, and a bad file is refused with its
file:line, the field and what is valid (a ConfigError, never a traceback)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from flexrt.errors import ConfigError
from flexrt.experiments import kind, load_experiment, parse_experiment, shipped

SHIPPED = shipped()

GOOD = """\
name: demo
title: a demo
paper: host
reproduces: the bubble law
kind: pipeline_bubble
params: {schedule: 1f1b}
axes:
  stages: [2, 4]
  micro_batches: [4, 8]
runs:
  - {stages: 4, micro_batches: 8, schedule: interleaved, chunks: 2}
quick:
  axes: {stages: [2]}
measure: [bubble, law]
reference:
  - {where: {stages: 4, micro_batches: 8}, metric: bubble, value: 0.375, source: "(p-1)/m"}
report:
  rows: [schedule, stages, micro_batches]
plots:
  - {type: bar, x: stages, y: bubble, group: micro_batches}
"""


def error_of(text: str, variant: str = "full") -> str:
    with pytest.raises(ConfigError) as e:
        parse_experiment(text, "demo.yaml", variant)
    return str(e.value)


def test_the_shipped_experiments_cover_the_papers():
    expected = {"flexflow_fig6", "flexflow_fig7", "flexflow_table5", "flexflow_sec8_3", "flexflow_fig11",
                "unity_fig2", "unity_table2", "unity_fig14", "unity_fig15a", "unity_fig15b", "unity_fig16b", "disco_table1", "simulator_accuracy",
                "disco_table3", "disco_table4", "disco_fig9", "disco_fig10", "pipeline_bubbles"}
    assert expected <= set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("variant", ["full", "quick", "tiny"])
def test_every_shipped_experiment_is_valid(name, variant):
    exp = load_experiment(SHIPPED[name], variant)
    assert exp.name == name and exp.runs
    k = kind(exp.kind)
    for run in exp.runs:
        assert set(run.params) == set(k.param_names)
    assert len({r.key for r in exp.runs}) == len(exp.runs)
    assert set(exp.measure) <= set(exp.metrics)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_quick_and_tiny_are_smaller_than_full(name):
    full, quick, tiny = (load_experiment(SHIPPED[name], v) for v in ("full", "quick", "tiny"))
    assert len(tiny.runs) <= len(quick.runs) <= len(full.runs)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_reference_cites_its_source(name):
    text = SHIPPED[name].read_text()
    exp = load_experiment(SHIPPED[name])
    assert all(r.source for r in exp.references)
    assert text.lstrip().startswith("#"), "the file opens with a comment saying what the paper reports"


def test_the_good_file_expands_axes_then_runs():
    exp = parse_experiment(GOOD, "demo.yaml")
    assert [(r.params["stages"], r.params["micro_batches"]) for r in exp.runs] == [(2, 4), (2, 8), (4, 4), (4, 8), (4, 8)]
    assert exp.runs[-1].params["schedule"] == "interleaved" and exp.runs[0].params["chunks"] == 1
    quick = parse_experiment(GOOD, "demo.yaml", "quick")
    assert [r.params["stages"] for r in quick.runs] == [2, 2, 4]


def test_keys_hash_the_inputs():
    a, b = parse_experiment(GOOD, "demo.yaml").runs[:2]
    assert a.key != b.key
    again = parse_experiment(GOOD.replace("title: a demo", "title: another"), "demo.yaml").runs[0]
    assert again.key == a.key   # the title is no input


@pytest.mark.parametrize("old, new, expected", [
    ("kind: pipeline_bubble", "kind: bubbles", r"demo.yaml:5: field 'kind': unknown value 'bubbles'; valid: .*pipeline_bubble"),
    ("  stages: [2, 4]", "  stages: [2, four]", r"demo.yaml:8: field 'axes.stages\[1\]' must be an integer, got 'four'"),
    ("  stages: [2, 4]", "  stages: [2, 0]", r"demo.yaml:8: field 'axes.stages\[1\]' must be between 1 and 64, got 0"),
    ("  micro_batches: [4, 8]", "  micro_batch: [4, 8]",
     r"demo.yaml:9: field 'axes.micro_batch': run kind 'pipeline_bubble' takes no parameter 'micro_batch'; valid: schedule"),
    ("params: {schedule: 1f1b}", "params: {schedule: 2f2b}", r"demo.yaml:6: field 'params.schedule': unknown schedule '2f2b'; valid: gpipe, 1f1b"),
    # inputs that do not go together (the kind's check), refused when the file is read
    ("  - {stages: 4, micro_batches: 8, schedule: interleaved, chunks: 2}",
     "  - {stages: 4, micro_batches: 6, schedule: interleaved, chunks: 2}",
     r"demo.yaml:11: field 'runs\[0\]': run kind 'pipeline_bubble': the interleaved schedule needs micro_batches a "
     r"multiple of stages, got 6 over 4 \(the run with chunks: 2, micro_batches: 6, schedule: 'interleaved', stages: 4\)"),
    ("params: {schedule: 1f1b}", "params: {schedule: 1f1b, chunks: 2}",
     r"demo.yaml:9: field 'axes': run kind 'pipeline_bubble': chunks 2 is only for the interleaved schedule; "
     r"give chunks: 1 with 1f1b \(the run with chunks: 2, micro_batches: 4, schedule: '1f1b', stages: 2\)"),
    ("paper: host", "paper: taso", r"demo.yaml:3: field 'paper': unknown value 'taso'; valid: flexflow, unity, disco, megatron, host"),
    ("measure: [bubble, law]", "measure: [bubble, speed]", r"demo.yaml:14: field 'measure\[1\]': unknown value 'speed'; valid: idle_fraction"),
    ("value: 0.375", "value: high", r"demo.yaml:16: field 'reference\[0\].value' must be a number, got 'high'"),
    ("{type: bar,", "{type: pie,", r"demo.yaml:20: field 'plots\[0\].type': unknown value 'pie'; valid: bar, line, convergence, scatter"),
    ("name: demo", "name: other", r"demo.yaml:1: field 'name': the name must be the file's stem 'demo'"),
    ("title: a demo\n", "title: a demo\ntitel: x\n", r"demo.yaml:3: field 'titel': unknown key 'titel'; valid keys: name, title"),
    ("params: {schedule: 1f1b}", "params: {schedule: 1f1b, chunks: 1}\nparams: {}", r"demo.yaml:7: invalid YAML: found duplicate key 'params'"),
    ("value: 0.375", "range: [0.5, 0.25]",
     r"demo.yaml:16: field 'reference\[0\].range': low 0.5 is above high 0.25; give \[low, high\] with low <= high"),
    ("measure: [bubble, law]", "measure: [bubble, law, bubble]",
     r"demo.yaml:14: field 'measure\[2\]': 'bubble' is listed twice \(also measure\[0\]\); give each once"),
    ("rows: [schedule, stages, micro_batches]", "rows: [stages, schedule, stages]",
     r"demo.yaml:18: field 'report.rows\[2\]': 'stages' is listed twice \(also report.rows\[0\]\)"),
    ("report:\n", "report:\n  relative: [{name: bubble, metric: law, to: {stages: 2}}]\n",
     r"demo.yaml:18: field 'report.relative\[0\].name': 'bubble' is already a metric of run kind 'pipeline_bubble'"),
    ("report:\n", "report:\n  relative: [{name: r, metric: law, to: {stages: 2}}, {name: r, metric: bubble, to: {stages: 2}}]\n",
     r"demo.yaml:18: field 'report.relative\[1\].name': 'r' is already the name of an earlier entry"),
    ("report:\n", "report:\n  relative: [{name: r, metric: law, to: {}}]\n",
     r"demo.yaml:18: field 'report.relative\[0\].to': expected at least one parameter .*an empty 'to' is the run itself"),
    # a reference compared with no run: a mistyped value, refused with the values the runs have
    ("{where: {stages: 4, micro_batches: 8}", "{where: {stages: 3, micro_batches: 8}",
     r"demo.yaml:16: field 'reference\[0\].where': stages: 3 matches none of the runs; their values of stages: 2, 4; a reference must match a run"),
    ("{where: {stages: 4, micro_batches: 8}", "{where: {stages: 2, schedule: interleaved}",
     r"demo.yaml:16: field 'reference\[0\].where': no run has all of schedule: 'interleaved', stages: 2 \(each value occurs, but never together\)"),
    ("report:\n", "report:\n  relative: [{name: r, metric: law, to: {schedule: gpipe}}]\n",
     r"demo.yaml:18: field 'report.relative\[0\].to': schedule: 'gpipe' matches none of the runs \(their values of "
     r"schedule: '1f1b', 'interleaved'\); every row would have nothing to divide by"),
    ("  axes: {stages: [2]}", "  axes: {stages: [2]}\ntiny:\n  runs: [interleaved]",
     r"demo.yaml:15: field 'tiny.runs\[0\]': expected a mapping of pipeline_bubble's parameters, got 'interleaved'"),
])
def test_bad_files_name_line_field_and_valid_values(old, new, expected):
    assert old in GOOD
    assert re.search(expected, error_of(GOOD.replace(old, new, 1))), error_of(GOOD.replace(old, new, 1))


def test_a_missing_required_parameter_is_named():
    msg = error_of(GOOD.replace("params: {schedule: 1f1b}", "params: {}"))
    assert "demo.yaml:" in msg and "needs 'schedule'" in msg


def test_every_variant_is_checked_whichever_runs():
    """A mistake in the full experiment is found by --quick too, and one in quick by the full run."""
    full_bad = GOOD.replace("  stages: [2, 4]", "  stages: [2, 2.5]")
    assert re.search(r"demo.yaml:8: field 'axes.stages\[1\]' must be an integer, got 2.5", error_of(full_bad, "quick"))
    runs_bad = GOOD.replace("{stages: 4, micro_batches: 8, schedule: interleaved, chunks: 2}",
                            "{stages: 4, micro_batches: 8, schedule: interleaved, chunks: 0}")
    assert "field 'runs[0].chunks' must be between 1 and 16, got 0" in error_of(runs_bad, "quick")
    quick_bad = GOOD.replace("  axes: {stages: [2]}", "  axes: {stages: [0]}")
    assert "demo.yaml:13: field 'quick.axes.stages[0]' must be between 1 and 64, got 0" in error_of(quick_bad, "full")


def test_a_missing_variant_is_named():
    assert re.search(r"demo.yaml:\d+: field 'quik': unknown key", error_of(GOOD.replace("quick:", "quik:")))
    assert "no 'quick' section" in error_of(GOOD.replace("quick:\n  axes: {stages: [2]}\n", ""), "quick")


def test_a_machine_file_must_exist(tmp_path):
    text = GOOD.replace("kind: pipeline_bubble", "kind: unity_fig2").replace(
        "params: {schedule: 1f1b}", "params: {machine: ./nowhere.yaml}")
    msg = error_of(text.split("axes:")[0])
    assert "field 'params.machine': machine file './nowhere.yaml' does not exist" in msg


@given(st.one_of(st.text(max_size=12), st.integers(-5, 5), st.floats(allow_nan=True), st.booleans(), st.none(),
                 st.lists(st.integers(-3, 3), max_size=3)))
def test_any_stage_value_is_accepted_or_refused_with_its_line(value):
    import json
    text = GOOD.replace("  stages: [2, 4]", f"  stages: [2, {json.dumps(value)}]")
    try:
        exp = parse_experiment(text, "demo.yaml")
    except ConfigError as e:
        assert str(e).startswith("demo.yaml:"), str(e)
        return
    assert all(isinstance(r.params["stages"], int) and r.params["stages"] >= 1 for r in exp.runs)


@given(st.sampled_from(["kind", "paper", "title", "name", "measure", "reference", "plots", "report", "axes"]),
       st.one_of(st.text(max_size=8), st.integers(), st.lists(st.text(max_size=3), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_any_top_level_value_is_accepted_or_refused_with_its_line(key, value):
    import json
    lines = [ln for ln in GOOD.splitlines() if not ln.startswith(f"{key}:")]
    cut = [ln for ln in lines if not (ln.startswith("  ") and key in ("axes", "reference", "plots", "report", "runs"))]
    text = "\n".join(cut if key in ("axes", "reference", "plots", "report") else lines) + f"\n{key}: {json.dumps(value)}\n"
    try:
        parse_experiment(text, "demo.yaml")
    except ConfigError as e:
        assert re.match(r"demo\.yaml(:\d+)?: ", str(e)), str(e)


def test_a_machine_file_is_found_beside_the_experiment_and_keyed_by_content(tmp_path):
    from flexrt.experiments import load_experiment
    from flexrt.machine import load_machine
    machine = tmp_path / "machines" / "m.yaml"
    machine.parent.mkdir()
    machine.write_text((SHIPPED["unity_fig2"].parents[1] / "machines" / "dgx1_v100.yaml").read_text())
    f = tmp_path / "fig2.yaml"
    f.write_text(SHIPPED["unity_fig2"].read_text().replace("name: unity_fig2", "name: fig2").replace(
        "machine: dgx1_v100", "machine: machines/m.yaml"))
    run = load_experiment(f, "tiny").runs[0]
    assert run.params["machine"] == str(machine.resolve()) and load_machine(run.params["machine"]).num_devices == 8
    machine.write_text(machine.read_text().replace("description:", "description: changed,"))
    assert load_experiment(f, "tiny").runs[0].key != run.key


def test_a_model_script_is_found_beside_the_experiment_and_keyed_by_content(tmp_path):
    from importlib import resources
    script = tmp_path / "models" / "mine.py"
    script.parent.mkdir()
    script.write_text((resources.files("flexrt.examples") / "mlp.py").read_text())
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ntitle: t\npaper: host\nreproduces: x\nkind: search_speedup\n"
                 "params: {model: models/mine.py, machine: dgx1_v100, devices: 8, budget: 5}\n")
    run = load_experiment(f).runs[0]
    assert run.params["model"] == str(script.resolve())
    script.write_text(script.read_text() + "\n# changed\n")
    assert load_experiment(f).runs[0].key != run.key
    f.write_text(f.read_text().replace("models/mine.py", "models/other.py"))
    with pytest.raises(ConfigError, match=r"mine.yaml:6: field 'params.model': model script 'models/other.py' does "
                                          r"not exist \(paths are relative to the experiment file's folder"):
        load_experiment(f)


def test_an_experiment_without_runs_is_refused():
    text = "name: demo\ntitle: t\npaper: host\nreproduces: x\nkind: pipeline_bubble\nruns: []\n"
    assert re.search(r"demo.yaml:6: field 'runs': the experiment has no runs", error_of(text))


SEARCH = """\
name: demo
title: t
paper: unity
reproduces: r
kind: search_speedup
params: {model: mlp_unity_fig2, machine: dgx1_v100, budget: 5, algorithm: unity, per_device_batch: 8,
         options: OPTIONS}
axes: {devices: [8]}
measure: [found_ms]
"""


@pytest.mark.parametrize("options, expected", [
    ("{alpha: .nan}", r"demo.yaml:7: field 'params.options.alpha': expected a finite number, got nan"),
    ("{devices: .inf}", r"field 'params.options.devices': expected a finite number, got inf"),
    ("{split: [1, .nan]}", r"field 'params.options.split\[1\]': expected a finite number, got nan"),
    ("{cache: maybe}", r"search algorithm 'unity': option 'cache' must be true or false, got 'maybe'"),
    ("{min_degree: 2.5}", r"option 'min_degree' must be an integer, got 2.5"),
    ("{alpha: fast}", r"option 'alpha' must be a number, got 'fast'"),
    ("{rules: lib.json}", r"option 'rules' takes a list of substitution rules in Python"),
])
def test_search_options_are_checked_when_read(options, expected):
    """Results are JSON (no NaN), and every option has its default's type: refused before any run."""
    assert re.search(expected, error_of(SEARCH.replace("OPTIONS", options))), error_of(SEARCH.replace("OPTIONS", options))


def test_a_configuration_ratio_the_dp_refuses_is_refused_when_read():
    text = ("name: demo\ntitle: t\npaper: unity\nreproduces: r\nkind: joint_vs_sequential\n"
            "params: {model: mlp, config_ratio: 0.5, budget: 4}\naxes: {devices: [6]}\nmeasure: [speedup]\n")
    assert "configuration ratio (--config-ratio) must be 0 (every configuration) or a finite number >= 1, got 0.5" \
        in error_of(text)


@pytest.mark.parametrize("flags", ['["-b", "64"]', '["--epochs", "3"]', '["--search-budget", "3"]'])
def test_model_flags_take_only_the_scripts_own(flags):
    """FlexFlow's flags in model_flags were accepted and ignored (--epochs), or overrode the
    experiment's batch without a trace (-b): refused when read."""
    text = ("name: demo\ntitle: t\npaper: unity\nreproduces: r\nkind: joint_vs_sequential\n"
            f"params: {{model: dlrm, budget: 4, model_flags: {flags}}}\naxes: {{devices: [6]}}\nmeasure: [speedup]\n")
    assert "a FlexFlow flag, which the experiment sets itself (the batch is the per-device batch x devices)" \
        in error_of(text)


def test_report_rows_must_tell_the_runs_apart():
    """Rows of `space` alone showed the 2- and 4-GPU runs both as 'figure', the 2-GPU paper number beside each."""
    text = ("name: demo\ntitle: t\npaper: unity\nreproduces: r\nkind: unity_fig2\n"
            "axes: {space: [figure], devices: [2, 4]}\nmeasure: [dp_moved_elements]\nreport: {rows: [space]}\n")
    assert "field 'report.rows': two runs differ only in devices, so rows of space show them alike" in error_of(text)
    parse_experiment(text.replace("rows: [space]", "rows: [space, devices]"), "demo.yaml")



DISCO = "paper: disco\nkind: fusion_search\nmeasure: [time_ms]\naxes: {seed: [0]}\nparams: {machine: disco_a, model: mlp, "
METHODS = r"run kind 'fusion_search': disco: methods must be a non-empty subset of op, dup, allreduce \(each once\), got "


@pytest.mark.parametrize("head, expected", [
    (DISCO + "methods: []}", METHODS + r"\[\]"),
    (DISCO + "methods: [op, op]}", METHODS + r"\['op', 'op'\]"),
    ("paper: host\nkind: mpi_accuracy\nparams: {models: []}\nmeasure: [wall_s]\naxes: {seeds: [0]}",
     r"run kind 'mpi_accuracy': models is empty; valid: one or more of mlp, cnn, "),
])
def test_an_empty_or_repeated_list_a_run_refuses_is_refused_when_read(head, expected):
    """Accepted when read, these failed only when their run came (DisCo's search; `flexrt accuracy`'s
    workers under MPI, after the host's calibration)."""
    text = f"name: demo\ntitle: t\nreproduces: r\n{head}\n"
    assert re.search(r"demo\.yaml:\d+: field 'axes': " + expected, error_of(text)), error_of(text)
