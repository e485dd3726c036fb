"""XDL as FlexFlow builds it: 4 embedding bags of 10^6 x 64, concat, MLP 256-256-2 (Unity): 256.1 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (XDL [28], per-GPU batch 1024), built exactly as
FlexFlow's XDL example, examples/cpp/XDL/xdl.cc, with its built-in defaults (the configuration
Unity's artifact script scripts/osdi22ae/xdl.sh runs): 4 sparse inputs [b, 1] (int64, embedding
bag size 1), each summed (AGGR_MODE_SUM) from its own 1,000,000 x 64 table; the 4 embeddings
concatenated (256 wide); dense layers 256 and 256 with ReLU and 2 with sigmoid, all without bias
(xdl.cc's create_mlp with ``--arch-mlp 256-256-256-2``, whose first entry is the input width).
XDL's characteristic structure is kept: large sum-aggregated embedding tables, a concatenation
(the all-to-all bottleneck of Unity §7, Fig. 16b) and a small MLP.
Parameters: 4 x 64,000,000 + 256 x 256 x 2 + 256 x 2 = 256,131,584.

This script builds the graph and prints it; train it with `flexrt train xdl --machine M` (synthetic data).

Run: python examples/xdl.py -b 1024
"""

from flexrt.core import *

EMBEDDING_SIZES = [1000000] * 4
SPARSE_FEATURE_SIZE = 64
EMBEDDING_BAG_SIZE = 1
MLP = [256, 256, 2]                   # ReLU, ReLU, sigmoid; no bias


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    b = ffconfig.batch_size
    sparse_inputs = [ffmodel.create_tensor([b, EMBEDDING_BAG_SIZE], DataType.DT_INT64) for _ in EMBEDDING_SIZES]
    ly = [ffmodel.embedding(inp, rows, SPARSE_FEATURE_SIZE, AggrMode.AGGR_MODE_SUM, name=f"emb{i}")
          for i, (inp, rows) in enumerate(zip(sparse_inputs, EMBEDDING_SIZES))]
    t = ffmodel.concat(ly, 1, name="concat")
    for i, dim in enumerate(MLP):
        last = i + 1 == len(MLP)
        acti = ActiMode.AC_MODE_SIGMOID if last else ActiMode.AC_MODE_RELU
        t = ffmodel.dense(t, dim, acti, use_bias=False, name=f"mlp.{i}")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
