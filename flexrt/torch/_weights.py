"""Weights in PyTorch's (and ONNX's) layouts, converted to FFModel's and written into a compiled
model; shared by ``flexrt.torch`` and ``flexrt.onnx``. NumPy only.

Layouts: a PyTorch ``Linear`` weight (and an ONNX ``Gemm`` B with transB=1) is [out, in], FFModel's
dense kernel is [in, out]; ``Conv2d`` weights are OIHW on both sides; BatchNorm's weight/bias are
FFModel's scale/bias; LayerNorm's weight/bias its gamma/beta; an embedding table is [num, dim] on
both sides; ``MultiheadAttention``'s ``in_proj_weight`` [3E, E] splits into wq, wk, wv (each
transposed to [in, E]) and ``out_proj.weight`` transposes to wo.

Entry points: ``ff_layout``, ``set_layer_weights``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from flexrt.errors import ConfigError, ShapeError
from flexrt.model.dataloader import batch_dtype
from flexrt.torch._windows import dense_kernel


def ff_layout(kind: str, params: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """FFModel's weights (by weight name) of a layer of ``kind`` from its source parameters:

    - ``dense``: weight [out, in], bias -> kernel [in, out], bias
    - ``conv2d``: weight OIHW, bias -> kernel, bias
    - ``conv1d``: weight [out, in / groups, k], bias -> kernel [out, in / groups, 1, k], bias
    - ``conv2d_dilated``: weight OIHW, bias -> the kernel [I kh kw, O] of the dense layer over the
      input's windows, bias
    - ``conv_transpose2d``: weight [in, out / groups, kh, kw], bias, groups (a number) -> the kernel
      of the conv2d of stride 1 over the dilated input: [out, in / groups, kh, kw], flipped in kh and kw
    - ``batch_norm``: weight, bias -> scale, bias; ``layer_norm``: weight, bias -> gamma, beta
    - ``embedding``: weight -> table; ``parameter`` (a parameter read directly): weight -> kernel [1, n]
    - ``lstm`` (one layer of nn.LSTM): weight_ih [4H, in], weight_hh [4H, H], bias_ih, bias_hh ->
      w_ih [in, 4H], w_hh [H, 4H], bias (the sum; gate blocks i, f, g, o on both sides)
    - ``lstm_onnx``: ONNX LSTM's W [1, 4H, in], R [1, 4H, H], B [1, 8H] (blocks i, o, f, c) -> the same
    - ``multihead_attention``: in_proj_weight [3E, E] (or q/k/v_proj_weight), in_proj_bias,
      out_proj_weight, out_proj_bias -> wq, wk, wv, wo, bq, bk, bv, bo
    """
    p = {k: (None if v is None else np.asarray(v)) for k, v in params.items()}
    if kind == "dense":
        out = {"kernel": np.ascontiguousarray(p["weight"].T)}
        return out | ({"bias": p["bias"]} if p.get("bias") is not None else {})
    if kind == "conv2d":
        return {"kernel": p["weight"]} | ({"bias": p["bias"]} if p.get("bias") is not None else {})
    if kind == "conv1d":    # [out, in / groups, k] -> the 1 x k kernel of conv2d
        w = p["weight"]
        return {"kernel": np.ascontiguousarray(w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))} | \
            ({"bias": p["bias"]} if p.get("bias") is not None else {})
    if kind == "conv2d_dilated":   # a dense layer over the windows: kernel [in * kh * kw, out]
        return {"kernel": dense_kernel(p["weight"])} | ({"bias": p["bias"]} if p.get("bias") is not None else {})
    if kind == "conv_transpose2d":
        return _conv_transpose(p)
    if kind == "batch_norm":
        return {"scale": p["weight"], "bias": p["bias"]}
    if kind == "layer_norm":
        out = {"gamma": p["weight"]} if p.get("weight") is not None else {}
        return out | ({"beta": p["bias"]} if p.get("bias") is not None else {})
    if kind == "embedding":
        return {"table": p["weight"]}
    if kind == "parameter":   # a free parameter: the kernel [1, n] of a dense layer of the constant 1
        return {"kernel": np.ascontiguousarray(p["weight"].reshape(1, -1))}
    if kind == "multihead_attention":
        return _attention(p)
    if kind == "lstm":   # one bias: torch's two summed
        return {"w_ih": np.ascontiguousarray(p["weight_ih"].T), "w_hh": np.ascontiguousarray(p["weight_hh"].T),
                "bias": p["bias_ih"] + p["bias_hh"]}
    if kind == "lstm_onnx":
        return _onnx_lstm(p)
    raise ConfigError(f"no weight layout for layer kind {kind!r}")


def _conv_transpose(p: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    w, g = p["weight"], int(p["groups"]) if p.get("groups") is not None else 1
    cin, cout_g, kh, kw = w.shape
    if cin % g:
        raise ShapeError(f"a transposed convolution's weight {list(w.shape)} does not split into {g} groups")
    k = w.reshape(g, cin // g, cout_g, kh, kw).transpose(0, 2, 1, 3, 4).reshape(g * cout_g, cin // g, kh, kw)
    out = {"kernel": np.ascontiguousarray(k[:, :, ::-1, ::-1])}
    return out | ({"bias": p["bias"]} if p.get("bias") is not None else {})


def _onnx_lstm(p: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """ONNX LSTM's W [1, 4H, in], R [1, 4H, H], B [1, 8H] (gate blocks i, o, f, c) as FFModel's
    cell (blocks i, f, g, o; one bias, the sum of Wb and Rb)."""
    w, r = p["W"][0], p["R"][0]
    h = r.shape[1]
    order = np.concatenate([np.arange(k * h, (k + 1) * h) for k in (0, 2, 3, 1)])
    b = p.get("B")
    bias = (b[0][:4 * h] + b[0][4 * h:]) if b is not None else np.zeros(4 * h, dtype=w.dtype)
    return {"w_ih": np.ascontiguousarray(w[order].T), "w_hh": np.ascontiguousarray(r[order].T),
            "bias": np.ascontiguousarray(bias[order])}


def _attention(p: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    w = p.get("in_proj_weight")
    if w is not None:
        wq, wk, wv = np.split(w, 3, axis=0)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    out = {"wq": wq.T, "wk": wk.T, "wv": wv.T, "wo": p["out_proj_weight"].T}
    if p.get("in_proj_bias") is not None:
        bq, bk, bv = np.split(p["in_proj_bias"], 3)
        out |= {"bq": bq, "bk": bk, "bv": bv, "bo": p["out_proj_bias"]}
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def set_layer_weights(ffmodel, layer_name: str, weights: Mapping[str, np.ndarray]) -> None:
    """Write ``weights`` (FFModel's layout, by weight name) into layer ``layer_name`` of a compiled
    ``ffmodel``, cast to each weight's dtype; every weight of the layer must be given."""
    layer = ffmodel.get_layer_by_name(layer_name)
    names = [w.name for w in layer.weights]
    if set(names) != set(weights):
        raise ConfigError(f"layer '{layer_name}' ({layer.kind}) has weights {', '.join(names) or 'none'}; the source "
                          f"gives {', '.join(sorted(weights)) or 'none'}")
    for i, w in enumerate(layer.weights):
        param = layer.get_parameter_by_id(i)
        arr = np.asarray(weights[w.name])
        if tuple(arr.shape) != tuple(param.dims):
            raise ShapeError(f"layer '{layer_name}': weight {w.name} is {list(param.dims)} in the FFModel, the source "
                             f"gives {list(arr.shape)}")
        want = batch_dtype(param.data_type)
        param.set_weights(ffmodel, np.ascontiguousarray(arr, dtype=want))
