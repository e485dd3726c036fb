"""NMT: 2 + 2 LSTM layers of 1024 unrolled 40 steps, attention, softmax per step (FlexFlow): 135.1 M parameters.

Source: FlexFlow (SysML 2019) §8, Table 4 and Fig. 13 ("4 recurrent layers followed by an
attention and a softmax layer", WMT English-German): "NMT includes an encoder and a decoder,
both of which consist of 2 LSTM layers with a hidden size of 1024 ... an attention layer on top
of the last decoder LSTM layer (Bahdanau et al., 2014) ... unrolling steps ... 40". Built as
FlexFlow's unrolled RNNs: per step one embedding lookup (shared table per language) and one LSTM
cell per layer (steps share the layer's weights through ``shared_op``); the encoder starts from
zeros, the decoder from the encoder's final (h, c) of each layer, fed the target words (teacher
forcing). The encoder's top-layer outputs are concatenated along time into a memory [b, 40, H].
At every decoder step t, with d_t the top decoder output: scores = (W_a d_t) . memory
(batch_matmul), weights = softmax over the 40 source positions, context = weights . memory
(batch_matmul), attentional state = tanh(W_c [context; d_t]), then dense 32,000 and softmax.
W_a, W_c and the output layer are each shared by all steps.

Choices the paper leaves open: 32,000-word source and target vocabularies (WMT En-De byte-pair
vocabulary size; FlexFlow's older nmt/ code used 20,480), embeddings of 1024 (the hidden size).
Deliberate difference: the score is multiplicative (Luong et al. 2015, "general") rather than
Bahdanau's additive v^T tanh(W s + U h), which would need a [b, H] query broadcast over the 40
source positions; the element-wise operators do not broadcast. Each LSTM layer has w_ih [in, 4H],
w_hh [H, 4H] and one bias [4H]. Parameters: 2 x 32,000 x 1024 + 4 x 8,392,704 + 1024^2 (W_a) +
2048 x 1024 (W_c) + (1024 x 32,000 + 32,000) = 135,052,544.

This script builds the graph and prints it; train it with `flexrt train nmt --machine M` (synthetic data).

Run: python examples/nmt.py -b 64 --seq-length 40
"""

from flexrt.core import *
from flexrt.examples._blocks import embed_steps, lstm_stack, take_int_flag

SRC_VOCAB_SIZE = 32000
TGT_VOCAB_SIZE = 32000
EMBED_DIM = 1024
HIDDEN = 1024
NUM_LAYERS = 2                     # per side: 2 encoder + 2 decoder layers
SEQ_LENGTH = 40                    # unrolled steps, source and target


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    src = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    tgt = ffmodel.create_tensor([b, seq_length], DataType.DT_INT64)
    src_x, _ = embed_steps(ffmodel, src, SRC_VOCAB_SIZE, EMBED_DIM, name="encoder.embed")
    enc_h, enc_states = lstm_stack(ffmodel, src_x, NUM_LAYERS, HIDDEN, name="encoder.lstm")
    tgt_x, _ = embed_steps(ffmodel, tgt, TGT_VOCAB_SIZE, EMBED_DIM, name="decoder.embed")
    dec_h, _ = lstm_stack(ffmodel, tgt_x, NUM_LAYERS, HIDDEN, name="decoder.lstm", initial_states=enc_states)

    memory = ffmodel.concat(enc_h, 1, name="attn.memory") if len(enc_h) > 1 else enc_h[0]
    memory = ffmodel.reshape(memory, [b, seq_length, HIDDEN], name="attn.memory.reshape")   # [b, S, H]
    keys = ffmodel.transpose(memory, [0, 2, 1], name="attn.keys")                             # [b, H, S]
    shared = {}
    for t, d in enumerate(dec_h):
        q = ffmodel.dense(d, HIDDEN, use_bias=False, shared_op=shared.get("W_a"), name=f"attn.query.t{t}")
        shared.setdefault("W_a", q.owner_op)
        q = ffmodel.reshape(q, [b, 1, HIDDEN], name=f"attn.query.reshape.t{t}")
        scores = ffmodel.batch_matmul(q, keys, name=f"attn.scores.t{t}")                     # [b, 1, S]
        weights = ffmodel.softmax(scores, axis=-1, name=f"attn.weights.t{t}")
        ctx = ffmodel.batch_matmul(weights, memory, name=f"attn.context.t{t}")               # [b, 1, H]
        ctx = ffmodel.reshape(ctx, [b, HIDDEN], name=f"attn.context.reshape.t{t}")
        a = ffmodel.concat([ctx, d], 1, name=f"attn.concat.t{t}")
        a = ffmodel.dense(a, HIDDEN, ActiMode.AC_MODE_TANH, use_bias=False, shared_op=shared.get("W_c"),
                          name=f"attn.out.t{t}")
        shared.setdefault("W_c", a.owner_op)
        logits = ffmodel.dense(a, TGT_VOCAB_SIZE, shared_op=shared.get("linear"), name=f"linear.t{t}")
        shared.setdefault("linear", logits.owner_op)
        ffmodel.softmax(logits, name=f"softmax.t{t}")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
