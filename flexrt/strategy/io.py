"""Strategy files (JSON): per-operator configurations over a model (``ConfigStrategy``, checked
against the model's PCG hash) or a whole parallel PCG with views (``GraphStrategy``), each for the
machine shape it was made for. ``load_strategy`` also reads FlexFlow's text format (``text.py``),
recognised by its content (a count where JSON has ``{``) or else by the ``.txt`` suffix.

Reading checks every field before it is used, so a bad file gets one ``StrategyError`` naming the
file, the field path (``operators[3] ('fc1').view.start``), the bad value and what is valid: unknown
and missing keys, wrong types, non-integral or out-of-range numbers, operators listed twice or
missing, views that fall off the machine or put two pieces on one device.

The per-operator layout::

    {"format": "flexrt.strategy", "version": 1, "model_hash": "<PCG hash>",
     "machine": {"name": "dgx1_v100", "num_nodes": 1, "devices_per_node": 8},
     "operators": [{"name": "fc1", "op": "linear", "degrees": {"dim0": 8},
                    "view": {"start": 0, "strides": [1, 1], "projections": ["INTRA", "INTRA"]}}, ...]}

A whole-PCG strategy has ``"pcg"`` (``PCG.to_json``) and ``"views"`` (operator name -> view) in place
of ``model_hash`` and ``operators``. Either may carry ``"fusion"``: a fusion plan
(``flexrt.strategy.fusion``: operator groups per phase, gradient buckets), checked against the
strategy when read. A pipelined strategy has ``"pipeline"`` (stages, micro-batches, schedule, chunks,
each operator's stage and its copies' degrees: ``flexrt.strategy.pipeline.pipeline_to_json``) in
place of ``operators``, and is rebuilt on the model ``model_hash`` names; its fusion plan names the
micro-batched copies (``x.mb0``), each group within one stage and micro-batch. Any of them may carry
``"recompute"``: the model's operators whose activations are recomputed (``flexrt.strategy.recompute``).

Entry points: ``save_strategy``, ``load_strategy``, ``strategy_to_json``, ``strategy_from_json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from flexrt.errors import FlexrtError, StrategyError
from flexrt.inputs import check_int, check_keys, check_type, parse_json, read_text, short
from flexrt.ir.pcg import PCG, Node
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, Projection, check_placement
from flexrt.strategy.config import (ConfigStrategy, GraphStrategy, OpConfig, Strategy, compute_node, is_compute,
                                    node_axes)
from flexrt.strategy.fusion import FusionError, FusionPlan, check_fusion
from flexrt.strategy.space import all_axes, apply_single
from flexrt.strategy.text import name_list, save_text_strategy, strategy_from_text

FORMAT = "flexrt.strategy"
VERSION = 1
_MACHINE_KEYS = ("name", "num_nodes", "devices_per_node")
_CONFIG_KEYS = ("format", "version", "model_hash", "machine", "operators")
_GRAPH_KEYS = ("format", "version", "machine", "pcg", "views")
_PIPELINE_KEYS = ("format", "version", "model_hash", "machine", "pipeline")
_OPERATOR_KEYS = ("name", "op", "degrees", "view")
_VIEW_KEYS = ("start", "strides", "projections")


def _view_json(v: MachineView) -> dict:
    return {"start": v.start, "strides": list(v.strides), "projections": [p.name for p in v.projections]}


def _view_from_json(d, where: str, machine: Machine, axes: Sequence[str], degrees=None) -> MachineView:
    """The view ``d`` (start, strides, projections) of an operator whose axes are ``axes``. With the
    operator's ``degrees``, a view that stops before the last axes, all unsplit, is theirs with
    stride 1 inside a node (a file written before the operator gained those axes: Concat's part)."""
    check_type(d, dict, where, StrategyError)
    check_keys(d, _VIEW_KEYS, where, StrategyError, required=_VIEW_KEYS)
    start = check_int(d["start"], f"{where}.start", StrategyError, minimum=0)
    if start >= machine.num_devices:
        raise StrategyError(f"{where}.start is device {start} but machine {machine.name!r} has devices "
                            f"0..{machine.num_devices - 1}")
    lists = {k: check_type(d[k], list, f"{where}.{k}", StrategyError) for k in ("strides", "projections")}
    given = len(lists["strides"])
    if degrees is not None and given == len(lists["projections"]) and 0 < given < len(axes) and \
            all(degrees.get(a, 1) == 1 for a in axes[given:]):
        lists = {"strides": lists["strides"] + [1] * (len(axes) - given),
                 "projections": lists["projections"] + [Projection.INTRA.name] * (len(axes) - given)}
    for k, values in lists.items():
        if len(values) != len(axes):
            raise StrategyError(f"{where}.{k} has {len(values)} entries; give one per axis of the operator "
                                f"({len(axes)}: {', '.join(axes)})")
    strides = tuple(check_int(s, f"{where}.strides[{k}]", StrategyError, minimum=1)
                    for k, s in enumerate(lists["strides"]))
    valid = [p.name for p in Projection]
    for k, p in enumerate(lists["projections"]):
        if not isinstance(p, str) or p not in valid:
            raise StrategyError(f"{where}.projections[{k}] is {short(p)}; valid: {', '.join(valid)}")
    return MachineView(start, strides, tuple(Projection[p] for p in lists["projections"]))


def _machine_json(machine: Machine) -> dict:
    return {"name": machine.name, "num_nodes": machine.num_nodes, "devices_per_node": machine.devices_per_node}


def strategy_to_json(strategy: Strategy, machine: Machine) -> dict:
    if getattr(strategy, "pipeline", None) is not None:   # the model's hash and the plan that rebuilds it
        from flexrt.strategy.pipeline import pipeline_to_json
        out = {"format": FORMAT, "version": VERSION, "model_hash": strategy.pipeline.model.source_hash,
               "machine": _machine_json(machine), "pipeline": pipeline_to_json(strategy, _view_json)}
    else:
        out = _body_json(strategy, machine)
    plan = getattr(strategy, "fusion", None)
    if plan:
        out["fusion"] = plan.to_json()
    if getattr(strategy, "recompute", None):
        out["recompute"] = sorted(strategy.recompute)
    return out


def _body_json(strategy: Strategy, machine: Machine) -> dict:
    if not isinstance(strategy, ConfigStrategy):
        return {"format": FORMAT, "version": VERSION, "machine": _machine_json(machine),
                "pcg": strategy.pcg.to_json(),
                "views": {strategy.pcg.node(n).name: _view_json(v) for n, v in sorted(strategy.views.items())}}
    ops = []
    for nid, cfg in sorted(strategy.configs.items()):
        node = strategy.base.node(nid)
        ops.append({"name": node.name, "op": node.op_type.value, "degrees": dict(cfg.degrees),
                    "view": _view_json(cfg.view)})
    return {"format": FORMAT, "version": VERSION, "model_hash": strategy.base.structural_hash(),
            "machine": _machine_json(machine), "operators": ops}


def save_strategy(path: str, strategy: Strategy, machine: Machine) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strategy_to_json(strategy, machine), f, indent=1)
        f.write("\n")


