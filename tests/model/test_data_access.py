"""FlexFlow's data calls on a compiled model, in FlexFlow's own script patterns, on one device and on
four (``-ll:gpu 4``: data parallelism; ``--import`` of a random strategy): reading any tensor after a
forward pass, reading and writing weights (``Parameter``), inputs written with ``set_tensor`` /
``attach_numpy_array`` driving training exactly as data loaders do, the learning rate changed
mid-run, and the errors of values that do not fit.
"""

from __future__ import annotations

import numpy as np
import pytest

from flexrt.core import ActiMode, DataType, FFConfig, FFModel, LossType, MetricsType, SGDOptimizer
from flexrt.errors import ConfigError, ShapeError
from flexrt.model.tensor import Parameter
from flexrt.runtime.executor import optimizer_step
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.strategy import random_strategy, save_strategy, strategy_to_text

DEVICES = [["-ll:gpu", "1"], ["-ll:gpu", "4"]]
SCCE = LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY


def _mlp(argv, softmax=True):
    ffconfig = FFConfig(["-b", "8", *argv])
    ffmodel = FFModel(ffconfig)
    x = ffmodel.create_tensor([8, 6], DataType.DT_DOUBLE)
    t = ffmodel.dense(x, 8, ActiMode.AC_MODE_RELU, name="fc1")
    t = ffmodel.dense(t, 4, name="fc2")
    if softmax:
        t = ffmodel.softmax(t, name="sm")
    return ffconfig, ffmodel, x, t


def _data(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 6)), rng.integers(0, 4, (n, 1)).astype(np.int32)


# ---- FlexFlow's per-operator pattern: compile, load a batch, forward, read the output ------------

@pytest.mark.parametrize("argv", DEVICES)
def test_ops_pattern_forward_reads_the_operators_result(argv):
    ffconfig = FFConfig(["-b", "8", *argv])
    ffmodel = FFModel(ffconfig)
    rng = np.random.default_rng(1)
    a1 = rng.standard_normal((8, 5, 4, 4)).astype(np.float32)
    a2 = rng.standard_normal((8, 5, 4, 4)).astype(np.float32)
    t1 = ffmodel.create_tensor(a1.shape, DataType.DT_FLOAT)
    t2 = ffmodel.create_tensor(a2.shape, DataType.DT_FLOAT)
    out = ffmodel.relu(ffmodel.add(t1, t2))
    ffmodel.optimizer = SGDOptimizer(ffmodel, 0.001)
    ffmodel.compile(loss_type=SCCE, metrics=[MetricsType.METRICS_ACCURACY])  # not a softmax: warns
    dl1, dl2 = ffmodel.create_data_loader(t1, a1), ffmodel.create_data_loader(t2, a2)
    ffmodel.init_layers()
    dl1.reset(), dl1.next_batch(ffmodel), dl2.reset(), dl2.next_batch(ffmodel)
    ffmodel.forward()
    out.inline_map(ffmodel, ffconfig)
    np.testing.assert_array_equal(out.get_array(ffmodel, ffconfig), np.maximum(a1 + a2, 0))
    assert out.is_mapped() and out.get_flat_array(ffmodel, ffconfig).shape == (8 * 5 * 16,)
    out.inline_unmap(ffmodel, ffconfig)
    np.testing.assert_array_equal(t2.get_tensor(ffmodel), a2)   # an input reads its batch
    assert ffmodel.strategy is not None and ffmodel.machine.num_devices == int(argv[1])


@pytest.mark.parametrize("argv", DEVICES)
def test_intermediate_activations_and_outputs_read_after_forward(argv):
    _ffconfig, ffmodel, x, out = _mlp(argv)
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.1), loss_type=SCCE)
    xs, _ = _data(8)
    x.set_tensor(ffmodel, xs)
    ffmodel.forward()
    w = {p.name: p.get_weights(ffmodel) for p in ffmodel.parameters()}
    h = np.maximum(xs @ _as_in_out(w["fc1.kernel"], 6) + w["fc1.bias"], 0)
    logits = h @ _as_in_out(w["fc2.kernel"], 8) + w["fc2.bias"]
    layer = ffmodel.get_layer_by_name("fc1")
    np.testing.assert_allclose(layer.get_output_tensor().get_tensor(ffmodel), h, rtol=1e-12)
    np.testing.assert_array_equal(ffmodel.get_layer_by_id(1).get_input_tensor_by_id(0).get_tensor(ffmodel),
                                  layer.get_output_tensor().get_tensor(ffmodel))
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out.get_tensor(ffmodel), e / e.sum(1, keepdims=True), rtol=1e-12)


