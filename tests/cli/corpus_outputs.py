"""Bad output paths, experiment files whose runs could not run, and readers found by a sweep of
malformed inputs (the corpus of ``badinput.py``): where a command writes (``run --output``,
``search --plot / --export``, ``accuracy --output``, ``substitutions generate --output``) is
refused before any work; an experiment's machine files, search options, device counts and
model flags are checked when the file loads, a folder holding another experiment's results is refused on
``--resume``, and a run of which every run was skipped is no success; fused-sample files go through
the readers every other file does; huge budgets are refused with the limit; a number YAML read as text says so."""

from __future__ import annotations

from pathlib import Path

from .badinput import Case, case

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_MODEL = ROOT / "configs" / "fusion_model" / "local.npz"

BUBBLE = """name: ok
title: t
paper: host
reproduces: x
kind: pipeline_bubble
axes: {schedule: [1f1b], stages: [2], micro_batches: [4]}
measure: [bubble, law]
"""


def _search_exp(name: str, params: str, axes: str) -> str:
    return (f"name: {name}\ntitle: t\npaper: flexflow\nreproduces: x\nkind: search_speedup\n"
            f"params: {params}\naxes: {axes}\nmeasure: [found_ms]\n")


def _machine(**swap) -> str:
    """The dgx1_v100 preset's file with text replaced (``old=new`` pairs, by position)."""
    text = (ROOT / "configs" / "machines" / "dgx1_v100.yaml").read_text()
    for old, new in swap.values():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _pickled_npz() -> bytes:
    """An .npz whose one array holds Python objects (np.load refuses it without allow_pickle)."""
    import io

    import numpy as np
    buf = io.BytesIO()
    np.savez(buf, a=np.array([None], dtype=object))
    return buf.getvalue()


def _shipped_npz_with(**changes) -> bytes:
    """The shipped learned model with arrays replaced (``feat_std=0.0``: every entry that value)."""
    import io

    import numpy as np
    with np.load(SHIPPED_MODEL) as data:
        arrays = {k: data[k] for k in data.files}
    for k, v in changes.items():
        arrays[k] = np.full_like(arrays[k], v)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _results(name: str, text: str):
    def make(folder: Path) -> None:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "results.jsonl").write_text(text)
    return make


SEARCH = "search mlp_unity_fig2 -b 8 --machine dgx1_v100 --algo data-parallel"
SAMPLE_MEMBER = ('{"op": "relu", "attrs": {"op_type": "RELU", "scalar": 0.0}, "inputs": [{"dims": [4, 4], "dtype": "DT_FLOAT"}], '
                 '"outputs": [{"dims": [4, 4], "dtype": "DT_FLOAT"}], "internal": [], "recomputed": false, '
                 '"sources": [%s]}')
