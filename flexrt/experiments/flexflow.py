"""Run kinds for FlexFlow's evaluation (Jia et al., SysML 2019).

- ``search_speedup`` (Fig. 6, Fig. 7): a search's strategy against data parallelism and the expert
  strategy: simulated iteration times, speed-ups, elements moved, task compute time, search time.
- ``delta_vs_full`` (Table 5, Fig. 11): one MCMC search run twice, scoring each proposal by delta
  and by full simulation (the same trajectory, checked); whole-search wall times, their ratio and
  both convergence curves.
- ``mcmc_vs_exhaustive`` (§8.3): the proven optimum by branch and bound against MCMC from a few seeds.
"""

from __future__ import annotations

from flexrt.errors import ConfigError
from flexrt.experiments.common import (COST, Timer, budget_param, curve, devices_param, machine_for, machine_param,
                                       model_param, pcg_of, peak_memory_bytes, seed_param, simulated, space_of,
                                       space_params, strategy_doc)
from flexrt.experiments.kinds import Outcome, Param, problem_of, register_kind
from flexrt.search import SearchRequest, exhaustive, mcmc, search
from flexrt.search.api import check_options
from flexrt.search.baselines import expert_strategy
from flexrt.strategy import data_parallel


def _ratio(a: float, b: float):
    return a / b if b else None


def _sim_metrics(prefix: str, result) -> dict:
    return {f"{prefix}_ms": result.iteration_time_s * 1e3, f"{prefix}_moved_elements": result.total_moved_elements,
            f"{prefix}_compute_ms": result.compute_time_s * 1e3, f"{prefix}_peak_memory_bytes": peak_memory_bytes(result)}


def _check_search_options(algorithm: str, options) -> None:
    check_options(algorithm, options)
    if "rules" in options:   # Rule objects: what a YAML file cannot hold
        raise ConfigError("option 'rules' takes a list of substitution rules in Python; an experiment searches "
                          "with the shipped library (leave out rules)")


@register_kind(
    "search_speedup",
    params=(model_param(), machine_param("flexflow_p100"), devices_param(),
            Param("per_device_batch", "int", 64, minimum=1), Param("seq_length", "int", 0, minimum=0),
            Param("algorithm", "str", "mcmc", choices=("mcmc", "unity")), budget_param(1000), seed_param(),
            *space_params(), Param("options", "mapping", {}, help="the algorithm's own options")),
    metrics=("dp_ms", "expert_ms", "found_ms", "speedup_vs_dp", "speedup_vs_expert", "dp_moved_elements",
             "expert_moved_elements", "found_moved_elements", "moved_reduction_vs_dp", "moved_reduction_vs_expert", "dp_compute_ms", "expert_compute_ms",
             "found_compute_ms", "compute_vs_dp", "found_peak_memory_bytes", "search_s", "proposals"),
    description="a search's strategy against data parallelism and the expert strategy (FlexFlow Fig. 6, 7)",
    check=lambda i: problem_of(_check_search_options, i["algorithm"], i["options"]))
def search_speedup(inputs) -> Outcome:
    machine = machine_for(inputs["machine"], inputs["devices"])
    base = pcg_of(inputs["model"], inputs["per_device_batch"] * inputs["devices"], inputs["seq_length"])
    dp = simulated(data_parallel(base, machine), machine)
    expert = expert_strategy(inputs["model"], base, machine)
    request = SearchRequest(base, machine, COST, budget=inputs["budget"], seed=inputs["seed"], space=space_of(inputs),
                            initial=(expert,) if expert is not None and inputs["algorithm"] == "mcmc" else (),
                            progress=False, options=inputs["options"])
    with Timer() as t:
        r = search(inputs["algorithm"], request)
    found = simulated(r.strategy, machine)
    metrics = {**_sim_metrics("dp", dp), **_sim_metrics("found", found), "search_s": t.s,
               "proposals": r.log.proposals, "speedup_vs_dp": dp.iteration_time_s / found.iteration_time_s,
               "moved_reduction_vs_dp": _ratio(dp.total_moved_elements, found.total_moved_elements),
               "compute_vs_dp": found.compute_time_s / dp.compute_time_s}
    metrics.update(dict.fromkeys(("expert_ms", "expert_moved_elements", "expert_compute_ms", "speedup_vs_expert",
                                  "moved_reduction_vs_expert")))
    if expert is not None:
        ex = simulated(expert, machine)
        metrics.update({k: v for k, v in _sim_metrics("expert", ex).items() if k != "expert_peak_memory_bytes"})
        metrics["speedup_vs_expert"] = ex.iteration_time_s / found.iteration_time_s
        metrics["moved_reduction_vs_expert"] = _ratio(ex.total_moved_elements, found.total_moved_elements)
    metrics.pop("dp_peak_memory_bytes", None)
    return Outcome(metrics, strategy_doc(r.strategy, machine), {"search": curve(r.log)})


