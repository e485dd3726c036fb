"""Transformer-base: 6 + 6 layers, d_model 512, 8 heads, FFN 2048, seq 256 (DisCo): 77.2 M parameters.

Source: DisCo §6.1 benchmark models ("Transformer [46]"); sizes of the paper's base model:
d_model 512, 8 heads, feed-forward 2048 with ReLU, dropout 0.1, post-LN layers. Choices made
here (DisCo gives no sizes beyond the model's name): a 32,000-token vocabulary (WMT En-De
byte-pair vocabulary size), one token embedding shared by source and target (``shared_op``),
embeddings scaled by sqrt(d_model), and sequence length 256 for source and target
(``--seq-length N`` or ``build_model(ffconfig, seq_length=N)``, at most 512).

Deliberate differences: positions are learned (a 512 x 512 table shared by encoder and decoder,
fed position ids as an input [b, seq]) rather than sinusoidal constants, since the API has no
constant tensors; the output projection (dense 32,000, no bias) is not tied to the embedding,
since a dense layer cannot share an embedding's table; the decoder's causal mask is not
represented (it changes no shape, weight or FLOP count). Parameters: 16,384,000 (embedding) +
262,144 (positions) + 6 x 3,152,384 (encoder) + 6 x 4,204,032 (decoder) + 16,384,000 (output)
= 77,168,640.

This script builds the graph and prints it; train it with `flexrt train transformer --machine M` (synthetic data).

Run: python examples/transformer.py -b 64 --seq-length 256
"""

import math

from flexrt.core import *
from flexrt.examples._blocks import take_int_flag, transformer_decoder_layer, transformer_encoder_layer

VOCAB_SIZE = 32000
MAX_POSITIONS = 512
D_MODEL = 512
NUM_HEADS = 8
FFN_DIM = 2048
NUM_ENCODER_LAYERS = 6
NUM_DECODER_LAYERS = 6
DROPOUT = 0.1
SEQ_LENGTH = 256


def _embed(ffmodel, tokens, positions, shared, name):
    """Token embedding x sqrt(d_model) + position embedding, then dropout; ``shared`` holds the
    layers owning the token and position tables once the encoder has created them."""
    none = AggrMode.AGGR_MODE_NONE
    tok = ffmodel.embedding(tokens, VOCAB_SIZE, D_MODEL, none, shared_op=shared.get("tok"), name=name + ".tokens")
    pos = ffmodel.embedding(positions, MAX_POSITIONS, D_MODEL, none, shared_op=shared.get("pos"),
                            name=name + ".positions")
    shared.setdefault("tok", tok.owner_op)
    shared.setdefault("pos", pos.owner_op)
    tok = ffmodel.scalar_multiply(tok, math.sqrt(D_MODEL), name=name + ".scale")
    t = ffmodel.add(tok, pos, name=name + ".add")
    return ffmodel.dropout(t, DROPOUT, 0, name=name + ".dropout")


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    if not 1 <= seq_length <= MAX_POSITIONS:
        raise ValueError(f"transformer: seq_length must be in [1, {MAX_POSITIONS}], got {seq_length}")
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    src = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    tgt = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    positions = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    shared = {}
    memory = _embed(ffmodel, src, positions, shared, "encoder.embed")
    for i in range(NUM_ENCODER_LAYERS):
        memory = transformer_encoder_layer(ffmodel, memory, D_MODEL, NUM_HEADS, FFN_DIM, ActiMode.AC_MODE_RELU,
                                           DROPOUT, name=f"encoder.{i}")
    t = _embed(ffmodel, tgt, positions, shared, "decoder.embed")
    for i in range(NUM_DECODER_LAYERS):
        t = transformer_decoder_layer(ffmodel, t, memory, D_MODEL, NUM_HEADS, FFN_DIM, ActiMode.AC_MODE_RELU,
                                      DROPOUT, name=f"decoder.{i}")
    t = ffmodel.dense(t, VOCAB_SIZE, use_bias=False, name="output")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
