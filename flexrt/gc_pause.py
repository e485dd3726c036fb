"""Pausing Python's cyclic garbage collector while large acyclic structures are built (importable
by every layer).

Building a GPT-3 pipeline's micro-batched graph, its strategy and its task graph makes millions of
small objects that hold no reference cycles; each of the collector's passes walks them and
everything else alive, so the passes cost time (a third of the strategy's construction at 192
micro-batches) and free nothing. ``no_gc`` pauses it for a block and restores the previous state.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def no_gc(freeze: bool = False):
    """The collector paused inside the block (left as it was: nested blocks are fine). ``freeze``:
    what is alive at the end moves to the collector's permanent generation (``gc.freeze``) first,
    so that no pass walks it again: for a one-shot command whose objects live until it exits (its
    first pass after the block would otherwise walk every object the block made)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
