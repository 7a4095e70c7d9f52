"""Asking for a GPU this machine lacks: one clear line, before any data is read."""

import numpy as np
import pytest
import torch

from dp_proto._validation import torch_device
from dp_proto.lvq import GMLVQ
from dp_proto.lvq.private import DPGMLVQ
from dp_proto.svdd import PrivateSVDDClassifier


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_missing_cuda_device_is_named(no_cuda):
    with pytest.raises(ValueError, match="asks for a CUDA GPU, but torch sees none"):
        torch_device("cuda")
    with pytest.raises(ValueError, match="device must be a torch device"):
        torch_device("gpu0")
    assert torch_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize(
    "estimator",
    [
        GMLVQ(device="cuda"),
        DPGMLVQ(device="cuda", bounds=(0, 1), classes=[0, 1]),
        PrivateSVDDClassifier(device="cuda", bounds=(0, 1), classes=[0, 1]),
    ],
    ids=["GMLVQ", "DPGMLVQ", "PrivateSVDDClassifier"],
)
def test_estimators_refuse_a_missing_gpu_with_one_line(estimator, no_cuda):
    X = np.random.default_rng(0).random((20, 3))
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match="CUDA GPU") as caught:
        estimator.fit(X, y)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("experiment", ["lvq", "anonymizer"])
def test_a_config_asking_for_a_missing_gpu_is_one_config_error(experiment, no_cuda):
    from dp_proto.experiments.anonymizer import run_anonymizer_experiment
    from dp_proto.experiments.lvq import run_experiment
    from dp_proto.experiments.schema import ConfigError

    run = run_experiment if experiment == "lvq" else run_anonymizer_experiment
    with pytest.raises(ConfigError, match="training.accelerator: 'gpu' asks for a CUDA GPU"):
        run({"training": {"accelerator": "gpu"}})
