# A FlexFlow-style training script (written for flexrt's tests in the style of FlexFlow's
# examples/python/native): Keras' MNIST from the cache, data loaders, fit, eval.
from flexrt.core import *
from flexrt.keras.datasets import mnist
import argparse
import numpy as np


def top_level_task(num_samples):
    ffconfig = FFConfig()
    ffmodel = FFModel(ffconfig)
    input_tensor = ffmodel.create_tensor([ffconfig.batch_size, 784], DataType.DT_FLOAT)
    t = ffmodel.dense(input_tensor, 64, ActiMode.AC_MODE_RELU, kernel_initializer=UniformInitializer(12, -1, 1))
    t = ffmodel.dense(t, 10)
    t = ffmodel.softmax(t)
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.01)
    ffmodel.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY])
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    x = x_train[:num_samples].reshape(num_samples, 784).astype("float32") / 255
    y = y_train[:num_samples].astype("int32").reshape(num_samples, 1)
    dl_x = ffmodel.create_data_loader(input_tensor, x)
    dl_y = ffmodel.create_data_loader(ffmodel.label_tensor, y)
    ffmodel.init_layers()
    ffmodel.fit(x=dl_x, y=dl_y, epochs=ffconfig.epochs)
    ffmodel.eval(x=dl_x, y=dl_y)
    perf = ffmodel.get_perf_metrics()
    kernel = ffmodel.get_layers()[0].get_weight_tensor().get_weights(ffmodel)
    print("RESULT accuracy %.6f kernel_sum %.9e" % (perf.get_accuracy(), float(np.sum(kernel, dtype=np.float64))))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-a", "--test_acc", action="store_true")
    parser.add_argument("--samples", type=int, default=256)
    args, unknown = parser.parse_known_args()
    init_flexflow_runtime()
    top_level_task(args.samples)
