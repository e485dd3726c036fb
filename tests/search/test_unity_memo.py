"""The mapping DP's memo stays within the process's memory (``search.unity.memo``): dropping entries
never changes a result, only what is recomputed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexrt.errors import ConfigError
from flexrt.machine import load_machine
from flexrt.search.unity import LocalCosts, MappingDP, unity
from flexrt.search.unity.memo import LIMIT_ENV, Memo, default_limit, resident_bytes
from tests.search.test_unity_mapping import COST, FULL, build


@settings(max_examples=10, deadline=None)
@given(blocks=st.lists(st.sampled_from(["dense", "branch", "residual", "relu"]), min_size=2, max_size=5),
       devices=st.sampled_from([2, 4, 8]))
def test_a_memo_that_drops_everything_gives_the_same_mappings(blocks, devices):
    machine = load_machine("dgx1_v100")
    kept = MappingDP(machine, LocalCosts(machine, COST, FULL), devices=devices)
    starved = MappingDP(machine, LocalCosts(machine, COST, FULL), devices=devices)
    starved.memo = Memo(limit=1, check_every=1)     # over the limit at every store: drops half each time
    for extra in ([], ["dense"], ["branch", "dense"]):   # candidates sharing prefixes, as a search makes
        pcg = build(blocks + extra)
        a, b = kept.solve(pcg), starved.solve(build(blocks + extra))
        assert b.cost_s == a.cost_s
        names = lambda g, m: {g.node(n).name: c for n, c in m.configs.items()}  # noqa: E731
        assert names(build(blocks + extra), b) == names(pcg, a)
    assert starved.memo.dropped > 0 and len(starved.memo) <= 1
    assert kept.memo.dropped == 0


def test_unity_under_a_tiny_memory_limit_finds_what_it_finds_without(monkeypatch):
    machine = load_machine("dgx1_v100")
    pcg = build(["dense", "branch", "residual", "dense"])
    free = unity(pcg, machine, COST, budget=8, progress=False)
    monkeypatch.setenv(LIMIT_ENV, "1")     # 1 MiB: below any Python process, so it drops all the time
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
    assert 0 < default_limit() and 1 << 20 < resident_bytes()
    memo = Memo(limit=1 << 50, check_every=1)
    for k in range(10):
        memo[k] = k + 1
    assert memo.get(3) == 4 and memo.get(99) is None and len(memo) == 10 and memo.dropped == 0
