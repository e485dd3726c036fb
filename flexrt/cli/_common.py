"""Helpers shared by the subcommands: the parser, flag value types, JSON output, file writing,
model flags (which of FlexFlow's flags a command honours), and the warnings a command gives.

Entry points: ``Parser``, ``UsageError``, ``count``, ``number``, ``check_model_flags``,
``warn_data_parallel``, ``add_json_flag``, ``emit_json``, ``write_text``, ``add_fusion_flag``,
``fused_result``, ``fusion_arg``, ``add_fused_cost_flag``, ``fused_cost_choice``, ``fused_cost_model``, ``learned_model_path``, ``add_comm_cost_flag``,
``check_comm_cost``, ``comm_cost_model``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.inputs import plain_number, short
from flexrt.model import FFConfig
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.model.flags import FLAG_BY_NAME, IGNORED_BY_NAME, LEGION_SWITCHES, LEGION_VALUE_FLAGS, FlagWarning
from flexrt.model.loader import is_onnx, script_build_model, script_options, split_script_flags


class UsageError(Exception):
    """A usage mistake on the command line (exit status 2)."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(message)
        self.command = command


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (``UsageError``), not the usage text and an exit."""

    def error(self, message: str):
        raise UsageError(self.prog.partition(" ")[2], message)


def count(minimum: int = 0, maximum: Optional[int] = None):
    """An argparse type: an integer in [minimum, maximum]."""
    rule = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"

    def parse(text: str) -> int:
        try:
            if not plain_number(text):
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {rule}, got {short(text)}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected an integer {rule}, got {value}")
        return value
    return parse


def number(minimum: Optional[float] = None, above: Optional[float] = None, maximum: Optional[float] = None):
    """An argparse type: a finite number >= ``minimum`` (or > ``above``) and <= ``maximum``."""
    rule = " and ".join(r for r in (f">= {minimum:g}" if minimum is not None else "",
                                    f"> {above:g}" if above is not None else "",
                                    f"<= {maximum:g}" if maximum is not None else "") if r)

    def parse(text: str) -> float:
        try:
            value = float(text) if plain_number(text) else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (minimum is not None and value < minimum) or \
                (above is not None and not value > above) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected a finite number{' ' + rule if rule else ''}, got {short(text)}")
        return value
    return parse


def add_json_flag(parser, action: bool = False) -> None:
    """``--json``; ``action``: on an action's subparser under a command that has its own ``--json``
    (``flexrt machines --json show X`` and ``... show X --json`` both count: argparse would otherwise
    reset the command's value to the action's default)."""
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if action else False,
                        help="print the result as one JSON document on stdout")


FUSION_CHOICES = ("off", "none", "xla", "combiner", "horovod", "ddp", "jax")


def add_fusion_flag(parser, what: str) -> None:
    """``--fusion POLICY``; FlexFlow's bare ``--fusion`` switch is refused by ``fusion_arg``."""
    def policy(text: str) -> str:
        if text and text not in FUSION_CHOICES:   # "": the bare switch, refused by fusion_arg
            raise argparse.ArgumentTypeError(f"unknown fusion policy {short(text)}; valid: {', '.join(FUSION_CHOICES)}")
        return text
    parser.add_argument("--fusion", type=policy, nargs="?", const="", default="off", metavar="POLICY",
                        help=f"apply a named fusion policy to {what}: {', '.join(FUSION_CHOICES[1:])} "
                             f"(none: strip any plan); off (default): leave the strategy as it is")


def fusion_arg(args, command: str) -> str:
    """The ``--fusion`` policy; FlexFlow's bare ``--fusion`` switch (no policy) is a usage error."""
    if args.fusion == "":
        raise UsageError(command, f"--fusion: flexrt {command} does not use this FlexFlow flag as a switch; give "
                                  f"a fusion policy: --fusion {{{','.join(FUSION_CHOICES)}}}")
    return args.fusion


def fused_result(policy: str, result, machine, cost, optimizer):
    """``result`` with policy ``policy``'s fusion plan on its strategy, scored by full simulation."""
    from flexrt.search import SearchResult
    from flexrt.search.fusion_policies import apply_policy
    from flexrt.simulator.simulate import Simulator
    strategy = apply_policy(policy, result.strategy, machine, cost)
    return SearchResult(strategy, Simulator(machine, cost, optimizer, detail=False).time_full(strategy), result.log)


FUSED_COSTS = ("analytic", "profiled", "learned")


