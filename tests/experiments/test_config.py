"""The one config loader shared by ``dp-proto train``, ``anonymize`` and ``llp``."""

from __future__ import annotations

import pytest

from dp_proto.experiments.config import merge_config, parse_override, read_config

DEFAULTS = {"seed": 0, "model": {"k": 4, "hidden": [8], "head": {"width": 2}}, "name": None}


def test_file_then_overrides_overlay_the_defaults_in_order(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {k: 8}\nname: run\n")
    config = read_config(DEFAULTS, path, ["model.k=16", "model.head.width=3", "model.hidden=[4, 4]", "name=null"])
    assert config == {"seed": 0, "model": {"k": 16, "hidden": [4, 4], "head": {"width": 3}}, "name": None}
    assert DEFAULTS["model"]["k"] == 4  # the defaults are never modified
    assert read_config(DEFAULTS) == DEFAULTS and read_config(DEFAULTS) is not DEFAULTS


def test_an_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ValueError, match="holds no settings"):
        read_config(DEFAULTS, path)


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ("model.kk=3", KeyError, "unknown config key 'model.kk'"),
        ("model=3", TypeError, "must be a mapping"),
        ("model.k", ValueError, "key.subkey=value"),
        ("model..k=3", ValueError, "key.subkey=value"),
        ("=3", ValueError, "key.subkey=value"),
    ],
)
def test_bad_overrides_are_refused(override, error, match):
    with pytest.raises(error, match=match):
        read_config(DEFAULTS, None, [override])


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(TypeError, match="must hold a mapping"):
        read_config(DEFAULTS, path)


def test_parse_override_reads_yaml_values():
    assert parse_override("a.b=1e-5") == {"a": {"b": 1e-5}}
    assert parse_override("a=true") == {"a": True}
    assert merge_config({"a": {"b": 1}}, {}) == {"a": {"b": 1}}
