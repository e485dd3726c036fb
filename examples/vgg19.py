"""VGG-19, torchvision layout, 224x224 ImageNet (DisCo): 143.7 M parameters.

Source: DisCo §6.1 benchmark models ("VGG19 [50]"), layers as torchvision's ``vgg19`` (no batch
norm): 16 3x3 convolutions (64, 64 | 128, 128 | 256 x 4 | 512 x 4 | 512 x 4, each with bias and
ReLU, a 2x2 max pool after each group), then dense 4096 ReLU, dropout 0.5, dense 4096 ReLU,
dropout 0.5, dense 1000 and softmax. torchvision's adaptive average pool is omitted: at 224x224
the features are already 7x7, where it is the identity. Parameters: 143,667,240.

This script builds the graph and prints it; train it with `flexrt train vgg19 --machine M` (synthetic data).

Run: python examples/vgg19.py -b 64
"""

from flexrt.core import *

NUM_CLASSES = 1000
# Configuration "E": output channels of each 3x3 conv, "M" a 2x2 max pool.
CONFIG_E = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
            512, 512, 512, 512, "M"]
RELU = ActiMode.AC_MODE_RELU


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    t = ffmodel.create_tensor([ffconfig.batch_size, 3, 224, 224], DataType.DT_FLOAT)
    conv = pool = 0
    for item in CONFIG_E:
        if item == "M":
            pool += 1
            t = ffmodel.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX, name=f"pool{pool}")
        else:
            conv += 1
            t = ffmodel.conv2d(t, item, 3, 3, 1, 1, 1, 1, RELU, name=f"conv{conv}")
    t = ffmodel.flat(t, name="flat")
    t = ffmodel.dense(t, 4096, RELU, name="fc6")
    t = ffmodel.dropout(t, 0.5, 0, name="drop6")
    t = ffmodel.dense(t, 4096, RELU, name="fc7")
    t = ffmodel.dropout(t, 0.5, 0, name="drop7")
    t = ffmodel.dense(t, NUM_CLASSES, name="fc8")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
