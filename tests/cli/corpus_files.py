"""Bad files (the corpus of ``badinput.py``): strategy JSON and FlexFlow text strategies given to
``simulate --strategy``, ``search --import`` and ``train --strategy``; substitution rule files given to
``substitutions verify | stats | show``; ``substitutions generate`` flags; model scripts given to
``show`` and ``simulate``. Each valid file is made with flexrt itself and then broken one way per case:
wrong types, unknown and missing keys, repeated operators, values out of range, bad bytes, deep
nesting, files that are not regular files. Every message must name the file, the line or the field
path (or the operator) and, where there are some, the valid values."""

from __future__ import annotations

import copy
import functools
import json
import os

from .badinput import case

SIM = "simulate mlp --machine dgx1_v100 --strategy"
SIM_FIG2 = "simulate mlp_unity_fig2 --machine dgx1_v100 --strategy"
OP0 = r"s\.json: operators\[0\] \('tower0\.dense0'\)"     # the path of the first operator's fields
VIEW0 = OP0 + r"\.view"


@functools.lru_cache(maxsize=None)
def _valid() -> tuple[dict, str, dict, dict]:
    """(data-parallel strategy JSON of mlp on dgx1_v100, the same in FlexFlow's text format, Unity's
    Fig. 2 whole-PCG strategy, a rule file of four rules like the shipped library's first)."""
    from flexrt.examples.strategies import unity_fig2
    from flexrt.machine import load_machine
    from flexrt.model import load_model
    from flexrt.search.substitutions.rule import OutputMap, PatternOp, Rule, Slot
    from flexrt.strategy import data_parallel, strategy_to_json, strategy_to_text

    machine = load_machine("dgx1_v100")
    dp = data_parallel(load_model("mlp", []).model.pcg, machine)

    def op(kind, *inputs, **params):
        return PatternOp(f"OP_{kind}", tuple(Slot(i) for i in inputs), tuple((f"PM_{k}", v) for k, v in params.items()))
    out = (OutputMap(0, 0, 0, 0),)
    rules = [Rule("flexrt_rule_0", [op("EW_ADD", -1, -2)], [op("EW_ADD", -2, -1)], out),
             Rule("flexrt_rule_1", [op("EW_MUL", -1, -2)], [op("EW_MUL", -2, -1)], out),
             Rule("flexrt_rule_2", [op("EW_ADD", -1, -1)], [op("SCALAR_MULTIPLY", -1, SCALAR=2)], out),
             Rule("flexrt_rule_3", [op("LINEAR", -1, -2, ACTI=0), op("LINEAR", -3, 0, ACTI=0)],
                  [op("LINEAR", -3, -1, ACTI=0), op("LINEAR", 0, -2, ACTI=0)], (OutputMap(1, 0, 1, 0),))]
    fig2 = json.loads(unity_fig2.FILE.read_text())
    return (strategy_to_json(dp, machine), strategy_to_text(dp, machine), fig2,
            {"_t": "RuleCollection", "rule": [r.to_json() for r in rules]})


@functools.lru_cache(maxsize=None)
def _planned() -> tuple[dict, dict]:
    """(mlp's data parallelism on dgx1_v100 with JAX's fusion plan: a forward and a backward group of
    tower0.dense7, tower1.dense7, add1, softmax; a 2-stage 1F1B pipeline of 4 micro-batches, stage 0 on
    devices 0..3 and stage 1, tower1.* onwards, on 4..7)."""
    from flexrt.machine import load_machine
    from flexrt.model import load_model
    from flexrt.search.fusion_policies import apply_policy
    from flexrt.strategy import data_parallel, strategy_to_json
    from flexrt.strategy.pipeline import pipeline_strategy

    machine = load_machine("dgx1_v100")
    pcg = load_model("mlp", []).model.pcg
    fused = apply_policy("jax", data_parallel(pcg, machine), machine)
    return strategy_to_json(fused, machine), strategy_to_json(pipeline_strategy(pcg, machine, 2, 4), machine)


RAW = "@raw@"  # a value written as ``raw`` text: JSON numbers Python cannot hold (1e400)


def _json(change, which: int = 0, raw: str = "") -> str:
    """A valid document (0: per-operator strategy, 2: whole-PCG strategy, 3: rule file, 4: fused
    strategy, 5: pipelined strategy) after ``change(doc)``, with the value ``RAW`` written as ``raw``."""
    doc = copy.deepcopy((_valid()[which] if which < 4 else _planned()[which - 4]))
    change(doc)
    return json.dumps(doc, indent=1).replace(json.dumps(RAW), raw)


def _at(doc, path: str):
    """(the container, the last key or index) of ``path`` (keys and indices separated by "/")."""
    *parents, last = path.split("/")
    for p in parents:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc, int(last) if isinstance(doc, list) else last


def _set(path: str, value):
    """A change setting ``doc[path]`` to ``value``."""
    def change(doc):
        target, key = _at(doc, path)
        target[key] = value
    return change


def _delete(path: str):
    def change(doc):
        target, key = _at(doc, path)
        del target[key]
    return change


def _combine(*changes):
    """A change making each of ``changes`` in turn."""
    def change(doc):
        for c in changes:
            c(doc)
    return change


def _relu(op_id: int) -> dict:
    """A rule file's ReLU operator reading ``op_id`` (output 0)."""
    return {"_t": "Operator", "type": "OP_RELU", "input": [{"_t": "Tensor", "opId": op_id, "tsId": 0}], "para": []}


def _op(key: str, value):
    """A change setting field ``key`` ("view.start") of the first operator."""
    return _set("operators/0/" + key.replace(".", "/"), value)


def strategy(id: str, change, expect: str, argv: str = SIM, raw: str = "") -> object:
    """A per-operator strategy JSON case."""
    return case(f"strategy-{id}", f"{argv} {{s.json}}", expect, {"s.json": _json(change, raw=raw)})


def fused(id: str, change, expect: str) -> object:
    """A strategy case with a fusion plan (``_planned``'s first), broken."""
    return case(f"strategy-fusion-{id}", f"{SIM} {{s.json}}", expect, {"s.json": _json(change, 4)})


def pipelined(id: str, change, expect: str) -> object:
    """A pipelined strategy case (``_planned``'s second), broken."""
    return case(f"strategy-pipeline-{id}", f"{SIM} {{s.json}}", expect, {"s.json": _json(change, 5)})


def graph(id: str, change, expect: str) -> object:
    """A whole-PCG strategy case (Unity's Fig. 2 strategy of mlp_unity_fig2, broken)."""
    return case(f"strategy-pcg-{id}", f"{SIM_FIG2} {{s.json}}", expect, {"s.json": _json(change, 2)})


