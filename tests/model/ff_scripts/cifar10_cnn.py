# A FlexFlow-style CNN script configured the way FlexFlow's CI runs its examples: a JSON file given
# with -config-file is handed to init_flexflow_runtime, which turns it into FlexFlow's flags.
from flexrt.core import *
from flexrt.keras.datasets import cifar10
import argparse
import json
import numpy as np


def top_level_task(num_samples):
    ffconfig = FFConfig()
    ffmodel = FFModel(ffconfig)
    inp = ffmodel.create_tensor([ffconfig.batch_size, 3, 32, 32], DataType.DT_FLOAT)
    t = ffmodel.conv2d(inp, 8, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, 1, True, None,
                       GlorotUniformInitializer(123), ZeroInitializer())
    t = ffmodel.pool2d(t, 2, 2, 2, 2, 0, 0)
    t = ffmodel.conv2d(t, 8, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    t = ffmodel.pool2d(t, 2, 2, 2, 2, 0, 0, PoolType.POOL_MAX)
    t = ffmodel.flat(t)
    t = ffmodel.dense(t, 10, name="fc")
    t = ffmodel.softmax(t)
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.01)
    ffmodel.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY])
    (x_train, y_train), _ = cifar10.load_data(10000)
    x = x_train[:num_samples].astype("float32") / 255
    y = y_train[:num_samples].astype("int32")
    dl_x = ffmodel.create_data_loader(inp, x)
    dl_y = ffmodel.create_data_loader(ffmodel.label_tensor, y)
    ffmodel.init_layers()
    ffmodel.fit(x=dl_x, y=dl_y, epochs=ffconfig.epochs)
    perf = ffmodel.get_perf_metrics()
    assert ffmodel.get_last_layer().name != "fc"  # the softmax comes last
    w = ffmodel.get_layer_by_name("fc").get_weight_tensor().get_weights(ffmodel)
    print("RESULT accuracy %.6f kernel_sum %.9e epochs %d batch %d" % (
        perf.get_accuracy(), float(np.sum(w, dtype=np.float64)), ffconfig.epochs, ffconfig.batch_size))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-config-file", type=str, default=None)
    args, unknown = parser.parse_known_args()
    configs = None
    if args.config_file is not None:
        with open(args.config_file) as f:
            configs = json.load(f)
    init_flexflow_runtime(configs)
    top_level_task(128)
