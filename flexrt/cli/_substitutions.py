"""``flexrt substitutions generate | verify | stats | show N``: the PCG substitution library (Unity §4).

- ``generate [--max-ops 3] [--family F ...] [--degree 2] [--seed 0] [--output FILE] [--no-verify]``:
  enumerate and fingerprint candidate rules family by family (``families.py``), verify them with Z3,
  write the proved ones (FlexFlow's JSON format) to ``--output`` or, by default,
  ``substitutions/library.json`` in the user's cache folder (``flexrt.paths.cache_dir``); never into
  the installed package, whose library stays as shipped. Beside it, ``<name>.stats.json`` records
  the candidates, the verifier's outcomes (proved, refuted, unknown; overall and by operator type),
  the generation and verification wall times and the load average (``stats`` reads it).
- ``verify [--file F] [--dims outermost]``: re-verify a library (ours by default); on FlexFlow's file
  (whose dimensions count from the outermost: ``--dims outermost``), counts of proved, refuted,
  unknown and unusable rules (unusable: the destination reads inputs the source lacks).
- ``stats [--file F] [--check]``: counts by size and operator, and the generation record beside the
  file when there is one; ``--check`` also evaluates every rule concretely under both dimension
  conventions (innermost-first, outermost-first).
- ``show N [--file F]``: rule N as two small graphs.
"""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path

from flexrt.cli._common import add_json_flag, count, emit_json, number
from flexrt.errors import ConfigError, NotYetAvailableError
from flexrt.inputs import clip, listing, writable_file
from flexrt.paths import cache_dir

NAME = "substitutions"
HELP = "generate, verify, summarize or print PCG substitution rules (`flexrt substitutions stats`)"
ACCEPTS_MODEL_FLAGS = False


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="subst_command", metavar="ACTION", required=True)
    gen = sub.add_parser("generate", help="enumerate, fingerprint and verify rules; write the library",
                         allow_abbrev=False)
    gen.add_argument("--max-ops", type=count(1, MAX_OPS), default=None, metavar="N",
                     help=f"caps every family's operators per side, 1..{MAX_OPS} (default: each family's bound)")
    gen.add_argument("--family", action="append", metavar="F",
                     help="generate only this operator family (repeatable; default: all; see "
                          "`flexrt.search.substitutions.families`)")
    gen.add_argument("--degree", type=int, choices=DEGREES, default=2, metavar="D",
                     help=f"degree of parallel operators, one of {', '.join(map(str, DEGREES))} (default 2)")
    gen.add_argument("--seed", type=count(0), default=0, help="seed of the fingerprint inputs (default 0)")
    gen.add_argument("--output", metavar="FILE", help="where to write the library (default: "
                                                      "substitutions/library.json in the cache folder)")
    gen.add_argument("--no-verify", action="store_true", help="write the candidates without Z3 verification")
    _add_verifier_flags(gen)
    add_json_flag(gen)
    ver = sub.add_parser("verify", help="verify a rule library with Z3 (ours, or --file F)", allow_abbrev=False)
    ver.add_argument("--file", metavar="F", help="a rule file in FlexFlow's JSON format (default: our library)")
    _add_verifier_flags(ver)
    _add_dims_flag(ver)
    add_json_flag(ver)
    st = sub.add_parser("stats", help="counts by size and operator kind", allow_abbrev=False)
    st.add_argument("--file", metavar="F", help="a rule file in FlexFlow's JSON format (default: our library)")
    st.add_argument("--check", action="store_true",
                    help="also evaluate every rule on random tensors under both dimension conventions")
    add_json_flag(st)
    sh = sub.add_parser("show", help="print rule N as two small graphs", allow_abbrev=False)
    sh.add_argument("index", type=int, metavar="N", help="rule number (0-based, as in the file)")
    sh.add_argument("--file", metavar="F", help="a rule file in FlexFlow's JSON format (default: our library)")
    add_json_flag(sh)


