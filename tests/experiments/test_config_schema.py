"""The typed config schema: one-line messages for wrong types, bad choices, malformed,
empty and non-mapping files, numbers in exponent form, and ``--data-dir``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dp_proto.cli import main
from dp_proto.experiments import schema as sch
from dp_proto.experiments.config import ConfigError, parse_override, read_config, validate_config
from dp_proto.experiments.lvq import DEFAULT_CONFIG, load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "training" / "configs").glob("*.yaml"))


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _cli_error(capsys, argv: list[str]) -> str:
    """The one stderr line of a refused command (status 2, no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ types


def test_a_wrong_type_names_the_key_the_type_and_the_value(tmp_path, capsys):
    path = _write(tmp_path, 'training:\n  max_epochs: "ten"\n')
    with pytest.raises(sch.ConfigTypeError) as err:
        load_config(path)
    assert str(err.value) == "training.max_epochs: expected an integer, got 'ten' (str)"
    line = _cli_error(capsys, ["train", "--config", str(path)])
    assert line == "dp-proto: error: training.max_epochs: expected an integer, got 'ten' (str)"


def test_a_quoted_number_is_a_string_not_a_number(tmp_path):
    path = _write(tmp_path, 'training: {lr: "0.01"}\n')
    with pytest.raises(TypeError, match=r"^training\.lr: expected a number, got '0\.01' \(str\)$"):
        load_config(path)


def test_a_bad_choice_lists_the_allowed_values(tmp_path, capsys):
    path = _write(tmp_path, "model: {type: svm}\n")
    line = _cli_error(capsys, ["train", "--config", str(path)])
    assert line == "dp-proto: error: model.type: expected one of 'glvq', 'gmlvq', 'lgmlvq', got 'svm' (str)"
    with pytest.raises(ValueError, match=r"^training\.optimizer: expected one of 'adam', 'sgd', 'lbfgs', got 'adamw'"):
        load_config(None, ["training.optimizer=adamw"])
    assert load_config(None, ["model.type=GMLVQ"])["model"]["type"] == "GMLVQ"  # the runner lower-cases it


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.max_epochs=true", "training.max_epochs: expected an integer, got True (bool)"),  # bool is no int
        ("training.progress_bar=1", "training.progress_bar: expected a boolean (true or false), got 1 (int)"),
        ("model.rank=2.5", "model.rank: expected an integer or null, got 2.5 (float)"),
        ("logging.image_shape=[8, x]", "logging.image_shape[1]: expected an integer, got 'x' (str)"),
        (
            "privacy.bounds=[0, 1, 2]",
            "privacy.bounds: expected a list of 2 items (each a number or a list of numbers) or null, "
            "got [0, 1, 2] (list)",
        ),
        ("model.backbone=resnet", "model.backbone: expected 'cnn' or null, got 'resnet' (str)"),
        ("seed=null", "seed: expected an integer, got null"),
    ],
)
def test_other_wrong_values(override, message):
    with pytest.raises(sch.ConfigTypeError) as err:
        load_config(None, [override])
    assert str(err.value) == message


def test_an_int_is_a_number_and_optional_keys_take_null():
    config = load_config(None, ["training.lr=1", "data.batch_size=null", "privacy.epsilon=2", "model.rank=4"])
    assert config["training"]["lr"] == 1 and config["data"]["batch_size"] is None
    validate_config(config, "lvq")


# ------------------------------------------------------------------ numbers in exponent form


def test_an_override_in_exponent_form_is_a_float():
    config = load_config(None, ["privacy.delta=1e-6", "training.lr=5E-3"])
    assert config["privacy"]["delta"] == 1e-6 and isinstance(config["privacy"]["delta"], float)
    assert config["training"]["lr"] == 0.005
    assert parse_override("a=.5e-3") == {"a": 0.0005} and parse_override("a=1E5") == {"a": 1e5}
    assert parse_override("a=1e") == {"a": "1e"}  # not a number


def test_a_file_in_exponent_form_is_a_float(tmp_path):
    config = load_config(_write(tmp_path, "privacy:\n  delta: 1e-5\n  epsilon: 1\n"))
    assert config["privacy"]["delta"] == 1e-5 and isinstance(config["privacy"]["delta"], float)


# ------------------------------------------------------------------ malformed, empty, non-mapping files


def test_malformed_yaml_gives_the_file_line_and_column(tmp_path, capsys):
    path = _write(tmp_path, "model:\n  type: gmlvq\n   rank: 3\n")
    with pytest.raises(ConfigError, match=r"c\.yaml, line 3, column 8: mapping values are not allowed here"):
        load_config(path)
    line = _cli_error(capsys, ["train", "--config", str(path)])
    assert line == f"dp-proto: error: {path}, line 3, column 8: mapping values are not allowed here"
    line = _cli_error(capsys, ["svdd", "svdd.gamma=[1"])
    assert line.startswith("dp-proto: error: override 'svdd.gamma=[1', line 1, column 3: expected ',' or ']'")


@pytest.mark.parametrize("text", ["", "# only a comment\n", "null\n", "{}\n"])
def test_an_empty_config_file_is_refused(tmp_path, capsys, text):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match="holds no settings"):
        load_config(path)
    line = _cli_error(capsys, ["svdd", "--config", str(path)])
    assert line == (
        f"dp-proto: error: {path}: the config file holds no settings (it is empty, or only comments or null); "
        "give at least one key: value"
    )


@pytest.mark.parametrize(("text", "shown"), [("- 1\n- 2\n", "[1, 2] (list)"), ("gmlvq\n", "'gmlvq' (str)")])
def test_a_config_that_is_not_a_mapping_is_refused(tmp_path, capsys, text, shown):
    path = _write(tmp_path, text)
    with pytest.raises(TypeError, match="must hold a mapping"):
        load_config(path)
    line = _cli_error(capsys, ["train", "--config", str(path)])
    assert line == (
        f"dp-proto: error: {path}: a config file must hold a mapping of keys to values (key: value), "
        f"got {shown} at its top level"
    )