def text(id: str, edit, expect: str, argv: str = SIM, name: str = "s.txt") -> object:
    """A FlexFlow text strategy case: ``edit(lines)`` changes the valid file's lines in place."""
    lines = _valid()[1].splitlines()
    edit(lines)
    return case(f"text-{id}", f"{argv} {{{name}}}", expect, {name: "\n".join(lines) + "\n"})


def rules(id: str, change, expect: str, action: str = "stats") -> object:
    """A rule file case (the shipped library's first rules, broken)."""
    return case(f"rules-{action.replace(' ', '')}-{id}", f"substitutions {action} --file {{r.json}}", expect,
                {"r.json": _json(change, 3)})


def script(id: str, source, expect: str, argv: str = "show") -> object:
    """A model script case (``source``: text, or bytes as written)."""
    return case(f"script-{id}", f"{argv} {{m.py}}", expect, {"m.py": source})


def _fifo(name: str):
    return lambda folder: os.mkfifo(folder / name)


def _folder(name: str):
    return lambda folder: (folder / name).mkdir()


def _deep(n: int = 50_000) -> str:
    return "[" * n + "]" * n


TOP_KEYS = r"valid keys: format, version, model_hash, machine, operators"
TEXT = r"s\.txt"

STRATEGY_JSON = [
    # -- the document
    case("strategy-invalid-json", f"{SIM} {{s.json}}", r"s\.json:1:2: invalid JSON: Expecting property name",
         {"s.json": "{broken"}),
    case("strategy-empty-json", f"{SIM} {{s.json}}", r"s\.json:1:1: invalid JSON: Expecting value", {"s.json": ""}),
    case("strategy-extra-data", f"{SIM} {{s.json}}", r"s\.json:1:4: invalid JSON: Extra data", {"s.json": "{} x"}),
    case("strategy-top-list", f"{SIM} {{s.json}}",
         r"s\.json: not a flexrt strategy file \(\"format\" must be \"flexrt\.strategy\", got a JSON list\)",
         {"s.json": "[1, 2]"}),
    case("strategy-nan", f"{SIM} {{s.json}}", r"s\.json: invalid JSON: NaN is not a number JSON allows",
         {"s.json": '{"format": "flexrt.strategy", "version": NaN}'}),
    case("strategy-repeated-key", f"{SIM} {{s.json}}", r"s\.json: key 'format' appears twice in one object",
         {"s.json": '{"format": "flexrt.strategy", "format": "flexrt.strategy"}'}),
    case("strategy-deep-nesting", f"{SIM} {{s.json}}", r"s\.json: nested more than 64 levels deep",
         {"s.json": _deep()}),
    case("strategy-not-utf8", f"{SIM} {{s.json}}", r"s\.json:1: not valid UTF-8 text: byte 0xff at offset 1",
         {"s.json": b'{\xff"format": 1}'}),
    case("strategy-fifo", f"{SIM} {{dir}}/s.json", r"strategy file .*s\.json is not a regular file \(a FIFO",
         setup=_fifo("s.json")),
    case("strategy-dev-zero", f"{SIM} /dev/zero", r"strategy file /dev/zero is not a regular file"),
    case("strategy-directory", f"{SIM} {{dir}}/sub", r"strategy file .*sub is a directory, not a file",
         setup=_folder("sub")),
    case("strategy-missing-file", f"{SIM} {{dir}}/nope.json", r"strategy file .*nope\.json does not exist"),
    strategy("format-pcg", _set("format", "flexrt.pcg"),
             r"s\.json: not a flexrt strategy file \(\"format\" must be \"flexrt\.strategy\", got 'flexrt\.pcg'\)"),
    strategy("version-2", _set("version", 2), r"s\.json: version is 2; this flexrt reads strategy files of version 1"),
    strategy("version-missing", _delete("version"), r"s\.json: missing key 'version'"),
    strategy("unknown-top-key", _set("comment", "hi"), rf"s\.json: unknown key 'comment'; {TOP_KEYS}"),
    strategy("model-hash-int", _set("model_hash", 7), r"s\.json: model_hash must be a string, got 7 \(int\)"),
    strategy("model-hash-other", _set("model_hash", "0" * 32),
             r"s\.json: the strategy was made for another model \(PCG hash '0{32}' vs this model's [0-9a-f]{32}\); "
             r"its operators are this model's, with other shapes or attributes: another batch size"),
    strategy("other-batch", lambda d: d, r"s\.json: the strategy was made for another model .*another batch size",
             argv="simulate mlp -b 32 --machine dgx1_v100 --strategy"),
    # -- machine
    strategy("machine-list", _set("machine", [1, 8]), r"s\.json: machine must be a mapping, got \[1, 8\] \(list\)"),
    strategy("machine-unknown-key", _set("machine/gpus", 8),
             r"s\.json: machine: unknown key 'gpus'; valid keys: name, num_nodes, devices_per_node"),
    strategy("machine-missing-nodes", _delete("machine/num_nodes"), r"s\.json: machine: missing key 'num_nodes'"),
    strategy("machine-devices-text", _set("machine/devices_per_node", "8"),
             r"s\.json: machine\.devices_per_node must be an integer, got '8'"),
    strategy("machine-nodes-zero", _set("machine/num_nodes", 0), r"s\.json: machine\.num_nodes must be >= 1, got 0"),
    strategy("machine-other", _set("machine/num_nodes", 2),
             r"s\.json: the strategy was made for machine 'dgx1_v100' and does not fit 'dgx1_v100': num_nodes 2 "
             r"\(file\) vs 1 \(this machine\)"),
    # -- operators
    strategy("operators-object", _set("operators", {"tower0.dense0": {}}),
             r"s\.json: operators must be a list, got \{'tower0\.dense0': \{\}\} \(dict\)"),
    strategy("operator-list", _set("operators/0", ["tower0.dense0", "linear"]),
             r"s\.json: operators\[0\] must be a mapping, got \['tower0\.dense0', 'linear'\] \(list\)"),
    strategy("degreez", _op("degreez", {"dim0": 8}),
             r"s\.json: operators\[0\]: unknown key 'degreez'; valid keys: name, op, degrees, view"),
    strategy("operator-no-view", _delete("operators/0/view"), r"s\.json: operators\[0\]: missing key 'view'"),
    strategy("operator-name-int", _op("name", 5), r"s\.json: operators\[0\]\.name must be a string, got 5 \(int\)"),
    strategy("operator-unknown-name", _op("name", "tower9.dense0"),
             r"s\.json: operators\[0\]\.name: no operator named 'tower9\.dense0' in this model; its operators: "
             r"'tower0\.dense0', 'tower0\.dense1', .*, \.\.\. \(18 in all\)"),
    strategy("operator-is-input", _op("name", "input_1"),
             OP0.replace(r" \('tower0\.dense0'\)", "") + r"\.name: 'input_1' is a input of this model, not an operator a "
             r"strategy configures; its operators: 'tower0\.dense0', "),
    strategy("operator-op-mismatch", _op("op", "conv2d"),
             OP0 + r"\.op: 'tower0\.dense0' is a linear here, 'conv2d' in the file"),
    strategy("operator-twice", lambda d: d["operators"].insert(1, copy.deepcopy(d["operators"][0])),
             r"s\.json: operators\[1\]: operator 'tower0\.dense0' is listed twice \(also operators\[0\]\); give each "
             r"operator once"),
    strategy("operator-missing", lambda d: d["operators"].pop(),
             r"s\.json: operators: no configuration for 1 operator\(s\): 'softmax'"),
    # -- degrees
    strategy("degrees-list", _op("degrees", [8]), OP0 + r"\.degrees must be a mapping, got \[8\] \(list\)"),
    strategy("degree-zero", _op("degrees", {"dim0": 0}), OP0 + r"\.degrees\.dim0 must be >= 1, got 0"),
    strategy("degree-fraction", _op("degrees", {"dim0": 2.5}), OP0 + r"\.degrees\.dim0 must be an integer, got 2\.5"),
    strategy("degree-text", _op("degrees", {"dim0": "8"}), OP0 + r"\.degrees\.dim0 must be an integer, got '8'"),
    strategy("degree-bool", _op("degrees", {"dim0": True}), OP0 + r"\.degrees\.dim0 must be an integer, got True"),
    strategy("degree-overflow", _op("degrees", {"dim0": RAW}), OP0 + r"\.degrees\.dim0 must be an integer, got inf",
             raw="1e400"),
    strategy("degree-huge-int", _op("degrees", {"dim0": 10 ** 40}),
             VIEW0 + r": degrees \[10{40}, 1\] make 10{40} pieces but machine 'dgx1_v100' has 8 devices"),
    strategy("degree-not-dividing", _op("degrees", {"dim0": 3}),
             OP0 + r"\.degrees: .*degree 3 does not divide dimension 0 of size 64"),
    strategy("degree-over-machine", _op("degrees", {"dim0": 16}),
             VIEW0 + r": degrees \[16, 1\] make 16 pieces but machine 'dgx1_v100' has 8 devices"),
    strategy("degree-unknown-axis", _op("degrees", {"batch": 8}),
             OP0 + r"\.degrees: 'tower0\.dense0' \(linear\) has no axis 'batch'; its axes: dim0, out"),
    # -- views
    strategy("view-list", _op("view", [0, [1, 1]]), VIEW0 + r" must be a mapping, got \[0, \[1, 1\]\] \(list\)"),
    strategy("view-unknown-key", _op("view.stop", 3),
             VIEW0 + r": unknown key 'stop'; valid keys: start, strides, projections"),
    strategy("view-start-overflow", _op("view.start", RAW), VIEW0 + r"\.start must be an integer, got inf",
             raw="1e400"),
    strategy("view-start-fraction", _op("view.start", 2.9), VIEW0 + r"\.start must be an integer, got 2\.9"),
    strategy("view-start-negative", _op("view.start", -1), VIEW0 + r"\.start must be >= 0, got -1"),
    strategy("view-start-null", _op("view.start", None), VIEW0 + r"\.start must be an integer, got None"),
    strategy("view-start-off-machine", _op("view.start", 99),
             VIEW0 + r"\.start is device 99 but machine 'dgx1_v100' has devices 0\.\.7"),
    strategy("view-runs-off-machine", _op("view.start", 4),
             VIEW0 + r": view @4\[intra\*1, intra\*1\] places task \(4, 0\) on device 8 but the machine has devices "
                     r"0\.\.7"),
    strategy("view-strides-number", _op("view.strides", 1), VIEW0 + r"\.strides must be a list, got 1 \(int\)"),
    strategy("view-strides-short", _op("view.strides", [1]),
             VIEW0 + r"\.strides has 1 entries; give one per axis of the operator \(2: dim0, out\)"),
    strategy("view-stride-zero", _op("view.strides", [0, 1]), VIEW0 + r"\.strides\[0\] must be >= 1, got 0"),
    strategy("view-projection-bogus", _op("view.projections", ["SIDEWAYS", "INTRA"]),
             VIEW0 + r"\.projections\[0\] is 'SIDEWAYS'; valid: INTRA, INTER"),
    strategy("view-projection-lowercase", _op("view.projections", ["INTRA", "intra"]),
             VIEW0 + r"\.projections\[1\] is 'intra'; valid: INTRA, INTER"),
    strategy("view-two-pieces-one-device", _op("degrees", {"dim0": 2, "out": 2}),
             VIEW0 + r": view @0\[intra\*1, intra\*1\] puts two pieces on one device \(devices \[0, 1, 1, 2\]\)"),
    strategy("train-unknown-key", _set("comment", 1), rf"s\.json: unknown key 'comment'; {TOP_KEYS}",
             argv="train mlp --machine dgx1_v100 --steps 1 --strategy"),
    strategy("search-import-degreez", _op("degreez", {"dim0": 8}),
             r"s\.json: operators\[0\]: unknown key 'degreez'",
             argv="search mlp --machine dgx1_v100 --budget 1 --no-progress --import"),
]

