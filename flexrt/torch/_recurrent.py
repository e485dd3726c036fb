"""Recurrent layers of the IR builder (``flexrt.torch._build``): torch's multi-layer LSTM (and ONNX
LSTM) unrolled into FFModel's LSTM cells, and torch's GRU unrolled into dense layers and element-wise
ones (FFModel has no GRU cell). The steps of a layer share its first step's weights.

Entry point: ``HANDLERS``.
"""

from __future__ import annotations

from flexrt.errors import ShapeError
from flexrt.model import recurrent
from flexrt.model.tensor import Tensor
from flexrt.torch._build_base import node_error


def _time_steps(b, node, x: Tensor, axis_t: int, name: str) -> list[Tensor]:
    return recurrent.time_steps(b.ff, x, axis_t, name)


def _stacked(b, x: Tensor, layers: int, name: str) -> list[Tensor]:
    """[L, N, H] as L tensors [N, H]."""
    pieces = [x] if layers == 1 else b.ff.split(x, [1] * layers, 0, name=f"{name}.layers")
    return [b.ff.reshape(p, list(x.dims[1:]), name=f"{name}.layer{i}") for i, p in enumerate(pieces)]


def _gathered(b, steps: list[Tensor], axis_t: int, name: str) -> Tensor:
    return recurrent.gathered(b.ff, steps, axis_t, name)


def _unpacked(b, node, ins, f, what: str, states: tuple) -> tuple:
    """(x, hidden size, layers, the time axis, per state in ``states`` its L initial tensors [N, H],
    zeros when not given) of a recurrent node (fields hidden size, layers; keyword ``batch_first``)."""
    x = b.tensor(node, ins[0])
    hidden, layers = f[0], f[1]
    first = bool(node.kw("batch_first", False))
    if x.num_dims != 3:
        raise node_error(node, f"{what} takes [{'N, T' if first else 'T, N'}, features], got {list(x.dims)}",
                         ShapeError)
    axis_t = 1 if first else 0
    given = [t for t in ins[1:1 + len(states)] if t is not None]
    if len(given) == len(states):
        return x, hidden, layers, axis_t, tuple(_stacked(b, b.tensor(node, t, s), layers, f"{node.name}.{s}")
                                                for t, s in zip(given, states))
    zeros = b.ff.create_constant([x.dims[1 - axis_t], hidden], 0.0, x.data_type)
    return x, hidden, layers, axis_t, tuple([zeros] * layers for _ in states)


def _lstm(b, node, ins, f):
    """torch's nn.LSTM (fields: hidden size, layers; keyword ``batch_first``; inputs x and optionally
    h0, c0 [L, N, H]) unrolled: FFModel's LSTM cell per layer and step, the steps of a layer sharing
    its first cell's weights (``{node}.l{k}``). Returns (output, (h_n, c_n)) as torch does."""
    x, hidden, layers, axis_t, (h0, c0) = _unpacked(b, node, ins, f, "an LSTM", ("h0", "c0"))
    ff, name, shares = b.ff, node.name, node.kw("shares")
    steps, h_n, c_n = _time_steps(b, node, x, axis_t, name), [], []
    for k in range(layers):
        steps, h, c = recurrent.lstm_layer(ff, steps, h0[k], c0[k], hidden, f"{name}.l{k}",
                                           f"{shares}.l{k}" if shares else None)
        h_n.append(h)
        c_n.append(c)
    out = _gathered(b, steps, axis_t, f"{name}.output")
    return out, (_gathered(b, h_n, 0, f"{name}.h_n"), _gathered(b, c_n, 0, f"{name}.c_n"))


def _gru(b, node, ins, f):
    """torch's nn.GRU (fields: hidden size, layers; keyword ``batch_first``; inputs x and optionally
    h0 [L, N, H]) unrolled: per layer and step two dense layers (``{node}.l{k}.ih`` of the input,
    ``.hh`` of the state, each with its bias, as torch's two) and the gates, torch's order r, z, n:
    r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r * h_n), h' = n + z * (h - n).
    Returns (output, h_n) as torch does."""
    x, hidden, layers, axis_t, (h0,) = _unpacked(b, node, ins, f, "a GRU", ("h0",))
    ff, name, shares = b.ff, node.name, node.kw("shares")
    steps, h_n = _time_steps(b, node, x, axis_t, name), []
    for k in range(layers):
        cell, h, outs = f"{name}.l{k}", h0[k], []
        for t, xt in enumerate(steps):
            tag = "" if t == 0 else f".t{t}"
            owner = {p: (f"{shares}.l{k}.{p}" if shares else None) if t == 0 else f"{cell}.{p}" for p in ("ih", "hh")}
            gi = ff.dense(xt, 3 * hidden, shared_op=owner["ih"], name=f"{cell}.ih{tag}")
            gh = ff.dense(h, 3 * hidden, shared_op=owner["hh"], name=f"{cell}.hh{tag}")
            (ir, iz, i_n), (hr, hz, hn) = (ff.split(g, [hidden] * 3, 1, name=f"{cell}.{p}_gates{tag}")
                                          for g, p in ((gi, "ih"), (gh, "hh")))
            r = ff.sigmoid(ff.add(ir, hr, name=f"{cell}.r_in{tag}"), name=f"{cell}.r{tag}")
            z = ff.sigmoid(ff.add(iz, hz, name=f"{cell}.z_in{tag}"), name=f"{cell}.z{tag}")
            c = ff.tanh(ff.add(i_n, ff.multiply(r, hn, name=f"{cell}.rh{tag}"), name=f"{cell}.n_in{tag}"),
                        name=f"{cell}.n{tag}")
            h = ff.add(c, ff.multiply(z, ff.subtract(h, c, name=f"{cell}.diff{tag}"), name=f"{cell}.zd{tag}"),
                       name=f"{cell}.h{tag}")
            outs.append(h)
        steps = outs
        h_n.append(h)
    return _gathered(b, steps, axis_t, f"{name}.output"), _gathered(b, h_n, 0, f"{name}.h_n")


HANDLERS = {"LSTM": _lstm, "GRU": _gru}
