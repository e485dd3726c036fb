"""Run kinds measured on this host, or checking the simulator against closed-form laws.

- ``simulator_accuracy`` (FlexFlow Fig. 10, DisCo §6.5): per model of ``flexrt.model.accuracy``,
  each validation strategy (data, model, reduction, hybrid, round-robin, random) run with the NumPy
  task runtime on the ``local`` machine (the one ``flexrt calibrate`` wrote, else this host calibrated
  now into a private file, else the built-in estimate) and simulated with kernel times profiled here: measured and predicted
  times, the relative errors, Kendall's tau between the two rankings, top-1 regret.
- ``mpi_accuracy``: ``flexrt accuracy`` as an experiment: one process per device under MPI,
  predictions from task times measured here (calibration strategies run beside the validation
  ones), optionally with pipelines and DisCo's plans; the scores of the base strategies, and the
  pipelines' and the plans' errors apart.
- ``pipeline_bubble``: the idle share of a pipeline's span for GPipe, 1F1B, interleaved 1F1B and
  ZB-H1 with every operator the same time and free communication, against the schedules' laws:
  (p - 1) / m of busy time for GPipe and 1F1B, (p - 1) / (v m) interleaved, (p - 1) / (3 m) ZB-H1.
"""

from __future__ import annotations

import statistics
from typing import Optional

from flexrt.experiments.common import Timer
from flexrt.experiments.kinds import Outcome, Param, register_kind
from flexrt.model.accuracy import MODELS, batch_for, kendall_tau, timed_steps, validation_strategies
from flexrt.simulator.cost_model import AnalyticCostModel, OpTimes


