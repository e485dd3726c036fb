"""Cost models: analytic roofline numbers computed by hand, transfer times, and the profiled model's
measure-once disk cache (hits, persistence, tolerance of bad files, fallbacks, operand ranges)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from flexrt.errors import ConfigError
from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir.ops import (ElementBinaryAttrs, ElementUnaryAttrs, EmbeddingAttrs, GatherAttrs, InputAttrs,
                           LinearAttrs, RepartitionAttrs)
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine.machine import DeviceSpec, Link, LinkType
from flexrt.simulator import profiling
from flexrt.simulator.cost_model import (MIN_TASK_S, OPTIMIZER_FLOPS_PER_ELEMENT, OPTIMIZER_PASSES, AnalyticCostModel,
                                         OpTimes, ProfiledCostModel, transfer_time)
from flexrt.simulator.profile_cache import (ENV_VAR, SCHEMA_VERSION, ProfileCache, ProfileCacheWarning,
                                            default_cache_path)

F32, F16, I64 = DataType.DT_FLOAT, DataType.DT_HALF, DataType.DT_INT64


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path, monkeypatch):
    """No test writes to the user's ~/.cache."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "default-cache"))


V100 = DeviceSpec("v100", "gpu", {F32: 15.7e12, F16: 125e12, DataType.DT_DOUBLE: 7.8e12}, 900e9, 16 << 30, 5e-6)
CPU = DeviceSpec("cpu0", "cpu", {F32: 1e12, F16: 0.5e12, DataType.DT_DOUBLE: 0.5e12}, 100e9, 64 << 30, 2e-6)
RELU = ElementUnaryAttrs(OpType.RELU)


def _linear(b, n, k, dtype=F32):
    return LinearAttrs(n, use_bias=False), [TensorShape((b, k), dtype), TensorShape((k, n), dtype)], \
        [TensorShape((b, n), dtype)]


# ---- analytic ---------------------------------------------------------------------------------------

def test_analytic_gemm_on_v100_is_compute_bound():
    attrs, ins, outs = _linear(1024, 4096, 4096)
    t = AnalyticCostModel().op_times(attrs, ins, outs, V100)
    flops = 2 * 1024 * 4096 * 4096
    compute = flops / (15.7e12 * 0.8)                       # 2.736 ms
    memory = (1024 * 4096 + 4096 * 4096 + 1024 * 4096) * 4 / 900e9   # 0.112 ms
    assert compute > 10 * memory
    assert t.forward_s == pytest.approx(5e-6 + compute, rel=1e-12)
    assert t.backward_s == pytest.approx(5e-6 + 2 * compute, rel=1e-12)  # 4 b n k FLOPs
    assert t.source == "analytic"


def test_analytic_relu_is_memory_bound_and_backward_moves_twice_the_bytes():
    s = TensorShape((1024, 1024))
    t = AnalyticCostModel().op_times(RELU, [s], [s], V100)
    memory = 2 * 1024 * 1024 * 4 / 900e9                     # read + write, 9.32 us
    assert 1024 * 1024 / (15.7e12 * 0.8) < memory / 50
    assert t.forward_s == pytest.approx(5e-6 + memory, rel=1e-12)
    assert t.backward_s == pytest.approx(5e-6 + 2 * memory, rel=1e-12)


def test_analytic_dtype_peaks_differ():
    model = AnalyticCostModel()
    f32 = model.op_times(*_linear(1024, 4096, 4096, F32), V100)
    f16 = model.op_times(*_linear(1024, 4096, 4096, F16), V100)
    assert f16.forward_s == pytest.approx(5e-6 + 2 * 1024 * 4096 ** 2 / (125e12 * 0.8), rel=1e-12)
    assert f32.forward_s / f16.forward_s > 7


def test_analytic_launch_overhead_is_the_floor():
    s = TensorShape((1, 1))
    t = AnalyticCostModel().op_times(RELU, [s], [s], V100)
    assert t.forward_s == pytest.approx(5e-6 + 8 / 900e9, rel=1e-12)
    assert t.forward_s >= V100.launch_overhead_s


@pytest.mark.parametrize("attrs, shape", [(RepartitionAttrs(0, 2), TensorShape((64, 64))),
                                          (InputAttrs(TensorShape((64, 64))), TensorShape((64, 64)))],
                         ids=["repartition", "input"])
