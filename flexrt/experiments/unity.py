"""Run kinds for Unity's evaluation (Unger et al., OSDI 2022), on the ``summit`` preset.

- ``unity_fig2``: the 2-layer MLP on 2 GPUs: elements moved per iteration by data parallelism,
  Unity's joint search, the sequential "TASO then FlexFlow" search, and the paper's Fig. 2b strategy.
- ``unity_search_time`` (Table 2): Unity's search time with graph splitting and the DP's cache on or off.
- ``unity_speedup`` (Fig. 14): Unity against data parallelism, the expert strategy, the sequential
  baseline and (BERT-Large) Megatron; the speed-up over the best of them.
- ``unity_dimensions`` (Fig. 15a): Unity's search with parallelization dimensions added one at a time.
- ``joint_vs_sequential`` (Fig. 15b): Unity's joint search against ``sequential`` with the same space.

Per-GPU batch sizes as Unity §6.1 where ``per_device_batch`` is 0 (:data:`UNITY_BATCH`); BERT-Large
at sequence length 512 unless ``model_flags`` set ``--seq-length``; ``precision`` fp16 / bf16 runs the
model in mixed precision (``flexrt.ir.precision``), timed at the devices' 16-bit peaks.
"""

from __future__ import annotations

from flexrt.experiments.common import (COST, Timer, budget_param, devices_param, machine_for, machine_param,
                                       model_flags_param, model_param, pcg_of, precision_param, simulated, space_of,
                                       space_params, strategy_doc)
from flexrt.experiments.kinds import REQUIRED, Outcome, Param, problem_of, register_kind
from flexrt.ir.precision import with_precision
from flexrt.ir.registry import AxisKind
from flexrt.kernels.optimizers import OptimizerKind
from flexrt.machine import load_machine
from flexrt.search.api import cut_in_parts, fixed_result
from flexrt.search.baselines import expert_strategy, megatron_best
from flexrt.search.pipelines import FLUSHED
from flexrt.search.unity import DEFAULT_CONFIG_RATIO, sequential, unity
from flexrt.search.unity.costs import check_config_ratio
from flexrt.strategy import SearchSpace, data_parallel, load_strategy

# Unity §6.1: per-GPU batch of each model; global batch = GPUs x this
UNITY_BATCH = {"resnext50": 64, "inception_v3": 64, "bert_large": 4, "dlrm": 1024, "xdl": 1024, "candle_uno": 256,
               "mlp": 256}
# Unity §6.1: Adam for BERT-Large, SGD for the other models
UNITY_OPTIMIZER = {"bert_large": OptimizerKind.ADAM}


def _optimizer_param() -> Param:
    return Param("optimizer", "str", "paper", choices=("paper",) + tuple(k.value for k in OptimizerKind),
                 help="the optimizer the simulator costs; paper: Unity §6.1's (Adam for BERT-Large, else SGD)")


def _optimizer(inputs) -> OptimizerKind:
    name = inputs["optimizer"]
    return UNITY_OPTIMIZER.get(inputs["model"], OptimizerKind.SGD) if name == "paper" else OptimizerKind.parse(name)


def _batch_param() -> Param:
    return Param("per_device_batch", "int", 0, minimum=0, help="per-GPU batch; 0: Unity §6.1's for the model")


def _pcg(inputs):
    per_gpu = inputs["per_device_batch"] or UNITY_BATCH.get(inputs["model"], 64)
    flags = tuple(inputs["model_flags"])
    seq = 512 if inputs["model"] == "bert_large" and "--seq-length" not in flags else 0   # model_flags may set it
    return with_precision(pcg_of(inputs["model"], per_gpu * inputs["devices"], seq, flags), inputs["precision"])


def _setup(inputs):
    machine = machine_for(inputs["machine"], inputs["devices"])
    return machine, _pcg(inputs)


def _check_common(inputs):
    """The configuration ratio as the mapping DP takes it (0, or a finite number >= 1), when the file is read."""
    return problem_of(check_config_ratio, inputs["config_ratio"])


COMMON = (model_param(), machine_param("summit"), devices_param(), _batch_param(), budget_param(1000),
          model_flags_param(), precision_param(), _optimizer_param(),
          Param("config_ratio", "float", DEFAULT_CONFIG_RATIO, minimum=0.0,
                help="the mapping DP's configuration pruning bound (--config-ratio); 0: every configuration"))


@register_kind(
    "unity_fig2",
    params=(model_param("mlp_unity_fig2"), machine_param("dgx1_v100"), devices_param(2),
            Param("batch", "int", 64, minimum=1), budget_param(50),
            Param("space", "str", "figure", choices=("figure", "full"),
                  help="figure: sample and reduction splits over both GPUs (the figure's space); full: every axis"),),
    metrics=("dp_moved_elements", "unity_moved_elements", "sequential_moved_elements", "figure_moved_elements",
             "dp_us", "unity_us", "sequential_us", "figure_us", "dp_vs_unity_moved", "unity_rewritten",
             "sequential_rewritten"),
    description="Unity Fig. 2: elements moved by data parallelism, joint and sequential optimization")
