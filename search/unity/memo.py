"""The mapping DP's cross-candidate memo, kept within the process's memory (Unity §5.2's cache).

Every candidate graph a substitution makes shares most subproblems with earlier ones, so the DP
memoizes them across candidates; but each candidate that differs early in a long chain adds a
prefix (matrices over the boundary configurations) for every later split node, and on many devices
those matrices are large: Inception-v3 on 48 `summit` GPUs at budget 200 grew past this host's
24 GiB and was killed. ``Memo`` is a dict in least-recently-used order; every ``check_every``
stores it reads the process's resident memory and, above ``limit`` bytes, drops the older half.
Entries are only ever reused for equal keys, so dropping one costs a recomputation, never a
different result (tested).

Entry points: ``Memo``, ``default_limit``, ``resident_bytes``.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from flexrt.errors import ConfigError
from flexrt.inputs import check_int

LIMIT_ENV = "FLEXRT_SEARCH_MEMORY_MB"


def default_limit() -> int:
    """Bytes the search process may hold before the memo drops entries: ``$FLEXRT_SEARCH_MEMORY_MB``
    MiB, else 40% of this machine's memory (8 GiB where it cannot be read)."""
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
    return int(total * 0.4)


def resident_bytes() -> int:
    """This process's resident memory now (Linux), else its peak (``ru_maxrss``)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        import sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class Memo:
    """A dict in least-recently-used order that drops its older half when the process holds more than
    ``limit`` bytes (checked every ``check_every`` stores). ``dropped`` counts the entries dropped."""

    def __init__(self, limit: int | None = None, check_every: int = 256):
        self.limit = default_limit() if limit is None else limit
        self.check_every = max(1, check_every)
        self._d: OrderedDict = OrderedDict()
        self._stores = 0
        self.dropped = 0

    def get(self, key):
        value = self._d.get(key)
        if value is not None:
            self._d.move_to_end(key)
        return value

    def __setitem__(self, key, value) -> None:
        self._d[key] = value
        self._stores += 1
        if self._stores % self.check_every == 0 and resident_bytes() > self.limit:
            for _ in range(len(self._d) // 2 or len(self._d)):
                self._d.popitem(last=False)
                self.dropped += 1

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        self._d.clear()