def _as_in_out(kernel, fan_in):
    """A dense kernel as [in, out] whichever layout the model keeps."""
    return kernel if kernel.shape[0] == fan_in else kernel.T


# ---- weights: print_layers-style get / set, under any strategy -----------------------------------

def _train(ffmodel, x, steps=3, seed=0):
    xs, ys = _data(8 * steps, seed)
    for i in range(steps):
        x.set_tensor(ffmodel, np.ascontiguousarray(xs[8 * i:8 * i + 8]))
        ffmodel.label_tensor.set_tensor(ffmodel, np.ascontiguousarray(ys[8 * i:8 * i + 8]))
        ffmodel.forward()
        ffmodel.zero_gradients()
        ffmodel.backward()
        ffmodel.update()


def _random_import(tmp_path, argv):
    """``--import`` of a random valid strategy on four devices (written by a first model)."""
    _, probe, _, _ = _mlp(argv)
    probe.compile(optimizer=SGDOptimizer(probe, 0.1), loss_type=SCCE)
    path = tmp_path / "random.json"
    save_strategy(str(path), random_strategy(probe.pcg, probe.machine, 3), probe.machine)
    return [*argv, "--import", str(path)]


@pytest.mark.parametrize("how", ["data", "random"])
def test_weights_read_and_written_match_one_device(how, tmp_path):
    argv = ["-ll:gpu", "4"] if how == "data" else _random_import(tmp_path, ["-ll:gpu", "4"])
    runs = []
    for a in (["-ll:gpu", "1"], argv):
        ffconfig, ffmodel, x, _ = _mlp(a)
        ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.1, momentum=0.9), loss_type=SCCE)
        _train(ffmodel, x, 2)
        bias = ffmodel.get_layer_by_id(0).get_bias_tensor()
        bias.inline_map(ffmodel, ffconfig)        # print_layers.py: change the mapped array in place
        arr = bias.get_array(ffmodel, ffconfig)
        arr *= 0.0
        arr += 2.1
        bias.inline_unmap(ffmodel, ffconfig)
        np.testing.assert_array_equal(bias.get_weights(ffmodel), np.full(8, 2.1))
        kernel = ffmodel.get_tensor_by_id(2)      # fc2.kernel
        assert isinstance(kernel, Parameter) and kernel.name == "fc2.kernel"
        kernel.set_weights(ffmodel, np.full(kernel.dims, 0.05))
        _train(ffmodel, x, 2, seed=1)
        runs.append({p.name: p.get_weights(ffmodel) for p in ffmodel.parameters()})
    for name, w in runs[0].items():
        np.testing.assert_allclose(runs[1][name], w, rtol=0, atol=1e-12, err_msg=name)
    assert abs(runs[0]["fc1.bias"] - 2.1).max() > 1e-6   # the written bias trained on


def test_set_weights_survives_until_init_layers_restores():
    _ffconfig, ffmodel, x, _ = _mlp(["-ll:gpu", "2"])
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.1), loss_type=SCCE)
    p = ffmodel.get_layer_by_name("fc2").get_weight_tensor()
    initial = p.get_weights(ffmodel)
    p.set_weights(ffmodel, np.ones(p.dims))
    xs, _ = _data(8)
    x.set_tensor(ffmodel, xs)
    ffmodel.forward()
    np.testing.assert_array_equal(p.get_weights(ffmodel), np.ones(p.dims))
    ffmodel.init_layers()
    np.testing.assert_array_equal(p.get_weights(ffmodel), initial)


# ---- the attach-style loop: set_tensor inputs train as data loaders do ---------------------------

