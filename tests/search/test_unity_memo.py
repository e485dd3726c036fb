"""The mapping DP's memo stays within the process's memory (``search.unity.memo``): dropping entries
never changes a result, only what is recomputed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.search.unity import LocalCosts, MappingDP, unity
import numpy as np

from flexrt.search.unity.memo import LIMIT_ENV, Memo, default_limit, held_bytes
from tests.search.test_unity_mapping import COST, FULL, build


@settings(max_examples=10, deadline=None)
@given(blocks=st.lists(st.sampled_from(["dense", "branch", "residual", "relu"]), min_size=2, max_size=5),
       devices=st.sampled_from([2, 4, 8]))
def test_a_memo_that_drops_everything_gives_the_same_mappings(blocks, devices):
    machine = load_machine("dgx1_v100")
    kept = MappingDP(machine, LocalCosts(machine, COST, FULL), devices=devices)
    starved = MappingDP(machine, LocalCosts(machine, COST, FULL), devices=devices)
    starved.memo = Memo(limit=1)     # over the limit at every store that holds an array: drops it
    for extra in ([], ["dense"], ["branch", "dense"]):   # candidates sharing prefixes, as a search makes
        pcg = build(blocks + extra)
        a, b = kept.solve(pcg), starved.solve(build(blocks + extra))
        assert b.cost_s == a.cost_s
        names = lambda g, m: {g.node(n).name: c for n, c in m.configs.items()}  # noqa: E731
        assert names(build(blocks + extra), b) == names(pcg, a)
    assert starved.memo.dropped > 0 and starved.memo.bytes <= 1
    assert kept.memo.dropped == 0


def test_unity_under_a_tiny_memory_limit_finds_what_it_finds_without(monkeypatch):
    machine = load_machine("dgx1_v100")
    pcg = build(["dense", "branch", "residual", "dense"])
    free = unity(pcg, machine, COST, budget=8, progress=False)
    monkeypatch.setenv(LIMIT_ENV, "1")     # 1 MiB of arrays: drops as it goes
    tight = unity(build(["dense", "branch", "residual", "dense"]), machine, COST, budget=8, progress=False)
    assert tight.cost_s == free.cost_s


def test_the_limit_comes_from_the_environment_or_the_machine(monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "512")
    assert default_limit() == 512 << 20
    for bad in ("0", "-3", "lots", "1.5"):
        monkeypatch.setenv(LIMIT_ENV, bad)
        with pytest.raises(ConfigError, match=LIMIT_ENV):
            default_limit()
    monkeypatch.delenv(LIMIT_ENV)
    assert 0 < default_limit()
    entry = (np.zeros(100), [np.zeros(50), np.zeros(50)])
    size = held_bytes(entry)
    assert size == 1600 + (56 + 16) * 2     # the arrays and the tuple's and list's slots
    memo = Memo(limit=5 * size)
    for k in range(10):
        memo[k] = (np.zeros(100), [np.zeros(50), np.zeros(50)])
    assert held_bytes(memo.get(9)) == size and memo.get(0) is None    # the oldest five went
    assert len(memo) == 5 and memo.dropped == 5 and memo.bytes == 5 * size
    memo.get(5)                      # now the most recent: 6 goes first
    memo.grow(7, 800)
    assert memo.get(6) is None and memo.get(5) is not None and memo.bytes <= 5 * size


def _reachable(value, root, arrays, solutions, seen) -> None:
    """What a memo entry ``root`` reaches through tuples, lists and the DP's own objects: its
    arrays (each as its owning base; ``arrays``: not into another memoized solution, counted in its
    own entry) and every DP solution (``solutions``, when given: into all of them)."""
    from flexrt.search.unity import mapping
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        base = value
        while isinstance(base.base, np.ndarray):
            base = base.base
        arrays[id(base)] = base.nbytes
    elif isinstance(value, (tuple, list)):
        for v in value:
            _reachable(v, root, arrays, solutions, seen)
    elif type(value).__module__ == mapping.__name__:
        if isinstance(value, mapping._Sol) and solutions is not None:
            solutions.append(value)
        elif value is not root and getattr(value, "meter", None) is not None:
            return
        attrs = getattr(value, "__dict__", None) or {k: getattr(value, k, None) for k in type(value).__slots__}
        for v in attrs.values():
            _reachable(v, root, arrays, solutions, seen)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("blocks", [["dense", "branch", "dense", "branch", "relu"], ["branch", "residual", "branch"]])
def test_every_array_a_memo_entry_holds_is_counted(blocks, overlap):
    """Each entry's arrays, the link loads built after it was stored included, are within what the
    memo counts for it: an entry that held arrays the memo did not count (a chain's empty segments'
    zero loads did, 4.3 GiB of one Inception-v3 solve at 48 GPUs) would let the search outgrow
    its limit; what is left uncounted is the two scalar zeros every empty segment broadcasts."""
    machine = load_machine("summit", nodes=2)
    dp = MappingDP(machine, LocalCosts(machine, COST, FULL, overlap=overlap), devices=12)
    dp.solve(build(blocks))
    built = 0
    for value, counted in dp.memo._d.values():
        found: dict = {}
        _reachable(value, value, found, None, set())
        assert sum(found.values()) <= counted + 8 + 4, type(value).__name__
        built += getattr(value, "_loads", None) is not None
    assert built > 0      # the contention model built link loads, so the law is not vacuous


@pytest.mark.parametrize("overlap", [False, True])
def test_a_solution_dropped_from_the_memo_keeps_no_loads(overlap):
    """A chain holds its segments' solutions after the memo drops them; they must not go on holding
    link loads the memo no longer counts (one Inception-v3 solve at 96 GPUs kept 2.85 GiB of them
    beside a memo counting 2.36 and outgrew 13 GiB). Dropping them changes no result."""
    machine = load_machine("summit", nodes=2)
    blocks = ["dense", "branch", "dense", "branch", "residual", "branch", "relu"]
    free = MappingDP(machine, LocalCosts(machine, COST, FULL, overlap=overlap), devices=12)
    a = free.solve(build(blocks))
    tight = MappingDP(machine, LocalCosts(machine, COST, FULL, overlap=overlap), devices=12,
                      memo_limit=max(1, free.memo.bytes // 8))    # drops most of what the free one keeps
    b = tight.solve(build(blocks))
    assert b.cost_s == a.cost_s and tight.memo.dropped > 0
    held: list = []
    seen: set = set()
    for value, _ in tight.memo._d.values():
        _reachable(value, value, {}, held, seen)
    dropped = [s for s in held if s.meter is None or s.meter[1] not in tight.memo._d]
    assert dropped and all(s._loads is None for s in dropped)
