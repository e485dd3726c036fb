"""The CuPy backend (``flexrt.runtime._cupy``).

Without a GPU: a fake ``cupy`` module (NumPy arrays that know their GPU, fake devices, streams and
events that record every call) stands in for CuPy. It checks the device -> GPU/stream mapping, that
a copy waits on the source's latest event before copying, that nothing synchronizes the host inside
``on``/``copy_to``, and the error without CuPy. It also runs a race detector: every stream keeps a
vector clock (advanced by its own work, merged by ``wait_event``), every array root remembers its last
write and the reads since, and an access not ordered after the conflicting ones is a race.

With a GPU (``gpu`` marker): a small MLP trains data parallel on two devices with the real CuPy and
ends with the NumPy backend's weights (float64, 1e-10).
"""

from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

from flexrt.errors import ConfigError


# ---- a fake cupy ---------------------------------------------------------------------------------

class _Root:
    """One allocation: its GPU, last write (stream, tick) and the reads since."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.write = None
        self.reads = []


def make_fake_cupy(num_gpus: int = 2):
    fake = types.ModuleType("cupy")
    fake.calls = []          # (what, details...)
    fake.races = []
    fake.device_errors = []
    fake.host_syncs = 0
    tls = threading.local()
    lock = threading.RLock()

    def device_stack():
        if not hasattr(tls, "devices"):
            tls.devices = []
            tls.streams = {}
        return tls.devices

    def current_device():
        s = device_stack()
        return s[-1] if s else 0

    null_streams = {}

    def current_stream(dev=None):
        dev = current_device() if dev is None else dev
        device_stack()
        stack = tls.streams.get(dev)
        if stack:
            return stack[-1]
        with lock:
            if dev not in null_streams:
                null_streams[dev] = Stream(_device=dev, _name=f"null{dev}")
            return null_streams[dev]

    class Device:
        def __init__(self, id=0):
            self.id = id

        def __enter__(self):
            device_stack().append(self.id)
            return self

        def __exit__(self, *exc):
            device_stack().pop()

        def synchronize(self):
            fake.host_syncs += 1
            fake.calls.append(("device_sync", self.id))

    class Stream:
        count = 0

        def __init__(self, non_blocking=False, _device=None, _name=None):
            self.device_id = current_device() if _device is None else _device
            self.non_blocking = non_blocking
            Stream.count += 1
            self.name = _name or f"s{Stream.count}"
            self.clock = {self.name: 0}
            fake.calls.append(("stream", self.name, self.device_id, non_blocking))

        def __repr__(self):
            return f"<Stream {self.name} gpu{self.device_id}>"

        def __enter__(self):
            device_stack()
            tls.streams.setdefault(self.device_id, []).append(self)
            return self

        def __exit__(self, *exc):
            tls.streams[self.device_id].pop()

        def tick(self):
            with lock:
                self.clock[self.name] += 1
                return self.name, self.clock[self.name]

        def wait_event(self, ev):
            assert ev.clock is not None, "waiting on an event never recorded"
            with lock:
                for k, v in ev.clock.items():
                    self.clock[k] = max(self.clock.get(k, 0), v)
            fake.calls.append(("wait", self.name, ev.id))

        def synchronize(self):
            fake.host_syncs += 1
            fake.calls.append(("stream_sync", self.name))

    class Event:
        count = 0

        def __init__(self, block=False, disable_timing=False, interprocess=False):
            Event.count += 1
            self.id = Event.count
            self.device = current_device()
            self.clock = None

        def record(self, stream=None):
            stream = stream or current_stream()
            if stream.device_id != self.device:
                fake.device_errors.append(f"event of gpu{self.device} recorded on {stream}")
            with lock:
                self.clock = dict(stream.clock)
            fake.calls.append(("record", stream.name, self.id))

        def synchronize(self):
            fake.host_syncs += 1
            fake.calls.append(("event_sync", self.id))

    def hb(access, stream):
        name, tick = access
        return stream.clock.get(name, 0) >= tick

    def access(what, reads=(), writes=(), stream=None, kernel=True):
        """An operation on ``stream`` (the current one by default) reading and writing arrays."""
        stream = stream or current_stream()
        dev = current_device()
        with lock:
            arrays = [a for a in list(reads) + list(writes) if isinstance(a, FakeArray)]
            if kernel:
                if stream.device_id != dev:
                    fake.device_errors.append(f"{what}: {stream} used on gpu{dev}")
                for a in arrays:
                    if a._root.gpu != dev:
                        fake.device_errors.append(f"{what}: array of gpu{a._root.gpu} used on gpu{dev}")
            me = stream.tick()
            for a in reads:
                if isinstance(a, FakeArray) and a._root.write and not hb(a._root.write, stream):
                    fake.races.append(f"{what} on {stream.name} reads what {a._root.write} wrote")
            for a in writes:
                if not isinstance(a, FakeArray):
                    continue
                r = a._root
                if r.write and not hb(r.write, stream):
                    fake.races.append(f"{what} on {stream.name} overwrites what {r.write} wrote")
                for rd in r.reads:
                    if rd[0] != stream.name and not hb(rd, stream):
                        fake.races.append(f"{what} on {stream.name} overwrites what {rd} reads")
            for a in reads:
                if isinstance(a, FakeArray):
                    a._root.reads.append(me)
            for a in writes:
                if isinstance(a, FakeArray):
                    a._root.write = me
                    a._root.reads = []

    def plain(x):
        if isinstance(x, FakeArray):
            return x.view(np.ndarray)
        if isinstance(x, (list, tuple)):
            return type(x)(plain(y) for y in x)
        return x

    def arrays_in(xs):
        for x in xs:
            if isinstance(x, FakeArray):
                yield x
            elif isinstance(x, (list, tuple)):
                yield from arrays_in(x)

    def fresh(res, what):
        """Wrap a new NumPy result as a new allocation on the current GPU, written by the current stream."""
        if isinstance(res, np.ndarray) and not isinstance(res, FakeArray):
            out = res.view(FakeArray)
            out._root = _Root(current_device())
            access(what, writes=[out], kernel=False)
            return out
        if isinstance(res, tuple):
            return tuple(fresh(r, what) for r in res)
        return res

    class _Ptr:
        def __init__(self, arr):
            self.arr = arr

        def copy_from_device_async(self, src, size, stream=None):
            assert size == self.arr.nbytes == src.arr.nbytes and self.arr.flags.c_contiguous
            stream = stream or current_stream()
            fake.calls.append(("memcpy", stream.name))
            access("memcpy", reads=[src.arr], writes=[self.arr], stream=stream, kernel=False)
            np.copyto(self.arr.view(np.ndarray), src.arr.view(np.ndarray).reshape(self.arr.shape))

    class FakeArray(np.ndarray):
        def __array_finalize__(self, obj):
            if isinstance(obj, FakeArray) and np.may_share_memory(self.view(np.ndarray), obj.view(np.ndarray)):
                self._root = obj._root           # a view
            else:
                self._root = _Root(getattr(getattr(obj, "_root", None), "gpu", current_device()))
                if isinstance(obj, FakeArray):   # a copy made by a method (astype, copy, ...)
                    access("method", reads=[obj], writes=[self])

        @property
        def device(self):
            return Device(self._root.gpu)

        @property
        def data(self):
            return _Ptr(self)

        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            outs = kwargs.get("out", ())
            writes = list(arrays_in(outs)) + ([inputs[0]] if method == "at" else [])
            access(f"{ufunc.__name__}.{method}", reads=list(arrays_in(inputs)), writes=writes)
            if outs:
                kwargs["out"] = plain(tuple(outs))
            res = getattr(ufunc, method)(*plain(inputs), **kwargs)
            if outs:
                return outs[0] if len(outs) == 1 else tuple(outs)
            return fresh(res, ufunc.__name__)

        def __array_function__(self, func, types_, args, kwargs):
            out = kwargs.get("out")
            access(func.__name__, reads=list(arrays_in(args)) + list(arrays_in(kwargs.values())),
                   writes=[out] if isinstance(out, FakeArray) else [])
            res = func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})
            return out if out is not None else fresh(res, func.__name__)

        def __setitem__(self, idx, value):
            access("setitem", reads=[value] if isinstance(value, FakeArray) else [], writes=[self])
            self.view(np.ndarray)[plain(idx)] = plain(value)

        def __getitem__(self, idx):
            res = self.view(np.ndarray)[plain(idx)]
            if isinstance(res, np.ndarray) and np.may_share_memory(res, self.view(np.ndarray)):
                v = res.view(FakeArray)
                v._root = self._root
                return v
            access("gather", reads=[self])
            return fresh(res, "gather")

        def get(self, stream=None, **_):
            access("get", reads=[self], stream=stream, kernel=False)
            fake.host_syncs += 1
            fake.calls.append(("get", (stream or current_stream()).name))
            return np.array(self.view(np.ndarray))

    def creator(fn, name):
        def make(*args, **kwargs):
            fake.calls.append((name, current_device(), current_stream().name))
            return fresh(fn(*plain(args), **{k: plain(v) for k, v in kwargs.items()}), name)
        return make

    for name in ("zeros", "empty", "full", "ones", "arange", "eye"):
        setattr(fake, name, creator(getattr(np, name), name))

    def asarray(a, dtype=None):
        if isinstance(a, FakeArray):
            return a if dtype is None else a.astype(dtype)
        fake.calls.append(("upload", current_device(), current_stream().name))
        return fresh(np.array(a, dtype=dtype), "upload")

    def copyto(dst, src):
        fake.calls.append(("copyto", current_device(), current_stream().name))
        access("copyto", reads=[src], writes=[dst])
        np.copyto(dst.view(np.ndarray), plain(src))

    def ascontiguousarray(a):
        access("ascontiguousarray", reads=[a])
        return fresh(np.array(plain(a), order="C"), "ascontiguousarray")

    fake.asarray = fake.array = asarray
    fake.copyto = copyto
    fake.ascontiguousarray = ascontiguousarray
    fake.ndarray = FakeArray
    fake.asnumpy = lambda a, stream=None: a.get(stream=stream) if isinstance(a, FakeArray) else np.asarray(a)
    fake.__getattr__ = lambda name: getattr(np, name)   # the rest of the array API: NumPy's

    runtime = types.SimpleNamespace(getDeviceCount=lambda: num_gpus,
                                    deviceSynchronize=lambda: setattr(fake, "host_syncs", fake.host_syncs + 1))
    fake.cuda = types.SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=runtime)
    fake.current_stream = current_stream
    return fake


@pytest.fixture
def fake(monkeypatch):
    f = make_fake_cupy(2)
    monkeypatch.setitem(sys.modules, "cupy", f)
    return f


def backend(n=4):
    from flexrt.runtime.backend import get_backend
    return get_backend("cupy", n)


# ---- without a GPU -----------------------------------------------------------------------------------

def test_without_cupy_the_error_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ConfigError, match="CuPy is not installed") as e:
        backend()
    assert 'pip install -e ".[gpu]"' in str(e.value) and "cupy-cuda12x" in str(e.value)


def test_without_a_gpu_the_error_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(0))
    with pytest.raises(ConfigError, match="CuPy sees no GPU"):
        backend()

    def no_driver():
        raise RuntimeError("cudaErrorNoDevice")
    f = make_fake_cupy(1)
    f.cuda.runtime.getDeviceCount = no_driver
    monkeypatch.setitem(sys.modules, "cupy", f)
    with pytest.raises(ConfigError, match="cannot reach a GPU.*cudaErrorNoDevice"):
        backend()


def test_devices_map_to_gpus_round_robin_each_on_its_own_stream(fake):
    b = backend(4)
    assert b.xp is fake and b.gpu_of == [0, 1, 0, 1]
    assert len({id(s) for s in b.streams}) == 4
    assert [s.device_id for s in b.streams] == [0, 1, 0, 1]
    assert all(s.non_blocking for s in b.streams)
    for d in range(4):
        with b.on(d):
            assert fake.current_stream() is b.streams[d]
            x = b.full((2, 3), "float64", 1.5, d)
        assert x.device.id == d % 2 and float(x.view(np.ndarray).sum()) == 9.0
        assert b.last[d] is not None    # recorded when the block ended
    assert fake.current_stream().name == "null0"    # restored


def test_one_gpu_runs_every_device_on_its_own_stream(monkeypatch):
    f = make_fake_cupy(1)
    monkeypatch.setitem(sys.modules, "cupy", f)
    b = backend(3)
    assert b.gpu_of == [0, 0, 0] and len({s.name for s in b.streams}) == 3


def test_copy_waits_on_the_source_before_copying_and_never_syncs_the_host(fake):
    b = backend(4)
    with b.on(1):
        src = b.upload(np.arange(6.0).reshape(2, 3), 1) * 2.0
    src_event = b.last[1].id
    fake.calls.clear()
    syncs = fake.host_syncs
    out = b.copy_to(src[:, 1:], 2, src_device=1)          # gpu1 -> gpu0, a strided view
    calls = fake.calls
    copy = next(i for i, c in enumerate(calls) if c[0] == "memcpy")
    stream = calls[copy][1]
    assert ("wait", stream, src_event) in calls[:copy]
    # the destination's and the source's streams wait on the copy's event afterwards
    done = next(c[2] for c in calls[copy:] if c[0] == "record" and c[1] == stream)
    assert ("wait", b.streams[2].name, done) in calls[copy:] and ("wait", b.streams[1].name, done) in calls[copy:]
    assert fake.host_syncs == syncs
    assert out.device.id == 0
    assert np.array_equal(b.to_host(out), [[2.0, 4.0], [8.0, 10.0]])
    assert not fake.races and not fake.device_errors


def test_copy_on_one_gpu_and_without_the_source_device(fake):
    b = backend(4)
    with b.on(0):
        src = b.full((4,), "float64", 3.0, 0)
    out = b.copy_to(src, 2)                                  # same GPU, source device unknown
    key = (("gpu", 0), 2)
    assert key in b.copy_streams
    name = b.copy_streams[key][1].name
    i = next(i for i, c in enumerate(fake.calls) if c[0] == "copyto")
    assert fake.calls[i][2] == name
    waits = {c[2] for c in fake.calls[:i] if c[0] == "wait" and c[1] == name}
    assert len(waits) >= 2     # the destination's allocation and every device on gpu0
    with b.on(2):
        out += 1.0
    assert np.array_equal(b.to_host(out), [4.0] * 4)
    assert not fake.races and not fake.device_errors


def test_nothing_syncs_the_host_inside_an_iteration_until_synchronize(fake):
    b = backend(4)
    syncs = fake.host_syncs
    with b.on(0):
        a = b.upload(np.ones((3, 3)), 0)
        buf = b.full((3, 3), "float64", 0.0, 0)
        b.put(buf, a, add=True)
        b.put(buf[:1], a[:1], add=False)
    moved = b.copy_to(buf, 3, src_device=0)
    with b.on(3):
        moved *= 2.0
    b.put(moved[1:], moved[:2], add=True)      # outside any block: a barrier on gpu1's streams
    assert fake.host_syncs == syncs
    b.synchronize()
    assert fake.host_syncs == syncs + len(b.streams) + len(b.copy_streams) + len(b.gpu_streams)
    assert np.array_equal(b.to_host(moved), [[2.0] * 3, [4.0] * 3, [4.0] * 3])
    assert not fake.races and not fake.device_errors


def test_race_detector_sees_an_unordered_write(fake):
    """The detector itself: work on another device's stream without a copy is a race."""
    b = backend(2)
    with b.on(0):
        a = b.full((2,), "float64", 1.0, 0)
    s = fake.cuda.Stream(non_blocking=True)
    with fake.cuda.Device(0), s:
        a += 1.0
    assert fake.races


