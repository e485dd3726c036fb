"""AlexNet, torchvision layout, 224x224 ImageNet (FlexFlow Table 4): 61.1 M parameters.

Source: FlexFlow (SysML 2019) §8, Table 4 ("a 12-layer CNN", synthetic data). Layers as
torchvision's ``alexnet``: conv 64 11x11/4 p2, maxpool 3/2, conv 192 5x5 p2, maxpool, conv 384,
256, 256 (3x3 p1), maxpool, then 4096-4096-1000 dense layers and softmax. Deliberate
differences: torchvision's adaptive average pool is omitted (at 224x224 the last maxpool already
gives 6x6, where it is the identity), and so are its two classifier dropouts (FlexFlow's AlexNet
example has none either). Parameters: 61,100,840.

This script builds the graph and prints it; train it with `flexrt train alexnet --machine M` (synthetic data).

Run: python examples/alexnet.py -b 64
"""

from flexrt.core import *

NUM_CLASSES = 1000
RELU = ActiMode.AC_MODE_RELU


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 3, 224, 224], DataType.DT_FLOAT)
    t = ffmodel.conv2d(x, 64, 11, 11, 4, 4, 2, 2, RELU, name="conv1")
    t = ffmodel.pool2d(t, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool1")
    t = ffmodel.conv2d(t, 192, 5, 5, 1, 1, 2, 2, RELU, name="conv2")
    t = ffmodel.pool2d(t, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool2")
    t = ffmodel.conv2d(t, 384, 3, 3, 1, 1, 1, 1, RELU, name="conv3")
    t = ffmodel.conv2d(t, 256, 3, 3, 1, 1, 1, 1, RELU, name="conv4")
    t = ffmodel.conv2d(t, 256, 3, 3, 1, 1, 1, 1, RELU, name="conv5")
    t = ffmodel.pool2d(t, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name="pool3")
    t = ffmodel.flat(t, name="flat")
    t = ffmodel.dense(t, 4096, RELU, name="fc6")
    t = ffmodel.dense(t, 4096, RELU, name="fc7")
    t = ffmodel.dense(t, NUM_CLASSES, name="fc8")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
