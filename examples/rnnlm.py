"""RNNLM: 2 LSTM layers of 2048 unrolled 40 steps, softmax linear per step (FlexFlow, DisCo): 108.1 M parameters.

Source: FlexFlow (SysML 2019) §8, Table 4 ("2 recurrent layers followed by a softmax layer", Penn
Treebank): "RNNLM uses two LSTM layers with a hidden size of 2048 ... unrolling steps ... 40";
also DisCo §6.1 ("RNNLM [25]"). Penn Treebank's vocabulary is 10,000 words; word embeddings are
2048 wide (the hidden size, as FlexFlow's nmt/ RNN code sets embed size = hidden size). Built as
FlexFlow's unrolled RNNs: one embedding lookup per step (one shared table), one LSTM cell per
layer per step (steps share the layer's weights through ``shared_op``), states starting from
zeros, and at every step a dense 10,000 (one shared weight) and a softmax predicting the next
word. Each LSTM layer has w_ih [in, 4H], w_hh [H, 4H] and one bias [4H].
Parameters: 10,000 x 2048 + 2 x 33,562,624 + (2048 x 10,000 + 10,000) = 108,095,248.

This script builds the graph and prints it; train it with `flexrt train rnnlm --machine M` (synthetic data).

Run: python examples/rnnlm.py -b 64 --seq-length 40
"""

from flexrt.core import *
from flexrt.examples._blocks import embed_steps, lstm_stack, take_int_flag

VOCAB_SIZE = 10000
EMBED_DIM = 2048
HIDDEN = 2048
NUM_LAYERS = 2
SEQ_LENGTH = 40


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    ffmodel = FFModel(ffconfig)
    tokens = ffmodel.create_tensor([ffconfig.batch_size, seq_length], DataType.DT_INT64)
    xs, _ = embed_steps(ffmodel, tokens, VOCAB_SIZE, EMBED_DIM, name="embed")
    hs, _ = lstm_stack(ffmodel, xs, NUM_LAYERS, HIDDEN, name="lstm")
    linear = None
    for t, h in enumerate(hs):
        logits = ffmodel.dense(h, VOCAB_SIZE, shared_op=linear, name=f"linear.t{t}")
        linear = linear or logits.owner_op
        ffmodel.softmax(logits, name=f"softmax.t{t}")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