@register_kind(
    "delta_vs_full",
    params=(model_param(), machine_param("flexflow_p100"), devices_param(), Param("per_device_batch", "int", 64, minimum=1),
            budget_param(1000), seed_param(), *space_params()),
    metrics=("full_s", "delta_s", "speedup", "found_ms", "proposals", "same_trajectory"),
    description="MCMC scoring proposals by full vs delta simulation: whole-search times (FlexFlow Table 5, Fig. 11)")
def delta_vs_full(inputs) -> Outcome:
    machine = machine_for(inputs["machine"], inputs["devices"])
    base = pcg_of(inputs["model"], inputs["per_device_batch"] * inputs["devices"])
    runs = {}
    for how in ("delta", "full"):
        request = SearchRequest(base, machine, COST, budget=inputs["budget"], seed=inputs["seed"], space=space_of(inputs),
                                progress=False, options={"simulation": how})
        with Timer() as t:
            r = search("mcmc", request)
        runs[how] = (t.s, r)
    (d_s, d), (f_s, f) = runs["delta"], runs["full"]
    same = [e.current_cost_s for e in d.log.entries] == [e.current_cost_s for e in f.log.entries]
    return Outcome({"full_s": f_s, "delta_s": d_s, "speedup": f_s / d_s, "found_ms": d.cost_s * 1e3,
                    "proposals": d.log.proposals, "same_trajectory": same},
                   strategy_doc(d.strategy, machine), {"delta": curve(d.log), "full": curve(f.log)})


@register_kind(
    "mcmc_vs_exhaustive",
    params=(model_param(), machine_param("flexflow_p100"), devices_param(4), Param("per_device_batch", "int", 16, minimum=1),
            budget_param(4000), Param("exhaustive_budget", "int", 10**6, minimum=1), Param("seeds", "int", 3, minimum=1),
            Param("alpha", "float", 1.05, minimum=0.0), Param("starts", "int", 6, minimum=1),
            *space_params(("sample",), "aligned")),
    metrics=("optimum_ms", "exhaustive_s", "proven_optimal", "space_size", "leaves", "mcmc_best_ms",
             "mcmc_worst_ratio", "seeds_at_optimum", "mcmc_max_s", "mcmc_s_to_optimum"),
    description="MCMC against the optimum proven by exhaustive search (FlexFlow §8.3)")
def mcmc_vs_exhaustive(inputs) -> Outcome:
    machine = machine_for(inputs["machine"], inputs["devices"])
    base = pcg_of(inputs["model"], inputs["per_device_batch"] * inputs["devices"])
    space = space_of(inputs)
    with Timer() as t:
        best = exhaustive(base, machine, COST, budget=inputs["exhaustive_budget"], space=space, progress=False)
    results, walls, reach = [], [], []
    for seed in range(inputs["seeds"]):
        with Timer() as tm:
            r = mcmc(base, machine, COST, budget=inputs["budget"], seed=seed, space=space, alpha=inputs["alpha"],
                     starts=inputs["starts"], progress=False)
        results.append(r)
        walls.append(tm.s)
        at = [e.time_s for e in r.log.entries if e.best_cost_s <= best.cost_s * (1 + 1e-9)]
        reach.append(at[0] if at else None)
    ratios = [r.cost_s / best.cost_s for r in results]
    reached = [x for x in reach if x is not None]
    notes = best.log.notes
    return Outcome({"optimum_ms": best.cost_s * 1e3, "exhaustive_s": t.s, "proven_optimal": notes.get("proven_optimal"),
                    "space_size": notes.get("space_size"), "leaves": notes.get("leaves"),
                    "mcmc_best_ms": min(r.cost_s for r in results) * 1e3, "mcmc_worst_ratio": max(ratios),
                    "seeds_at_optimum": sum(abs(x - 1) < 1e-9 for x in ratios), "mcmc_max_s": max(walls),
                    "mcmc_s_to_optimum": max(reached) if len(reached) == len(results) else None},
                   strategy_doc(best.strategy, machine),
                   {f"mcmc seed {i}": curve(r.log) for i, r in enumerate(results)})
