"""torch's recurrent modules -> ``IRNode``s (see ``flexrt.torch._fx``): nn.LSTM and nn.GRU as one
node each, which the builder unrolls (``flexrt.torch._recurrent``). One direction, with biases.

Entry point: ``RECURRENT_MODULES``.
"""

from __future__ import annotations

from torch import nn

from flexrt.errors import FrontendWarning, warn_caller
from flexrt.torch._fx import WeightSource, _bind, origin


def _check(ctx, node, m) -> None:
    problems = [k for k, bad in (("bidirectional=True", m.bidirectional), ("proj_size", getattr(m, "proj_size", 0)),
                                 ("bias=False", not m.bias),
                                 ("dropout between layers in training", m.dropout and m.training and m.num_layers > 1))
                if bad]
    if problems:
        raise ctx.error(node, f"{type(m).__name__} with {', '.join(problems)}: flexrt unrolls one direction with "
                              f"biases")


def _m_lstm(ctx, node, m: nn.LSTM):
    a = _bind(ctx, node, ["input", "hx"], {"hx": None})
    _check(ctx, node, m)
    hx = a["hx"]
    ins = [a["input"].name] + ([v.name for v in hx] if isinstance(hx, (tuple, list)) else [])
    owner = ctx.first_layer.get(id(m))
    if owner is None:
        ctx.first_layer[id(m)] = node.name
        for k in range(m.num_layers):
            ctx.weights.append(WeightSource(f"{node.name}.l{k}", "lstm", _LSTMLayer(m, k)))
        warn_caller(f"torch node '{node.name}' ({origin(node)}): FFModel's LSTM cell has one bias, torch's "
                    f"bias_ih + bias_hh: the same forward, {4 * m.hidden_size * m.num_layers} parameters fewer than "
                    f"torch counts, and a gradient step moves the sum once where torch moves each of the two",
                    FrontendWarning)
    kws = [("batch_first", bool(m.batch_first))] + ([("shares", owner)] if owner else [])
    ctx.add(node, "LSTM", ins, [m.hidden_size, m.num_layers], kws)


class _LSTMLayer:
    """Layer ``k`` of an nn.LSTM as a weight source (``_params`` reads its four tensors)."""

    def __init__(self, m: nn.LSTM, k: int) -> None:
        self.weight_ih, self.weight_hh = getattr(m, f"weight_ih_l{k}"), getattr(m, f"weight_hh_l{k}")
        self.bias_ih, self.bias_hh = getattr(m, f"bias_ih_l{k}"), getattr(m, f"bias_hh_l{k}")


class _Dense:
    """One of a GRU layer's two dense layers as a weight source (``weight``, ``bias``)."""

    def __init__(self, m: nn.GRU, k: int, part: str) -> None:
        self.weight, self.bias = getattr(m, f"weight_{part}_l{k}"), getattr(m, f"bias_{part}_l{k}")


def _m_gru(ctx, node, m: nn.GRU):
    a = _bind(ctx, node, ["input", "hx"], {"hx": None})
    _check(ctx, node, m)
    ins = [a["input"].name] + ([a["hx"].name] if a["hx"] is not None else [])
    owner = ctx.first_layer.get(id(m))
    if owner is None:
        ctx.first_layer[id(m)] = node.name
        for k in range(m.num_layers):
            for part in ("ih", "hh"):
                ctx.weights.append(WeightSource(f"{node.name}.l{k}.{part}", "dense", _Dense(m, k, part)))
    kws = [("batch_first", bool(m.batch_first))] + ([("shares", owner)] if owner else [])
    ctx.add(node, "GRU", ins, [m.hidden_size, m.num_layers], kws)


RECURRENT_MODULES = {nn.LSTM: _m_lstm, nn.GRU: _m_gru}
