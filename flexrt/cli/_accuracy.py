"""``flexrt accuracy``: how well the simulator predicts real parallel runs on this host.

    flexrt accuracy [--ranks R] [--machine FILE] [--models mlp,cnn,...] [--seeds N] [--calibration N]
                    [--repeat N] [--quick] [--pipelines] [--output DIR] [--json]

The ``local`` machine runs one process per device: ``R`` MPI ranks (default: this host's cores),
one BLAS thread each, each pinned to a core where the OS allows. Without ``--machine`` the host is
first calibrated that way (``mpiexec -n R flexrt calibrate --devices 1``: every rank a node of one
device, MPI messages between them). Then, under ``mpiexec -n R`` (``flexrt.model.accuracy``):

1. **calibration**: the calibration strategies run (``--repeat`` timed iterations each, in 5
   sessions of a warm-up and their share; the sessions in rounds, each round one session of every
   strategy, so that a slow spell of the host lands on all alike) and every task's traced duration fills a ``MeasuredTimes`` table keyed as the
   lowering asks its cost model (``flexrt.simulator.measured_costs``), written to
   ``DIR/measured_times.json``;
2. **validation**: per model, the validation strategies (disjoint from the calibration ones) run,
   their devices' tasks in the order the first calibration's measured costs simulate; the
   calibration strategies run again in the same rounds, and the table is rebuilt from those runs
   (a host's speed drifts: calibrated apart, whole runs were predicted 14 % fast or 8 % slow on
   average); the validation strategies are simulated with it (and, for comparison, with
   kernel-profiled costs): measured vs predicted iteration time, per task kind, and peak memory
   per device.

The report: median and max |error|, Kendall's tau overall and within each model, top-1 regret,
before (profiled kernels) and after (measured tasks); per task kind measured / predicted; which
strategies calibrated and which were scored. ``DIR`` gets ``accuracy.json`` (every row),
``scatter.png`` (measured vs predicted) and ``traces/MODEL-STRATEGY.json`` (measured and simulated
timelines side by side: open in https://ui.perfetto.dev).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from flexrt.cli._common import add_json_flag, count, emit_json, fused_cost_choice, learned_model_path
from flexrt.errors import ConfigError
from flexrt.inputs import writable_folder
from flexrt.machine import load_machine
from flexrt.model.accuracy import scores
from flexrt.runtime import mpi

NAME = "accuracy"
HELP = "measure real parallel runs on this host beside the simulator's predictions (one process per device)"
ACCEPTS_MODEL_FLAGS = False


def add_arguments(parser) -> None:
    from flexrt.model.accuracy import MODELS
    parser.add_argument("--ranks", type=count(1, 64), metavar="R",
                        help=f"processes = devices of the local machine (default: this host's cores, {os.cpu_count()})")
    parser.add_argument("--machine", metavar="FILE",
                        help="a machine YAML of one device per rank from `mpiexec -n R flexrt calibrate --devices 1` "
                             "(default: calibrate now, into DIR)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--seeds", type=count(0, 100), default=2, metavar="N",
                        help="random validation strategies per model (default 2)")
    parser.add_argument("--calibration", type=count(0, 100), default=12, metavar="N",
                        help="random calibration strategies per model, beside one device (default 12)")
    parser.add_argument("--repeat", type=count(1, 1000), default=15, metavar="N",
                        help="timed iterations per strategy, shared among 5 sessions each after 3 untimed ones; the "
                             "sessions run in rounds interleaved across strategies (default 15; the median is scored)")
    parser.add_argument("--quick", action="store_true", help="quick calibration of the host, 3 timed iterations")
    parser.add_argument("--pipelines", action="store_true",
                        help="also validate GPipe and 1F1B pipelines (2 stages, 4 micro-batches), calibrated on a "
                             "one-device pipeline of 4 micro-batches")
    parser.add_argument("--fusion", action="store_true",
                        help="also validate the fusion plan DisCo's search finds from each model's data parallelism, "
                             "scored by the measured costs with fused tasks timed as --fused-cost says")
    parser.add_argument("--fused-cost", default="learned", metavar="{learned[:PATH],profiled,analytic}",
                        type=fused_cost_choice,
                        help="with --fusion: how a fused task is timed (default learned: the packaged model of "
                             "`flexrt fusion-model`, or PATH)")
    parser.add_argument("--fusion-budget", type=count(1, 100000), default=1000, metavar="N",
                        help="with --fusion: DisCo's candidates per model (default 1000)")
    parser.add_argument("--output", default="flexrt-accuracy", metavar="DIR",
                        help="where the results, the scatter plot and the traces go (default ./flexrt-accuracy)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_json_flag(parser)


def _models(text: str) -> list[str]:
    from flexrt.model.accuracy import MODELS
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in MODELS]
    if not names or bad:
        raise ConfigError(f"--models: {'unknown model ' + ', '.join(bad) if bad else 'empty'}; valid: {', '.join(MODELS)}")
    return names


def run(args, extra) -> int:
    models = _models(args.models)
    if args.worker:
        from flexrt.cli._accuracy_worker import worker
        return worker(args, models)
    if mpi.launched_by_mpi():
        raise ConfigError("run `flexrt accuracy` without mpiexec: it starts its own processes (--ranks R)")
    return _driver(args, models)


def _driver(args, models: list[str]) -> int:
    doc = measure(args, models)
    out = Path(args.output)
    _scatter(doc["rows"], out / "scatter.png")
    if args.json:
        emit_json(doc)
        return 0
    _report(doc, out)
    return 0


def measure(args, models: list[str]) -> dict:
    """Calibrate (unless ``args.machine``), run the ranks' part under ``mpiexec -n R`` and return
    ``accuracy.json``'s document with ``elapsed_s``; ``args`` holds this command's options (what
    ``add_arguments`` defines). Progress is printed unless ``args.json``."""
    ranks = args.ranks or os.cpu_count() or 1
    if ranks > (os.cpu_count() or 1):
        print(f"flexrt accuracy: warning: {ranks} processes on {os.cpu_count()} cores share cores; the measured times "
              f"include contention the simulator does not model", file=sys.stderr)
    if args.fusion and args.fused_cost.startswith("learned"):
        learned_model_path(args.fused_cost)    # before anything runs
    out = writable_folder(args.output, "--output")
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FLEXRT_CACHE_DIR=str(out.resolve() / "cache"))
    t0 = time.perf_counter()
    if args.machine:
        machine = Path(args.machine)
        if not machine.is_file():
            raise ConfigError(f"--machine {machine}: no such file; write one with `mpiexec -n {ranks} flexrt calibrate "
                              f"--devices 1 --output {machine}`")
        load_machine(str(machine))   # a bad file refused here, once, before the ranks start
    else:
        machine = out / "local.yaml"
        mpi.launch(ranks, mpi.flexrt_command() + ["calibrate", "--devices", "1", "--output", str(machine)]
                   + (["--quick"] if args.quick else []), env, echo=False)
        if not args.json:
            print(f"calibrated this host as {ranks} processes of one device each ({time.perf_counter() - t0:.0f} s): "
                  f"{machine}")
    cmd = mpi.flexrt_command() + ["accuracy", "--worker", "--ranks", str(ranks), "--machine", str(machine),
                                  "--models", ",".join(models), "--seeds", str(args.seeds), "--calibration",
                                  str(args.calibration), "--repeat", str(3 if args.quick else args.repeat),
                                  "--output", str(out)] + (["--pipelines"] if args.pipelines else []) \
        + (["--fusion", "--fused-cost", args.fused_cost, "--fusion-budget", str(args.fusion_budget)] if args.fusion else [])
    mpi.launch(ranks, cmd, env, echo=not args.json)
    doc = json.loads((out / "accuracy.json").read_text())
    doc["elapsed_s"] = time.perf_counter() - t0
    return doc


def _report(doc: dict, out: Path) -> None:
    from flexrt.simulator.measured_costs import OVERHEADS, overheads_text
    rows, meta = doc["rows"], doc["meta"]
    print(f"\n{len(rows)} validation strategies over {len(meta['models'])} models on {meta['ranks']} processes "
          f"(one device each; load average {meta['load_before']:.2f} before, {meta['load_after']:.2f} after); "
          f"calibrated on {len(meta['calibration'])} other strategies: {_per_model(meta['calibration'])}")
    print(f"the runtime's own times (fitted on the calibration strategies): "
          f"{overheads_text([meta.get(name, 0.0) for name in OVERHEADS])}")
    print(f"{'cost model':<34}{'median':>8}{'max':>8}{'tau':>7}{'regret':>8}")
    for key, what in (("profiled_s", "profiled kernels (before)"), ("predicted_s", "measured tasks (after)")):
        s = scores(rows, key)
        print(f"{what:<34}{s['median_error']:>8.1%}{s['max_error']:>8.1%}{s['tau']:>+7.2f}{s['max_regret']:>8.1%}")
    s = scores(rows, "predicted_s")
    print("within each model (after): " + "; ".join(
        f"{m} tau {v['tau']:+.2f}, regret {v['regret']:.1%} ({v['predicted_best']} vs {v['measured_best']})"
        for m, v in s["per_model"].items()))
    kinds: dict = {}
    for r in rows:
        for k, (m, p) in r["kinds"].items():
            acc = kinds.setdefault(k, [0.0, 0.0])
            acc[0] += m
            acc[1] += p
    print("per task kind, traced / predicted task time (after; a message from its send to its arrival, a ring "
          "member from its arrival to its sum, both waits included): " + ", ".join(
        f"{k} {m / p:.2f}x" for k, (m, p) in sorted(kinds.items()) if p > 0))
    shares = {r["model"] + "/" + r["strategy"]: r["assembly_s"] / sum(m for m, _ in r["kinds"].values())
              for r in rows if r.get("assembly_s") and sum(m for m, _ in r["kinds"].values()) > 0}
    if shares:
        lo, hi = min(shares, key=shares.get), max(shares, key=shares.get)
        print(f"operand assembly (parts copied into a task's operands, inside its traced time; the measured keys "
              f"do not separate it): {shares[lo]:.0%} ({lo}) to {shares[hi]:.0%} ({hi}) of the traced task time, "
              f"median {statistics.median(shares.values()):.0%}")
    mem = [abs(v["measured_peak"] - v["predicted_peak"]) / v["measured_peak"]
           for r in rows for v in r.get("memory", {}).values() if v.get("measured_peak") and "predicted_peak" in v]
    if mem:
        print(f"peak memory per device: median |error| {statistics.median(mem):.1%}, max {max(mem):.1%} "
              f"({len(mem)} device-strategies)")
    _report_fusion(rows, meta)
    hits, total = meta["hits"], meta["hits"] + meta["misses"]
    print(f"measured-cost coverage: {hits} of {total} cost questions answered from the table "
          f"({hits / max(total, 1):.0%}); the rest from a + b x^c of the profiled time x, fitted per kind and operator")
    print(f"wrote {out / 'accuracy.json'}, {out / 'scatter.png'}, {out / 'traces'}/ (measured beside simulated); "
          f"{doc['elapsed_s']:.0f} s")


def _report_fusion(rows: list, meta: dict) -> None:
    """With --fusion: per model, DisCo's plan measured beside simulated, and its speed-up over the
    data-parallel strategy it started from, measured and simulated."""
    by = {(r["model"], r["strategy"]): r for r in rows}
    fused = [r for r in rows if r.get("fusion")]
    if not fused:
        return
    print(f"fusion plans DisCo found from data parallelism (fused tasks: {meta.get('fused_cost')}):")
    print(f"{'model':<12}{'groups':>7}{'ops':>5}{'buckets':>8}{'measured':>10}{'predicted':>10}{'err':>7}"
          f"{'speed-up measured':>19}{'simulated':>10}")
    for r in fused:
        f, base = r["fusion"], by.get((r["model"], r["strategy"].removesuffix("+disco")))
        up = (f"{base['measured_s'] / r['measured_s']:>19.3f}x{base['predicted_s'] / r['predicted_s']:>9.3f}x"
              if base else "")
        print(f"{r['model']:<12}{f['groups']:>7}{f['fused_ops']:>5}{f['buckets']:>8}{r['measured_s'] * 1e3:>10.2f}"
              f"{r['predicted_s'] * 1e3:>10.2f}{(r['predicted_s'] - r['measured_s']) / r['measured_s']:>+7.1%}{up}")


def _per_model(names: list) -> str:
    """``["mlp/one-device", "mlp/calib1000", "mlp/calib1001"]`` -> ``"mlp: one-device, calib1000..1001"``."""
    groups: dict = {}
    for n in names:
        model, _, label = n.partition("/")
        groups.setdefault(model, []).append(label)

    def short(labels: list) -> str:
        seeds = [int(x[5:]) for x in labels if x.startswith("calib") and x[5:].isdigit()]
        rest = [x for x in labels if not (x.startswith("calib") and x[5:].isdigit())]
        return ", ".join(rest + ([f"calib{min(seeds)}..{max(seeds)}"] if seeds else []))
    return "; ".join(f"{m}: {short(ls)}" for m, ls in groups.items())


def _scatter(rows: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 5))
    meas = [r["measured_s"] * 1e3 for r in rows]
    for key, label, marker in (("profiled_s", "profiled kernels (before)", "x"), ("predicted_s", "measured tasks", "o")):
        ax.scatter(meas, [r[key] * 1e3 for r in rows], marker=marker, label=label, alpha=0.8)
    lo, hi = min(meas + [r["predicted_s"] * 1e3 for r in rows]) * 0.8, max(meas) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1)
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10 %")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("measured iteration (ms)")
    ax.set_ylabel("predicted iteration (ms)")
    ax.legend(fontsize=8)
    ax.set_title("flexrt simulator vs real runs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
