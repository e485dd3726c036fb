"""Where a pipeline's stages are cut: contiguous ranges of the compute operators in graph order that
minimize the busiest stage's time, counting what crosses each cut.

A stage costs the larger of its work (its operators' seconds in an iteration on its block) and its
communication: the bytes of every tensor that crosses one of its two cuts (produced before the cut,
read after it; once, however many operators read it, as the simulator moves it), activations out
and their gradients back, at the seconds per byte of the links between two consecutive device
blocks (``seconds_per_byte``). A stage's transfers overlap its compute in a pipeline's steady
state, so the larger of the two is its time, as PipeDream's planner counts it. Cutting by work alone
puts cuts wherever the work balances, which may be inside a transformer layer (where the feed-
forward's four-times-wider hidden tensor would cross) or after a block whose output is read by the
next two (a residual and a normalization). The partition is exact: dynamic programming over the
cut positions, vectorized per stage.

Entry points: ``crossing_bytes``, ``seconds_per_byte``, ``cut_stages``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from flexrt.errors import StrategyError
from flexrt.ir.op_type import OpType
from flexrt.machine import Machine


def crossing_bytes(wiring) -> np.ndarray:
    """Per cut position j (0 .. number of operators; cut j falls before operator j in graph order),
    the bytes of the compute operators' outputs produced before it and read at or after it."""
    pos = {name: k for k, name in enumerate(wiring.ops)}
    diff = np.zeros(len(wiring.ops) + 2)
    last: dict[tuple[str, int], int] = defaultdict(int)
    for c in wiring.ops:
        for i in range(len(wiring.nodes[c].inputs)):
            p = wiring.producer[(c, i)]
            if p.op_type not in (OpType.INPUT, OpType.WEIGHT):
                last[(p.name, p.index)] = max(last[(p.name, p.index)], pos[c])
    for (name, k), reader in last.items():
        diff[pos[name] + 1] += wiring.output_full[name][k].size_bytes
        diff[reader + 1] -= wiring.output_full[name][k].size_bytes
    return np.cumsum(diff)[:len(wiring.ops) + 1]


def seconds_per_byte(machine: Machine, stages: int) -> float:
    """Seconds per byte of a tensor spread over one block of ``n / stages`` devices moving to the
    next block: device k of a block sends its share to device k of the next over its route, and the
    link carrying the most shares for its bandwidth sets the time (block 0 to block 1; blocks alike)."""
    width = machine.num_devices // stages
    if stages < 2:
        return 0.0
    load: dict[int, int] = defaultdict(int)
    for d in range(width):
        for link in machine.route(d, d + width):
            load[link] += 1
    return max((n / (width * machine.links[link].bandwidth) for link, n in load.items()), default=0.0)


def cut_stages(ops: Sequence[str], work: Sequence[float], crossing: np.ndarray, count: int,
               per_byte: float) -> dict[str, int]:
    """``ops`` (graph order) cut into ``count`` contiguous non-empty stages minimizing the largest
    stage cost, max(its ``work`` summed, bytes crossing its two cuts times ``per_byte``), and among
    those the sum of squared stage costs (the most even). Exact: no stage of an optimal partition
    costs more than the stages of equal work do, so only stages within that bound are tried
    (``_band``): about operators^2 steps in all, not stages x operators^2."""
    n = len(ops)
    if n < count:
        raise StrategyError(f"{count} pipeline stages need at least {count} operators; the model has {n}")
    total = np.concatenate([[0.0], np.cumsum(np.asarray(work, dtype=float))])
    comm = np.asarray(crossing, dtype=float) * per_byte
    starts, cost = _band(total, comm, count)
    bound, _ = _partition(starts, cost, count, np.maximum)
    even = np.where(cost <= bound * (1 + 1e-9), cost * cost, np.inf)
    _, choice = _partition(starts, even, count, np.add)
    stage_of, j = {}, n
    for k in range(count - 1, -1, -1):
        i = int(choice[k - 1][j]) if k > 0 else 0
        for name in ops[i:j]:
            stage_of[name] = k
        j = i
    return stage_of


def _stage_cost(total: np.ndarray, comm: np.ndarray, i, j):
    """Operators i .. j-1 as one stage."""
    return np.maximum(total[j] - total[i], comm[i] + comm[j])


def _band(total: np.ndarray, comm: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, cost) of every stage no costlier than the largest stage of the equal-work cuts, as
    matrices indexed [stage end j, t]: the stage starts at ``start[j, t]`` (-1 and cost inf where
    there is none)."""
    n = len(total) - 1
    cuts = np.searchsorted(total, total[-1] * np.arange(1, count) / count)
    for k in range(count - 1):                     # each stage at least one operator
        lo = cuts[k - 1] + 1 if k else 1
        cuts[k] = min(max(cuts[k], lo), n - (count - 1 - k))
    edges = np.concatenate([[0], cuts, [n]])
    limit = float(_stage_cost(total, comm, edges[:-1], edges[1:]).max())
    ends = np.arange(n + 1)
    first = np.searchsorted(total, total - limit * (1 + 1e-9), side="left")
    width = max(int((ends - first).max()), 1)
    start = ends[:, None] - width + np.arange(width)[None, :]
    ok = (start >= first[:, None]) & (start >= 0) & (start < ends[:, None])
    start = np.where(ok, start, -1)
    cost = np.where(ok, _stage_cost(total, comm, np.maximum(start, 0), ends[:, None]), np.inf)
    return start, cost


def _partition(start: np.ndarray, cost: np.ndarray, count: int, combine) -> tuple[float, list]:
    """The least ``combine``-d stage cost of ``count`` stages ending at the last operator, and per
    stage after the first the best start for each end (``_band``'s matrices)."""
    rows = np.arange(start.shape[0])
    best = np.where(start == 0, cost, np.inf).min(axis=1)     # one stage from operator 0
    choice = []
    for _ in range(1, count):
        prev = np.where(start >= 0, best[np.maximum(start, 0)], np.inf)
        cand = combine(prev, cost)
        arg = np.argmin(cand, axis=1)
        best = cand[rows, arg]
        choice.append(start[rows, arg])
    return float(best[-1]), choice
