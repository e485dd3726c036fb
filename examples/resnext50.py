"""ResNeXt-50 (32x4d), torchvision layout, 224x224 ImageNet (Unity): 25.0 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (per-GPU batch 64); Xie et al. 2017.
Layers as torchvision's ``resnext50_32x4d``: a 7x7/2 stem and a 3x3/2 max pool, four stages of
[3, 4, 6, 3] bottleneck blocks (stride on the 3x3 convolution, as torchvision's v1.5; the 3x3
convolutions grouped, 32 groups of 4 channels per 64 planes), global average pool, dense 1000
and softmax. Each convolution is a Conv2d without bias, a BatchNorm and a separate ReLU (three
operators, as torchvision has them, rather than FlexFlow's fused batch_norm(relu=True)).
Parameters, BatchNorm scale and bias included as torchvision counts them: 25,028,904.

This script builds the graph and prints it; train it with `flexrt train resnext50 --machine M` (synthetic data).

Run: python examples/resnext50.py -b 64
"""

from flexrt.core import *
from flexrt.examples._blocks import resnet

NUM_CLASSES = 1000
LAYERS = [3, 4, 6, 3]
GROUPS = 32
WIDTH_PER_GROUP = 4


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 3, 224, 224], DataType.DT_FLOAT)
    resnet(ffmodel, x, LAYERS, groups=GROUPS, width_per_group=WIDTH_PER_GROUP, num_classes=NUM_CLASSES)
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