@pytest.mark.parametrize("argv", DEVICES)
def test_set_tensor_training_equals_data_loaders(argv):
    xs, ys = _data(32)
    _, a, xa, _ = _mlp(argv)
    a.compile(optimizer=SGDOptimizer(a, 0.1), loss_type=SCCE, metrics=[MetricsType.METRICS_ACCURACY])
    a.fit(x=a.create_data_loader(xa, xs), y=a.create_data_loader(a.label_tensor, ys), epochs=1)
    ffconfig, b, xb, _ = _mlp(argv)
    b.compile(optimizer=SGDOptimizer(b, 0.1), loss_type=SCCE, metrics=[MetricsType.METRICS_ACCURACY])
    label = b.label_tensor
    b.init_layers()
    b.reset_metrics()
    for i in range(4):
        xb.set_tensor(b, np.ascontiguousarray(xs[8 * i:8 * i + 8]))
        label.attach_numpy_array(b, ffconfig, np.ascontiguousarray(ys[8 * i:8 * i + 8]))
        b.forward()
        b.zero_gradients()
        b.backward()
        b.update()
        label.detach_numpy_array(ffconfig)
    assert [h["loss"] for h in b.history] == [h["loss"] for h in a.history]
    for name, w in a.get_weights().items():
        np.testing.assert_array_equal(b.get_weights()[name], w, err_msg=name)
    assert b.get_perf_metrics().get_accuracy() == a.get_perf_metrics().get_accuracy()


def test_attached_input_changed_in_place_reaches_the_next_forward():
    ffconfig, ffmodel, x, out = _mlp(["-ll:gpu", "2"])
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.1), loss_type=SCCE)
    arr = np.zeros((8, 6))
    x.attach_numpy_array(ffmodel, ffconfig, arr)
    assert x.is_mapped()
    ffmodel.forward()
    before = out.get_tensor(ffmodel)
    arr += 1.0
    ffmodel.forward()
    assert not np.allclose(out.get_tensor(ffmodel), before)
    np.testing.assert_array_equal(x.get_array(ffconfig, DataType.DT_DOUBLE), arr)  # FlexFlow's older form
    x.detach_numpy_array(ffconfig)
    assert not x.is_mapped()


def test_label_tensor_mapped_before_any_batch_holds_zeros_and_takes_writes():
    ffconfig, ffmodel, _x, _ = _mlp([])
    ffmodel.compile(optimizer=SGDOptimizer(ffmodel, 0.1), loss_type=SCCE)
    label = ffmodel.label_tensor
    label.inline_map(ffmodel, ffconfig)
    arr = label.get_array(ffmodel, ffconfig)
    assert arr.shape == (8, 1) and arr.dtype == np.int32 and not arr.any()
    arr += 1
    label.inline_unmap(ffmodel, ffconfig)
    np.testing.assert_array_equal(label.get_tensor(ffmodel), np.ones((8, 1)))


def test_set_learning_rate_changes_the_next_updates():
    xs, ys = _data(16)
    _, m, _x, _ = _mlp(["-ll:gpu", "2"])
    opt = SGDOptimizer(m, 0.1)
    m.compile(optimizer=opt, loss_type=SCCE)
    ref = ReferenceTrainer(m.pcg, m.get_weights(), optimizer_step("sgd", lr=0.1), "sparse_categorical_crossentropy")
    for i, lr in enumerate((0.1, 0.02)):
        if i:
            opt.set_learning_rate(lr)
            ref.update = optimizer_step("sgd", lr=lr)
        batch = (np.ascontiguousarray(xs[8 * i:8 * i + 8]), np.ascontiguousarray(ys[8 * i:8 * i + 8]))
        m.fit(x=[batch[0]], y=batch[1])
        ref.step({"input_1": batch[0]}, batch[1])
    assert opt.lr == 0.02
    for name, w in ref.weights.items():
        np.testing.assert_allclose(m.get_weights()[name], w, rtol=0, atol=1e-12, err_msg=name)


# ---- lookups, constants, seq_length --------------------------------------------------------------