PCG_STRATEGY = [
    graph("views-unknown-operator", _set("views/nosuch", {"start": 0, "strides": [1], "projections": ["INTRA"]}),
          r"s\.json: views\.'nosuch': the file's pcg has no compute operator named 'nosuch'; its operators: 'fc1', "
          r"'relu', 'fc2'"),
    graph("views-missing", _delete("views/relu"), r"s\.json: views: no view for 1 operator\(s\): 'relu'"),
    graph("views-list", _set("views", []), r"s\.json: views must be a mapping, got \[\] \(list\)"),
    graph("view-strides-long", _set("views/relu/strides", [1, 1, 1, 1]),
          r"s\.json: views\.'relu'\.strides has 4 entries; give one per axis of the operator \(3: "),
    graph("both-operators-and-pcg", _set("operators", []),
          r"s\.json: unknown key 'operators'; valid keys: format, version, machine, pcg, views"),
    graph("pcg-version", _set("pcg/version", 2), r"s\.json: pcg: PCG format version 2; this flexrt reads 1"),
    graph("pcg-nodes-object", _set("pcg/nodes", {}), r"s\.json: pcg: nodes must be a list, got \{\} \(dict\)"),
    graph("pcg-node-unknown-key", _set("pcg/nodes/5/colour", "red"),
          r"s\.json: pcg: nodes\[5\]: unknown key 'colour'; valid keys: id, name, op, attrs, inputs, outputs"),
    graph("pcg-node-id-fraction", _set("pcg/nodes/5/id", 5.5), r"s\.json: pcg: nodes\[5\]\.id must be an integer, got 5\.5"),
    graph("pcg-input-fraction", _set("pcg/nodes/5/inputs/0", [3, 0.5]),
          r"s\.json: pcg: nodes\[5\] \('fc1'\)\.inputs\[0\]\[1\] must be an integer, got 0\.5"),
    graph("pcg-input-not-pair", _set("pcg/nodes/5/inputs/0", 3),
          r"s\.json: pcg: nodes\[5\] \('fc1'\)\.inputs\[0\] must be a pair \[node id, output index\], got 3"),
    graph("pcg-unknown-op", _set("pcg/nodes/7/op", "conv9"),
          r"s\.json: pcg: nodes\[7\] \('relu'\)\.op: unknown operator 'conv9'; valid: input, weight, linear, .*, "
          r"\.\.\. \(\d+ in all, see flexrt\.ir\.OpType\)"),
    graph("pcg-attrs-list", _set("pcg/nodes/3/attrs", [1, 2]),
          r"s\.json: pcg: nodes\[3\] \('x\.partition1'\)\.attrs must be a mapping, got \[1, 2\] \(list\)"),
    graph("pcg-out-channels", _set("pcg/nodes/5/attrs/out_channels", 7),
          r"s\.json: pcg: node 5: .*fc1"),
    graph("pcg-folded-weight-sizes", _set("pcg/nodes/1/attrs", {"shape": {"dims": [784, 512], "dtype": "DT_FLOAT"},
                                                                "parts": ["a", "b"], "part_sizes": [700, 80],
                                                                "part_ids": [20, 21]}),
          r"s\.json: pcg: nodes\[1\] \('fc1\.kernel'\)\.attrs: folded weight of 'a', 'b': part_sizes \[700, 80\] "
          r"must be >= 1 and add up to dimension 0 of its shape \(784, 512\)"),
    graph("pcg-duplicate-id", _set("pcg/nodes/4/id", 3), r"s\.json: pcg: nodes\[4\]: duplicate node id 3"),
    graph("pcg-next-id-small", _set("pcg/next_id", 2), r"s\.json: pcg: next_id must be >= 10, got 2"),
    graph("pcg-missing-node", _set("pcg/nodes/5/inputs/0", [42, 0]),
          r"s\.json: pcg: node 5 'fc1' reads tensor 42:0 of a missing node"),
]


