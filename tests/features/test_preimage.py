"""preimage: an image whose scattering features match a target, from the public map alone."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from dp_proto.exceptions import DataValidationError
from dp_proto.features import Scattering2D, preimage

SCATTER = Scattering2D(shape=(28, 28), J=2)


def _features(images: torch.Tensor) -> torch.Tensor:
    """Scattering, then per-record group normalisation: ``(k, 28, 28) -> (k, 3969)``."""
    coefficients = SCATTER(images).reshape(len(images), 81, -1)
    return F.group_norm(coefficients, 27).reshape(len(images), -1)


def _digits(k: int) -> torch.Tensor:
    """``k`` bundled 8 x 8 digits, upsampled to 20 x 20 and centred in 28 x 28 (MNIST's layout)."""
    X, _ = load_digits(return_X_y=True)
    small = torch.tensor(X[:k].reshape(k, 1, 8, 8) / 16, dtype=torch.float32)
    return F.pad(F.interpolate(small, size=(20, 20), mode="bilinear").squeeze(1), (4, 4, 4, 4))


def test_the_preimage_has_the_targets_features_and_looks_like_the_image():
    images = _digits(3)
    targets = _features(images)
    found = preimage(_features, targets, (28, 28), generator=torch.Generator().manual_seed(0))
    assert found.shape == (3, 28, 28) and float(found.min()) >= 0 and float(found.max()) <= 1
    relative = float((_features(found) - targets).pow(2).sum() / targets.pow(2).sum())
    assert relative < 0.05  # a blank start is at 1.0
    for a, b in zip(found, images, strict=True):
        assert np.corrcoef(a.flatten(), b.flatten())[0, 1] > 0.7


def test_bad_input_is_refused():
    targets = _features(_digits(1))
    with pytest.raises(DataValidationError, match="feature_map gives features of shape"):
        preimage(_features, targets[:, :100], (28, 28), steps=1)
    with pytest.raises(DataValidationError, match=r"\(k, F\)"):
        preimage(_features, targets[0], (28, 28), steps=1)
    with pytest.raises(DataValidationError, match="NaN"):
        preimage(_features, targets * float("nan"), (28, 28), steps=1)
    with pytest.raises(ValueError, match="lr"):
        preimage(_features, targets, (28, 28), lr=0.0)