def test_lookups_and_constants():
    ffconfig = FFConfig(["-b", "4"])
    m = FFModel(ffconfig)
    x = m.create_tensor([4, 3], DataType.DT_FLOAT)
    c = m.create_constant([4, 3], 2.5, DataType.DT_FLOAT)
    out = m.multiply(x, c)
    assert m.inputs == (x,) and m.get_last_layer() is m.get_layer_by_id(0)
    assert list(m.get_layers()) == [0]
    m.compile(loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE)
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    x.set_tensor(m, xs)
    m.forward(seq_length=7)   # ignored, as FlexFlow ignores it without a sequence batch matmul
    np.testing.assert_array_equal(out.get_tensor(m), xs * 2.5)
    np.testing.assert_array_equal(c.get_tensor(m), np.full((4, 3), 2.5, np.float32))
    with pytest.raises(ConfigError, match="seq_length must be an integer or None"):
        m.forward(seq_length="all")


def test_input_set_before_compile_is_kept():
    _ffconfig, m, x, out = _mlp([])
    xs, _ = _data(8)
    x.set_tensor(m, xs)            # bert_proxy_native.py sets its input before compile
    m.compile(optimizer=SGDOptimizer(m, 0.1), loss_type=SCCE)
    m.forward()
    assert out.get_tensor(m).shape == (8, 4)


# ---- values that do not fit ----------------------------------------------------------------------

def test_values_that_do_not_fit_are_refused_by_name():
    ffconfig, m, x, out = _mlp([])
    with pytest.raises(ConfigError, match=r"weight 'fc1.kernel'.*before compile"):
        m.get_layer_by_id(0).get_weight_tensor().get_weights(m)
    m.compile(optimizer=SGDOptimizer(m, 0.1), loss_type=SCCE)
    with pytest.raises(ConfigError, match=r"get_tensor: tensor sm:0 \[8, 4\] DT_DOUBLE is read before a forward"):
        out.get_tensor(m)
    with pytest.raises(ShapeError, match=r"set_tensor: tensor input_1:0 \[8, 6\] DT_DOUBLE needs an array of "
                                         r"shape \[8, 6\], got \[8, 5\]"):
        x.set_tensor(m, np.zeros((8, 5)))
    with pytest.raises(ShapeError, match=r"needs dtype float64, got float32"):
        x.set_tensor(m, np.zeros((8, 6), np.float32))
    with pytest.raises(ConfigError, match=r"is a layer output, computed by the model"):
        out.set_tensor(m, np.zeros((8, 4)))
    other = FFModel(FFConfig(["-b", "8"]))
    with pytest.raises(ConfigError, match="belongs to another FFModel"):
        x.set_tensor(other, np.zeros((8, 6)))
    with pytest.raises(ConfigError, match="inline_unmap: .* is not mapped"):
        x.inline_unmap(m, ffconfig)
    with pytest.raises(ShapeError, match="holds DT_DOUBLE, not DT_FLOAT"):
        x.inline_map(m, ffconfig)
        x.get_array(m, ffconfig, DataType.DT_FLOAT)
    with pytest.raises(ConfigError, match="has no bias"):
        m2 = FFModel(FFConfig(["-b", "8"]))
        m2.dense(m2.create_tensor([8, 3]), 2, use_bias=False).owner_op.get_bias_tensor()


# ---- the script's machine and --export -----------------------------------------------------------

def test_ll_gpu_and_nodes_make_the_machine_and_export_writes_flexflows_text(tmp_path):
    path = tmp_path / "s.txt"
    _, m, _, _ = _mlp(["-ll:gpu", "2", "--nodes", "2", "--export", str(path)])
    m.compile(optimizer=SGDOptimizer(m, 0.1), loss_type=SCCE)
    assert (m.machine.num_nodes, m.machine.num_devices) == (2, 4)
    assert path.read_text() == strategy_to_text(m.strategy, m.machine)


