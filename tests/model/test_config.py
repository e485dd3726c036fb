"""FFConfig: FlexFlow's flags and Legion's, defaults, and the errors for unknown flags and bad values."""

import dataclasses

import pytest

from flexrt.errors import ConfigError
from flexrt.model import FFConfig
from flexrt.model.flags import FLAGS, LEGION_SWITCHES, LEGION_VALUE_FLAGS, parse_flags

# (argv, attribute, expected value): every spelling of every flag.
FLAG_CASES = [
    (["-e", "3"], "epochs", 3), (["--epochs", "3"], "epochs", 3),
    (["-b", "128"], "batch_size", 128), (["--batch-size", "128"], "batch_size", 128),
    (["--lr", "0.1"], "learning_rate", 0.1), (["--learning-rate", "1e-3"], "learning_rate", 1e-3),
    (["--wd", "0"], "weight_decay", 0.0), (["--weight-decay", "5e-4"], "weight_decay", 5e-4),
    (["-p", "5"], "print_frequency", 5), (["--print-freq", "5"], "print_frequency", 5),
    (["-d", "data.npz"], "dataset_path", "data.npz"), (["--dataset", "data.npz"], "dataset_path", "data.npz"),
    (["--budget", "20"], "search_budget", 20), (["--search-budget", "20"], "search_budget", 20),
    (["--alpha", "1.2"], "search_alpha", 1.2), (["--search-alpha", "1.2"], "search_alpha", 1.2),
    (["--search-algorithm", "unity"], "search_algorithm", "unity"),
    (["--fusion-policy", "disco"], "fusion_policy", "disco"),
    (["--only-data-parallel"], "only_data_parallel", True),
    (["--enable-parameter-parallel"], "enable_parameter_parallel", True),
    (["--enable-attribute-parallel"], "enable_attribute_parallel", True),
    (["--import", "s.txt"], "import_strategy_file", "s.txt"),
    (["--import-strategy", "s.txt"], "import_strategy_file", "s.txt"),
    (["--export", "o.txt"], "export_strategy_file", "o.txt"),
    (["--export-strategy", "o.txt"], "export_strategy_file", "o.txt"),
    (["--search-num-nodes", "4"], "search_num_nodes", 4),
    (["--search-num-workers", "8"], "search_num_workers", 8),
    (["--machine-model-file", "m.txt"], "machine_model_file", "m.txt"),
    (["--machine", "dgx.yaml"], "machine_file", "dgx.yaml"),
    (["--taskgraph", "tg.dot"], "taskgraph_file", "tg.dot"),
    (["--compgraph", "cg.dot"], "compgraph_file", "cg.dot"),
    (["--substitution-json", "rules.json"], "substitution_json", "rules.json"),
    (["--nodes", "2"], "num_nodes", 2),
    (["--profiling"], "profiling", True),
    (["--fusion"], "perform_fusion", True),
    (["-ll:gpu", "4"], "workers_per_node", 4),
    (["-ll:cpu", "8"], "cpus_per_node", 8),
    (["--batch-size=256"], "batch_size", 256),
]


@pytest.mark.parametrize("argv, attr, expected", FLAG_CASES, ids=[" ".join(c[0]) for c in FLAG_CASES])
def test_config_flag_sets_attribute(argv, attr, expected):
    cfg = FFConfig(argv)
    assert getattr(cfg, attr) == expected
    assert cfg.to_dict()[attr] == expected


def test_config_cases_cover_every_flag_spelling():
    covered = {c[0][0].split("=")[0] for c in FLAG_CASES}
    assert {name for f in FLAGS for name in f.names} <= covered


def test_config_defaults_match_flexflow_and_unity():
    cfg = FFConfig([])
    assert (cfg.epochs, cfg.batch_size, cfg.learning_rate, cfg.weight_decay) == (1, 64, 0.01, 1e-4)
    assert cfg.search_alpha == 1.05 and cfg.search_budget == 1000  # bounded, unlike upstream
    assert (cfg.num_nodes, cfg.workers_per_node, cfg.cpus_per_node) == (1, 1, 1)
    assert not (cfg.only_data_parallel or cfg.enable_parameter_parallel or cfg.enable_attribute_parallel
                or cfg.profiling or cfg.perform_fusion)
    assert cfg.import_strategy_file is None and cfg.search_num_workers is None and cfg.machine_file is None
    assert dict(cfg.legion_flags) == {}


def test_config_parses_sys_argv_by_default(monkeypatch):
    monkeypatch.setattr("sys.argv", ["mlp.py", "-b", "32", "-ll:gpu", "2", "--nodes", "3"])
    cfg = FFConfig()
    assert (cfg.batch_size, cfg.workers_per_node, cfg.num_nodes, cfg.total_workers) == (32, 2, 3, 6)
    assert cfg.argv == ("-b", "32", "-ll:gpu", "2", "--nodes", "3")


