"""Strategy files (JSON): per-operator configurations over a model (``ConfigStrategy``, checked
against the model's PCG hash) or a whole parallel PCG with views (``GraphStrategy``), each for the
machine shape it was made for.

Entry points: ``save_strategy``, ``load_strategy``, ``strategy_to_json``, ``strategy_from_json``.
"""

from __future__ import annotations

import json
from typing import Optional

from flexrt.errors import FlexrtError, StrategyError
from flexrt.ir.pcg import PCG
from flexrt.machine import Machine
from flexrt.machine.views import MachineView, Projection
from flexrt.strategy.config import ConfigStrategy, GraphStrategy, OpConfig, Strategy, is_compute

FORMAT = "flexrt.strategy"
VERSION = 1


def _view_json(v: MachineView) -> dict:
    return {"start": v.start, "strides": list(v.strides), "projections": [p.name for p in v.projections]}


def _view_from_json(d, where: str) -> MachineView:
    try:
        return MachineView(int(d["start"]), tuple(int(s) for s in d["strides"]),
                           tuple(Projection[p] for p in d["projections"]))
    except (KeyError, TypeError, ValueError) as e:
        raise StrategyError(f"{where}: malformed view {d!r} ({e!r}); expected start, strides, projections "
                            f"(INTRA/INTER)") from None


def _machine_json(machine: Machine) -> dict:
    return {"name": machine.name, "num_nodes": machine.num_nodes, "devices_per_node": machine.devices_per_node}


def strategy_to_json(strategy: Strategy, machine: Machine) -> dict:
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


def strategy_from_json(data: dict, base: Optional[PCG], machine: Machine, source: str = "<json>") -> Strategy:
    """Rebuild a strategy; the model (by PCG hash) and the machine must be the ones it was made for."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StrategyError(f"{source}: not a flexrt strategy file (missing \"format\": \"{FORMAT}\")")
    m = data.get("machine", {})
    here = _machine_json(machine)
    diff = [f"{k} {m.get(k)!r} (file) vs {here[k]!r} (this machine)" for k in ("num_nodes", "devices_per_node")
            if m.get(k) != here[k]]
    if diff:
        raise StrategyError(f"{source}: the strategy was made for machine {m.get('name')!r} and does not fit "
                            f"{machine.name!r}: {'; '.join(diff)}")
    if "pcg" in data:
        pcg = PCG.from_json(data["pcg"], source)
        views = {pcg.node_by_name(name).id: _view_from_json(v, f"{source}: views.{name}")
                 for name, v in data.get("views", {}).items()}
        s = GraphStrategy(pcg, views)
        s.check_views(machine)
        return s
    if base is None:
        raise StrategyError(f"{source}: a per-operator strategy needs the model it was made for")
    if data.get("model_hash") != base.structural_hash():
        raise StrategyError(f"{source}: the strategy was made for another model (PCG hash "
                            f"{data.get('model_hash')} vs this model's {base.structural_hash()})")
    configs = {}
    for i, op in enumerate(data.get("operators", [])):
        where = f"{source}: operators[{i}]"
        try:
            node = base.node_by_name(op["name"])
        except (KeyError, FlexrtError):
            raise StrategyError(f"{where}: no operator named {op.get('name')!r} in this model") from None
        if op.get("op") != node.op_type.value:
            raise StrategyError(f"{where}: '{node.name}' is a {node.op_type.value} here, {op.get('op')!r} in the file")
        configs[node.id] = OpConfig(tuple(sorted((str(k), v) for k, v in op.get("degrees", {}).items())),
                                    _view_from_json(op.get("view"), where))
    missing = [n.name for n in base.nodes if is_compute(n) and n.id not in configs]
    if missing:
        raise StrategyError(f"{source}: no configuration for {len(missing)} operator(s): {', '.join(missing[:5])}")
    s = ConfigStrategy(base, configs)
    s.check_views(machine)
    return s


def load_strategy(path: str, base: Optional[PCG], machine: Machine) -> Strategy:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise StrategyError(f"cannot read strategy file {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise StrategyError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    return strategy_from_json(data, base, machine, path)
