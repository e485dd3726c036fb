"""Reading what users give flexrt: the one place every reader goes through.

Machine YAML and FlexFlow machine files, strategy JSON and FlexFlow strategy text, substitution
rule JSON, model scripts and caches are all read with these functions, so every bad input gets the
same kind of error: what was wrong, where (file, line, field), what is valid, in one short line,
as the reader's own error type (``error=``: a ``FlexrtError`` subclass).

- ``read_text(path, what)``: refuses a path that does not exist, a directory, or anything that is
  not a regular file (a FIFO, a device: reading one could block or never end); refuses a file over
  ``max_bytes`` without reading more than that; decodes UTF-8 and names the byte offset of the first
  bad byte. ``source=True`` decodes Python source as Python does (a PEP 263 coding line).
- ``parse_json(text, where)``: JSON whose objects have no repeated key, nested at most
  ``MAX_DEPTH`` deep, without NaN or Infinity, with file:line:column in every message.
- ``parse_yaml(text, where, loader)``: YAML through a ``yaml.SafeLoader`` (sub)class, nested at
  most ``MAX_DEPTH`` deep and with at most ``MAX_YAML_NODES`` nodes once aliases are expanded
  (the "billion laughs" file is refused before it is built). ``line_loader()`` is such a loader
  whose mappings and sequences (``LineMap``, ``LineSeq``) carry their lines, for file:line errors.
- ``short(value)``: a repr never longer than ``limit`` characters, for messages; ``clip(text,
  limit)`` the same for a text (an error message quoted in another); ``listing(items)`` a list of
  names cut to about 200 characters.
- Field checks: ``check_keys``, ``check_type``, ``check_int``, ``check_number``; each names the
  field, the bad value (shortened) and what is valid.
- Where users say to write: ``writable_file(path, flag)`` and ``writable_folder(path, flag)``
  refuse, before any work, an empty path, a folder where a file goes (or a file where a folder
  goes), a FIFO or device, a parent that is a file or (for a file) does not exist, and a folder
  that takes no new file (tried with a temporary one).

Entry points: the functions above, ``LineMap``, ``LineSeq``, ``MAX_BYTES``, ``MAX_DEPTH``, ``MAX_YAML_NODES``.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from flexrt.errors import ConfigError, FlexrtError

MAX_BYTES = 64 * 1024 * 1024    # no file flexrt reads is larger; a cache of profiles stays far below
MAX_DEPTH = 64                  # nesting of JSON and YAML documents (flexrt's own need at most 8)
MAX_YAML_NODES = 1_000_000      # YAML nodes once aliases are expanded
MESSAGE_VALUE = 80              # characters of a value shown in a message


def clip(text: str, limit: int) -> str:
    """``text`` on one line (runs of white space made one space), cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def listing(items, limit: int = 200) -> str:
    """``"a, b, c"``, cut to about ``limit`` characters (``", ... (40 in all)"``), for messages."""
    items = [str(i) for i in items]
    text = ", ".join(items)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    for item in items:
        if len(", ".join(kept + [item])) > limit:
            break
        kept.append(item)
    return ", ".join(kept + [f"... ({len(items)} in all)"])


def short(value: Any, limit: int = MESSAGE_VALUE) -> str:
    """``repr(value)`` cut to ``limit`` characters (with "..." and the full length where cut)."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not turn a message into a traceback
        text = f"<{type(value).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit - 3]}... ({len(text)} characters)"


def read_bytes(path, what: str, error: type = ConfigError, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (``what`` names it in messages: "machine file")."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"{what} {p} does not exist") from None
    except OSError as e:
        raise error(f"cannot read {what} {p}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {p} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {p} is not a regular file (a FIFO, socket or device); give a file")
    if st.st_size > max_bytes:
        raise error(f"{what} {p} is {st.st_size} bytes; the limit is {max_bytes}")
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"cannot read {what} {p}: {e.strerror or e}") from None
    if len(data) > max_bytes:  # it grew while we looked
        raise error(f"{what} {p} is over {max_bytes} bytes, the limit")
    return data


def decode(data: bytes, where: str, error: type = ConfigError, source: bool = False) -> str:
    """``data`` as text: UTF-8, or for Python source (``source``) the PEP 263 coding it declares."""
    encoding = "utf-8"
    if source:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as e:  # a bad coding line, or a bad byte in the first two lines
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                pass  # name the byte below, as for any UTF-8 text
            else:
                raise error(f"{where}: {e.msg if hasattr(e, 'msg') else e}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{where}:{line}: not valid {encoding.upper()} text: byte {data[e.start]:#04x} at offset "
                    f"{e.start} ({e.reason})") from None
    except LookupError:
        raise error(f"{where}:1: unknown source encoding {encoding!r}") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path, what: str, error: type = ConfigError, max_bytes: int = MAX_BYTES, source: bool = False) -> str:
    """The text of the regular file ``path`` (see the module doc)."""
    return decode(read_bytes(path, what, error, max_bytes), str(path), error, source)


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of lists and dicts, stopping past ``limit`` (iterative: no recursion limit)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items = v.values()
        elif isinstance(v, (list, tuple)):
            items = v
        else:
            continue
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        stack.extend((x, d + 1) for x in items)
    return deepest


def _no_repeats(where: str, error: type):
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise error(f"{where}: key {short(k)} appears twice in one object; give it once")
            out[k] = v
        return out
    return hook


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _bracket_depth(text: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``text`` (strings skipped)."""
    depth = level = 0
    for m in _BRACKETS.finditer(_JSON_STRING.sub('""', text)):
        if m.group() in "[{":
            level += 1
            depth = max(depth, level)
        else:
            level -= 1
    return depth


