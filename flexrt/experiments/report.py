"""The report of an experiment: a Markdown table with the paper's numbers beside ours, and PNG plots.

Per finished run, one table row: the inputs named by ``report.rows`` (default: those that vary),
then each measured metric; where the paper gives a number for that metric and run, two more
columns: the paper's value (or range) and ours / paper (for a range: "in range", or the ratio to
the bound it misses). A relative metric (``report.relative``) divides a metric by that of the run
with the same inputs but ``to``; the paper's relative value is computed the same way from its
numbers. Plots (matplotlib, Agg): bar charts and lines of a metric over an input, grouped by
another, with the paper's values as black marks; convergence curves (best cost over search time);
scatter plots of one metric against another with the y = x line and +-30%.

Entry points: :func:`write_report`, :func:`table_rows`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from flexrt.experiments.schema import Experiment, Reference

OK = "ok"


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if x.is_integer() and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.3e}"
    if isinstance(x, (list, tuple)):
        return ", ".join(map(_fmt, x))
    if isinstance(x, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in x.items())
    return str(x).replace("|", "\\|")


class Values:
    """Our metrics and the paper's numbers, looked up by a run's inputs (relative metrics derived)."""

    def __init__(self, exp: Experiment, rows: list[dict]) -> None:
        self.exp = exp
        self.rows = [r for r in rows if r.get("status") == OK and r.get("experiment") == exp.name]
        self.by_key = {r["key"]: r for r in self.rows}
        self.relative = {r.name: r for r in exp.relative}

    def _find(self, params: dict) -> Optional[dict]:
        for r in self.rows:
            if all(r["inputs"].get(k) == v for k, v in params.items()):
                return r
        return None

    def ours(self, row: dict, metric: str) -> Any:
        rel = self.relative.get(metric)
        if rel is None:
            return row["metrics"].get(metric)
        base = self._find({**row["inputs"], **dict(rel.to)})
        x, y = row["metrics"].get(rel.metric), base["metrics"].get(rel.metric) if base else None
        return x / y if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else None

    def reference(self, params: dict, metric: str) -> Optional[Reference]:
        found = [r for r in self.exp.references if r.metric == metric and r.matches(params)]
        return found[-1] if found else None   # the most specific is given last

    def paper(self, params: dict, metric: str) -> tuple[Optional[float], Optional[Reference]]:
        """The paper's value (or None) and the reference it came from (a range: value None)."""
        rel, ref = self.relative.get(metric), self.reference(params, metric)
        if rel is None or ref is not None:    # a relative metric the paper gives directly, too
            return (ref.value if ref else None), ref
        a = self.reference(params, rel.metric)
        b = self.reference({**params, **dict(rel.to)}, rel.metric)
        if a and b and a.value is not None and b.value:
            return a.value / b.value, a
        return None, None


def _ratio(ours: Any, paper: Optional[float], ref: Optional[Reference]) -> str:
    if not isinstance(ours, (int, float)) or isinstance(ours, bool) or ref is None:
        return "-"
    if paper is not None:
        return f"{ours / paper:.3g}x" if paper else "-"
    if ref.low <= ours <= ref.high:
        return "in range"
    bound = ref.low if ours < ref.low else ref.high
    return f"{ours / bound:.3g}x of {'low' if ours < ref.low else 'high'}" if bound else "-"


def row_names(exp: Experiment) -> tuple[str, ...]:
    if exp.rows:
        return exp.rows
    params = [r.params for r in exp.runs]
    return tuple(k for k in (params[0] if params else {}) if len({repr(p[k]) for p in params}) > 1)


def table_rows(exp: Experiment, rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The report's table: header and cells (strings), one line per finished run in the experiment's order."""
    v = Values(exp, rows)
    names = row_names(exp)
    refs = {m for m in exp.measure if any(v.paper(r["inputs"], m)[1] for r in v.rows)}
    header = list(names)
    for m in exp.measure:
        header += [m] + (["paper", "ours/paper"] if m in refs else [])
    body = []
    for run in exp.runs:
        row = v.by_key.get(run.key)
        if row is None:
            continue
        cells = [_fmt(row["inputs"].get(n)) for n in names]
        for m in exp.measure:
            ours = v.ours(row, m)
            cells.append(_fmt(ours))
            if m in refs:
                paper, ref = v.paper(row["inputs"], m)
                cells += [_fmt(paper) if paper is not None else (ref.shown() if ref else "-"), _ratio(ours, paper, ref)]
        body.append(cells)
    return header, body


def _markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"] + \
           ["| " + " | ".join(cells) + " |" for cells in body]


def _sources(exp: Experiment) -> list[str]:
    seen = dict.fromkeys(f"{r.metric}: {r.source}" for r in exp.references)
    return [f"- {s}" for s in seen]


def _provenance(rows: list[dict]) -> str:
    if not rows:
        return "no runs finished yet"
    prov, host = rows[-1].get("flexrt", {}), rows[-1].get("host", {})
    commit = (prov.get("commit") or "unknown")[:12] + (" (dirty)" if prov.get("dirty") else "")
    return (f"flexrt {prov.get('version')} at {commit}; host {host.get('hostname')} ({host.get('cpus')} CPUs, "
            f"{host.get('platform')}); wall time of the runs {sum(r.get('wall_s', 0) for r in rows):.1f} s")


def write_report(exp: Experiment, rows: list[dict], out: Path) -> Path:
    """Write ``out/report.md`` and ``out/plots/*.png`` from the result rows; returns the report's path."""
    rows = [r for r in rows if r.get("experiment") == exp.name]
    keys = {r.key for r in exp.runs}
    latest = {r["key"]: r for r in rows if r["key"] in keys}   # a run rerun after failing: its last line
    mine = list(latest.values())
    ok = [r for r in mine if r["status"] == OK]
    lines = [f"# {exp.title}", "", f"Reproduces: {exp.reproduces}", "",
             f"Variant `{exp.variant}`, run kind `{exp.kind}`: {len(ok)} of {len(exp.runs)} runs finished, "
             f"{sum(r['status'] == 'skipped' for r in mine)} skipped, {sum(r['status'] == 'failed' for r in mine)} "
             f"failed. {_provenance(mine)}.", ""]
    header, body = table_rows(exp, mine)
    lines += _markdown_table(header, body) if body else ["(no finished runs)"]
    if exp.references:
        lines += ["", "The paper's numbers:", ""] + _sources(exp)
    others = [r for r in mine if r["status"] != OK]
    if others:
        lines += ["", "Runs not in the table:", ""]
        lines += [f"- {r['status']}: {_fmt(r['inputs'])}: {r['reason']}" for r in others]
    from flexrt.experiments.plots import write_plots
    for path in write_plots(exp, Values(exp, mine), out / "plots"):
        lines += ["", f"![{path.stem}](plots/{path.name})"]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report
