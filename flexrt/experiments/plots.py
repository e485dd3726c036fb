"""PNG plots of an experiment's results (matplotlib with the Agg backend: no display needed).

- ``bar``: ``y`` over the values of input ``x``, one bar per value of ``group``; the paper's values
  (where it gives one) as black diamonds, its ranges as black bars.
- ``line``: the same as lines.
- ``convergence``: every run's convergence curves, best cost (ms) over search seconds.
- ``scatter``: metric ``y`` against metric ``x`` (by ``group``), with y = x and +-30% (FlexFlow Fig. 10);
  a run whose two metrics are lists gives a point per item.
- ``cdf``: the empirical distribution of a list-valued metric ``y``, one line per run (DisCo Fig. 9).

Entry point: :func:`write_plots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexrt.experiments.schema import Experiment, Plot


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _key(value: Any) -> str:
    return str(value)


def _grouped(values, plot: Plot) -> dict[str, list[tuple[str, dict]]]:
    groups: dict[str, list[tuple[str, dict]]] = {}
    for row in values.rows:
        g = _key(row["inputs"].get(plot.group)) if plot.group else plot.y
        groups.setdefault(g, []).append((_key(row["inputs"].get(plot.x)), row))
    return groups


def _bars(ax, values, plot: Plot, lines: bool) -> None:
    groups = _grouped(values, plot)
    xs = list(dict.fromkeys(x for members in groups.values() for x, _ in members))
    width = 0.8 / max(1, len(groups))
    for gi, (g, members) in enumerate(groups.items()):
        points = {x: values.ours(row, plot.y) for x, row in members}
        pos = [xs.index(x) + (0 if lines else (gi - (len(groups) - 1) / 2) * width) for x in points]
        ys = [y if isinstance(y, (int, float)) else float("nan") for y in points.values()]
        label = f"{plot.group}={g}" if plot.group else "ours"
        if lines:
            ax.plot(pos, ys, marker="o", label=label)
        else:
            ax.bar(pos, ys, width=width, label=label)
        for p, (x, row) in zip(pos, members):
            paper, ref = values.paper(row["inputs"], plot.y)
            if paper is not None:
                ax.plot([p], [paper], marker="D", color="black", linestyle="none")
            elif ref is not None:
                ax.vlines(p, ref.low, ref.high, color="black", linewidth=3)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=30, ha="right")
    ax.set_xlabel(plot.x)
    ax.set_ylabel(plot.y + "  (black: the paper)")


def _convergence(ax, values, plot: Plot) -> None:
    from flexrt.experiments.report import row_names
    names = row_names(values.exp)
    for row in values.rows:
        label = " ".join(f"{n}={row['inputs'].get(n)}" for n in names)
        for curve, points in (row.get("convergence") or {}).items():
            if points:
                xs, ys = zip(*points)
                ax.step(xs, ys, where="post", label=f"{label} {curve}".strip())
    ax.set_xlabel("search time (s)")
    ax.set_ylabel("best simulated iteration time (ms)")


def _scatter(ax, values, plot: Plot) -> None:
    groups: dict[str, list[tuple[float, float]]] = {}
    for row in values.rows:
        x, y = values.ours(row, plot.x), values.ours(row, plot.y)
        pairs = zip(x, y) if isinstance(x, list) and isinstance(y, list) else [(x, y)]   # a run's list of points
        group = groups.setdefault(_key(row["inputs"].get(plot.group)) if plot.group else "runs", [])
        group += [(a, b) for a, b in pairs if isinstance(a, (int, float)) and isinstance(b, (int, float))]
    top = max((max(p) for pts in groups.values() for p in pts), default=1.0)
    for g, pts in groups.items():
        if pts:
            ax.scatter(*zip(*pts), label=g)
    ax.plot([0, top], [0, top], color="black", linewidth=1, label="y = x")
    for f in (0.7, 1.3):
        ax.plot([0, top], [0, top * f], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel(plot.x)
    ax.set_ylabel(plot.y)


def _cdf(ax, values, plot: Plot) -> None:
    from flexrt.experiments.report import row_names
    names = row_names(values.exp)
    for row in values.rows:
        ys = values.ours(row, plot.y)
        if isinstance(ys, list) and ys:
            xs = sorted(ys)
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                    label=" ".join(f"{n}={row['inputs'].get(n)}" for n in names) or "runs")
    ax.set_xlabel(plot.y)
    ax.set_ylabel("share of samples at or below")


def write_plots(exp: Experiment, values, folder: Path) -> list[Path]:
    """Draw every plot of ``exp`` from ``values`` (:class:`~flexrt.experiments.report.Values`) into ``folder``."""
    if not exp.plots or not values.rows:
        return []
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, plot in enumerate(exp.plots):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        if plot.type in ("bar", "line"):
            _bars(ax, values, plot, plot.type == "line")
        elif plot.type == "convergence":
            _convergence(ax, values, plot)
        elif plot.type == "cdf":
            _cdf(ax, values, plot)
        else:
            _scatter(ax, values, plot)
        if plot.log_y:
            ax.set_yscale("log")
        ax.set_title(plot.title or exp.title, fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = folder / f"{i + 1}_{plot.type}_{plot.y or 'curves'}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