PIPE = r"s\.json: pipeline"
PLANS = [
    # -- fusion plans: check_fusion's errors name the file
    fused("unknown-operator", _set("fusion/groups/0/ops/0", "nosuch"),
          r"s\.json: fusion: fusion group 0 \(nosuch, tower1\.dense7, add1, softmax\): 'nosuch' is not an operator of "
          r"this model; compute operators: add1, softmax, "),
    fused("bucket-of-one", _set("fusion/buckets", [["tower0.dense7.kernel"]]),
          r"s\.json: fusion: gradient bucket 0 \(tower0\.dense7\.kernel\): a bucket synchronizes at least two weights"),
    fused("not-convex", _set("fusion/groups/0/ops", ["tower0.dense0", "softmax"]),
          r"s\.json: fusion: fusion groups \[0, 1\] form a cycle"),
    fused("recompute-unknown", _set("recompute", ["nosuch"]),
          r"s\.json: recompute: 'nosuch' is not a compute operator of the model \(e\.g\. "),
    # -- pipelines: stage_of and operators checked against the model, views against the stage's block
    pipelined("stage-of-unknown", _set("pipeline/stage_of/nosuch", 0),
              PIPE + r": stage_of: 'nosuch' is not a compute operator of the model; its operators: 'tower0\.dense0'"),
    pipelined("stage-of-backwards", _set("pipeline/stage_of/add1", 0),
              PIPE + r": stage_of: 'add1' \(stage 0\) reads the output of 'tower1\.dense7' \(stage 1\); stages must not "
                     r"decrease along the graph"),
    pipelined("stages-text", _set("pipeline/stages", "2"), PIPE + r": pipeline stages must be an integer >= 1, got '2'"),
    pipelined("operators-unknown", _set("pipeline/operators/nosuch", {"degrees": {}, "view": {}}),
              PIPE + r"\.operators\['nosuch'\]: no compute operator of that name in this model; its operators: "),
    pipelined("operator-extra-key", _set("pipeline/operators/softmax/extra", 1),
              PIPE + r"\.operators\['softmax'\]: expected \{\"degrees\": \{axis: degree\}, \"view\": \.\.\.\}, got keys "
                     r"'degrees', 'view', 'extra'"),
    pipelined("degree-zero", _set("pipeline/operators/softmax/degrees/dim0", 0),
              PIPE + r"\.operators\['softmax'\]\.degrees\.dim0 must be an integer >= 1, got 0"),
    pipelined("view-off-machine", _set("pipeline/operators/softmax/degrees/dim0", 8),
              PIPE + r"\.operators\['softmax'\]\.view: view @4\[intra\*1, intra\*1\] places task \(4, 0\) on device 8 "
                     r"but the machine has devices 0\.\.7"),
    pipelined("degree-huge", _set("pipeline/operators/add1/degrees/dim0", 10 ** 30),
              PIPE + r"\.operators\['add1'\]\.view: degrees \[10{30}, 1, 1, 1, 1\] make 10{30} pieces but machine "
                     r"'dgx1_v100' has 8 devices \(valid: at most one piece a device\)"),
    pipelined("degrees-product-huge", _combine(_set("pipeline/operators/add1/degrees/dim0", 100_000),
                                               _set("pipeline/operators/add1/degrees/dim1", 100_000)),
              PIPE + r"\.operators\['add1'\]\.view: degrees \[100000, 100000, 1, 1, 1\] make 10000000000 pieces "
                     r"but machine 'dgx1_v100' has 8 devices"),
    pipelined("view-other-block", _set("pipeline/operators/softmax/view/start", 0),
              PIPE + r"\.operators\['softmax'\]\.view: view @0\[intra\*1, intra\*1\] puts pieces on devices \[0, 1, 2, 3\], "
                     r"outside the device block 4\.\.7 of its stage"),
]


