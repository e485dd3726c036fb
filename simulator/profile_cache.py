"""The on-disk cache of profiled operator times (FlexFlow §5.1: measure once, reuse).

Where: the ``path`` argument, else ``$FLEXRT_CACHE_DIR/profile.json``, else
``$XDG_CACHE_HOME/flexrt/profile.json``, else ``~/.cache/flexrt/profile.json``.

Format (JSON, one file)::

    {"schema": 2, "flexrt_version": "0.1.0",
     "entries": {"<sha256 of key + version + schema, 32 hex>": {
         "schema": 2, "flexrt_version": "0.1.0",
         "key": {"op": "linear", "attrs": {...}, "inputs": [[[64, 784], "DT_FLOAT"], ...],
                 "outputs": [...], "dtype": "DT_FLOAT", "backend": "numpy",
                 "device": {"kind": "cpu", "name": "cpu0"}},
         "forward_s": 1.2e-05, "backward_s": 2.4e-05, "backward": "derived",
         "repeats": 5, "warmup": 1, "measured_at": "2025-01-01T00:00:00Z"}}}

The cache never makes a run fail. A file that cannot be read (a directory, a FIFO, a device, over
``flexrt.inputs.MAX_BYTES``, not UTF-8), that is not valid JSON, an entry with wrong types, a
negative, zero or NaN time, a key that does not match its hash, or an entry written by another
flexrt version or schema is reported once (``ProfileCacheWarning``) and ignored, so the operator is
measured again; ignored entries are dropped at the next write. Writes go to a temporary file in the
same folder followed by ``os.replace``, so readers see the old file or the new one, never half of
one; under an advisory lock (``profile.json.lock``, POSIX) each write re-reads the file and merges,
so processes that profile at the same time keep each other's entries. Writes are batched: at most
one per ``flush_interval_s`` (the first at once), the rest by ``flush()`` or at interpreter exit.

Entry points: ``ProfileCache``, ``default_cache_path``, ``key_hash``.

Example:
    >>> cache = ProfileCache("/tmp/flexrt-doc/profile.json")        # doctest: +SKIP
    >>> cache.put(key, CacheEntry(forward_s=1e-5, backward_s=2e-5))  # doctest: +SKIP
    >>> cache.get(key).forward_s                                     # doctest: +SKIP
    1e-05
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from flexrt import __version__
from flexrt.errors import ConfigError
from flexrt.inputs import read_text
from flexrt.paths import CACHE_DIR_ENV_VAR, cache_dir

SCHEMA_VERSION = 2     # 2: timed with glibc keeping freed memory (flexrt.MALLOC_TUNED); schema-1 times were up to 5x slower
ENV_VAR = CACHE_DIR_ENV_VAR
FILE_NAME = "profile.json"
BACKWARD_KINDS = ("derived", "measured")


class ProfileCacheWarning(UserWarning):
    """The profile cache file (or an entry of it) was unusable and is being re-measured."""


def default_cache_path() -> Path:
    """``$FLEXRT_CACHE_DIR/profile.json``, else ``$XDG_CACHE_HOME/flexrt/profile.json``, else
    ``~/.cache/flexrt/profile.json`` (read from the environment at each call)."""
    return cache_dir() / FILE_NAME


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def key_hash(key: dict) -> str:
    """Stable name of a key: sha256 over the canonical JSON of the key, flexrt version and schema."""
    text = canonical_json({"key": key, "flexrt_version": __version__, "schema": SCHEMA_VERSION})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One measurement. ``backward="derived"``: ``backward_s`` was computed from ``forward_s``,
    not measured (the reader may derive it again)."""

    forward_s: float
    backward_s: float
    backward: str = "derived"
    repeats: int = 1
    warmup: int = 0
    measured_at: str = ""

    def __post_init__(self):
        for name in ("forward_s", "backward_s"):
            problem = _bad_time(getattr(self, name))
            if problem:
                raise ValueError(f"CacheEntry.{name} {problem}")
        if self.backward not in BACKWARD_KINDS:
            raise ValueError(f"CacheEntry.backward is {self.backward!r}; valid: {', '.join(BACKWARD_KINDS)}")


