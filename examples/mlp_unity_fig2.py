"""Unity's Fig. 2 MLP for MNIST: 784 -> 512 ReLU -> 10, no biases: 406,528 parameters.

Source: Unity (OSDI 2022) §2, Figures 1 and 2: b = 64, c_i = 28 x 28 = 784, h = 512, c_o = 10.
Data parallelism synchronizes 2 (c_i h + h c_o) = 813,056 elements of weight gradients; the
joint optimization of Fig. 2b moves 4 b h = 131,072. The MatMuls have no bias, as in the figure
(weights c_i x h and h x c_o only). FFConfig's default batch size, 64, is the paper's b.

Run on its own, the script prints the graph and trains it FlexFlow style (compile, init_layers,
fit) for -e epochs on synthetic data, on -ll:gpu devices of the local machine (or --machine M).

Run: python examples/mlp_unity_fig2.py -b 64
"""

from flexrt.core import *

IN_FEATURES = 784
HIDDEN = 512
NUM_CLASSES = 10


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, IN_FEATURES], DataType.DT_FLOAT)
    t = ffmodel.dense(x, HIDDEN, ActiMode.AC_MODE_RELU, use_bias=False, name="dense1")
    t = ffmodel.dense(t, NUM_CLASSES, use_bias=False, name="dense2")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, ffconfig.learning_rate),
                    loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY])
    ffmodel.init_layers()
    ffmodel.fit(epochs=ffconfig.epochs)


if __name__ == "__main__":
    top_level_task()