def _line(k: int, value: str):
    """An edit replacing line ``k`` (1-based) of a text strategy."""
    def edit(lines):
        lines[k - 1] = value
    return edit


TEXT_STRATEGY = [
    text("count-word", _line(1, "many"), rf"{TEXT}:1: the number of operators must be integers, got 'many'"),
    text("count-negative", _line(1, "-1"), rf"{TEXT}:1: line 1 announces -1 operators; the model has \d+ \(valid: 0\.\."),
    text("count-huge", _line(1, "1000000000000"), rf"{TEXT}:1: line 1 announces 1000000000000 operators; the model has"),
    text("count-19-digits", _line(1, "1" * 19), rf"{TEXT}:1: the number of operators must be integers"),
    text("count-underscore", _line(1, "1_8"), rf"{TEXT}:1: the number of operators must be integers, got '1_8'"),
    text("unknown-operator", _line(2, "conv9"),
         rf"{TEXT}:2: no operator named 'conv9' in this model \(its operators: 'tower0\.dense0', .*\); the file was "
         rf"made for another model"),
    text("device-type-2", _line(3, "2"), rf"{TEXT}:3: device type 2 of 'tower0\.dense0' is neither 0 \(GPU\) nor 1 \(CPU\)"),
    text("device-type-cpu", _line(3, "1"),
         rf"{TEXT}:7: 'tower0\.dense0' has device type 1 \(cpu\) but its devices on 'dgx1_v100' are gpu"),
    text("ndims-4", _line(4, "4"),
         rf"{TEXT}:4: 'tower0\.dense0' has 4 dimension\(s\) in the file but its output has 2 \(valid: 2, or 3"),
    text("degrees-count", _line(5, "8"), rf"{TEXT}:5: expected 2 value\(s\) for the 2 degrees of 'tower0\.dense0', got 1"),
    text("degree-zero", _line(5, "1\t0"), rf"{TEXT}:5: degrees of 'tower0\.dense0' must be >= 1, got \[1, 0\]"),
    text("degree-fraction", _line(5, "1\t1.5"), rf"{TEXT}:5: the 2 degrees of 'tower0\.dense0' must be integers"),
    text("device-count", _line(6, "4"), rf"{TEXT}:6: 'tower0\.dense0' lists 4 devices but its degrees \[1, 8\] make 8 "),
    text("device-id-off-machine", _line(7, "0\t1\t2\t3\t4\t5\t6\t9"),
         rf"{TEXT}:7: 'tower0\.dense0' uses device 9 but machine 'dgx1_v100' has devices 0\.\.7; the file was made "
         rf"for another machine"),
    text("device-ids-not-a-view", _line(7, "0\t1\t3\t2\t4\t5\t6\t7"),
         rf"{TEXT}:7: the device ids \[0, 1, 3, 2, 4, 5, 6, 7\] of 'tower0\.dense0' do not form a machine view"),
    text("device-ids-missing", _line(7, "0\t1\t2"),
         rf"{TEXT}:7: expected 8 value\(s\) for the 8 device ids of 'tower0\.dense0', got 3"),
    text("degree-not-dividing", lambda ls: ls.__setitem__(slice(4, 7), ["1\t3", "3", "0\t1\t2"]),
         rf"{TEXT}:5: degrees \[1, 3\] do not fit 'tower0\.dense0'"),
    text("truncated", lambda ls: ls.__delitem__(slice(10, None)),
         rf"{TEXT}:11: the file ends where the 2 degrees of 'tower0\.dense1' was expected"),
    text("trailing-text", lambda ls: ls.append("tower0.dense0"),
         rf"{TEXT}:110: text after the 18 operator\(s\) line 1 announces: 'tower0\.dense0'"),
    text("operator-twice", lambda ls: ls.__setitem__(slice(7, 13), ls[1:7]),
         rf"{TEXT}:\d+: operator 'tower0\.dense0' appears twice"),
    case("text-not-utf8", f"{SIM} {{s.txt}}", rf"{TEXT}:1: not valid UTF-8 text: byte 0xfe at offset 1",
         {"s.txt": b"1\xfe\n"}),
    case("text-empty-txt", f"{SIM} {{s.txt}}", rf"{TEXT}:1: the file ends where the number of operators was expected",
         {"s.txt": ""}),
    text("in-a-json-file", _line(2, "conv9"), r"s\.json:2: no operator named 'conv9' in this model", name="s.json"),
    text("search-import", _line(3, "7"), rf"{TEXT}:3: device type 7 of 'tower0\.dense0' is neither 0 \(GPU\)",
         argv="search mlp --machine dgx1_v100 --budget 1 --no-progress --import"),
    text("search-import-device", _line(7, "0\t1\t2\t3\t4\t5\t6\t8"),
         rf"{TEXT}:7: 'tower0\.dense0' uses device 8 but machine 'dgx1_v100' has devices 0\.\.7",
         argv="search mlp --machine dgx1_v100 --budget 1 --no-progress --import"),
]

R0 = r"r\.json: rule\[0\] \('flexrt_rule_0'\)"
S0 = R0 + r"\.srcOp\[0\]"