def test_demo_gather_pattern_attaches_int64_ids_and_trains_alike():
    """FlexFlow's demo_gather.py: int64 ids attached to an int32 tensor (converted: they fit), labels
    attached, the manual loop on attached arrays; the same weights on one device and on two."""
    results = []
    for argv in (["-ll:gpu", "1"], ["-ll:gpu", "2"]):
        ffconfig = FFConfig(["-b", "4", *argv])
        ffmodel = FFModel(ffconfig)
        x = np.full((4, 16, 5), 0.01, np.float32)
        ids = np.array([[[0], [5], [3], [3], [7], [9]]]).repeat(4, 0).repeat(5, 2)   # int64
        inp = ffmodel.create_tensor([4, 16, 5], DataType.DT_FLOAT)
        index = ffmodel.create_tensor([4, 6, 5], DataType.DT_INT32)
        out = ffmodel.gather(ffmodel.dense(inp, 5, ActiMode.AC_MODE_NONE, False), index, 1)
        ffmodel.optimizer = SGDOptimizer(ffmodel, 0.01)
        ffmodel.compile(loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE,
                        metrics=[MetricsType.METRICS_MEAN_SQUARED_ERROR])
        ffmodel.init_layers()
        inp.attach_numpy_array(ffmodel, ffconfig, x)
        index.attach_numpy_array(ffmodel, ffconfig, ids)
        y = np.random.default_rng(0).random((4, 6, 5)).astype(np.float32)
        ffmodel.label_tensor.attach_numpy_array(ffmodel, ffconfig, y)
        for _ in range(3):
            ffmodel.forward()
            ffmodel.backward()
            ffmodel.update()
        ffmodel.forward()
        hidden = ffmodel.get_layer_by_id(0).get_output_tensor().get_tensor(ffmodel)
        np.testing.assert_array_equal(out.get_tensor(ffmodel), np.take_along_axis(hidden, ids, 1))
        results.append(ffmodel.get_weights())
    for name, w in results[0].items():
        np.testing.assert_allclose(results[1][name], w, rtol=1e-5, atol=1e-7, err_msg=name)
    with pytest.raises(ShapeError, match=r"holds int32 ids .* int64 values 1099511627776\.\.1099511627776 do not fit"):
        index.set_tensor(ffmodel, np.full((4, 6, 5), 2**40))


@pytest.mark.parametrize("a_dim, b_dim, acts", [(2, 3, False), (None, None, False), (1, 0, True), (0, 1, True)])
def test_seq_length_acts_only_on_fortran_dimensions_0_and_1(a_dim, b_dim, acts):
    """FlexFlow's kernels act on sequence dimensions 0 and 1 counted from the last; its BERT proxy
    passes 2 and 3, which FlexFlow ignores: forward(seq_length=0) then runs whole sequences."""
    m = FFModel(FFConfig(["-b", "2"]))
    a = m.create_tensor([2, 6, 5], DataType.DT_FLOAT)
    b = m.create_tensor([2, 5, 6], DataType.DT_FLOAT)
    out = m.batch_matmul(a, b, a_seq_length_dim=a_dim, b_seq_length_dim=b_dim)
    m.compile(loss_type=LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE)
    rng = np.random.default_rng(0)
    xa, xb = rng.standard_normal((2, 6, 5)).astype(np.float32), rng.standard_normal((2, 5, 6)).astype(np.float32)
    a.set_tensor(m, xa)
    b.set_tensor(m, xb)
    full = 5 if (a_dim, b_dim) == (0, 1) else 6
    if acts:
        with pytest.raises(ConfigError, match=f"valid: None, -1 or {full}"):
            m.forward(seq_length=3)
        m.forward(seq_length=full)
    else:
        m.forward(seq_length=0)
    np.testing.assert_allclose(out.get_tensor(m), xa @ xb, rtol=1e-5)


def test_loaders_giving_different_batch_counts_are_refused():
    """An output whose first dimension is not the batch (a split along the samples: FlexFlow's
    cifar10_cnn_torch.py does torch.split(y, 1)) makes a label tensor of another batch size; its
    loader would pair other samples with each input batch, so fit and eval refuse, naming both."""
    ff = FFModel(FFConfig(["-b", "8"]))
    x = ff.create_tensor([8, 4], DataType.DT_FLOAT)
    first, _ = ff.split(ff.dense(x, 3), [1, 7], 0)
    ff.softmax(first)
    ff.compile(optimizer=SGDOptimizer(ff, 0.1), loss_type="sparse_categorical_crossentropy")
    xs = np.zeros((32, 4), np.float32)
    ys = np.zeros((32, 1), np.int32)
    for call in (lambda: ff.fit(x=xs, y=ys), lambda: ff.eval(x=xs, y=ys)):
        with pytest.raises(ConfigError, match=r"different numbers of batches.*32 samples, 8 a batch \(4 batches\); "
                                              r"label: 32 samples, 1 a batch \(32 batches\)"):
            call()