def _bad_time(v: Any) -> Optional[str]:
    """Why ``v`` is not a usable time in seconds, or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"is {v!r} ({type(v).__name__}); expected a number of seconds"
    if not math.isfinite(v) or v <= 0:
        return f"is {v!r}; expected a finite time > 0"
    return None


def _parse_entry(name: str, raw: Any) -> Union[tuple[dict, CacheEntry], str]:
    """(key, entry) from one raw JSON entry, or why it cannot be used."""
    if not isinstance(raw, dict):
        return f"is not an object (got {type(raw).__name__} {str(raw)[:40]})"
    schema, version = raw.get("schema"), raw.get("flexrt_version")
    if not isinstance(schema, int) or not isinstance(version, str):
        return f"has schema {schema!r} and flexrt_version {version!r}; expected an int and a string"
    if schema != SCHEMA_VERSION or version != __version__:
        return (f"was written by flexrt {version!r} with cache schema {schema!r}; this is flexrt "
                f"{__version__} with schema {SCHEMA_VERSION} (stale)")
    key = raw.get("key")
    if not isinstance(key, dict):
        return f"has key {key!r}; expected an object"
    try:
        if key_hash(key) != name:
            return "has a key that does not match its hash"
    except (TypeError, ValueError, RecursionError) as e:
        return f"has a key that is not plain JSON ({type(e).__name__})"
    for field in ("forward_s", "backward_s"):
        problem = _bad_time(raw.get(field))
        if problem:
            return f"{field} {problem}"
    if raw.get("backward") not in BACKWARD_KINDS:
        return f"has backward {raw.get('backward')!r}; valid: {', '.join(BACKWARD_KINDS)}"
    repeats, warmup = raw.get("repeats"), raw.get("warmup", 0)
    if not (isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 1):
        return f"has repeats {repeats!r}; expected an int >= 1"
    if not (isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0):
        return f"has warmup {warmup!r}; expected an int >= 0"
    measured_at = raw.get("measured_at", "")
    if not isinstance(measured_at, str):
        return f"has measured_at {measured_at!r}; expected a string"
    return key, CacheEntry(float(raw["forward_s"]), float(raw["backward_s"]), raw["backward"], repeats,
                           warmup, measured_at)


def _entry_json(key: dict, entry: CacheEntry) -> dict:
    return {"schema": SCHEMA_VERSION, "flexrt_version": __version__, "key": key,
            "forward_s": entry.forward_s, "backward_s": entry.backward_s, "backward": entry.backward,
            "repeats": entry.repeats, "warmup": entry.warmup, "measured_at": entry.measured_at}


def _file_text(entries: dict[str, dict]) -> str:
    """The cache file: a header, then one entry per line (diffable, greppable)."""
    lines = [f"{json.dumps(name)}: {canonical_json(entries[name])}" for name in sorted(entries)]
    return (f'{{"schema": {SCHEMA_VERSION}, "flexrt_version": {json.dumps(__version__)}, "entries": {{\n'
            + ",\n".join(lines) + "\n}}\n")


def read_cache_file(path: Path) -> tuple[dict[str, dict], dict[str, CacheEntry], list[str]]:
    """Read ``path`` tolerantly: (name -> key, name -> entry, problems). A missing file is empty and
    no problem; nothing here raises on bad contents."""
    if not path.exists():
        return {}, {}, []
    try:  # through flexrt.inputs: a FIFO, a device or a huge file is refused, never read
        text = read_text(path, "file", ConfigError)
    except ConfigError as e:
        return {}, {}, [f"cannot be read ({e}); profiling without it"]
    try:  # not inputs.parse_json: a NaN or a repeated entry spoils one entry here, not the whole file
        data = json.loads(text)
    except ValueError as e:
        return {}, {}, [f"is not valid JSON ({e}); ignoring it, it will be rewritten"]
    except RecursionError:
        return {}, {}, ["is nested too deeply to be a profile cache; ignoring it, it will be rewritten"]
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        return {}, {}, ["is not a profile cache (expected an object with 'entries'); ignoring it, "
                        "it will be rewritten"]
    if data.get("schema") != SCHEMA_VERSION:
        return {}, {}, [f"has cache schema {data.get('schema')!r}, this flexrt reads schema "
                        f"{SCHEMA_VERSION} (stale); ignoring its {len(data['entries'])} entries"]
    keys, entries, problems = {}, {}, []
    for name, raw in data["entries"].items():
        parsed = _parse_entry(name, raw)
        if isinstance(parsed, str):
            problems.append(f"entry {name[:12]} {parsed}; it will be re-measured")
        else:
            keys[name], entries[name] = parsed
    return keys, entries, problems


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an advisory lock beside ``path`` (POSIX ``flock``; elsewhere atomic replace alone)."""
    try:
        import fcntl
    except ImportError:  # Windows: os.replace still keeps the file whole
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` all at once (temporary file in the same folder + ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# Caches with entries not yet written, held strongly so that the exit hook still finds them after
# their cost model is gone (a WeakSet would lose them to garbage collection first).
_LIVE: "set[ProfileCache]" = set()


@atexit.register
def _flush_all() -> None:
    for cache in list(_LIVE):
        cache.flush()


class ProfileCache:
    """Profiled times keyed by a JSON-able key, kept in memory and in one JSON file.

    Args:
        path: the cache file; default ``default_cache_path()`` (read when the cache is made).
        flush_interval_s: the least time between two writes; 0 writes at every ``put``.

    Example:
        >>> cache = ProfileCache(tmp_path / "profile.json", flush_interval_s=0)  # doctest: +SKIP
        >>> cache.get({"op": "relu"}) is None                                    # doctest: +SKIP
        True
    """

    def __init__(self, path: Union[str, os.PathLike, None] = None, flush_interval_s: float = 1.0):
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        if isinstance(flush_interval_s, bool) or not isinstance(flush_interval_s, (int, float)) \
                or not flush_interval_s >= 0:
            raise ValueError(f"flush_interval_s is {flush_interval_s!r}; expected a number >= 0")
        self.flush_interval_s = float(flush_interval_s)
        self._keys: dict[str, dict] = {}
        self._entries: dict[str, CacheEntry] = {}
        self._pending: set[str] = set()
        self._loaded = False
        self._last_write = -math.inf
        self._reported: set[str] = set()
        self._write_failed = False

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def get(self, key: dict) -> Optional[CacheEntry]:
        """The entry for ``key``, or None (never raises on a bad file)."""
        self._load()
        name = key_hash(key)
        entry = self._entries.get(name)
        if entry is not None and self._keys.get(name) != key:
            return None  # a hash collision: treat as a miss
        return entry

    def put(self, key: dict, entry: CacheEntry) -> None:
        """Store ``entry`` for ``key``; written to disk now or at the next flush."""
        self._load()
        name = key_hash(key)
        self._keys[name], self._entries[name] = key, entry
        self._pending.add(name)
        _LIVE.add(self)
        if time.monotonic() - self._last_write >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Merge pending entries into the file (re-read under the lock) and write it atomically.
        A failure to write is reported once and the entries stay in memory."""
        if not self._pending or self._write_failed:
            return
        try:
            with _locked(self.path):
                keys, entries, problems = read_cache_file(self.path)
                self._report(problems)
                for name, entry in entries.items():  # entries other processes measured meanwhile
                    if name not in self._entries:
                        self._keys[name], self._entries[name] = keys[name], entry
                write_atomically(self.path, _file_text({name: _entry_json(self._keys[name], self._entries[name])
                                                        for name in self._entries}))
        except OSError as e:
            self._write_failed = True
            self._report([f"cannot be written ({type(e).__name__}: {e}); keeping measurements in memory"])
            return
        self._pending.clear()
        _LIVE.discard(self)
        self._last_write = time.monotonic()

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        keys, entries, problems = read_cache_file(self.path)
        self._report(problems)
        keys.update(self._keys)
        entries.update(self._entries)
        self._keys, self._entries = keys, entries

    def _report(self, problems: list[str]) -> None:
        """Warn once per distinct problem (one warning listing all new ones)."""
        new = [p for p in problems if p not in self._reported]
        if not new:
            return
        self._reported.update(new)
        shown = new[:5] + ([f"... and {len(new) - 5} more"] if len(new) > 5 else [])
        warnings.warn(f"profile cache {self.path} " + "; ".join(shown) if len(new) == 1 else
                      f"profile cache {self.path}: " + "; ".join(shown), ProfileCacheWarning, stacklevel=3)