# ---- the executor on the fake ------------------------------------------------------------------------

def _mlp(dt):
    from tests.runtime.test_central_law import mlp
    return mlp(dt)[0].pcg


def _train(backend_name, degree, mode="serial", steps=3):
    from flexrt.core import DataType
    from flexrt.machine import load_machine
    from flexrt.runtime.session import Session, initial_weights
    from flexrt.strategy import data_parallel
    machine = load_machine("dgx1_v100")
    pcg = _mlp(DataType.DT_DOUBLE)
    w0 = initial_weights(pcg, seed=1)
    rng = np.random.default_rng(0)
    inputs = {n.name: rng.standard_normal(n.attrs.shape.dims) for n in pcg.nodes if n.op_type.name == "INPUT"}
    labels = rng.integers(0, 6, size=(16, 1)).astype(np.int32)
    session = Session(data_parallel(pcg, machine, degree), machine, backend=backend_name, mode=mode,
                      optimizer="sgd", lr=0.1, weights=w0, loss="sparse_categorical_crossentropy")
    losses = [session.step(inputs, labels).loss for _ in range(steps)]
    return losses, session.weights(), session


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_data_parallel_training_on_the_fake_matches_numpy(fake, mode):
    want_losses, want_w, _ = _train("numpy", 4, mode)
    losses, got_w, session = _train("cupy", 4, mode)
    assert session.backend.name == "cupy" and session.backend.gpu_of[:4] == [0, 1, 0, 1]
    assert np.allclose(losses, want_losses, rtol=1e-12)
    for name, w in want_w.items():
        assert np.allclose(got_w[name], w, rtol=1e-10, atol=0), name


@pytest.mark.parametrize("mode", ["serial", "threads"])
def test_training_on_the_fake_is_race_free_and_places_kernels_on_their_gpu(fake, mode):
    _train("cupy", 4, mode)
    assert not fake.device_errors, fake.device_errors[:5]
    assert not fake.races, fake.races[:5]


# ---- with a GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_data_parallel_on_two_devices_matches_numpy_on_a_gpu():
    want_losses, want_w, _ = _train("numpy", 2)
    losses, got_w, session = _train("cupy", 2)
    assert session.backend.name == "cupy"
    assert np.allclose(losses, want_losses, rtol=1e-10)
    for name, w in want_w.items():
        err = np.max(np.abs(got_w[name] - w)) / max(np.max(np.abs(w)), 1e-300)
        assert err <= 1e-10, f"weight {name} differs by {err:.3g} relative"
