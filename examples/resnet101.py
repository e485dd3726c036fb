"""ResNet-101, torchvision layout, 224x224 ImageNet (FlexFlow Table 4): 44.5 M parameters.

Source: FlexFlow (SysML 2019) §8, Table 4 ("a 101-layer residual CNN with shortcut
connections"); He et al. 2016.
Layers as torchvision's ``resnet101``: a 7x7/2 stem and a 3x3/2 max pool, four stages of
[3, 4, 23, 3] bottleneck blocks (stride on the 3x3 convolution, as torchvision's v1.5),
global average pool, dense 1000 and softmax. Each convolution is a Conv2d without bias, a
BatchNorm and a separate ReLU (three operators, as torchvision has them, rather than FlexFlow's
fused batch_norm(relu=True)). Parameters, BatchNorm scale and bias included as torchvision
counts them: 44,549,160.

This script builds the graph and prints it; train it with `flexrt train resnet101 --machine M` (synthetic data).

Run: python examples/resnet101.py -b 64
"""

from flexrt.core import *
from flexrt.examples._blocks import resnet

NUM_CLASSES = 1000
LAYERS = [3, 4, 23, 3]
GROUPS = 1
WIDTH_PER_GROUP = 64


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
