"""The thread policy of the fits (``dp_proto._threads``): small CPU fits run on one torch
thread, large ones keep torch's setting, ``DP_PROTO_NUM_THREADS`` overrides both, other
devices are left alone, and the previous count always comes back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dp_proto.lvq.estimators as lvq_estimators
import dp_proto.lvq.private.dpsgd as private_dpsgd
from dp_proto._threads import NUM_THREADS_ENV, SERIAL_WORK, fit_num_threads, fit_threads, step_work
from dp_proto.lvq import GLVQ, GMLVQ, PairwiseGMLVQ
from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPPairwiseGMLVQ

SMALL, BIG = 1.0, 10 * SERIAL_WORK
BEFORE = 3  # a count that no rule picks, so that a restore is visible


@pytest.fixture(autouse=True)
def _threads(monkeypatch):
    monkeypatch.delenv(NUM_THREADS_ENV, raising=False)
    original = torch.get_num_threads()
    torch.set_num_threads(BEFORE)
    yield
    torch.set_num_threads(original)


def test_small_work_runs_on_one_thread_and_restores_the_count():
    with fit_threads(SMALL, "cpu"):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == BEFORE


def test_the_count_comes_back_after_an_exception():
    with pytest.raises(RuntimeError, match="inside"), fit_threads(SMALL, torch.device("cpu")):
        assert torch.get_num_threads() == 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == BEFORE


def test_big_work_keeps_the_setting():
    assert fit_num_threads(BIG, "cpu") is None
    assert fit_num_threads(SERIAL_WORK, "cpu") is None  # the threshold itself is "big"
    assert fit_num_threads(SERIAL_WORK / 2, "cpu") == 1
    with fit_threads(BIG, "cpu"):
        assert torch.get_num_threads() == BEFORE
    assert torch.get_num_threads() == BEFORE


@pytest.mark.parametrize("work", [SMALL, BIG])
@pytest.mark.parametrize("value", ["1", "2", " 5 "])
def test_the_environment_sets_the_count_of_every_cpu_fit(monkeypatch, work, value):
    monkeypatch.setenv(NUM_THREADS_ENV, value)
    with fit_threads(work, "cpu"):
        assert torch.get_num_threads() == int(value)
    assert torch.get_num_threads() == BEFORE


def test_an_empty_environment_variable_means_unset(monkeypatch):
    monkeypatch.setenv(NUM_THREADS_ENV, "")
    assert fit_num_threads(SMALL, "cpu") == 1
    assert fit_num_threads(BIG, "cpu") is None


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "1e3"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_bad_environment_value_is_a_clear_error(monkeypatch, value, device):
    monkeypatch.setenv(NUM_THREADS_ENV, value)
    with pytest.raises(ValueError, match=f"{NUM_THREADS_ENV} must be a positive integer.*{value!r}"):
        fit_num_threads(SMALL, device)
    with pytest.raises(ValueError, match=NUM_THREADS_ENV), fit_threads(SMALL, device):
        pass  # pragma: no cover - never entered
    assert torch.get_num_threads() == BEFORE


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0), "meta"])
def test_other_devices_are_left_alone(monkeypatch, device):
    assert fit_num_threads(SMALL, device) is None
    monkeypatch.setenv(NUM_THREADS_ENV, "1")
    assert fit_num_threads(SMALL, device) is None
    with fit_threads(SMALL, device):  # nothing runs on the device
        assert torch.get_num_threads() == BEFORE


def test_nested_contexts_restore_in_order():
    with fit_threads(BIG, "cpu"):
        with fit_threads(SMALL, "cpu"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == BEFORE
    with fit_threads(SMALL, "cpu"):
        with fit_threads(BIG, "cpu"):
            assert torch.get_num_threads() == 1  # left alone: the outer fit's count
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == BEFORE


def test_overlapping_contexts_leave_the_first_count():
    """Two fits in two Python threads whose contexts interleave (enter A, enter B, exit A,
    exit B) restore the count from before A, not the 1 that B found."""
    a, b = fit_threads(SMALL, "cpu"), fit_threads(SMALL, "cpu")
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    assert torch.get_num_threads() == BEFORE


def test_step_work_counts_trainable_parameters():
    module = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 4))  # 8 + 12 parameters
    assert step_work(10, module) == 200.0
    module[1].requires_grad_(False)
    assert step_work(10, module) == 80.0


# ------------------------------------------------------------------ the estimators
def _data(n: int = 60, d: int = 3):
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], n // 3)
    return rng.uniform(-0.5, 0.5, (n, d)) + y[:, None] * 0.2, y


def _spy(monkeypatch, owner, name, seen):
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)


PRIVATE = dict(epsilon=5.0, bounds=(-1, 1), classes=[0, 1, 2], noise_seed=0)


@pytest.mark.parametrize(
    ("make", "owner", "name"),
    [
        (lambda: GLVQ(max_iter=5), lvq_estimators, "fit_lbfgs"),
        (lambda: GMLVQ(solver="adam", max_iter=2), lvq_estimators, "fit_minibatch"),
        (lambda: DPGLVQ(epochs=1, sampling_rate=0.2, **PRIVATE), private_dpsgd, "fit_dp_sgd"),
        (lambda: DPGMLVQ(epochs=1, sampling_rate=0.2, **PRIVATE), private_dpsgd, "fit_dp_sgd"),
        (lambda: PairwiseGMLVQ(max_iter=5), PairwiseGMLVQ, "_fit_pairs"),
        (lambda: PairwiseGMLVQ(max_iter=5), PairwiseGMLVQ, "_fit_calibration"),
        (
            lambda: DPPairwiseGMLVQ(sampling_rate=0.2, epochs=1, platt_sampling_rate=0.5, platt_epochs=1, **PRIVATE),
            DPPairwiseGMLVQ,
            "_fit_pairs",
        ),
        (
            lambda: DPPairwiseGMLVQ(sampling_rate=0.2, epochs=1, platt_sampling_rate=0.5, platt_epochs=1, **PRIVATE),
            DPPairwiseGMLVQ,
            "_fit_calibration",
        ),
    ],
)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_small_fit_trains_on_one_thread_and_restores_the_count(monkeypatch, make, owner, name):
    seen: list[int] = []
    _spy(monkeypatch, owner, name, seen)
    make().fit(*_data())
    assert seen == [1]
    assert torch.get_num_threads() == BEFORE
    monkeypatch.setenv(NUM_THREADS_ENV, "2")
    make().fit(*_data())
    assert seen == [1, 2]
    assert torch.get_num_threads() == BEFORE


def test_a_fit_that_raises_restores_the_count(monkeypatch):
    def boom(*args, **kwargs):
        assert torch.get_num_threads() == 1
        raise FloatingPointError("inside the training")

    monkeypatch.setattr(lvq_estimators, "fit_lbfgs", boom)
    with pytest.raises(FloatingPointError):
        GLVQ().fit(*_data())
    assert torch.get_num_threads() == BEFORE


def test_the_lightning_trainer_follows_the_rule(tmp_path, monkeypatch):
    """``dp-proto train`` and the demo: a prototype model on raw features trains on one
    thread (the demo on busy cores: 11 s instead of 129 s), a backbone keeps torch's
    setting."""
    import lightning as L

    import dp_proto.experiments.lvq as lvq_experiment

    seen = []

    class Spy(L.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(torch.get_num_threads())

    original = L.Trainer

    def trainer_with_spy(*args, **kwargs):
        return original(*args, **{**kwargs, "callbacks": [*kwargs.get("callbacks", []), Spy()]})

    monkeypatch.setattr(lvq_experiment.L, "Trainer", trainer_with_spy)
    config = {
        "data": {"subsample": 200},
        "training": {"max_epochs": 1, "progress_bar": False, "accelerator": "cpu"},
        "logging": {"log_dir": str(tmp_path)},
    }
    lvq_experiment.run_experiment(config)
    assert seen == [1] and torch.get_num_threads() == BEFORE
    defaults = lvq_experiment.DEFAULT_CONFIG
    with_backbone = {**defaults, "model": {**defaults["model"], "backbone": "cnn"}}
    work, device = lvq_experiment._thread_work(with_backbone, None, None)
    assert work == float("inf") and fit_num_threads(work, device) is None
