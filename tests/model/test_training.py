"""FFModel's training calls on the runtime: compile, init_layers, data loaders, fit, eval, the manual
loop and get_perf_metrics (flexrt.model.training)."""

import json

import numpy as np
import pytest

from flexrt.errors import ConfigError, StrategyError
from flexrt.machine import load_machine
from flexrt.model import (ActiMode, AdamOptimizer, AggrMode, DataType, FFConfig, FFModel, LossType, MetricsType,
                          NormInitializer, SGDOptimizer, UniformInitializer)
from flexrt.model.training import SYNTHETIC_BATCHES, synthetic_data
from flexrt.runtime.executor import optimizer_step
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.strategy import random_strategy, save_strategy

ACC = MetricsType.METRICS_ACCURACY
SCCE = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY


def mlp(argv, dtype=DataType.DT_DOUBLE, batch=8, **dense_kwargs):
    m = FFModel(FFConfig(["-b", str(batch), *argv]))
    x = m.create_tensor([batch, 6], dtype)
    t = m.dense(x, 12, ActiMode.AC_MODE_RELU, name="fc1", **dense_kwargs)
    m.softmax(m.dense(t, 4, name="fc2"), name="sm")
    return m, x


def data(n=32, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 6)), rng.integers(0, 4, (n, 1)).astype(np.int32)


def compiled(argv=(), lr=0.1, metrics=(ACC,), **kw):
    m, x = mlp(list(argv), **kw)
    m.compile(optimizer=SGDOptimizer(m, lr), loss_type=SCCE, metrics=list(metrics))
    m.init_layers()
    return m, x


def test_fit_on_synthetic_data_decreases_the_loss(capsys):
    m, _ = compiled(["-ll:gpu", "2"], lr=0.5)
    m.fit(epochs=6)
    losses = [h["loss"] for h in m.history]
    assert len(losses) == 6 * SYNTHETIC_BATCHES
    first, last = np.mean(losses[:SYNTHETIC_BATCHES]), np.mean(losses[-SYNTHETIC_BATCHES:])
    assert last < 0.85 * first, (first, last)
    out = capsys.readouterr().out
    assert out.count("epoch ") == 6 and "accuracy" in out and "ms simulated" in out and "measured" in out
    assert 0.0 <= m.get_perf_metrics().get_accuracy() <= 100.0
    assert m.session.predicted_time_s > 0 and all(h["wall_s"] > 0 for h in m.history)


def test_compile_uses_the_devices_the_config_asks_for():
    m, _ = compiled(["-ll:gpu", "2"])
    used = {t.device for t in m.session.plan.tasks if t.device < m.machine.num_devices}
    assert used == {0, 1} and m.machine.name == "local"
    one, _ = compiled([])
    assert {t.device for t in one.session.plan.tasks if t.device < one.machine.num_devices} == {0}
    many, _ = compiled(["-ll:gpu", "64"])  # a local machine of 64 devices; batch 8 divides over 8 of them
    assert many.machine.num_devices == 64
    assert {t.device for t in many.session.plan.tasks if t.device < many.machine.num_devices} == set(range(8))
    assert m.label_tensor.dims == (8, 1) and m.label_tensor.data_type is DataType.DT_INT32


def _reference_weights(m, x_all, y_all, lr):
    """The single-device reference trained on the same batches from the same initial weights."""
    ref = ReferenceTrainer(m.pcg, m._initial, optimizer_step("sgd", lr=lr), "sparse_categorical_crossentropy")
    for lo in range(0, len(x_all), 8):
        ref.step({"input_1": x_all[lo:lo + 8]}, y_all[lo:lo + 8])
    return ref.weights


def test_exported_strategy_imports_and_trains_to_the_same_weights(tmp_path):
    x_all, y_all = data()
    exported = tmp_path / "dp.json"
    dp, _ = compiled(["-ll:gpu", "4", "--export", str(exported)])
    assert json.loads(exported.read_text())["machine"]["name"] == "local"
    dp.fit(x=x_all, y=y_all, epochs=2)
    imp, _ = compiled(["--import", str(exported)])  # -ll:gpu 1, but the file says 4 devices
    assert {t.device for t in imp.session.plan.tasks if t.device < 4} == {0, 1, 2, 3}
    imp.fit(x=x_all, y=y_all, epochs=2)
    for name, w in dp.get_weights().items():
        np.testing.assert_allclose(imp.get_weights()[name], w, rtol=0, atol=1e-10)


