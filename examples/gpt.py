"""GPT: decoder-only transformer, causal attention; GPT-2 small by default, GPT-3 by --config: 163.0 M parameters.

Source: Radford et al. 2019 (GPT-2: 12/24/36/48 layers, hidden 768/1024/1280/1600, 1,024
positions, vocabulary 50,257) and Brown et al. 2020, Table 2.1 (GPT-3: 96 layers, hidden 12,288,
96 heads, context 2,048; Megatron-LM's 175B runs use the same shape).

Structure:
- token and learned position embeddings, added, then dropout;
- L pre-LN blocks, each:
  - LayerNorm, causal multi-head self-attention, dropout, residual add;
  - LayerNorm, a 4h-wide GELU feed-forward network, dropout, residual add;
- a final LayerNorm;
- the language-model head: a dense layer to the vocabulary and a softmax over it at every position,
  scored with sparse cross-entropy on the next token (labels [b, seq, 1]).

Differences from the published models:
- positions are an input tensor [b, seq] (FlexFlow has no arange operator; a data loader feeds
  0..seq-1);
- the head is a separate dense layer. GPT ties it to the token embedding, which a FlexFlow-style
  graph cannot share between an embedding and a dense layer, so there are vocabulary x hidden more
  parameters.

Flags:
- ``--config NAME``: one of ``CONFIGS``: gpt2 (124M), gpt2-medium (350M), gpt2-large (774M),
  gpt2-xl (1.5B), gpt3-175b, and gpt-tiny for tests;
- ``--layers``, ``--hidden``, ``--heads``, ``--seq-length``, ``--vocab``: override it (0 keeps the
  configuration's).

Run: python examples/gpt.py -b 8 --config gpt2 --seq-length 256
"""

from flexrt.core import *
from flexrt.examples._blocks import LAST_AXIS

# name -> (layers, hidden, heads, sequence length, vocabulary)
CONFIGS = {
    "gpt-tiny": (2, 32, 4, 16, 64),
    "gpt2": (12, 768, 12, 1024, 50257),
    "gpt2-medium": (24, 1024, 16, 1024, 50257),
    "gpt2-large": (36, 1280, 20, 1024, 50257),
    "gpt2-xl": (48, 1600, 25, 1024, 50257),
    "gpt3-175b": (96, 12288, 96, 2048, 50257),
}
DROPOUT = 0.1


def gpt_block(ffmodel, x, hidden: int, heads: int, dropout: float, name: str):
    """One pre-LN decoder block: causal self-attention and a 4h GELU MLP, each on a LayerNorm of the
    residual stream and added back to it. ``x``: [b, seq, hidden]."""
    h = ffmodel.layer_norm(x, list(LAST_AXIS), name=name + ".ln1")
    a = ffmodel.multihead_attention(h, h, h, hidden, heads, dropout=dropout, name=name + ".attn", causal=True)
    if dropout > 0:
        a = ffmodel.dropout(a, dropout, 0, name=name + ".attn.dropout")
    x = ffmodel.add(x, a, name=name + ".attn.add")
    h = ffmodel.layer_norm(x, list(LAST_AXIS), name=name + ".ln2")
    h = ffmodel.dense(h, 4 * hidden, ActiMode.AC_MODE_GELU, name=name + ".mlp.fc1")
    h = ffmodel.dense(h, hidden, name=name + ".mlp.fc2")
    if dropout > 0:
        h = ffmodel.dropout(h, dropout, 0, name=name + ".mlp.dropout")
    return ffmodel.add(x, h, name=name + ".mlp.add")


def build_model(ffconfig, config="gpt2", layers=0, hidden=0, heads=0, seq_length=0, vocab=0, dropout=DROPOUT):
    if config not in CONFIGS:
        raise ValueError(f"gpt: unknown --config {config!r}; valid: {', '.join(CONFIGS)}")
    base = CONFIGS[config]
    for flag, value in (("--layers", layers), ("--hidden", hidden), ("--heads", heads), ("--seq-length", seq_length),
                        ("--vocab", vocab)):
        if value < 0:
            raise ValueError(f"gpt: {flag} must be >= 0 (0 keeps the configuration's), got {value}")
    layers, hidden, heads, seq_length, vocab = (given or default for given, default in
                                                zip((layers, hidden, heads, seq_length, vocab), base))
    if hidden % heads:
        raise ValueError(f"gpt: --heads {heads} does not divide --hidden {hidden}")
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    tokens = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    positions = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    none = AggrMode.AGGR_MODE_NONE
    t = ffmodel.add(ffmodel.embedding(tokens, vocab, hidden, none, name="wte"),
                    ffmodel.embedding(positions, seq_length, hidden, none, name="wpe"), name="embed.add")
    if dropout > 0:
        t = ffmodel.dropout(t, dropout, 0, name="embed.dropout")
    for i in range(layers):
        t = gpt_block(ffmodel, t, hidden, heads, dropout, name=f"h.{i}")
    t = ffmodel.layer_norm(t, list(LAST_AXIS), name="ln_f")
    t = ffmodel.dense(t, vocab, use_bias=False, name="lm_head")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
