"""Public model zoos through flexrt's front ends: each model built from its library, converted, and
its forward compared with torch's.

For every model of ``--zoo`` (torchvision's classification models or timm's), this builds it with 10
classes and random weights (parameters that start at zero, as ViT's head, are drawn instead), puts
it in eval mode, converts it through ``--via torch`` (``flexrt.torch.PyTorchModel``: torch.fx) or
``--via onnx`` (``torch.onnx.export(dynamo=False)``, then ``flexrt.onnx.ONNXModel``), loads its
weights, runs one forward pass of a batch of 2 on one NumPy device and prints one row per model:
``ok`` with the relative error (max |flexrt - torch| / max |torch|; ok below 1e-4), ``diff`` above
that, or the first line of the error (flexrt's refusal naming the node, or the library's own).

    python bench/bench_zoo_frontends.py --zoo timm [--via torch|onnx] [--models resnet18,vit_tiny_patch16_224]
        [--timeout 120]

Needs torch and the zoo's package (torchvision, or timm with torchvision); neither is a flexrt
dependency. Speed is not measured here: the seconds column is the conversion and one forward on
this host, for orientation only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import warnings

import numpy as np

TORCHVISION = ("alexnet", "vgg11", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "squeezenet1_1",
               "densenet121", "shufflenet_v2_x0_5", "googlenet", "inception_v3", "mnasnet0_5", "regnet_y_400mf",
               "regnet_x_400mf", "convnext_tiny", "vit_b_16", "maxvit_t", "swin_t", "swin_v2_t")
TIMM = ("resnet18", "resnet50d", "efficientnet_b0", "mobilenetv3_small_100", "vit_tiny_patch16_224",
        "deit_tiny_patch16_224", "convnext_atto", "swin_tiny_patch4_window7_224", "mixer_s16_224", "regnetx_002",
        "densenet121", "mobilevit_xxs", "poolformer_s12", "levit_128s", "resmlp_12_224", "ghostnet_100",
        "cspresnet50", "dla34", "hrnet_w18_small", "xcit_nano_12_p16_224", "efficientformer_l1",
        "tf_efficientnet_b0", "rexnet_100", "coat_lite_tiny", "beit_base_patch16_224", "cait_xxs24_224",
        "crossvit_tiny_240", "pit_ti_224", "tnt_s_patch16_224", "twins_svt_small", "visformer_tiny",
        "gmlp_ti16_224", "convmixer_768_32", "nfnet_l0", "res2net50_26w_4s", "resnest14d", "sebotnet33ts_256",
        "selecsls42b", "skresnet18", "tresnet_m", "vgg11", "inception_v3", "xception41", "mobilenetv2_100",
        "lcnet_050", "edgenext_xx_small", "efficientvit_b0", "fastvit_t8", "repvit_m0_9", "maxvit_tiny_tf_224",
        "deit3_small_patch16_224", "eva02_tiny_patch14_224", "vit_small_patch16_224", "volo_d1_224", "hgnet_tiny",
        "ese_vovnet19b_dw", "mobileone_s0")
OK_ERROR = 1e-4


def build(zoo: str, name: str):
    """(module in eval mode, input shape) of ``name`` in ``zoo``, 10 classes, random weights."""
    import torch
    torch.manual_seed(0)
    if zoo == "timm":
        import timm
        model = timm.create_model(name, pretrained=False, num_classes=10)
        shape = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    else:
        import torchvision.models as tvm
        kw = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
        model = getattr(tvm, name)(num_classes=10, **kw)
        shape = (3, 299, 299) if name == "inception_v3" else (3, 224, 224)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() and float(p.abs().max()) == 0.0:
                p.normal_(0, 0.02)
    return model.eval(), shape


def convert(model, shape, via: str, work: str):
    """flexrt's output for a batch of 2 random inputs, and torch's."""
    import torch
    from flexrt.model import DataType, FFConfig, FFModel
    x = torch.randn(2, *shape)
    with torch.no_grad():
        want = model(x).numpy()
    ff = FFModel(FFConfig(["-b", "2"]))
    xt = ff.create_tensor([2, *shape], DataType.DT_FLOAT)
    if via == "onnx":
        from flexrt.onnx import ONNXModel
        path = os.path.join(work, "m.onnx")
        torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"])
        source = ONNXModel(path)
        out = source.apply(ff, {"x": xt})
    else:
        from flexrt.torch import PyTorchModel
        source = PyTorchModel(model)
        out = source.torch_to_ff(ff, [xt])[0]
    ff.compile(loss_type="mean_squared_error_avg")
    source.load_weights(ff)
    xt.set_tensor(ff, x.numpy())
    ff.forward()
    return np.asarray(out.get_tensor(ff)).reshape(want.shape), want


def _alarm(*_):
    raise TimeoutError("over the time limit")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", choices=("torchvision", "timm"), default="torchvision")
    ap.add_argument("--via", choices=("torch", "onnx"), default="torch")
    ap.add_argument("--models", default="", help="comma-separated names (default: the zoo's list here)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per model")
    a = ap.parse_args(argv)
    names = [n for n in a.models.split(",") if n] or list(TIMM if a.zoo == "timm" else TORCHVISION)
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    with tempfile.TemporaryDirectory(prefix="flexrt_zoo_") as work:
        for name in names:
            t0 = time.perf_counter()
            signal.alarm(a.timeout)
            try:
                got, want = convert(*build(a.zoo, name), a.via, work)
                err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
                row = ("ok" if err < OK_ERROR else "diff", f"relative error {err:.1e}")
            except Exception as e:  # noqa: BLE001 - every failure is a row: flexrt's refusal or the library's
                row = ("fails", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
            finally:
                signal.alarm(0)
            rows.append((name, *row, time.perf_counter() - t0))
            print(f"{name:<34}{row[0]:<7}{rows[-1][3]:>7.1f}s  {row[1]}", flush=True)
    ok = sum(r[1] == "ok" for r in rows)
    print(f"\n{ok} of {len(rows)} convert with forward equal to torch's (relative error < {OK_ERROR:g}); zoo {a.zoo}, "
          f"via {a.via}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
