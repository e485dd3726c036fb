"""``flexrt machines``: the machine presets; ``flexrt machines show NAME [--nodes N]``: one machine's
devices, links and the routes from device 0, as tables or ``--json``."""

from __future__ import annotations

from flexrt.cli._common import add_json_flag, count, emit_json
from flexrt.machine import Machine, load_machine, load_spec, preset_names
from flexrt.machine.limits import MAX_NODES

NAME = "machines"
HELP = "list the machine presets, or show one machine (`flexrt machines show NAME --nodes N`)"
ACCEPTS_MODEL_FLAGS = False


def add_arguments(parser) -> None:
    add_json_flag(parser)
    sub = parser.add_subparsers(dest="machines_command", metavar="ACTION")
    show = sub.add_parser("show", help="devices, links and routes of a machine", allow_abbrev=False,
                          description="devices, links and routes of a preset or a machine file")
    show.add_argument("machine", metavar="NAME", help="preset name (see `flexrt machines`) or path to a machine file")
    show.add_argument("--nodes", type=count(1, MAX_NODES), metavar="N",
                      help=f"scale the machine to N nodes (1..{MAX_NODES})")
    add_json_flag(show, action=True)


def _kinds(machine: Machine) -> str:
    counts: dict[str, int] = {}
    for d in machine.devices[:machine.devices_per_node]:
        counts[d.spec.name] = counts.get(d.spec.name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def _list(as_json: bool) -> int:
    rows = []
    for name in preset_names():
        m = load_machine(name)
        rows.append({"name": name, "nodes": m.num_nodes, "devices": m.num_devices,
                     "devices_per_node": m.devices_per_node, "device_kind": _kinds(m),
                     "description": load_spec(name).description})
    if as_json:
        emit_json({"machines": rows})
        return 0
    header = ("name", "nodes", "devices", "per node")
    width = max(len(header[0]), *(len(r["name"]) for r in rows))
    print(f"{header[0].ljust(width)}  {header[1]:>5}  {header[2]:>7}  {header[3]}")
    for r in rows:
        print(f"{r['name'].ljust(width)}  {r['nodes']:>5}  {r['devices']:>7}  {r['device_kind']}")
    return 0


def _gb(x: float) -> str:
    return f"{x / 1e9:g}"


def _machine_json(m: Machine, routes: dict[int, tuple[int, ...]]) -> dict:
    return {
        "name": m.name, "nodes": m.num_nodes, "devices_per_node": m.devices_per_node, "num_devices": m.num_devices,
        "device_kinds": [{"name": s.name, "kind": s.kind, "peak_flops": {d.name: f for d, f in s.peak_flops.items()},
                          "memory_bandwidth": s.memory_bandwidth, "memory_bytes": s.memory_bytes,
                          "launch_overhead_s": s.launch_overhead_s, "efficiency": s.efficiency}
                         for s in dict.fromkeys(d.spec for d in m.devices)],
        "devices": [{"id": d.id, "endpoint": d.endpoint, "node": d.node, "socket": d.socket, "local": d.local,
                     "kind": d.spec.name} for d in m.devices],
        "links": [{"id": link.id, "type": link.type.value, "bandwidth": link.bandwidth, "latency_s": link.latency_s,
                   "src": link.src, "dst": link.dst} for link in m.links],
        "routes": [{"src": 0, "dst": dst, "links": list(path), "types": [m.links[i].type.value for i in path],
                    "bottleneck_bandwidth": min(m.links[i].bandwidth for i in path)}
                   for dst, path in routes.items()],
    }


def _show(name: str, nodes: int | None, as_json: bool) -> int:
    m = load_machine(name, nodes)
    routes = {dst: m.route(0, dst) for dst in range(1, m.num_devices)}
    if as_json:
        emit_json(_machine_json(m, routes))
        return 0
    print(f"machine {m.name}: {m.num_nodes} node(s) x {m.devices_per_node} devices = {m.num_devices} devices, "
          f"{len(m.links)} links")
    print("\ndevice kinds:")
    for s in dict.fromkeys(d.spec for d in m.devices):
        flops = ", ".join(f"{d.short} {f / 1e12:g}" for d, f in s.peak_flops.items())
        print(f"  {s.name} ({s.kind}): TFLOP/s {flops}; memory {s.memory_bytes / 2**30:g} GiB at "
              f"{_gb(s.memory_bandwidth)} GB/s; launch {s.launch_overhead_s * 1e6:g} us; efficiency {s.efficiency:g}")
    print("\ndevices:")
    print(f"  {'id':>4}  {'endpoint':<12} {'node':>4} {'socket':>6} {'local':>5}  kind")
    for d in m.devices:
        print(f"  {d.id:>4}  {d.endpoint:<12} {d.node:>4} {d.socket:>6} {d.local:>5}  {d.spec.name}")
    print("\nlinks (one direction each):")
    print(f"  {'id':>4}  {'type':<8} {'GB/s':>8} {'latency us':>10}  src -> dst")
    for link in m.links:
        print(f"  {link.id:>4}  {link.type.value:<8} {_gb(link.bandwidth):>8} {link.latency_s * 1e6:>10g}  "
              f"{link.src} -> {link.dst}")
    print(f"\nroutes from device 0 ({m.devices[0].endpoint}):")
    for dst, path in routes.items():
        chain = " > ".join(m.links[i].type.value for i in path)
        print(f"  -> {dst:>4} {m.devices[dst].endpoint:<12} {len(path)} hop(s), "
              f"{_gb(m.route_bandwidth(0, dst))} GB/s: {chain}")
    return 0


def run(args, extra) -> int:
    if args.machines_command == "show":
        return _show(args.machine, args.nodes, args.json)
    return _list(args.json)