RULE_FILES = [
    case("rules-invalid-json", "substitutions stats --file {r.json}", r"r\.json:1:2: invalid JSON", {"r.json": "{x"}),
    case("rules-top-list", "substitutions stats --file {r.json}",
         r"r\.json: not a FlexFlow RuleCollection \(expected \{\"_t\": \"RuleCollection\", \"rule\": \[\.\.\.\]\}\)",
         {"r.json": "[]"}),
    case("rules-nan", "substitutions stats --file {r.json}", r"r\.json: invalid JSON: NaN is not a number JSON allows",
         {"r.json": '{"rule": [NaN]}'}),
    case("rules-deep", "substitutions stats --file {r.json}", r"r\.json: nested more than 64 levels deep",
         {"r.json": '{"rule": ' + _deep() + "}"}),
    case("rules-not-utf8", "substitutions stats --file {r.json}", r"r\.json:2: not valid UTF-8 text: byte 0xe9",
         {"r.json": b'{"rule": [],\n "_t": "\xe9"}'}),
    case("rules-fifo", "substitutions verify --file {dir}/r.json", r"rule file .*r\.json is not a regular file",
         setup=_fifo("r.json")),
    case("rules-directory", "substitutions show 0 --file {dir}/sub", r"rule file .*sub is a directory, not a file",
         setup=_folder("sub")),
    case("rules-missing", "substitutions stats --file {dir}/nope.json", r"rule file .*nope\.json not found"),
    rules("rule-object", _set("rule", {"a": 1}), r"r\.json: not a FlexFlow RuleCollection"),
    rules("top-unknown-key", _set("rules", []), r"r\.json: unknown key 'rules'; valid keys: _t, rule"),
    rules("top-tag", _set("_t", "RuleSet"), r"r\.json: _t is 'RuleSet'; here FlexFlow's format has 'RuleCollection'"),
    rules("rule-not-object", _set("rule/0", "x"), r"r\.json: rule\[0\] must be a mapping, got 'x' \(str\)"),
    rules("rule-no-name", _delete("rule/0/name"), r"r\.json: rule\[0\]: missing key 'name'"),
    rules("rule-name-int", _set("rule/0/name", 3), r"r\.json: rule\[0\]\.name must be a string, got 3 \(int\)"),
    rules("rule-unknown-key", _set("rule/0/comment", "x"),
          r"r\.json: rule\[0\]: unknown key 'comment'; valid keys: _t, name, srcOp, dstOp, mappedOutput"),
    rules("srcop-object", _set("rule/0/srcOp", {}), R0 + r"\.srcOp must be a list, got \{\} \(dict\)"),
    rules("operator-tag", _set("rule/0/srcOp/0/_t", "Tensor"),
          S0 + r"\._t is 'Tensor'; here FlexFlow's format has 'Operator'"),
    rules("unknown-type", _set("rule/0/srcOp/0/type", "OP_CONV9"),
          S0 + r"\.type is 'OP_CONV9'; valid: OP_LINEAR, OP_RELU, .*OP_REDUCE", action="verify"),
    rules("unknown-param", _set("rule/0/srcOp/0/para", [{"_t": "Parameter", "key": "PM_FOO", "value": 1}]),
          S0 + r" \(OP_EW_ADD\)\.para: OP_EW_ADD takes no parameter 'PM_FOO'; valid: none", action="verify"),
    rules("param-fraction", _set("rule/2/dstOp/0/para/0/value", 2.5),
          r"r\.json: rule\[2\] \('flexrt_rule_2'\)\.dstOp\[0\]\.para\[0\]\.value must be an integer, got 2\.5"),
    rules("param-text", _set("rule/2/dstOp/0/para/0/value", "2"),
          r"rule\[2\] \('flexrt_rule_2'\)\.dstOp\[0\]\.para\[0\]\.value must be an integer, got '2'"),
    rules("param-twice", lambda d: d["rule"][2]["dstOp"][0]["para"].append({"key": "PM_SCALAR", "value": 3}),
          r"rule\[2\] \('flexrt_rule_2'\)\.dstOp\[0\]\.para\[1\]: parameter 'PM_SCALAR' appears twice"),
    rules("param-unknown-key", _set("rule/2/dstOp/0/para/0/val", 3),
          r"dstOp\[0\]\.para\[0\]: unknown key 'val'; valid keys: _t, key, value"),
    rules("acti-out-of-range", _set("rule/3/srcOp/0/para/0/value", 7),
          r"rule\[3\] .*srcOp\[0\] \(OP_LINEAR\)\.para: PM_ACTI is 7; valid: 0\.\.4 \(TASO's activation"),
    rules("partition-degree-zero", _set("rule/0/dstOp", [{"type": "OP_PARTITION", "input": [{"opId": -1, "tsId": 0}],
                                                          "para": [{"key": "PM_PARALLEL_DIM", "value": 0},
                                                                   {"key": "PM_PARALLEL_DEGREE", "value": 0}]}]),
          R0 + r"\.dstOp\[0\] \(OP_PARTITION\)\.para: PM_PARALLEL_DEGREE is 0; valid: 2\.\.2147483647 \(a parallel "
               r"degree\)"),
    rules("partition-dim-9", _set("rule/0/dstOp", [{"type": "OP_PARTITION", "input": [{"opId": -1, "tsId": 0}],
                                                    "para": [{"key": "PM_PARALLEL_DIM", "value": 9},
                                                             {"key": "PM_PARALLEL_DEGREE", "value": 2}]}]),
          R0 + r"\.dstOp\[0\] \(OP_PARTITION\)\.para: PM_PARALLEL_DIM is 9; valid: 0\.\.7 \(a dimension\)"),
    rules("partition-no-dim", _set("rule/0/dstOp", [{"type": "OP_PARTITION", "input": [{"opId": -1, "tsId": 0}],
                                                     "para": [{"key": "PM_PARALLEL_DEGREE", "value": 2}]}]),
          R0 + r"\.dstOp\[0\] \(OP_PARTITION\)\.para: OP_PARTITION needs PM_PARALLEL_DIM"),
    rules("reduce-sum-no-axis", _set("rule/0/dstOp", [{"type": "OP_REDUCE_SUM", "input": [{"opId": -1, "tsId": 0}],
                                                       "para": []}]),
          R0 + r"\.dstOp\[0\] \(OP_REDUCE_SUM\)\.para: OP_REDUCE_SUM needs PM_AXIS"),
    rules("reduce-sum-axis-9", _set("rule/0/dstOp", [{"type": "OP_REDUCE_SUM", "input": [{"opId": -1, "tsId": 0}],
                                                      "para": [{"key": "PM_AXIS", "value": 9}]}]),
          R0 + r"\.dstOp\[0\] \(OP_REDUCE_SUM\)\.para: PM_AXIS is 9; valid: 0\.\.7 \(a dimension\)"),
    rules("inputs-count", _delete("rule/0/srcOp/0/input/1"),
          S0 + r" \(OP_EW_ADD\)\.input: OP_EW_ADD takes 2 input\(s\), got 1"),
    rules("opid-forward", _set("rule/0/srcOp/0/input/0/opId", 0),
          S0 + r"\.input\[0\]\.opId is 0; valid: an earlier operator of this side \(none\) or -1, -2, \.\.\. "
               r"\(an external input\)"),
    rules("opid-fraction", _set("rule/0/srcOp/0/input/0/opId", -1.5),
          S0 + r"\.input\[0\]\.opId must be an integer, got -1\.5"),
    rules("tsid-negative", _set("rule/0/srcOp/0/input/0/tsId", -1), S0 + r"\.input\[0\]\.tsId must be >= 0, got -1"),
    rules("tsid-external", _set("rule/0/srcOp/0/input/0/tsId", 1),
          S0 + r" \(OP_EW_ADD\)\.input\[0\]\.tsId is 1; an external input has 1 output\(s\) \(valid: 0\.\.0\)"),
    rules("tensor-unknown-key", _set("rule/0/srcOp/0/input/0/opid", -1),
          S0 + r"\.input\[0\]: unknown key 'opid'; valid keys: _t, opId, tsId"),
    rules("map-src-out-of-range", _set("rule/0/mappedOutput/0/srcOpId", 5),
          R0 + r"\.mappedOutput\[0\]\.srcOpId must be between 0 and 0, got 5"),
    rules("map-empty", _set("rule/0/mappedOutput", []),
          R0 + r"\.mappedOutput is empty; map at least one source output to a destination output"),
    rules("map-dst-ts", _set("rule/0/mappedOutput/0/dstTsId", 1),
          R0 + r"\.mappedOutput\[0\]\.dstTsId is 1; operator 0 \(OP_EW_ADD\) has 1 output\(s\) \(valid: 0\.\.0\)"),
    rules("map-no-destination", _set("rule/0/dstOp", []),
          R0 + r"\.mappedOutput\[0\]\.dstOpId: the destination has no operators"),
    rules("duplicate-name", _set("rule/1/name", "flexrt_rule_0"),
          r"r\.json: rule\[1\]\.name: 'flexrt_rule_0' is also the name of rule\[0\]; names must be unique", action="verify"),
    rules("name-empty", _set("rule/0/name", ""),
          r"r\.json: rule\[0\]\.name is empty; a rule needs a name that is not blank", action="show 0"),
    rules("name-blank", _set("rule/1/name", "   "), r"r\.json: rule\[1\]\.name is 3 white-space character\(s\); a rule needs a name"),
    rules("name-newline", _set("rule/0/name", "a\nb"),
          r"r\.json: rule\[0\]\.name 'a\\nb' holds the control character '\\n'; a name is one line of text"),
    rules("name-long", _combine(_set("rule/0/name", "n" * 300), _set("rule/0/srcOp/0/type", "OP_WARP")),
          r"r\.json: rule\[0\] \('n{36}\.\.\. \(302 characters\)\)\.srcOp\[0\]\.type is 'OP_WARP'", action="verify"),
    rules("duplicate-long-name", _combine(_set("rule/0/name", "n" * 300), _set("rule/1/name", "n" * 300)),
          r"r\.json: rule\[1\]\.name: 'n{76}\.\.\. \(302 characters\) is also the name of rule\[0\]"),
    rules("map-source-twice", lambda d: d["rule"][0]["mappedOutput"].append(dict(d["rule"][0]["mappedOutput"][0])),
          R0 + r"\.mappedOutput\[1\]: source output 0 of operator 0 \(OP_EW_ADD\) is already mapped by "
               r"mappedOutput\[0\]; map each source output once"),
    rules("map-destination-twice", lambda d: d["rule"][3]["mappedOutput"].append(
              {"_t": "MapOutput", "srcOpId": 0, "srcTsId": 0, "dstOpId": 1, "dstTsId": 0}),
          r"rule\[3\] \('flexrt_rule_3'\)\.mappedOutput\[1\]: destination output 0 of operator 1 \(OP_LINEAR\) "
          r"already replaces a source output in mappedOutput\[0\]; each destination output replaces one", action="verify"),
    rules("source-op-unused", lambda d: d["rule"][0]["srcOp"].append(_relu(-1)),
          R0 + r"\.srcOp\[1\] \(OP_RELU\): no later source operator reads its output and mappedOutput does not map "
               r"it; use it or remove the operator"),
    rules("destination-op-unused", lambda d: d["rule"][0]["dstOp"].append(_relu(0)),
          R0 + r"\.dstOp\[1\] \(OP_RELU\): no later destination operator reads its output", action="show 0"),
    rules("scalar-huge", _set("rule/2/dstOp/0/para/0/value", 10 ** 30),
          r"rule\[2\] \('flexrt_rule_2'\)\.dstOp\[0\]\.para\[0\]\.value is 1000000000000000000000000000000; "
          r"valid: -2147483648\.\.2147483647 \(FlexFlow reads a rule file's integers into 32-bit C\+\+ ints\)"),
    rules("scalar-4000-digits", _set("rule/2/dstOp/0/para/0/value", -int("9" * 4000)),
          r"para\[0\]\.value is -9{76}\.\.\. \(4001 characters\); valid: -2147483648\.\.2147483647", action="verify"),
    rules("opid-huge", _set("rule/0/srcOp/0/input/0/opId", -2 ** 31 - 1),
          S0 + r"\.input\[0\]\.opId is -2147483649; valid: -2147483648\.\.2147483647"),
    rules("tsid-huge", _set("rule/0/srcOp/0/input/0/tsId", 2 ** 31),
          S0 + r"\.input\[0\]\.tsId is 2147483648; valid: 0\.\.2147483647"),
    rules("map-ts-huge", _set("rule/0/mappedOutput/0/dstTsId", 10 ** 20),
          R0 + r"\.mappedOutput\[0\]\.dstTsId is 100000000000000000000; valid: 0\.\.2147483647"),
    rules("show-empty-file", _set("rule", []), r"rule 0 does not exist: .*r\.json holds no rules", action="show 0"),
    rules("show-unknown-type", _set("rule/1/dstOp/0/type", "OP_WARP"),
          r"rule\[1\] \('flexrt_rule_1'\)\.dstOp\[0\]\.type is 'OP_WARP'; valid: OP_LINEAR", action="show 1"),
    case("rules-show-out-of-range", "substitutions show 9 --file {r.json}", r"rule 9 does not exist; valid: 0\.\.3",
         {"r.json": _json(lambda d: None, 3)}),
    case("rules-show-negative", "substitutions show -1 --file {r.json}", r"rule -1 does not exist; valid: 0\.\.3",
         {"r.json": _json(lambda d: None, 3)}),
]

