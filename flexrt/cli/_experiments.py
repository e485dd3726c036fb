"""``flexrt run EXPERIMENT`` and ``flexrt experiments [list | show NAME | kinds]``: the YAML-configured
experiments that reproduce the papers' tables and figures (:mod:`flexrt.experiments`).

    flexrt run flexflow_fig6 --quick              a shipped experiment by name, its quick variant
    flexrt run my.yaml --output DIR --resume      a file; keep DIR's finished runs, run the rest
    flexrt experiments                            the shipped experiments and what each reproduces
    flexrt experiments show unity_fig14           one experiment: kind, runs, references, plots
    flexrt experiments kinds                      the run kinds with their parameters and metrics
"""

from __future__ import annotations

import sys
from pathlib import Path

from flexrt.cli._common import add_json_flag, count, emit_json
from flexrt.errors import ConfigError
from flexrt.inputs import listing, short, writable_folder

MAX_JOBS = 256


def _resolve(name: str) -> Path:
    """A shipped experiment's file by name, or a file path (it has a ``/`` or ends in .yaml/.yml)."""
    from flexrt.experiments import shipped
    if "/" in name or name.endswith((".yaml", ".yml")):
        return Path(name)
    files = shipped()
    if name not in files:
        import difflib
        close = difflib.get_close_matches(name, list(files), n=3)
        raise ConfigError(f"unknown experiment {short(name)}" + (f" (did you mean {', '.join(close)}?)" if close else "")
                          + f"; shipped: {listing(files, 1000)} (or give a file: a path with a '/' or ending in .yaml)")
    return files[name]


class Run:
    NAME = "run"
    HELP = "run an experiment (a shipped name or a YAML file): results, report and plots in a folder"
    ACCEPTS_MODEL_FLAGS = False

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument("experiment", metavar="EXPERIMENT",
                            help="a shipped experiment (`flexrt experiments`) or an experiment YAML file")
        parser.add_argument("--quick", action="store_true", help="the experiment's quick variant (minutes)")
        parser.add_argument("--resume", action="store_true",
                            help="keep the runs already finished in the output folder and run only the others")
        parser.add_argument("--jobs", type=count(1, MAX_JOBS), default=1, metavar="N",
                            help="run independent runs in N processes (default 1)")
        parser.add_argument("--output", metavar="DIR",
                            help="results folder (default results/NAME, results/NAME-quick with --quick)")
        add_json_flag(parser)

    @staticmethod
    def run(args, extra) -> int:
        from flexrt.experiments import default_output, load_experiment, run_experiment
        exp = load_experiment(_resolve(args.experiment), "quick" if args.quick else "full")
        out = writable_folder(args.output, "--output") if args.output is not None else default_output(exp)
        tty = sys.stderr.isatty()
        done = [0]

        def say(row: dict) -> None:
            done[0] += 1
            if not tty and not args.json:
                label = " ".join(f"{k}={v}" for k, v in row["inputs"].items() if k in _varying(exp))
                print(f"  {row['status']:<8} {label} ({row['wall_s']:.1f} s)"
                      + (f": {row['reason']}" if row["reason"] else ""), file=sys.stderr, flush=True)

        try:
            summary = run_experiment(exp, out, resume=args.resume, jobs=args.jobs, progress=tty and not args.json,
                                     on_row=say)
        except KeyboardInterrupt:
            from flexrt.experiments import load_results
            finished = sum(r.get("status") in ("ok", "skipped") for r in load_results(out / "results.jsonl"))
            print(f"flexrt run: interrupted; {done[0]} runs finished now, {finished} of {len(exp.runs)} in all are in "
                  f"{out / 'results.jsonl'}: run again with --resume to go on", file=sys.stderr)
            return 130
        doc = {"experiment": exp.name, "variant": exp.variant, "output": str(out), "runs": len(exp.runs),
               "computed": len(summary.computed), "cached": len(summary.cached),
               "failed": [{"key": k, "error": e} for k, e in summary.failed], "report": str(summary.report)}
        if args.json:
            emit_json(doc)
        else:
            print(f"{exp.name} ({exp.variant}): {len(exp.runs)} runs, {len(summary.computed)} computed, "
                  f"{len(summary.cached)} already finished in {out}, {len(summary.failed)} failed; "
                  f"report {summary.report}")
            for key, error in summary.failed:
                print(f"  failed {key}: {error}", file=sys.stderr)
        if summary.failed:
            return 1
        from flexrt.experiments import load_results
        rows = load_results(out / "results.jsonl")
        if rows and not any(r.get("status") == "ok" for r in rows):
            raise ConfigError(f"every run of {exp.name} was skipped, so the report is empty; the first: "
                              f"{rows[0].get('reason')}")
        return 0