def unity_fig2(inputs) -> Outcome:
    from flexrt.examples.strategies import unity_fig2 as fig2_file
    machine = load_machine(inputs["machine"])
    base = pcg_of(inputs["model"], inputs["batch"])
    n = inputs["devices"]
    space, min_degree = ((SearchSpace(frozenset({AxisKind.SAMPLE, AxisKind.REDUCTION})), n)
                         if inputs["space"] == "figure" else (SearchSpace.full(), 1))
    metrics, found = {}, None
    for name, fn in (("unity", unity), ("sequential", sequential)):
        r = fn(base, machine, COST, budget=inputs["budget"], devices=n, space=space, min_degree=min_degree,
               progress=False)
        res = simulated(r.strategy, machine)
        metrics.update({f"{name}_moved_elements": res.total_moved_elements, f"{name}_us": res.iteration_time_s * 1e6,
                        f"{name}_rewritten": r.log.notes.get("rewritten")})
        found = found or r
    for name, strategy in (("dp", data_parallel(base, machine, n)),
                           ("figure", load_strategy(str(fig2_file.FILE), None, machine))):
        res = simulated(strategy, machine)
        metrics.update({f"{name}_moved_elements": res.total_moved_elements, f"{name}_us": res.iteration_time_s * 1e6})
    metrics["dp_vs_unity_moved"] = metrics["dp_moved_elements"] / max(1, metrics["unity_moved_elements"])
    return Outcome(metrics, strategy_doc(found.strategy, machine))


@register_kind(
    "unity_search_time",
    params=COMMON + (Param("split_size", "int", 10, minimum=0, help="graph splitting's k; 0 turns splitting off"),
                     Param("cache", "bool", True, help="the DP's cross-invocation cache")),
    metrics=("search_s", "found_ms", "dp_ms", "speedup_vs_dp"),
    description="Unity's search time with graph splitting and the cache on or off (Unity Table 2)",
    check=_check_common)
def unity_search_time(inputs) -> Outcome:
    machine, base = _setup(inputs)
    opt = _optimizer(inputs)
    with Timer() as t:
        r = unity(base, machine, COST, budget=inputs["budget"], split_size=inputs["split_size"] or None,
                  cache=inputs["cache"], progress=False, config_ratio=inputs["config_ratio"], optimizer=opt)
    dp = fixed_result("data-parallel", data_parallel(base, machine), machine, COST, opt).cost_s
    return Outcome({"search_s": t.s, "found_ms": r.cost_s * 1e3, "dp_ms": dp * 1e3, "speedup_vs_dp": dp / r.cost_s},
                   strategy_doc(r.strategy, machine))


@register_kind(
    "unity_speedup",
    params=COMMON,
    metrics=("dp_ms", "expert_ms", "sequential_ms", "megatron_ms", "unity_ms", "speedup_vs_dp", "speedup_vs_expert",
             "speedup_vs_sequential", "speedup_vs_megatron", "speedup_vs_best", "best_baseline", "search_s",
             "megatron_config", "unity_pipelined_ms", "pipelined_speedup_vs_megatron"),
    description="Unity against data parallelism, the expert strategy, TASO+FlexFlow and Megatron (Unity Fig. 14)",
    check=_check_common)
def unity_speedup(inputs) -> Outcome:
    machine, base = _setup(inputs)
    opt = _optimizer(inputs)
    times = {"dp": fixed_result("dp", data_parallel(base, machine), machine, COST, opt).cost_s}
    ex = expert_strategy(inputs["model"], base, machine)
    times["expert"] = fixed_result("expert", ex, machine, COST, opt).cost_s if ex is not None else None
    ratio = inputs["config_ratio"]
    times["sequential"] = sequential(base, machine, COST, budget=inputs["budget"], progress=False,
                                     config_ratio=ratio, optimizer=opt).cost_s
    # Megatron-LM as Unity reports it: the best of the configurations it supports (tensor degrees that
    # divide the heads, pipelines)
    mg = megatron_best(base, machine, COST, opt) if inputs["model"] == "bert_large" else None
    times["megatron"] = mg.cost_s if mg is not None else None
    with Timer() as t:
        r = unity(base, machine, COST, budget=inputs["budget"], progress=False, config_ratio=ratio, optimizer=opt)
    metrics = {f"{k}_ms": v * 1e3 if v is not None else None for k, v in times.items()}
    metrics.update({f"speedup_vs_{k}": v / r.cost_s if v is not None else None for k, v in times.items()})
    best = min((v, k) for k, v in times.items() if v is not None)
    metrics.update({"unity_ms": r.cost_s * 1e3, "speedup_vs_best": best[0] / r.cost_s, "best_baseline": best[1],
                    "search_s": t.s, "megatron_config": mg.log.notes["chosen"] if mg is not None else None,
                    "unity_pipelined_ms": None, "pipelined_speedup_vs_megatron": None})
    if mg is not None:       # Megatron-LM pipelines, so against it Unity may too (Unity §6.1)
        up = unity(base, machine, COST, budget=inputs["budget"], progress=False, enable_pipeline=True,
                   config_ratio=ratio, optimizer=opt)
        metrics.update(unity_pipelined_ms=up.cost_s * 1e3, pipelined_speedup_vs_megatron=mg.cost_s / up.cost_s)
    return Outcome(metrics, strategy_doc(r.strategy, machine))


