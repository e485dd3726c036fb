"""Inception-v3, torchvision layout, no auxiliary head, 299x299, 315 operators (Unity, FlexFlow): 23.8 M parameters.

Source: Unity (OSDI 2022) §6.1, Table 1 (per-GPU batch 64; "Inception-v3 (323 operators)" in
§6.3) and FlexFlow (SysML 2019) §8, Table 4 ("a 102-layer CNN with Inception modules"). Layers
as torchvision's ``inception_v3(aux_logits=False)``: the stem (five BasicConv2d and two max
pools), Mixed_5b-5d (InceptionA), 6a (B), 6b-6e (C), 7a (D), 7b-7c (E), global average pool,
dropout 0.5, dense 1000 and softmax. Every BasicConv2d is three operators, a Conv2d without
bias, BatchNorm (no fused ReLU) and a ReLU, so the graph has 94 convolutions and 315
operators (input and weight nodes not counted), close to Unity's 323. Deliberate difference: the
auxiliary classifier after Mixed_6e is left out (it only matters for training accuracy; with it
torchvision counts 27.2 M parameters), and BatchNorm uses FlexFlow's eps (batch_norm takes no eps;
torchvision's is 0.001, which changes no shape, weight or FLOP count). Parameters: 23,834,568.

This script builds the graph and prints it; train it with `flexrt train inception_v3 --machine M` (synthetic data).

Run: python examples/inception_v3.py -b 64
"""

from flexrt.core import *
from flexrt.examples._blocks import conv_bn

NUM_CLASSES = 1000
IMAGE_SIZE = 299


