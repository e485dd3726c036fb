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

Flags (FlexFlow dlrm.cc's, dash-separated lists; the defaults are Criteo Kaggle's above):
- ``--arch-sparse-feature-size N``: the embedding width (and the bottom MLP's last width must equal it);
- ``--arch-embedding-size R1-R2-...``: rows of each table, one table per entry;
- ``--arch-mlp-bot F-H1-...``: F dense features, then the bottom MLP's widths;
- ``--arch-mlp-top I-H1-...``: the top MLP's widths after I (ignored, as in dlrm.cc: the input is the
  concatenation); the last layer has the sigmoid;
- ``--embedding-bag-size N``: ids per bag.
Unity's artifact run, for example: ``--arch-sparse-feature-size 64 --arch-embedding-size
1000000-1000000-1000000-1000000 --arch-mlp-bot 4-64-64 --arch-mlp-top 64-64-2``.

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


def _sizes(flag: str, text: str, least: int) -> list[int]:
    """A dash-separated list of positive ints (FlexFlow's format), at least ``least`` of them."""
    try:
        sizes = [int(x) for x in text.split("-")]
    except ValueError:
        sizes = []
    if len(sizes) < least or any(x < 1 for x in sizes):
        raise ValueError(f"dlrm: {flag} {text!r} must be at least {least} positive ints separated by '-', "
                         f"e.g. 13-512-256-64-16")
    return sizes


def build_model(ffconfig, arch_sparse_feature_size=SPARSE_FEATURE_SIZE,
                arch_embedding_size="-".join(map(str, EMBEDDING_SIZES)),
                arch_mlp_bot="-".join(map(str, [NUM_DENSE_FEATURES] + MLP_BOT)),
                arch_mlp_top="-".join(map(str, [224] + MLP_TOP)), embedding_bag_size=EMBEDDING_BAG_SIZE):
    tables = _sizes("--arch-embedding-size", arch_embedding_size, 1)
    bot = _sizes("--arch-mlp-bot", arch_mlp_bot, 2)
    top = _sizes("--arch-mlp-top", arch_mlp_top, 2)
    if bot[-1] != arch_sparse_feature_size or arch_sparse_feature_size < 1 or embedding_bag_size < 1:
        raise ValueError(f"dlrm: the bottom MLP's last width ({bot[-1]}) must equal --arch-sparse-feature-size "
                         f"({arch_sparse_feature_size}) for the concatenation, and the bag size "
                         f"({embedding_bag_size}) must be positive")
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    dense_input = ffmodel.create_tensor([b, bot[0]], DataType.DT_FLOAT)
    sparse_inputs = [ffmodel.create_tensor([b, embedding_bag_size], DataType.DT_INT64) for _ in tables]
    x = create_mlp(ffmodel, dense_input, bot[1:], False, "bot_mlp")
    ly = [ffmodel.embedding(inp, rows, arch_sparse_feature_size, AggrMode.AGGR_MODE_SUM, name=f"emb{i}")
          for i, (inp, rows) in enumerate(zip(sparse_inputs, tables))]
    z = ffmodel.concat([x] + ly, 1, name="interaction")
    create_mlp(ffmodel, z, top[1:], True, "top_mlp")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