def test_analytic_parallel_ops_and_sources_cost_the_launch_overhead_only(attrs, shape):
    t = AnalyticCostModel().op_times(attrs, [shape], [shape], V100)
    assert (t.forward_s, t.backward_s) == (5e-6, 5e-6)
    zero_launch = DeviceSpec("free", "gpu", V100.peak_flops, 900e9, 1, 0.0)
    t0 = AnalyticCostModel().op_times(attrs, [shape], [shape], zero_launch)
    assert t0.forward_s == MIN_TASK_S > 0  # the engine rejects zero-time tasks


def test_analytic_efficiency_override_replaces_the_device_efficiency():
    attrs, ins, outs = _linear(1024, 4096, 4096)
    t = AnalyticCostModel(efficiency_override=0.5).op_times(attrs, ins, outs, V100)
    assert t.forward_s == pytest.approx(5e-6 + 2 * 1024 * 4096 ** 2 / (15.7e12 * 0.5), rel=1e-12)
    with pytest.raises(ConfigError, match=r"efficiency_override is 1.5; expected a number in \(0, 1\]"):
        AnalyticCostModel(efficiency_override=1.5)


def test_analytic_update_time_scales_with_bytes_and_optimizer():
    model = AnalyticCostModel()
    w = TensorShape((4096, 4096))
    sgd = model.update_time(w, V100)
    assert sgd == pytest.approx(5e-6 + 3 * w.size_bytes / 900e9, rel=1e-12)
    assert model.update_time(w, V100, OptimizerKind.ADAM) == pytest.approx(5e-6 + 7 * w.size_bytes / 900e9, rel=1e-12)
    big = model.update_time(TensorShape((8192, 4096)), V100)
    assert big - 5e-6 == pytest.approx(2 * (sgd - 5e-6), rel=1e-12)
    assert set(OPTIMIZER_PASSES) == set(OPTIMIZER_FLOPS_PER_ELEMENT) == set(OptimizerKind)  # every kind is costed


def test_analytic_reduce_time_reads_n_writes_one():
    model = AnalyticCostModel()
    s = TensorShape((1024, 1024))
    assert model.reduce_time(s, 4, V100) == pytest.approx(5e-6 + 5 * s.size_bytes / 900e9, rel=1e-12)
    assert model.reduce_time(s, 8, V100) > model.reduce_time(s, 4, V100)
    assert model.reduce_time(TensorShape((2048, 1024)), 4, V100) - 5e-6 == pytest.approx(
        2 * (model.reduce_time(s, 4, V100) - 5e-6), rel=1e-12)
    assert model.reduce_time(s, 1, V100) == 5e-6
    with pytest.raises(ConfigError, match="n is 0; expected an int >= 1"):
        model.reduce_time(s, 0, V100)


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    nvlink = Link(0, LinkType.NVLINK, 25e9, 5e-6, "gpu0", "gpu1")
    assert transfer_time(nvlink, 25_000_000) == pytest.approx(5e-6 + 1e-3, rel=1e-12)
    assert transfer_time(nvlink, 0) == 5e-6
    assert AnalyticCostModel().transfer_time(nvlink, 10**9) == ProfiledCostModel().transfer_time(nvlink, 10**9)
    with pytest.raises(ConfigError, match="num_bytes is -1; expected an int >= 0"):
        transfer_time(nvlink, -1)


def test_op_times_rejects_nonpositive_times():
    with pytest.raises(ValueError, match="must be finite and > 0"):
        OpTimes(0.0, 1.0)
    with pytest.raises(ValueError, match="must be finite and > 0"):
        OpTimes(1.0, math.nan)


# ---- profiled ----------------------------------------------------------------------------------------

@pytest.fixture
def count_kernels(monkeypatch):
    """Counts forward-kernel runs made by the profiler."""
    calls = []
    real = profiling.run_forward

    def counting(xp, attrs, operands):
        calls.append(attrs.op_type)
        return real(xp, attrs, operands)

    monkeypatch.setattr(profiling, "run_forward", counting)
    return calls


def _model(path, **kw):
    return ProfiledCostModel(cache_path=path, repeats=3, warmup=1, flush_interval_s=0, **kw)


S = TensorShape((64, 128))


