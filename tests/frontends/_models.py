"""Small PyTorch models and the helpers the front-end tests share: an MLP, a CNN, a transformer
encoder layer, a ViT, a U-Net's decoder pieces and a ResNet-18-style network; compiling an FFModel
under a strategy; torch's SGD step; a function as a module and its forward compared with torch's
through the module, the text format and ONNX."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="flexrt.torch tests need PyTorch (pip install torch)")
nn = torch.nn

from flexrt.machine import load_machine
from flexrt.model import DataType, FFConfig, FFModel, LossType, SGDOptimizer
from flexrt.strategy import random_strategy, save_strategy
from flexrt.strategy.config import ConfigStrategy
from flexrt.strategy.space import config_at
from flexrt.torch import PyTorchModel, file_to_ff

BATCH = 4
SCCE = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(12, 16), nn.Linear(16, 16), nn.Linear(16, 5)
        self.act = nn.GELU()

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.act(self.fc2(h)) * 0.5 + h
        return self.fc3(h)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 6, 3, 1, 1), nn.Conv2d(6, 8, 3, stride=2)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc = nn.Linear(8 * 1 * 1 + 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv1(x))
        a = nn.functional.avg_pool2d(y, 2)                  # [N, 6, 4, 4]
        y = self.pool(torch.tanh(self.conv2(y)))            # [N, 8, 1, 1]
        z = torch.cat([torch.flatten(y, 1), a.mean(dim=(2, 3))], dim=1)
        return self.fc(z)


class Scaled(nn.Module):
    """ConvNeXt's layer scale: a parameter [C, 1, 1] read directly, multiplied into a conv's output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, 1, 1)
        self.gamma = nn.Parameter(torch.rand(4, 1, 1) + 0.5)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)) * self.gamma, 1))


