"""PyTorchModel(is_hf_model=True) with HuggingFace's tracer, faked here (transformers is not a
dependency): the sizes are passed only where the installed symbolic_trace takes them (transformers
4.1x took batch_size and sequence_length, later ones trace on meta tensors and take neither); where
that tracer fails, flexrt's own traces the named inputs (with a warning), and where both fail our
ConfigError names the model, the version and both causes."""

import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import fx, nn  # noqa: E402

from flexrt.errors import ConfigError, FrontendWarning  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * 2.0


def _fake_transformers(monkeypatch, trace):
    pkg, utils, fxmod = (types.ModuleType(n) for n in ("transformers", "transformers.utils", "transformers.utils.fx"))
    pkg.__version__ = "0.0-fake"
    fxmod.symbolic_trace = trace
    pkg.utils, utils.fx = utils, fxmod
    for name, mod in (("transformers", pkg), ("transformers.utils", utils), ("transformers.utils.fx", fxmod)):
        monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize("old", [True, False], ids=["transformers_4_1x", "later"])
def test_hf_tracer_gets_the_arguments_it_takes(monkeypatch, old):
    seen = {}
    if old:
        def trace(model, input_names=None, batch_size=1, sequence_length=None):
            seen.update(input_names=input_names, batch_size=batch_size, sequence_length=sequence_length)
            return fx.symbolic_trace(model)
    else:
        def trace(model, input_names=None, disable_check=False):
            seen.update(input_names=input_names)
            return fx.symbolic_trace(model)
    _fake_transformers(monkeypatch, trace)
    pm = PyTorchModel(_Scaled(), is_hf_model=True, input_names=["x"], batch_size=2, seq_length=7)
    ff = FFModel(FFConfig(["-b", "2"]))
    (out,) = pm.torch_to_ff(ff, [ff.create_tensor([2, 4], DataType.DT_FLOAT)])
    assert list(out.dims) == [2, 4]
    assert seen == ({"input_names": ["x"], "batch_size": 2, "sequence_length": 7} if old else {"input_names": ["x"]})


def test_hf_tracer_failures_are_our_error(monkeypatch):
    def trace(model, input_names=None):
        raise AttributeError("'NoneType' object has no attribute 'pop'")
    _fake_transformers(monkeypatch, trace)
    pm = PyTorchModel(_Scaled(), is_hf_model=True, input_names=["pixel_values"])
    ff = FFModel(FFConfig(["-b", "2"]))
    with pytest.raises(ConfigError, match=r"HuggingFace's symbolic_trace \(transformers 0.0-fake\) could not trace "
                                          r"_Scaled with input_names=\['pixel_values'\]: AttributeError.*; flexrt's own "
                                          r"tracer could not either: _Scaled.forward takes no argument named "
                                          r"pixel_values; it takes x"):
        pm.torch_to_ff(ff, [ff.create_tensor([2, 4], DataType.DT_FLOAT)])


class _Encoder(nn.Module):
    """HuggingFace's signature: the inputs by name among optional arguments, and **kwargs."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(10, 4), nn.Linear(4, 3)

    def forward(self, input_ids, past_key_values=None, attention_mask=None, use_cache=False, **kwargs):
        h = self.emb(input_ids) * attention_mask[:, :, None]
        return self.fc(h.sum(dim=1))


def test_where_hf_tracer_fails_flexrts_traces_the_named_inputs(monkeypatch):
    """XLM-RoBERTa and CamemBERT, which HuggingFace's tracer does not list: flexrt's tracer takes the
    tensors by input_names (in the signature's order), the others at their defaults, **kwargs
    empty; a warning says so; the forward equals torch's."""
    def trace(model, input_names=None):
        raise NotImplementedError("Model _Encoder is not supported yet")
    _fake_transformers(monkeypatch, trace)
    import numpy as np
    torch.manual_seed(0)
    module = _Encoder()
    ids = np.random.default_rng(0).integers(0, 10, (2, 5)).astype(np.int64)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    pm = PyTorchModel(module, is_hf_model=True, input_names=["attention_mask", "input_ids"])
    ff = FFModel(FFConfig(["-b", "2"]))
    ts = [ff.create_tensor([2, 5], DataType.DT_INT64) for _ in range(2)]
    with pytest.warns(FrontendWarning, match=r"could not trace _Encoder with input_names=\['attention_mask', "
                                             r"'input_ids'\]; traced with flexrt's own tracer instead"):
        (out,) = pm.torch_to_ff(ff, ts)
    ff.compile(loss_type="mean_squared_error_avg")
    pm.load_weights(ff)
    for t, a in zip(ts, (ids, mask)):      # the signature's order: input_ids, then attention_mask
        t.set_tensor(ff, a)
    ff.forward()
    with torch.no_grad():
        want = module(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(out.get_tensor(ff), want, rtol=1e-6)
