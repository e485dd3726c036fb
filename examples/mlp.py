"""Unity's MLP: 16 dense layers of 8192 in two towers of 8 over 1024-wide inputs (Unity): 956.3 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 ("MLP [17], synthetic data"; "16 dense layers, each of
which has a hidden dimension of 8192"; per-GPU batch 256), built as FlexFlow's implementation of
it, examples/cpp/MLP_Unify/mlp.cc (the binary scripts/osdi22ae/mlp.sh runs): two inputs
[b, 1024], each through 8 dense layers of 8192 without bias (ReLU after all but the last), the two
towers added, then softmax over the 8192 outputs. Parameters: 2 x (1024 x 8192 + 7 x 8192^2).

This script builds the graph and prints it; train it with `flexrt train mlp --machine M` (synthetic data).

Run: python examples/mlp.py -b 256
"""

from flexrt.core import *

IN_FEATURES = 1024
HIDDEN_DIMS = [8192] * 8          # per tower; two towers make Unity's 16 dense layers
NUM_TOWERS = 2


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    towers = []
    for k in range(NUM_TOWERS):
        t = ffmodel.create_tensor([ffconfig.batch_size, IN_FEATURES], DataType.DT_FLOAT)
        for i, dim in enumerate(HIDDEN_DIMS):
            last = i + 1 == len(HIDDEN_DIMS)
            acti = ActiMode.AC_MODE_NONE if last else ActiMode.AC_MODE_RELU
            t = ffmodel.dense(t, dim, acti, use_bias=False, name=f"tower{k}.dense{i}")
        towers.append(t)
    t = towers[0]
    for k, other in enumerate(towers[1:], start=1):
        t = ffmodel.add(t, other, name=f"add{k}")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