def _varying(exp) -> tuple[str, ...]:
    from flexrt.experiments.report import row_names
    return row_names(exp)


class Experiments:
    NAME = "experiments"
    HELP = "list the shipped experiments and what each reproduces; show one; list the run kinds"
    ACCEPTS_MODEL_FLAGS = False

    @staticmethod
    def add_arguments(parser) -> None:
        add_json_flag(parser)
        sub = parser.add_subparsers(dest="experiments_command", metavar="ACTION")
        sub.add_parser("list", help="the shipped experiments (the default)", allow_abbrev=False)
        show = sub.add_parser("show", help="one experiment: kind, runs (full and quick), references, plots",
                              allow_abbrev=False)
        show.add_argument("name", metavar="NAME", help="a shipped experiment or an experiment YAML file")
        sub.add_parser("kinds", help="the run kinds, their parameters and metrics", allow_abbrev=False)
        for p in sub.choices.values():
            add_json_flag(p, action=True)

    @staticmethod
    def run(args, extra) -> int:
        action = args.experiments_command or "list"
        return {"list": _list, "show": _show, "kinds": _kinds}[action](args)


def _list(args) -> int:
    from flexrt.experiments import load_experiment, shipped
    rows = []
    for name, path in shipped().items():
        full, quick = load_experiment(path), load_experiment(path, "quick")
        rows.append({"name": name, "paper": full.paper, "reproduces": full.reproduces, "runs": len(full.runs),
                     "quick_runs": len(quick.runs), "file": str(path)})
    if args.json:
        emit_json({"experiments": rows})
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    print(f"{'name'.ljust(width)}  {'paper':<8} {'runs':>5} {'quick':>5}  reproduces")
    for r in rows:
        print(f"{r['name'].ljust(width)}  {r['paper']:<8} {r['runs']:>5} {r['quick_runs']:>5}  {r['reproduces']}")
    return 0


def _show(args) -> int:
    from flexrt.experiments import kind, load_experiment
    path = _resolve(args.name)
    full, quick = load_experiment(path), load_experiment(path, "quick")
    k = kind(full.kind)
    doc = {"name": full.name, "title": full.title, "paper": full.paper, "reproduces": full.reproduces,
           "kind": full.kind, "kind_description": k.description, "file": str(path), "measure": list(full.measure),
           "runs": [r.params for r in full.runs], "quick_runs": [r.params for r in quick.runs],
           "references": [{"where": dict(r.where), "metric": r.metric, "paper": r.shown(), "source": r.source}
                          for r in full.references],
           "plots": [{"type": p.type, "x": p.x, "y": p.y, "group": p.group} for p in full.plots]}
    if args.json:
        emit_json(doc)
        return 0
    print(f"{full.name}: {full.title}\n  reproduces: {full.reproduces}\n  file: {path}")
    print(f"  kind: {full.kind} ({k.description})\n  measures: {', '.join(full.measure)}")
    for label, exp in (("full", full), ("quick", quick)):
        print(f"  {label}: {len(exp.runs)} runs")
        for r in exp.runs[:12]:
            print(f"    {r.label(_varying(exp)) or r.label(tuple(r.params))}")
        if len(exp.runs) > 12:
            print(f"    ... ({len(exp.runs) - 12} more)")
    if full.references:
        print("  the paper's values:")
        for r in full.references:
            where = " ".join(f"{k}={v}" for k, v in r.where)
            print(f"    {r.metric} {r.shown()} {('at ' + where) if where else ''} ({r.source})")
    return 0


def _kinds(args) -> int:
    from flexrt.experiments import kind, kinds
    rows = []
    for name in kinds():
        k = kind(name)
        rows.append({"name": name, "description": k.description, "metrics": list(k.metrics),
                     "params": [{"name": p.name, "type": p.type, "required": p.required,
                                 "default": None if p.required else p.default, "help": p.help} for p in k.params]})
    if args.json:
        emit_json({"kinds": rows})
        return 0
    for r in rows:
        params = ", ".join(p["name"] + ("" if p["required"] else f"={p['default']}") for p in r["params"])
        print(f"{r['name']}: {r['description']}\n    parameters: {params}\n    metrics: {', '.join(r['metrics'])}")
    return 0


RUN, EXPERIMENTS = Run, Experiments
