"""RNNTC: 4 LSTM layers of 1024 unrolled 40 steps, softmax classifier (FlexFlow Table 4): 43.8 M parameters.

Source: FlexFlow (SysML 2019) §8, Table 4 ("4 recurrent layers followed by a softmax layer",
Movie Reviews): "RNNTC uses four LSTM layers with a hidden size of 1024 ... we set the number
of unrolling steps for each recurrent layer to 40". Built as FlexFlow's unrolled RNNs: one
embedding lookup per step (all steps share one table), one LSTM cell per layer per step (all
steps of a layer share its weights through ``shared_op``), states starting from zeros.
Choices the paper leaves open: a 10,000-word vocabulary, word embeddings of 1024 (the hidden
size), and 2 classes (Movie Reviews sentence polarity); the classifier (dense 2 + softmax) reads
the top layer's output at the last step. Each LSTM layer has w_ih [in, 4H], w_hh [H, 4H] and one
bias [4H]. Parameters: 10,000 x 1024 + 4 x 8,392,704 + 2,050 = 43,812,866.

This script builds the graph and prints it; train it with `flexrt train rnntc --machine M` (synthetic data).

Run: python examples/rnntc.py -b 64 --seq-length 40
"""

from flexrt.core import *
from flexrt.examples._blocks import embed_steps, lstm_stack, take_int_flag

VOCAB_SIZE = 10000
EMBED_DIM = 1024
HIDDEN = 1024
NUM_LAYERS = 4
NUM_CLASSES = 2
SEQ_LENGTH = 40


def build_model(ffconfig, seq_length=SEQ_LENGTH):
    ffmodel = FFModel(ffconfig)
    tokens = ffmodel.create_tensor([ffconfig.batch_size, seq_length], DataType.DT_INT64)
    xs, _ = embed_steps(ffmodel, tokens, VOCAB_SIZE, EMBED_DIM, name="embed")
    hs, _ = lstm_stack(ffmodel, xs, NUM_LAYERS, HIDDEN, name="lstm")
    t = ffmodel.dense(hs[-1], NUM_CLASSES, name="classifier")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    seq_length = take_int_flag("--seq-length", SEQ_LENGTH)  # before FFConfig(): it rejects unknown flags
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig, seq_length=seq_length)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
