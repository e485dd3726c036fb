"""Run kinds for DisCo's evaluation: every model trained data parallel on all GPUs of DisCo's
clusters (``disco_a``: 6 nodes x 2 GTX 1080 Ti; ``disco_b``: 8 nodes x 8 T4), fusion by policy or
by DisCo's search (``flexrt.search.disco``), scored with the analytic cost model.

- ``fusion_speedup`` (Table 1): per-iteration time of each fusion baseline, of DisCo's search and of
  the fully-overlapped bound FO; DisCo's speed-up over the best baseline, (T_min - T_disco) / T_disco,
  FO's, and the share of the gap from the best baseline to FO that DisCo closes.
- ``fusion_search`` (Tables 3-4, Fig. 10): DisCo's search at one alpha, beta and subset of methods:
  per-iteration time, search time, candidates, and the speed-up over no fusion.
"""

from __future__ import annotations

from flexrt.experiments.common import COST, Timer, budget_param, machine_param, model_param, pcg_of, seed_param, strategy_doc
from flexrt.experiments.kinds import Outcome, Param, problem_of, register_kind
from flexrt.machine import load_machine
from flexrt.search import SearchRequest, search
from flexrt.search.disco import METHODS, check_methods
from flexrt.search.fusion_policies import apply_policy, fully_overlapped
from flexrt.simulator.simulate import Simulator
from flexrt.strategy import data_parallel

# model -> (per-GPU batch, extra script flags): the models' usual batches (DisCo uses the largest that fits)
DISCO_MODELS = {"vgg19": (32, ()), "resnet50": (64, ()), "transformer": (32, ()), "rnnlm": (64, ()),
                "bert_large": (8, ()), "reformer": (4, ("--seq-length", "1024"))}
BASELINES = ("none", "xla", "combiner", "ddp", "jax", "horovod")


def _strategy(inputs, machine):
    per_gpu, extra = DISCO_MODELS.get(inputs["model"], (32, ()))
    per_gpu = inputs["per_device_batch"] or per_gpu
    return data_parallel(pcg_of(inputs["model"], per_gpu * machine.num_devices, extra=extra), machine)


def _simulator(strategy, machine) -> Simulator:
    sim = Simulator(machine, COST, detail=False, incremental=False)
    sim.time_full(strategy)
    return sim


def _disco(strategy, machine, inputs, **options):
    request = SearchRequest(strategy.base, machine, COST, budget=inputs["budget"], seed=inputs["seed"],
                            initial=(strategy,), options={"patience": inputs["patience"], **options}, progress=False)
    with Timer() as t:
        result = search("disco", request)
    return result, t.s


COMMON = (model_param(), machine_param("disco_a"),
          Param("per_device_batch", "int", 0, minimum=0, help="0: the model's usual batch (DISCO_MODELS)"),
          Param("patience", "int", 200, minimum=1, help="stop after this many candidates without improvement "
                                                         "(DisCo: 1000)"),
          budget_param(3000), seed_param())


@register_kind(
    "fusion_speedup", params=COMMON,
    metrics=tuple(f"{b}_ms" for b in BASELINES) + ("disco_ms", "fo_ms", "best_baseline", "disco_speedup_pct",
                                                    "fo_speedup_pct", "gap_closed", "search_s", "groups", "buckets"),
    description="DisCo's search against the fusion baselines and the fully-overlapped bound (DisCo Table 1)")
def fusion_speedup(inputs) -> Outcome:
    machine = load_machine(inputs["machine"])
    s = _strategy(inputs, machine)
    times = {b: _simulator(apply_policy(b, s, machine, COST), machine).iteration_time() for b in BASELINES}
    fo = fully_overlapped(_simulator(apply_policy("jax", s, machine, COST), machine))
    result, search_s = _disco(s, machine, inputs)
    best_name = min(times, key=times.get)
    best, t = times[best_name], result.cost_s
    plan = result.strategy.fusion
    metrics = {f"{b}_ms": v * 1e3 for b, v in times.items()}
    metrics.update({"disco_ms": t * 1e3, "fo_ms": fo * 1e3, "best_baseline": best_name,
                    "disco_speedup_pct": 100 * (best - t) / t, "fo_speedup_pct": 100 * (best - fo) / fo,
                    "gap_closed": (best - t) / (best - fo) if best > fo else None, "search_s": search_s,
                    "groups": len(plan.groups) if plan else 0, "buckets": len(plan.buckets) if plan else 0})
    return Outcome(metrics, strategy_doc(result.strategy, machine))