def test_unknown_keys_and_missing_files_are_one_line(tmp_path, capsys):
    path = _write(tmp_path, "modle: {type: glvq}\n")
    line = _cli_error(capsys, ["train", "--config", str(path)])
    assert line.startswith("dp-proto: error: unknown config key 'modle'; valid keys here: data, logging")
    line = _cli_error(capsys, ["train", "--config", str(tmp_path / "missing.yaml")])
    assert line == f"dp-proto: error: {tmp_path / 'missing.yaml'}: no such config file"


# ------------------------------------------------------------------ --data-dir


@pytest.mark.parametrize(
    ("command", "config"),
    [
        ("train", "data: {source: uci, name: iris}\n"),
        ("svdd", "data: {source: uci, name: iris}\n"),
        ("anonymize", "data: {source: yale}\n"),
        ("llp", "seed: 0\n"),
    ],
)
def test_data_dir_sets_the_data_directory_over_the_environment(tmp_path, capsys, monkeypatch, command, config):
    """``--data-dir`` wins over ``data.data_dir`` and ``$DP_PROTO_DATA_DIR``; without it the
    environment variable is read. Neither directory holds data: the loader's message names
    the directory it searched."""
    path = _write(tmp_path, config.replace("{", "{data_dir: from_file, ") if "{" in config else config)
    flag_dir, env_dir = tmp_path / "flag_dir", tmp_path / "env_dir"
    monkeypatch.setenv("DP_PROTO_DATA_DIR", str(env_dir))
    argv = [command, "--config", str(path)]
    assert main([*argv, "--data-dir", str(flag_dir)]) == 2
    err = capsys.readouterr().err
    assert str(flag_dir) in err and str(env_dir) not in err
    assert main([*argv, "data.data_dir=null"]) == 2
    err = capsys.readouterr().err
    assert str(env_dir) in err and str(flag_dir) not in err


def test_data_dir_is_in_every_data_command_help():
    from dp_proto.cli import build_parser

    parser = build_parser()
    for command in ("train", "anonymize", "llp", "svdd"):
        args = parser.parse_args([command, "--config", "c.yaml", "--data-dir", "D"])
        assert args.data_dir == "D"


# ------------------------------------------------------------------ the schemas


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_validates(path):
    from dp_proto.experiments.anonymizer import load_anonymizer_config
    from dp_proto.experiments.llp import load_llp_config
    from dp_proto.experiments.svdd import load_svdd_config

    kind = path.stem.rsplit("_", 1)[-1]
    loader, experiment = {
        "anonymizer": (load_anonymizer_config, "anonymizer"),
        "llp": (load_llp_config, "llp"),
        "svdd": (load_svdd_config, "svdd"),
    }.get(kind, (load_config, "lvq"))
    validate_config(loader(path), experiment)


@pytest.mark.parametrize("experiment", sorted(sch.DECLARED))
def test_the_schemas_cover_their_defaults(experiment):
    """Every key whose default is None is declared (else its type would be unchecked),
    every declared key exists, and each experiment's defaults fit its own schema."""

    def leaves(section, prefix=""):
        for key, value in section.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    defaults = dict(leaves(sch.experiment_defaults(experiment)))
    declared = sch.DECLARED[experiment]
    assert not [k for k, v in defaults.items() if v is None and k not in declared]
    assert not [k for k in declared if k not in defaults]
    validate_config(sch.experiment_defaults(experiment), experiment)
    assert sch.find_experiment(sch.experiment_defaults(experiment)) == experiment


def test_the_literal_choices_match_the_code():
    from dp_proto.anonymizer.training import MODES
    from dp_proto.experiments.data import SOURCES
    from dp_proto.lvq.losses import TRANSFER_FUNCTIONS
    from dp_proto.privacy.dpsgd_plan import CALIBRATIONS

    lvq = sch.DECLARED["lvq"]
    assert lvq["data.source"].values == SOURCES
    assert lvq["training.transfer_fn"].values == TRANSFER_FUNCTIONS
    assert lvq["privacy.calibration"].values == CALIBRATIONS
    assert sch.DECLARED["anonymizer"]["training.mode"].values == MODES


def test_other_defaults_get_the_types_of_their_values():
    defaults = {"k": 4, "rate": 0.5, "on": True, "hidden": [8], "name": None}
    assert read_config(defaults, None, ["rate=1", "name=[1]"])["name"] == [1]  # a None default: anything
    with pytest.raises(sch.ConfigTypeError, match=r"^hidden\[0\]: expected an integer, got 'x' \(str\)$"):
        read_config(defaults, None, ["hidden=[x]"])
    assert DEFAULT_CONFIG["training"]["max_epochs"] == 30  # never modified


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--config", str(Path(__file__).resolve().parents[2] / "training/configs/digits_gmlvq.yaml"), "m.x=1"],
        ["anonymize", "training.lr=fast"],
        ["llp", "llp.k=x"],
        ["svdd", "svdd.gamma=wide"],
    ],
)
def test_a_bad_config_is_refused_before_torch_is_imported(argv):
    """The one-line message comes in a fraction of a second: the config is read and
    checked before the experiment (torch, Lightning, Opacus) is imported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dp_proto.cli import main\n"
        f"rc = main({argv!r})\n"
        "heavy = sorted(m for m in ('torch', 'lightning', 'opacus') if m in sys.modules)\n"
        "print(rc, heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.startswith("dp-proto: error: ") and len(done.stderr.strip().splitlines()) == 1
