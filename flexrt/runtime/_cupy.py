"""The CuPy backend: each logical device a GPU, or a stream of one GPU when there are fewer GPUs than
devices. The only runtime module that imports CuPy (tests/test_layers.py keeps CuPy imports in
modules named ``*cupy*``); it is imported by ``get_backend("cupy", n)`` only.

Mapping. Logical device ``d`` runs on GPU ``d % num_gpus``, on its own non-blocking compute stream,
so several logical devices sharing a GPU still run concurrently. Transfers run on copy streams, one
per (source, destination device) pair, created on the source's GPU.

Ordering, without host synchronization inside an iteration. The executor starts a task only after
its predecessors' Python calls returned, but their GPU work may still be queued on other streams.
Every piece of GPU work is ordered by CUDA events, conservatively:

- ``last[d]``: an event recorded on device ``d``'s compute stream at the end of every ``on(d)`` block
  (and after every join below); it marks everything device ``d`` has enqueued so far.
- Data crosses devices only through ``copy_to`` (the plan never lets a part cross devices). A copy
  allocates its result on the destination's compute stream (so the memory pool's stream-ordered
  reuse is safe), then its copy stream waits on that allocation and on ``last`` of the source
  device(s), copies, and records an event ``e``. Both the destination's and the source's compute
  streams then wait on ``e`` (a "join", which also refreshes ``last``): the destination because it
  will read the copy, the source because it may later overwrite or free (and the pool reuse) what
  the copy reads. Nothing waits on the host.
- When the source's logical device is not given (``copy_to(src, device)``, as the executor calls it
  today), every logical device on the source array's GPU counts as a source.
- Work issued outside any ``on(d)`` block (``put`` into a buffer, ``to_host``) runs on a per-GPU
  fallback stream that first waits on ``last`` of every logical device on that GPU and is then
  joined by all of them: a barrier on that GPU, correct whoever wrote the data.

This is conservative (a transfer is a join point of its two devices' streams; it overlaps with the
work already queued on neither, and with every other device's work), never racy. ``to_host``
synchronizes the stream it reads on (it is the only host synchronization, with ``synchronize()``).

Entry point: ``CupyBackend``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from typing import Optional

import numpy as np

from flexrt.errors import ConfigError

GPU_INSTALL = 'pip install -e ".[gpu]"'


def import_cupy():
    """The ``cupy`` module, or a ConfigError saying how to install it."""
    try:
        import cupy
    except ImportError as e:
        raise ConfigError(f"the cupy backend: CuPy is not installed ({e}); install it with {GPU_INSTALL} "
                          f"(cupy-cuda12x), or use the numpy backend") from None
    return cupy


def gpu_count(cp) -> int:
    """How many GPUs CuPy sees; a ConfigError when it sees none or cannot reach the driver."""
    try:
        count = int(cp.cuda.runtime.getDeviceCount())
    except Exception as e:  # CuPy raises its own CUDA errors when there is no driver
        raise ConfigError(f"the cupy backend: CuPy cannot reach a GPU ({type(e).__name__}: {e}); "
                          f"use the numpy backend") from None
    if count < 1:
        raise ConfigError("the cupy backend: CuPy sees no GPU (check CUDA_VISIBLE_DEVICES and the driver); "
                          "use the numpy backend")
    return count


class CupyBackend:
    """Logical devices on GPUs (``d % num_gpus``), each with its own compute stream; see the module doc."""

    name = "cupy"

    def __init__(self, num_devices: int, num_gpus: Optional[int] = None, non_blocking: bool = True) -> None:
        cp = import_cupy()
        visible = gpu_count(cp)
        if num_gpus is None:
            num_gpus = visible
        if not 1 <= num_gpus <= visible:
            raise ConfigError(f"the cupy backend: asked for {num_gpus} GPUs, CuPy sees {visible}")
        if num_devices < 1:
            raise ConfigError(f"the cupy backend needs at least one device, got {num_devices}")
        self.cp = cp
        self.xp = cp
        self.num_devices = num_devices
        self.num_gpus = min(num_gpus, num_devices)
        self.non_blocking = non_blocking
        self.gpu_of = [d % self.num_gpus for d in range(num_devices)]
        self.devices_on = {g: [d for d in range(num_devices) if self.gpu_of[d] == g] for g in range(self.num_gpus)}
        self.streams = []
        for d in range(num_devices):
            with cp.cuda.Device(self.gpu_of[d]):
                self.streams.append(cp.cuda.Stream(non_blocking=non_blocking))
        self.last: list = [None] * num_devices          # device -> its latest event
        self.copy_streams: dict = {}   # (source device or ("gpu", g), dst device) -> (its GPU, stream)
        self.gpu_streams: dict = {}    # GPU -> (GPU, fallback stream)
        self._lock = threading.RLock()
        self._local = threading.local()

    # ---- streams and events ----------------------------------------------------------------------
    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def current(self) -> Optional[int]:
        """The logical device whose ``on`` block this thread is in, or None."""
        stack = self._stack()
        return stack[-1] if stack else None

    def _event(self, stream, gpu: int):
        cp = self.cp
        with cp.cuda.Device(gpu):
            ev = cp.cuda.Event(block=False, disable_timing=True)
            ev.record(stream)
        return ev

    def _record(self, device: int):
        """Record ``device``'s stream position as its latest event (under the lock, so that the
        newest record is the one kept when two threads work on one device)."""
        with self._lock:
            ev = self._event(self.streams[device], self.gpu_of[device])
            self.last[device] = ev
        return ev

    def _join(self, device: int, event) -> None:
        """Make ``device``'s later work wait for ``event`` (on the GPU, not the host)."""
        with self._lock:
            with self.cp.cuda.Device(self.gpu_of[device]):
                self.streams[device].wait_event(event)
            self._record(device)

    def _wait_for(self, stream, gpu: int, devices) -> None:
        with self._lock:
            events = [self.last[d] for d in devices if self.last[d] is not None]
        with self.cp.cuda.Device(gpu):
            for ev in events:
                stream.wait_event(ev)

    def _stream(self, table: dict, key, gpu: int):
        with self._lock:
            entry = table.get(key)
            if entry is None:
                with self.cp.cuda.Device(gpu):
                    entry = table[key] = (gpu, self.cp.cuda.Stream(non_blocking=self.non_blocking))
            return entry[1]

    @contextmanager
    def on(self, device: int):
        """Context in which ``device``'s kernels run: its GPU and its stream are current; its
        latest event is recorded when the block ends."""
        cp = self.cp
        stack = self._stack()
        stack.append(device)
        try:
            with cp.cuda.Device(self.gpu_of[device]), self.streams[device]:
                try:
                    yield
                finally:
                    self._record(device)
        finally:
            stack.pop()

    def _ctx(self, device: int):
        return nullcontext() if self.current() == device else self.on(device)

    @contextmanager
    def _barrier(self, gpu: int):
        """Work on ``gpu`` outside any device's block: a fallback stream after every logical device on
        the GPU, which all of them then wait for."""
        cp = self.cp
        stream = self._stream(self.gpu_streams, gpu, gpu)
        devices = self.devices_on[gpu]
        self._wait_for(stream, gpu, devices)
        with cp.cuda.Device(gpu), stream:
            yield stream
        ev = self._event(stream, gpu)
        for d in devices:
            self._join(d, ev)

    def _local_device(self, arr) -> Optional[int]:
        """The current logical device when it is on ``arr``'s GPU, else None."""
        cur = self.current()
        return cur if cur is not None and self.gpu_of[cur] == arr.device.id else None

    # ---- the backend interface ---------------------------------------------------------------------
    def full(self, shape, dtype, fill: float, device: int):
        cp = self.cp
        with self._ctx(device):
            if fill == 0.0:
                return cp.zeros(shape, dtype=dtype)
            return cp.full(shape, fill, dtype=dtype)

    def put(self, dst, src, add: bool) -> None:
        """Write (or add) ``src`` into the view ``dst``; both on one device, or ``src`` on the host."""
        cp = self.cp

        def go():
            s = cp.asarray(src) if isinstance(src, np.ndarray) and not isinstance(src, cp.ndarray) else src
            if add:
                dst.__iadd__(s)
            else:
                dst[...] = s

        if self._local_device(dst) is not None:
            go()
        else:
            with self._barrier(dst.device.id):
                go()

    def copy_to(self, src, device: int, src_device: Optional[int] = None):
        """A copy of ``src`` in ``device``'s memory, ordered after the source's work and before the
        destination's (and the source's) later work by events; see the module doc."""
        cp = self.cp
        if not isinstance(src, cp.ndarray):
            return self.upload(src, device)
        src_gpu = src.device.id
        dst_gpu = self.gpu_of[device]
        if src_device is not None and self.gpu_of[src_device] == src_gpu:
            sources, key = [src_device], (src_device, device)
        else:
            sources, key = list(self.devices_on[src_gpu]), (("gpu", src_gpu), device)
        stream = self._stream(self.copy_streams, key, src_gpu)
        with cp.cuda.Device(dst_gpu), self.streams[device]:
            out = cp.empty(src.shape, dtype=src.dtype)   # from the destination stream's pool
        allocated = self._record(device)
        with cp.cuda.Device(src_gpu):
            stream.wait_event(allocated)
        self._wait_for(stream, src_gpu, sources)
        with cp.cuda.Device(src_gpu), stream:
            if src_gpu == dst_gpu:
                cp.copyto(out, src)
            else:
                flat = src if src.flags.c_contiguous else cp.ascontiguousarray(src)
                out.data.copy_from_device_async(flat.data, flat.nbytes, stream=stream)
        done = self._event(stream, src_gpu)
        for d in dict.fromkeys([device] + sources):
            self._join(d, done)
        return out

    def upload(self, host, device: int):
        with self._ctx(device):
            return self.cp.asarray(host)

    def to_host(self, arr) -> np.ndarray:
        """``arr`` in host memory; waits (on the host) for the stream that reads it."""
        cp = self.cp
        if not isinstance(arr, cp.ndarray):
            return np.asarray(arr)
        d = self._local_device(arr)
        if d is not None:
            out = arr.get(stream=self.streams[d])
            self.streams[d].synchronize()
            return np.asarray(out)
        with self._barrier(arr.device.id) as stream:
            out = arr.get(stream=stream)
            stream.synchronize()
        return np.asarray(out)

    def synchronize(self) -> None:
        """Wait on the host for every stream (the end of an iteration)."""
        cp = self.cp
        with self._lock:
            streams = [(self.gpu_of[d], s) for d, s in enumerate(self.streams)]
            streams += list(self.copy_streams.values()) + list(self.gpu_streams.values())
        for g, s in streams:
            with cp.cuda.Device(g):
                s.synchronize()