def fused_cost_choice(text: str) -> str:
    """``text`` as a ``--fused-cost`` value (analytic, profiled, learned or learned:PATH), else an
    argparse error naming the valid ones."""
    if text.partition(":")[0] not in FUSED_COSTS or (text.startswith(("analytic:", "profiled:"))) \
            or text == "learned:":
        raise argparse.ArgumentTypeError(f"unknown fused cost {short(text)}; valid: analytic, profiled, "
                                         f"learned or learned:PATH (a model from `flexrt fusion-model train`)")
    return text


def add_fused_cost_flag(parser) -> None:
    """``--fused-cost analytic|profiled|learned[:PATH]``: how a fusion group's task is timed."""
    parser.add_argument("--fused-cost", type=fused_cost_choice, metavar="{analytic,profiled,learned[:PATH]}",
                        help="how fused tasks are timed: analytic (the members' times x the analytic fusion "
                             "ratio), profiled (measured on this host; needs --cost profiled), learned (DisCo's "
                             "learned model; PATH, else the packaged configs/fusion_model/local.npz); default: "
                             "the --cost model's own")


def packaged_fusion_model() -> Path:
    """Where the packaged learned fused-operator model lives (it may be absent)."""
    from importlib import resources
    return Path(str(resources.files("flexrt.configs") / "fusion_model" / "local.npz"))


def fused_cost_model(args, cost):
    """``cost`` with its fused tasks timed as ``--fused-cost`` says (``cost`` itself when not given)."""
    from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel, ScaledFusion
    choice = getattr(args, "fused_cost", None)
    if choice is None:
        return cost
    kind, _, path = choice.partition(":")
    if kind == "analytic":
        return cost if isinstance(cost, AnalyticCostModel) else ScaledFusion(cost)
    if kind == "profiled":
        if not isinstance(cost, ProfiledCostModel):
            raise ConfigError("--fused-cost profiled measures fused tasks on this host; it needs --cost profiled "
                              "(their operators measured too)")
        return cost
    from flexrt.simulator.fused_model import LearnedCostModel, LearnedFusedModel
    return LearnedCostModel(cost, LearnedFusedModel.load(learned_model_path(choice)))


def learned_model_path(choice: str) -> str:
    """The model file ``--fused-cost learned[:PATH]`` names (the packaged one without PATH); a
    ConfigError saying how to make one where it is missing."""
    path = choice.partition(":")[2]
    if not path:
        packaged = packaged_fusion_model()
        if not packaged.is_file():
            raise ConfigError(f"--fused-cost learned: no packaged model at {packaged}; train one with `flexrt "
                              f"fusion-model collect --output S.jsonl` and `flexrt fusion-model train --samples "
                              f"S.jsonl --output M.npz`, then give --fused-cost learned:M.npz")
        return str(packaged)
    if not Path(path).is_file():
        raise ConfigError(f"--fused-cost learned:{path}: no such model file; train one with `flexrt fusion-model "
                          f"train --samples S.jsonl --output {path}`")
    return path


def add_cost_flags(parser, help_text: str = "") -> None:
    """``--cost analytic|profiled`` and ``--attention fused|materialized`` (how the analytic model
    times attention's scores: ``flexrt.simulator.cost_model.ATTENTION_KERNELS``)."""
    from flexrt.simulator.cost_model import ATTENTION_KERNELS
    parser.add_argument("--cost", choices=("analytic", "profiled"), default="analytic", help=help_text or None)
    parser.add_argument("--attention", choices=ATTENTION_KERNELS,
                        help="with --cost analytic: fused (default) keeps attention's [batch, heads, seq, seq] "
                             "scores on chip (FlashAttention); materialized writes and reads them back between "
                             "its kernels (cuDNN's attention, Megatron-LM before FlashAttention)")


def operator_cost_model(args):
    """The operator cost model ``--cost`` and ``--attention`` choose (a ConfigError where ``--attention``
    is given with ``--cost profiled``, which measures the kernels this host runs)."""
    from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel
    attention = getattr(args, "attention", None)
    if args.cost == "analytic":
        return AnalyticCostModel(attention=attention or "fused")
    if attention is not None:
        raise ConfigError(f"--attention {attention} sets how the analytic cost model times attention; --cost profiled "
                          f"measures the kernels this host runs: leave out one of them")
    return ProfiledCostModel()


COMM_COSTS = ("analytic", "measured")


