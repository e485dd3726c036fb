"""``flexrt models``: the model zoo, name and description."""

from __future__ import annotations

from flexrt.cli._common import add_json_flag, emit_json
from flexrt.model import zoo_models

NAME = "models"
HELP = "list the model zoo"
ACCEPTS_MODEL_FLAGS = False


def add_arguments(parser) -> None:
    add_json_flag(parser)


def run(args, extra) -> int:
    models = zoo_models()
    if args.json:
        emit_json({"models": [{"name": m.name, "description": m.description} for m in models]})
        return 0
    if not models:
        print("the model zoo is empty")
        return 0
    width = max(len(m.name) for m in models)
    for m in models:
        print(f"{m.name.ljust(width)}  {m.description}".rstrip())
    return 0
