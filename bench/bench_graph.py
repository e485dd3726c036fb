"""Compiled graph algorithms (``flexrt.ir._graph``) against their pure-Python references.

Two ways to run it:

    python bench/bench_graph.py          # prints times and the ratio compiled / pure Python
    pytest bench/bench_graph.py          # pytest-benchmark, grouped by algorithm and size

The graphs are random DNN-like DAGs: every node feeds 1-3 nodes shortly after it (residual-style
skips included), numbered in a random order so that node ids are not a topological order.
"""

from __future__ import annotations

import argparse
import random
import time

import pytest

import numpy as np

from flexrt.ir import _graph
from flexrt.ir.graph_algos import dominators, py_idom_dag, py_topo_order, to_csr, topo_order

SIZES = (2_000, 20_000)


def random_dag(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    label = list(range(n))
    rng.shuffle(label)
    succ: list[list[int]] = [[] for _ in range(n)]
    for i in range(n - 1):
        for j in {i + 1} | {min(n - 1, i + rng.randint(1, 8)) for _ in range(rng.randint(0, 2))}:
            succ[label[i]].append(label[j])
    return succ


def _rooted(succ: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """The graph with a virtual root joined to every source, and its predecessor lists."""
    n = len(succ)
    has_pred = {w for s in succ for w in s}
    g = [list(s) for s in succ] + [[v for v in range(n) if v not in has_pred]]
    preds: list[list[int]] = [[] for _ in g]
    for v, s in enumerate(g):
        for w in s:
            preds[w].append(v)
    return g, preds


def py_dominators(succ: list[list[int]]) -> list[int]:
    """Pure-Python counterpart of ``dominators``: the same virtual root, the reference passes."""
    g, preds = _rooted(succ)
    idom = py_idom_dag(preds, py_topo_order(g))
    return [-1 if d == len(succ) else d for d in idom[:len(succ)]]


def kernel_inputs(name: str, succ: list[list[int]]) -> tuple:
    """Prebuilt CSR arrays, so that the compiled loop alone is timed (no list conversion)."""
    if name == "topo_order":
        return to_csr(succ)
    g, preds = _rooted(succ)
    return (*to_csr(preds), np.asarray(py_topo_order(g), dtype=np.int64))


KERNELS = {"topo_order": _graph.topo_order, "dominators": _graph.idom_dag}


IMPLS = {
    "topo_order": (topo_order, py_topo_order),
    "dominators": (dominators, py_dominators),
}


def best_of(fn, arg, repeat: int, star: bool = False) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*arg) if star else fn(arg)
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=5, help="best of this many runs")
    args = parser.parse_args(argv)
    print("compiled: the public function (list conversion + extension); kernel: the extension alone on\n"
          "prebuilt CSR arrays; python: the pure-Python reference. Best of %d runs.\n" % args.repeat)
    print(f"{'algorithm':<12} {'nodes':>7} {'edges':>7} {'compiled_ms':>12} {'kernel_ms':>10} {'python_ms':>10} "
          f"{'compiled/python':>16} {'kernel/python':>14}")
    for n in args.sizes:
        succ = random_dag(n)
        edges = sum(map(len, succ))
        for name, (compiled, python) in IMPLS.items():
            assert compiled(succ) == python(succ), f"{name} disagrees with its reference on {n} nodes"
            c = best_of(compiled, succ, args.repeat)
            k = best_of(KERNELS[name], kernel_inputs(name, succ), args.repeat, star=True)
            p = best_of(python, succ, args.repeat)
            print(f"{name:<12} {n:>7} {edges:>7} {c * 1e3:>12.2f} {k * 1e3:>10.3f} {p * 1e3:>10.2f} "
                  f"{c / p:>16.3f} {k / p:>14.4f}")


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n{n}")
def dag(request):
    return random_dag(request.param)


@pytest.mark.parametrize("impl", ["compiled", "python"])
@pytest.mark.parametrize("name", list(IMPLS))
def test_bench_graph(benchmark, dag, name, impl):
    fn = IMPLS[name][0 if impl == "compiled" else 1]
    benchmark.group = f"{name} n={len(dag)}"
    result = benchmark(fn, dag)
    assert result == IMPLS[name][1](dag)


if __name__ == "__main__":
    main()