def add_comm_cost_flag(parser) -> None:
    """``--comm-cost analytic|measured``: how ring AllReduces are timed; ``--grad-sync
    overlap|after-backward``: when gradients are synchronized."""
    parser.add_argument("--comm-cost", choices=COMM_COSTS, default="analytic",
                        help="how ring AllReduces are timed: analytic (default: each hop's link latency and "
                             "bandwidth), measured (DisCo's T = C x + D per device group, from the machine's "
                             "collectives section, which `mpiexec -n N flexrt calibrate` writes)")
    parser.add_argument("--grad-sync", choices=("overlap", "after-backward"), default="overlap",
                        help="when gradients are synchronized: overlap (default: each as soon as its backward is "
                             "done, as PyTorch's DDP), after-backward (once the device's whole backward pass, every "
                             "micro-batch, is done: Megatron-LM's default, and FlexFlow's without --overlap)")


def check_comm_cost(args, machine) -> None:
    """With ``--comm-cost measured``, a ConfigError (saying how to measure them) when ``machine`` has no
    measured AllReduce fits; called as soon as the machine is loaded."""
    if getattr(args, "comm_cost", "analytic") == "measured":
        from flexrt.simulator.collectives import require_fits
        require_fits(machine, "--comm-cost measured")


def comm_cost_model(args, cost):
    """``cost`` carrying ``--comm-cost`` and ``--grad-sync`` (``flexrt.simulator.collectives.with_comm_cost``,
    ``flexrt.simulator.sync_lowering.with_grad_sync``), so every simulator built from it, a search's
    and a training session's too, times and orders gradient synchronization alike."""
    from flexrt.simulator.collectives import with_comm_cost
    from flexrt.simulator.sync_lowering import with_grad_sync
    return with_comm_cost(with_grad_sync(cost, getattr(args, "grad_sync", "overlap")),
                          getattr(args, "comm_cost", "analytic"))


def emit_json(doc: Any) -> None:
    """``doc`` as JSON on stdout; a NaN or infinity (a diverged loss) as null: JSON holds neither."""
    json.dump(_finite(doc), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_text(path: str, text: str, what: str) -> str:
    """Write ``text`` to ``path``; an OSError becomes a ConfigError naming the file."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write the {what} to {path}: {e.strerror or e}") from None
    return path


# Where FlexFlow's flags take effect in flexrt, for the refusal of a flag a command does not use.
_FLAG_HOME = {
    "search_budget": "flexrt search and a script's compile", "search_alpha": "flexrt search and a script's compile",
    "search_algorithm": "a script's compile (flexrt search takes --algo)",
    "only_data_parallel": "flexrt search and a script's compile",
    "enable_parameter_parallel": "flexrt search and a script's compile",
    "enable_attribute_parallel": "flexrt search and a script's compile",
    "import_strategy_file": "flexrt search (flexrt simulate/train take --strategy) and a script's compile",
    "export_strategy_file": "flexrt search and a script's compile",
    "search_num_nodes": "flexrt search", "search_num_workers": "flexrt search",
    "workers_per_node": "a script run with python (here --machine and --nodes give the devices)",
    "num_nodes": "a script run with python (here give --nodes)",
    "machine_file": "a script run with python (here give --machine)",
    "epochs": "a script's fit()", "learning_rate": "a script's optimizer (flexrt train takes --lr)",
    "weight_decay": "a script's optimizer", "print_frequency": "a script's fit()",
    "dataset_path": "a script's data loaders",
}


def _other_commands_flag(command: str, flags: Sequence[str]) -> Optional[str]:
    """Where the first of ``flags`` that is another flexrt command's own flag (not this one's, nor a
    model flag) belongs, said for the user; None when there is none."""
    from flexrt.cli import build_parser
    owners: dict[str, list[str]] = {}
    for action in build_parser()._subparsers._group_actions:
        for name, sub in action.choices.items():
            for flag in sub._option_string_actions:
                owners.setdefault(flag, []).append(name)
    for token in flags:
        flag = token.split("=", 1)[0]
        known = flag in FLAG_BY_NAME or flag in IGNORED_BY_NAME or flag in LEGION_VALUE_FLAGS or flag in LEGION_SWITCHES
        if flag.startswith("--") and not known and command not in owners.get(flag, [command]):
            return (f"{flag} is a flag of flexrt {' and '.join(sorted(set(owners[flag])))}, not of flexrt {command} "
                    f"(`flexrt {command} --help` lists its flags)")
    return None


def check_model_flags(command: str, model: str, flags: Sequence[str],
                      honours: Optional[frozenset] = frozenset()) -> FFConfig:
    """Parse the model flags now (FFConfig's and the script's own), so that a typo is a usage error.
    Of FlexFlow's flags the command uses the batch size, the script's own flags and ``honours``
    (FFConfig attribute names; None: every flag, for a command that shows the configuration); any
    other FlexFlow or Legion flag is refused, saying where it applies, instead of being accepted
    and ignored. A script without ``build_model`` (FlexFlow's own scripts, with their own
    argparse) gets every token FFConfig does not know, as FlexFlow's FFConfig leaves them to it."""
    build_model = script_build_model(model)
    options = script_options(build_model) if build_model else {}
    try:
        rest = split_script_flags(build_model, flags)[0] if build_model else list(flags)
        with warnings.catch_warnings():
            if honours is not None:  # every ignored FlexFlow flag is refused below: no warning first
                warnings.simplefilter("ignore", FlagWarning)
            cfg = FFConfig(rest, tolerant=build_model is None and not is_onnx(model))
    except ConfigError as e:
        elsewhere = _other_commands_flag(command, [f for f in flags
                                                   if f.split("=", 1)[0].lstrip("-").replace("-", "_") not in options])
        if elsewhere:
            raise UsageError(command, elsewhere) from None
        own = f"; {model}'s own flags: {', '.join(options)}" if options else ""
        raise UsageError(command, f"{e}{own} (model flags follow MODEL)") from None
    if honours is None:
        return cfg
    used = {"batch_size"} | set(honours)
    for token in rest:
        name = token.split("=", 1)[0]
        if name in LEGION_VALUE_FLAGS or name in LEGION_SWITCHES:
            raise UsageError(command, f"{name} is a Legion runtime flag; flexrt {command} has no use for it (it is "
                                      f"accepted by scripts run with python, for FlexFlow's command lines)")
        if name in IGNORED_BY_NAME:
            raise UsageError(command, f"{name}: flexrt ignores this FlexFlow flag ({IGNORED_BY_NAME[name].help})")
        flag = FLAG_BY_NAME.get(name)
        if flag is not None and flag.attr not in used:
            home = _FLAG_HOME.get(flag.attr)
            where = f"it applies to {home}" if home else "flexrt does not implement it"
            raise UsageError(command, f"{name}: flexrt {command} does not use this FlexFlow flag; {where}")
    return cfg