def test_config_ll_gpu_sets_workers_per_node_with_other_flags():
    cfg = FFConfig(["-ll:gpu", "4", "-ll:fsize", "14000", "-ll:zsize", "2000", "-b", "8", "-lg:prof", "1",
                    "-ll:util", "2", "-lg:spy"])
    assert cfg.workers_per_node == 4 and cfg.batch_size == 8
    assert dict(cfg.legion_flags) == {"-ll:fsize": "14000", "-ll:zsize": "2000", "-lg:prof": "1", "-ll:util": "2",
                                      "-lg:spy": None}


@pytest.mark.parametrize("name", LEGION_VALUE_FLAGS)
def test_config_legion_value_flags_are_kept(name):
    assert FFConfig([name, "7"]).legion_flags == {name: "7"}


@pytest.mark.parametrize("name", LEGION_SWITCHES)
def test_config_legion_switches_are_kept(name):
    assert FFConfig([name, "-b", "4"]).legion_flags == {name: None}


def test_config_repeated_flag_keeps_last_value():
    assert FFConfig(["-b", "8", "--batch-size", "16"]).batch_size == 16


def test_config_unknown_flag_names_it_and_lists_known_flags():
    with pytest.raises(ConfigError) as e:
        FFConfig(["-b", "8", "--bogus-flag", "3"])
    msg = str(e.value)
    assert "unknown flag '--bogus-flag'" in msg
    for spelling in ("--batch-size", "--search-budget", "-ll:gpu", "-ll:*", "--machine"):
        assert spelling in msg
    assert len(msg) < 600 and "\n" not in msg


def test_config_unknown_flag_suggests_close_spelling():
    with pytest.raises(ConfigError, match=r"did you mean --epochs\?"):
        FFConfig(["--epoch", "2"])


@pytest.mark.parametrize("argv, fragment", [
    (["-b", "x"], "flag -b got 'x'; valid: an integer >= 1"),
    (["-b", "0"], "flag -b got 0; valid: an integer >= 1"),
    (["--batch-size", "1.5"], "flag --batch-size got '1.5'; valid: an integer >= 1"),
    (["-e", "-1"], "flag -e got -1; valid: an integer >= 1"),
    (["--lr", "0"], "flag --lr got 0.0; valid: a number > 0"),
    (["--lr", "nan"], "flag --lr got 'nan'; valid: a number > 0 (finite)"),
    (["--wd", "-0.1"], "flag --wd got -0.1; valid: a number >= 0"),
    (["--alpha", "0"], "flag --alpha got 0.0; valid: a number > 0"),
    (["--budget", "-1"], "flag --budget got -1; valid: an integer between 0 and 10,000,000"),
    (["-ll:gpu", "0"], "flag -ll:gpu got 0; valid: an integer >= 1"),
    (["-ll:gpu", "two"], "flag -ll:gpu got 'two'"),
    (["--search-num-workers", "0"], "flag --search-num-workers got 0; valid: an integer >= 1"),
    (["-b"], "flag -b needs a value (an integer >= 1)"),
    (["-ll:fsize"], "flag -ll:fsize needs a value"),
    (["--import="], "flag --import got an empty value; valid: a file"),
    (["--profiling=yes"], "flag --profiling is a switch and takes no value"),
    (["mlp"], "unexpected argument 'mlp'"),
])
def test_config_bad_value_names_flag_and_valid_values(argv, fragment):
    with pytest.raises(ConfigError) as e:
        FFConfig(argv)
    assert fragment in str(e.value)


def test_config_is_immutable_and_with_values_checks():
    cfg = FFConfig(["-b", "32"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 64
    new = cfg.with_values(batch_size=128, only_data_parallel=True)
    assert (new.batch_size, new.only_data_parallel, cfg.batch_size) == (128, True, 32)
    assert new == FFConfig(["-b", "128", "--only-data-parallel"])
    with pytest.raises(ConfigError, match=r"flag -b/--batch-size \(FFConfig.batch_size\) got 0; valid: an integer"):
        cfg.with_values(batch_size=0)
    with pytest.raises(ConfigError, match="valid: True or False"):
        cfg.with_values(profiling="yes")
    with pytest.raises(ConfigError, match="FFConfig has no setting 'batchsize'"):
        cfg.with_values(batchsize=3)


def test_config_current_time_is_microseconds():
    cfg = FFConfig([])
    t0 = cfg.get_current_time()
    t1 = cfg.get_current_time()
    assert t1 >= t0 > 0
    cfg.begin_trace(111)
    cfg.end_trace(111)


def test_parse_flags_returns_values_and_legion_flags():
    values, legion = parse_flags(["-b", "32", "-ll:gpu", "4", "-ll:fsize", "14000"])
    assert (values["batch_size"], values["workers_per_node"], legion) == (32, 4, {"-ll:fsize": "14000"})