def parse_json(text: str, where: str, error: type = ConfigError, max_depth: int = MAX_DEPTH,
               line: Optional[int] = None) -> Any:
    """A JSON document (see the module doc); ``where`` names the file in messages. ``line``: the
    text is that one line of a JSON-lines file (messages say ``where:line:column``)."""
    place = where if line is None else f"{where}:{line}"
    # nesting is checked on the text first (json.loads itself recurses once per level): strings are
    # cut out, then the brackets left are counted
    if _bracket_depth(text) > max_depth:
        raise error(f"{place}: nested more than {max_depth} levels deep; flexrt's files need far fewer")
    try:
        return json.loads(text, object_pairs_hook=_no_repeats(place, error), parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        at = f"{where}:{e.lineno}:{e.colno}" if line is None else f"{place}:{e.colno}"
        raise error(f"{at}: invalid JSON: {e.msg}") from None
    except FlexrtError:
        raise
    except ValueError as e:  # NaN / Infinity, or an integer of more digits than Python converts
        if "digits" in str(e):
            raise error(f"{place}: invalid JSON: an integer of more than {sys.get_int_max_str_digits()} digits; "
                        f"no value flexrt reads needs one") from None
        raise error(f"{place}: invalid JSON: {e}") from None


def parse_yaml(text: str, where: str, loader, error: type = ConfigError, max_depth: int = MAX_DEPTH,
               max_nodes: int = MAX_YAML_NODES) -> Any:
    """A YAML document through ``loader`` (a ``yaml.SafeLoader`` subclass), its node graph checked for
    depth and alias expansion before any Python value is built (see the module doc)."""
    import yaml  # lazily: the IR layer, which imports nothing of YAML, may import this module

    try:
        # the composer recurses once per level: the depth is checked on the event stream first
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > max_depth:
                    raise error(f"{where}:{event.start_mark.line + 1}: nested more than {max_depth} levels deep; "
                                f"flexrt's files need far fewer")
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        detail = e.problem or "invalid YAML"
        raise error(f"{where}:{mark.line + 1 if mark else 1}: invalid YAML: {detail}") from None
    except yaml.YAMLError as e:
        raise error(f"{where}:1: invalid YAML: {short(str(e), 200)}") from None
    if node is None:
        return None
    # count nodes as the constructor would visit them: an alias re-visits its whole subtree
    sizes: dict = {}
    open_: set = set()  # nodes whose subtree is being counted: reaching one again is a cycle
    stack = [(node, 1, False)]
    while stack:
        n, d, done = stack.pop()
        if d > max_depth:
            raise error(f"{where}:{n.start_mark.line + 1}: nested more than {max_depth} levels deep")
        children = [c for kv in n.value for c in kv] if isinstance(n, yaml.MappingNode) else (
            n.value if isinstance(n, yaml.SequenceNode) else [])
        if done:
            open_.discard(id(n))
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(n)] > max_nodes:
                raise error(f"{where}:{n.start_mark.line + 1}: the document expands to more than {max_nodes} "
                            f"values (aliases repeated inside aliases); write it out plainly")
            continue
        if id(n) in sizes:
            continue
        if id(n) in open_:
            raise error(f"{where}:{n.start_mark.line + 1}: an alias refers to a value that contains it "
                        f"(a recursive document); flexrt's files are trees")
        open_.add(id(n))
        stack.append((n, d, True))
        stack.extend((c, d + 1, False) for c in children if id(c) not in sizes)
    try:
        return loader(text).construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise error(f"{where}:{mark.line + 1 if mark else 1}: invalid YAML: {e.problem or e}") from None
    except FlexrtError:
        raise
    except (ValueError, OverflowError) as e:  # a constructor's own: a date 2020-13-45, a huge number
        raise error(f"{where}: invalid YAML value: {clip(str(e), 200)}") from None