def basic_conv(ffmodel, x, out_channels, kernel, stride=(1, 1), padding=(0, 0), name="conv"):
    """torchvision's BasicConv2d: Conv2d(bias=False) -> BatchNorm2d -> ReLU, three operators."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    return conv_bn(ffmodel, x, out_channels, kh, kw, stride[0], stride[1], padding[0], padding[1], name=name)


def avg_pool_3x3(ffmodel, x, name):
    return ffmodel.pool2d(x, 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, name=name)


def max_pool_3x3_s2(ffmodel, x, name):
    return ffmodel.pool2d(x, 3, 3, 2, 2, 0, 0, PoolType.POOL_MAX, name=name)


def inception_a(ffmodel, x, pool_features, name):
    b1 = basic_conv(ffmodel, x, 64, 1, name=name + ".branch1x1")
    b5 = basic_conv(ffmodel, x, 48, 1, name=name + ".branch5x5_1")
    b5 = basic_conv(ffmodel, b5, 64, 5, padding=(2, 2), name=name + ".branch5x5_2")
    b3 = basic_conv(ffmodel, x, 64, 1, name=name + ".branch3x3dbl_1")
    b3 = basic_conv(ffmodel, b3, 96, 3, padding=(1, 1), name=name + ".branch3x3dbl_2")
    b3 = basic_conv(ffmodel, b3, 96, 3, padding=(1, 1), name=name + ".branch3x3dbl_3")
    bp = avg_pool_3x3(ffmodel, x, name + ".pool")
    bp = basic_conv(ffmodel, bp, pool_features, 1, name=name + ".branch_pool")
    return ffmodel.concat([b1, b5, b3, bp], 1, name=name + ".concat")


def inception_b(ffmodel, x, name):
    b3 = basic_conv(ffmodel, x, 384, 3, stride=(2, 2), name=name + ".branch3x3")
    bd = basic_conv(ffmodel, x, 64, 1, name=name + ".branch3x3dbl_1")
    bd = basic_conv(ffmodel, bd, 96, 3, padding=(1, 1), name=name + ".branch3x3dbl_2")
    bd = basic_conv(ffmodel, bd, 96, 3, stride=(2, 2), name=name + ".branch3x3dbl_3")
    bp = max_pool_3x3_s2(ffmodel, x, name + ".pool")
    return ffmodel.concat([b3, bd, bp], 1, name=name + ".concat")


def inception_c(ffmodel, x, channels_7x7, name):
    c7 = channels_7x7
    b1 = basic_conv(ffmodel, x, 192, 1, name=name + ".branch1x1")
    b7 = basic_conv(ffmodel, x, c7, 1, name=name + ".branch7x7_1")
    b7 = basic_conv(ffmodel, b7, c7, (1, 7), padding=(0, 3), name=name + ".branch7x7_2")
    b7 = basic_conv(ffmodel, b7, 192, (7, 1), padding=(3, 0), name=name + ".branch7x7_3")
    bd = basic_conv(ffmodel, x, c7, 1, name=name + ".branch7x7dbl_1")
    bd = basic_conv(ffmodel, bd, c7, (7, 1), padding=(3, 0), name=name + ".branch7x7dbl_2")
    bd = basic_conv(ffmodel, bd, c7, (1, 7), padding=(0, 3), name=name + ".branch7x7dbl_3")
    bd = basic_conv(ffmodel, bd, c7, (7, 1), padding=(3, 0), name=name + ".branch7x7dbl_4")
    bd = basic_conv(ffmodel, bd, 192, (1, 7), padding=(0, 3), name=name + ".branch7x7dbl_5")
    bp = avg_pool_3x3(ffmodel, x, name + ".pool")
    bp = basic_conv(ffmodel, bp, 192, 1, name=name + ".branch_pool")
    return ffmodel.concat([b1, b7, bd, bp], 1, name=name + ".concat")


def inception_d(ffmodel, x, name):
    b3 = basic_conv(ffmodel, x, 192, 1, name=name + ".branch3x3_1")
    b3 = basic_conv(ffmodel, b3, 320, 3, stride=(2, 2), name=name + ".branch3x3_2")
    b7 = basic_conv(ffmodel, x, 192, 1, name=name + ".branch7x7x3_1")
    b7 = basic_conv(ffmodel, b7, 192, (1, 7), padding=(0, 3), name=name + ".branch7x7x3_2")
    b7 = basic_conv(ffmodel, b7, 192, (7, 1), padding=(3, 0), name=name + ".branch7x7x3_3")
    b7 = basic_conv(ffmodel, b7, 192, 3, stride=(2, 2), name=name + ".branch7x7x3_4")
    bp = max_pool_3x3_s2(ffmodel, x, name + ".pool")
    return ffmodel.concat([b3, b7, bp], 1, name=name + ".concat")


def inception_e(ffmodel, x, name):
    b1 = basic_conv(ffmodel, x, 320, 1, name=name + ".branch1x1")
    b3 = basic_conv(ffmodel, x, 384, 1, name=name + ".branch3x3_1")
    b3a = basic_conv(ffmodel, b3, 384, (1, 3), padding=(0, 1), name=name + ".branch3x3_2a")
    b3b = basic_conv(ffmodel, b3, 384, (3, 1), padding=(1, 0), name=name + ".branch3x3_2b")
    b3 = ffmodel.concat([b3a, b3b], 1, name=name + ".branch3x3.concat")
    bd = basic_conv(ffmodel, x, 448, 1, name=name + ".branch3x3dbl_1")
    bd = basic_conv(ffmodel, bd, 384, 3, padding=(1, 1), name=name + ".branch3x3dbl_2")
    bda = basic_conv(ffmodel, bd, 384, (1, 3), padding=(0, 1), name=name + ".branch3x3dbl_3a")
    bdb = basic_conv(ffmodel, bd, 384, (3, 1), padding=(1, 0), name=name + ".branch3x3dbl_3b")
    bd = ffmodel.concat([bda, bdb], 1, name=name + ".branch3x3dbl.concat")
    bp = avg_pool_3x3(ffmodel, x, name + ".pool")
    bp = basic_conv(ffmodel, bp, 192, 1, name=name + ".branch_pool")
    return ffmodel.concat([b1, b3, bd, bp], 1, name=name + ".concat")


def build_model(ffconfig):
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([ffconfig.batch_size, 3, IMAGE_SIZE, IMAGE_SIZE], DataType.DT_FLOAT)
    t = basic_conv(ffmodel, x, 32, 3, stride=(2, 2), name="Conv2d_1a_3x3")
    t = basic_conv(ffmodel, t, 32, 3, name="Conv2d_2a_3x3")
    t = basic_conv(ffmodel, t, 64, 3, padding=(1, 1), name="Conv2d_2b_3x3")
    t = max_pool_3x3_s2(ffmodel, t, "maxpool1")
    t = basic_conv(ffmodel, t, 80, 1, name="Conv2d_3b_1x1")
    t = basic_conv(ffmodel, t, 192, 3, name="Conv2d_4a_3x3")
    t = max_pool_3x3_s2(ffmodel, t, "maxpool2")
    t = inception_a(ffmodel, t, 32, "Mixed_5b")
    t = inception_a(ffmodel, t, 64, "Mixed_5c")
    t = inception_a(ffmodel, t, 64, "Mixed_5d")
    t = inception_b(ffmodel, t, "Mixed_6a")
    t = inception_c(ffmodel, t, 128, "Mixed_6b")
    t = inception_c(ffmodel, t, 160, "Mixed_6c")
    t = inception_c(ffmodel, t, 160, "Mixed_6d")
    t = inception_c(ffmodel, t, 192, "Mixed_6e")
    t = inception_d(ffmodel, t, "Mixed_7a")
    t = inception_e(ffmodel, t, "Mixed_7b")
    t = inception_e(ffmodel, t, "Mixed_7c")
    h, w = t.dims[2], t.dims[3]
    t = ffmodel.pool2d(t, h, w, 1, 1, 0, 0, PoolType.POOL_AVG, name="avgpool")
    t = ffmodel.dropout(t, 0.5, 0, name="dropout")
    t = ffmodel.flat(t, name="flat")
    t = ffmodel.dense(t, NUM_CLASSES, name="fc")
    ffmodel.softmax(t, name="softmax")
    return ffmodel


def top_level_task():
    ffconfig = FFConfig()
    ffmodel = build_model(ffconfig)
    ffmodel.summary()


if __name__ == "__main__":
    top_level_task()