def export_strategy(path: str, strategy: Strategy, machine: Machine) -> str:
    """Write ``strategy`` where a user asked (``--export``): FlexFlow's text format when the file name
    ends in ``.txt``, else flexrt's JSON; StrategyError naming the file when it cannot be written."""
    if path.endswith(".txt") and getattr(strategy, "pipeline", None) is not None:
        raise StrategyError(f"cannot write {path}: FlexFlow's text format has no pipelines; export to a .json file")
    if path.endswith(".txt") and getattr(strategy, "fusion", None):
        raise StrategyError(f"cannot write {path}: FlexFlow's text format has no fusion plans; export to a "
                            f".json file to keep the plan")
    try:
        if path.endswith(".txt"):
            save_text_strategy(path, strategy, machine)
        else:
            save_strategy(path, strategy, machine)
    except OSError as e:
        raise StrategyError(f"cannot write the strategy to {path}: {e.strerror or e}") from None
    return path


def _check_header(data, machine: Machine, source: str) -> None:
    """The format, version and machine of a strategy document, and its keys."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = short(data.get("format")) if isinstance(data, dict) else f"a JSON {type(data).__name__}"
        raise StrategyError(f"{source}: not a flexrt strategy file (\"format\" must be \"{FORMAT}\", got {got})")
    keys = _GRAPH_KEYS if "pcg" in data else _PIPELINE_KEYS if "pipeline" in data else _CONFIG_KEYS
    check_keys(data, keys + ("fusion", "recompute"), source,
               StrategyError, required=keys)
    if data["version"] != VERSION or isinstance(data["version"], bool):
        raise StrategyError(f"{source}: version is {short(data['version'])}; this flexrt reads strategy files of "
                            f"version {VERSION}")
    m = check_type(data["machine"], dict, f"{source}: machine", StrategyError)
    check_keys(m, _MACHINE_KEYS, f"{source}: machine", StrategyError, required=_MACHINE_KEYS[1:])
    name = check_type(m.get("name", ""), str, f"{source}: machine.name", StrategyError)
    got = {k: check_int(m[k], f"{source}: machine.{k}", StrategyError, minimum=1) for k in _MACHINE_KEYS[1:]}
    here = _machine_json(machine)
    diff = [f"{k} {got[k]} (file) vs {here[k]} (this machine)" for k in got if got[k] != here[k]]
    if diff:
        raise StrategyError(f"{source}: the strategy was made for machine {short(name or None)} and does not fit "
                            f"{machine.name!r}: {'; '.join(diff)}")


def _operator_config(op, where: str, base: PCG, machine: Machine) -> tuple[Node, OpConfig]:
    """One entry of ``operators``: the model's node and its configuration."""
    check_type(op, dict, where, StrategyError)
    check_keys(op, _OPERATOR_KEYS, where, StrategyError, required=_OPERATOR_KEYS)
    name = check_type(op["name"], str, f"{where}.name", StrategyError)
    try:
        node = base.node_by_name(name)
    except FlexrtError:
        node = None
    if node is None or not is_compute(node):
        ops = name_list([n.name for n in base.nodes if is_compute(n)])
        if node is None:
            raise StrategyError(f"{where}.name: no operator named {short(name)} in this model; its operators: {ops}")
        raise StrategyError(f"{where}.name: {short(name)} is a {node.op_type.value} of this model, not an operator "
                            f"a strategy configures; its operators: {ops}")
    where = f"{where} ({short(name, 40)})"
    if op["op"] != node.op_type.value:
        raise StrategyError(f"{where}.op: '{node.name}' is a {node.op_type.value} here, {short(op['op'])} in the file")
    axes = [a.name for a in all_axes(base, node)]
    given = check_type(op["degrees"], dict, f"{where}.degrees", StrategyError)
    degrees = {}
    for axis, d in given.items():
        if axis not in axes:
            raise StrategyError(f"{where}.degrees: '{node.name}' ({node.op_type.value}) has no axis {short(axis)}; "
                                f"its axes: {', '.join(axes)}")
        degrees[axis] = check_int(d, f"{where}.degrees.{axis}", StrategyError, minimum=1)
    view = _view_from_json(op["view"], f"{where}.view", machine, axes, degrees)
    check_placement(machine, view, tuple(degrees.get(a, 1) for a in axes), f"{where}.view")
    try:
        apply_single(base, node, degrees)
    except FlexrtError as e:
        raise StrategyError(f"{where}.degrees: {e}") from None
    return node, OpConfig(tuple(degrees.items()), view)


