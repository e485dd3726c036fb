"""Draw a strategy as FlexFlow's Figs. 12-13 do: one row per operator, its pieces coloured by device.

Each compute operator of the strategy's PCG is a row (topological order, first at the top); the
row is cut into one cell per piece (row-major over the operator's parallel axes), each cell
filled with its device's colour and labelled with the device id; the row's label gives the
operator's name and its degrees (``sample=4 out=2``). A legend maps colours to devices. Drawn
with matplotlib's Agg backend, so no display is needed.

Entry point: ``plot_strategy``.

Example:
    >>> layout = plot_strategy(strategy, machine, "strategy.png")   # doctest: +SKIP
    >>> layout.rows[0].devices                                        # doctest: +SKIP
    (0, 1, 2, 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

from flexrt.strategy import Strategy, axis_degrees, node_axes
from matplotlib import pyplot as plt
from matplotlib.patches import Patch, Rectangle

from flexrt.machine import Machine
from flexrt.machine.views import view_devices

MAX_LABELLED_PIECES = 32  # beyond this a row's cells are too narrow for their device ids


@dataclass(frozen=True, slots=True)
class PlotRow:
    """One operator's row: its name, its degrees (axis name -> degree, degree-1 axes left out), the
    device of each piece and the colour each piece was drawn in (RGBA)."""

    name: str
    degrees: tuple[tuple[str, int], ...]
    devices: tuple[int, ...]
    colors: tuple[tuple[float, float, float, float], ...]


@dataclass(frozen=True, slots=True)
class PlotLayout:
    """What ``plot_strategy`` drew: the rows top to bottom and the colour of every device."""

    rows: tuple[PlotRow, ...]
    device_colors: dict[int, tuple[float, float, float, float]]


def device_colors(num_devices: int) -> dict[int, tuple[float, float, float, float]]:
    """One distinct colour per device: tab10/tab20 where they suffice, else evenly spaced hues."""
    if num_devices <= 10:
        cmap, n = plt.get_cmap("tab10"), 10
    elif num_devices <= 20:
        cmap, n = plt.get_cmap("tab20"), 20
    else:
        cmap, n = plt.get_cmap("hsv"), num_devices + 1
    return {d: tuple(float(c) for c in cmap(d / n if n > 20 else d)) for d in range(num_devices)}


def _rows(strategy: Strategy, machine: Machine, colors) -> tuple[PlotRow, ...]:
    pcg = strategy.pcg
    rows = []
    for nid in pcg.topological_order():
        if nid not in strategy.views:
            continue
        node = pcg.node(nid)
        axes, degree = node_axes(pcg, node)
        devices = view_devices(machine, strategy.views[nid], axis_degrees(pcg, node))
        rows.append(PlotRow(node.name, tuple((a.name, degree[a.name]) for a in axes if degree[a.name] > 1),
                            tuple(devices), tuple(colors[d] for d in devices)))
    return tuple(rows)


def plot_strategy(strategy: Strategy, machine: Machine, path: str, title: str | None = None) -> PlotLayout:
    """Write a PNG of ``strategy`` on ``machine`` to ``path`` and return what was drawn.

    Args:
        strategy: the strategy (its parallel PCG and a view per compute operator).
        machine: the machine the views refer to.
        path: the PNG file to write.
        title: the figure's title (default: the machine's name and device count).
    """
    colors = device_colors(machine.num_devices)
    rows = _rows(strategy, machine, colors)
    height = max(2.0, 0.32 * len(rows) + 1.5)
    fig, ax = plt.subplots(figsize=(11, height))
    try:
        for y, row in enumerate(rows):
            width = 1.0 / len(row.devices)
            for k, (device, color) in enumerate(zip(row.devices, row.colors)):
                ax.add_patch(Rectangle((k * width, -y - 0.4), width, 0.8, facecolor=color, edgecolor="white",
                                       linewidth=0.5))
                if len(row.devices) <= MAX_LABELLED_PIECES:
                    ax.text((k + 0.5) * width, -y, str(device), ha="center", va="center", fontsize=6)
            degrees = " ".join(f"{a}={d}" for a, d in row.degrees) or "1 device"
            ax.text(1.01, -y, degrees, ha="left", va="center", fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_ylim(-len(rows) + 0.4, 0.6)
        ax.set_yticks([-y for y in range(len(rows))])
        ax.set_yticklabels([r.name for r in rows], fontsize=7)
        ax.set_xticks([])
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
        used = sorted({d for r in rows for d in r.devices})
        ax.legend(handles=[Patch(facecolor=colors[d], label=f"device {d}") for d in used], loc="upper left",
                  bbox_to_anchor=(1.12, 1.0), fontsize=7, title="devices", title_fontsize=8)
        ax.set_title(title or f"{machine.name}: {machine.num_devices} devices")
        fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return PlotLayout(rows, colors)
