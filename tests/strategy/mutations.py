"""Hypothesis strategies that break a valid file every way a person or a disk can: a JSON document
with a key deleted, an entry duplicated, a value replaced by any JSON value; its text with a key
written twice, cut short, or with bytes flipped. Shared by the file-reader property tests
(``tests/strategy/test_file_fuzz.py``, ``tests/search/test_rule_file_fuzz.py``).
"""

from __future__ import annotations

import copy
import json

from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 20) | st.integers() | st.floats(allow_nan=False) |
    st.sampled_from(["", "x", "INTRA", "INTER", "dim0", "linear", "OP_RELU", "PM_AXIS", "flexrt.strategy"]) |
    st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def _places(doc) -> list[tuple]:
    """Every (container, key or index) of a JSON document, the root's children first."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            stack.append(v)
    return out


@st.composite
def mutated_json(draw, valid: dict) -> bytes:
    """The bytes of ``valid`` (a JSON document) after one to three changes."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        places = _places(doc)
        if not places:
            break
        container, key = places[draw(st.integers(0, len(places) - 1))]
        how = draw(st.sampled_from(["delete", "replace", "duplicate"]))
        if how == "delete":
            del container[key]
        elif how == "replace":
            container[key] = draw(JSON_VALUES)
        elif isinstance(container, list):
            container.insert(key, copy.deepcopy(container[key]))
        else:
            container[draw(st.text(max_size=6))] = copy.deepcopy(container[key])
    text = json.dumps(doc, indent=1)
    return draw(mangled(text.encode()))


@st.composite
def mangled(draw, data: bytes) -> bytes:
    """``data`` as it is, or with its first key written twice, cut short, or with some bytes flipped."""
    how = draw(st.sampled_from(["as is", "as is", "repeat key", "truncate", "flip"]))
    if how == "repeat key" and b'":' in data:
        end = data.index(b'":') + 2
        start = data.rindex(b'"', 0, end - 2)
        line_end = data.find(b"\n", end)
        entry = data[start:line_end if line_end >= 0 else len(data)].rstrip(b",")
        return data[:start] + entry + b",\n" + data[start:]
    if how == "truncate":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "flip" and data:
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    return data
