"""Building blocks shared by the model zoo's definition scripts (the zoo listing skips this module).

Every function takes the ``FFModel`` being built as its first argument and only calls FlexFlow's
layer API on it, so a block reads like the lines of a definition script it replaces:

- ``conv_bn``: torchvision's ``Conv2d(bias=False)`` + ``BatchNorm2d`` (+ ``ReLU``) as separate ops;
- ``bottleneck`` and ``resnet``: torchvision's ResNet / ResNeXt (He et al. 2016; Xie et al. 2017);
- ``embed_steps`` and ``lstm_stack``: FlexFlow's unrolled RNNs (one embedding and one LSTM cell per
  time step, every step of a layer sharing that layer's weights through ``shared_op``);
- ``transformer_encoder_layer`` / ``transformer_decoder_layer``: post-LN Transformer layers
  (Vaswani et al. 2017; BERT uses the encoder layer);
- ``take_int_flag``: a script-specific integer flag (``--seq-length 128``), taken out of
  ``sys.argv`` before ``FFConfig()`` parses the rest.

Scripts import it as ``from flexrt.examples._blocks import ...`` (``examples/`` is installed as
``flexrt.examples``), so each one still runs on its own: ``python examples/resnet50.py -b 64``.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from flexrt.core import ActiMode, AggrMode, DataType, PoolType

# Last dimension, for layer_norm over the hidden features.
LAST_AXIS = (-1,)


def take_int_flag(flag: str, default: int, argv: Optional[list] = None) -> int:
    """The positive integer after ``flag`` (``--flag N`` or ``--flag=N``), removed from ``argv``.

    ``argv`` defaults to ``sys.argv``. The flag and its value are taken out so that ``FFConfig()``,
    which rejects flags it does not know, parses the rest; call this before ``FFConfig()``.
    Returns ``default`` when the flag is absent.

    Example: ``take_int_flag("--seq-length", 512)`` is 128 for ``bert_large.py -b 4 --seq-length 128``.
    """
    args = sys.argv if argv is None else argv
    for i, arg in enumerate(args):
        if arg == flag:
            if i + 1 >= len(args):
                raise SystemExit(f"{flag} needs a value (a positive integer)")
            text, span = args[i + 1], 2
        elif arg.startswith(flag + "="):
            text, span = arg.split("=", 1)[1], 1
        else:
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise SystemExit(f"{flag} got {text!r}; valid: a positive integer")
        del args[i:i + span]
        return value
    return default


# ---------------------------------------------------------------------------------------------
# CNNs (torchvision layouts)
# ---------------------------------------------------------------------------------------------

def conv_bn(ffmodel, x, out_channels: int, kernel_h: int, kernel_w: int, stride_h: int = 1, stride_w: int = 1,
            padding_h: int = 0, padding_w: int = 0, groups: int = 1, relu: bool = True, name: str = "conv"):
    """Conv2d without bias, BatchNorm (no fused ReLU) and, when ``relu``, a separate ReLU: three ops,
    as torchvision's ``BasicConv2d`` / ResNet blocks count them."""
    t = ffmodel.conv2d(x, out_channels, kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w,
                       groups=groups, use_bias=False, name=name)
    t = ffmodel.batch_norm(t, relu=False, name=name + ".bn")
    if relu:
        t = ffmodel.relu(t, name=name + ".relu")
    return t


def bottleneck(ffmodel, x, in_channels: int, planes: int, stride: int, groups: int = 1, base_width: int = 64,
               name: str = "block"):
    """torchvision's ``Bottleneck`` (expansion 4, stride on the 3x3 conv as in ResNet v1.5);
    ``groups``/``base_width`` give ResNeXt's grouped 3x3 (32x4d: groups 32, base width 4)."""
    width = int(planes * (base_width / 64.0)) * groups
    out_channels = planes * 4
    out = conv_bn(ffmodel, x, width, 1, 1, name=name + ".conv1")
    out = conv_bn(ffmodel, out, width, 3, 3, stride, stride, 1, 1, groups=groups, name=name + ".conv2")
    out = conv_bn(ffmodel, out, out_channels, 1, 1, relu=False, name=name + ".conv3")
    if stride != 1 or in_channels != out_channels:
        identity = conv_bn(ffmodel, x, out_channels, 1, 1, stride, stride, relu=False, name=name + ".downsample")
    else:
        identity = x
    out = ffmodel.add(out, identity, name=name + ".add")
    return ffmodel.relu(out, name=name + ".relu")


def resnet(ffmodel, x, layers: Sequence[int], groups: int = 1, width_per_group: int = 64, num_classes: int = 1000):
    """torchvision's ResNet over NCHW images ``x``: stem, four stages of bottlenecks, global average
    pool, classifier and softmax. ``layers`` is blocks per stage: [3, 4, 6, 3] is ResNet-50."""
    t = conv_bn(ffmodel, x, 64, 7, 7, 2, 2, 3, 3, name="conv1")
    t = ffmodel.pool2d(t, 3, 3, 2, 2, 1, 1, PoolType.POOL_MAX, name="maxpool")
    in_channels = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
        for i in range(blocks):
            stride = 2 if (stage > 0 and i == 0) else 1
            t = bottleneck(ffmodel, t, in_channels, planes, stride, groups, width_per_group,
                           name=f"layer{stage + 1}.{i}")
            in_channels = planes * 4
    h, w = t.dims[2], t.dims[3]
    t = ffmodel.pool2d(t, h, w, 1, 1, 0, 0, PoolType.POOL_AVG, name="avgpool")
    t = ffmodel.flat(t, name="flat")
    t = ffmodel.dense(t, num_classes, name="fc")
    return ffmodel.softmax(t, name="softmax")