class ViT(nn.Module):
    """A vision transformer as torchvision's: patches by a strided conv, a class token expanded to
    the batch and position embeddings (parameters read directly), an encoder layer, the token's head."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, stride=4)
        self.token = nn.Parameter(torch.randn(1, 1, 8) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, 5, 8) * 0.5)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        n = x.shape[0]
        x = self.patch(x).reshape(n, 8, 4).permute(0, 2, 1)           # [N, 4 patches, 8]
        x = torch.cat([self.token.expand(n, -1, -1), x], dim=1) + self.pos
        return self.head(self.layer(x)[:, 0])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = self.layer(self.embed(x))                       # [N, L, 8]
        return self.head(h.mean(1))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """ResNet-18's structure (stem, 4 stages of 2 basic blocks, global average pool, fc), narrow."""

    def __init__(self, width=4, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        chans, layers, cin = [width, 2 * width, 4 * width, 8 * width], [], width
        for i, c in enumerate(chans):
            layers.append(nn.Sequential(Block(cin, c, 1 if i == 0 else 2), Block(c, c, 1)))
            cin = c
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class UNet(nn.Module):
    """A U-Net's pieces as diffusion and segmentation models write them: reflection padding, GroupNorm
    + SiLU, a strided ConvTranspose2d (output_padding) and PReLU, an affine InstanceNorm2d, a bilinear
    Upsample, a skip concatenation, a nearest F.interpolate by size, var and F.normalize in the head."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 4, 3, 2, 0)                             # [N, 4, 4, 4] of the padded input
        self.act = nn.PReLU(4)
        self.norm1 = nn.GroupNorm(2, 4)
        self.up1 = nn.ConvTranspose2d(4, 4, 3, 2, 1, output_padding=1)    # [N, 4, 8, 8]
        self.norm2 = nn.InstanceNorm2d(8, affine=True)
        self.up2 = nn.Upsample(scale_factor=0.5, mode="bilinear")         # [N, 8, 4, 4]
        self.head = nn.Linear(8 * 4 * 4 + 8, 5)
        with torch.no_grad():
            for m in (self.norm1, self.norm2):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = self.down(nn.functional.pad(x, (1, 1, 1, 1), mode="reflect"))
        h = self.act(self.up1(nn.functional.silu(self.norm1(h))))
        h = self.up2(self.norm2(torch.cat([h, x[:, :1].expand(-1, 4, -1, -1)], dim=1)))
        h = nn.functional.interpolate(h, size=(4, 4)) + h.var(dim=(2, 3), keepdim=True, unbiased=False)
        s = nn.functional.normalize(h.mean((2, 3)), dim=1)
        return self.head(torch.cat([torch.flatten(h, 1), s], dim=1))


# name -> (model factory, input shape without the batch)
MODELS = {"mlp": (MLP, (12,)), "cnn": (CNN, (3, 8, 8)), "encoder": (Encoder, (5, 6)), "resnet18": (ResNet18, (3, 32, 32)),
          "scaled": (Scaled, (3, 8, 8)), "vit": (ViT, (3, 8, 8)), "unet": (UNet, (3, 8, 8))}


def make(name: str, seed: int = 0):
    torch.manual_seed(seed)
    factory, shape = MODELS[name]
    model = factory()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, *shape)).astype(np.float32)
    y = rng.integers(0, 5, (BATCH, 1)).astype(np.int32)
    return model, x, y


def build(pm, shape, argv=(), dtype=DataType.DT_FLOAT):
    ff = FFModel(FFConfig(["-b", str(BATCH), *argv]))
    x = ff.create_tensor([BATCH, *shape], dtype)
    out = pm.torch_to_ff(ff, [x])[0]
    ff.softmax(out, name="prob")
    return ff, x, out


def hybrid_strategy_file(pm, shape, tmp_path, seed: int = 1, dtype=DataType.DT_FLOAT) -> str:
    """A random strategy on 4 devices in which BatchNorm is cut along channels at most (its sample
    axis is FlexFlow's per-device statistics, not one device's)."""
    base, _, _ = build(pm, shape, (), dtype)
    machine = load_machine("local")
    rnd = random_strategy(base.pcg, machine, seed)
    configs = dict(rnd.configs)
    for node in base.pcg.nodes:
        if node.id in configs and node.op_type.name == "BATCH_NORM":
            configs[node.id] = config_at(base.pcg, node, machine, [{"channel": 2}, {}])
    path = str(tmp_path / "hybrid.json")
    save_strategy(path, ConfigStrategy(base.pcg, configs), machine)
    return path


def compiled(pm, shape, argv, lr=0.1, dtype=DataType.DT_FLOAT):
    ff, x, out = build(pm, shape, argv, dtype)
    ff.compile(optimizer=SGDOptimizer(ff, lr), loss_type=SCCE)
    pm.load_weights(ff)
    return ff, x, out


def assert_step_like_torch(ff, pm, module, loss_of, lr=0.1) -> None:
    """After one step of ``ff.fit``: torch's SGD step of ``module`` on ``loss_of(module)`` (its loss,
    a 0-d tensor) gives the loss flexrt reported and the weights flexrt holds."""
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    loss = loss_of(module)
    loss.backward()
    opt.step()
    assert ff.history[0]["loss"] == pytest.approx(loss.item(), rel=1e-5)
    got = ff.get_weights()
    for name, want in pm.ff_weights().items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=2e-6, err_msg=name)


def torch_sgd_step(model, x, y, lr=0.1):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y[:, 0]).long())
    loss.backward()
    opt.step()
    return float(loss.detach())


class Fn(nn.Module):
    """A function (and an optional Linear before it) as a module."""

    def __init__(self, fn, width=None):
        super().__init__()
        self.fn = fn
        self.fc = nn.Linear(width, width) if width else None

    def forward(self, x):
        return self.fn(self.fc(x) if self.fc is not None else x)


def compare_forward(module, x, tmp_path=None, dtype=DataType.DT_FLOAT, atol=1e-6):
    """torch's forward against flexrt's, through the module and (``tmp_path``) the text format."""
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    paths = ["module"] + (["file"] if tmp_path is not None else [])
    for path in paths:
        ff = FFModel(FFConfig(["-b", str(x.shape[0])]))
        xt = ff.create_tensor(list(x.shape), dtype)
        pm = PyTorchModel(module)
        if path == "file":
            pm.torch_to_file(str(tmp_path / "m.ff"))
            (out,) = file_to_ff(str(tmp_path / "m.ff"), ff, [xt])
        else:
            (out,) = pm.torch_to_ff(ff, [xt])
        ff.compile(loss_type="mean_squared_error_avg")
        pm.load_weights(ff)
        xt.set_tensor(ff, x)
        ff.forward()
        got = out.get_tensor(ff)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=atol, err_msg=path)


def compare_onnx(module, x, path, ops):
    """torch's forward against flexrt's through the ONNX export of ``module`` (holding ``ops``)."""
    onnx = pytest.importorskip("onnx")
    from flexrt.onnx import ONNXModel
    torch.onnx.export(module, (torch.from_numpy(x),), str(path), dynamo=False, input_names=["x"])
    assert set(ops) <= {n.op_type for n in onnx.load(str(path)).graph.node}
    om = ONNXModel(str(path))
    ff = FFModel(FFConfig(["-b", str(x.shape[0])]))
    xt = ff.create_tensor(list(x.shape), DataType.DT_FLOAT)
    out = om.apply(ff, {"x": xt})
    ff.compile(loss_type="mean_squared_error_avg")
    om.load_weights(ff)
    xt.set_tensor(ff, x)
    ff.forward()
    with torch.no_grad():
        np.testing.assert_allclose(out.get_tensor(ff), module(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)