# ---- YAML with line numbers --------------------------------------------------------------------------

class LineMap(dict):
    """A YAML mapping with the line of the mapping (``line``) and of each key (``key_lines``), 1-based."""

    line: int
    key_lines: dict


class LineSeq(list):
    """A YAML sequence with its line (``line``) and the line of each item (``item_lines``), 1-based."""

    line: int
    item_lines: list


_LINE_LOADER = None


def line_loader():
    """A ``yaml.SafeLoader`` subclass whose mappings are :class:`LineMap` and sequences :class:`LineSeq`;
    a repeated key is an error, and so is a scalar PyYAML's own constructors fail on with a plain Python
    error (a ``2020-13-45`` date): a ConstructorError at its line. Built on first use (this module
    imports no YAML at import time); subclass it to add constructors."""
    global _LINE_LOADER
    if _LINE_LOADER is None:
        _LINE_LOADER = _make_line_loader()
    return _LINE_LOADER


def _make_line_loader():
    import yaml

    class LineLoader(yaml.SafeLoader):
        def construct_object(self, node, deep=False):
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, OverflowError, TypeError) as e:
                raise yaml.constructor.ConstructorError(None, None, f"cannot read {short(node.value, 40)} as "
                                                        f"{node.tag.rpartition(':')[2]}: {clip(str(e), 80)}",
                                                        node.start_mark) from None

    def merged(loader, node, value_node) -> dict:
        """The pairs a ``<<`` key brings: its mapping's, or its list's, earlier mappings winning."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        out: dict = {}
        for src in sources:
            if not isinstance(src, yaml.MappingNode):
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"expected a mapping or list of mappings for merging, "
                                                        f"but found {src.id}", src.start_mark)
            sub = loader.construct_object(src, deep=True)
            for k, v in sub.items():
                out.setdefault(k, (v, sub.key_lines[k]))
        return out

    def mapping(loader, node):
        """A mapping with its lines. A key given twice is refused; a key given beside a ``<<`` merge
        overrides the merged one, and of several merged mappings the earlier wins (YAML's merge)."""
        m = LineMap()
        m.line, m.key_lines = node.start_mark.line + 1, {}
        given: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                if "<<" in given:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                            "found duplicate key '<<' (merge several mappings "
                                                            "with one: <<: [*a, *b])", key_node.start_mark)
                given["<<"] = False
                for k, (v, line) in merged(loader, node, value_node).items():
                    if not given.get(k):
                        m[k], m.key_lines[k] = v, line
                continue
            if key_node.tag == "tag:yaml.org,2002:value":
                key_node.tag = "tag:yaml.org,2002:str"
            key = loader.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        "found an unhashable key", key_node.start_mark) from None
            if given.get(key):
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {short(key)}", key_node.start_mark)
            given[key] = True
            m[key] = loader.construct_object(value_node, deep=True)
            m.key_lines[key] = key_node.start_mark.line + 1
        return m

    def sequence(loader, node):
        s = LineSeq(loader.construct_object(child, deep=True) for child in node.value)
        s.line, s.item_lines = node.start_mark.line + 1, [child.start_mark.line + 1 for child in node.value]
        return s

    def integer(loader, node):
        """YAML 1.1's integers, less the two forms no one means in a config: octal by a leading 0
        (``010`` is 8) and base 60 (``1:30`` is 90)."""
        value = loader.construct_yaml_int(node)
        body = node.value.replace("_", "").lstrip("+-")
        form = "base-60" if ":" in body else "octal" if len(body) > 1 and body[0] == "0" and body.isdigit() else None
        if form is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"{short(node.value, 40)} is a YAML 1.1 {form} number ({value}); write the decimal "
                            f"number you mean (without a leading 0 or ':'), or quote it for text", node.start_mark)
        return value

    LineLoader.add_constructor("tag:yaml.org,2002:int", integer)
    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, sequence)
    return LineLoader


# ---- fields ---------------------------------------------------------------------------------------

_TYPE_NAMES = {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "true or false"}


def type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)