def test_profiled_measures_once_then_hits_the_cache(tmp_path, count_kernels):
    model = _model(tmp_path / "p.json")
    t1 = model.op_times(RELU, [S], [S], CPU)
    assert len(count_kernels) == 4 and model.measurements == 1  # 1 warmup + 3 timed
    t2 = model.op_times(RELU, [S], [S], CPU)
    assert len(count_kernels) == 4 and t2 == t1
    assert t1.source == "profiled:numpy" and t1.forward_s > 0
    analytic = AnalyticCostModel().op_times(RELU, [S], [S], CPU)
    assert t1.backward_s / t1.forward_s == pytest.approx(analytic.backward_s / analytic.forward_s)
    model.op_times(RELU, [TensorShape((64, 64))], [TensorShape((64, 64))], CPU)  # other shape: new key
    assert len(count_kernels) == 8 and model.measurements == 2


def test_profiled_cache_persists_across_instances(tmp_path, count_kernels):
    path = tmp_path / "p.json"
    t1 = _model(path).op_times(RELU, [S], [S], CPU)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA_VERSION and len(data["entries"]) == 1
    (entry,) = data["entries"].values()
    assert entry["backward"] == "derived" and entry["key"]["op"] == "relu"
    assert entry["key"]["device"] == {"kind": "cpu", "name": "cpu0"} and entry["key"]["backend"] == "numpy"
    second = _model(path)
    assert second.op_times(RELU, [S], [S], CPU) == t1
    assert second.measurements == 0 and len(count_kernels) == 4


def test_profiled_batched_writes_reach_disk_on_flush(tmp_path):
    path = tmp_path / "p.json"
    model = ProfiledCostModel(cache_path=path, repeats=1, warmup=0, flush_interval_s=3600)
    model.op_times(RELU, [S], [S], CPU)          # first write is immediate
    model.op_times(RELU, [TensorShape((8, 8))], [TensorShape((8, 8))], CPU)
    assert len(json.loads(path.read_text())["entries"]) == 1
    model.flush()
    assert len(json.loads(path.read_text())["entries"]) == 2


def test_profiled_concurrent_writers_merge(tmp_path):
    path = tmp_path / "p.json"
    a, b = _model(path), _model(path)
    a.cache.get({})  # both load the (empty) file before either writes
    b.cache.get({})
    a.op_times(RELU, [S], [S], CPU)
    b.op_times(RELU, [TensorShape((8, 8))], [TensorShape((8, 8))], CPU)
    assert len(json.loads(path.read_text())["entries"]) == 2


def _warned_and_remeasured(path, count_kernels, match):
    model = _model(path)
    with pytest.warns(ProfileCacheWarning, match=match):
        t = model.op_times(RELU, [S], [S], CPU)
    assert model.measurements == 1 and t.source == "profiled:numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # reported once, and the rewritten file is clean
        assert model.op_times(RELU, [S], [S], CPU) == t
        assert _model(path).op_times(RELU, [S], [S], CPU) == t


def test_profiled_corrupt_cache_file_is_remeasured_with_a_warning(tmp_path, count_kernels):
    path = tmp_path / "p.json"
    path.write_text('{"schema": 1, "entries": {"abc": ')
    _warned_and_remeasured(path, count_kernels, "is not valid JSON")


def _seed_entry(path, **changes):
    _model(path).op_times(RELU, [S], [S], CPU)
    data = json.loads(path.read_text())
    (name,) = data["entries"]
    data["entries"][name].update(changes)
    path.write_text(json.dumps(data))
    return name


@pytest.mark.parametrize("changes, match", [
    ({"forward_s": float("nan")}, "forward_s is nan; expected a finite time > 0"),
    ({"backward_s": -1.0}, "backward_s is -1.0; expected a finite time > 0"),
    ({"forward_s": "fast"}, "forward_s is 'fast'"),
    ({"repeats": None}, "repeats None"),
    ({"flexrt_version": "0.0.1"}, "written by flexrt '0.0.1'.*stale"),
    ({"schema": SCHEMA_VERSION - 1}, "stale"),
    ({"key": {"op": "relu"}}, "does not match its hash"),
], ids=["nan", "negative", "wrong-type", "missing-field", "stale-version", "stale-schema", "wrong-key"])
def test_profiled_bad_cache_entry_is_remeasured_with_a_warning(tmp_path, count_kernels, changes, match):
    path = tmp_path / "p.json"
    _seed_entry(path, **changes)
    _warned_and_remeasured(path, count_kernels, match)