def compiled_optimizer(model, flag: Optional[str], lr: Optional[float] = None) -> tuple:
    """(OptimizerKind, parameters) of a command: ``flag`` (``--optimizer``)
    where given, with ``lr`` (``--lr``, else 0.01) as its rate; else what the script passed to
    ``compile`` (``model``: the loaded FFModel; FlexFlow's simulator and runtime take the model's
    own optimizer), its rate replaced by ``lr`` where given; else SGD. A simulator reads only the
    kind: SGD with momentum is ``MOMENTUM`` there (``simulated_kind``)."""
    from flexrt.model.training import optimizer_args
    if flag is not None:
        kind = OptimizerKind.parse(flag)
        rate = 0.01 if lr is None else lr
        return kind, ({"alpha": rate} if kind is OptimizerKind.ADAM else {"lr": rate})
    opt = getattr(model, "_optimizer", None)
    if opt is None:
        return OptimizerKind.SGD, {"lr": 0.01 if lr is None else lr}
    kind, params = optimizer_args(opt)
    if lr is not None:
        params["alpha" if kind is OptimizerKind.ADAM else "lr"] = lr
    return kind, params


def simulated_kind(kind: OptimizerKind, params: dict) -> OptimizerKind:
    """The optimizer as the simulator costs it (its state per weight): SGD with momentum is MOMENTUM."""
    return OptimizerKind.MOMENTUM if kind is OptimizerKind.SGD and params.get("momentum") else kind


def compiled_loss(model, flag: Optional[str]):
    """The LossType of a command: ``--loss`` where given, else the script's ``compile``'s loss,
    else sparse categorical cross-entropy (FlexFlow's default)."""
    from flexrt.kernels.losses import LossType
    if flag is not None:
        return LossType.parse(flag)
    chosen = getattr(model, "loss_type", None)
    return chosen if chosen is not None else LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY


def warn_inference(model, command: str) -> None:
    """Say so on stderr when the script compiles for inference (``comp_mode=INFERENCE``): flexrt
    simulates and trains training iterations only."""
    from flexrt.model.enums import CompMode
    if getattr(model, "comp_mode", None) is CompMode.COMP_MODE_INFERENCE:
        print(f"flexrt {command}: warning: the script compiles for inference (comp_mode=INFERENCE); flexrt "
              f"{command} costs a training iteration (forward, backward, update)", file=sys.stderr)


def warn_megatron_shortfalls(base, machine, tensor, pipeline: int) -> None:
    """Say so on stderr when Megatron-LM's strategy cannot split an operator over the whole tensor
    group (``flexrt.search.baselines.megatron_shortfalls``): usually an odd vocabulary, which
    Megatron-LM pads and this model does not."""
    from flexrt.errors import StrategyError
    from flexrt.search.baselines import megatron_shortfalls, tensor_degrees
    try:
        t = tensor or tensor_degrees(base, machine)[0]
        short = megatron_shortfalls(base, machine, t, pipeline)
    except (StrategyError, IndexError):
        return      # megatron_lm itself says what is wrong
    if short:
        listed = ", ".join(f"'{name}' {k}-way" for name, k in list(short.items())[:4]) + (", ..." if len(short) > 4 else "")
        multiple = 128 * t
        vocabularies = {n.attrs.num_entries for n in base.nodes if hasattr(n.attrs, "num_entries")}
        widths = sorted({w for n in base.nodes if n.name in short
                         for w in (getattr(n.attrs, "out_channels", None), getattr(n.attrs, "num_entries", None))
                         if w in vocabularies})
        hint = "; ".join(f"{w} padded to {-(-w // multiple) * multiple}" for w in widths)
        why = (f"Megatron-LM pads the vocabulary to a multiple of 128 x {t} ({hint}; gpt: --vocab); unpadded, these "
               f"operators and the ones around them are not laid out as Megatron-LM's" if hint else
               f"Their widths (or heads) do not divide by {t}, which Megatron-LM's layout assumes")
        print(f"flexrt: warning: Megatron-LM's strategy splits {len(short)} operator(s) fewer than the tensor group's {t} "
              f"ways, as their shapes allow: {listed}. {why}", file=sys.stderr)


def warn_data_parallel(base, machine) -> None:
    """Say so on stderr when data parallelism cannot use every device: the batch does not divide
    over them, so ``data_parallel`` uses the largest divisor of the batch that divides the devices."""
    from flexrt.ir.op_type import OpType
    from flexrt.strategy import data_parallel_degree
    batches = {n.attrs.shape.dims[0] for n in base.nodes if n.op_type is OpType.INPUT and n.attrs.shape.dims}
    n = machine.num_devices
    for batch in sorted(batches):
        d = data_parallel_degree(batch, n)
        if d < n:
            print(f"flexrt: warning: batch {batch} does not divide over {n} devices; data parallelism uses {d} "
                  f"of them (the largest count that divides both)", file=sys.stderr)
            return


def add_pipeline_flags(parser) -> None:
    """``--pipeline P [--micro-batches M] [--schedule S] [--chunks V]``: a pipelined strategy
    (``flexrt.strategy.pipeline``): P stages of balanced FLOPs on blocks of n / P devices, data
    parallel within a stage; with ``--megatron [--tensor-parallel T] [--sequence-parallel]``,
    Megatron-LM's 3-D parallelism (``flexrt.search.baselines.megatron_lm``) instead."""
    parser.add_argument("--pipeline", type=count(1), metavar="P",
                        help="pipeline parallelism over P stages (device blocks of n/P devices, data parallel within)")
    parser.add_argument("--micro-batches", type=count(1), metavar="M",
                        help="micro-batches per iteration with --pipeline (default 4 P, or the most below "
                             "that divide the batch)")
    parser.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved", "zb-h1", "2bw"), default="1f1b",
                        help="pipeline schedule (default 1f1b; interleaved: --chunks stages per block)")
    parser.add_argument("--chunks", type=count(1), metavar="V",
                        help="stages per device block with --schedule interleaved (default 2)")
    parser.add_argument("--megatron", action="store_true",
                        help="Megatron-LM's strategy: tensor parallel within a node, --pipeline P stages across "
                             "nodes (default 1), data parallel over the rest")
    parser.add_argument("--tensor-parallel", type=count(1), metavar="T",
                        help="with --megatron: tensor parallel degree (default: the largest that divides a node's devices and "
                             "the attention heads, as Megatron-LM requires, and leaves whole --pipeline blocks)")
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="with --megatron: split LayerNorm, dropout and residual adds over the tensor group")
    parser.add_argument("--recompute", choices=("none", "full", "selective"), default="none",
                        help="activation recomputation: full (all but checkpoints at the model's cuts, about "
                             "sqrt(n) operators a segment) or selective (only memory-bound operators); default none")


