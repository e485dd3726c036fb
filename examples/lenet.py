"""LeNet-5: conv 6@5x5, pool, conv 16@5x5, pool, dense 120-84-10, softmax on 32x32 MNIST: 61,706 parameters.

Source: FlexFlow (SysML 2019) §8.3 ("LeNet (LeCun, 2015) is a 6-layer CNN"), the first of the
two DNNs whose FlexFlow strategies §8.3 compares with the global optimum found by exhaustive
search on 4 devices; layers as LeCun et al. 1998 (Gradient-based learning applied to document
recognition): a 1x32x32 image (MNIST's 28x28 digits padded by 2, as there), conv 6 5x5, 2x2
pool, conv 16 5x5, 2x2 pool, dense 120, 84 and 10, and a softmax. Deliberate differences, as in
today's LeNet examples (FlexFlow's and PyTorch's): ReLU instead of scaled tanh, max pooling
instead of trainable subsampling, and C3 connected to all 6 input maps.
Parameters: (6 x 25 + 6) + (16 x 6 x 25 + 16) + (400 x 120 + 120) + (120 x 84 + 84) + (84 x 10 + 10) = 61,706.

This script builds the graph and prints it; train it with `flexrt train lenet --machine M` (synthetic data).

Run: python examples/lenet.py -b 64
"""

from flexrt.core import *

NUM_CLASSES = 10
IMAGE_SIZE = 32
RELU = ActiMode.AC_MODE_RELU


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 1, IMAGE_SIZE, IMAGE_SIZE], DataType.DT_FLOAT)
    t = ffmodel.conv2d(x, 6, 5, 5, 1, 1, 0, 0, RELU, name="conv1")
    t = ffmodel.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    t = ffmodel.conv2d(t, 16, 5, 5, 1, 1, 0, 0, RELU, name="conv2")
    t = ffmodel.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool2")
    t = ffmodel.flat(t, name="flat")
    t = ffmodel.dense(t, 120, RELU, name="fc1")
    t = ffmodel.dense(t, 84, RELU, name="fc2")
    t = ffmodel.dense(t, NUM_CLASSES, name="fc3")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
