"""Unity's experiment kinds pass the mapping DP's configuration pruning bound (``config_ratio``) to
every Unity and sequential search they run (its default is the search's), and search the model in
the ``precision`` they are given (a bad one refused naming the file's line and the choices)."""

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


@pytest.mark.parametrize("name", sorted(SEARCH_KINDS))
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_unity_kind_searches_the_model_in_its_precision(name, precision, monkeypatch):
    """``precision`` reaches the graph every search and baseline sees: its floating tensors are 16-bit."""
    from flexrt.ir.datatype import DataType
    seen = []
    for fn in ("unity", "sequential"):
        real = getattr(kinds_module, fn)
        monkeypatch.setattr(kinds_module, fn, lambda pcg, *a, _real=real, **kw: (
            seen.append({pcg.shape(r).tensor_shape.dtype for n in pcg.nodes for r in n.inputs}), _real(pcg, *a, **kw))[1])
    k = kind(name)
    assert k.param("precision").default == "fp32"
    inputs = {p.name: p.default for p in k.params if not p.required}
    inputs.update(model="mlp", devices=6, budget=1, precision=precision, **SEARCH_KINDS[name])
    k.fn(inputs)
    want = DataType.DT_HALF if precision == "fp16" else DataType.DT_BFLOAT16
    assert seen and all(want in dtypes and DataType.DT_FLOAT not in dtypes for dtypes in seen), seen


def test_a_bad_precision_is_refused_naming_the_line_and_the_choices():
    from flexrt.errors import ConfigError
    from flexrt.experiments import parse_experiment
    text = ("name: p\ntitle: t\npaper: unity\nreproduces: r\nkind: unity_dimensions\n"
            "params: {devices: 6, dimensions: data+model, precision: fp8}\n")
    with pytest.raises(ConfigError, match=r"p.yaml:6: field 'params.precision': unknown precision 'fp8'; valid: fp32, fp16, bf16"):
        parse_experiment(text, "p.yaml")
