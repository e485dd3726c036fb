"""FlexFlow's start-up as its example scripts use it: ``FFConfig()`` leaves unknown tokens to the script,
FlexFlow's flags flexrt ignores are accepted with one warning each, and ``init_flexflow_runtime``,
``get_configs``, ``NetConfig``, ``DLRMConfig`` and ``flexflow_python_binding`` behave as FlexFlow's."""

import json
import sys
import warnings

import pytest

from flexrt.core import (
    DLRMConfig,
    FFConfig,
    NetConfig,
    flexflow_python_binding,
    get_configs,
    init_flexflow_runtime,
)
from flexrt.errors import ConfigError
from flexrt.model import runtime_init
from flexrt.model.flags import IGNORED_FLAGS, FlagWarning


@pytest.fixture
def argv(monkeypatch):
    """Set sys.argv[1:] for one test; init_flexflow_runtime starts uninitialized."""
    monkeypatch.setattr(runtime_init, "_initialized", False)

    def set_args(*args):
        monkeypatch.setattr(sys, "argv", ["script.py", *args])
    set_args()
    return set_args


def _flag_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, FlagWarning)]


# ---- FFConfig() tolerance ---------------------------------------------------------------------

def test_ffconfig_from_sys_argv_leaves_script_flags_silently(argv):
    argv("-a", "--seq-length", "10", "-b", "8", "--num-heads", "2", "-config-file", "c.json", "--epochs", "3")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cfg = FFConfig()
    assert (cfg.batch_size, cfg.epochs) == (8, 3)
    assert cfg.unknown_args == ("-a", "--seq-length", "10", "--num-heads", "2", "-config-file", "c.json")
    assert _flag_warnings(record) == []


def test_ffconfig_from_sys_argv_warns_about_a_likely_typo(argv):
    argv("--epoch", "3", "--batchsize", "4")
    with pytest.warns(FlagWarning) as record:
        cfg = FFConfig()
    messages = [str(w.message) for w in record]
    assert any("'--epoch'" in m and "did you mean --epochs?" in m for m in messages)
    assert any("'--batchsize'" in m and "did you mean --batch-size?" in m for m in messages)
    assert cfg.epochs == 1 and cfg.unknown_args == ("--epoch", "3", "--batchsize", "4")


@pytest.mark.parametrize("args, fragment", [
    (["-b", "x"], "flag -b got 'x'; valid: an integer >= 1"),
    (["-a", "--lr", "0"], "flag --lr got 0.0; valid: a number > 0"),
    (["-ll:gpu"], "flag -ll:gpu needs a value"),
    (["-data-parallelism-degree", "0"], "flag -data-parallelism-degree got 0; valid: an integer >= 1"),
])
def test_ffconfig_from_sys_argv_still_checks_known_flags(argv, args, fragment):
    argv(*args)
    with pytest.raises(ConfigError) as e:
        FFConfig()
    assert fragment in str(e.value)


def test_ffconfig_with_explicit_argv_stays_strict():
    with pytest.raises(ConfigError, match=r"unknown flag '--seq-length'"):
        FFConfig(["--seq-length", "10"])
    assert FFConfig(["-b", "4"]).unknown_args == ()


def test_unknown_args_are_not_compared(argv):
    argv("-a", "-b", "8")
    assert FFConfig() == FFConfig(["-b", "8"])


# ---- FlexFlow flags flexrt ignores -------------------------------------------------------------

def _sample_args(flag):
    return [flag.names[0]] if flag.default is False else [flag.names[0], "3"]


@pytest.mark.parametrize("flag", IGNORED_FLAGS, ids=lambda f: f.names[0])
def test_ignored_flexflow_flag_parses_with_one_warning_saying_why(flag):
    with pytest.warns(FlagWarning) as record:
        cfg = FFConfig(_sample_args(flag) * 2)  # given twice: still one warning
    messages = _flag_warnings(record)
    assert messages == [f"flexrt: {flag.names[0]}: {flag.help}; ignored"]
    assert cfg.ignored_flags == {flag.attr: True if flag.default is False else 3}
    assert cfg == FFConfig([])


def test_every_ignored_flag_spelling_parses():
    for flag in IGNORED_FLAGS:
        for name in flag.names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FlagWarning)
                assert flag.attr in FFConfig([name] + _sample_args(flag)[1:]).ignored_flags


def test_flexflow_ffconfig_properties_read_ignored_flags():
    cfg = FFConfig([])
    assert (cfg.enable_control_replication, cfg.data_parallelism_degree, cfg.tensor_parallelism_degree,
            cfg.pipeline_parallelism_degree, cfg.python_data_loader_type, cfg.cpu_offload) == (True, 1, 1, 1, 2, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FlagWarning)
        cfg = FFConfig(["--disable-control-replication", "-tensor-parallelism-degree", "4", "-offload",
                        "--python-data-loader-type", "1"])
    assert (cfg.enable_control_replication, cfg.tensor_parallelism_degree, cfg.cpu_offload,
            cfg.python_data_loader_type) == (False, 4, True, 1)


def test_cli_refuses_ignored_flags_without_warning_first():
    from flexrt.cli._common import UsageError, check_model_flags
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(UsageError, match=r"--memory-search: flexrt ignores this FlexFlow flag \(flexrt's search"):
            check_model_flags("simulate", "mlp", ["--memory-search"])
    assert _flag_warnings(record) == []
    with pytest.warns(FlagWarning, match="--overlap"):
        assert check_model_flags("show", "mlp", ["--overlap"], honours=None).ignored_flags == {
            "search_overlap_backward_update": True}