MAX_OPS = 4          # operators per side the generator enumerates (TASO generates graphs of up to 4)
DEGREES = (2, 4)     # parallel degrees that divide the generator's 4 x 4 inputs
MAX_JOBS = 64
SHOWN_NAME = 80      # characters of a rule's name that `show` prints (the rest is cut, with its length)


def _add_verifier_flags(parser) -> None:
    parser.add_argument("--timeout", type=number(above=0), metavar="S", help="verifier time limit per rule, seconds")
    parser.add_argument("--jobs", type=count(1, MAX_JOBS), metavar="N",
                        help=f"verifier child processes at a time, 1..{MAX_JOBS}")


def _rules(file, dims: str = "innermost"):
    from flexrt.search.substitutions.library import load_library, to_innermost
    from flexrt.search.substitutions.rule import load_rules
    if file:
        if not Path(file).exists():
            raise ConfigError(f"rule file {file} not found")
        rules = load_rules(file)
    else:
        rules = load_library()
    return [to_innermost(r) for r in rules] if dims == "outermost" else rules


def _add_dims_flag(parser) -> None:
    parser.add_argument("--dims", choices=("innermost", "outermost"), default="innermost",
                        help="how the file numbers PM_AXIS / PM_PARALLEL_DIM: innermost first (ours, the "
                             "default) or outermost first (FlexFlow's graph_subst_3_v2.json: pass --dims outermost)")


def _output(args) -> Path:
    """Where ``generate`` writes: ``--output``, else the cache folder (never the installed package);
    refused before the long generation when it cannot be a file."""
    if args.output is None:
        return writable_file(cache_dir() / "substitutions" / "library.json", "the library's path", parents=True)
    return writable_file(args.output, "--output", parents=True)


def _lazy(module: str, name: str, who: str):
    import importlib
    try:
        mod = importlib.import_module(f"flexrt.search.substitutions.{module}")
        return getattr(mod, name)
    except (ImportError, AttributeError):
        raise NotYetAvailableError(f"`flexrt substitutions {who}` needs flexrt.search.substitutions.{module}."
                                   f"{name}, which is not available in this build") from None


def _call(fn, *args, **kwargs):
    """Call ``fn`` with the keyword arguments it accepts (the others are dropped)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **{k: v for k, v in kwargs.items() if v is not None})


def _status(result) -> str:
    """'proved', 'refuted' or 'unknown' from whatever one verifier result is."""
    for attr in ("status", "verdict", "result"):
        if isinstance(result, dict) and attr in result:
            result = result[attr]
            break
        if hasattr(result, attr):
            result = getattr(result, attr)
            break
    if hasattr(result, "value") and not isinstance(result, (str, int, float, bool)):
        result = result.value if isinstance(result.value, str) else result.name
    if isinstance(result, bool):
        return "proved" if result else "unknown"
    s = str(result).lower()
    return next((k for k in ("proved", "refuted", "unknown") if k in s), "unknown")


def _verify(rules, timeout, jobs=None):
    verify_rules = _lazy("verify", "verify_rules", "verify")
    results = list(_call(verify_rules, rules, timeout_s=timeout, jobs=jobs))
    if len(results) != len(rules):
        raise ConfigError(f"the verifier returned {len(results)} results for {len(rules)} rules")
    return [_status(r) for r in results], results


def stats_path(library: Path) -> Path:
    """Where ``generate`` records how ``library`` was made: ``<name>.stats.json`` beside it."""
    return library.with_name(library.stem + ".stats.json")


def _by_operator(rules, statuses) -> dict:
    """Per operator type: candidates holding it (on either side) and the verifier's outcomes."""
    out: dict = {}
    for r, st in zip(rules, statuses):
        for t in sorted({op.type for op in r.src + r.dst}):
            row = out.setdefault(t, {"candidates": 0, "proved": 0, "refuted": 0, "unknown": 0})
            row["candidates"] += 1
            row[st] += 1
    return dict(sorted(out.items()))


