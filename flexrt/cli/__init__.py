"""The ``flexrt`` command: one subcommand per job.

    flexrt models [--json]                      the model zoo
    flexrt show MODEL [model flags] [--dot FILE] [--save FILE] [--json]
    flexrt machines [--json]                    the machine presets
    flexrt machines show NAME [--nodes N] [--json]   devices, links, routes of a machine
    flexrt simulate MODEL --machine M [--strategy FILE | --data-parallel | --random-strategy SEED]
                    [--method full|delta] [--cost analytic|profiled]
                    [--fused-cost analytic|profiled|learned[:PATH]] [--trace FILE] [--taskgraph FILE] [--json]
    flexrt search MODEL --machine M [--algo mcmc|exhaustive|data-parallel|model-parallel|expert] [--budget N]
                  [--seed S] [--alpha A] [--enable-parameter-parallel] [--enable-attribute-parallel]
                  [--import FILE] [--export FILE] [--plot FILE] [--json]   find a strategy, compare with baselines
    flexrt train MODEL --machine M [--strategy FILE] [--backend numpy|cupy] [--mode serial|threads]
                 [--steps N] [--seed S] [--trace FILE] [--json]   run it: measured beside simulated
    flexrt calibrate [--devices N] [--quick] [--output FILE] [--json]   measure this host, write the `local` machine
    flexrt accuracy [--ranks R] [--models ...] [--quick] [--output DIR] [--json]   simulator vs real runs, one process per device
    flexrt substitutions generate | verify | stats | show N [--file F] [--json]   the PCG substitution library
    flexrt fusion-model collect | train | evaluate [...]   the learned fused-operator cost model (DisCo)
    flexrt run EXPERIMENT [--quick] [--resume] [--jobs N] [--output DIR] [--json]   a YAML-configured experiment
    flexrt experiments [list | show NAME | kinds] [--json]   the shipped experiments and what each reproduces

Model flags (FlexFlow's: ``-b 64``, ``--budget 100``, ``-ll:gpu 4`` ...) follow MODEL and pass to
``FFConfig``. Exit codes: 0 success, 1 a flexrt error (``flexrt: error: ...`` on stderr, one line,
no traceback), 2 a usage error (unknown subcommand or flag), 70 an internal error (a bug in flexrt:
one line; ``flexrt --traceback ...`` shows the traceback), 130 interrupted.

Entry point: ``main`` (the console script).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import traceback
from typing import Optional, Sequence

from flexrt import __version__
from flexrt.cli import _accuracy, _calibrate, _experiments, _fusion_model, _machines, _models, _search, _show, _simulate, _substitutions, _train
from flexrt.cli._common import Parser, UsageError
from flexrt.errors import FlexrtError
from flexrt.inputs import clip
from flexrt.runtime import mpi

# Each command module gives NAME, HELP, ACCEPTS_MODEL_FLAGS, add_arguments(parser) and run(args, extra) -> int.
COMMANDS = (_models, _show, _machines, _simulate, _search, _train, _calibrate, _accuracy, _substitutions,
            _fusion_model, _experiments.RUN, _experiments.EXPERIMENTS)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="flexrt", allow_abbrev=False,
        description="Find fast parallelization strategies for DNN training (FlexFlow, Unity, DisCo) and run them.")
    parser.add_argument("--version", action="version", version=f"flexrt {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="on an internal error (a bug in flexrt), show the Python traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP, allow_abbrev=False)
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd, _parser=p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``flexrt`` command line; returns the exit status."""
    status = _main(argv)
    if argv is None:
        _leave_past_script_threads(status)
    return status


def _leave_past_script_threads(status: int) -> None:
    """End the process now when a model script left threads running (Python would wait for them
    at exit: the command would never end)."""
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if not left:
        return
    print(f"flexrt: note: the model script left {len(left)} thread(s) running ({', '.join(t.name for t in left[:3])}); "
          f"exiting without waiting for them", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _peak_rss_gb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 1e9


def _main(argv: Optional[Sequence[str]] = None) -> int:
    process = argv is None     # the command line is this process's whole job (not a library call)
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in argv  # anywhere on the line, also after the subcommand
    argv = [a for a in argv if a != "--traceback"]
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        args._argv = argv     # the command line as given (a command that starts its own processes repeats it)
        args._process = process
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        cmd = args._command
        if extra and not cmd.ACCEPTS_MODEL_FLAGS:
            args._parser.error(f"unrecognized arguments: {' '.join(extra)}")
        _refuse_empty_paths(args)
        return cmd.run(args, extra)
    except SystemExit as e:  # argparse's --help / --version (0) and usage errors (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except UsageError as e:
        print(f"flexrt{' ' + e.command if e.command else ''}: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except FlexrtError as e:
        _abort_world(f"error: {e}", 1)
        print(f"flexrt: error: {_one_line(str(e))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flexrt: interrupted", file=sys.stderr)
        return 130
    except MemoryError as e:   # the input asks more than this host holds: what to do, not a bug
        _abort_world(f"error: out of memory: {e}", 1)
        print(f"flexrt: error: out of memory{': ' + _one_line(str(e)) if str(e) else ''}: the model, batch, "
              f"micro-batches or machine asked for more than this host's memory (peak RSS "
              f"{_peak_rss_gb():.1f} GB); try fewer micro-batches or layers, --symmetric, or a larger host",
              file=sys.stderr)
        return 1
    except BrokenPipeError:  # `flexrt show resnet50 | head`: stop quietly, as SIGPIPE would
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a real file (captured in tests)
            pass
        return 141
    except Exception as e:  # a bug: one line, the traceback only when asked for
        if show_traceback:
            traceback.print_exc()
        _abort_world(f"internal error: {type(e).__name__}: {e}", INTERNAL_ERROR)
        print(f"flexrt: internal error: {type(e).__name__}: {_one_line(str(e))}; this is a bug in flexrt"
              + ("" if show_traceback else "; rerun with --traceback to see where"), file=sys.stderr)
        return INTERNAL_ERROR


def _refuse_empty_paths(args: argparse.Namespace) -> None:
    """A file or folder option given as '' is a usage error (it would read as 'not given': a search's
    --export '' would drop the strategy it found)."""
    for action in args._parser._actions:
        if action.metavar in ("FILE", "DIR") and getattr(args, action.dest, None) == "":
            args._parser.error(f"argument {'/'.join(action.option_strings)}: empty; give a path")


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: distinct from a user error (1) and a usage error (2)
MESSAGE_LIMIT = 2000  # characters of an error message shown; the rest is cut


def _one_line(message: str) -> str:
    """An error message on one line, at most ``MESSAGE_LIMIT`` characters."""
    return clip(message, MESSAGE_LIMIT)


def _abort_world(message: str, status: int) -> None:
    """Under MPI, one rank's failure would leave the others waiting: say it and end the whole job."""
    comm = mpi.active_world()
    if comm is not None:
        print(f"flexrt rank {comm.Get_rank()}/{comm.Get_size()}: {_one_line(message)}", file=sys.stderr, flush=True)
        comm.Abort(status)