def check_type(value: Any, types, where: str, error: type = ConfigError):
    """``value`` when it is one of ``types`` (a bool is not an int here), else ``error``."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in (
        types if isinstance(types, tuple) else (types,)))
    if not ok:
        raise error(f"{where} must be {type_name(types)}, got {short(value)} ({type(value).__name__})")
    return value


def check_keys(mapping: Mapping, allowed: Iterable[str], where: str, error: type = ConfigError,
               required: Iterable[str] = ()) -> None:
    """Every key of ``mapping`` is one of ``allowed`` and every ``required`` one is there."""
    allowed = list(allowed)
    unknown = [k for k in mapping if k not in allowed]
    if unknown:
        raise error(f"{where}: unknown key {short(unknown[0])}; valid keys: {', '.join(allowed)}")
    missing = [k for k in required if k not in mapping]
    if missing:
        raise error(f"{where}: missing key {missing[0]!r}")


def parse_enum(cls, value: Any, what: str, error: type = ConfigError):
    """``value`` as a member of the string-valued enum ``cls`` (a member, or its value in any case);
    else ``error`` naming ``what`` and the valid values."""
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).lower())
    except ValueError:
        raise error(f"unknown {what} {value!r}; valid: {', '.join(m.value for m in cls)}") from None


def plain_number(text: str) -> bool:
    """Whether ``text`` is written as C and JSON write numbers: ASCII, no '_' separators, no spaces
    around (Python's int() and float() also take '٤', '6_4' and ' 8 ')."""
    return text.isascii() and "_" not in text and text == text.strip()


def check_int(value: Any, where: str, error: type = ConfigError, minimum: Optional[int] = None,
              maximum: Optional[int] = None) -> int:
    """An integer (an integral float such as ``4.0`` from YAML too) within [minimum, maximum]."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where} must be an integer, got {short(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise error(f"{where} must be {_range(minimum, maximum)}, got {short(value)}")
    return value


def check_number(value: Any, where: str, error: type = ConfigError, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, positive: bool = False) -> float:
    """A finite real number within [minimum, maximum] (``positive``: > 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{where} must be a number, got {short(value)}")
    try:
        x = float(value)
    except OverflowError:
        raise error(f"{where} must be a finite number, got an integer of {len(str(value))} digits") from None
    if not math.isfinite(x):
        raise error(f"{where} must be a finite number, got {short(value)}")
    if positive and not x > 0:
        raise error(f"{where} must be > 0, got {short(value)}")
    if (minimum is not None and x < minimum) or (maximum is not None and x > maximum):
        raise error(f"{where} must be {_range(minimum, maximum)}, got {short(value)}")
    return x


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f">= {lo}" if lo is not None else f"<= {hi}"


def _named(path, flag: str) -> Path:
    if not str(path).strip():
        raise ConfigError(f"{flag} is empty; give a path")
    return Path(path).expanduser()


def _probe(folder: Path, where: str) -> None:
    """Refuse ``folder`` unless it is a folder that takes a new file."""
    if not folder.is_dir():
        raise ConfigError(f"{where}: {clip(str(folder), 200)} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".flexrt-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{where}: cannot write in {clip(str(folder), 200)}: {e.strerror or e}") from None


def _existing_ancestor(p: Path) -> Path:
    folder = p.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def writable_file(path, flag: str, parents: bool = False) -> Path:
    """``path`` (``~`` expanded) when a file can be written there, else a ConfigError naming
    ``flag``: not empty, not a folder or another non-regular file, and its folder a folder that
    takes a new file (with ``parents``, the nearest existing one: the caller creates the rest)."""
    p = _named(path, flag)
    where = f"{flag} {clip(str(path), 200)}"
    if p.is_dir():
        raise ConfigError(f"{where} is a folder; give a file name")
    if os.path.lexists(p) and not p.is_file():
        raise ConfigError(f"{where} is not a regular file (a FIFO, socket or device); give a file")
    folder = _existing_ancestor(p) if parents else p.parent
    if not parents and not os.path.lexists(folder):
        nearest = _existing_ancestor(p)
        if not nearest.is_dir():
            raise ConfigError(f"{where}: {clip(str(nearest), 200)} is a file, not a folder")
        raise ConfigError(f"{where}: the folder {clip(str(folder), 200)} does not exist")
    _probe(folder, where)
    return p


def writable_folder(path, flag: str) -> Path:
    """``path`` (``~`` expanded) when it is, or can be made, a folder to write in, else a
    ConfigError naming ``flag``."""
    p = _named(path, flag)
    where = f"{flag} {clip(str(path), 200)}"
    if os.path.lexists(p) and not p.is_dir():
        raise ConfigError(f"{where} is a file, not a folder")
    _probe(p if p.is_dir() else _existing_ancestor(p), where)
    return p
