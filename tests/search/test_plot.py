"""Strategy plots (search/plot.py): a valid PNG with one row per operator in topological order,
each piece's cell in its device's colour, one colour per device."""

from __future__ import annotations

import pytest

from flexrt.core import DataType
from flexrt.machine import load_machine
from flexrt.search.baselines import model_parallel, one_weird_trick
from flexrt.search.plot import device_colors, plot_strategy
from flexrt.strategy import data_parallel, random_strategy
from tests.runtime.test_central_law import MODELS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def p100():
    return load_machine("flexflow_p100", 2)


def cnn():
    return MODELS["cnn"](DataType.DT_DOUBLE)[0].pcg


def test_plot_writes_png_with_rows_in_topological_order(p100, tmp_path):
    pcg = cnn()
    s = one_weird_trick(pcg, p100)
    path = tmp_path / "owt.png"
    layout = plot_strategy(s, p100, str(path))
    assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 1000
    names = [r.name for r in layout.rows]
    assert names == ["conv1", "pool1", "conv2", "pool2", "flat", "fc", "softmax"]
    rows = {r.name: r for r in layout.rows}
    assert rows["conv1"].devices == tuple(range(8)) and rows["conv1"].degrees == (("sample", 8),)
    assert rows["fc"].degrees == (("dim0", 8),)   # 5 outputs split by no divisor of 8: data parallel instead
    for r in layout.rows:
        assert r.colors == tuple(layout.device_colors[d] for d in r.devices)


def test_plot_colours_follow_devices(p100, tmp_path):
    pcg = cnn()
    s = model_parallel(pcg, p100)
    layout = plot_strategy(s, p100, str(tmp_path / "mp.png"))
    assert all(len(r.devices) == 1 for r in layout.rows)
    by_device = {}
    for r in layout.rows:
        by_device.setdefault(r.devices[0], set()).add(r.colors[0])
    assert all(len(c) == 1 for c in by_device.values())                 # one colour per device
    assert len({next(iter(c)) for c in by_device.values()}) == len(by_device) > 1   # distinct devices differ


@pytest.mark.parametrize("num_devices", [4, 16, 64])
def test_device_colours_distinct(num_devices):
    colors = device_colors(num_devices)
    assert sorted(colors) == list(range(num_devices))
    assert len(set(colors.values())) == num_devices


def test_plot_random_and_data_parallel_strategies(p100, tmp_path):
    for k, s in enumerate((data_parallel(cnn(), p100), random_strategy(cnn(), p100, 3))):
        layout = plot_strategy(s, p100, str(tmp_path / f"{k}.png"), title="cnn")
        assert (tmp_path / f"{k}.png").read_bytes()[:8] == PNG_MAGIC
        for r in layout.rows:
            nid = s.pcg.node_by_name(r.name).id
            assert len(r.devices) == len(set(r.devices))
            assert r.devices[0] >= s.views[nid].start
