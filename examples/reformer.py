"""Reformer: 12 reversible layers, LSH attention (8 heads, 2 hashes), chunked FFN, seq 4096: 39.4 M parameters.

Source: DisCo §6.1 benchmark models ("Reformer [52]"); the model of Kitaev, Kaiser and Levskaya,
*Reformer: The Efficient Transformer* (ICLR 2020): reversible residual layers (§3), LSH
self-attention with shared query/key projections (§2) and chunked feed-forward layers (§3).
Sizes follow the paper's enwik8 language model: a byte vocabulary (256), 12 layers, 8 heads of 64
channels, causal attention, chunks of 64 positions, 2 hash rounds during training. Choices made here
(DisCo gives no sizes beyond the model's name): sequence length 4096 (``--seq-length N`` or
``build_model(ffconfig, seq_length=N)``, at most 4096), as many buckets as chunks (``seq / 64``,
rounded to an even number, at least 2), feed-forward chunks of 1024 positions, and fixed random
rotations per layer (seed = layer index; the paper draws new rotations at every step).

Layers: the embedding (d_model 1024) is split along its channels into two halves x1, x2 of 512; each
reversible layer computes y1 = x1 + LSHAttention(LayerNorm(x2)) and y2 = x2 + FFN(LayerNorm(y1)),
FFN = dense 512 -> 2048 (ReLU) -> 512 applied to each chunk of the sequence with the weights of the
first chunk (``shared_op``); the halves are concatenated at the end, normalized and projected onto
the vocabulary.

Deliberate differences: the two halves come from splitting the embedding's channels (the paper
duplicates the embedding into both halves); positions are learned (a 4096 x 1024 table fed position
ids) rather than axial; no dropout; reversibility itself (recomputing a layer's inputs from its
outputs in the backward pass instead of storing them) is a memory schedule the graph does not
express, so activations are kept as for any layer. Parameters: 262,144 (embedding) + 4,194,304
(positions) + 12 x 2,888,192 (layers: 3 x 512 x 512 attention, two LayerNorms, the FFN) + 2,048
(final LayerNorm) + 262,400 (output) = 39,379,200.

This script builds the graph and prints it; train it with `flexrt train reformer --machine M` (synthetic data).

Run: python examples/reformer.py -b 8 --seq-length 4096
"""

from flexrt.core import *
from flexrt.examples._blocks import LAST_AXIS, take_int_flag

VOCAB_SIZE = 256
MAX_POSITIONS = 4096
D_MODEL = 1024
D_HALF = D_MODEL // 2
NUM_HEADS = 8
FFN_DIM = 2048
NUM_LAYERS = 12
N_HASHES = 2
LSH_CHUNK = 64
FFN_CHUNK = 1024
SEQ_LENGTH = 4096


def num_buckets(seq_length: int) -> int:
    """As many buckets as attention chunks, rounded down to an even number, at least 2."""
    return max(2, (seq_length // LSH_CHUNK) // 2 * 2)


def chunked_feed_forward(ffmodel, x, seq_length: int, name: str):
    """dense FFN_DIM (ReLU) then dense D_HALF on each chunk of FFN_CHUNK positions, every chunk
    sharing the first chunk's weights; the chunks are concatenated back along the sequence."""
    sizes = [FFN_CHUNK] * (seq_length // FFN_CHUNK) + ([seq_length % FFN_CHUNK] if seq_length % FFN_CHUNK else [])
    chunks = ffmodel.split(x, sizes, 1, name=name + ".split") if len(sizes) > 1 else [x]
    shared = {}
    outs = []
    for i, chunk in enumerate(chunks):
        h = ffmodel.dense(chunk, FFN_DIM, ActiMode.AC_MODE_RELU, shared_op=shared.get("fc1"), name=f"{name}.fc1.{i}")
        o = ffmodel.dense(h, D_HALF, shared_op=shared.get("fc2"), name=f"{name}.fc2.{i}")
        shared.setdefault("fc1", h.owner_op)
        shared.setdefault("fc2", o.owner_op)
        outs.append(o)
    return ffmodel.concat(outs, 1, name=name + ".concat") if len(outs) > 1 else outs[0]


def reversible_layer(ffmodel, x1, x2, seq_length: int, index: int, name: str):
    """(x1, x2) -> (y1, y2): y1 = x1 + LSHAttention(LayerNorm(x2)), y2 = x2 + FFN(LayerNorm(y1)).
    Layer ``index`` hashes with its own fixed rotations (seed = index)."""
    a = ffmodel.layer_norm(x2, LAST_AXIS, name=name + ".attn_norm")
    a = ffmodel.lsh_self_attention(a, D_HALF, NUM_HEADS, num_buckets(seq_length), N_HASHES, LSH_CHUNK, causal=True,
                                   seed=index, name=name + ".attn")
    y1 = ffmodel.add(x1, a, name=name + ".y1")
    f = ffmodel.layer_norm(y1, LAST_AXIS, name=name + ".ffn_norm")
    f = chunked_feed_forward(ffmodel, f, seq_length, name + ".ffn")
    y2 = ffmodel.add(x2, f, name=name + ".y2")
    return y1, y2


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    if not 1 <= seq_length <= MAX_POSITIONS:
        raise ValueError(f"reformer: seq_length must be in [1, {MAX_POSITIONS}], got {seq_length}")
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    tokens = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    positions = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    none = AggrMode.AGGR_MODE_NONE
    t = ffmodel.embedding(tokens, VOCAB_SIZE, D_MODEL, none, name="embed.tokens")
    p = ffmodel.embedding(positions, MAX_POSITIONS, D_MODEL, none, name="embed.positions")
    t = ffmodel.add(t, p, name="embed.add")
    x1, x2 = ffmodel.split(t, 2, 2, name="halves")
    for i in range(NUM_LAYERS):
        x1, x2 = reversible_layer(ffmodel, x1, x2, seq_length, i, f"layer.{i}")
    t = ffmodel.concat([x1, x2], 2, name="concat")
    t = ffmodel.layer_norm(t, LAST_AXIS, name="final_norm")
    t = ffmodel.dense(t, VOCAB_SIZE, name="output")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
