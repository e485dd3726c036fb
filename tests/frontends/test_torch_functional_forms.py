"""Functional forms real model libraries use (timm's BatchNormAct2d, GroupNorm, Linear and
Conv2dSame subclasses calling F.batch_norm / F.group_norm / F.linear / F.conv2d with their own
parameters; ViT's
``q, k, v = qkv.unbind(0)``; MaxViT's relative position bias as scaled_dot_product_attention's
floating attn_mask; BEiT's F.linear with a bias made in forward; ResMLP's ``torch.addcmul``; Swin's ``torch.roll`` and ``H % w`` padding
arithmetic; a ``forward(x, attn_mask=None, is_causal=False)`` held at its defaults). Laws: the forward
equals torch's, and one SGD step equals torch's (train-mode batch norm included) on one device, two
devices and a random strategy; what cannot map is refused naming the node."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from flexrt.errors import ConfigError  # noqa: E402
from flexrt.model import DataType, FFConfig, FFModel, SGDOptimizer  # noqa: E402
from flexrt.torch import PyTorchModel  # noqa: E402

from tests.frontends._models import BATCH, compare_forward, hybrid_strategy_file  # noqa: E402

B = BATCH


class BatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d: the module's own buffers and parameters through F.batch_norm, then ReLU."""

    def forward(self, x):
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                         self.momentum, self.eps)
        return torch.relu(x)


class GroupNorm1(nn.GroupNorm):
    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


