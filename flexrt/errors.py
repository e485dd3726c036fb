"""Exception types shared by every layer of flexrt.

Each error says what was wrong, where (op name, file:line) and what is valid.
"""


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
