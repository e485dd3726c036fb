"""The mapping DP's cross-candidate memo, kept within a memory budget (Unity §5.2's cache).

Every candidate graph a substitution makes shares most subproblems with earlier ones, so the DP
memoizes them across candidates; but each candidate that differs early in a long chain adds a
prefix (matrices over the boundary configurations) for every later split node, and on many devices
those matrices are large: Inception-v3 on 48 `summit` GPUs at budget 200 grew past this host's
24 GiB and was killed. ``Memo`` is a dict in least-recently-used order that counts about the bytes
each entry holds (``held_bytes``: its key's tuples, and the arrays and the tuples' and lists' slots
in the entry, its tuples and lists, and the attributes of the objects in them, two levels down, so a solution nested in another entry is
counted where it is stored) and drops the oldest entries while the total is over ``limit``. The
process's resident memory cannot serve as the measure: flexrt's malloc policy keeps freed memory
for reuse, as frameworks' caching allocators do. Entries are only ever reused for equal keys, so
dropping one costs a recomputation, never a different result (tested). A dropped value that another
entry still holds (a chain holds its segments' solutions) is told (``evicted``), so that it stops
caching what the memo would no longer count: without that, a chain's solutions kept 2.85 GiB of
link loads alive beside a memo counting 2.36 GiB, and one Inception-v3 solve at 96 GPUs outgrew 13 GiB.

Entry points: ``Memo``, ``default_limit``, ``held_bytes``.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from flexrt.errors import ConfigError
from flexrt.inputs import check_int

LIMIT_ENV = "FLEXRT_SEARCH_MEMORY_MB"


def default_limit() -> int:
    """Bytes the memo may hold (``held_bytes``, which leaves out Python's per-object overhead: one
    Inception-v3 solve at 48 GPUs held 1.95 GiB so counted at a 6.39 GiB peak):
    ``$FLEXRT_SEARCH_MEMORY_MB`` MiB, else a tenth of this machine's memory (of 20 GiB where it
    cannot be read)."""
    text = os.environ.get(LIMIT_ENV)
    if text is not None:
        what = f"{LIMIT_ENV} (the search's memory limit in MiB)"
        try:
            mb = int(text)
        except ValueError:
            raise ConfigError(f"{what} must be an integer, got {text!r}") from None
        return check_int(mb, what, minimum=1) << 20
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 20 << 30
    return total // 10


def held_bytes(value, depth: int = 2) -> int:
    """About the bytes ``value`` holds: its NumPy arrays and its tuples' and lists' slots, in it, its
    tuples and lists and the attributes of the objects in them, ``depth`` levels down."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return 56 + 8 * len(value) + (sum(held_bytes(v, depth - 1) for v in value) if depth >= 0 else 0)
    if depth <= 0:
        return 0
    attrs = getattr(value, "__dict__", None)
    if attrs is None:
        attrs = {k: getattr(value, k, None) for k in getattr(type(value), "__slots__", ())}
    return sum(held_bytes(v, depth - 1) for v in attrs.values())


class Memo:
    """A dict in least-recently-used order that drops its oldest entries while the arrays it holds
    (``held_bytes``) are over ``limit`` bytes. ``dropped`` counts the entries dropped."""

    def __init__(self, limit: int | None = None):
        self.limit = default_limit() if limit is None else limit
        self._d: OrderedDict = OrderedDict()    # key -> (value, bytes)
        self.bytes = 0
        self.dropped = 0

    def get(self, key):
        hit = self._d.get(key)
        if hit is None:
            return None
        self._d.move_to_end(key)
        return hit[0]

    def __setitem__(self, key, value) -> None:
        size = held_bytes(value) + held_bytes(key, 3)   # a subproblem's key lists its nodes
        old = self._d.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
            _evicted(old[0])
        self._d[key] = (value, size)
        self.bytes += size
        self._shrink()

    def grow(self, key, nbytes: int) -> None:
        """Entry ``key`` now holds ``nbytes`` more (a solution's link loads, built when first asked)."""
        hit = self._d.get(key)
        if hit is not None:
            self._d[key] = (hit[0], hit[1] + nbytes)
            self.bytes += nbytes
            self._shrink()

    def _shrink(self) -> None:
        while self.bytes > self.limit and self._d:
            _, (value, freed) = self._d.popitem(last=False)
            self.bytes -= freed
            self.dropped += 1
            _evicted(value)

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        for value, _ in self._d.values():
            _evicted(value)
        self._d.clear()
        self.bytes = 0


def _evicted(value) -> None:
    """Tells a dropped value that the memo no longer counts it (``evicted()``, where it has one):
    another entry may still hold it (a chain its segments), and what it would go on caching (a
    solution's link loads) would be held uncounted."""
    hook = getattr(value, "evicted", None)
    if hook is not None:
        hook()