def _load() -> list:
    import os
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _generate(args) -> int:
    import json
    from flexrt.search.substitutions.rule import save_rules
    output = _output(args)
    generate = _lazy("families", "generate_library", "generate")
    t0 = time.perf_counter()
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    res = _call(generate, families=args.family, max_ops=args.max_ops, degree=args.degree, seed=args.seed,
                progress=progress)
    rules = list(res.rules)
    counts = dict(getattr(res, "counts", {}))
    counts["candidates"] = len(rules)
    record = {"generation_s": round(time.perf_counter() - t0, 1), "load_after_generation": _load()}
    statuses = ["unverified"] * len(rules)
    if not args.no_verify:
        t1 = time.perf_counter()
        statuses, _ = _verify(rules, args.timeout, args.jobs)
        record.update(verification_s=round(time.perf_counter() - t1, 1), load_after_verification=_load(),
                      jobs=args.jobs or 2)
        for k in ("proved", "refuted", "unknown"):
            counts[k] = statuses.count(k)
        counts["proved_percent"] = round(100 * counts["proved"] / max(1, len(rules)), 1)
        record["by_operator"] = _by_operator(rules, statuses)
        record["not_proved"] = [{"name": r.name, "status": st, "rule": r.to_json()}
                                for r, st in zip(rules, statuses) if st != "proved"]
        rules = [r for r, st in zip(rules, statuses) if st == "proved"]
    try:
        out = save_rules(output, rules)
        stats_path(out).write_text(json.dumps({"counts": counts, **record}, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write the rule library to {output}: {e.strerror or e}") from None
    doc = {"counts": counts, "written": len(rules), "output": str(out), "elapsed_s": time.perf_counter() - t0,
           "stats": str(stats_path(out))}
    if args.json:
        emit_json(doc)
    else:
        for k, v in counts.items():
            print(f"{k:>24}: {v}")
        print(f"wrote {len(rules)} rules to {out} in {doc['elapsed_s']:.1f} s (read it with --file {out}; the "
              f"installed library is left as shipped)")
    return 0


def _verify_cmd(args) -> int:
    from flexrt.search.substitutions.library import parse_problem
    rules = _rules(args.file, args.dims)
    unusable = [r for r in rules if not r.applicable]
    unparsed = [r for r in rules if r.applicable and parse_problem(r)]
    todo = [r for r in rules if r.applicable and not parse_problem(r)]
    statuses, _ = _verify(todo, args.timeout, args.jobs) if todo else ([], [])
    by_name = dict(zip((r.name for r in todo), statuses))
    counts = {k: statuses.count(k) for k in ("proved", "refuted", "unknown")}
    counts.update(unusable=len(unusable), unparsed=len(unparsed), total=len(rules))
    doc = {"file": args.file or "library", "counts": counts,
           "rules": [{"index": i, "name": r.name, "status": by_name.get(r.name, "unusable" if not r.applicable
                                                                       else "unparsed")} for i, r in enumerate(rules)]}
    if args.json:
        emit_json(doc)
    else:
        print(f"{doc['file']}: {len(rules)} rules")
        for k in ("proved", "refuted", "unknown", "unusable", "unparsed"):
            print(f"{k:>9}: {counts[k]}")
        if unusable:
            print(f"unusable: the destination reads inputs the source does not match: "
                  f"{listing(r.name for r in unusable)}")
    refuted = [r.name for r in todo if by_name[r.name] == "refuted"]
    if refuted:   # an unsound rule would let a search change what the model computes: a failure, as in a test run
        print(f"flexrt substitutions verify: {len(refuted)} rule(s) refuted (their two sides differ): "
              f"{listing(refuted)}", file=sys.stderr)
        return 1
    return 0


def _stats(args) -> int:
    from flexrt.search.substitutions.library import check_rule, library_stats
    rules = _rules(args.file)
    doc = {"file": args.file or "library", **library_stats(rules)}
    doc["generation"] = _generation_record(args.file)
    if args.check:
        from collections import Counter
        per = {conv: [check_rule(r, conv) for r in rules] for conv in ("innermost", "outermost")}
        doc["concrete_check"] = {conv: dict(Counter(v)) for conv, v in per.items()}
        doc["concrete_check"]["holds_only_innermost"] = sum(a == "holds" != b for a, b in zip(*per.values()))
        doc["concrete_check"]["holds_only_outermost"] = sum(b == "holds" != a for a, b in zip(*per.values()))
    if args.json:
        emit_json(doc)
        return 0
    print(f"{doc['file']}: {doc['rules']} rules, {doc['applicable']} applicable, {doc['unusable']} unusable "
          f"(destination reads inputs the source lacks), {doc['parse']} parse into flexrt's operators")
    gen = doc["generation"]
    if gen:
        c = gen["counts"]
        print(f"generated: {c.get('candidates')} candidates, {c.get('proved')} proved ({c.get('proved_percent')}%), "
              f"{c.get('refuted')} refuted, {c.get('unknown')} unknown; generation {gen.get('generation_s')} s, "
              f"verification {gen.get('verification_s')} s (load {gen.get('load_after_verification')})")
    print("by size (source ops -> destination ops):")
    for k, v in doc["by_size"].items():
        print(f"  {k:>6}: {v}")
    print("operators (on either side):")
    for k, v in doc["by_operator"].items():
        print(f"  {k:<20} {v}")
    if args.check:
        print("concrete check on random tensors (applicable rules):")
        for k, v in doc["concrete_check"].items():
            print(f"  {k}: {v}")
    return 0


def _generation_record(file) -> dict | None:
    """The ``.stats.json`` beside a library file (the shipped one by default), or None."""
    import json
    if file:
        path = Path(file)
    else:
        from flexrt.search.substitutions.library import library_files
        files = library_files()
        if not files:
            return None
        path = files[0]
    side = stats_path(path)
    if not side.is_file():
        return None
    try:
        return json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{side}: not a generation record ({e})") from None


def _side_lines(ops, prefix: str) -> list[str]:
    lines = []
    for i, op in enumerate(ops):
        ins = ", ".join(f"in{-s.op}" if s.external else f"{prefix}{s.op}" + (f".{s.ts}" if s.ts else "")
                        for s in op.inputs)
        ps = ", ".join(f"{k.removeprefix('PM_').lower()}={v}" for k, v in op.params)
        lines.append(f"  {prefix}{i} = {op.type.removeprefix('OP_').lower()}({ins})" + (f"  [{ps}]" if ps else ""))
    return lines


def _show(args) -> int:
    rules = _rules(args.file)
    if not rules:
        raise ConfigError(f"rule {args.index} does not exist: {args.file} holds no rules")
    if not 0 <= args.index < len(rules):
        raise ConfigError(f"rule {args.index} does not exist; valid: 0..{len(rules) - 1}")
    r = rules[args.index]
    if args.json:
        emit_json({"index": args.index, "applicable": r.applicable, **r.to_json()})
        return 0
    print(f"rule {args.index}: {clip(r.name, SHOWN_NAME)}  ({len(r.src)} -> {len(r.dst)} operators"
          + ("" if r.applicable else "; unusable: the destination reads inputs the source lacks") + ")")
    print("source:")
    print("\n".join(_side_lines(r.src, "s")))
    print("destination:")
    print("\n".join(_side_lines(r.dst, "d")))
    print("outputs: " + ", ".join(f"s{m.src_op}" + (f".{m.src_ts}" if m.src_ts else "") + " -> "
                                  + f"d{m.dst_op}" + (f".{m.dst_ts}" if m.dst_ts else "") for m in r.outputs))
    return 0


def run(args, extra) -> int:
    return {"generate": _generate, "verify": _verify_cmd, "stats": _stats, "show": _show}[args.subst_command](args)
