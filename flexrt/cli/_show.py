"""``flexrt show MODEL``: the operator table of a model (name, type, output shape, parameters,
forward FLOPs) and its totals; ``--dot`` writes Graphviz, ``--save`` the PCG as JSON."""

from __future__ import annotations

import os

from flexrt.cli._common import add_json_flag, check_model_flags, emit_json, write_text
from flexrt.errors import ConfigError
from flexrt.model import load_model
from flexrt.model.report import format_table, table_json

NAME = "show"
HELP = "print a model's operator table (model flags such as -b 64 follow MODEL)"
ACCEPTS_MODEL_FLAGS = True


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="zoo name (see `flexrt models`), path to a .py script, or an .onnx file")
    parser.add_argument("--dot", metavar="FILE", help="write the graph as Graphviz dot")
    parser.add_argument("--save", metavar="FILE", help="write the PCG as JSON")
    add_json_flag(parser)


def run(args, extra) -> int:
    check_model_flags(NAME, args.model, extra, honours=None)  # the configuration is part of what it shows
    if args.save and args.dot and os.path.abspath(os.path.expanduser(args.save)) == \
            os.path.abspath(os.path.expanduser(args.dot)):
        raise ConfigError(f"--save and --dot both name {args.save}: the graph's JSON and its Graphviz text need two "
                          f"files")
    loaded = load_model(args.model, extra)
    pcg = loaded.model.pcg
    files = {}
    if args.save:
        files["pcg"] = write_text(args.save, pcg.dumps() + "\n", "PCG")
    if args.dot:
        files["dot"] = write_text(args.dot, pcg.to_dot(loaded.name), "dot graph")
    if args.json:
        emit_json({"model": loaded.name, "source": loaded.source, "config": loaded.config.to_dict(),
                   **table_json(pcg), "files": files})
        return 0
    cfg = loaded.config
    print(format_table(pcg, title=f"model {loaded.name} ({loaded.source}), batch size {cfg.batch_size}\n"))
    for what, path in files.items():
        print(f"wrote the {'PCG' if what == 'pcg' else 'dot graph'} to {path}")
    return 0
