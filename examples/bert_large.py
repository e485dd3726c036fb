"""BERT-Large: 24 post-LN layers, hidden 1024, 16 heads, FFN 4096, seq 512 (Unity, DisCo): 335 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (BERT-Large on WikiText-2, per-GPU batch 4) and DisCo
§6.1 ("Bert [51]"). Configuration as the published BERT-Large: vocabulary 30,522, 512 learned
positions, 2 token types; embeddings = word + position + token type, LayerNorm, dropout 0.1; 24
encoder layers, each multi-head self-attention (16 heads, attention dropout 0.1) and a 4096-wide
GELU feed-forward network, each followed by dropout 0.1, a residual add and LayerNorm (post-LN);
the pooler, dense 1024 with tanh on the first token. Sequence length 512 by default
(``--seq-length N`` or ``build_model(ffconfig, seq_length=N)``, at most 512).

Deliberate differences: position ids are an input tensor [b, seq] (FlexFlow has no arange
operator; a data loader feeds 0..seq-1), the attention mask is not represented (it changes no
shape, weight or FLOP count), and a 2-way classifier with softmax on the pooled output (BERT's
next-sentence head, 2,050 parameters) stands in for the pre-training heads so the model has a
loss to train. Parameters: 335,141,888 for the published model, 335,143,938 with the head.

This script builds the graph and prints it; train it with `flexrt train bert_large --machine M` (synthetic data).

Run: python examples/bert_large.py -b 4 --seq-length 512
"""

from flexrt.core import *
from flexrt.examples._blocks import LAST_AXIS, take_int_flag, transformer_encoder_layer

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
HIDDEN = 1024
NUM_LAYERS = 24
NUM_HEADS = 16
FFN_DIM = 4096
DROPOUT = 0.1
NUM_LABELS = 2
SEQ_LENGTH = 512


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    if not 1 <= seq_length <= MAX_POSITIONS:
        raise ValueError(f"bert_large: seq_length must be in [1, {MAX_POSITIONS}], got {seq_length}")
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    input_ids = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    token_type_ids = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    position_ids = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    none = AggrMode.AGGR_MODE_NONE
    words = ffmodel.embedding(input_ids, VOCAB_SIZE, HIDDEN, none, name="embeddings.word")
    positions = ffmodel.embedding(position_ids, MAX_POSITIONS, HIDDEN, none, name="embeddings.position")
    types = ffmodel.embedding(token_type_ids, TYPE_VOCAB_SIZE, HIDDEN, none, name="embeddings.token_type")
    t = ffmodel.add(words, positions, name="embeddings.add1")
    t = ffmodel.add(t, types, name="embeddings.add2")
    t = ffmodel.layer_norm(t, list(LAST_AXIS), eps=1e-12, name="embeddings.ln")
    t = ffmodel.dropout(t, DROPOUT, 0, name="embeddings.dropout")
    for i in range(NUM_LAYERS):
        t = transformer_encoder_layer(ffmodel, t, HIDDEN, NUM_HEADS, FFN_DIM, ActiMode.AC_MODE_GELU, DROPOUT,
                                      name=f"encoder.{i}")
    # Pooler: the hidden state of the first token ([CLS]).
    if seq_length > 1:
        t = ffmodel.split(t, [1, seq_length - 1], 1, name="pooler.first_token")[0]
    t = ffmodel.reshape(t, [b, HIDDEN], name="pooler.reshape")
    t = ffmodel.dense(t, HIDDEN, ActiMode.AC_MODE_TANH, name="pooler.dense")
    t = ffmodel.dense(t, NUM_LABELS, name="classifier")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