class Linear(nn.Linear):
    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Conv2dSame(nn.Conv2d):
    """timm's Conv2dSame: TensorFlow's 'same' padding from the input's size, then F.conv2d with the
    module's own weight and bias."""

    def forward(self, x):
        ih, iw = x.size()[-2:]
        kh, kw = self.weight.shape[-2:]
        ph = max((-(-ih // self.stride[0]) - 1) * self.stride[0] + kh - ih, 0)
        pw = max((-(-iw // self.stride[1]) - 1) * self.stride[1] + kw - iw, 0)
        x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, (0, 0), self.dilation, self.groups)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = Conv2dSame(3, 4, 3, stride=1)
        self.bn, self.gn = BatchNormAct(4), GroupNorm1(2, 4)
        self.head = Linear(4 * 6 * 6, 5)
        self.gamma = nn.Parameter(torch.rand(4, 1, 1) + 0.5)

    def forward(self, x):
        x = self.gn(self.bn(self.conv(x)))
        h = x.size(2)
        pad = (3 - h % 3) % 3               # Swin's padding arithmetic on sizes: 0 here
        x = F.pad(x, (0, pad, 0, pad))
        x = torch.roll(x, shifts=(-1, 2), dims=(2, 3))
        x = torch.addcmul(x, self.gamma, x)  # ResMLP's affine: x + gamma * x
        return self.head(x.flatten(1))


class Attention(nn.Module):
    """timm's Attention: one qkv projection, unbind, a forward with held defaults."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.head = nn.Linear(3 * d, 5)

    def forward(self, x, attn_mask=None, is_causal=False):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        att = (q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, c)
        return self.head(self.proj(y).flatten(1))


class BiasedAttention(nn.Module):
    """scaled_dot_product_attention with a learned floating attn_mask (MaxViT's relative position bias)."""

    def __init__(self, d=8, heads=2, n=3):
        super().__init__()
        self.heads, self.qkv, self.head = heads, nn.Linear(d, 3 * d), nn.Linear(n * d, 5)
        self.bias = nn.Parameter(torch.randn(heads, n, n))

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias.unsqueeze(0))
        return self.head(y.transpose(1, 2).reshape(b, -1))


class BeitQkv(nn.Module):
    """BEiT's and EVA's attention input: F.linear with a module's weight and a bias made in forward
    (the queries' and values' biases around zeros for the keys)."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.q_bias, self.v_bias = nn.Parameter(torch.randn(d)), nn.Parameter(torch.randn(d))
        self.head = nn.Linear(3 * 3 * d, 5)

    def forward(self, x):
        bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        return self.head(torch.relu(F.linear(x, weight=self.qkv.weight, bias=bias)).flatten(1))


CASES = {"convnet": (ConvNet, (B, 3, 6, 6)), "beit": (BeitQkv, (B, 3, 8)), "attention": (Attention, (B, 3, 8)), "biased": (BiasedAttention, (B, 3, 8))}


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", list(CASES))
def test_functional_forms_forward_equals_torch_in_eval_mode(case):
    torch.manual_seed(0)
    factory, shape = CASES[case]
    model = factory().eval()
    if case == "convnet":     # running statistics that differ from the batch's
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    compare_forward(model, _x(shape))


# data parallelism normalizes each device's samples apart (FlexFlow's batch norm): not the convnet's law
@pytest.mark.parametrize("case, how", [("convnet", "one"), ("convnet", "random"), ("attention", "one"),
                                       ("attention", "two"), ("attention", "random"), ("biased", "one"),
                                       ("biased", "random"), ("beit", "one"), ("beit", "two"),
                                       ("beit", "random")])
def test_functional_forms_train_as_torch_does(case, how, tmp_path):
    torch.manual_seed(1)
    factory, shape = CASES[case]
    model = factory().train()
    x, y = _x(shape, 1), np.random.default_rng(2).integers(0, 5, (B, 1)).astype(np.int32)
    pm = PyTorchModel(model)

    def build(argv):
        ff = FFModel(FFConfig(["-b", str(B), *argv]))
        xt = ff.create_tensor(list(shape), DataType.DT_FLOAT)
        ff.softmax(pm.torch_to_ff(ff, [xt])[0], name="prob")
        return ff

    argv = {"one": [], "two": ["-ll:gpu", "2"]}.get(how)
    if argv is None:    # batch norm cut along channels at most (along samples it is FlexFlow's per-piece norm)
        argv = ["--import", hybrid_strategy_file(pm, shape[1:], tmp_path, seed=5)]
    ff = build(argv)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="sparse_categorical_crossentropy")
    pm.load_weights(ff)
    ff.fit(x=x, y=y, epochs=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y[:, 0]).long())
    loss.backward()
    opt.step()
    assert ff.history[0]["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(ff.get_weights()[name], want, rtol=1e-4, atol=1e-6, err_msg=name)


class _OtherWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return F.linear(x, self.a.weight, self.b.bias)


class _TensorMod(nn.Module):
    def forward(self, x):
        return x % 2.0


class _BoolMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.tensor([[False, True], [True, True]]))   # not a causal one

    def forward(self, x):
        q = x.reshape(B, 1, 2, 2)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=self.mask).reshape(B, 4)


@pytest.mark.parametrize("module, message", [
    (_OtherWeight(), r"torch node 'linear'.*F.linear with weight='a.weight', bias='b.bias'; valid: one module's own"),
    (_TensorMod(), r"mod of a tensor has no FFModel layer; valid: mod of sizes"),
    (_BoolMask(), r"attn_mask of DT_BOOLEAN: flexrt adds a floating attn_mask to the scores"),
])
def test_forms_that_cannot_map_name_the_node(module, message):
    ff = FFModel(FFConfig(["-b", str(B)]))
    with pytest.raises(ConfigError, match=message):
        PyTorchModel(module).torch_to_ff(ff, [ff.create_tensor([B, 4], DataType.DT_FLOAT)])


def test_like_constructors_of_traced_tensors_equal_torch():
    """torch.zeros_like / ones_like / full_like of a tensor traced in forward: constants of its sizes."""
    from tests.frontends._models import Fn
    module = Fn(lambda t: t * torch.full_like(t, 2.0) + torch.ones_like(t) - torch.zeros_like(t), width=8)
    compare_forward(module, _x((B, 3, 8)))
