"""DLRM for Criteo Kaggle: 26 embedding bags of 16, MLPs 13-512-256-64-16 / 432-512-256-1 (Unity): 103.4 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (DLRM [41] on Criteo Kaggle, per-GPU batch 1024), built
as FlexFlow's DLRM example (examples/cpp/DLRM/dlrm.cc) with the arguments of its Criteo Kaggle
script (examples/cpp/DLRM/run_criteo_kaggle.sh): ``--arch-sparse-feature-size 16``,
``--arch-embedding-size`` the 26 Criteo Kaggle cardinalities below (6,432,181 rows in all),
``--arch-mlp-bot 13-512-256-64-16``, ``--arch-mlp-top 224-512-256-1``, interaction "cat",
embedding bag size 1. As in dlrm.cc: each sparse feature is an input [b, 1] (int64) looked up
in its own table with AGGR_MODE_SUM; the 13 dense features go through the bottom MLP (ReLU on
every layer); the bottom MLP's output and the 26 embeddings are concatenated (16 + 26 x 16 =
432 wide; the script's leading "224" is only used by FlexFlow for initializer scaling), and the
top MLP (ReLU, sigmoid on its last layer) gives one click probability.

Deliberate differences: dense layers have biases (facebookresearch/dlrm and FlexFlow's 2019
dlrm.cc have them; later FlexFlow versions drop them) and the tables are FP32 (later FlexFlow
versions store them in FP16 and cast). Unity's artifact script (scripts/osdi22ae/dlrm.sh) passes
no model arguments, so it runs whatever defaults dlrm.cc had (one version: 4 tables of 10^6 x 64,
MLPs 4-64-64 and 64-64-2); this script follows the dataset Unity's Table 1 names. Parameters: 6,432,181 x 16 + 155,984 + 353,281 = 103,424,161.

This script builds the graph and prints it; train it with `flexrt train dlrm --machine M` (synthetic data).

Run: python examples/dlrm.py -b 1024
"""

from flexrt.core import *

# Criteo Kaggle cardinalities of the 26 categorical features (run_criteo_kaggle.sh).
EMBEDDING_SIZES = [1396, 550, 1761917, 507795, 290, 21, 11948, 608, 3, 58176, 5237, 1497287, 3127, 26, 12153,
                   1068715, 10, 4836, 2085, 4, 1312273, 17, 15, 110946, 91, 72655]
SPARSE_FEATURE_SIZE = 16
EMBEDDING_BAG_SIZE = 1
NUM_DENSE_FEATURES = 13
MLP_BOT = [512, 256, 64, 16]          # after the 13 dense features
MLP_TOP = [512, 256, 1]               # after the concatenated 432 features; sigmoid on the last


def create_mlp(ffmodel, t, dims, sigmoid_last, name):
    for i, dim in enumerate(dims):
        last = i + 1 == len(dims)
        acti = ActiMode.AC_MODE_SIGMOID if (last and sigmoid_last) else ActiMode.AC_MODE_RELU
        t = ffmodel.dense(t, dim, acti, name=f"{name}.{i}")
    return t


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    dense_input = ffmodel.create_tensor([b, NUM_DENSE_FEATURES], DataType.DT_FLOAT)
    sparse_inputs = [ffmodel.create_tensor([b, EMBEDDING_BAG_SIZE], DataType.DT_INT64) for _ in EMBEDDING_SIZES]
    x = create_mlp(ffmodel, dense_input, MLP_BOT, False, "bot_mlp")
    ly = [ffmodel.embedding(inp, rows, SPARSE_FEATURE_SIZE, AggrMode.AGGR_MODE_SUM, name=f"emb{i}")
          for i, (inp, rows) in enumerate(zip(sparse_inputs, EMBEDDING_SIZES))]
    z = ffmodel.concat([x] + ly, 1, name="interaction")
    create_mlp(ffmodel, z, MLP_TOP, True, "top_mlp")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