def _blas_limit():
    """One BLAS thread per kernel, as a worker of the ``local`` machine is (threadpoolctl where installed)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib
        return contextlib.nullcontext()
    return threadpool_limits(1)


_CALIBRATED: dict[str, tuple] = {}   # calibration -> (machine, how), once per process
LOCAL_DEVICES = 4


def _local_machine(calibration: str):
    """The ``local`` machine and how it was obtained: ``flexrt calibrate``'s file, else this host
    measured now into a private temporary file (``calibration`` quick or full), else the estimate."""
    import tempfile
    from flexrt.machine import calibrated_local_path, load_machine
    from flexrt.runtime.calibrate import calibrate, write_machine_yaml
    if calibrated_local_path().is_file():
        return load_machine("local"), "calibrated (flexrt calibrate)"
    if calibration == "none":
        return load_machine("local"), "built-in estimate"
    if calibration not in _CALIBRATED:
        with tempfile.TemporaryDirectory(prefix="flexrt-calibration-") as folder:
            path = write_machine_yaml(calibrate(LOCAL_DEVICES, quick=calibration == "quick"), f"{folder}/local.yaml",
                                      LOCAL_DEVICES)
            _CALIBRATED[calibration] = (load_machine(path), f"calibrated now ({calibration})")
    return _CALIBRATED[calibration]


@register_kind(
    "simulator_accuracy",
    params=(Param("model", "str", choices=tuple(MODELS), help="a model of flexrt.model.accuracy"),
            Param("mode", "str", "serial", choices=("serial", "threads"),
                  help="the executor: serial (predicted: the sum of task times) or threads (the simulated makespan)"),
            Param("repeat", "int", 3, minimum=1), Param("random_seeds", "int", 2, minimum=0),
            Param("calibration", "str", "quick", choices=("none", "quick", "full"),
                  help="where `flexrt calibrate` wrote no local machine: measure this host now (quick: rough, "
                       "seconds; full) into a private file, or use the built-in estimate (none)")),
    metrics=("machine_source", "strategies", "median_abs_error", "max_abs_error", "kendall_tau", "top1_regret", "measured_ms",
             "predicted_ms", "labels", "wall_s"),
    description="simulated vs measured iteration times of strategies on this host's runtime (FlexFlow Fig. 10)")
def simulator_accuracy(inputs) -> Outcome:
    import numpy as np
    from flexrt.runtime.session import Session
    from flexrt.simulator.cost_model import ProfiledCostModel
    machine, source = _local_machine(inputs["calibration"])
    cost = ProfiledCostModel(backend="numpy")
    build, batch = MODELS[inputs["model"]]
    base = build(batch)
    measured, predicted, labels = [], [], []
    with Timer() as t, _blas_limit():
        for label, strategy in validation_strategies(base, machine, range(inputs["random_seeds"])):
            session = Session(strategy, machine, cost_model=cost, mode=inputs["mode"], optimizer="sgd", lr=0.01)
            plan = session.plan
            x, y = batch_for(plan, batch)
            wall, _ = timed_steps(session, x, y, inputs["repeat"])
            pred = (float(np.sum(plan.predicted_end - plan.predicted_start)) if inputs["mode"] == "serial"
                    else session.predicted_time_s)
            measured.append(wall * 1e3)
            predicted.append(pred * 1e3)
            labels.append(label)
        cost.flush()
    errors = [abs(m - p) / m for m, p in zip(measured, predicted)]
    best_predicted = min(range(len(predicted)), key=predicted.__getitem__)
    return Outcome({"machine_source": source, "strategies": len(labels), "median_abs_error": statistics.median(errors),
                    "max_abs_error": max(errors), "kendall_tau": kendall_tau(measured, predicted),
                    "top1_regret": measured[best_predicted] / min(measured) - 1, "measured_ms": measured,
                    "predicted_ms": predicted, "labels": labels, "wall_s": t.s})


@register_kind(
    "mpi_accuracy",
    params=(Param("models", "strs", list(MODELS), choices=tuple(MODELS), help="models of flexrt.model.accuracy"),
            Param("ranks", "int", 2, minimum=1, maximum=64, help="processes: devices of the local machine"),
            Param("seeds", "int", 2, minimum=0, maximum=100, help="random validation strategies per model"),
            Param("calibration", "int", 12, minimum=0, maximum=100, help="random calibration strategies per model"),
            Param("repeat", "int", 15, minimum=1, maximum=1000, help="timed iterations per strategy"),
            Param("quick", "bool", False, help="quick calibration of the host, 3 timed iterations"),
            Param("pipelines", "bool", False, help="also validate GPipe and 1F1B pipelines"),
            Param("fusion", "bool", False, help="also validate the fusion plan DisCo finds from data parallelism"),
            Param("fused_cost", "str", "learned", choices=("learned", "profiled", "analytic"),
                  help="with fusion: how fused tasks are timed"),
            Param("fusion_budget", "int", 1000, minimum=1, maximum=100000, help="with fusion: DisCo's candidates")),
    metrics=("strategies", "median_abs_error", "max_abs_error", "kendall_tau", "top1_regret", "memory_max_error",
             "pipelines_max_abs_error", "fusion_within_10pct", "fusion_max_abs_error", "drift", "measured_ms",
             "predicted_ms", "labels", "wall_s"),
    description="`flexrt accuracy`: real runs of one process per device under MPI beside the simulator's "
                "predictions from measured task times (issue 18's protocol)",
    check=lambda i: None if i["models"] else f"models is empty; valid: one or more of {', '.join(MODELS)}")
def mpi_accuracy(inputs) -> Outcome:
    """``flexrt accuracy`` (``flexrt.cli._accuracy.measure``) into a temporary folder: the scores of
    every validated strategy, and of the pipelines and DisCo's plans apart."""
    import argparse
    import tempfile
    from flexrt.cli._accuracy import measure
    from flexrt.experiments.kinds import SkipRun
    from flexrt.model.accuracy import scores
    from flexrt.runtime.mpi import find_mpiexec
    if inputs["ranks"] > 1 and find_mpiexec() is None:
        raise SkipRun("needs mpiexec (pip install -e \".[mpi]\" brings MPICH)")
    with Timer() as t, tempfile.TemporaryDirectory(prefix="flexrt-accuracy-") as out:
        args = argparse.Namespace(ranks=inputs["ranks"], machine=None, seeds=inputs["seeds"],
                                  calibration=inputs["calibration"], repeat=inputs["repeat"], quick=inputs["quick"],
                                  pipelines=inputs["pipelines"], fusion=inputs["fusion"],
                                  fused_cost=inputs["fused_cost"], fusion_budget=inputs["fusion_budget"],
                                  output=out, json=True)
        doc = measure(args, list(inputs["models"]))
    rows = doc["rows"]

    def error(r):
        return abs(r["predicted_s"] - r["measured_s"]) / r["measured_s"]
    pipes = [r for r in rows if "2x4" in r["strategy"]]
    fused = [r for r in rows if r.get("fusion")]
    base = [r for r in rows if r not in pipes and r not in fused]
    s = scores(base)
    memory = [abs(v["measured_peak"] - v["predicted_peak"]) / v["measured_peak"] for r in rows
              for v in r.get("memory", {}).values() if v.get("measured_peak") and "predicted_peak" in v]
    return Outcome({"strategies": len(rows), "median_abs_error": s["median_error"], "max_abs_error": s["max_error"],
                    "kendall_tau": s["tau"], "top1_regret": s["max_regret"],
                    "memory_max_error": max(memory) if memory else None,
                    "pipelines_max_abs_error": max(map(error, pipes)) if pipes else None,
                    "fusion_within_10pct": (sum(error(r) <= 0.10 for r in fused) / len(fused)) if fused else None,
                    "fusion_max_abs_error": max(map(error, fused)) if fused else None,
                    "drift": doc["meta"].get("drift"),
                    "measured_ms": [r["measured_s"] * 1e3 for r in rows],
                    "predicted_ms": [r["predicted_s"] * 1e3 for r in rows],
                    "labels": [f"{r['model']}/{r['strategy']}" for r in rows], "wall_s": t.s})


