"""Public model zoos through flexrt's front ends: each model built from its library, converted, and
its forward compared with torch's.

For every model of ``--zoo`` (torchvision's classification models, timm's, or HuggingFace
transformers' text models), this builds it with random weights (torchvision and timm: 10 classes,
parameters that start at zero, as ViT's head, drawn instead; HuggingFace: a small configuration of
the architecture, 2 layers of width 64, 4 heads, a vocabulary of 100, no download), puts it in eval
mode, converts it through ``--via torch`` (``flexrt.torch.PyTorchModel``: torch.fx, HuggingFace's
tracer for ``--zoo hf``, ``is_hf_model=True``) or ``--via onnx`` (``torch.onnx.export(dynamo=False)``,
then ``flexrt.onnx.ONNXModel``), loads its weights, runs one forward pass of a batch of 2 (images;
HuggingFace: 16 token ids and an attention mask whose second row is padded after 9) on one NumPy
device and prints one row per model (HuggingFace: its first output, the last hidden state):
``ok`` with the relative error (max |flexrt - torch| / max |torch|; ok below 1e-4), ``diff`` above
that, or the first line of the error (flexrt's refusal naming the node, or the library's own).

    python bench/bench_zoo_frontends.py --zoo timm|torchvision|hf [--via torch|onnx]
        [--models resnet18,vit_tiny_patch16_224] [--timeout 120]

Needs torch and the zoo's package (torchvision, timm with torchvision, or transformers); none is a
flexrt dependency. Speed is not measured here: the seconds column is the conversion and one forward on
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
# HuggingFace architectures (model_type) and the keyword arguments of a small configuration of each
_HF_COMMON = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
HF = {"bert": _HF_COMMON, "roberta": _HF_COMMON, "xlm-roberta": _HF_COMMON, "camembert": _HF_COMMON,
      "electra": dict(_HF_COMMON, embedding_size=32), "albert": dict(_HF_COMMON, embedding_size=32),
      "distilbert": dict(vocab_size=100, dim=64, n_layers=2, n_heads=4, hidden_dim=128),
      "mobilebert": dict(_HF_COMMON, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32),
      "deberta-v2": _HF_COMMON, "mpnet": _HF_COMMON, "megatron-bert": _HF_COMMON,
      "gpt2": dict(vocab_size=100, n_embd=64, n_layer=2, n_head=4), "opt": dict(_HF_COMMON, ffn_dim=128,
      word_embed_proj_dim=64), "llama": _HF_COMMON, "bart": dict(vocab_size=100, d_model=64, encoder_layers=2,
      decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
      decoder_ffn_dim=128)}
HF_INPUTS = ("input_ids", "attention_mask")
OK_ERROR = 1e-4


def _hf_inputs() -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 100, (2, 16)).astype(np.int64)
    mask = np.ones((2, 16), np.int64)
    mask[1, 9:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def build(zoo: str, name: str):
    """(module in eval mode, its inputs by name) of ``name`` in ``zoo``, random weights."""
    import torch
    torch.manual_seed(0)
    if zoo == "hf":
        import transformers
        config = transformers.AutoConfig.for_model(name, **HF[name], use_cache=False)   # no key-value cache output
        return transformers.AutoModel.from_config(config).eval(), _hf_inputs()
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
    return model.eval(), {"x": np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)}


def convert(model, inputs: dict, via: str, work: str, hf: bool = False):
    """flexrt's output for ``inputs`` (name -> array), and torch's (its first output)."""
    import torch
    from flexrt.model import DataType, FFConfig, FFModel
    from flexrt.torch._trace import TORCH_DTYPES
    args = {n: torch.from_numpy(a) for n, a in inputs.items()}
    with torch.no_grad():
        want = model(**args)
    want = (want[0] if isinstance(want, (tuple, list)) or hasattr(want, "to_tuple") else want).numpy()
    ff = FFModel(FFConfig(["-b", "2"]))
    kinds = {v: k for k, v in TORCH_DTYPES.items()}
    ts = {n: ff.create_tensor(list(a.shape), DataType[kinds[torch.from_numpy(a).dtype]]) for n, a in inputs.items()}
    if via == "onnx":
        from flexrt.onnx import ONNXModel
        path = os.path.join(work, "m.onnx")
        torch.onnx.export(model, (), path, kwargs=args, dynamo=False, input_names=list(inputs))
        source = ONNXModel(path)
        out = source.apply(ff, ts)
    else:
        from flexrt.torch import PyTorchModel
        source = PyTorchModel(model, is_hf_model=hf, input_names=list(inputs) if hf else None)
        out = source.torch_to_ff(ff, list(ts.values()))[0]
    ff.compile(loss_type="mean_squared_error_avg")
    source.load_weights(ff)
    for n, a in inputs.items():
        ts[n].set_tensor(ff, a)
    ff.forward()
    return np.asarray(out.get_tensor(ff)).reshape(want.shape), want


def _alarm(*_):
    raise TimeoutError("over the time limit")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", choices=("torchvision", "timm", "hf"), default="torchvision")
    ap.add_argument("--via", choices=("torch", "onnx"), default="torch")
    ap.add_argument("--models", default="", help="comma-separated names (default: the zoo's list here)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per model")
    a = ap.parse_args(argv)
    names = [n for n in a.models.split(",") if n] or list({"timm": TIMM, "hf": HF}.get(a.zoo, TORCHVISION))
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    with tempfile.TemporaryDirectory(prefix="flexrt_zoo_") as work:
        for name in names:
            t0 = time.perf_counter()
            signal.alarm(a.timeout)
            try:
                got, want = convert(*build(a.zoo, name), a.via, work, hf=a.zoo == "hf")
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
