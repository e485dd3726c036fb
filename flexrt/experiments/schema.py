"""Experiment files: the format, and its validating reader.

An experiment is one run kind (:mod:`flexrt.experiments.kinds`) over a list of runs: the cross
product of its ``axes`` (and any explicit ``runs``), each run's inputs being the kind's defaults,
then ``params``, then the run's own values. ``quick`` (and ``tiny``, the tests' variant) override
``params`` key by key and ``axes`` axis by axis, or replace ``runs``.

.. code-block:: yaml

    name: flexflow_fig6                 # required: the file's stem
    title: "FlexFlow Fig. 6: MCMC's speed-up over data parallelism and the expert strategy"
    paper: flexflow                     # flexflow | unity | disco | host
    reproduces: FlexFlow Fig. 6 (per-iteration time, six DNNs, P100 and K80 clusters)
    kind: search_speedup                # `flexrt experiments kinds` lists them with their parameters
    params: {algorithm: mcmc, budget: 1000, seed: 0}
    axes: {model: [alexnet, rnntc], machine: [flexflow_p100], devices: [4, 16]}
    runs: [{model: nmt, machine: flexflow_k80, devices: 64}]      # optional, after the axes' product
    quick: {params: {budget: 80}, axes: {model: [alexnet], devices: [4]}}
    tiny: {params: {budget: 5}, axes: {model: [alexnet], devices: [4], machine: [flexflow_p100]}}
    measure: [speedup_vs_dp, speedup_vs_expert, search_s]         # the report's columns
    reference:                          # the paper's numbers: a value, or a range the paper gives
      - {where: {model: nmt, devices: 64}, metric: speedup_vs_dp, range: [1.7, 2.4], source: "Fig. 7a"}
    report: {rows: [model, machine, devices]}
    plots: [{type: bar, x: model, y: speedup_vs_dp, group: devices}]

Every error is a :class:`~flexrt.errors.ConfigError`
``FILE:LINE: field 'axes.devices[1]': expected an integer >= 1, got 'four'``.

Entry points: :func:`load_experiment`, :func:`parse_experiment`, :class:`Experiment`, :class:`Run`.
"""

from __future__ import annotations

import functools

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from flexrt import __version__
from flexrt.errors import ConfigError
from flexrt.experiments.kinds import Kind, Param, kind as kind_of, kinds
from flexrt.inputs import (LineMap, LineSeq, check_int, check_number, line_loader, listing, parse_yaml, read_text,
                           short)

PAPERS = ("flexflow", "unity", "disco", "megatron", "host")
VARIANTS = ("full", "quick", "tiny")
PLOT_TYPES = ("bar", "line", "convergence", "scatter", "cdf")
TOP_KEYS = ("name", "title", "paper", "reproduces", "kind", "params", "axes", "runs", "quick", "tiny", "measure",
            "reference", "report", "plots")
REQUIRED_KEYS = ("name", "title", "paper", "reproduces", "kind")
MAX_RUNS = 10_000
MAX_EXPERIMENT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Run:
    """One run: its kind, its inputs (every parameter of the kind, validated) and their hash."""

    kind: str
    inputs: tuple[tuple[str, Any], ...]
    key: str

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.inputs)

    def label(self, names: tuple[str, ...]) -> str:
        p = self.params
        return " ".join(f"{n}={p[n]}" for n in names if n in p)


@dataclass(frozen=True, slots=True)
class Reference:
    """A number from the paper: for the runs matching ``where``, ``metric`` is ``value`` or within ``low..high``."""

    where: tuple[tuple[str, Any], ...]
    metric: str
    value: Optional[float]
    low: Optional[float]
    high: Optional[float]
    source: str

    def matches(self, params: dict) -> bool:
        return all(params.get(k) == v for k, v in self.where)

    def shown(self) -> str:
        return _number(self.value) if self.value is not None else f"{_number(self.low)}-{_number(self.high)}"


def _number(x: float) -> str:
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:.4g}"


@dataclass(frozen=True, slots=True)
class Relative:
    """A derived metric ``name``: ``metric`` divided by that of the run with the same inputs but ``to``."""

    name: str
    metric: str
    to: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Plot:
    type: str
    x: Optional[str]
    y: Optional[str]
    group: Optional[str]
    title: str
    log_y: bool


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    title: str
    paper: str
    reproduces: str
    kind: str
    variant: str
    runs: tuple[Run, ...]
    measure: tuple[str, ...]
    references: tuple[Reference, ...]
    rows: tuple[str, ...]
    relative: tuple[Relative, ...]
    plots: tuple[Plot, ...]
    source: str

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric a reference or a plot may name: the kind's and the relative ones."""
        return kind_of(self.kind).metrics + tuple(r.name for r in self.relative)