GENERATE = "substitutions generate"
GENERATE_FLAGS = [
    case("generate-max-ops-zero", f"{GENERATE} --max-ops 0",
         r"flexrt substitutions generate: error: argument --max-ops: expected an integer between 1 and 4, got 0"),
    case("generate-max-ops-five", f"{GENERATE} --max-ops 5", r"argument --max-ops: expected an integer between 1 and 4, got 5"),
    case("generate-max-ops-text", f"{GENERATE} --max-ops x", r"argument --max-ops: expected an integer between 1 and 4, got 'x'"),
    case("generate-degree-three", f"{GENERATE} --degree 3", r"argument --degree: invalid choice: 3 \(choose from 2, 4\)"),
    case("generate-degree-zero", f"{GENERATE} --degree 0", r"argument --degree: invalid choice: 0 \(choose from 2, 4\)"),
    case("generate-seed-negative", f"{GENERATE} --seed -1", r"argument --seed: expected an integer >= 0, got -1"),
    case("generate-timeout-zero", f"{GENERATE} --timeout 0", r"argument --timeout: expected a finite number > 0, got '0'"),
    case("generate-timeout-nan", f"{GENERATE} --timeout nan", r"argument --timeout: expected a finite number > 0, got 'nan'"),
    case("generate-jobs-zero", f"{GENERATE} --jobs 0", r"argument --jobs: expected an integer between 1 and 64, got 0"),
    case("generate-output-directory", f"{GENERATE} --output {{dir}}",
         r"--output .* is a folder; give a file name"),
    case("generate-output-fifo", f"{GENERATE} --output {{dir}}/lib.json", r"--output .*lib\.json is not a regular file",
         setup=_fifo("lib.json")),
    case("verify-jobs-huge", "substitutions verify --jobs 1000",
         r"argument --jobs: expected an integer between 1 and 64, got 1000"),
    case("verify-timeout-negative", "substitutions verify --timeout -1",
         r"argument --timeout: expected a finite number > 0, got '-1'"),
    case("verify-dims-bogus", "substitutions verify --dims sideways",
         r"argument --dims: invalid choice: 'sideways' \(choose from 'innermost', 'outermost'\)"),
]

