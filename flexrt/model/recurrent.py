"""Recurrent layers unrolled over time into FFModel layers; shared by the front ends (PyTorch's and
ONNX's LSTM and GRU, Keras' LSTM and SimpleRNN).

- ``time_steps``: a [N, T, F] (or [T, N, F]) batch as T tensors [N, F];
- ``gathered``: T tensors [N, H] stacked back along the time axis;
- ``lstm_layer``: one LSTM layer over the steps, FFModel's LSTM cell per step (weights w_ih [F, 4H],
  w_hh [H, 4H], bias [4H], gates i, f, g, o: Keras' layout), every step after the first reading the
  first step's weights.

Entry points: ``time_steps``, ``gathered``, ``lstm_layer``.
"""

from __future__ import annotations


def time_steps(ff, x, axis_t: int, name: str) -> list:
    """``x`` ([T, N, F] or [N, T, F]: the time axis ``axis_t``) as T tensors [N, F]."""
    t = x.dims[axis_t]
    pieces = [x] if t == 1 else ff.split(x, [1] * t, axis_t, name=f"{name}.steps")
    rest = [d for i, d in enumerate(x.dims) if i != axis_t]
    return [ff.reshape(p, rest, name=f"{name}.step{i}") for i, p in enumerate(pieces)]


def gathered(ff, steps: list, axis_t: int, name: str):
    """T tensors [N, H] stacked along ``axis_t`` of the result."""
    parts = [ff.reshape(s, [*s.dims[:axis_t], 1, *s.dims[axis_t:]], name=f"{name}.part{i}") for i, s in
             enumerate(steps)]
    return parts[0] if len(parts) == 1 else ff.concat(parts, axis_t, name=name)


def lstm_layer(ff, steps: list, h, c, hidden: int, cell: str, owner=None) -> tuple[list, object, object]:
    """One LSTM layer over ``steps`` from states ``h``, ``c``: (the outputs per step, the last h, the
    last c). The first step's cell is ``cell`` (reading ``owner``'s weights when given), step t's
    ``{cell}.t{t}`` reading the first's."""
    outs = []
    for t, xt in enumerate(steps):
        h, c = ff.lstm(xt, h, c, hidden, shared_op=owner if t == 0 else cell, name=cell if t == 0 else f"{cell}.t{t}")
        outs.append(h)
    return outs, h, c
