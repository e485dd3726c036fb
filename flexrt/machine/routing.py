"""Routes over a machine's links: fewest hops, then the highest bottleneck bandwidth, then the
lexicographically smallest sequence of link ids.

For one destination, a backward BFS gives every endpoint's hop count to it and, in BFS order, the
best bottleneck of a shortest path from there (``best[v] = max over next hops w of min(bw, best[w])``).
A route is then a greedy walk: from the source, take the smallest link id that stays on a shortest
path whose bottleneck can still reach the best one. The walk is exact because every candidate has
the same length.

Machines built node by node (every node's links are node 0's, renumbered by ``node * links per
node``, nodes joined only through the network endpoint) route on node 0's links alone: a transfer
between nodes crosses ``net`` exactly once, so it is a shortest path to ``net`` in the source node
followed by one from ``net`` in the destination node, and each half keeps its id order under the
renumbering. This keeps routes on a 64-node machine as cheap as on one node. Other machines route
on the whole graph.

Entry point: :class:`Router` (used by ``Machine.route``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flexrt.errors import MachineSpecError

if TYPE_CHECKING:
    from flexrt.machine.machine import Link, Machine

NET = "net"
Adjacency = dict[str, list[tuple[int, str]]]


class _Graph:
    """Directional links over named endpoints, with per-target shortest-path tables."""

    def __init__(self, links: Sequence[Link]) -> None:
        self.bandwidth = [link.bandwidth for link in links]
        self.out: Adjacency = {}
        self.into: Adjacency = {}
        for i, link in enumerate(links):  # by position: the caller's ids may be offset
            self.out.setdefault(link.src, []).append((i, link.dst))
            self.into.setdefault(link.dst, []).append((i, link.src))
        self._towards: dict[str, tuple[dict[str, int], dict[str, float]]] = {}

    def towards(self, target: str) -> tuple[dict[str, int], dict[str, float]]:
        """Per endpoint that reaches ``target``: hops to it and the best bottleneck of a shortest path."""
        hit = self._towards.get(target)
        if hit is not None:
            return hit
        dist = {target: 0}
        order = [target]
        queue = deque([target])
        while queue:
            v = queue.popleft()
            for _, u in self.into.get(v, ()):
                if u not in dist:
                    dist[u] = dist[v] + 1
                    order.append(u)
                    queue.append(u)
        best = {target: float("inf")}
        for v in order[1:]:  # BFS order: each next hop on a shortest path is already done
            d = dist[v] - 1
            best[v] = max(min(self.bandwidth[i], best[w]) for i, w in self.out[v] if dist.get(w) == d)
        self._towards[target] = (dist, best)
        return dist, best

    def walk(self, src: str, target: str, bottleneck: float) -> list[int]:
        """The smallest-id shortest path from ``src`` to ``target`` whose links all carry ``bottleneck``."""
        dist, best = self.towards(target)
        path, v = [], src
        while v != target:
            d = dist[v] - 1
            for i, w in self.out[v]:
                if dist.get(w) == d and self.bandwidth[i] >= bottleneck and best[w] >= bottleneck:
                    path.append(i)
                    v = w
                    break
        return path

    def reach(self, start: str, forward: bool) -> set[str]:
        adj = self.out if forward else self.into
        seen, stack = {start}, [start]
        while stack:
            for _, w in adj.get(stack.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen


def _node_prefix(endpoint: str) -> str | None:
    return None if endpoint == NET else endpoint.partition(".")[0]


def _per_node_links(machine: Machine) -> int | None:
    """Links per node when the machine is node 0 repeated (see the module docstring), else None."""
    n, links = machine.num_nodes, machine.links
    if n == 1 or len(links) % n:
        return None
    per = len(links) // n
    for t in range(per):
        base = links[t]
        if {_node_prefix(base.src), _node_prefix(base.dst)} - {None} != {"n0"}:
            return None
        for k in range(1, n):
            link = links[k * per + t]
            ends = tuple(e if e == NET else f"n{k}." + e.partition(".")[2] for e in (base.src, base.dst))
            if (link.type, link.bandwidth, link.latency_s, link.src, link.dst) != (
                    base.type, base.bandwidth, base.latency_s, *ends):
                return None
    return per


class Router:
    """Routes between the compute devices of one machine; cached per (src, dst).

    ``by_node=False`` routes on the whole graph even where node 0's links would do (the reference
    the tests compare the per-node routes with).
    """

    def __init__(self, machine: Machine, by_node: bool = True) -> None:
        self.machine = machine
        self.per_node = _per_node_links(machine) if by_node else None
        scope = machine.links if self.per_node is None else machine.links[:self.per_node]
        self.graph = _Graph(scope)
        self.routes: dict[tuple[int, int], tuple[int, ...]] = {}

    def _template(self, device: int) -> str:
        """The device's endpoint in the routing graph (node 0's copy when routing per node)."""
        d = self.machine.devices[device]
        return d.endpoint if self.per_node is None else f"n0.{d.spec.kind}{d.local}"

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        key = (src, dst)
        hit = self.routes.get(key)
        if hit is not None:
            return hit
        if src == dst:
            path: tuple[int, ...] = ()
        else:
            s, d = self._template(src), self._template(dst)
            g = self.graph
            if self.per_node is None:
                dist, best = g.towards(d)
                if s not in dist:  # Machine construction rejects this: a bug if it happens
                    raise MachineSpecError(f"machine {self.machine.name!r}: no route from {s} to {d}")
                path = tuple(g.walk(s, d, best[s]))
            else:
                a, b = self.machine.devices[src].node, self.machine.devices[dst].node
                if a == b:
                    path = tuple(a * self.per_node + i for i in g.walk(s, d, g.towards(d)[1][s]))
                else:
                    bottleneck = min(g.towards(NET)[1][s], g.towards(d)[1][NET])
                    path = tuple([a * self.per_node + i for i in g.walk(s, NET, bottleneck)]
                                 + [b * self.per_node + i for i in g.walk(NET, d, bottleneck)])
        self.routes[key] = path
        return path


def check_connected(machine: Machine) -> None:
    """Raise a MachineSpecError naming two devices when some device cannot reach another.

    Device 0 reaching every device and every device reaching device 0 is enough.
    """
    devices = machine.devices
    if len(devices) == 1:
        return
    ends = {e for link in machine.links for e in (link.src, link.dst)}
    for d in devices:
        if d.endpoint not in ends:
            raise MachineSpecError(f"machine {machine.name!r}: device {d} has no links, so it is not connected "
                                   f"to {devices[0] if d.id else devices[1]}")
    graph = _Graph(machine.links)
    first = devices[0]
    for forward in (True, False):
        seen = graph.reach(first.endpoint, forward)
        for d in devices[1:]:
            if d.endpoint not in seen:
                a, b = (first, d) if forward else (d, first)
                raise MachineSpecError(f"machine {machine.name!r}: devices {a} and {b} are not connected "
                                       f"(no route from {a.endpoint} to {b.endpoint})")