SAMPLE = '{"model": "m", "time_s": 1e-5, "member_times": [1e-5], "members": [%s]}\n' % SAMPLE_MEMBER
EVALUATE = f"fusion-model evaluate --model {SHIPPED_MODEL} --samples"
CASES = [
    # where a command writes: refused before any work
    case("run-output-under-a-file", "run {ok.yaml} --output {afile}/sub",
         r"--output .*afile/sub: .*afile is a file, not a folder", {"ok.yaml": BUBBLE, "afile": "hi"}),
    Case("run-output-empty", ("run", "{ok.yaml}", "--output", ""), r"argument --output: empty; give a path",
         {"ok.yaml": BUBBLE}),
    case("search-plot-under-a-file", f"{SEARCH} --plot {{afile}}/x.png",
         r"--plot .*afile/x\.png: .*afile is a file, not a folder", {"afile": "hi"}),
    case("search-plot-a-folder", f"{SEARCH} --plot {{dir}}", r"--plot .* is a folder; give a file name"),
    case("search-export-no-folder", f"{SEARCH} --export {{dir}}/nowhere/s.json",
         r"--export .*nowhere/s\.json: the folder .*nowhere does not exist"),
    case("search-budget-huge", f"{SEARCH} --budget 1000000000000",
         r"argument --budget: expected an integer between 0 and 10000000, got 1000000000000"),
    case("simulate-search-budget-huge", "simulate mlp --machine dgx1_v100 --search-budget 100000000",
         r"flag --search-budget got 100000000; valid: an integer between 0 and 10,000,000"),
    case("accuracy-output-under-a-file", "accuracy --models mlp --quick --output {afile}/acc",
         r"--output .*afile/acc: .*afile is a file, not a folder", {"afile": "hi"}),
    case("generate-output-under-a-file", "substitutions generate --family softmax --no-verify --output {afile}/x.json",
         r"--output .*afile/x\.json: .*afile is a file, not a folder", {"afile": "hi"}),
    case("fusion-collect-output-under-a-file", "fusion-model collect --models mlp --output {afile}/x.jsonl",
         r"--output .*afile/x\.jsonl: .*afile is a file, not a folder", {"afile": "hi"}),
    # an experiment's runs checked when the file loads
    case("run-search-option-unknown", "run {e.yaml} --output {dir}/out",
         r"e\.yaml:7: field 'axes': run kind 'search_speedup': search algorithm 'mcmc' takes no option 'foo'; valid "
         r"options: alpha", {"e.yaml": _search_exp("e", "{machine: dgx1_v100, budget: 3, options: {foo: 1}}",
                                                   "{model: [mlp], devices: [8]}")}),
    case("run-devices-over-the-node-limit", "run {e.yaml} --output {dir}/out",
         r"65536 devices are 8,192 nodes of dgx1_v100 \(8 devices per node\); a machine has at most 4,096 nodes",
         {"e.yaml": _search_exp("e", "{machine: dgx1_v100, budget: 3}", "{model: [mlp], devices: [65536]}")}),
    case("run-machine-file-bad", "run {e.yaml} --output {dir}/out",
         r"m\.yaml:\d+: field 'links\.nvlink\.bandwidth': expected a positive number \(GB/s\), got -25",
         {"e.yaml": _search_exp("e", "{budget: 3}", "{model: [mlp], devices: [8], machine: [m.yaml]}"),
          "m.yaml": _machine(bw=("bandwidth: 25", "bandwidth: -25"))}),
    case("run-model-flag-the-script-lacks", "run {e.yaml} --output {dir}/out",
         r"e\.yaml:\d+: field 'axes': run kind 'search_speedup': model mlp: unknown flag '--seq-length'",
         {"e.yaml": _search_exp("e", "{machine: dgx1_v100, budget: 3}",
                                "{model: [mlp], devices: [8], seq_length: [5]}")}),
    case("run-budget-huge", "run {e.yaml} --output {dir}/out",
         r"e\.yaml:6: field 'params\.budget'.*10000000",
         {"e.yaml": _search_exp("e", "{machine: dgx1_v100, budget: 1000000000000}", "{model: [mlp], devices: [8]}")}),
    case("run-every-run-skipped", "run {e.yaml} --json --output {dir}/out",
         r"every run of e was skipped, so the report is empty; the first: 3 devices are not whole nodes of dgx1_v100",
         {"e.yaml": _search_exp("e", "{machine: dgx1_v100, budget: 3}", "{model: [mlp], devices: [3]}")}),
    case("run-resume-other-experiment", "run {ok.yaml} --resume --output {dir}/out",
         r"out holds the results of experiment 'ss', not 'ok'; give another --output",
         {"ok.yaml": BUBBLE}, setup=_results("out", '{"key": "k1", "experiment": "ss", "status": "ok"}\n')),
    case("run-resume-results-not-json", "run {ok.yaml} --resume --output {dir}/out",
         r"out/results\.jsonl:1:1: invalid JSON", {"ok.yaml": BUBBLE}, setup=_results("out", "garbage\n")),
    case("run-resume-results-not-rows", "run {ok.yaml} --resume --output {dir}/out",
         r"out/results\.jsonl:1: not a result row of flexrt run", {"ok.yaml": BUBBLE},
         setup=_results("out", "[1, 2]\n{}\n")),
    case("run-tiny-section-names-its-field", "run {ok.yaml} --output {dir}/out",
         r"ok\.yaml:\d+: field 'tiny\.axes\.schedule\[0\]': unknown schedule 'bogus'",
         {"ok.yaml": BUBBLE + "tiny:\n  axes: {schedule: [bogus]}\n"}),
    # fused-sample files through the common readers
    case("fusion-samples-not-utf8", f"{EVALUATE} {{s.jsonl}}", r"s\.jsonl:\d+: not valid UTF-8",
         {"s.jsonl": bytes(range(256))}),
    case("fusion-samples-deep", f"{EVALUATE} {{s.jsonl}}", r"s\.jsonl:1: nested more than 64 levels deep",
         {"s.jsonl": "[" * 100_000 + "]" * 100_000 + "\n"}),
    case("fusion-samples-source-out-of-range", f"{EVALUATE} {{s.jsonl}}",
         r"s\.jsonl:1\.members\[0\]\.sources: 99 is no earlier member", {"s.jsonl": SAMPLE % "99"}),
    Case("search-export-empty", ("search", "mlp", "-b", "8", "--machine", "local", "--budget", "2", "--export", ""),
         r"flexrt search: error: argument --export: empty; give a path"),
    Case("simulate-trace-empty", ("simulate", "mlp", "-b", "8", "--machine", "local", "--trace", ""),
         r"flexrt simulate: error: argument --trace: empty; give a path"),
    case("batch-arabic-indic-digit", "simulate mlp -b \u0664 --machine local",
         r"flag -b got '\u0664'; valid: an integer >= 1"),
    case("batch-underscore", "simulate mlp -b 6_4 --machine local", r"flag -b got '6_4'; valid: an integer >= 1"),
    case("fusion-train-output-is-the-samples", "fusion-model train --samples {s.jsonl} --output {s.jsonl}",
         r"--output .*s\.jsonl is the --samples file; writing the model there would lose the samples",
         {"s.jsonl": SAMPLE % "-1"}),
    case("fusion-samples-internal-out-of-range", f"{EVALUATE} {{s.jsonl}}",
         r"s\.jsonl:1\.members\[0\]\.internal: 5 is not one of its 1 inputs; valid: 0\.\.0",
         {"s.jsonl": SAMPLE.replace('"internal": []', '"internal": [5]') % "-1"}),
    case("fusion-samples-time-absurd", f"{EVALUATE} {{s.jsonl}}",
         r"s\.jsonl:1\.time_s must be between 0(\.0)? and 3600(\.0)?, got 1e\+30",
         {"s.jsonl": SAMPLE.replace('"time_s": 1e-5', '"time_s": 1e30') % "-1"}),
    case("fusion-samples-times-not-one-per-member", f"{EVALUATE} {{s.jsonl}}",
         r"s\.jsonl:1\.member_times: expected a list of 1 times, one per member",
         {"s.jsonl": SAMPLE.replace('"member_times": [1e-5]', '"member_times": [1e-5, 2e-5]') % "-1"}),
    case("run-resume-results-is-a-folder", "run {ok.yaml} --output {dir}/out --resume",
         r"results file .*out/results\.jsonl is a directory, not a file", {"ok.yaml": BUBBLE},
         setup=lambda folder: (folder / "out" / "results.jsonl").mkdir(parents=True)),
    case("fusion-samples-unknown-key", f"{EVALUATE} {{s.jsonl}}", r"s\.jsonl:1: unknown key 'colour'",
         {"s.jsonl": SAMPLE.replace('{"model"', '{"colour": 1, "model"') % "-1"}),
    case("fusion-model-pickled", f"fusion-model evaluate --model {{m.npz}} --samples {{s.jsonl}}",
         r"m\.npz: not a learned fused model file \(it holds Python objects",
         {"s.jsonl": SAMPLE % "-1",
          "m.npz": _pickled_npz()}),
    case("fusion-model-feat-std-zero", f"fusion-model evaluate --model {{m.npz}} --samples {{s.jsonl}}",
         r"m\.npz: feat_std and the target's spread must be > 0", {"s.jsonl": SAMPLE % "-1",
                                                                   "m.npz": _shipped_npz_with(feat_std=0.0)}),
    case("fusion-model-nan-normalization", f"fusion-model evaluate --model {{m.npz}} --samples {{s.jsonl}}",
         r"m\.npz: feat_mean holds NaN, inf or values past 1e\+06", {"s.jsonl": SAMPLE % "-1",
                                                 "m.npz": _shipped_npz_with(feat_mean=float("nan"))}),
    # rules, machine files, strategies
    case("machine-number-read-as-text", "machines show {m.yaml}",
         r"m\.yaml:\d+: field 'links\.nvlink\.bandwidth': .*got '1e2'.*YAML read '1e2' as text; write 100",
         {"m.yaml": _machine(bw=("bandwidth: 25", "bandwidth: 1e2"))}),
    case("machine-no-float32-peak", "simulate mlp -b 16 --machine {m.yaml}",
         r"has no peak_flops for float32, which the model computes in; it gives float16",
         {"m.yaml": _machine(peak=("float32: 15.7, ", ""))}),
    case("strategy-integer-of-5000-digits", "simulate mlp --machine dgx1_v100 --strategy {s.json}",
         r"s\.json: invalid JSON: an integer of more than \d+ digits", {"s.json": '{"start": ' + "9" * 5000 + "}"}),
]