def test_imported_strategy_and_data_parallel_train_like_one_device(tmp_path):
    """The runtime's central law through the FFModel API (float64: 1e-10)."""
    x_all, y_all = data()
    other = tmp_path / "random.json"
    base, _ = mlp([])
    save_strategy(str(other), random_strategy(base.pcg, load_machine("local"), 3), load_machine("local"))
    for argv in (["-ll:gpu", "4"], ["--import", str(other)]):
        m, _ = compiled(argv)
        m.fit(x=x_all, y=y_all, epochs=2)
        ref = _reference_weights(m, np.concatenate([x_all, x_all]), np.concatenate([y_all, y_all]), 0.1)
        for name, w in m.get_weights().items():
            np.testing.assert_allclose(w, ref[name], rtol=0, atol=1e-10, err_msg=f"{argv}: {name}")


def test_manual_loop_equals_fit():
    x_all, y_all = data()
    a, xa = compiled(["-ll:gpu", "2"])
    a.fit(x=[a.create_data_loader(xa, x_all)], y=a.create_data_loader(a.label_tensor, y_all), epochs=1)
    b, xb = compiled(["-ll:gpu", "2"])
    dl_x, dl_y = b.create_data_loader(xb, x_all), b.create_data_loader(b.label_tensor, y_all)
    assert dl_x.num_samples == 32
    dl_x.reset(), dl_y.reset(), b.reset_metrics()
    for _ in range(dl_x.num_samples // 8):
        dl_x.next_batch(b)
        dl_y.next_batch(b)
        b.forward()
        b.zero_gradients()
        b.backward()
        b.update()
    assert [h["loss"] for h in b.history] == [h["loss"] for h in a.history]
    for name, w in a.get_weights().items():
        np.testing.assert_array_equal(b.get_weights()[name], w)
    assert b.get_perf_metrics().get_accuracy() == a.get_perf_metrics().get_accuracy()


def test_manual_loop_order_is_checked():
    m, x = compiled()
    x_all, y_all = data()
    dl_x, dl_y = m.create_data_loader(x, x_all), m.create_data_loader(m.label_tensor, y_all)
    with pytest.raises(ConfigError, match="no current batch for input_1, label; call each data loader's next_batch"):
        m.forward()
    dl_x.next_batch(m)
    dl_y.next_batch(m)
    with pytest.raises(ConfigError, match=r"update: call forward\(\) and backward\(\) first \(state: nothing"):
        m.update()
    with pytest.raises(ConfigError, match=r"backward: call forward\(\) first"):
        m.backward()
    m.forward()
    m.backward()
    m.zero_gradients()  # discards the recorded backward
    with pytest.raises(ConfigError, match=r"state: forward\(\) only"):
        m.update()
    m.backward()
    m.update()
    assert len(m.history) == 1
    with pytest.raises(ConfigError, match="update: call forward"):
        m.update()  # the iteration ran; the next needs forward/backward again


def test_eval_scores_without_updating():
    x_all, y_all = data(8)
    m, _ = compiled(metrics=(ACC, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY))
    before = m.get_weights()
    perf = m.eval(x=x_all, y=y_all)
    for name, w in m.get_weights().items():
        np.testing.assert_array_equal(w, before[name])
    m.fit(x=x_all, y=y_all)  # one step on the same batch: its loss is scored before the update
    assert perf.loss == pytest.approx(m.history[0]["loss"], abs=1e-12)
    assert perf.get("sparse_categorical_crossentropy") == pytest.approx(perf.loss, abs=1e-12)
    assert m.get_perf_metrics() is not perf and 0 <= perf.get_accuracy() <= 100


def test_init_layers_uses_the_initializers_and_starts_over():
    m, _ = mlp([], kernel_initializer=UniformInitializer(7, 0.25, 0.25), bias_initializer=NormInitializer(1, 3.0, 0.0))
    m.compile(optimizer=AdamOptimizer(m, alpha=0.01), loss_type=SCCE)
    m.init_layers()
    w = m.get_weights()
    assert np.all(w["fc1.kernel"] == 0.25) and np.all(w["fc1.bias"] == 3.0)
    assert np.all(w["fc2.bias"] == 0.0) and np.abs(w["fc2.kernel"]).max() <= np.sqrt(6 / 16)
    m.fit()
    assert not np.all(m.get_weights()["fc1.kernel"] == 0.25)
    m.init_layers()
    np.testing.assert_array_equal(m.get_weights()["fc1.kernel"], w["fc1.kernel"])


@pytest.mark.parametrize("loss", [LossType.LOSS_CATEGORICAL_CROSSENTROPY, "mean_squared_error_avg",
                                  LossType.LOSS_MEAN_SQUARED_ERROR_SUM_REDUCE])
def test_other_losses_train_on_synthetic_labels(loss):
    m, _ = mlp([])
    m.compile(loss_type=loss, metrics=[MetricsType.METRICS_MEAN_SQUARED_ERROR, "accuracy"])
    assert m.optimizer == SGDOptimizer(m, 0.01)  # default: SGD at --lr
    assert m.label_tensor.dims == (8, 4) and m.label_tensor.data_type is DataType.DT_DOUBLE
    m.fit(epochs=2)
    assert all(np.isfinite(h["loss"]) for h in m.history)
    _, labels = synthetic_data(m.pcg, m._loss, 8)
    if "crossentropy" in m._loss.short_name:
        assert np.all(labels.sum(axis=1) == 1.0)


def test_synthetic_ids_fit_the_embedding():
    m = FFModel(FFConfig(["-b", "4"]))
    ids = m.create_tensor([4, 3], DataType.DT_INT32)
    m.softmax(m.dense(m.flat(m.embedding(ids, 5, 2, AggrMode.AGGR_MODE_NONE)), 3))
    xs, labels = synthetic_data(m.pcg, "sparse_categorical_crossentropy", 40)
    assert xs["input_1"].dtype == np.int32 and 0 <= xs["input_1"].min() and xs["input_1"].max() < 5
    assert labels.shape == (40, 1) and labels.max() < 3


def test_bad_calls_say_what_is_wrong(tmp_path):
    m, x = mlp([])
    with pytest.raises(ConfigError, match=r"fit: call compile\(...\) first"):
        m.fit()
    with pytest.raises(ConfigError, match="loss_type must be a LossType or one of categorical_crossentropy"):
        m.compile(loss_type="mse")
    with pytest.raises(ConfigError, match=r"metrics\[0\] must be a MetricsType"):
        m.compile(metrics=["top5"])
    m.compile(loss_type=SCCE)
    with pytest.raises(ConfigError, match="batch_size=16, but the model's tensors were made for batch 8"):
        m.fit(batch_size=16)
    with pytest.raises(ConfigError, match="give both x and y"):
        m.fit(x=np.zeros((8, 6)))
    with pytest.raises(ConfigError, match=r"each sample has shape \[5\]; the tensor needs \[6\]"):
        m.create_data_loader(x, np.zeros((8, 5)))
    with pytest.raises(ConfigError, match="less than one batch of 8"):
        m.create_data_loader(x, np.zeros((4, 6)))
    with pytest.raises(ConfigError, match="x has 2 entr"):
        m.fit(x=[np.zeros((8, 6))] * 2, y=np.zeros((8, 1)))
    with pytest.raises(ConfigError, match="METRICS_ACCURACY is not among the compiled metrics"):
        m.get_perf_metrics().get_accuracy()
    with pytest.raises(ConfigError, match="epochs must be an integer >= 1"):
        m.fit(epochs=0)
    bad, _ = mlp(["--import", str(tmp_path / "none.json")])
    with pytest.raises(StrategyError, match="strategy file .*none.json does not exist"):
        bad.compile()
    with pytest.raises(ConfigError, match="unknown backend 'tpu'; valid: numpy, cupy"):
        m.set_runtime(backend="tpu")


def test_float32_model_trains_on_float64_arrays():
    m, _ = compiled(dtype=DataType.DT_FLOAT)
    x_all, y_all = data()
    m.fit(x=x_all, y=y_all[:, 0])  # [N] labels are taken as [N, 1]
    assert m.get_weights()["fc1.kernel"].dtype == np.float32 and len(m.history) == 4


def test_compile_with_the_pipeline_search_trains_a_pipelined_strategy():
    """``--search-algorithm pipeline`` in a definition script: ``compile`` runs the pipeline MCMC (stages,
    micro-batches, schedule and the operators' degrees within their blocks) and ``fit`` trains it."""
    m, _ = compiled(["-ll:gpu", "2", "--search-algorithm", "pipeline", "--budget", "6",
                     "--enable-parameter-parallel"], lr=0.5)
    assert m.session.strategy.pipeline is not None and m.session.strategy.pipeline.stages == 2
    m.fit(epochs=3)
    losses = [h["loss"] for h in m.history]
    assert np.mean(losses[-SYNTHETIC_BATCHES:]) < np.mean(losses[:SYNTHETIC_BATCHES])
