"""RNNLM unrolled 2 steps: 2 LSTM layers of 2048, softmax linear per step (FlexFlow §8.3): 108.1 M parameters.

Source: FlexFlow (SysML 2019) §8.3: "The second DNN is a variant of RNNLM where the number of
unrolling steps for each recurrent layer is restricted to 2", used to compare FlexFlow's strategy
with the global optimum found by exhaustive search on 4 devices. The model is ``rnnlm.py``'s
(FlexFlow Table 4: Penn Treebank vocabulary 10,000, embeddings and 2 LSTM layers of 2048, a
dense 10,000 and softmax per step; every step shares the embedding, each layer's and the dense
layer's weights) with 2 steps instead of 40, so its weights are the same.
Parameters: 10,000 x 2048 + 2 x 33,562,624 + (2048 x 10,000 + 10,000) = 108,095,248.

This script builds the graph and prints it; train it with `flexrt train rnnlm_2step --machine M` (synthetic data).

Run: python examples/rnnlm_2step.py -b 64
"""

from flexrt.examples import rnnlm

from flexrt.core import *

SEQ_LENGTH = 2


def build_model(ffconfig):
    return rnnlm.build_model(ffconfig, seq_length=SEQ_LENGTH)


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
