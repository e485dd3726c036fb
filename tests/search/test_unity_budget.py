"""Unity's substitution selection spends its budget on the most promising rewrites first (lazy
costing, ``search.unity.search._best_first``): where one graph has more candidate rewrites than the
budget, those that save work on one device (a batch norm fusing its ReLU) are costed before those
that do not (a merge of convolutions under the roofline model), so a budget that costing every
child in the library's order spends on merges fuses every batch norm."""

from __future__ import annotations


from flexrt.core import ActiMode, DataType, FFConfig, FFModel
from flexrt.ir.op_type import OpType
from flexrt.machine import load_machine
from flexrt.search.substitutions.library import load_library
from flexrt.search.substitutions.match import find_matches
from flexrt.search.unity import unity
from flexrt.simulator.cost_model import AnalyticCostModel


def branches(n=4, channels=(16, 12, 16, 8)):
    """Inception's pattern: ``n`` 1 x 1 convolutions of one input, each a batch norm and a ReLU."""
    m = FFModel(FFConfig(["-b", "16"]))
    x = m.create_tensor([16, 24, 8, 8], DataType.DT_FLOAT)
    ys = []
    for i in range(n):
        t = m.conv2d(x, channels[i], 1, 1, 1, 1, 0, 0, ActiMode.AC_MODE_NONE, use_bias=False, name=f"b{i}")
        ys.append(m.relu(m.batch_norm(t, relu=False, name=f"bn{i}"), name=f"relu{i}"))
    t = m.flat(m.concat(ys, 1, name="cat"), name="flat")
    m.softmax(m.dense(t, 10, name="fc"), name="softmax")
    return m.pcg


def test_a_small_budget_goes_to_the_fusions_before_the_merges():
    pcg = branches()
    rules = load_library()
    fuse = [r for r in rules if r.name == "flexrt_rule_2780"]
    merges = [r for r in rules if any(op.type == "OP_CONV2D" for op in r.src) and len(r.src) == 2
              and all(op.type == "OP_CONV2D" for op in r.src) and any(op.type == "OP_SPLIT" for op in r.dst)]
    assert fuse and merges
    assert sum(len(find_matches(pcg, r)) for r in merges) >= 8        # more merge candidates than the budget
    assert rules.index(merges[0]) < rules.index(fuse[0])               # and before the fusions in the library
    machine = load_machine("dgx1_v100")
    # 4 fusions in some order; the DP's estimates of partly fused graphs need not fall with each
    # fusion, so the search may cost other subsets first (with the mapping DP's three peel orders it
    # reaches all four at the 7th candidate)
    r = unity(pcg, machine, AnalyticCostModel(), budget=8, split_size=None, progress=False)
    chosen = r.strategy.pcg
    assert sum(n.op_type is OpType.BATCH_NORM and n.attrs.relu for n in chosen.nodes) == 4
    assert not any(n.op_type is OpType.RELU for n in chosen.nodes)