S, R, P = AxisKind.SAMPLE, AxisKind.REDUCTION, AxisKind.PARAMETER
# dimension -> (axis kinds, the pipeline schedules searched or None): +pipeline with the flushed
# schedules (synchronous SGD), +pipeline_2bw with Unity's (1F1B on PipeDream-2BW's double-buffered
# weights: one-step-old gradients, no flush)
DIMENSIONS = {"data+model": ({S}, None), "+reduction": ({S, R}, None), "+attention_head": ({S, R, P}, None),
              "+pipeline": ({S, R, P}, FLUSHED), "+pipeline_2bw": ({S, R, P}, ("2bw",))}


@register_kind(
    "unity_dimensions",
    params=(model_param("bert_large"),) + COMMON[1:] + (
        Param("dimensions", "str", REQUIRED, choices=tuple(DIMENSIONS),
              help="data+model (sample splits and placement), +reduction, +attention_head (parameter axes), "
                   "+pipeline (flushed schedules), +pipeline_2bw (PipeDream-2BW, Unity's)"),),
    metrics=("time_ms", "iterations_per_s", "search_s", "pipelined", "bound_ms", "over_bound"),
    description="Unity's search as parallelization dimensions are added (Unity Fig. 15a)",
    check=_check_common)
def unity_dimensions(inputs) -> Outcome:
    machine, base = _setup(inputs)
    kinds, schedules = DIMENSIONS[inputs["dimensions"]]
    opt = _optimizer(inputs)
    with Timer() as t:
        r = unity(base, machine, COST, budget=inputs["budget"], space=SearchSpace(frozenset(kinds)),
                  enable_pipeline=schedules is not None, pipeline_schedules=schedules or FLUSHED, progress=False,
                  config_ratio=inputs["config_ratio"], optimizer=opt)
    bound = work_bound_s(base, machine, opt)
    return Outcome({"time_ms": r.cost_s * 1e3, "iterations_per_s": 1 / r.cost_s, "search_s": t.s,
                    "pipelined": getattr(r.strategy, "pipeline", None) is not None, "bound_ms": bound * 1e3,
                    "over_bound": r.cost_s / bound}, strategy_doc(r.strategy, machine))


def work_bound_s(pcg, machine, optimizer=OptimizerKind.SGD) -> float:
    """A lower bound of any strategy's iteration time without operator fusion (whose fused tasks keep
    intermediates on chip) or recomputation, under the analytic cost model: the whole batch's
    iteration on one device of ``machine`` (every operator unsplit, no communication), divided by
    the devices. The cost model's piece times are subadditive (a roofline of FLOPs and bytes plus a
    launch: k pieces of an operator take at least the whole operator's time, their bytes at least
    the whole one's), so n devices cannot share the work in less. Data parallelism's time over it is
    the most any strategy can gain over data parallelism in this simulator."""
    return simulated(data_parallel(pcg, machine, 1), machine, optimizer).iteration_time_s / machine.num_devices


@register_kind(
    "joint_vs_sequential",
    params=COMMON + space_params(),
    metrics=("unity_ms", "sequential_ms", "speedup", "unity_rewritten", "sequential_rewritten", "unity_search_s",
             "sequential_search_s", "unity_chosen", "unity_rewrites", "sequential_rewrites", "unity_parts",
             "sequential_parts"),
    description="Unity's joint search against sequential optimization with the same space (Unity Fig. 15b)",
    check=_check_common)
def joint_vs_sequential(inputs) -> Outcome:
    machine, base = _setup(inputs)
    space = space_of(inputs)
    out = {}
    for name, fn in (("unity", unity), ("sequential", sequential)):
        with Timer() as t:
            r = fn(base, machine, COST, budget=inputs["budget"], space=space, progress=False,
                   config_ratio=inputs["config_ratio"], optimizer=_optimizer(inputs))
        out[name] = r
        out[f"{name}_s"] = t.s
    u, s = out["unity"], out["sequential"]
    return Outcome({"unity_ms": u.cost_s * 1e3, "sequential_ms": s.cost_s * 1e3, "speedup": s.cost_s / u.cost_s,
                    "unity_rewritten": u.log.notes.get("rewritten"), "sequential_rewritten": s.log.notes.get("rewritten"),
                    "unity_search_s": out["unity_s"], "sequential_search_s": out["sequential_s"],
                    "unity_chosen": u.log.notes.get("chosen"),     # the finalist simulated fastest
                    "unity_rewrites": "; ".join(u.log.notes.get("rewrites", [])),
                    "sequential_rewrites": "; ".join(s.log.notes.get("rewrites", [])),
                    # operators cut in parts where their inputs lie (Fig. 16b)
                    "unity_parts": ", ".join(cut_in_parts(u.strategy)),
                    "sequential_parts": ", ".join(cut_in_parts(s.strategy))},
                   strategy_doc(u.strategy, machine))