def run_key(kind_name: str, inputs: dict) -> str:
    """The cache key of a run: a hash of its kind, canonical inputs (a machine file or model script
    by its content) and the flexrt version."""
    canonical = {}
    for k, v in sorted(inputs.items()):
        if k in ("machine", "model") and isinstance(v, str) and os.path.isfile(v):
            v = {"file_sha256": hashlib.sha256(Path(v).read_bytes()).hexdigest()}
        canonical[k] = v
    text = json.dumps({"kind": kind_name, "inputs": canonical, "flexrt": __version__}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plain(value: Any) -> Any:
    """A loaded YAML value without its line records (plain dicts and lists)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class _Reader:
    """Checks the document; every error names the file, the line and the field."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source, self.base_dir = source, base_dir

    def where(self, line: int, path: str) -> str:
        return f"{self.source}:{line}: field '{path}'"

    def error(self, line: int, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where(line, path)}: {message}")

    @staticmethod
    def line(m: LineMap, key: Any) -> int:
        return m.key_lines.get(key, m.line)

    def mapping(self, value: Any, line: int, path: str, what: str = "a mapping") -> LineMap:
        if not isinstance(value, LineMap):
            raise self.error(getattr(value, "line", line), path, f"expected {what}, got {short(value)}")
        return value

    def sequence(self, value: Any, line: int, path: str, what: str) -> LineSeq:
        if not isinstance(value, LineSeq):
            raise self.error(getattr(value, "line", line), path, f"expected {what}, got {short(value)}")
        return value

    def keys(self, m: LineMap, path: str, valid: tuple, required: tuple = ()) -> None:
        for key in m:
            if key not in valid:
                raise self.error(self.line(m, key), f"{path}.{key}" if path else str(key),
                                 f"unknown key {short(key)}; valid keys: {', '.join(map(str, valid))}")
        for key in required:
            if key not in m:
                raise self.error(m.line, path or "<top level>", f"missing key {key!r}")

    def text(self, m: LineMap, key: str, path: str, choices: tuple = ()) -> str:
        value = m[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(self.line(m, key), path, f"expected a non-empty string, got {short(value)}")
        if choices and value not in choices:
            raise self.error(self.line(m, key), path, f"unknown value {short(value)}; valid: {', '.join(choices)}")
        return value

    def finite(self, value: Any, line: int, path: str) -> None:
        """Refuse a NaN or infinity anywhere in ``value`` (results are JSON, which holds neither)."""
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(line, path, f"expected a finite number, got {value}")
        if isinstance(value, dict):
            for k, v in value.items():
                self.finite(v, value.key_lines.get(k, line) if isinstance(value, LineMap) else line, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.finite(v, value.item_lines[i] if isinstance(value, LineSeq) else line, f"{path}[{i}]")

    def value(self, p: Param, value: Any, line: int, path: str) -> Any:
        """``value`` checked against parameter ``p`` (a list parameter item by item)."""
        if p.type in ("strs", "ints", "floats"):
            seq = self.sequence(value, line, path, f"a list ({p.type[:-1]} items)")
            item = Param(p.name, p.type[:-1], choices=p.choices, minimum=p.minimum, maximum=p.maximum)
            return [self.value(item, v, seq.item_lines[i], f"{path}[{i}]") for i, v in enumerate(seq)]
        where = self.where(line, path)
        if p.type == "int":
            return check_int(value, where, minimum=p.minimum, maximum=p.maximum)
        if p.type == "float":
            return check_number(value, where, minimum=p.minimum, maximum=p.maximum)
        if p.type == "bool":
            if not isinstance(value, bool):
                raise self.error(line, path, f"expected true or false, got {short(value)}")
            return value
        if p.type == "mapping":
            m = self.mapping(value, line, path, "a mapping of option name to value")
            self.finite(m, line, path)
            return plain(m)
        if not isinstance(value, str) or not value:
            raise self.error(line, path, f"expected a non-empty string, got {short(value)}")
        if p.name == "model" and ("/" in value or value.endswith(".py")):
            resolved = (self.base_dir / value).resolve()
            if not resolved.is_file():
                raise self.error(line, path, f"model script {short(value)} does not exist (paths are relative to "
                                             f"the experiment file's folder; or give a zoo model)")
            return str(resolved)
        if p.name == "machine" and ("/" in value or value.endswith((".yaml", ".yml"))):
            resolved = (self.base_dir / value).resolve()
            if not resolved.is_file():
                raise self.error(line, path, f"machine file {short(value)} does not exist (paths are relative to "
                                             f"the experiment file's folder)")
            _machine_file(str(resolved))   # its own errors (file:line, field) before any run
            return str(resolved)
        choices = p.valid_choices()
        if choices is not None and value not in choices:
            raise self.error(line, path, f"unknown {p.name} {short(value)}; valid: {listing(choices)}")
        return value

    def values(self, k: Kind, m: Any, line: int, path: str, lists: bool = False) -> dict[str, tuple[Any, int]]:
        """A mapping of the kind's parameters (``lists``: each value a list of candidates, an axis), checked."""
        m = self.mapping(m, line, path, f"a mapping of {k.name}'s parameters")
        out: dict[str, Any] = {}
        for name in m:
            if name not in k.param_names:
                raise self.error(self.line(m, name), f"{path}.{name}", f"run kind {k.name!r} takes no parameter "
                                 f"{short(name)}; valid: {', '.join(k.param_names)}")
            p, fline = k.param(name), self.line(m, name)
            fpath = getattr(m, "key_paths", {}).get(name, f"{path}.{name}")   # a variant's own keys: its section
            if lists:
                seq = self.sequence(m[name], fline, fpath, f"a list of values of {name} (an axis)")
                if not seq:
                    raise self.error(seq.line, fpath, "an axis needs at least one value")
                out[name] = [(self.value(p, v, seq.item_lines[i], f"{fpath}[{i}]"), seq.item_lines[i])
                             for i, v in enumerate(seq)]
            else:
                out[name] = (self.value(p, m[name], fline, fpath), fline)
        return out


def _merged(r: _Reader, top: LineMap, variant: str) -> tuple[Any, Any, Any, int, str]:
    """(params, axes, runs, line, the runs' field path) of the document under ``variant``: its
    section's params and axes override key by key; its runs replace the runs."""
    params, axes, runs = top.get("params"), top.get("axes"), top.get("runs")
    if variant == "full":
        return params, axes, runs, top.line, "runs"
    if variant not in top:
        if variant == "tiny" and "quick" in top:
            return _merged(r, top, "quick")
        raise r.error(top.line, variant, f"this experiment has no {variant!r} section; give one with params, axes "
                                         f"or runs overriding the full experiment")
    section = r.mapping(top[variant], r.line(top, variant), variant, "a mapping with params, axes or runs")
    r.keys(section, variant, ("params", "axes", "runs"))

    def over(base, key):
        if key not in section:
            return base
        new = r.mapping(section[key], r.line(section, key), f"{variant}.{key}")
        if base is None:
            new.key_paths = {name: f"{variant}.{key}.{name}" for name in new}
            return new
        merged = LineMap(r.mapping(base, r.line(top, key), key))
        merged.line, merged.key_lines = new.line, {**base.key_lines, **new.key_lines}
        merged.update(new)
        merged.key_paths = {name: f"{variant}.{key}.{name}" for name in new}   # where the section gave them
        return merged
    runs_path = f"{variant}.runs" if "runs" in section else "runs"
    return over(params, "params"), over(axes, "axes"), section.get("runs", runs), section.line, runs_path


def _runs(r: _Reader, k: Kind, top: LineMap, variant: str) -> tuple[Run, ...]:
    params_m, axes_m, runs_m, line, runs_path = _merged(r, top, variant)
    fixed = r.values(k, params_m, line, "params") if params_m is not None else {}
    axes = r.values(k, axes_m, line, "axes", lists=True) if axes_m is not None else {}
    total = 1
    for values in axes.values():
        total *= len(values)
    if total > MAX_RUNS:
        raise r.error(getattr(axes_m, "line", line), "axes", f"the axes' product has {total} runs; at most {MAX_RUNS}")
    combos: list[tuple[dict[str, tuple[Any, int]], str]] = []    # (values, where they are given)
    if axes or runs_m is None:
        combos = [(dict(zip(axes, c)), "axes" if axes else "params") for c in itertools.product(*axes.values())]
    if runs_m is not None:
        seq = r.sequence(runs_m, line, runs_path, "a list of runs, each a mapping of parameters")
        combos += [(r.values(k, item, seq.item_lines[i], f"{runs_path}[{i}]"), f"{runs_path}[{i}]")
                   for i, item in enumerate(seq)]
    runs, seen = [], set()
    for combo, field in combos:
        inputs = {p.name: p.default for p in k.params if not p.required}
        inputs.update({n: v for n, (v, _) in fixed.items()})
        inputs.update({n: v for n, (v, _) in combo.items()})
        missing = [p.name for p in k.params if p.name not in inputs]
        if missing:
            at = min((ln for _, ln in combo.values()), default=line)
            raise r.error(at, "params", f"run kind {k.name!r} needs {missing[0]!r} (in params, axes or each run); "
                                        f"parameters: {', '.join(k.param_names)}")
        _check_run(r, k, inputs, combo, fixed, line, field)
        key = run_key(k.name, inputs)
        if key not in seen:
            seen.add(key)
            runs.append(Run(k.name, tuple(sorted(inputs.items())), key))
    if not runs:
        raise r.error(getattr(runs_m, "line", line), runs_path, "the experiment has no runs; give axes with values, "
                                                                "or at least one entry in runs")
    return tuple(runs)


@functools.cache
def _machine_file(path: str) -> None:
    from flexrt.machine import load_machine
    load_machine(path)


def _check_run(r: _Reader, k: Kind, inputs: dict, combo: dict, fixed: dict, line: int, field: str) -> None:
    """The kind's check of one run's inputs together (``Kind.check``), of its machine and devices
    (``common.machine_problem``) and of its model's flags (``common.model_flags_problem``): our
    error at the run's line, naming where its values are given and the values the file gives."""
    problem = k.check(inputs) if k.check is not None else None
    if not problem and "machine" in inputs and "devices" in inputs:
        from flexrt.experiments.common import machine_problem
        problem = machine_problem(inputs["machine"], inputs["devices"])
    if not problem and "model" in inputs:
        from flexrt.experiments.common import model_flags_problem
        problem = model_flags_problem(inputs["model"], inputs.get("seq_length") or 0,
                                      tuple(inputs.get("model_flags") or ()))
    if problem:
        at = min((ln for _, ln in combo.values()), default=line)
        given = ", ".join(f"{n}: {short(v)}" for n, v in sorted(inputs.items()) if n in combo or n in fixed)
        raise r.error(at, field, f"run kind {k.name!r}: {problem} (the run with {given})")


def _references(r: _Reader, k: Kind, top: LineMap, metrics: tuple[str, ...],
                runs: tuple[Run, ...]) -> tuple[Reference, ...]:
    """The paper's numbers; each one's ``where`` must match at least one of ``runs`` (the full
    variant's: a number compared with no run is a mistyped value, not a reference)."""
    if "reference" not in top:
        return ()
    seq = r.sequence(top["reference"], r.line(top, "reference"), "reference", "a list of the paper's values")
    out = []
    for i, item in enumerate(seq):
        path, line = f"reference[{i}]", seq.item_lines[i]
        m = r.mapping(item, line, path, "a mapping with where, metric, value or range, source")
        r.keys(m, path, ("where", "metric", "value", "range", "source"), ("metric", "source"))
        where = r.values(k, m["where"], r.line(m, "where"), f"{path}.where") if "where" in m else {}
        metric = r.text(m, "metric", f"{path}.metric", metrics)
        if ("value" in m) == ("range" in m):
            raise r.error(m.line, path, "give exactly one of value (the paper's number) and range ([low, high])")
        value = low = high = None
        if "value" in m:
            value = check_number(m["value"], r.where(r.line(m, "value"), f"{path}.value"))
        else:
            rng = r.sequence(m["range"], r.line(m, "range"), f"{path}.range", "[low, high]")
            if len(rng) != 2:
                raise r.error(rng.line, f"{path}.range", f"expected [low, high], got {short(plain(rng))}")
            low, high = (check_number(v, r.where(rng.line, f"{path}.range")) for v in rng)
            if low > high:
                raise r.error(rng.line, f"{path}.range", f"low {_number(low)} is above high {_number(high)}; "
                                                          f"give [low, high] with low <= high")
        ref = Reference(tuple(sorted((n, v) for n, (v, _) in where.items())), metric, value, low, high,
                        r.text(m, "source", f"{path}.source"))
        if not any(ref.matches(run.params) for run in runs):
            raise r.error(r.line(m, "where"), f"{path}.where", _matches_no_run(ref, runs) + "; a reference must "
                          "match a run of the full experiment (remove it, or add the run to axes or runs)")
        out.append(ref)
    return tuple(out)


def _value_no_run_has(items, runs: tuple[Run, ...]) -> Optional[tuple[str, Any, str]]:
    """The first (parameter, value) of ``items`` that no run has, with the runs' values of that
    parameter as text; None when each value occurs in some run."""
    for n, v in items:
        values = list(dict.fromkeys(run.params.get(n) for run in runs))
        if v not in values:
            return n, v, f"{', '.join(short(x) for x in values[:12])}{' ...' if len(values) > 12 else ''}"
    return None


def _matches_no_run(ref: Reference, runs: tuple[Run, ...]) -> str:
    """Why ``ref`` compares with nothing: the first of its values no run has, and the runs' values."""
    missing = _value_no_run_has(ref.where, runs)
    if missing is not None:
        n, v, values = missing
        return f"{n}: {short(v)} matches none of the runs; their values of {n}: {values}"
    given = ", ".join(f"{n}: {short(v)}" for n, v in ref.where)
    return f"no run has all of {given} (each value occurs, but never together)"


def _report(r: _Reader, k: Kind, top: LineMap, runs: tuple[Run, ...]) -> tuple[tuple[str, ...], tuple[Relative, ...]]:
    if "report" not in top:
        return (), ()
    m = r.mapping(top["report"], r.line(top, "report"), "report", "a mapping with rows and relative")
    r.keys(m, "report", ("rows", "relative"))
    rows: tuple[str, ...] = ()
    if "rows" in m:
        seq = r.sequence(m["rows"], r.line(m, "rows"), "report.rows", "a list of parameter names")
        rows = _unique(r, seq, "report.rows", k.param_names)
        _rows_tell_runs_apart(r, r.line(m, "rows"), k, rows, runs)
    relative = []
    if "relative" in m:
        seq = r.sequence(m["relative"], r.line(m, "relative"), "report.relative", "a list of {name, metric, to}")
        for i, item in enumerate(seq):
            path = f"report.relative[{i}]"
            e = r.mapping(item, seq.item_lines[i], path, "a mapping with name, metric, to")
            r.keys(e, path, ("name", "metric", "to"), ("name", "metric", "to"))
            to = r.values(k, e["to"], r.line(e, "to"), f"{path}.to")
            if not to:
                raise r.error(r.line(e, "to"), f"{path}.to", "expected at least one parameter whose value differs "
                                                             "(the run to divide by); an empty 'to' is the run itself")
            name = r.text(e, "name", f"{path}.name")
            taken = list(k.metrics) + [x.name for x in relative]
            if name in taken:
                what = "a metric of run kind " + repr(k.name) if name in k.metrics else "the name of an earlier entry"
                raise r.error(r.line(e, "name"), f"{path}.name", f"{short(name)} is already {what}; give a new name")
            rel = Relative(name, r.text(e, "metric", f"{path}.metric", k.metrics),
                           tuple(sorted((n, v) for n, (v, _) in to.items())))
            missing = _value_no_run_has(rel.to, runs)     # the run divided by must exist
            if missing is not None:
                n, v, values = missing
                raise r.error(r.line(e, "to"), f"{path}.to", f"{n}: {short(v)} matches none of the runs (their "
                              f"values of {n}: {values}); every row would have nothing to divide by")
            relative.append(rel)
    return rows, tuple(relative)


def _rows_tell_runs_apart(r: _Reader, line: int, k: Kind, rows: tuple[str, ...], runs: tuple[Run, ...]) -> None:
    """Refuse report rows under which two runs look alike: the report would show them with one label
    (and beside the paper's number of one of them)."""
    seen: dict[str, Run] = {}
    for run in runs:
        label = json.dumps([run.params.get(n) for n in rows], sort_keys=True, default=str)
        other = seen.setdefault(label, run)
        if other is not run:
            differ = [n for n in k.param_names if run.params.get(n) != other.params.get(n)]
            raise r.error(line, "report.rows", f"two runs differ only in {', '.join(differ)}, so rows of "
                          f"{', '.join(rows) or 'nothing'} show them alike (and the paper's number of one beside "
                          f"the other); add {', '.join(differ)}")


def _one(seq: LineSeq, i: int) -> LineMap:
    """Item ``i`` of ``seq`` as a one-key mapping ``{0: item}`` at its line (to check it with ``_Reader.text``)."""
    m = LineMap({0: seq[i]})
    m.line, m.key_lines = seq.item_lines[i], {0: seq.item_lines[i]}
    return m


def _names(r: _Reader, top: LineMap, key: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    seq = r.sequence(top[key], r.line(top, key), key, f"a list of names ({listing(valid)})")
    return _unique(r, seq, key, valid)


def _unique(r: _Reader, seq: LineSeq, path: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    """The names of ``seq``, each one of ``valid`` and given once."""
    out: list[str] = []
    for i in range(len(seq)):
        name = r.text(_one(seq, i), 0, f"{path}[{i}]", valid)
        if name in out:
            raise r.error(seq.item_lines[i], f"{path}[{i}]", f"{short(name)} is listed twice (also "
                                                              f"{path}[{out.index(name)}]); give each once")
        out.append(name)
    return tuple(out)


def _plots(r: _Reader, k: Kind, top: LineMap, metrics: tuple[str, ...]) -> tuple[Plot, ...]:
    if "plots" not in top:
        return ()
    seq = r.sequence(top["plots"], r.line(top, "plots"), "plots", "a list of plots")
    out = []
    for i, item in enumerate(seq):
        path = f"plots[{i}]"
        m = r.mapping(item, seq.item_lines[i], path, "a mapping with type, x, y, group, title")
        r.keys(m, path, ("type", "x", "y", "group", "title", "log_y"), ("type",))
        type_ = r.text(m, "type", f"{path}.type", PLOT_TYPES)
        x_valid = metrics if type_ == "scatter" else k.param_names
        x = r.text(m, "x", f"{path}.x", x_valid) if "x" in m else None
        y = r.text(m, "y", f"{path}.y", metrics) if "y" in m else None
        if type_ == "cdf" and y is None:
            raise r.error(m.line, path, "a cdf plot needs y (a metric whose value is a list)")
        if type_ not in ("convergence", "cdf") and (x is None or y is None):
            raise r.error(m.line, path, f"a {type_} plot needs x and y")
        group = r.text(m, "group", f"{path}.group", k.param_names) if "group" in m else None
        title = r.text(m, "title", f"{path}.title") if "title" in m else ""
        log_y = m.get("log_y", False)
        if not isinstance(log_y, bool):
            raise r.error(r.line(m, "log_y"), f"{path}.log_y", f"expected true or false, got {short(log_y)}")
        out.append(Plot(type_, x, y, group, title, log_y))
    return tuple(out)


def parse_experiment(text: str, source: str = "<string>", variant: str = "full",
                     base_dir: Optional[Path] = None) -> Experiment:
    """Validate experiment YAML ``text`` under ``variant`` (full, quick or tiny); ``source`` names it in errors."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown experiment variant {variant!r}; valid: {', '.join(VARIANTS)}")
    r = _Reader(source, base_dir or Path.cwd())
    top = r.mapping(parse_yaml(text, source, line_loader(), ConfigError), 1, "<top level>",
                    f"a mapping with {', '.join(REQUIRED_KEYS)}")
    r.keys(top, "", TOP_KEYS, REQUIRED_KEYS)
    name = r.text(top, "name", "name")
    stem = Path(source).stem
    if source != "<string>" and name != stem:
        raise r.error(r.line(top, "name"), "name", f"the name must be the file's stem {stem!r}, got {short(name)}")
    k = kind_of(r.text(top, "kind", "kind", kinds()))
    full_runs = ()
    for other in VARIANTS:      # every variant the file has is checked, whichever one runs
        if other != variant and (other == "full" or other in top):
            checked = _runs(r, k, top, other)
            full_runs = checked if other == "full" else full_runs
    runs = _runs(r, k, top, variant)
    full_runs = runs if variant == "full" else full_runs
    rows, relative = _report(r, k, top, full_runs)
    metrics = k.metrics + tuple(x.name for x in relative)
    measure = _names(r, top, "measure", metrics) if "measure" in top else k.metrics
    return Experiment(name, r.text(top, "title", "title"), r.text(top, "paper", "paper", PAPERS),
                      r.text(top, "reproduces", "reproduces"), k.name, variant, runs, measure,
                      _references(r, k, top, metrics, full_runs), rows, relative, _plots(r, k, top, metrics), source)


def load_experiment(path: str | Path, variant: str = "full") -> Experiment:
    """Read and validate the experiment file at ``path`` (paths in it are relative to its folder)."""
    text = read_text(path, "experiment file", ConfigError, MAX_EXPERIMENT_BYTES)
    return parse_experiment(text, str(path), variant, Path(path).resolve().parent)
