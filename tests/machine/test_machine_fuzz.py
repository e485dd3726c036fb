"""Mutated machine files (the shipped presets and a FlexFlow key = value file with lines deleted,
duplicated or swapped, values replaced by odd tokens, bytes flipped) load or fail with a FlexrtError
of one short line: never another exception."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexrt.errors import FlexrtError
from flexrt.machine import load_machine

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "configs" / "machines").glob("*.yaml"))}
FLEXFLOW = """\
num_nodes = 2
num_sockets_per_node = 2
num_cpus_per_socket = 20
num_gpus_per_socket = 2
membus_latency = 0.000095
nvlink_bandwidth = 18.52
nic_persocket = 1
intra_socket_gpu_fb_mem_to_gpu_fb_mem = nvlink
inter_socket_gpu_fb_mem_to_gpu_fb_mem = pci_to_host upi pci_to_dev
gpu_type = A100
"""
FILES = sorted(PRESETS.items()) + [("mm.txt", FLEXFLOW)]
TOKENS = ["[]", "{}", "null", "~", "-1", "0", "0.5", "1.0e+308", "1.0e-300", ".nan", ".inf", "-.inf", "true", "*a",
          "&a x", "!!python/none", "!!binary AAAA", "'quoted'", "[[[[[[", "]]}", "10000000", "1000000000000",
          "9" * 60, "all", "gpu", "cpu", "nvlink", "switch", "per_socket", "2020-13-45", "2020-01-01", "0x10",
          "1_000", "? x", "- x", "{G: 1000000000}", "[0, 0]", "[[0, 1, 99]]", "\"\\u0000\"", "é", "\t", "="]
WORD = re.compile(r"[^\s:,{}\[\]]+")


@st.composite
def mutated(draw) -> tuple[str, bytes]:
    name, text = draw(st.sampled_from(FILES))
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("delete", "duplicate", "swap", "token", "text", "flip")))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op in ("token", "text"):
            words = list(WORD.finditer(lines[i]))
            new = draw(st.sampled_from(TOKENS)) if op == "token" else draw(st.text(max_size=12))
            if words:
                w = draw(st.sampled_from(words))
                lines[i] = lines[i][:w.start()] + new + lines[i][w.end():]
    data = bytearray("".join(lines).encode("utf-8"))
    if op == "flip" and data:
        k = draw(st.integers(0, len(data) - 1))
        data[k] = draw(st.integers(0, 255))
    return name, bytes(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutated(), nodes=st.sampled_from([None, None, 1, 3, 5000]))
def test_mutated_machine_files_fail_only_with_flexrt_errors(folder, case, nodes):
    name, data = case
    path = folder / name
    path.write_bytes(data)
    try:
        machine = load_machine(str(path), nodes=nodes)
    except FlexrtError as e:
        message = str(e)
        assert message and "\n" not in message and len(message) <= 600, message
    else:
        assert machine.num_devices >= 1
