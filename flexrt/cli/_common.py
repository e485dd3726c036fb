"""Helpers shared by the subcommands: JSON output, file writing, model flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

from flexrt.errors import ConfigError
from flexrt.model import FFConfig
from flexrt.model.loader import script_build_model, script_options, split_script_flags


class UsageError(Exception):
    """A usage mistake on the command line (exit status 2)."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(message)
        self.command = command


def add_json_flag(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")


def emit_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def write_text(path: str, text: str, what: str) -> str:
    """Write ``text`` to ``path``; an OSError becomes a ConfigError naming the file."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write the {what} to {path}: {e.strerror or e}") from None
    return path


def check_model_flags(command: str, model: str, flags: Sequence[str]) -> FFConfig:
    """Parse the model flags now (FFConfig's and the script's own), so that a typo is a usage error."""
    build_model = script_build_model(model)
    options = script_options(build_model) if build_model else {}
    try:
        rest = split_script_flags(build_model, flags)[0] if build_model else list(flags)
        return FFConfig(rest)
    except ConfigError as e:
        own = f"; {model}'s own flags: {', '.join(options)}" if options else ""
        raise UsageError(command, f"{e}{own} (model flags follow MODEL)") from None
