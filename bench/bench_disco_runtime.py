"""DisCo on this host's runtime (never part of the test run): one model trained with and without the
fusion plan DisCo's search finds, measured time beside simulated time, and the central law.

The model is an MLP whose layers end in element-wise chains (scale, residual add, shift, ReLU: what
fusion removes launches and memory passes from; none of the chain's intermediates is read by a
backward kernel, so the runtime evaluates it as one numexpr pass), data parallel over ``local``
workers (``flexrt.machine.local_machine``: this host split into equal devices). The search scores
plans with the profiled cost model, so a fused task's time is its real fused kernel measured here
(numexpr for element-wise chains). Each plan then trains for real (``Session.step``, NumPy
backend, serial executor: every task one after the other), and the median iteration is printed
beside the simulated iteration (devices in parallel) and the summed task times (what the serial
executor should take). The law: float64, three SGD steps, both plans against the one-device
reference (relative error of the losses and weights).

    python bench/bench_disco_runtime.py [--devices 2] [--batch 2048] [--hidden 1024] [--layers 4]
                                        [--budget 300] [--steps 20] [--repeat 3] [--cost profiled|analytic|learned[:MODEL.npz]]
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # the serial executor runs one task at a time on one core

import argparse
import statistics
import sys
import tempfile

import numpy as np

from flexrt.core import DataType, FFConfig, FFModel
from flexrt.machine import local_machine
from flexrt.runtime.executor import optimizer_step, relative_error
from flexrt.runtime.reference import ReferenceTrainer
from flexrt.runtime.session import Session, initial_weights
from flexrt.search import SearchRequest, search
from flexrt.simulator.cost_model import AnalyticCostModel, ProfiledCostModel
from flexrt.strategy import data_parallel


DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "fusion_model",
                             "local.npz")


def model(batch: int, hidden: int, layers: int, dtype):
    m = FFModel(FFConfig([]))
    x = m.create_tensor([batch, hidden], dtype)
    t = x
    for i in range(layers):
        h = m.dense(t, hidden, use_bias=False, name=f"fc{i}")
        h = m.scalar_multiply(h, 0.5, name=f"scale{i}")
        h = m.add(h, t, name=f"res{i}")
        h = m.scalar_add(h, 0.1, name=f"shift{i}")
        t = m.relu(h, name=f"relu{i}")
    t = m.dense(t, 16, name="head")
    m.softmax(t, name="softmax")
    return m.pcg


def measure(strategy, machine, cost, steps: int, pcg, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {n.name: rng.standard_normal(n.attrs.shape.dims).astype(n.attrs.shape.dtype.numpy_name)
              for n in pcg.nodes if n.op_type.value == "input"}
    batch = next(iter(inputs.values())).shape[0]
    labels = rng.integers(0, 16, (batch, 1)).astype("int32")
    s = Session(strategy, machine, cost_model=cost, optimizer="sgd", lr=0.01)
    for _ in range(3):
        s.step(inputs, labels)
    times = [s.step(inputs, labels).wall_s for _ in range(steps)]
    return statistics.median(times), s.predicted_time_s, s.predicted_summed_s, len(s.plan.tasks)


def law(plan, args, machine) -> float:
    pcg = model(64, 64, args.layers, DataType.DT_DOUBLE)
    s = data_parallel(pcg, machine).with_fusion(plan)
    rng = np.random.default_rng(1)
    w0 = initial_weights(pcg, seed=1)
    inputs = {n.name: rng.standard_normal(n.attrs.shape.dims) for n in pcg.nodes if n.op_type.value == "input"}
    labels = rng.integers(0, 16, (64, 1)).astype("int32")
    ref = ReferenceTrainer(pcg, w0, optimizer_step("sgd", lr=0.05), "sparse_categorical_crossentropy")
    sess = Session(s, machine, optimizer="sgd", lr=0.05, weights=w0)
    worst = 0.0
    for _ in range(3):
        want, got = ref.step(inputs, labels), sess.step(inputs, labels).loss
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
    got_w = sess.weights()
    return max([worst] + [relative_error(got_w[k], v) for k, v in ref.weights.items()])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cost", default="profiled",
                   help="profiled, analytic, or learned[:MODEL.npz] (the learned fused cost over profiled times)")
    args = p.parse_args(argv)
    machine = local_machine(args.devices)
    profiled = ProfiledCostModel(cache_path=os.path.join(tempfile.mkdtemp(), "profile.json"))
    if args.cost == "analytic":
        cost = AnalyticCostModel()
    elif args.cost.startswith("learned"):
        from flexrt.simulator.fused_model import LearnedCostModel, LearnedFusedModel
        cost = LearnedCostModel(profiled, LearnedFusedModel.load(args.cost.partition(":")[2] or DEFAULT_MODEL))
    else:
        cost = profiled
    pcg = model(args.batch, args.hidden, args.layers, DataType.DT_FLOAT)
    dp = data_parallel(pcg, machine)
    found = search("disco", SearchRequest(pcg, machine, cost, budget=args.budget, seed=0, initial=(dp,),
                                          progress=False))
    plan = found.strategy.fusion
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.devices} local devices, "
          f"batch {args.batch}, hidden {args.hidden}, {args.layers} layers")
    print(f"disco: {len(plan.groups) if plan else 0} groups, {len(plan.buckets) if plan else 0} buckets, "
          f"{found.log.proposals} candidates; simulated {found.log.notes.get('initial_cost_s', 0) * 1e3:.2f} -> "
          f"{found.cost_s * 1e3:.2f} ms")
    rows = {}
    for name, s in (("unfused", dp), ("disco", found.strategy)):
        runs = [measure(s, machine, cost, args.steps, pcg, seed=r) for r in range(args.repeat)]
        med = statistics.median(r[0] for r in runs)
        rows[name] = (med, runs[0][1], runs[0][2], runs[0][3])
        print(f"{name:<8} measured {med * 1e3:8.2f} ms (median of {args.repeat} x {args.steps} iterations)  "
              f"simulated {runs[0][1] * 1e3:8.2f} ms (devices in parallel), {runs[0][2] * 1e3:8.2f} ms summed "
              f"(serial executor)  tasks {runs[0][3]}")
    m0, m1 = rows["unfused"][0], rows["disco"][0]
    s0, s1 = rows["unfused"][2], rows["disco"][2]
    print(f"speed-up measured {m0 / m1:.3f}x, simulated (summed) {s0 / s1:.3f}x")
    print(f"law (float64, 3 SGD steps vs one device): unfused {law(None, args, machine):.2e}, "
          f"disco plan {law(plan, args, machine):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