def made_for(model_hash, base: PCG) -> bool:
    """Whether a strategy file's ``model_hash`` names ``base``, in any precision: a strategy
    configures operators, whose axes and splits do not depend on their floating-point type, so one
    searched in float32 trains in mixed precision (``flexrt.ir.precision``) and back."""
    if model_hash == base.structural_hash():
        return True
    from flexrt.ir.precision import Precision, with_precision
    return any(model_hash == with_precision(base, p).structural_hash() for p in Precision)


def _config_strategy(data: dict, base: Optional[PCG], machine: Machine, source: str) -> ConfigStrategy:
    if base is None:
        raise StrategyError(f"{source}: a per-operator strategy needs the model it was made for")
    model_hash = check_type(data["model_hash"], str, f"{source}: model_hash", StrategyError)
    if not made_for(model_hash, base):
        ops = data.get("operators")
        names = {op.get("name") for op in ops if isinstance(op, dict)} if isinstance(ops, list) else set()
        same = names and names == {n.name for n in base.nodes if is_compute(n)}
        hint = ("; its operators are this model's, with other shapes or attributes: another batch size, "
                "sequence length or layer size?") if same else ""
        raise StrategyError(f"{source}: the strategy was made for another model (PCG hash "
                            f"{short(model_hash)} vs this model's {base.structural_hash()}){hint}")
    configs: dict[int, OpConfig] = {}
    first: dict[int, int] = {}  # node id -> index of its entry
    for i, op in enumerate(check_type(data["operators"], list, f"{source}: operators", StrategyError)):
        node, cfg = _operator_config(op, f"{source}: operators[{i}]", base, machine)
        if node.id in first:
            raise StrategyError(f"{source}: operators[{i}]: operator '{node.name}' is listed twice (also "
                                f"operators[{first[node.id]}]); give each operator once")
        first[node.id], configs[node.id] = i, cfg
    missing = [n.name for n in base.nodes if is_compute(n) and n.id not in configs]
    if missing:
        raise StrategyError(f"{source}: operators: no configuration for {len(missing)} operator(s): "
                            f"{name_list(missing)}")
    try:
        return ConfigStrategy(base, configs)
    except FlexrtError as e:
        raise StrategyError(f"{source}: {e}") from None


