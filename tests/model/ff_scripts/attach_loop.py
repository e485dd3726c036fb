# A FlexFlow-style manual training loop on set_tensor (the pattern of FlexFlow's *_attach.py
# examples): each batch is written into the input and label tensors, then forward / zero_gradients
# / backward / update; a bias is overwritten with set_weights before training.
from flexrt.core import *
import numpy as np


def top_level_task():
    ffconfig = FFConfig()
    bs = ffconfig.batch_size
    ffmodel = FFModel(ffconfig)
    inp = ffmodel.create_tensor([bs, 20], DataType.DT_FLOAT)
    t = ffmodel.dense(inp, 16, ActiMode.AC_MODE_RELU, name="fc1")
    t = ffmodel.dense(t, 4, name="fc2")
    t = ffmodel.softmax(t)
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.05)
    ffmodel.compile(loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                    metrics=[MetricsType.METRICS_ACCURACY])
    label = ffmodel.label_tensor
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8 * bs, 20)).astype(np.float32)
    y = (x[:, :4].argmax(axis=1)).astype(np.int32).reshape(-1, 1)
    ffmodel.init_layers()
    bias = ffmodel.get_layer_by_name("fc1").get_bias_tensor()
    bias.set_weights(ffmodel, np.full(bias.dims, 0.25, dtype=np.float32))
    assert np.array_equal(bias.get_weights(ffmodel), np.full(bias.dims, 0.25, dtype=np.float32))
    for epoch in range(3):
        ffmodel.reset_metrics()
        for it in range(len(x) // bs):
            inp.set_tensor(ffmodel, x[it * bs:(it + 1) * bs])
            label.set_tensor(ffmodel, y[it * bs:(it + 1) * bs])
            ffmodel.forward()
            ffmodel.zero_gradients()
            ffmodel.backward()
            ffmodel.update()
    acc = ffmodel.get_perf_metrics().get_accuracy()
    w = ffmodel.get_layer_by_name("fc2").get_weight_tensor().get_weights(ffmodel)
    print("RESULT accuracy %.6f kernel_sum %.9e" % (acc, float(np.sum(w, dtype=np.float64))))


if __name__ == "__main__":
    init_flexflow_runtime()
    top_level_task()
