"""Capture mode: run a FlexFlow script only far enough to get its model.

While ``capturing()`` is active, every ``FFModel`` made registers itself, ``FFModel.compile``
raises ``ModelCaptured`` carrying its model (the loader catches it), and the training calls made
before ``compile`` (``create_data_loader``, ``init_layers``) do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional


class ModelCaptured(BaseException):
    """Raised by ``FFModel.compile`` in capture mode. A BaseException so that a script's
    ``except Exception`` does not swallow it."""

    def __init__(self, model: Any) -> None:
        super().__init__("model captured at compile()")
        self.model = model


@dataclass
class CaptureState:
    models: list = field(default_factory=list)


_STATE: contextvars.ContextVar[Optional[CaptureState]] = contextvars.ContextVar("flexrt_capture", default=None)


def active() -> Optional[CaptureState]:
    return _STATE.get()


@contextlib.contextmanager
def capturing() -> Iterator[CaptureState]:
    state = CaptureState()
    token = _STATE.set(state)
    try:
        yield state
    finally:
        _STATE.reset(token)