def _graph_strategy(data: dict, machine: Machine, source: str) -> GraphStrategy:
    pcg = PCG.from_json(data["pcg"], f"{source}: pcg")
    views = {}
    for name, v in check_type(data["views"], dict, f"{source}: views", StrategyError).items():
        where = f"{source}: views.{short(name, 40)}"
        node = compute_node(pcg, name)
        if node is None:
            ops = [n.name for n in pcg.nodes if is_compute(n)]
            raise StrategyError(f"{where}: the file's pcg has no compute operator named {short(name)}; its "
                                f"operators: {name_list(ops)}")
        try:
            axes, degree = node_axes(pcg, node)
        except FlexrtError as e:
            raise StrategyError(f"{where}: {e}") from None
        view = _view_from_json(v, where, machine, [a.name for a in axes])
        check_placement(machine, view, tuple(degree[a.name] for a in axes), where)
        views[node.id] = view
    missing = [n.name for n in pcg.nodes if is_compute(n) and n.id not in views]
    if missing:
        raise StrategyError(f"{source}: views: no view for {len(missing)} operator(s): {name_list(missing)}")
    try:
        return GraphStrategy(pcg, views)
    except FlexrtError as e:
        raise StrategyError(f"{source}: {e}") from None


def strategy_from_json(data: dict, base: Optional[PCG], machine: Machine, source: str = "<json>") -> Strategy:
    """Rebuild a strategy; the model (by PCG hash) and the machine must be the ones it was made for.
    StrategyError (GraphError for a malformed ``pcg``) naming the field when anything is off."""
    _check_header(data, machine, source)
    if "pipeline" in data:
        from flexrt.strategy.pipeline import pipeline_from_json
        if base is None or not made_for(data.get("model_hash"), base):
            raise StrategyError(f"{source}: made for another model (model_hash {short(data.get('model_hash'))}"
                                + (f" vs this model's {base.structural_hash()})" if base is not None else ")"))
        strategy = pipeline_from_json(data["pipeline"], base, machine, f"{source}: pipeline", _view_from_json)
    else:
        strategy = _graph_strategy(data, machine, source) if "pcg" in data else _config_strategy(data, base, machine,
                                                                                                 source)
    if "fusion" in data:
        plan = FusionPlan.from_json(data["fusion"], f"{source}: fusion")
        try:
            check_fusion(strategy, plan, machine)
        except FusionError as e:
            raise FusionError(f"{source}: fusion: {e}") from None
        strategy = strategy.with_fusion(plan)
    if "recompute" not in data:
        return strategy
    names = check_type(data["recompute"], list, f"{source}: recompute", StrategyError)
    for i, n in enumerate(names):
        check_type(n, str, f"{source}: recompute[{i}]", StrategyError)
    try:
        return strategy.with_recompute(names)
    except FlexrtError as e:
        raise StrategyError(f"{source}: {e}") from None


def _is_flexflow_text(path: str, text: str) -> bool:
    """FlexFlow's text format starts with the number of operators, a JSON strategy with ``{``; a file
    that starts with neither is read as its suffix says (``.txt``: FlexFlow's, else JSON)."""
    first = text.lstrip()[:1]
    if first and first in "{[":
        return False
    if first and first in "0123456789+-":
        return True
    return Path(path).suffix.lower() == ".txt"


def load_strategy(path: str, base: Optional[PCG], machine: Machine) -> Strategy:
    """Read a strategy file: flexrt's JSON, or FlexFlow's text format (which needs ``base``)."""
    text = read_text(path, "strategy file", StrategyError)
    if _is_flexflow_text(str(path), text):
        if base is None:
            raise StrategyError(f"{path}: a FlexFlow text strategy needs the model it was made for")
        return strategy_from_text(text, base, machine, str(path))
    return strategy_from_json(parse_json(text, str(path), StrategyError), base, machine, str(path))