@register_kind(
    "fusion_search",
    params=COMMON + (Param("alpha", "float", 1.05, minimum=1.0), Param("beta", "int", 10, minimum=1, maximum=10_000),
                     Param("methods", "strs", list(METHODS), choices=METHODS)),
    metrics=("time_ms", "time_s", "search_s", "search_min", "candidates", "no_fusion_ms", "speedup_pct"),
    description="DisCo's search at one alpha, beta and set of methods (DisCo Tables 3 and 4, Fig. 10)",
    check=lambda i: problem_of(check_methods, i["methods"]))
def fusion_search(inputs) -> Outcome:
    machine = load_machine(inputs["machine"])
    s = _strategy(inputs, machine)
    base = _simulator(s, machine).iteration_time()
    result, search_s = _disco(s, machine, inputs, alpha=inputs["alpha"], beta=inputs["beta"],
                              methods=list(inputs["methods"]))
    t = result.cost_s
    return Outcome({"time_ms": t * 1e3, "time_s": t, "search_s": search_s, "search_min": search_s / 60,
                    "candidates": result.log.proposals, "no_fusion_ms": base * 1e3,
                    "speedup_pct": 100 * (base - t) / t}, strategy_doc(result.strategy, machine))


def _fusion_model_problem(path: str):
    """What loading the learned model at ``path`` would refuse, before any run (None: nothing; empty:
    the shipped one)."""
    from flexrt.simulator import fused_model as fm
    return problem_of(fm.LearnedFusedModel.load, path) if path else None


@register_kind(
    "fusion_model_accuracy",
    params=(model_param(), Param("batch", "int", 4, minimum=1), Param("devices", "int", 4, minimum=1, maximum=64),
            Param("count", "int", 30, minimum=1, help="random fused groups measured"), seed_param(),
            Param("fusion_model", "str", "", help="a model from `flexrt fusion-model train`; empty: the shipped one")),
    metrics=("samples", "learned_within_10pct", "learned_within_14pct", "learned_median_error", "sum_within_10pct",
             "analytic_within_10pct", "learned_errors", "collect_s"),
    description="the learned fused-operator estimator's error on fused groups measured here (DisCo Fig. 9)",
    check=lambda i: _fusion_model_problem(i["fusion_model"]))
def fusion_model_accuracy(inputs) -> Outcome:
    from importlib import resources
    from flexrt.machine import local_machine
    from flexrt.simulator import fused_model as fm
    from flexrt.simulator.cost_model import ProfiledCostModel
    from flexrt.simulator.fused_samples import collect
    machine = local_machine(inputs["devices"])
    spec = machine.devices[0].spec
    path = inputs["fusion_model"] or str(resources.files("flexrt.configs") / "fusion_model" / "local.npz")
    model = fm.LearnedFusedModel.load(path)
    cost = ProfiledCostModel()
    strategy = data_parallel(pcg_of(inputs["model"], inputs["batch"]), machine, inputs["devices"])
    with Timer() as t:
        samples = collect(strategy, machine, cost, spec, inputs["count"], inputs["seed"], inputs["model"], paired=True)
    cost.flush()
    scores = {name: fm.evaluate(p, samples) for name, p in (("learned", model.predict), ("sum", fm.sum_baseline),
                                                            ("analytic", fm.analytic_baseline(spec)))}
    learned = scores["learned"]
    return Outcome({"samples": len(samples), "learned_within_10pct": learned["share_within_10pct"],
                    "learned_within_14pct": learned["share_within_14pct"],
                    "learned_median_error": learned["median_rel_error"],
                    "sum_within_10pct": scores["sum"]["share_within_10pct"],
                    "analytic_within_10pct": scores["analytic"]["share_within_10pct"],
                    "learned_errors": [float(e) for e in learned["errors"]], "collect_s": t.s})
