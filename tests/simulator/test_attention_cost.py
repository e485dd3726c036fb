"""Attention that materializes its scores (``AnalyticCostModel(attention="materialized")``): the
[n, heads, Lq, Lk] scores' traffic is added to the operator's roofline, exactly as
``intermediate_bytes`` counts it; it splits with the heads and the samples as the work does; the
default ("fused", FlashAttention) and every other operator are unchanged."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from flexrt.cli import main
from flexrt.errors import ConfigError
from flexrt.ir import DataType, OpType, TensorShape
from flexrt.ir.ops import LinearAttrs
from flexrt.ir.ops.attention import MultiHeadAttentionAttrs, intermediate_bytes
from flexrt.ir.registry import op_def
from flexrt.machine.machine import DeviceSpec
from flexrt.simulator.cost_model import AnalyticCostModel, FusedMember

F32, F16 = DataType.DT_FLOAT, DataType.DT_HALF
A100 = DeviceSpec("a100", "gpu", {F32: 19.5e12, F16: 312e12}, 2039e9, 80 << 30, 4e-6)


def _attention(n, seq, embed, heads, dropout=0.0, dtype=F32):
    attrs = MultiHeadAttentionAttrs(embed, heads, dropout=dropout, causal=True)
    data = [TensorShape((n, seq, embed), dtype)] * 3
    ins = data + list(op_def(OpType.MULTIHEAD_ATTENTION).weight_shapes(attrs, data))
    return attrs, ins, list(op_def(OpType.MULTIHEAD_ATTENTION).output_shapes(attrs, data))


@pytest.mark.parametrize("dropout, forward, backward", [(0.0, 4 * 4, 7 * 4), (0.1, 4 * 4 + 2 * 4 + 1, 7 * 4 + 2 * 4 + 1)])
def test_score_passes_counted_per_element(dropout, forward, backward):
    """QK^T writes, softmax reads and writes, AV reads (forward); AV's backward reads and writes, the
    softmax's reads two and writes one, QK^T's backward reads twice; dropout: a read, a write and a
    one-byte mask each way."""
    attrs, ins, outs = _attention(2, 8, 32, 4, dropout)
    elements = 2 * 4 * 8 * 8
    assert intermediate_bytes(attrs, ins, outs) == (forward * elements, backward * elements)


def test_materialized_adds_the_scores_at_memory_bandwidth_and_nothing_else_changes():
    attrs, ins, outs = _attention(4, 512, 256, 8, 0.1, F16)
    fused = AnalyticCostModel().op_times(attrs, ins, outs, A100)
    mat = AnalyticCostModel(attention="materialized").op_times(attrs, ins, outs, A100)
    fwd, bwd = intermediate_bytes(attrs, ins, outs)
    assert mat.forward_s - fused.forward_s == pytest.approx(fwd / A100.memory_bandwidth, rel=1e-12)
    assert mat.backward_s - fused.backward_s == pytest.approx(bwd / A100.memory_bandwidth, rel=1e-12)
    assert mat.forward_s > 1.5 * fused.forward_s        # seq 512, head dim 32: the scores dominate
    lin = (LinearAttrs(64), [TensorShape((32, 64)), TensorShape((64, 64))], [TensorShape((32, 64))])
    assert AnalyticCostModel(attention="materialized").op_times(*lin, A100) == AnalyticCostModel().op_times(*lin, A100)
    assert AnalyticCostModel() == AnalyticCostModel(attention="fused")


def test_a_fused_task_holding_attention_pays_its_scores_too():
    attrs, ins, outs = _attention(2, 256, 128, 4, 0.1, F16)
    member = FusedMember(attrs, tuple(ins), tuple(outs))
    fwd, bwd = intermediate_bytes(attrs, ins, outs)
    for phase, moved in (("forward", fwd), ("backward", bwd)):
        extra = (AnalyticCostModel(attention="materialized").fused_time([member], phase, A100)
                 - AnalyticCostModel().fused_time([member], phase, A100))
        assert extra == pytest.approx(moved / A100.memory_bandwidth, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([16, 32, 64]), st.floats(0.0, 0.5))
def test_pieces_split_the_scores_traffic(samples, heads_degree, heads, seq, dropout):
    """Cut along the samples and the heads, the pieces' score traffic sums to the whole's."""
    if heads % heads_degree:
        heads_degree = 1
    n, embed = 4 * samples, 8 * heads
    attrs, ins, outs = _attention(n, seq, embed, heads, dropout)
    whole = intermediate_bytes(attrs, ins, outs)
    q = TensorShape((n // samples, seq, embed))
    wq = TensorShape((ins[3].dims[0], ins[3].dims[1] // heads_degree))
    piece = intermediate_bytes(attrs, [q, q, q, wq, wq, wq, ins[6]], outs)
    assert tuple(samples * heads_degree * p for p in piece) == whole


def test_an_unknown_attention_kernel_is_refused():
    with pytest.raises(ConfigError, match="valid: fused, materialized"):
        AnalyticCostModel(attention="flash2")


def test_simulate_attention_flag(capsys):
    args = ["simulate", "gpt", "-b", "8", "--config", "gpt-tiny", "--seq-length", "64", "--machine", "dgx_a100",
            "--json"]
    assert main(args) == 0
    fused = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main(args + ["--attention", "materialized"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > fused


def test_search_export_simulate_round_trip_with_materialized_attention(tmp_path, capsys):
    """A search costed with materialized attention exports a strategy that simulates, with the same flag,
    at the time the search reported (and slower than under the fused model)."""
    path = str(tmp_path / "s.json")
    model = ["gpt", "-b", "8", "--config", "gpt-tiny", "--seq-length", "64", "--machine", "dgx1_v100"]
    assert main(["search", *model, "--algo", "unity", "--budget", "5", "--attention", "materialized",
                 "--export", path, "--json", "--no-progress"]) == 0
    found = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main(["simulate", *model, "--strategy", path, "--attention", "materialized", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == pytest.approx(found, rel=1e-12)
    assert main(["simulate", *model, "--strategy", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] < found
