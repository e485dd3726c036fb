"""FlexFlow's module-level start-up names, so that FlexFlow's example scripts run unchanged:
``init_flexflow_runtime``, ``flexflow_python_binding``, ``get_configs``, ``NetConfig``, ``DLRMConfig``.

flexrt has no Legion runtime to start. ``init_flexflow_runtime`` does what FlexFlow's does to the
command line in default-Python mode: a dict (or keyword arguments) of FlexFlow config keys, mapped
through FlexFlow's ``ff_arg_to_sysarg`` table (``FF_ARG_TO_SYSARG``), replaces ``sys.argv[1:]``, so
that a later ``FFConfig()`` reads them. Called with nothing, ``sys.argv`` is left as it is (as under
``flexflow_python``, where the flags are already on the command line).

Example:
    >>> import sys
    >>> sys.argv = ["mlp.py", "--budget", "5"]
    >>> init_flexflow_runtime({"batch_size": 32, "only_data_parallel": True, "unknown_key": 1})
    >>> sys.argv[1:]
    ['--batch-size', '32', '--only-data-parallel']

Entry points: ``init_flexflow_runtime``, ``get_configs``, ``NetConfig``, ``DLRMConfig``.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any, Optional, Sequence

from flexrt.errors import ConfigError
from flexrt.inputs import short

# FlexFlow's config keys and the flags they become (flexflow/core/__init__.py, ff_arg_to_sysarg).
FF_ARG_TO_SYSARG: dict[str, str] = {
    "num_gpus": "-ll:gpu", "memory_per_gpu": "-ll:fsize", "zero_copy_memory_per_node": "-ll:zsize",
    "num_cpus": "-ll:cpu", "legion_utility_processors": "-ll:util", "profiling": "--profiling",
    "benchmarking": "--benchmarking", "inference_debugging": "--inference-debugging", "fusion": "--fusion",
    "disable_control_replication": "--disable-control-replication",
    "epochs": "--epochs", "batch_size": "--batch-size", "learning_rate": "--learning-rate",
    "weight_decay": "--weight-decay", "print_frequency": "--print-freq", "dataset": "--dataset",
    "budget": "--budget", "search_budget": "--search-budget", "alpha": "--alpha", "search_alpha": "--search-alpha",
    "simulator_workspace_size": "--simulator-workspace-size", "import": "--import",
    "import_strategy": "--import-strategy", "export": "--export", "export_strategy": "--export-strategy",
    "only_data_parallel": "--only-data-parallel", "enable_parameter_parallel": "--enable-parameter-parallel",
    "enable_attribute_parallel": "--enable-attribute-parallel",
    "allow_tensor_op_math_conversion": "--allow-tensor-op-math-conversion",
    "search_overlap_backward_update": "--overlap", "export_strategy_task_graph_file": "--taskgraph",
    "include_costs_dot_graph": "--include-costs-dot-graph",
    "export_strategy_computation_graph_file": "--compgraph", "machine_model_version": "--machine-model-version",
    "machine_model_file": "--machine-model-file", "simulator_segment_size": "--simulator-segment-size",
    "simulator_max_num_segments": "--simulator-max-num-segments", "enable_propagation": "--enable-propagation",
    "enable_inplace_optimizations": "--enable-inplace-optimization", "search_num_nodes": "--search-num-nodes",
    "search_num_workers": "--search-num-workers", "base_optimize_threshold": "--base-optimize-threshold",
    "python_data_loader_type": "--python-data-loader-type", "substitution_json_path": "--substitution-json",
    "perform_memory_search": "--memory-search",
    "data_parallelism_degree": "-data-parallelism-degree", "tensor_parallelism_degree": "-tensor-parallelism-degree",
    "pipeline_parallelism_degree": "-pipeline-parallelism-degree", "offload": "-offload",
    "offload_reserve_space_size": "-offload-reserve-space-size", "use_4bit_quantization": "--4bit-quantization",
    "use_8bit_quantization": "--8bit-quantization", "enable_peft": "-enable-peft",
    "peft_activation_reserve_space_size": "-peft-activation-reserve-space-size",
    "peft_weight_reserve_space_size": "-peft-weight-reserve-space-size",
}

_initialized = False


def flexflow_python_binding() -> str:
    """FlexFlow's binding name (``"cffi"`` or ``"pybind11"`` there); here ``"flexrt"``, neither.

    flexrt's API has the cffi binding's names (``Tensor.get_array`` etc.) but not its C handles, so a
    script that asks for ``"cffi"`` to reach handles (``t.handle.impl``) takes its other branch."""
    return "flexrt"


def flexflow_already_initialized() -> bool:
    """Whether ``init_flexflow_runtime`` has run in this process."""
    return _initialized


def config_argv(configs: dict) -> list[str]:
    """The flags FlexFlow passes for ``configs``: a True bool adds the switch, a False one nothing, any
    other value its ``str``; keys FlexFlow does not know are skipped (FlexFlow skips them too)."""
    argv: list[str] = []
    for key, value in configs.items():
        flag = FF_ARG_TO_SYSARG.get(key)
        if flag is None or value is False:
            continue
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def init_flexflow_runtime(configs_dict: Optional[dict] = None, **kwargs: Any) -> None:
    """FlexFlow's start-up call: pass a dict of FlexFlow config keys or keyword arguments, not both.

    Given either, ``sys.argv[1:]`` becomes their flags (``config_argv``); given neither, ``sys.argv`` is
    left alone. A second call warns and changes nothing, as FlexFlow's does.

    Raises:
        ConfigError: both a dict and keyword arguments, or a dict that is not a dict.
    """
    global _initialized
    if _initialized:
        warnings.warn("flexrt: init_flexflow_runtime called more than once; the second call is ignored",
                      stacklevel=2)
        return
    if configs_dict is not None and kwargs:
        raise ConfigError(f"init_flexflow_runtime: pass a configs_dict or keyword arguments, not both "
                          f"(got a dict and {', '.join(sorted(kwargs))})")
    if configs_dict is not None and not isinstance(configs_dict, dict):
        raise ConfigError(f"init_flexflow_runtime: configs_dict must be a dict of FlexFlow config keys, got "
                          f"{short(configs_dict)}")
    if configs_dict is not None or kwargs:
        sys.argv[1:] = config_argv(configs_dict if configs_dict is not None else kwargs)
    _initialized = True


def _scan(argv: Sequence[str], names: tuple[str, ...]) -> dict[str, str]:
    """The last value of each flag in ``names`` (``-f v`` or ``-f=v``); every other token is skipped."""
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name, eq, inline = argv[i].partition("=")
        i += 1
        if name not in names:
            continue
        if not eq:
            if i >= len(argv):
                raise ConfigError(f"flag {name} needs a value")
            inline, i = argv[i], i + 1
        found[name] = inline
    return found


def get_configs() -> Optional[dict]:
    """FlexFlow's ``get_configs``: the JSON dict in the file named by ``-config-file`` in ``sys.argv``,
    or None without that flag.

    Raises:
        ConfigError: the file cannot be read or is not valid JSON (file and line named).
    """
    path = _scan(sys.argv[1:], ("-config-file",)).get("-config-file")
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ConfigError(f"-config-file {path}: cannot read it: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"-config-file {path}:{e.lineno}: not valid JSON: {e.msg}") from None


class NetConfig:
    """FlexFlow's ``NetConfig``: ``dataset_path`` from ``--dataset`` in ``sys.argv`` ("" without it).

    FlexFlow's cffi binding hands back bytes; flexrt gives a str.
    """

    def __init__(self) -> None:
        self.dataset_path: str = _scan(sys.argv[1:], ("--dataset",)).get("--dataset", "")


def _int(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"flag {flag} got {short(text)}; valid: an integer") from None


def _int_list(flag: str, text: str) -> list[int]:
    return [_int(flag, part) for part in text.split("-")] if text else []


class DLRMConfig:
    """FlexFlow's ``DLRMConfig``: DLRM's architecture flags read from ``sys.argv``, FlexFlow's defaults.

    ``--arch-sparse-feature-size`` (2), ``--arch-embedding-size`` ('4', '-'-separated), ``--embedding-bag-size``
    (1), ``--arch-mlp-bot`` ('4-2'), ``--arch-mlp-top`` ('8-2'), ``--loss-threshold`` (0.0), ``--sigmoid-top``
    (-1), ``--sigmoid-bot`` (-1), ``--arch-interaction-op`` ('cat'), ``--dataset`` ('').
    """

    _FLAGS = ("--arch-sparse-feature-size", "--arch-embedding-size", "--embedding-bag-size", "--arch-mlp-bot",
              "--arch-mlp-top", "--loss-threshold", "--sigmoid-top", "--sigmoid-bot", "--arch-interaction-op",
              "--dataset")

    def __init__(self) -> None:
        got = _scan(sys.argv[1:], self._FLAGS)
        self.sparse_feature_size = _int("--arch-sparse-feature-size", got.get("--arch-sparse-feature-size", "2"))
        self.embedding_size = _int_list("--arch-embedding-size", got.get("--arch-embedding-size", "4"))
        self.embedding_bag_size = _int("--embedding-bag-size", got.get("--embedding-bag-size", "1"))
        self.mlp_bot = _int_list("--arch-mlp-bot", got.get("--arch-mlp-bot", "4-2"))
        self.mlp_top = _int_list("--arch-mlp-top", got.get("--arch-mlp-top", "8-2"))
        try:
            self.loss_threshold = float(got.get("--loss-threshold", "0"))
        except ValueError:
            raise ConfigError(f"flag --loss-threshold got {short(got['--loss-threshold'])}; valid: a number") from None
        self.sigmoid_top = _int("--sigmoid-top", got.get("--sigmoid-top", "-1"))
        self.sigmoid_bot = _int("--sigmoid-bot", got.get("--sigmoid-bot", "-1"))
        self.arch_interaction_op: str = got.get("--arch-interaction-op", "cat")
        self.dataset_path: str = got.get("--dataset", "")
