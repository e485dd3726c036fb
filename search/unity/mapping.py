"""Machine-mapping selection by dynamic programming over series-parallel splits (Unity §5.2).

A compute graph (a PCG without parallelization operators; they follow from the mapping, see
``strategy.apply_configs``) is decomposed recursively:

- **sequence split** at the *split nodes* of a subgraph S between boundary operators ``in`` and
  ``out``: every other node of S is an ancestor or a descendant of the split node n, and no edge
  skips it (from an ancestor, or ``in``, to a descendant, or ``out``). The split nodes of S are
  totally ordered b1 < ... < bm and cut S into segments B0, b1, B1, ..., bm, Bm; the DP walks this
  chain: each segment is solved for every pair of configurations of its two boundary operators,
  and the chain is a min-plus product of those matrices;
- **parallel split** of S into its weakly connected components: the two sides run one after the
  other on all of S's devices (costs add), or side by side on a split of them (the maximum), for
  every split of the resource *quantity* (devices ``start .. start+r-1`` and the rest; whole
  nodes when S spans several), never enumerating device subsets. A split is dropped as soon as it
  cannot beat the best so far at any pair of boundary configurations (exact: side by side costs at
  least either side, and a side at least its costliest node's cheapest configuration), before its
  sides are solved where those node bounds show it, else after the first side. With more than two
  components, the first is one of them and the rest the others, recursively; which one is peeled
  first decides which groupings of branches onto devices the DP can reach, and no one order is
  best. A solve peels them in the graph's topological order and, where a parallel split occurs,
  again by work, cheapest first and costliest first (each node's cheapest time on the block,
  summed), and keeps the cheapest solution (``peel``, ``PEEL_ORDERS``). DLRM at 48 summit GPUs:
  3.07 ms estimated (3.19 simulated) peeled in graph order, 2.53 (2.47) cheapest first; the
  graph order alone had made a trivial rewrite (a one-id bag as an embedding and a sum, which
  renumbers four branches) look like a 1.2x gain of joint optimization. Subproblems without a
  parallel split are shared by every order;
- **packing** (``packing=True``, the default): sides that run one after the other on the same
  block may each use only some of its devices (a configuration's view starts at the block's first
  device; a side that is itself split side by side spreads further), and the simulator interleaves
  independent branches on whatever device is free. Such a pair costs the slower side or the busiest
  device's forward time plus the busiest's backward time (every piece's compute, the updates, and
  each edge's transfers on the devices that send and receive them), whichever is more, when that
  is less than one after the other. Side by side on a split of the devices, a pair likewise costs
  at least the busiest device's forward plus the busiest's backward (one side's forward-heavy
  device, the other's backward-heavy one). DLRM's 26 embeddings on 6 GPUs: estimate / simulation
  1.20 -> 1.02;
- **contention** (``contention=True``): every solution can give, per pair of boundary
  configurations, the seconds its transfers and gradient rings keep each shared link busy
  (``LocalCosts.shared``) in the forward and in the backward pass, at the configurations it picks,
  and how long each device works (``LocalCosts.load_width``: links, then devices; packing's).
  A parallel split costs at least the busiest link's forward time plus the busiest's backward time
  of both sides' loads added (side-by-side branches send through the same NICs and socket bus),
  and each edge between boundaries at least its own (a scatter through one NIC). Loads are built
  only where a parallel split asks, and kept on the solution (float32);
- **overlap** (``LocalCosts(overlap=True)``): a cost is also kept as forward, backward (compute
  and transfers), synchronization and whole (``_Parts``), and a chain composes as a two-machine
  flow shop (the backward of later operators first, each gradient AllReduce queued on the links
  after its own backward and the ones before it), exact for a chain and with the costs' rings as
  the simulator's (every step's latency, the members' sums on the devices). The min over a
  boundary's configurations then keeps the cheapest whole, which is greedy (a prefix with more
  synchronization to hide may have been the better one); side by side (or packed), each part is
  the slower side's, and at least the busiest resource's: forward any, backward a device's, syncs a
  shared link's. Off (the default costs), every cost adds (with ``packing=False`` exactly as the
  tests enumerate);
- a connected subgraph with neither split (not series-parallel) falls back to a greedy
  assignment in topological order (documented approximation; none of the example models needs it).

Every result is a matrix over (configurations of ``in``) x (configurations of ``out``) holding the
cheapest cost of S, and can rebuild the configurations that reach it. Results are memoized by the
subgraph's structure (operator signatures, internal and boundary edges, devices), so a candidate
made by a substitution reuses every subproblem it shares with earlier candidates (the cache of
§5.2); ``MappingDP(cache=False)`` clears it per call, and it drops its least recently used entries
while they hold more than ``memo_limit`` bytes (``memo.Memo``: a tenth of the machine's memory by
default, ``$FLEXRT_SEARCH_MEMORY_MB``).

Entry points: ``MappingDP``, ``Mapping``, ``series_split_nodes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from flexrt.search.unity.costs import Block, LocalCosts
from flexrt.search.unity.memo import Memo
from flexrt.search.unity.reach import closure
from flexrt.strategy import OpConfig, is_compute
from flexrt.strategy.config import repeated_operands

from flexrt.errors import ConfigError
from flexrt.ir.pcg import PCG
from flexrt.machine import Machine


@dataclass
class Mapping:
    """The DP's answer for a graph: its estimated cost and a configuration per compute node;
    ``others``: where the graph has a parallel split, the other peel orders' answers by order (their
    estimates are higher, but an estimate may misjudge: Unity simulates them too)."""

    cost_s: float
    configs: dict[int, OpConfig]
    others: dict[str, "Mapping"] = field(default_factory=dict)


class _Graph:
    """Compute nodes of a PCG in topological order with ancestor/descendant bit sets."""

    def __init__(self, pcg: PCG, costs: Optional[LocalCosts] = None) -> None:
        self.pcg = pcg
        self.order = [nid for nid in pcg.topological_order() if is_compute(pcg.node(nid))]
        self.pos = {nid: i for i, nid in enumerate(self.order)}
        self.node = [pcg.node(nid) for nid in self.order]
        n = len(self.order)
        self.edges_in: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # (producer pos, out k, operand i)
        self.succ = [0] * n
        self.pred = [0] * n
        for v, node in enumerate(self.node):
            repeated = repeated_operands(pcg, node)    # read once (as the simulator's lowering moves them)
            for i, ref in enumerate(node.inputs):
                u = self.pos.get(ref.node)
                if u is not None and i not in repeated:
                    self.edges_in[v].append((u, ref.index, i))
                    self.succ[u] |= 1 << v
                    self.pred[v] |= 1 << u
        self.anc, self.desc = closure(self.pred, self.succ)
        self.sig = [costs.sig_id(pcg, node) for node in self.node] if costs is not None else []


def _members(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def series_split_nodes(pcg: PCG) -> list[int]:
    """The compute nodes at which the whole graph splits in sequence (topological order)."""
    g = _Graph(pcg)
    full = (1 << len(g.order)) - 1
    return [g.order[p] for p in _split_nodes(g, full, None, None)]


def _split_nodes(g: _Graph, S: int, inn, out) -> list[int]:
    found = []
    in_succ = g.succ[inn[0]] if inn is not None else 0
    out_pred = g.pred[out[0]] if out is not None else 0
    for n in _members(S):
        A, D = g.anc[n] & S, g.desc[n] & S
        if A | D | (1 << n) != S:
            continue
        if in_succ & D or A & out_pred:
            continue
        if any(g.succ[x] & D for x in _members(A)):
            continue
        found.append(n)
    return found


class _Parts:
    """A cost as the overlap model composes it (module doc): ``Fw`` forward seconds, ``P`` backward
    seconds (compute and transfers: the critical path), ``Q`` gradient synchronization seconds, and
    ``M`` the whole (forward, then the backward with the syncs queued behind it: M - Fw is the
    backward's makespan). Arrays of one shape (or broadcastable)."""

    __slots__ = ("Fw", "P", "Q", "M")

    def __init__(self, Fw, P, Q, M) -> None:
        self.Fw, self.P, self.Q, self.M = Fw, P, Q, M

    @classmethod
    def plain(cls, M) -> "_Parts":
        """A cost that hides nothing and nothing hides behind: all critical path."""
        return cls(np.zeros_like(M), M, np.zeros_like(M), M)

    def then(self, later: "_Parts") -> "_Parts":
        """``self``'s operators, then ``later``'s (whose backward runs first): two-machine flow shop,
        the compute one after the other and the syncs queued in backward order, each after its own
        backward (exact for chains: makespan = max over jobs of compute to it + syncs from it)."""
        with np.errstate(invalid="ignore"):  # an impossible side (infinite cost) stays impossible
            M = self.Fw + later.Fw + np.maximum(later.P + (self.M - self.Fw), (later.M - later.Fw) + self.Q)
        M = np.where(np.isnan(M), np.inf, M)
        return _Parts(self.Fw + later.Fw, self.P + later.P, self.Q + later.Q, M)

    def take(self, mask, other: "_Parts") -> None:
        """Where ``mask``, take ``other``'s values."""
        for name in self.__slots__:
            getattr(self, name)[mask] = getattr(other, name)[mask]


class _Sol:
    """A solved subproblem: ``M[a, b]``, ``pick(a, b)`` -> configurations of its nodes in order, and
    ``loads(costs)`` -> (a, b, shared link) the seconds its communication keeps each shared link busy
    at the configurations ``pick`` gives (built when a parallel split first asks, then kept);
    ``cost`` its cost as ``_Parts`` (the overlap model; without it, ``M`` all critical path)."""

    branched = False    # whether a parallel split is inside: its solution depends on the peel order

    def __init__(self, M: np.ndarray, cost: Optional[_Parts] = None) -> None:
        self.M = M
        self._cost = cost
        self._loads: Optional[np.ndarray] = None
        self.meter = None      # (memo, key) where it is memoized: its loads, once built, count there

    @property
    def cost(self) -> _Parts:
        if self._cost is None:
            self._cost = _Parts.plain(self.M)
        return self._cost

    def pick(self, a: int, b: int) -> list[OpConfig]:
        raise NotImplementedError

    def loads(self, costs: LocalCosts) -> np.ndarray:
        """Its link loads, kept (and counted) while it is in the memo, built afresh when it is not."""
        if self._loads is not None:
            return self._loads
        loads = self._build_loads(costs)
        if self.meter is not None:
            self._loads = loads
            self.meter[0].grow(self.meter[1], loads.nbytes)
        return loads

    def evicted(self) -> None:
        """Dropped from the memo (``memo.Memo``): a chain may still hold it, so it keeps no loads."""
        self.meter, self._loads = None, None

    def _build_loads(self, costs: LocalCosts) -> np.ndarray:
        raise NotImplementedError


class _Empty(_Sol):
    """No operators: no cost and no loads, each a read-only zero broadcast over every (a, b). A
    chain holds one per pair of adjacent boundaries, outside the memo's count; materialized, their
    loads held 4.3 of one Inception-v3 solve's 7 GiB at 48 GPUs."""

    def __init__(self, na: int, nb: int) -> None:
        zero = np.broadcast_to(_ZERO, (na, nb))
        super().__init__(zero, _Parts(zero, zero, zero, zero))

    def pick(self, a, b):
        return []

    def _build_loads(self, costs):
        return np.broadcast_to(_ZERO32, self.M.shape + (2 * costs.load_width,))


_ZERO, _ZERO32 = np.zeros(()), np.zeros((), dtype=np.float32)   # what every _Empty broadcasts


class _Edges:
    """The edges from boundary ``u`` to boundary ``v`` (operand pairs ``es``), for their link loads."""

    def __init__(self, pcg: PCG, un, vn, es: list, bu: Block, bv: Block) -> None:
        self.pcg, self.un, self.vn, self.es, self.bu, self.bv = pcg, un, vn, es, bu, bv

    def loads(self, costs: LocalCosts, cu: np.ndarray, cv: np.ndarray, into: Optional[np.ndarray] = None):
        """Loads at configuration indices ``cu`` of u and ``cv`` of v (arrays of one shape), added to
        ``into`` (float32, returned) when given. One edge is added in place; several are summed
        first, so the float32 sums are those of adding what is returned."""
        if into is not None and len(self.es) == 1:
            return self._add(costs, *self.es[0], cu, cv, into)
        sums = np.zeros(np.shape(cu) + (2 * costs.load_width,), dtype=np.float32)
        for k, i in self.es:
            self._add(costs, k, i, cu, cv, sums)
        if into is None:
            return sums
        into += sums
        return into

    def _add(self, costs: LocalCosts, k: int, i: int, cu, cv, into: np.ndarray) -> np.ndarray:
        iu, iv, D = costs.edge_loads(self.pcg, self.un, k, self.vn, i, self.bu, self.bv)
        costs.add_link_loads(into, D[iu[cu], iv[cv]])
        return costs.add_edge_device_loads(into, self.pcg, self.un, k, self.vn, i, self.bu, self.bv, cu, cv)


class _Chain(_Sol):
    """A chain b1 < ... < bm: ``parts[j]`` = (segment j's solution, its nodes' indices in S, the
    index of b_{j+1} in S or None, b_{j+1}'s configurations); ``steps[j]`` maps (a, c_{j+1}) to
    the best c_j, ``finals`` (a, b) to the best c_m."""

    def __init__(self, M, parts, steps, finals, terms, cost=None):
        super().__init__(M, cost)
        self.parts, self.steps, self.finals = parts, steps, finals
        self.branched = _branched(parts)
        self.terms = terms      # per part: (its _Edges between the boundaries or None, (pcg, b_{j+1}, block) or None)

    def _choices(self) -> list[np.ndarray]:
        """Per (a, b), the configuration index of every boundary: a, c_1 .. c_m, b, as (na, nb) arrays."""
        na, nb = self.M.shape
        a = np.broadcast_to(np.arange(na)[:, None], (na, nb))
        m = len(self.parts) - 1
        inner = [None] * m
        if m:
            c = self.finals
            for j in reversed(range(m)):
                inner[j] = c
                if j > 0:
                    c = np.take_along_axis(self.steps[j], c, axis=1)
        return [a] + inner + [np.broadcast_to(np.arange(nb)[None, :], (na, nb))]

    def _build_loads(self, costs):
        ch = self._choices()
        out = np.zeros(self.M.shape + (2 * costs.load_width,), dtype=np.float32)
        for j, ((seg, _, _, _), (edges, node)) in enumerate(zip(self.parts, self.terms)):
            if not isinstance(seg, _Empty):
                out += seg.loads(costs)[ch[j], ch[j + 1]]
            if edges is not None:
                edges.loads(costs, ch[j], ch[j + 1], out)
            if node is not None:
                out += costs.node_loads(*node)[ch[j + 1]]
        return out

    def pick(self, a, b):
        m = len(self.parts) - 1
        choice = [0] * m
        if m:
            c = int(self.finals[a, b])
            for j in reversed(range(m)):
                choice[j] = c
                if j > 0:
                    c = int(self.steps[j][a, c])
        out: list[tuple[int, OpConfig]] = []
        prev = a
        for j, (seg, seg_local, node_local, node_cfgs) in enumerate(self.parts):
            nxt = choice[j] if j < m else b
            out += list(zip(seg_local, seg.pick(prev, nxt)))
            if node_local is not None:
                out.append((node_local, node_cfgs[nxt]))
            prev = nxt
        out.sort(key=lambda t: t[0])
        return [c for _, c in out]


class _Parallel(_Sol):
    branched = True

    def __init__(self, M, choice, options, pos1, pos2, loads=None, cost=None):
        super().__init__(M, cost)
        self.choice, self.options, self.pos1, self.pos2 = choice, options, pos1, pos2
        self._loads = loads

    def _build_loads(self, costs):
        out = np.zeros(self.M.shape + (2 * costs.load_width,), dtype=np.float32)
        for o, (s1, s2) in enumerate(self.options):
            mask = self.choice == o
            if mask.any():
                out[mask] = s1.loads(costs)[mask] + s2.loads(costs)[mask]
        return out

    def pick(self, a, b):
        s1, s2 = self.options[int(self.choice[a, b])]
        out = list(zip(self.pos1, s1.pick(a, b))) + list(zip(self.pos2, s2.pick(a, b)))
        out.sort(key=lambda t: t[0])
        return [c for _, c in out]


class _Greedy(_Sol):
    def __init__(self, M, picks, chosen, where):
        super().__init__(M)
        self.picks, self.chosen, self.where = picks, chosen, where   # where: (pcg, nodes, block, inn, out)

    def pick(self, a, b):
        return list(self.picks[a])

    def _build_loads(self, costs):
        pcg, nodes, block, inn, out = self.where
        pos = {id(n): j for j, n in enumerate(nodes)}
        out_arr = np.zeros(self.M.shape + (2 * costs.load_width,), dtype=np.float32)
        nb = self.M.shape[1]
        for a, idx in enumerate(self.chosen):
            v = np.zeros(2 * costs.load_width, dtype=np.float32)
            for j, n in enumerate(nodes):
                v += costs.node_loads(pcg, n, block)[idx[j]]
                for ref_i, ref in enumerate(n.inputs):
                    src = pcg.node(ref.node)
                    if id(src) in pos:
                        v += _Edges(pcg, src, n, [(ref.index, ref_i)], block, block).loads(
                            costs, np.array(idx[pos[id(src)]]), np.array(idx[j]))
                    elif inn is not None and ref.node == inn[0].id:
                        v += _Edges(pcg, src, n, [(ref.index, ref_i)], inn[1], block).loads(
                            costs, np.array(a), np.array(idx[j]))
            out_arr[a] = v
            if out is not None:
                for ref_i, ref in enumerate(out[0].inputs):
                    src = pcg.node(ref.node)
                    if id(src) in pos:
                        out_arr[a] += _Edges(pcg, src, out[0], [(ref.index, ref_i)], block, out[1]).loads(
                            costs, np.full(nb, idx[pos[id(src)]]), np.arange(nb))
        return out_arr


def _branched(parts) -> bool:
    """Whether a chain's segments (``_Chain.parts``) hold a parallel split."""
    return any(seg.branched for seg, _, _, _ in parts)


def _chain_step(F: _Parts, G: _Parts) -> tuple[_Parts, np.ndarray]:
    """The chain's min over the configurations c of the boundary between ``F`` (a, c) and ``G``
    (c, b): ``F.then(G)`` at each (a, c, b), the cheapest c per (a, b), and those c."""
    Fx = _Parts(*(x[:, :, None] for x in (F.Fw, F.P, F.Q, F.M)))
    Gx = _Parts(*(np.broadcast_to(x, np.broadcast_shapes(x.shape, G.M.shape))[None, :, :]
                  for x in (G.Fw, G.P, G.Q, G.M)))
    T = Fx.then(Gx)
    arg = T.M.argmin(axis=1)
    pick = lambda x: np.take_along_axis(np.broadcast_to(x, T.M.shape), arg[:, None, :], axis=1)[:, 0, :]  # noqa: E731
    return _Parts(pick(T.Fw), pick(T.P), pick(T.Q), pick(T.M)), arg


def _cheaper(x: _Parts, y: _Parts) -> _Parts:
    """Per entry, the one of ``x`` and ``y`` with the smaller whole."""
    out = _Parts(*(np.array(np.broadcast_to(v, x.M.shape), dtype=float) for v in (x.Fw, x.P, x.Q, x.M)))
    out.take(y.M < x.M, _Parts(*(np.broadcast_to(v, x.M.shape) for v in (y.Fw, y.P, y.Q, y.M))))
    return out


def _bumped(cost: _Parts, M: np.ndarray) -> _Parts:
    """``cost`` with its whole raised to ``M`` where the contention model says more (the backward's
    makespan grows by the difference)."""
    full = lambda v: np.array(np.broadcast_to(v, M.shape), dtype=float)  # noqa: E731
    return _Parts(full(cost.Fw), full(cost.P), full(cost.Q), np.maximum(full(cost.M), M))


# The orders in which a parallel split may peel its components (module doc): the graph's topological
# order, and by work, cheapest or costliest first
PEEL_ORDERS = ("graph", "cheapest", "costliest")


class MappingDP:
    """Unity's machine-mapping DP with its cross-candidate cache."""

    def __init__(self, machine: Machine, costs: LocalCosts, cache: bool = True, parallel_splits: bool = True,
                 devices: Optional[int] = None, contention: bool = True, prune: bool = True,
                 packing: bool = True, memo_limit: Optional[int] = None,
                 peel: tuple[str, ...] = PEEL_ORDERS) -> None:
        if isinstance(peel, str) or not peel or any(p not in PEEL_ORDERS for p in peel) \
                or len(set(peel)) != len(peel):
            raise ConfigError(f"MappingDP: peel is a tuple of distinct orders among {PEEL_ORDERS}, got {peel!r}")
        self.machine, self.costs, self.cache = machine, costs, cache
        self.peel_orders = tuple(peel)  # the peel orders a solve tries, keeping the cheaper (module doc)
        self.parallel_splits, self.contention, self.prune = parallel_splits, contention, prune
        self.packing = packing          # independent branches one after the other: by device time (module doc)
        self.overlap = costs.overlap    # compose as a flow shop (module doc), with the costs' rings
        self.devices = devices or machine.num_devices
        self.memo = Memo(memo_limit)   # bounded in bytes (memo.py)
        self.hits = self.misses = self.pruned = 0
        self._leasts: dict = {}           # (node signature, block) -> its cheapest time there (``_least``)
        self.peel = self.peel_orders[0]   # how a parallel split peels its components (``_peel_order``)

    # ---- entry -----------------------------------------------------------------------------------
    def solve(self, pcg: PCG) -> Mapping:
        if not self.cache:
            self.memo.clear()
        g = _Graph(pcg, self.costs)
        self.g = g
        self._spans = {}                  # (node set of this graph, block, max or sum) -> of their _least
        full = (1 << len(g.order)) - 1
        sols = {}
        for order in self.peel_orders:   # with independent branches, each order; the cheapest wins
            self.peel = order
            sols[order] = self._solve(full, Block(0, self.devices), None, None)
            if not sols[order].branched:
                break                     # no parallel split: every order gives this solution
        best = min(sols, key=lambda o: sols[o].M[0, 0])     # the first of equals
        members = _members(full)
        out = {o: Mapping(float(sol.M[0, 0]), {g.order[p]: c for p, c in zip(members, sol.pick(0, 0))})
               for o, sol in sols.items()}
        out[best].others = {o: m for o, m in out.items() if o != best and m.configs != out[best].configs}
        return out[best]

    # ---- helpers ---------------------------------------------------------------------------------
    def _cfgs(self, bound):
        if bound is None:
            return [None]
        p, block = bound
        return self.costs.configs(self.g.pcg, self.g.node[p], block)

    def _edges_between(self, u_bound, v_bound) -> Optional[np.ndarray]:
        """Summed cost matrix of the edges from boundary u to boundary v (None when there are none)."""
        if u_bound is None or v_bound is None:
            return None
        u, v = u_bound[0], v_bound[0]
        es = [(k, i) for src, k, i in self.g.edges_in[v] if src == u]
        if not es:
            return None
        pcg, un, vn = self.g.pcg, self.g.node[u], self.g.node[v]
        E = [self.costs.edge_matrix(pcg, un, k, vn, i, u_bound[1], v_bound[1]) for k, i in es]
        if self.contention:  # an edge takes at least its busiest shared links' time
            E = [np.maximum(M, self.costs.edge_bound(pcg, un, k, vn, i, u_bound[1], v_bound[1]))
                 for M, (k, i) in zip(E, es)]
        return sum(E)

    def _key(self, S: int, block: Block, inn, out) -> tuple:
        g = self.g
        members = _members(S)
        local = {p: j for j, p in enumerate(members)}
        parts = []
        for p in members:
            ins = []
            for u, k, i in g.edges_in[p]:
                if u in local:
                    ins.append((local[u], k, i))
                elif inn is not None and u == inn[0]:
                    ins.append((-1, k, i))
            parts.append((g.sig[p], tuple(ins)))
        outs = ()
        if out is not None:
            outs = tuple((local[u], k, i) for u, k, i in g.edges_in[out[0]] if u in local)
        return tuple(parts), outs, block, self._bound_key(inn), self._bound_key(out)

    # ---- the recursion ---------------------------------------------------------------------------
    def _solve(self, S: int, block: Block, inn, out, key: Optional[tuple] = None) -> _Sol:
        na, nb = len(self._cfgs(inn)), len(self._cfgs(out))
        if S == 0:
            return _Empty(na, nb)
        key = key or self._key(S, block, inn, out)
        hit = self._memo_get(key, lambda sol: sol.branched)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        splits = _split_nodes(self.g, S, inn, out)
        if splits:
            sol = self._chain(S, splits, block, inn, out)
        else:
            comps = self._components(S)
            sol = self._parallel(comps, block, inn, out) if len(comps) > 1 else self._greedy(S, block, inn, out)
        key = self._memo_key(key, sol.branched)
        sol.meter = (self.memo, key)    # before storing: a store may drop it at once (``evicted``)
        self.memo[key] = sol
        return sol

    def _components(self, S: int) -> list[int]:
        g = self.g
        comps = []
        left = S
        while left:
            low = left & -left
            comp, frontier = 0, low
            while frontier:
                comp |= frontier
                nxt = 0
                for x in _members(frontier):
                    nxt |= (g.succ[x] | g.pred[x])
                frontier = nxt & S & ~comp
            comps.append(comp)
            left &= ~comp
        return comps

    def _chain(self, S: int, splits: list[int], block: Block, inn, out) -> _Sol:
        """The chain DP; its prefixes are memoized by structure, so a candidate that differs from
        an earlier one after split node j reuses the min-plus products up to j."""
        g = self.g
        members = _members(S)
        local = {p: j for j, p in enumerate(members)}
        bounds = [inn] + [(n, block) for n in splits] + [out]
        h = hash(("chain", self._bound_key(inn), block))
        F, steps, parts, terms = None, [], [], []
        for j in range(len(bounds) - 1):
            lo, hi = bounds[j], bounds[j + 1]
            seg = S
            if j > 0:
                seg &= g.desc[lo[0]]
            if j < len(splits):
                seg &= g.anc[hi[0]]
            direct = () if lo is None or hi is None else tuple((k, i) for u, k, i in g.edges_in[hi[0]] if u == lo[0])
            seg_key = self._key(seg, block, lo, hi)
            h = hash((h, seg_key, direct, j < len(splits)))
            hit = self._memo_get(("prefix", h), lambda entry: _branched(entry[2]))
            if hit is not None:
                self.hits += 1
                F, steps, parts, terms = hit
                continue
            seg_sol = self._solve(seg, block, lo, hi, seg_key)
            G = seg_sol.cost if self.overlap else seg_sol.M
            E = self._edges_between(lo, hi)
            edges = None
            if E is not None:
                # an edge's transfers: half forward, half the gradient back, both on the critical path;
                # the gradient's also queues with the syncs on the links (it crosses the same NICs)
                G = G.then(_Parts(E / 2, E / 2, E / 2, E)) if self.overlap else G + E
                edges = _Edges(g.pcg, g.node[lo[0]], g.node[hi[0]], [(k, i) for k, i in direct], lo[1], hi[1])
            node_local, node_cfgs, node = None, None, None
            if j < len(splits):
                node_local, node_cfgs = local[hi[0]], self._cfgs(hi)
                node = (g.pcg, g.node[hi[0]], hi[1])
                if self.overlap:
                    f, b, sync = (v[None, :] for v in self.costs.node_part_vectors(*node))
                    G = G.then(_Parts(f, b, sync, f + b + sync))
                else:
                    G = G + self.costs.node_vector(*node)[None, :]
            parts = parts + [(seg_sol, [local[p] for p in _members(seg)], node_local, node_cfgs)]
            terms = terms + [(edges, node)]
            if F is None:
                F, steps = G, [None]
            elif self.overlap:
                F, arg = _chain_step(F, G)
                steps = steps + [arg]
            else:
                T = F[:, :, None] + G[None, :, :]
                arg = T.argmin(axis=1)
                F = np.take_along_axis(T, arg[:, None, :], axis=1)[:, 0, :]
                steps = steps + [arg]
            self.memo[self._memo_key(("prefix", h), _branched(parts))] = (F, steps, parts, terms)
        if self.overlap:
            return _Chain(F.M, parts, steps[:-1], steps[-1], terms, F)
        return _Chain(F, parts, steps[:-1], steps[-1], terms)

    def _memo_get(self, key, branched):
        """The memoized entry of ``key`` for the current peel order: an entry without a parallel split
        inside (``branched(entry)`` false) serves every order; the graph order keeps the others under
        ``key``, each other order under ``(order, key)``."""
        hit = self.memo.get(key)
        if self.peel != "graph" and (hit is None or branched(hit)):
            hit = self.memo.get((self.peel, key))
        return hit

    def _memo_key(self, key, branched: bool):
        return (self.peel, key) if branched and self.peel != "graph" else key

    def _peel_order(self, comps: list[int], block: Block) -> list[int]:
        """The components in the order ``_parallel`` peels them: as found (the graph's topological
        order), or by work, cheapest or costliest first (``_least`` summed over the branch's nodes;
        ties by position)."""
        if self.peel == "graph":
            return comps
        sign = 1.0 if self.peel == "cheapest" else -1.0
        return sorted(comps, key=lambda c: (sign * self._span(c, block, sum), c & -c))

    def _bound_key(self, bound):
        return None if bound is None else (self.g.sig[bound[0]], bound[1])

    def _resource_splits(self, block: Block) -> list[int]:
        per = self.machine.devices_per_node
        if block.count <= 1:
            return []
        if block.count <= per and block.start // per == (block.start + block.count - 1) // per:
            return list(range(1, block.count))
        return [r for r in range(per, block.count, per)] if block.start % per == 0 else []

    def _parallel(self, comps: list[int], block: Block, inn, out) -> _Sol:
        comps = self._peel_order(comps, block)
        first, rest = comps[0], 0
        for c in comps[1:]:
            rest |= c
        s1, s2 = self._solve(first, block, inn, out), self._solve(rest, block, inn, out)
        options = [(s1, s2)]
        cost = None
        order = _cheaper(s1.cost.then(s2.cost), s2.cost.then(s1.cost)) if self.overlap else None
        # one after the other on the same devices (the cheaper order with the overlap model)
        best, loads = self._side_by_side(s1, s2, order.M if self.overlap else s1.M + s2.M)
        cost = _bumped(order, best) if self.overlap else None
        if self.packing:  # interleaved on those devices: the slower side, or what the busiest device takes
            packed, _ = self._side_by_side(s1, s2, np.maximum(s1.M, s2.M), loads, devices=True)
            use = packed < best * (1 - 1e-6)  # never more than one after the other (float32 loads: 1e-6)
            best = np.where(use, packed, best)
            if cost is not None:
                cost.take(use, self._beside(s1.cost, s2.cost, best, loads))
        choice = np.zeros(best.shape, dtype=np.int64)
        if self.parallel_splits:
            for r in self._resource_splits(block):
                # side by side costs at least either side (and the link bound only adds): a split that
                # cannot beat the best so far at any pair of boundary configurations is not finished
                b1, b2 = Block(block.start, r), Block(block.start + r, block.count - r)
                if self.prune and (max(self._lower_bound(first, b1), self._lower_bound(rest, b2)) >= best).all():
                    self.pruned += 1
                    continue
                a = self._solve(first, b1, inn, out)
                if self.prune and (np.maximum(a.M, self._lower_bound(rest, b2)) >= best).all():
                    self.pruned += 1
                    continue
                b = self._solve(rest, b2, inn, out)
                M = np.maximum(a.M, b.M)
                if self.prune and (M >= best).all():
                    self.pruned += 1
                    continue
                M, L = self._side_by_side(a, b, M, devices=self.packing)  # forward of one, backward of the other
                better = M < best
                choice[better] = len(options)
                best = np.where(better, M, best)
                if L is not None:
                    loads[better] = L[better]
                if cost is not None:
                    cost.take(better, self._beside(a.cost, b.cost, M, L))
                options.append((a, b))
        local = {p: j for j, p in enumerate(_members(first | rest))}
        return _Parallel(best, choice, options, [local[p] for p in _members(first)],
                         [local[p] for p in _members(rest)], loads, cost)

    def _beside(self, a: _Parts, b: _Parts, M: np.ndarray, L: Optional[np.ndarray]) -> _Parts:
        """Two branches that run at once: each part the slower side's, and at least what the busiest
        resource of the summed loads ``L`` takes (forward: any; backward: a device; syncs: a shared
        link), the whole raised to ``M``."""
        Fw, P, Q = np.maximum(a.Fw, b.Fw), np.maximum(a.P, b.P), np.maximum(a.Q, b.Q)
        if L is not None:
            w, k = self.costs.load_width, len(self.costs.shared)
            Fw = np.maximum(Fw, L[:, :, :w].max(axis=2))
            P = np.maximum(P, L[:, :, w + k:].max(axis=2, initial=0.0))
            Q = np.maximum(Q, L[:, :, w:w + k].max(axis=2, initial=0.0))
        return _bumped(_Parts(Fw, P, Q, np.maximum(a.M, b.M)), M)

    def _lower_bound(self, S: int, block: Block) -> float:
        """What every entry of S's cost on ``block`` is at least: its costliest node's cheapest
        configuration there (each node's cost is a term of every sum and maximum S's cost is made of)."""
        return self._span(S, block, max)

    def _span(self, S: int, block: Block, fold) -> float:
        """``fold`` (max or sum) of S's nodes' ``_least`` on ``block``, kept for this graph's solve."""
        key = (S, block, fold)
        hit = self._spans.get(key)
        if hit is None:
            hit = self._spans[key] = fold(self._least(p, block) for p in _members(S))
        return hit

    def _least(self, p: int, block: Block) -> float:
        """Node ``p``'s cheapest configuration's time on ``block`` (with the overlap model its forward
        and backward: its sync may hide behind other nodes' backward, its compute cannot), kept per
        node signature and block across the graphs solved."""
        key = (self.g.sig[p], block)
        hit = self._leasts.get(key)
        if hit is None:
            g = self.g
            if self.overlap:
                f, b, _ = self.costs.node_part_vectors(g.pcg, g.node[p], block)
                hit = float((f + b).min())
            else:
                hit = float(self.costs.node_vector(g.pcg, g.node[p], block).min())
            self._leasts[key] = hit
        return hit

    def _side_by_side(self, a: _Sol, b: _Sol, M: np.ndarray, L: Optional[np.ndarray] = None,
                      devices: bool = False) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Two branches' cost ``M`` (their sum or maximum) is at least the busiest resource's forward
        time plus the busiest's backward time, both branches' loads added (``L`` when given), among
        the shared links (the contention model) and, with ``devices`` (packing), among the devices.
        Returns (that cost, the summed loads), or (``M``, None) when no loads are kept."""
        links = self.contention and len(self.costs.shared)
        if not links and not self.packing:
            return M, None
        if L is None:
            L = a.loads(self.costs) + b.loads(self.costs)
        w, k = self.costs.load_width, len(self.costs.shared)
        for cols in ([slice(0, k)] if links else []) + ([slice(k, w)] if devices else []):
            M = np.maximum(M, L[:, :, cols].max(axis=2) + L[:, :, w + cols.start:w + cols.stop].max(axis=2))
        return M, L

    def _greedy(self, S: int, block: Block, inn, out) -> _Sol:
        """Not series-parallel: per configuration of ``in``, each node (topological order) takes the
        configuration cheapest against what is already chosen, looking one step ahead (``_ahead``:
        a configuration no successor can read from, such as copies its consumers cannot shrink,
        is never taken while another is possible); the edges into ``out`` are then added for each
        configuration of ``out``."""
        g, costs, pcg = self.g, self.costs, self.g.pcg
        members = _members(S)
        in_cfgs, out_cfgs = self._cfgs(inn), self._cfgs(out)
        M = np.zeros((len(in_cfgs), len(out_cfgs)))
        picks, chosen_all = [], []
        for a in range(len(in_cfgs)):
            chosen: dict[int, int] = {}  # member -> index of its configuration on the block
            total = 0.0
            for p in members:
                vec = self._incoming(p, chosen, block, inn, a)
                chosen[p] = int((vec + self._ahead(p, S, chosen, block, inn, a, out)).argmin())
                total += float(vec[chosen[p]])
            picks.append([costs.configs(pcg, g.node[p], block)[chosen[p]] for p in members])
            chosen_all.append([chosen[p] for p in members])
            M[a, :] = total
            if out is not None:
                for u, k, i in g.edges_in[out[0]]:
                    if u in chosen:
                        M[a, :] += costs.edge_matrix(pcg, g.node[u], k, g.node[out[0]], i, block, out[1])[chosen[u]]
        where = (pcg, [g.node[p] for p in members], block, None if inn is None else (g.node[inn[0]], inn[1]),
                 None if out is None else (g.node[out[0]], out[1]))
        return _Greedy(M, picks, chosen_all, where)

    def _incoming(self, p: int, chosen: dict, block: Block, inn, a: int, skip: int = -1) -> np.ndarray:
        """``_greedy``'s cost of each configuration of member ``p``: its own, plus the edges from its
        chosen predecessors (but ``skip``) and from ``inn`` (at its configuration ``a``)."""
        g, costs, pcg = self.g, self.costs, self.g.pcg
        vec = costs.node_vector(pcg, g.node[p], block)
        for u, k, i in g.edges_in[p]:
            if u in chosen and u != skip:
                vec = vec + costs.edge_matrix(pcg, g.node[u], k, g.node[p], i, block, block)[chosen[u]]
            elif inn is not None and u == inn[0]:
                vec = vec + costs.edge_matrix(pcg, g.node[u], k, g.node[p], i, inn[1], block)[a]
        return vec

    def _ahead(self, p: int, S: int, chosen: dict, block: Block, inn, a: int, out) -> np.ndarray:
        """Per configuration of member ``p``, what each successor then costs at least: its cheapest
        configuration given the edges from ``p`` and its other chosen predecessors (infinite where none
        can read ``p``'s output), and the cheapest reading by ``out``."""
        g, costs, pcg = self.g, self.costs, self.g.pcg
        ahead = np.zeros(len(costs.configs(pcg, g.node[p], block)))
        for q in _members(g.succ[p] & S):
            T = self._incoming(q, chosen, block, inn, a, skip=p)[None, :]
            for u, k, i in g.edges_in[q]:
                if u == p:
                    T = T + costs.edge_matrix(pcg, g.node[p], k, g.node[q], i, block, block)
            ahead += T.min(axis=1)
        if out is not None:
            for u, k, i in g.edges_in[out[0]]:
                if u == p:
                    ahead += costs.edge_matrix(pcg, g.node[p], k, g.node[out[0]], i, block, out[1]).min(axis=1)
        return ahead
