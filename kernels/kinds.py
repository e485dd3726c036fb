"""Kinds that travel by name at flexrt's public boundaries: the base of the training enums.

``OptimizerKind`` (``flexrt.kernels.optimizers``), ``LossType`` (``flexrt.kernels.losses``) and
``MetricsType`` (``flexrt.kernels.metrics``) derive from ``NamedKind``. Inside flexrt every table is
keyed by their members and every function takes members; a public boundary that also takes the
documented string name (a CLI flag, ``Session(optimizer="adam")``, ``FFModel.compile``) converts at
once with ``parse``, which raises ``ConfigError`` naming the bad value and listing the valid names.

Example:
    >>> from flexrt.kernels.optimizers import OptimizerKind
    >>> OptimizerKind.parse("adam") is OptimizerKind.ADAM
    True
    >>> OptimizerKind.parse("rmsprop")
    Traceback (most recent call last):
    flexrt.errors.ConfigError: unknown optimizer 'rmsprop'; valid: sgd, momentum, adam

Entry point: ``NamedKind``.
"""

from __future__ import annotations

import enum
from typing import Iterable, Optional

from flexrt.errors import ConfigError


class NamedKind(enum.Enum):
    """An enum whose members also have a documented string name (``short_name``)."""

    @classmethod
    def noun(cls) -> str:
        """What a member is called in error messages ("optimizer", "loss", "metric")."""
        raise NotImplementedError

    @property
    def short_name(self) -> str:
        """The documented string name (the CLI's, ``Session``'s): the value unless a kind says otherwise."""
        return self.value

    @classmethod
    def parse(cls, value, valid: Optional[Iterable[NamedKind]] = None, error: type = ConfigError):
        """The member ``value`` is or names (its ``short_name``), among ``valid`` (default: every member);
        else ``error`` (a flexrt error type) naming ``value`` and listing the valid names."""
        members = tuple(cls) if valid is None else tuple(valid)
        if isinstance(value, cls) and value in members:
            return value
        if isinstance(value, str):
            for m in members:
                if m.short_name == value:
                    return m
        shown = value.short_name if isinstance(value, cls) else value
        raise error(f"unknown {cls.noun()} {shown!r}; valid: {', '.join(m.short_name for m in members)}")
