"""``--pipeline P`` on flexrt simulate and flexrt train: a pipelined strategy, its bubble and throughput."""

import json

from flexrt.cli import main


def test_simulate_pipeline_reports_stages_bubble_and_throughput(capsys):
    args = ["simulate", "mlp_unity_fig2", "-b", "64", "--machine", "dgx1_v100", "--pipeline", "2",
            "--micro-batches", "8", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)["pipeline"]
    assert doc["stages"] == 2 and doc["micro_batches"] == 8 and doc["schedule"] == "1f1b"
    assert sorted(set(doc["stage_of"].values())) == [0, 1]
    assert 0 < doc["bubble"] < 1 and doc["samples_per_s"] > 0
    assert main(args[:-1] + ["--schedule", "gpipe"]) == 0
    out = capsys.readouterr().out
    assert "pipeline of 2 device blocks x 1 chunk(s), 8 micro-batches, schedule gpipe" in out and "bubble" in out


def test_pipeline_flags_are_checked(capsys):
    base = ["simulate", "mlp_unity_fig2", "--machine", "dgx1_v100"]
    assert main(base + ["--micro-batches", "4"]) == 1
    assert "give --pipeline P too" in capsys.readouterr().err
    assert main(base + ["--pipeline", "3"]) == 1
    assert "3 pipeline stages do not divide the machine's 8 devices" in capsys.readouterr().err
    assert main(base + ["--pipeline", "2", "--random-strategy", "1"]) == 1
    assert "--pipeline and --megatron build their own strategy" in capsys.readouterr().err
    assert main(base + ["--pipeline", "4", "--schedule", "interleaved", "--micro-batches", "2"]) == 1
    assert "micro-batches divisible by the 4 stages" in capsys.readouterr().err
    assert main(base + ["--pipeline", "2", "--micro-batches", "3"]) == 1
    assert "divide into 3 micro-batches; micro-batch counts that divide it: 1, 2, 4, 8, 16, 32, 64" in capsys.readouterr().err


