"""Unity's experiment kinds pass the mapping DP's configuration pruning bound (``config_ratio``) to
every Unity and sequential search they run; its default is the search's."""

from __future__ import annotations

import pytest

import flexrt.experiments.unity as kinds_module
from flexrt.experiments.kinds import kind
from flexrt.search.unity import DEFAULT_CONFIG_RATIO

SEARCH_KINDS = {"joint_vs_sequential": {}, "unity_search_time": {}, "unity_speedup": {},
                "unity_dimensions": {"dimensions": "+attention_head"}}


@pytest.mark.parametrize("name", sorted(SEARCH_KINDS))
def test_a_unity_kind_passes_its_config_ratio_to_every_search(name, monkeypatch):
    seen = []
    for fn in ("unity", "sequential"):
        real = getattr(kinds_module, fn)
        monkeypatch.setattr(kinds_module, fn, lambda *a, _fn=fn, _real=real, **kw: (
            seen.append((_fn, kw.get("config_ratio"))), _real(*a, **kw))[1])
    k = kind(name)
    assert k.param("config_ratio").default == DEFAULT_CONFIG_RATIO
    inputs = {p.name: p.default for p in k.params if not p.required}
    inputs.update(model="mlp", devices=6, budget=1, config_ratio=0.0, **SEARCH_KINDS[name])
    k.fn(inputs)
    assert seen and all(ratio == 0.0 for _, ratio in seen), seen
