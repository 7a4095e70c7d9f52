"""Import paths of the old layout keep working for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

MOVED_MODULES = {
    "dp_proto.privacy.dp_init": "dp_proto.lvq.private.dp_init",
    "dp_proto.privacy.dpsgd": "dp_proto.lvq.private.dpsgd",
    "dp_proto.privacy.fused_dpsgd": "dp_proto.lvq.private.fused",
    "dp_proto.privacy.grad_samplers": "dp_proto.lvq.private.grad_samplers",
    "dp_proto.privacy.aggregate": "dp_proto.lvq.private.saa",
    "dp_proto.privacy.coa": "dp_proto.lvq.private.coa",
    "dp_proto.privacy.estimators": "dp_proto.lvq.private.estimators",
    "dp_proto.privacy.bin_estimators": "dp_proto.lvq.private.saa_estimator",
    "dp_proto.llp.knn": "dp_proto._neighbours",
    "dp_proto.lightning.experiment": "dp_proto.experiments.lvq",
    "dp_proto.lightning.anonymizer_experiment": "dp_proto.experiments.anonymizer",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_moved_module_is_the_new_module(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize(
    "name",
    ["DPGLVQ", "DPGMLVQ", "DPLGMLVQ", "SubsampleAggregateGLVQ", "fit_dp_sgd", "dp_class_mean_prototypes", "coa_glvq"],
)
def test_moved_names_of_dp_proto_privacy(name):
    import dp_proto.lvq.private as new
    import dp_proto.privacy as old

    with pytest.warns(DeprecationWarning, match=f"dp_proto.privacy.{name} moved to dp_proto.lvq.private"):
        assert getattr(old, name) is getattr(new, name)


@pytest.mark.parametrize("name", ["DEFAULT_CONFIG", "load_config", "run_experiment"])
def test_the_experiment_runner_left_dp_proto_lightning(name):
    import dp_proto.experiments.lvq as new
    import dp_proto.lightning as old

    with pytest.warns(DeprecationWarning, match=f"dp_proto.lightning.{name} moved to dp_proto.experiments.lvq"):
        assert getattr(old, name) is getattr(new, name)


def test_old_style_imports_still_work():
    sys.modules.pop("dp_proto.privacy.estimators", None)
    with pytest.warns(DeprecationWarning):
        from dp_proto.privacy.estimators import DPGMLVQ
    from dp_proto.lvq.private import DPGMLVQ as current

    assert DPGMLVQ is current
    with pytest.warns(DeprecationWarning):
        from dp_proto.privacy.audit import saa_audit_setup
    from dp_proto.lvq.private.audit import saa_audit_setup as current_setup

    assert saa_audit_setup is current_setup


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("dp_proto.data.files", "load_mnist", "dp_proto.data.loaders.mnist"),
        ("dp_proto.data.files", "DATA_DIR_ENV_VAR", "dp_proto.data.loaders.common"),
        ("dp_proto.data.faces", "load_yale_faces", "dp_proto.data.loaders.images"),
        ("dp_proto.data.faces", "make_entangled_task", "dp_proto.data.synthetic.entangled"),
        ("dp_proto.data.traffic", "load_scats_counts", "dp_proto.data.loaders.scats"),
        ("dp_proto.data.traffic", "node_datasets", "dp_proto.data.sensors"),
        ("dp_proto.data.traffic", "nearest_neighbours", "dp_proto.data.geometry"),
        ("dp_proto.data.synthetic", "load_shuttle_3class", "dp_proto.data.loaders.uci"),
        ("dp_proto.data.synthetic", "stratified_subsample", "dp_proto.data.sampling"),
    ],
)
def test_the_data_modules_split_by_kind_keep_their_old_names(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}"):
        assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_unknown_names_still_raise():
    import dp_proto.privacy

    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        dp_proto.privacy.not_a_name  # noqa: B018


@pytest.mark.parametrize("package", ["dp_proto.data", "dp_proto.data.traffic"])
def test_time_batches_moved_to_the_llp_grid(package):
    from dp_proto.llp.grid import time_batches

    module = importlib.import_module(package)
    with pytest.warns(DeprecationWarning, match=f"{package}.time_batches moved to dp_proto.llp.grid"):
        assert module.time_batches is time_batches


def test_llp_estimator_seed_is_now_clipped():
    import torch

    from dp_proto.llp import private_label_proportions

    counts = torch.tensor([[3.0, 1.0], [0.0, 4.0]])
    with pytest.warns(DeprecationWarning, match="estimator='seed' is now called 'clipped'"):
        old = private_label_proportions(counts, None, estimator="seed")
    assert torch.equal(old.proportions, private_label_proportions(counts, None, estimator="clipped").proportions)


@pytest.mark.slow
def test_python_m_llp_distributed_runs_dp_proto_llp():
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "dp_proto.llp.distributed", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "dp-proto llp" in done.stdout and "--distributed" in done.stdout
    assert "DeprecationWarning" in done.stderr and "dp-proto llp --distributed" in done.stderr


def test_renamed_dp_sgd_arguments_warn_for_one_release():
    from dp_proto.lightning import DPLVQModule
    from dp_proto.lvq import GMLVQLayer, PrototypeModel
    from dp_proto.privacy import PrivacyLedger

    def module(**kwargs):
        return DPLVQModule(
            PrototypeModel(GMLVQLayer(2, 2), [0, 1]),
            ledger=PrivacyLedger(),
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            expected_batch_size=5.0,
            **kwargs,
        )

    with pytest.warns(DeprecationWarning, match="sample_rate= is now called sampling_rate="):
        old = module(sample_rate=0.1)
    assert old.sampling_rate == 0.1 == old.sample_rate
    with pytest.raises(TypeError, match="pass sampling_rate= only"):
        module(sampling_rate=0.1, sample_rate=0.1)
    with pytest.raises(TypeError, match="missing the argument sampling_rate="):
        module()
    import torch

    with pytest.warns(DeprecationWarning, match="noise_generator= is now called generator="):
        module(sampling_rate=0.1, noise_generator=torch.Generator())
    assert "generator" not in module(sampling_rate=0.1).hparams  # never a hyperparameter


def test_the_old_secure_keyword_still_works_with_a_warning():
    """``secure=`` became ``secure_mode=`` across the library (one name per concept)."""
    from dp_proto.privacy import gaussian_noise, noisy_count

    with pytest.warns(DeprecationWarning, match="secure= is now called secure_mode="):
        noise = gaussian_noise((3,), 1.0, secure=True)
    assert noise.shape == (3,)
    with pytest.raises(TypeError, match="pass secure_mode= only"):
        noisy_count(5, 1.0, secure=True, secure_mode=True, ledger=None)
