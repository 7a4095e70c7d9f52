"""ArrayDataModule: stratified splits, preprocessing fitted on the training split only."""

import numpy as np
import pytest

from dp_proto.exceptions import DataValidationError
from dp_proto.lightning import ArrayDataModule


def _data(n=200, d=5, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.array(["a", "b"]), n // 2)
    X = rng.normal(size=(n, d)) * 3 + 10 + (y == "b")[:, None]
    return X, y


def test_splits_are_disjoint_stratified_and_cover_everything():
    X, y = _data()
    dm = ArrayDataModule(X, y, val_size=0.1, test_size=0.2, seed=1)
    dm.setup()
    sizes = {k: len(v) for k, v in dm.splits.items()}
    assert sizes == {"train": 140, "val": 20, "test": 40}
    for split in dm.splits.values():
        assert split.tensors[1].float().mean() == pytest.approx(0.5)
    assert dm.classes_.tolist() == ["a", "b"] and dm.num_features == 5


def test_scaling_is_fitted_on_training_split_only():
    X, y = _data()
    dm = ArrayDataModule(X, y, scaling="standard", seed=0)
    x_train, _ = dm.train_tensors()
    assert x_train.mean(0).abs().max() < 1e-5
    assert (x_train.std(0, unbiased=False) - 1).abs().max() < 1e-4
    x_test = dm.splits["test"].tensors[0]
    assert x_test.mean(0).abs().max() > 1e-3  # test data were not used to fit
    raw = dm.inverse_transform(dm.transform(X[:4]))
    np.testing.assert_allclose(raw.numpy(), X[:4], rtol=1e-5)


def test_minmax_pca_and_image_shapes():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 255, size=(100, 1, 6, 6)).astype(np.uint8)
    y = np.arange(100) % 4
    dm = ArrayDataModule(X, y, scaling="minmax", val_size=0.0)
    x_train, _ = dm.train_tensors()
    assert x_train.shape[1:] == (1, 6, 6) and x_train.min() >= -1 and x_train.max() <= 1
    assert len(dm.splits["val"]) == 0
    dm = ArrayDataModule(X.reshape(100, -1), y, pca=5)
    assert dm.train_tensors()[0].shape[1] == 5 and dm.num_features == 5


def test_full_batch_loader():
    X, y = _data()
    dm = ArrayDataModule(X, y, batch_size=None)
    batches = list(dm.train_dataloader())
    assert len(batches) == 1 and len(batches[0][0]) == len(dm.splits["train"])


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"val_size": 0.6, "test_size": 0.5}, ValueError, "val_size \\+ test_size"),
        ({"scaling": "robust"}, ValueError, "scaling"),
        ({"batch_size": 0}, ValueError, "batch_size"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    X, y = _data()
    with pytest.raises(error, match=message):
        ArrayDataModule(X, y, **kwargs)


def test_bad_data():
    X, y = _data()
    X[5, 2] = np.nan
    with pytest.raises(DataValidationError, match=r"row\(s\) \[5\]"):
        ArrayDataModule(X, y)
    with pytest.raises(DataValidationError, match="numeric"):
        ArrayDataModule(np.array([["a", "b"], ["c", "d"]]), np.array([0, 1]))
    with pytest.raises(DataValidationError, match="2 classes"):
        ArrayDataModule(_data()[0], np.zeros(200))