def test_ignored_switch_takes_no_value():
    with pytest.raises(ConfigError, match="flag --memory-search is a switch and takes no value"):
        FFConfig(["--memory-search=1"])


# ---- init_flexflow_runtime ---------------------------------------------------------------------

def test_init_with_dict_replaces_argv_through_flexflow_table(argv):
    argv("--budget", "7", "-a")
    init_flexflow_runtime({"num_gpus": 4, "memory_per_gpu": 14000, "zero_copy_memory_per_node": 2000,
                           "batch_size": 32, "epochs": 2, "only_data_parallel": True, "profiling": False,
                           "search_overlap_backward_update": True, "no_such_key": 5})
    assert sys.argv == ["script.py", "-ll:gpu", "4", "-ll:fsize", "14000", "-ll:zsize", "2000", "--batch-size", "32",
                        "--epochs", "2", "--only-data-parallel", "--overlap"]
    with pytest.warns(FlagWarning, match="--overlap"):
        cfg = FFConfig()
    assert (cfg.workers_per_node, cfg.batch_size, cfg.epochs, cfg.only_data_parallel, cfg.search_budget) == \
        (4, 32, 2, True, 1000)
    assert cfg.legion_flags == {"-ll:fsize": "14000", "-ll:zsize": "2000"}


def test_init_with_kwargs(argv):
    init_flexflow_runtime(batch_size=16, learning_rate=0.5)
    assert sys.argv[1:] == ["--batch-size", "16", "--learning-rate", "0.5"]
    assert FFConfig().learning_rate == 0.5


def test_init_without_arguments_keeps_argv(argv):
    argv("-b", "12", "-a")
    init_flexflow_runtime()
    assert sys.argv == ["script.py", "-b", "12", "-a"] and runtime_init.flexflow_already_initialized()


def test_init_with_dict_and_kwargs_is_an_error(argv):
    with pytest.raises(ConfigError, match="not both"):
        init_flexflow_runtime({"batch_size": 8}, epochs=2)
    with pytest.raises(ConfigError, match="must be a dict"):
        init_flexflow_runtime([("batch_size", 8)])


def test_init_twice_warns_and_changes_nothing(argv):
    init_flexflow_runtime(batch_size=8)
    with pytest.warns(UserWarning, match="more than once"):
        init_flexflow_runtime(batch_size=99)
    assert sys.argv[1:] == ["--batch-size", "8"]


def test_flexflow_python_binding_is_neither_of_flexflows():
    """Scripts branch on == "cffi" to reach C handles flexrt does not have (FlexFlow's split.py)."""
    assert flexflow_python_binding() == "flexrt"


# ---- get_configs, NetConfig, DLRMConfig --------------------------------------------------------

def test_get_configs_reads_the_config_file(argv, tmp_path):
    assert get_configs() is None
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"batch_size": 24, "num_gpus": 2}))
    argv("-a", "-config-file", str(path))
    assert get_configs() == {"batch_size": 24, "num_gpus": 2}
    argv(f"-config-file={path}")
    init_flexflow_runtime(get_configs())
    assert FFConfig().batch_size == 24


def test_get_configs_errors_name_the_file(argv, tmp_path):
    argv("-config-file", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="missing.json: cannot read it"):
        get_configs()
    bad = tmp_path / "bad.json"
    bad.write_text("{\n  'x': 1\n}")
    argv("-config-file", str(bad))
    with pytest.raises(ConfigError, match=r"bad.json:2: not valid JSON"):
        get_configs()
    argv("-config-file")
    with pytest.raises(ConfigError, match="-config-file needs a value"):
        get_configs()


def test_net_config_reads_dataset(argv):
    assert NetConfig().dataset_path == ""
    argv("-b", "4", "--dataset", "/data/cifar")
    assert NetConfig().dataset_path == "/data/cifar"


def test_dlrm_config_defaults_are_flexflows(argv):
    c = DLRMConfig()
    assert (c.sparse_feature_size, c.sigmoid_bot, c.sigmoid_top, c.embedding_bag_size, c.loss_threshold,
            c.arch_interaction_op, c.dataset_path) == (2, -1, -1, 1, 0.0, "cat", "")
    assert (c.embedding_size, c.mlp_bot, c.mlp_top) == ([4], [4, 2], [8, 2])


def test_dlrm_config_reads_its_flags_and_ffconfig_leaves_them(argv):
    argv("--arch-sparse-feature-size", "16", "--arch-embedding-size", "100-200-300", "--arch-mlp-bot", "13-64-16",
         "--arch-mlp-top", "64-1", "--sigmoid-top", "1", "--loss-threshold", "0.5", "--arch-interaction-op", "dot",
         "--embedding-bag-size", "3", "--dataset", "d.npz", "-b", "8")
    c = DLRMConfig()
    assert (c.sparse_feature_size, c.embedding_size, c.mlp_bot, c.mlp_top, c.sigmoid_top, c.loss_threshold,
            c.arch_interaction_op, c.embedding_bag_size, c.dataset_path) == \
        (16, [100, 200, 300], [13, 64, 16], [64, 1], 1, 0.5, "dot", 3, "d.npz")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cfg = FFConfig()
    assert cfg.batch_size == 8 and cfg.dataset_path == "d.npz" and _flag_warnings(record) == []
    argv("--arch-mlp-bot", "13-x")
    with pytest.raises(ConfigError, match="flag --arch-mlp-bot got 'x'; valid: an integer"):
        DLRMConfig()
