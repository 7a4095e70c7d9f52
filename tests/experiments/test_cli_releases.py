"""A private ``dp-proto svdd`` / ``dp-proto anonymize`` run writes its release and prints
where; the runners validate a config built in code like the CLI does.

(``dp-proto train``: ``tests/lightning/test_module_and_cli.py``; ``dp-proto llp``:
``tests/llp/test_cli.py``.)
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import dp_proto
from dp_proto.cli import main
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.experiments.config import ConfigTypeError


def _capture(monkeypatch, module, name: str) -> list[dict]:
    """Replace ``module.name`` (a runner) by a wrapper that keeps every result."""
    runs: list[dict] = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda config: runs.append(real(config)) or runs[-1])
    return runs


def _no_seed_no_path(release_dir: Path, tmp_path: Path, seed: int) -> dict:
    """The manifest, checked for the noise seed and local paths."""
    text = (release_dir / "manifest.json").read_text()
    assert str(seed) not in text and str(tmp_path) not in text  # no noise seed, no local path
    return json.loads(text)


# A quick private SVDD fit: iris, whose features lie in [0, 8] (a public range).
SVDD_ARGS = [
    "data.scaling=none",
    "privacy.epsilon=2",
    "privacy.bounds=[0, 8]",
    "privacy.classes=[0, 1, 2]",
    "privacy.noise_seed=31337",
    "svdd.gamma=10",
    "svdd.num_features=100",
    "svdd.n_starts=50",
    "svdd.max_starts=100",
]


def test_private_svdd_writes_a_release_that_predicts_like_the_estimator(tmp_path, capsys, monkeypatch):
    import dp_proto.experiments.svdd as svdd_experiment
    from dp_proto.experiments.svdd import SVDD_PRIVACY_SCOPE, _split_and_scale

    runs = _capture(monkeypatch, svdd_experiment, "run_svdd_experiment")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the noise seed (reproducible test)
        assert main(["svdd", "--log-dir", str(tmp_path), *SVDD_ARGS]) == 0
    (result,) = runs
    release_dir = Path(result["release_dir"])
    assert release_dir == (tmp_path / "iris_svdd" / "version_0" / "release").resolve()
    out = capsys.readouterr().out
    assert f"release    {release_dir}" in out and f"dp_proto.load_release('{release_dir}')" in out
    assert {p.name for p in release_dir.iterdir()} == {"README.md", "manifest.json", "model.safetensors"}
    manifest = _no_seed_no_path(release_dir, tmp_path, 31337)
    source = manifest["source"]
    assert source["command"] == "dp-proto svdd" and source["privacy_scope"] == SVDD_PRIVACY_SCOPE
    assert "noise_seed" not in source["config"]["privacy"] and "data_dir" not in source["config"]["data"]
    assert "log_dir" not in source["config"]["logging"] and source["config"]["privacy"]["bounds"] == [0, 8]

    loaded = dp_proto.load_release(release_dir)
    estimator = result["estimator"]
    assert type(loaded) is type(estimator) and loaded.ledger_.get_epsilon(0.0) == pytest.approx(result["epsilon"])
    x_train, x_test, _, _ = _split_and_scale(result["config"], private=True)  # the model's input scale
    for x in (x_train, x_test):
        np.testing.assert_array_equal(loaded.predict(x), estimator.predict(x))

    # --json has the path; a second run gets the next version
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        assert main(["svdd", "--json", "--log-dir", str(tmp_path), *SVDD_ARGS]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["release_dir"] == str((tmp_path / "iris_svdd" / "version_1" / "release").resolve())


def test_a_non_private_svdd_run_writes_its_logs_and_no_release(tmp_path, monkeypatch):
    from dp_proto.experiments.svdd import run_svdd_experiment

    monkeypatch.chdir(tmp_path)
    result = run_svdd_experiment({"svdd": {"num_features": 100}})
    assert result["release_dir"] is None and result["epsilon"] is None
    run = tmp_path / "runs" / "iris_svdd" / "version_0"
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_dir()] == [
        Path("runs"),
        Path("runs/iris_svdd"),
        Path("runs/iris_svdd/version_0"),
    ]
    assert any(p.name.startswith("events.out.tfevents") for p in run.iterdir())


# A quick DP anonymizer: 400 synthetic records, three one-epoch phases.
ANONYMIZE_ARGS = [
    "--no-progress",
    "privacy.epsilon=2",
    "privacy.sampling_rate=0.1",
    "privacy.noise_seed=4242",
    "data.synthetic.n=400",
    "training.pretrain_regular_epochs=1",
    "training.pretrain_private_epochs=1",
    "training.adversarial_epochs=1",
    "logging.name=dp_anon",
]


@pytest.mark.slow
def test_dp_anonymize_writes_the_encoder_release(tmp_path, capsys, monkeypatch):
    import dp_proto.experiments.anonymizer as anonymizer_experiment
    from dp_proto.anonymizer.release import DPAnonymizerEncoder
    from dp_proto.data import make_entangled_task

    runs = _capture(monkeypatch, anonymizer_experiment, "run_anonymizer_experiment")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the noise seed (reproducible test)
        assert main(["anonymize", "--log-dir", str(tmp_path), *ANONYMIZE_ARGS]) == 0
    (result,) = runs
    release_dir = Path(result["release_dir"])
    assert release_dir == (tmp_path / "dp_anon" / "version_0" / "release").resolve()
    assert release_dir.parent == Path(result["log_dir"]).resolve()  # beside the TensorBoard logs
    out = capsys.readouterr().out
    assert f"release (encoder)     {release_dir}" in out and "-DP, certified by the ledger" in out
    manifest = _no_seed_no_path(release_dir, tmp_path, 4242)
    source = manifest["source"]
    assert source["command"] == "dp-proto anonymize" and "settings" in source  # the encoder's own source kept
    assert "seed" not in source["config"] and "noise_seed" not in source["config"]["privacy"]
    assert "log_dir" not in source["config"]["logging"] and "path" not in source["config"]["data"]
    assert result["epsilon"] == pytest.approx(2.0, rel=0.01) and result["epsilon"] <= 2.0

    loaded = dp_proto.load_release(release_dir)
    assert isinstance(loaded, DPAnonymizerEncoder)
    assert loaded.ledger_.get_epsilon(1e-5) == pytest.approx(result["epsilon"])
    x = make_entangled_task(seed=0, n=400, num_regular=4, num_private=8, entanglement=0.5, dim=20).x
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    encoder = result["fit"].module.anonymizer.encoder.cpu().eval()
    with torch.no_grad():
        expected = encoder(x).numpy()
    np.testing.assert_allclose(loaded.transform(x), expected, rtol=1e-6, atol=1e-6)

    assert main(["anonymize", "--json", "--log-dir", str(tmp_path), *ANONYMIZE_ARGS[:-1]]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["release_dir"].endswith("version_0/release") and "ledger" not in summary
    assert summary["train_records"] is None and summary["held_out_records"] == 200  # n is private


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["training.restarts=2"], "training.restarts must be 1"),
        (["training.mode=simultaneous"], "needs training.mode: toggle"),
        (["privacy.num_private=eight"], "privacy.num_private: expected an integer or null, got 'eight' (str)"),
    ],
)
def test_dp_anonymize_refuses_what_it_cannot_run(tmp_path, capsys, override, message):
    assert main(["anonymize", "--log-dir", str(tmp_path), *ANONYMIZE_ARGS, *override]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ runners validate


def test_run_experiment_validates_a_config_built_in_code(tmp_path):
    from dp_proto.experiments.lvq import run_experiment

    config = {"training": {"max_epochs": "ten"}, "logging": {"log_dir": str(tmp_path)}}
    with pytest.raises(ConfigTypeError, match=r"^training.max_epochs: expected an integer, got 'ten' \(str\)$"):
        run_experiment(config)
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


def test_run_svdd_experiment_validates_a_config_built_in_code():
    from dp_proto.experiments.svdd import run_svdd_experiment

    with pytest.raises(ConfigTypeError, match=r"^svdd.gamma: expected a number, got 'wide' \(str\)$"):
        run_svdd_experiment({"svdd": {"gamma": "wide"}})


def test_run_llp_experiment_validates_a_config_built_in_code():
    from dp_proto.experiments.llp import run_llp_experiment

    with pytest.raises(ConfigTypeError, match=r"^llp.k: expected an integer, got 4.5 \(float\)$"):
        run_llp_experiment({"llp": {"k": 4.5}})


def test_run_anonymizer_experiment_validates_a_config_built_in_code(tmp_path):
    from dp_proto.experiments.anonymizer import run_anonymizer_experiment

    config = {"training": {"lam": "high"}, "logging": {"log_dir": str(tmp_path)}}
    with pytest.raises(ConfigTypeError, match=r"^training.lam: expected a number, got 'high' \(str\)$"):
        run_anonymizer_experiment(config)
    assert list(tmp_path.iterdir()) == []
