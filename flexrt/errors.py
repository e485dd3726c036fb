"""Exception and warning types shared by every layer of flexrt.

Each error says what was wrong, where (op name, file:line) and what is valid.
"""

import os
import sys
import warnings


class FlexrtError(Exception):
    """Base class of every error flexrt raises on purpose."""


class ShapeError(FlexrtError, ValueError):
    """A tensor shape or a parallel degree breaks an operator's rule."""


class GraphError(FlexrtError, ValueError):
    """A parallel computation graph is malformed (cycle, dangling edge, bad node)."""


class StrategyError(FlexrtError, ValueError):
    """A strategy does not fit its model or machine."""


class MachineSpecError(FlexrtError, ValueError):
    """A machine description is invalid."""


class ConfigError(FlexrtError, ValueError):
    """A command-line flag, config file or API argument is invalid."""


class NotYetAvailableError(FlexrtError, NotImplementedError):
    """A documented feature whose implementation has not landed yet."""


class FrontendWarning(UserWarning):
    """A model file or traced module that flexrt builds as FlexFlow does, though it is inconsistent
    (a layer's declared input size that its input does not have) or means something FFModel does not
    compute exactly (tied weights trained as two copies, an LSTM's two biases as one)."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the innermost frame outside flexrt (the user's script line
    that called into it), so that the warning names the user's file:line, not flexrt's."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