class UniformCost(AnalyticCostModel):
    """Every operator 1 ms forward and ``backward_ratio`` (2) ms backward; communication, the loss and
    updates free: the setting of the pipeline schedules' bubble laws."""

    backward_ratio = 2.0

    def op_times(self, attrs, inputs, outputs, device):
        return OpTimes(1e-3, self.backward_ratio * 1e-3, "uniform")

    def transfer_time(self, link, num_bytes):
        return 1e-12

    def loss_time(self, piece, device):
        return 1e-12

    def update_time(self, *args, **kwargs):
        return 1e-12

    def reduce_time(self, *args, **kwargs):
        return 1e-12


def bubble_law(schedule: str, p: int, m: int, v: int) -> float:
    """The schedule's bubble as a share of busy time."""
    return {"gpipe": (p - 1) / m, "1f1b": (p - 1) / m, "interleaved": (p - 1) / (v * m),
            "zb-h1": (p - 1) / (3 * m), "2bw": 0.0}[schedule]


def _bubble_problem(schedule: str, p: int, m: int, v: int) -> Optional[str]:
    """What ``pipeline_bubble`` cannot run among these inputs (``pipeline_strategy``'s rules), or None."""
    if schedule != "interleaved" and v != 1:
        return f"chunks {v} is only for the interleaved schedule; give chunks: 1 with {schedule}"
    if schedule == "interleaved" and m % p:
        return f"the interleaved schedule needs micro_batches a multiple of stages, got {m} over {p}"
    return None


@register_kind(
    "pipeline_bubble",
    params=(Param("schedule", "str", choices=("gpipe", "1f1b", "interleaved", "zb-h1", "2bw")),
            Param("stages", "int", minimum=1, maximum=64), Param("micro_batches", "int", minimum=1, maximum=1024),
            Param("chunks", "int", 1, minimum=1, maximum=16, help="interleaved: model chunks per device")),
    metrics=("idle_fraction", "bubble", "law", "bubble_vs_law", "gpipe_idle_law"),
    description="a pipeline schedule's bubble in the simulator against its closed-form law",
    check=lambda i: _bubble_problem(i["schedule"], i["stages"], i["micro_batches"], i["chunks"]))
def pipeline_bubble(inputs) -> Outcome:
    from flexrt.core import DataType, FFConfig, FFModel
    from flexrt.machine import local_machine
    from flexrt.simulator.pipeline_lowering import idle_fractions, steady_idle_fractions
    from flexrt.simulator.simulate import Simulator
    from flexrt.strategy.pipeline import pipeline_strategy
    p, m, v, schedule = inputs["stages"], inputs["micro_batches"], inputs["chunks"], inputs["schedule"]
    if schedule != "interleaved":
        v = 1
    model = FFModel(FFConfig([]))
    t = model.create_tensor([4 * m, 32], DataType.DT_FLOAT)
    for i in range(2 * p * v):
        t = model.dense(t, 32, name=f"fc{i}")
    machine = local_machine(p)
    strategy = pipeline_strategy(model.pcg, machine, p, m, schedule, chunks=v)
    sim = Simulator(machine, UniformCost(), "sgd")
    result = sim.full(strategy)
    idle = steady_idle_fractions(sim.graph, result.iteration_time_s) if schedule == "2bw" else \
        idle_fractions(sim.graph, result.timeline)             # 2bw: against its steady state's period
    f = max(idle.values())   # the idlest device
    law = bubble_law(schedule, p, m, v)
    bubble = f / (1 - f)
    return Outcome({"idle_fraction": f, "bubble": bubble, "law": law, "bubble_vs_law": bubble / law if law else None,
                    "gpipe_idle_law": (p - 1) / (m + p - 1)})
