# A FlexFlow-style per-operator script (the pattern of FlexFlow's examples/python/native/ops):
# compile with a cross-entropy although the output is no softmax, one forward pass without labels,
# read the output back and compare it with NumPy.
import flexrt.core
import numpy as np
from flexrt.core import *


def run(ffconfig, x):
    ffmodel = FFModel(ffconfig)
    inp = ffmodel.create_tensor(x.shape, DataType.DT_FLOAT)
    out = ffmodel.dense(inp, 6, name="fc")
    out = ffmodel.reverse(ffmodel.exp(out), 1)
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.001)
    ffmodel.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY])
    loader = ffmodel.create_data_loader(inp, x)
    ffmodel.init_layers()
    loader.reset()
    loader.next_batch(ffmodel)
    ffmodel.forward()
    out.inline_map(ffmodel, ffconfig)
    got = out.get_array(ffmodel, ffconfig)
    out.inline_unmap(ffmodel, ffconfig)
    layer = ffmodel.get_layer_by_name("fc")
    w = layer.get_weight_tensor().get_weights(ffmodel)
    b = layer.get_bias_tensor().get_weights(ffmodel)
    return got, w, b


if __name__ == "__main__":
    init_flexflow_runtime()
    ffconfig = FFConfig()
    x = np.random.default_rng(0).standard_normal((ffconfig.batch_size, 5)).astype(np.float32)
    got, w, b = run(ffconfig, x)
    lin = x @ (w if w.shape == (5, 6) else w.T) + b
    want = np.exp(lin)[:, ::-1]
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)))
    print("RESULT max_rel_err %.3e shape %s" % (err, got.shape))
    assert got.shape == want.shape and err < 1e-4, err