def test_profiled_garbage_entry_and_stale_file_schema(tmp_path, count_kernels):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"schema": SCHEMA_VERSION, "entries": {"deadbeef": [1, 2, 3]}}))
    _warned_and_remeasured(path, count_kernels, "entry deadbeef is not an object \\(got list")
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"schema": 999, "entries": {}}))
    _warned_and_remeasured(stale, count_kernels, "cache schema 999.*stale")
    assert json.loads(stale.read_text())["schema"] == SCHEMA_VERSION


def test_profiled_unwritable_cache_warns_once_and_keeps_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    model = _model(blocker / "p.json")   # its folder is a file
    with pytest.warns(ProfileCacheWarning, match="cannot be"):
        t = model.op_times(RELU, [S], [S], CPU)
    assert t.source == "profiled:numpy" and model.op_times(RELU, [S], [S], CPU) == t


@pytest.mark.parametrize("attrs, shapes, reason", [
    (RepartitionAttrs(0, 2), [TensorShape((8, 8))], "parallelization operator"),
    (InputAttrs(TensorShape((8, 8))), [TensorShape((8, 8))], "is a source"),
], ids=["repartition", "input"])
def test_profiled_ops_without_kernels_fall_back(tmp_path, count_kernels, attrs, shapes, reason):
    model = _model(tmp_path / "p.json")
    t = model.op_times(attrs, shapes, shapes, CPU)
    assert t.source == "fallback:analytic" and reason in t.note
    assert (t.forward_s, t.backward_s) == (2e-6, 2e-6) and count_kernels == []


def test_profiled_numpy_does_not_profile_gpu_devices(tmp_path, count_kernels):
    t = _model(tmp_path / "p.json").op_times(RELU, [S], [S], V100)
    assert t.source == "fallback:analytic" and "profiles cpu devices; v100 is a gpu" in t.note
    analytic = AnalyticCostModel().op_times(RELU, [S], [S], V100)
    assert (t.forward_s, t.backward_s) == (analytic.forward_s, analytic.backward_s)
    assert count_kernels == []


def test_profiled_cupy_without_a_gpu_falls_back(tmp_path, monkeypatch):
    from flexrt.simulator import _profile_cupy
    monkeypatch.setattr(_profile_cupy, "unavailable_reason", lambda: "CuPy sees no GPU")
    t = ProfiledCostModel(backend="cupy", cache_path=tmp_path / "p.json").op_times(RELU, [S], [S], V100)
    assert t.source == "fallback:analytic" and "CuPy sees no GPU" in t.note


def test_profiled_cupy_backend_times_gpu_devices(tmp_path, monkeypatch, count_kernels):
    """The GPU branch's wiring, with NumPy standing in for CuPy (the real one: the gpu test below)."""
    from flexrt.simulator import _profile_cupy
    synced = []
    monkeypatch.setattr(_profile_cupy, "unavailable_reason", lambda: None)
    monkeypatch.setattr(_profile_cupy, "load", lambda: (np, lambda: synced.append(1), "Fake GPU"))
    model = _model(tmp_path / "p.json", backend="cupy")
    t = model.op_times(RELU, [S], [S], V100)
    assert t.source == "profiled:cupy" and len(count_kernels) == 4 and len(synced) == 4
    assert model.op_times(RELU, [S], [S], CPU).note == "backend cupy profiles gpu devices; cpu0 is a cpu"


@pytest.mark.gpu
def test_profiled_cupy_on_a_real_gpu(tmp_path, count_kernels):
    attrs, ins, outs = _linear(256, 512, 512)
    t = _model(tmp_path / "p.json", backend="cupy").op_times(attrs, ins, outs, V100)
    assert t.source == "profiled:cupy" and len(count_kernels) == 4 and 0 < t.forward_s < 1


def test_profiled_failing_kernel_falls_back_with_one_warning(tmp_path, monkeypatch):
    def broken(xp, attrs, operands):
        raise RuntimeError("boom")

    monkeypatch.setattr(profiling, "run_forward", broken)
    model = _model(tmp_path / "p.json")
    with pytest.warns(UserWarning, match="relu kernel failed.*boom"):
        t = model.op_times(RELU, [S], [S], CPU)
    assert t.source == "fallback:analytic"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.op_times(RELU, [S], [S], CPU) == t
    assert not (tmp_path / "p.json").exists()


