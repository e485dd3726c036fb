"""flexrt.experiments: YAML-configured experiments that reproduce the papers' tables and figures.

An experiment file (``configs/experiments/*.yaml``; the format: :mod:`flexrt.experiments.schema`)
names a run kind and the runs' inputs; :func:`run_experiment` runs them (in parallel processes if
asked), appending one JSON line per finished run to ``results.jsonl`` in the output folder, skipping
those already there on resume, then writes ``report.md`` (the paper's numbers beside ours) and PNG
plots. Importing this package registers every run kind (FlexFlow's, Unity's, DisCo's and this
host's: :func:`kinds`).

Entry points: :func:`load_experiment`, :func:`run_experiment`, :func:`shipped`, :func:`kinds`,
:func:`register_kind`.

Example:
    >>> exp = load_experiment(shipped()["flexflow_fig6"], variant="quick")   # doctest: +SKIP
    >>> run_experiment(exp, Path("results/flexflow_fig6-quick")).report      # doctest: +SKIP
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from flexrt.experiments.kinds import Outcome, Param, SkipRun, kind, kinds, register_kind
from flexrt.experiments.runner import default_output, load_results, run_experiment
from flexrt.experiments.schema import Experiment, Run, load_experiment, parse_experiment
# the run kinds register themselves when imported
from flexrt.experiments import (disco as _disco, flexflow as _flexflow, host as _host, megatron as _megatron,  # noqa: F401
                                unity as _unity)


def experiments_dir() -> Path:
    """``configs/experiments`` (package data of ``flexrt.configs``): the shipped experiments."""
    return Path(str(resources.files("flexrt.configs") / "experiments"))


def shipped() -> dict[str, Path]:
    """The shipped experiments: name -> file."""
    return {p.stem: p for p in sorted(experiments_dir().glob("*.yaml"))}


__all__ = ["Experiment", "Outcome", "Param", "Run", "SkipRun", "default_output", "experiments_dir", "kind", "kinds",
           "load_experiment", "load_results", "parse_experiment", "register_kind", "run_experiment", "shipped"]