# ---------------------------------------------------------------------------------------------
# Unrolled RNNs (FlexFlow §8: one op per layer per time step, weights shared across steps)
# ---------------------------------------------------------------------------------------------

def embed_steps(ffmodel, tokens, vocab_size: int, embed_dim: int, name: str = "embed", shared_op=None):
    """Token ids ``tokens`` [b, T] (int64) -> T tensors [b, embed_dim], one embedding lookup per step.

    Each step is a bag of one index summed (``AGGR_MODE_SUM``), i.e. a plain lookup that yields
    [b, dim] directly; every step shares the table of the first step (or of ``shared_op``).
    Returns the per-step tensors and the layer that owns the table.
    """
    num_steps = tokens.dims[1]
    pieces = ffmodel.split(tokens, num_steps, 1, name=name + ".split") if num_steps > 1 else [tokens]
    outputs = []
    for t, piece in enumerate(pieces):
        e = ffmodel.embedding(piece, vocab_size, embed_dim, AggrMode.AGGR_MODE_SUM, shared_op=shared_op,
                              name=f"{name}.t{t}")
        if shared_op is None:
            shared_op = e.owner_op
        outputs.append(e)
    return outputs, shared_op


def lstm_stack(ffmodel, inputs, num_layers: int, hidden_size: int, name: str = "lstm", initial_states=None):
    """Stacked LSTM unrolled over the steps ``inputs`` (a list of [b, in] tensors).

    Layer l at step t takes layer l-1's output at step t and its own state from step t-1; every
    step of a layer shares that layer's weights (``shared_op`` = the layer's first cell).
    ``initial_states`` is one (h, c) pair per layer; without it the states start from one zero
    input tensor [b, hidden_size] (FlexFlow's RNNs start from zero-filled regions).

    Returns (outputs of the top layer per step, final (h, c) of each layer).
    """
    batch = inputs[0].dims[0]
    if initial_states is None:
        zeros = ffmodel.create_tensor([batch, hidden_size], DataType.DT_FLOAT)
        initial_states = [(zeros, zeros)] * num_layers
    final_states = []
    xs = list(inputs)
    for layer in range(num_layers):
        h, c = initial_states[layer]
        cell = None
        outputs = []
        for t, x in enumerate(xs):
            h, c = ffmodel.lstm(x, h, c, hidden_size, shared_op=cell, name=f"{name}.l{layer}.t{t}")
            if cell is None:
                cell = h.owner_op
            outputs.append(h)
        final_states.append((h, c))
        xs = outputs
    return xs, final_states


# ---------------------------------------------------------------------------------------------
# Transformers (post-LN, as in Vaswani et al. 2017 and BERT)
# ---------------------------------------------------------------------------------------------

def _residual_norm(ffmodel, x, sublayer_out, dropout: float, name: str):
    if dropout > 0:
        sublayer_out = ffmodel.dropout(sublayer_out, dropout, 0, name=name + ".dropout")
    t = ffmodel.add(x, sublayer_out, name=name + ".add")
    return ffmodel.layer_norm(t, list(LAST_AXIS), name=name + ".ln")


def feed_forward(ffmodel, x, d_model: int, d_ff: int, activation: ActiMode, name: str):
    t = ffmodel.dense(x, d_ff, activation, name=name + ".fc1")
    return ffmodel.dense(t, d_model, name=name + ".fc2")


def transformer_encoder_layer(ffmodel, x, d_model: int, num_heads: int, d_ff: int,
                              activation: ActiMode = ActiMode.AC_MODE_RELU, dropout: float = 0.1,
                              name: str = "encoder"):
    """Self-attention and a two-layer feed-forward network, each followed by dropout, a residual
    add and LayerNorm (post-LN). ``x``: [b, seq, d_model]."""
    a = ffmodel.multihead_attention(x, x, x, d_model, num_heads, dropout=dropout, name=name + ".attn")
    x = _residual_norm(ffmodel, x, a, dropout, name + ".attn")
    f = feed_forward(ffmodel, x, d_model, d_ff, activation, name + ".ffn")
    return _residual_norm(ffmodel, x, f, dropout, name + ".ffn")


def transformer_decoder_layer(ffmodel, x, memory, d_model: int, num_heads: int, d_ff: int,
                              activation: ActiMode = ActiMode.AC_MODE_RELU, dropout: float = 0.1,
                              name: str = "decoder"):
    """Self-attention, attention over the encoder output ``memory``, and a feed-forward network,
    each post-LN. The causal mask of the self-attention does not change shapes, weights or FLOPs
    and is not represented (FlexFlow's multihead_attention has no mask argument)."""
    a = ffmodel.multihead_attention(x, x, x, d_model, num_heads, dropout=dropout, name=name + ".self_attn")
    x = _residual_norm(ffmodel, x, a, dropout, name + ".self_attn")
    a = ffmodel.multihead_attention(x, memory, memory, d_model, num_heads, dropout=dropout,
                                    name=name + ".cross_attn")
    x = _residual_norm(ffmodel, x, a, dropout, name + ".cross_attn")
    f = feed_forward(ffmodel, x, d_model, d_ff, activation, name + ".ffn")
    return _residual_norm(ffmodel, x, f, dropout, name + ".ffn")
