"""PyTorchModel(is_hf_model=True) with HuggingFace's tracer, faked here (transformers is not a
dependency): the sizes are passed only where the installed symbolic_trace takes them (transformers
4.1x took batch_size and sequence_length, later ones trace on meta tensors and take neither), a
tracer failure becomes our ConfigError naming the model, the version and the cause."""

import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import fx, nn  # noqa: E402

from flexrt.errors import ConfigError  # noqa: E402
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
                                          r"_Scaled with input_names=\['pixel_values'\]: AttributeError"):
        pm.torch_to_ff(ff, [ff.create_tensor([2, 4], DataType.DT_FLOAT)])