def add_precision_flags(parser, loss_scale: bool = False) -> None:
    """``--precision fp32|fp16|bf16`` (mixed precision: ``flexrt.ir.precision``) and, for training,
    ``--loss-scale dynamic|S``."""
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="fp16 / bf16: mixed precision (16-bit compute, activations and gradients at the devices' "
                             "16-bit peaks; float32 master weights and optimizer state); default fp32")
    if loss_scale:
        parser.add_argument("--loss-scale", default="dynamic", metavar="dynamic|S",
                            help="with --precision fp16: dynamic loss scaling (default; GradScaler's defaults) or a "
                                 "fixed scale S")


def precision_arg(args, base):
    """The model in the precision ``--precision`` asks for."""
    if getattr(args, "precision", "fp32") == "fp32":
        return base
    from flexrt.ir.precision import with_precision
    return with_precision(base, args.precision)


def loss_scale_arg(args):
    """``--loss-scale``: "dynamic" or a number > 0 (ConfigError otherwise)."""
    value = getattr(args, "loss_scale", "dynamic")
    if value == "dynamic":
        return None
    try:
        scale = float(value)
    except ValueError:
        scale = float("nan")
    if not (scale > 0 and scale != float("inf")):
        raise ConfigError(f"--loss-scale {value!r}: give dynamic or a number > 0")
    if args.precision != "fp16":
        raise ConfigError("--loss-scale applies to --precision fp16 (float32 and bfloat16 need no loss scaling)")
    return scale


def recompute_arg(args, base, strategy):
    """``strategy`` recomputing what ``--recompute`` asks for (``flexrt.strategy.recompute``)."""
    if getattr(args, "recompute", "none") == "none":
        return strategy
    from flexrt.strategy.config import wiring_of
    from flexrt.strategy.recompute import recompute_set
    return strategy.with_recompute(recompute_set(wiring_of(base), args.recompute))


def pipeline_arg(args, base, machine):
    """The strategy ``add_pipeline_flags`` asks for (pipelined, or Megatron-LM's), or None; the
    pipeline's other flags without ``--pipeline`` (or ``--megatron``) are a ConfigError."""
    if args.megatron:
        from flexrt.search.baselines import megatron_lm
        if (args.pipeline or 1) == 1 and (args.chunks is not None or args.schedule != "1f1b"):
            raise ConfigError("--schedule and --chunks order a pipeline's stages: with --megatron give --pipeline P "
                              "> 1 too (one stage runs its --micro-batches in turn)")
        warn_megatron_shortfalls(base, machine, args.tensor_parallel, args.pipeline or 1)
        return megatron_lm(base, machine, tensor=args.tensor_parallel, pipeline=args.pipeline or 1,
                           micro_batches=args.micro_batches, schedule=args.schedule,
                           chunks=args.chunks or (2 if args.schedule == "interleaved" else 1),
                           sequence_parallel=args.sequence_parallel)
    if args.tensor_parallel is not None or args.sequence_parallel:
        raise ConfigError("--tensor-parallel and --sequence-parallel shape Megatron-LM's strategy: give --megatron too")
    if args.pipeline is None:
        if args.micro_batches is not None or args.chunks is not None or args.schedule != "1f1b":
            raise ConfigError("--micro-batches, --schedule and --chunks shape a pipeline: give --pipeline P too")
        return None
    from flexrt.strategy.pipeline import default_micro_batches, pipeline_strategy
    chunks = args.chunks if args.chunks is not None else (2 if args.schedule == "interleaved" else 1)
    # by default, micro-batches that split over each stage's block of devices (else most of it idles)
    block = machine.num_devices // args.pipeline if machine.num_devices % args.pipeline == 0 else 1
    micro = args.micro_batches if args.micro_batches is not None else \
        default_micro_batches(base, args.pipeline, chunks, block)
    return pipeline_strategy(base, machine, args.pipeline, micro, args.schedule, chunks=chunks)
