"""Simulation engine: compiled ``Engine`` against the pure-Python ``ReferenceEngine``, and delta
against full simulation for single-operator changes (FlexFlow's MCMC proposals).

Two ways to run it:

    python bench/bench_engine.py          # prints a table of times and ratios
    pytest bench/bench_engine.py          # pytest-benchmark, grouped by measurement and size

The task graphs look like a lowered strategy: a chain of operators (with skip connections) on
``GPUS`` GPUs, each operator split into 1-8 tasks over a block of GPUs; a tensor between
partitions on different GPUs becomes a transfer task on the directed link between them (a device
of its own), partitions on the same GPU get a plain edge. A proposal re-places one operator: its
tasks and the transfers into and out of it are removed, new ones added (about 20 of each).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np
import pytest

from flexrt.simulator.engine import Engine, ReferenceEngine

GPUS = 8
SIZES = (10_000, 100_000)
DEGREES = (1, 2, 4, 8)


class LayeredGraph:
    """A task graph of operators on GPUs and links, and single-operator proposals on it."""

    def __init__(self, num_tasks: int, seed: int = 0, engine_cls=Engine):
        self.rng = random.Random(seed)
        self.engine_cls = engine_cls
        self.device: list[int] = []
        self.exe: list[float] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.inputs: list[list[int]] = []
        self.cost: list[float] = []
        self.place: list[tuple[int, int]] = []  # (first GPU, degree) per operator
        self.tasks: list[list[int]] = []  # ids follow operator order
        while len(self.device) < num_tasks:
            i = len(self.inputs)
            self.inputs.append([j for j in {i - 1, i - self.rng.randint(2, 6)} if j >= 0])
            self.cost.append(self.rng.choice([1e-3, 2e-3, 4e-3]))
            self.place.append(self._draw_place())
            self.tasks.append(self._add_tasks(i, self._array_add_task))
            for j in self.inputs[i]:
                self._connect(j, i, self._array_add_task, self._array_add_edge)

    def _draw_place(self) -> tuple[int, int]:
        degree = self.rng.choice(DEGREES)
        return self.rng.randrange(0, GPUS, degree), degree

    def _array_add_task(self, device: int, exe: float) -> int:
        self.device.append(device)
        self.exe.append(exe)
        return len(self.device) - 1

    def _array_add_edge(self, a: int, b: int) -> None:
        self.src.append(a)
        self.dst.append(b)

    def _add_tasks(self, i: int, add_task) -> list[int]:
        first, degree = self.place[i]
        return [add_task(first + k, self.cost[i] / degree) for k in range(degree)]

    def _connect(self, j: int, i: int, add_task, add_edge) -> None:
        """Partition k of a degree-a tensor overlaps partitions of the degree-b consumer."""
        (fj, a), (fi, b) = self.place[j], self.place[i]
        for p, tp in enumerate(self.tasks[j]):
            for c, tc in enumerate(self.tasks[i]):
                if p * b < (c + 1) * a and c * a < (p + 1) * b:  # [p/a, (p+1)/a) meets [c/b, (c+1)/b)
                    gp, gc = fj + p, fi + c
                    if gp == gc:
                        add_edge(tp, tc)
                    else:
                        x = add_task(GPUS + gp * GPUS + gc, 2e-4 / max(a, b))
                        add_edge(tp, x)
                        add_edge(x, tc)

    def engine(self):
        return self.engine_cls.from_arrays(GPUS + GPUS * GPUS, self.device, self.exe, self.src, self.dst)

    def propose(self, eng, i: int) -> None:
        """Re-place operator i in ``eng``: remove its tasks (their transfers go with them, being
        their neighbours), add new tasks and transfers for a new placement."""
        for t in self.tasks[i]:
            for nb in eng.preds(t) + eng.succs(t):
                if eng.device(nb) >= GPUS:  # a transfer into or out of operator i
                    eng.remove_task(nb)
            eng.remove_task(t)
        self.place[i] = self._draw_place()
        self.tasks[i] = self._add_tasks(i, eng.add_task)
        consumers = [k for k, ins in enumerate(self.inputs) if i in ins]
        for j in self.inputs[i]:
            self._connect(j, i, eng.add_task, eng.add_edge)
        for k in consumers:
            self._connect(i, k, eng.add_task, eng.add_edge)


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


WORKLOADS = ("operator", "exe tweak")


def delta_run(graph: LayeredGraph, workload: str, steps: int, check: bool = False) -> dict:
    """Delta simulation after each of ``steps`` edits: ``operator`` re-places a random operator
    (an MCMC proposal), ``exe tweak`` scales one random transfer's exe by 0.9 or 1.1."""
    eng = graph.engine()
    eng.simulate_full()
    transfers = np.flatnonzero(np.asarray(graph.device) >= GPUS).tolist()
    times, processed, removed, added = [], [], [], []
    for _ in range(steps):
        if workload == "operator":
            before = eng.task_ids()
            graph.propose(eng, graph.rng.randrange(len(graph.tasks)))
            after = eng.task_ids()
            removed.append(np.setdiff1d(before, after).size)
            added.append(np.setdiff1d(after, before).size)
        else:
            x = graph.rng.choice(transfers)
            eng.set_exe(x, eng.exe(x) * graph.rng.choice([0.9, 1.1]))
        t = time.perf_counter()
        makespan = eng.simulate_delta()
        times.append(time.perf_counter() - t)
        processed.append(eng.last_processed)
        if check:
            assert eng.copy().simulate_full() == makespan
    return {"full": best_of(eng.simulate_full, 3), "times": times, "processed": processed, "tasks": eng.num_tasks,
            "replays": eng.replays, "fallbacks": eng.fallbacks, "removed": removed, "added": added}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many full simulations")
    parser.add_argument("--steps", type=int, default=200, help="delta simulations per size and workload")
    args = parser.parse_args(argv)
    print("Full simulation (Algorithm 1), best of %d runs; compiled Engine vs pure-Python ReferenceEngine.\n"
          % args.repeat)
    print(f"{'tasks':>8} {'edges':>8} {'compiled_ms':>12} {'python_ms':>10} {'compiled_tasks/s':>17} "
          f"{'python_tasks/s':>15} {'python/compiled':>16}")
    for n in args.sizes:
        graph = LayeredGraph(n)
        fast = graph.engine()
        ref = ReferenceEngine.from_arrays(GPUS + GPUS * GPUS, graph.device, graph.exe, graph.src, graph.dst)
        assert fast.simulate_full() == ref.simulate_full()
        c = best_of(fast.simulate_full, args.repeat)
        p = best_of(ref.simulate_full, 1 if n > 20_000 else args.repeat)
        print(f"{fast.num_tasks:>8} {fast.num_edges:>8} {c * 1e3:>12.2f} {p * 1e3:>10.1f} "
              f"{fast.num_tasks / c:>17.3g} {fast.num_tasks / p:>15.3g} {p / c:>16.1f}")
    print(f"\nDelta (Algorithm 2) vs full simulation, compiled Engine, {args.steps} edits per row; full = best of 3\n"
          "on the final graph; speedup = full / delta; processed = tasks processed per delta (mean);\n"
          "rm/add = tasks removed/added per proposal (mean); replayed = share of deltas that replayed after K0.\n")
    print(f"{'workload':>10} {'tasks':>8} {'rm/add':>8} {'full_ms':>8} {'delta_mean_ms':>14} {'delta_med_ms':>13} "
          f"{'speedup_mean':>13} {'speedup_med':>12} {'processed':>10} {'replayed':>9}")
    for n in args.sizes:
        for workload in WORKLOADS:
            r = delta_run(LayeredGraph(n, seed=1), workload, args.steps)
            mean, med = statistics.fmean(r["times"]), statistics.median(r["times"])
            rm_add = f"{statistics.fmean(r['removed']):.0f}/{statistics.fmean(r['added']):.0f}" if r["removed"] else "-"
            print(f"{workload:>10} {r['tasks']:>8} {rm_add:>8} {r['full'] * 1e3:>8.2f} {mean * 1e3:>14.3f} "
                  f"{med * 1e3:>13.4f} {r['full'] / mean:>13.2f} {r['full'] / med:>12.1f} "
                  f"{statistics.fmean(r['processed']):>10.0f} {r['replays'] / args.steps:>9.0%}")


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"n{n}")
def layered(request):
    return LayeredGraph(request.param)


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_bench_full_simulation(benchmark, layered, impl):
    if impl == "python" and len(layered.device) > 20_000:
        pytest.skip("the pure-Python reference takes seconds per run at this size")
    cls = Engine if impl == "compiled" else ReferenceEngine
    eng = cls.from_arrays(GPUS + GPUS * GPUS, layered.device, layered.exe, layered.src, layered.dst)
    benchmark.group = f"full simulation n={len(layered.device)}"
    makespan = benchmark(eng.simulate_full)
    assert makespan == layered.engine().simulate_full()


@pytest.mark.parametrize("workload", WORKLOADS)
def test_bench_delta(benchmark, workload):
    graph = LayeredGraph(100_000, seed=1)
    eng = graph.engine()
    eng.simulate_full()
    transfers = np.flatnonzero(np.asarray(graph.device) >= GPUS).tolist()
    benchmark.group = "delta n=100000"

    def step():
        if workload == "operator":
            graph.propose(eng, graph.rng.randrange(len(graph.tasks)))
        else:
            x = graph.rng.choice(transfers)
            eng.set_exe(x, eng.exe(x) * graph.rng.choice([0.9, 1.1]))
        return eng.simulate_delta()

    makespan = benchmark(step)  # the edit is timed too; python bench/bench_engine.py times delta alone
    assert makespan == eng.copy().simulate_full()
    assert eng.fallbacks == 0


if __name__ == "__main__":
    main()