MODEL = "from flexrt.core import *\n"
BUILD = MODEL + "def build_model(ffconfig):\n    m = FFModel(ffconfig)\n    m.relu(m.create_tensor([4, 3]))\n    return m\n"
SCRIPTS = [
    script("syntax-error", MODEL + "def f(:\n", r"m\.py:2: syntax error: "),
    script("top-level-raises", MODEL + "m = FFModel(FFConfig())\n1 / 0\n",
           r"flexrt: error: .*m\.py:3: the script raised ZeroDivisionError: division by zero$"),
    script("top-level-raises-with-build-model", BUILD + "x = {}['k']\n",
           r"m\.py:6: the script raised KeyError: 'k'$"),
    script("build-model-raises", MODEL + "def build_model(ffconfig):\n    raise ValueError('nope')\n",
           r"m\.py:3: the script raised ValueError: nope$"),
    script("long-exception-message", MODEL + "raise RuntimeError('x' * 100000)\n",
           r"m\.py:2: the script raised RuntimeError: x+\.\.\. \(100000 characters\)$"),
    script("not-utf8", (MODEL + "name = 'caf\xe9'\n").encode("latin-1"),
           r"m\.py:2: not valid UTF-8 text: byte 0xe9 at offset 37"),
    script("coding-ascii", b"# coding: ascii\n" + MODEL.encode() + "name = 'é'\n".encode(),
           r"m\.py:3: not valid ASCII text: byte 0xc3 at offset 50"),
    script("coding-unknown", b"# -*- coding: klingon -*-\n" + BUILD.encode(), r"m\.py: unknown encoding: klingon"),
    script("null-byte", MODEL + "x = 1\0\n", r"m\.py:2: syntax error: source code string cannot contain null bytes"),
    script("nested-too-deep", MODEL + "x = " + "(" * 5000 + ")" * 5000 + "\n",
           r"m\.py:2: syntax error: too many nested parentheses"),
    script("return-outside-function", MODEL + "return 3\n", r"m\.py:2: syntax error: 'return' outside function"),
    script("flexflow-import", "from flexflow.core import *\n",
           r"m\.py:1: the script imports flexflow\.core; import flexrt\.core instead \(e\.g\. "
           r"`from flexrt\.core import \*`\)"),
    script("missing-module", "import nosuchmodule_xyz\n", r"m\.py:1: No module named 'nosuchmodule_xyz'"),
    script("no-model", "x = 1\n", r"model script .*m\.py made no FFModel \(define build_model\(ffconfig\)"),
    script("exits", "import sys\nsys.exit(3)\n", r"model script .*m\.py exited \(status 3\) before making an FFModel"),
    script("build-model-returns-int", MODEL + "def build_model(ffconfig):\n    return 5\n",
           r"error: [^ ]*m\.py: build_model\(ffconfig\) must return an FFModel, got int$"),
    script("build-model-rebound", BUILD + "build_model = 3\n",
           r"error: [^ ]*m\.py: build_model is 3 after the script ran, not a function build_model\(ffconfig\)$"),
    script("shape-error", MODEL + "m = FFModel(FFConfig())\nx = m.create_tensor([4, 8])\n"
                                  "m.add(x, m.create_tensor([4, 3]))\n",
           r"model m \(.*m\.py:4\): add 'add_\d+': .*\[4, 8\] and \[4, 3\]"),
    script("simulate-raises", MODEL + "m = FFModel(FFConfig())\nassert False, 'broken'\n",
           r"m\.py:3: the script raised AssertionError: broken$", argv="simulate --machine dgx1_v100"),
    script("no-operators", MODEL + "m = FFModel(FFConfig())\nm.create_tensor([4, 3])\n",
           r"model m \(.*m\.py\) has no operators \(only 1 input\(s\): \['input_1'\]\); add layers such as dense",
           argv="simulate --machine dgx1_v100"),
    script("tensor-too-large", MODEL + "m = FFModel(FFConfig())\nm.relu(m.create_tensor([2 ** 40, 2 ** 30]))\n",
           r"model m \(.*m\.py:3\): shape \[1099511627776, 1073741824\] has more than 2\*\*48 = 281,474,976,710,656 "
           r"elements, the limit of one tensor \(flexrt\.ir\.tensor_shape\.MAX_ELEMENTS\)", argv="simulate --machine dgx1_v100"),
    script("dense-too-wide", MODEL + "m = FFModel(FFConfig())\nm.dense(m.create_tensor([8, 3]), 10 ** 15)\n",
           r"model m \(.*m\.py:3\): dense 'dense_\d+': shape \[8, 1000000000000000\] has more than 2\*\*48"),
    case("script-directory", "show {dir}/sub.py", r"model script .*sub\.py is a directory, not a file",
         setup=_folder("sub.py")),
    case("script-fifo", "show {dir}/f.py", r"model script .*f\.py is not a regular file \(a FIFO", setup=_fifo("f.py")),
    case("script-missing", "show {dir}/nope.py", r"model script .*nope\.py does not exist"),
]

CASES = STRATEGY_JSON + PCG_STRATEGY + PLANS + TEXT_STRATEGY + RULE_FILES + GENERATE_FLAGS + SCRIPTS