def test_profiled_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="unknown backend 'torch'; valid: numpy, cupy"):
        ProfiledCostModel(backend="torch")
    with pytest.raises(ConfigError, match="repeats is 0; expected an int >= 1"):
        ProfiledCostModel(repeats=0)


def test_profiled_embedding_indices_in_range(tmp_path, count_kernels):
    attrs = EmbeddingAttrs(50, 16)
    ins = [TensorShape((256,), I64), TensorShape((50, 16))]
    idx, table = profiling.make_operands(profiling.backend("numpy"), attrs, ins)
    assert idx.dtype == np.int64 and 0 <= idx.min() and idx.max() < 50 and len(np.unique(idx)) > 25
    assert table.dtype == np.float32 and table.min() >= 0.5
    t = _model(tmp_path / "p.json").op_times(attrs, ins, [TensorShape((256, 16))], CPU)
    assert t.source == "profiled:numpy" and len(count_kernels) == 4


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_profiled_gather_index_in_range_along_dim(tmp_path, count_kernels, dim):
    attrs = GatherAttrs(dim)
    x, index = TensorShape((6, 10)), TensorShape((4, 5), I64)
    _, idx = profiling.make_operands(profiling.backend("numpy"), attrs, [x, index])
    assert idx.min() >= 0 and idx.max() < x.dims[dim] and idx.max() >= x.dims[dim] - 2
    t = _model(tmp_path / "p.json").op_times(attrs, [x, index], [TensorShape((4, 5))], CPU)
    assert t.source == "profiled:numpy"


def test_make_operands_is_deterministic_and_positive():
    be = profiling.backend("numpy")
    ins = [TensorShape((16, 16)), TensorShape((16, 16), F16)]
    a = profiling.make_operands(be, ElementBinaryAttrs(OpType.EW_DIV), ins)
    b = profiling.make_operands(be, ElementBinaryAttrs(OpType.EW_DIV), ins)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a[1].dtype == np.float16 and all(x.min() >= 0.5 for x in a)


def test_cache_path_from_env_var(tmp_path, monkeypatch, count_kernels):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "envdir"))
    assert default_cache_path() == tmp_path / "envdir" / "profile.json"
    ProfiledCostModel(repeats=1, warmup=0).op_times(RELU, [S], [S], CPU)
    assert len(json.loads((tmp_path / "envdir" / "profile.json").read_text())["entries"]) == 1
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "flexrt" / "profile.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_path().parts[-3:] == (".cache", "flexrt", "profile.json")


def test_profile_cache_get_misses_on_hash_collision(tmp_path):
    cache = ProfileCache(tmp_path / "p.json", flush_interval_s=0)
    assert cache.get({"op": "relu"}) is None and len(cache) == 0


def _write_entries(path, worker, n):
    from flexrt.simulator.profile_cache import CacheEntry, ProfileCache
    cache = ProfileCache(path, flush_interval_s=0)
    for i in range(n):
        cache.put({"worker": worker, "i": i}, CacheEntry(1e-6 * (i + 1), 2e-6 * (i + 1)))


def test_profile_cache_concurrent_processes_keep_every_entry(tmp_path):
    import multiprocessing
    path = tmp_path / "p.json"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_entries, args=(str(path), w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    cache = ProfileCache(path)
    assert len(cache) == 60
    assert cache.get({"worker": 3, "i": 14}).forward_s == pytest.approx(15e-6)


def test_pending_entries_survive_their_cache_being_dropped(tmp_path):
    """Entries put after the first write reach the file at exit even if the cache object is gone."""
    import gc

    from flexrt.simulator import profile_cache
    from flexrt.simulator.profile_cache import CacheEntry, ProfileCache
    path = tmp_path / "profile.json"
    cache = ProfileCache(path, flush_interval_s=3600)
    cache.put({"op": "a"}, CacheEntry(1e-3, 2e-3))  # the first put is written at once
    cache.put({"op": "b"}, CacheEntry(1e-3, 2e-3))  # this one waits for a flush
    assert ProfileCache(path).get({"op": "b"}) is None
    del cache
    gc.collect()
    profile_cache._flush_all()  # what the exit hook runs
    fresh = ProfileCache(path)
    assert fresh.get({"op": "a"}) is not None and fresh.get({"op": "b"}) is not None