def test_train_pipeline_runs_and_learns(capsys):
    assert main(["train", "mlp_unity_fig2", "-b", "16", "--machine", "local", "--pipeline", "2", "--micro-batches",
                 "4", "--steps", "3", "--lr", "0.1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    losses = [s["loss"] for s in doc["steps"]]
    assert len(losses) == 3 and losses[2] < losses[0]


def test_search_unity_enable_pipeline_weighs_pipelines_among_the_finalists(tmp_path, capsys):
    out = tmp_path / "best.json"
    assert main(["search", "mlp_unity_fig2", "-b", "64", "--machine", "dgx1_v100", "--algo", "unity", "--budget", "5",
                 "--enable-pipeline", "--no-progress", "--export", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    notes = doc["log"]["notes"] if "log" in doc else doc["notes"]
    candidates = notes["pipeline_candidates_s"]
    assert candidates and all(t > 0 for t in candidates.values())
    assert any(label.startswith("pipeline p=") for label in notes["finalists_s"])
    assert min(notes["finalists_s"].values()) <= min(candidates.values())
    assert main(["simulate", "mlp_unity_fig2", "-b", "64", "--machine", "dgx1_v100", "--strategy", str(out),
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > 0


def test_simulate_megatron_3d_with_its_degrees(capsys):
    args = ["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--machine", "dgx1_v100", "--nodes", "2",
            "--megatron", "--tensor-parallel", "4", "--pipeline", "2", "--micro-batches", "4", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pipeline"]["stages"] == 2 and doc["iteration_time_s"] > 0
    assert main(args[:-5] + ["--json"]) == 0                  # tensor parallel 4 x data parallel 4, no pipeline
    assert json.loads(capsys.readouterr().out)["pipeline"] is None
    assert main(["simulate", "gpt", "--config", "gpt-tiny", "--machine", "dgx1_v100", "--tensor-parallel", "4"]) == 1
    assert "give --megatron too" in capsys.readouterr().err


def test_recompute_flag_on_simulate_and_train(capsys):
    base = ["simulate", "transformer", "-b", "16", "--machine", "dgx1_v100", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["recompute"] == {"granularity": "none", "operators": []}
    assert main(base + ["--recompute", "full", "--pipeline", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["recompute"]["granularity"] == "full" and len(doc["recompute"]["operators"]) > 3
    assert main(base + ["--recompute", "full"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["compute_time_s"] > plain["compute_time_s"]
    assert max(d["activations"] for d in full["memory_bytes"].values()) < \
        max(d["activations"] for d in plain["memory_bytes"].values())
    assert main(base + ["--recompute", "full", "--fusion", "xla"]) == 0   # the fused graph carries the recompute tasks
    fused = json.loads(capsys.readouterr().out)
    assert fused["recompute"] == full["recompute"]
    assert fused["compute_time_s"] < full["compute_time_s"]
    # the policy keeps its backward groups within recompute segments: recomputation's saving stays
    assert max(d["activations"] for d in fused["memory_bytes"].values()) == \
        max(d["activations"] for d in full["memory_bytes"].values()) < \
        max(d["activations"] for d in plain["memory_bytes"].values())
    assert main(["train", "mlp_unity_fig2", "-b", "16", "--machine", "local", "--recompute", "full", "--steps", "2",
                 "--lr", "0.1"]) == 0
    assert "full recomputation" in capsys.readouterr().out


def test_a_huge_pipeline_is_refused_at_once(capsys):
    """The default micro-batch count looked at every count up to 4p before the stages were checked
    against the devices: 10^20 stages never finished."""
    from flexrt.model import load_model
    from flexrt.strategy.pipeline import default_micro_batches
    base = ["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--machine", "dgx_a100"]
    assert main(base + ["--pipeline", "99999999999999999999"]) == 1
    assert "99999999999999999999 pipeline stages do not divide the machine's 8 devices" in capsys.readouterr().err
    pcg = load_model("gpt", ["-b", "12", "--config", "gpt-tiny"]).model.pcg
    assert default_micro_batches(pcg, 10 ** 18) == 12 and default_micro_batches(pcg, 2) == 6
    assert default_micro_batches(pcg, 4, chunks=2) == 12 and default_micro_batches(pcg, 3, chunks=2) == 12


def test_megatron_refuses_a_batch_that_does_not_divide_over_its_replicas(capsys):
    """It ran on device 0 alone (no split of the sample axis fits), saying it was tensor and data parallel."""
    base = ["simulate", "gpt", "--config", "gpt-tiny", "--machine", "dgx_a100", "--nodes", "4", "--megatron",
            "--pipeline", "2"]
    assert main(base + ["-b", "8", "--micro-batches", "8"]) == 1
    assert ("the batch of 8 in 8 micro-batch(es) of 1 does not divide over the 4 data-parallel replicas"
            in capsys.readouterr().err)
    assert main(base + ["-b", "32", "--micro-batches", "8"]) == 0
    capsys.readouterr()
    assert main(base + ["-b", "8", "--micro-batches", "8", "--heads", "8", "--symmetric"]) == 1   # per replica: 4
    assert ("the batch of 8 over 2 data-parallel replicas is 4 a replica, which does not divide into 8 micro-batches"
            in capsys.readouterr().err)


def test_megatron_warns_of_the_vocabulary_only_where_there_is_one(capsys):
    assert main(["simulate", "lenet", "-b", "8", "--machine", "dgx_a100", "--megatron"]) == 0
    err = capsys.readouterr().err
    assert "fewer than the tensor group's 8 ways" in err and "vocabulary" not in err and "do not divide by 8" in err
    assert main(["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--vocab", "66", "--machine", "dgx_a100",
                 "--megatron", "--tensor-parallel", "4"]) == 0
    assert "pads the vocabulary to a multiple of 128 x 4 (66 padded to 512; gpt: --vocab)" in capsys.readouterr().err


def test_megatron_schedule_flags_need_a_pipeline(capsys):
    base = ["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--machine", "dgx_a100", "--megatron"]
    assert main(base + ["--schedule", "interleaved", "--chunks", "3"]) == 1
    assert "--schedule and --chunks order a pipeline's stages" in capsys.readouterr().err
    assert main(base + ["--micro-batches", "2"]) == 0     # one stage accumulating two micro-batches


def test_a_plain_pipeline_defaults_to_micro_batches_that_fill_each_block(capsys):
    """8 sequences, 2 stages of 4 GPUs: 2 micro-batches of 4 (one sequence per GPU), not 8 of 1 on one GPU each."""
    assert main(["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--machine", "dgx_a100", "--pipeline", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pipeline"]["micro_batches"] == 2


def test_micro_batches_past_what_a_host_holds_are_refused_before_building(capsys):
    """A million micro-batches of a 4-operator model ran 9 minutes into 16 GB before; now refused at once."""
    assert main(["simulate", "mlp_unity_fig2", "-b", "1048576", "--machine", "dgx_a100", "--pipeline", "2",
                 "--micro-batches", "1048576"]) == 1
    assert "make 4,194,304 operator copies, more than the 2,097,152 flexrt builds" in capsys.readouterr().err


def test_a_text_export_the_format_cannot_hold_is_written_as_json(tmp_path, capsys):
    """--export x.txt of a pipeline (or a rewritten graph) failed after the whole search, losing it:
    refused before searching where the algorithm always finds one, written as x.json otherwise."""
    from flexrt.cli._search import _export
    from flexrt.machine import load_machine
    from flexrt.model import load_model
    from flexrt.strategy import load_strategy
    from flexrt.strategy.pipeline import pipeline_strategy
    machine = load_machine("dgx1_v100")
    pcg = load_model("mlp_unity_fig2", ["-b", "64"]).model.pcg
    piped = pipeline_strategy(pcg, machine, 2, 4)
    written = _export(str(tmp_path / "s.txt"), piped, machine)
    assert written.endswith("s.json") and not (tmp_path / "s.txt").exists()
    assert "wrote it as JSON to" in capsys.readouterr().err
    assert load_strategy(written, pcg, machine).pipeline.micro_batches == 4
    assert main(["search", "mlp_unity_fig2", "-b", "64", "--machine", "dgx1_v100", "--algo", "pipeline", "--export",
                 str(tmp_path / "p.txt")]) == 1
    assert "FlexFlow's text format holds neither pipelines nor fusion plans" in capsys.readouterr().err


def test_search_says_where_min_degree_could_not_be_met(capsys):
    """One sample cannot split 8 ways: the search ran everything on one device without a word."""
    args = ["search", "mlp_unity_fig2", "--machine", "dgx1_v100", "--algo", "unity", "--budget", "5", "--min-degree"]
    assert main(args + ["8", "-b", "1"]) == 0
    assert "--min-degree 8: 3 operator(s) run on fewer devices" in capsys.readouterr().err
    assert main(args + ["2", "-b", "64"]) == 0
    assert "--min-degree" not in capsys.readouterr().err


def test_a_mistake_under_several_local_processes_is_said_once(capsys):
    """Each rank said it, then the launcher repeated it: now the launcher checks first and starts nothing."""
    assert main(["train", "gpt", "--config", "gpt-tiny", "-b", "4", "--machine", "local", "--nodes", "2",
                 "--steps", "1", "--pipeline", "8", "--micro-batches", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "divide into 3 micro-batches" in err[0] and "mpiexec" not in err[0]
