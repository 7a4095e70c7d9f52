"""Tests of dp_proto.data.bundled."""

from __future__ import annotations

import numpy as np
import pytest

from dp_proto.data import BUNDLED_NAMES, load_bundled

SHAPES = {
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "breast_cancer": (569, 30, 2),
}


@pytest.mark.parametrize("name", BUNDLED_NAMES)
def test_load_bundled(name):
    n, d, k = SHAPES[name]
    X, y = load_bundled(name)
    assert X.shape == (n, d) and X.dtype == np.float64
    assert y.shape == (n,) and y.dtype == np.int64
    assert np.unique(y).tolist() == list(range(k))
    assert X.flags.c_contiguous and np.all(np.isfinite(X))


def test_load_bundled_name_normalisation():
    X1, y1 = load_bundled("Breast-Cancer")
    X2, y2 = load_bundled("breast_cancer")
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)


def test_load_bundled_returns_fresh_arrays():
    X, _ = load_bundled("iris")
    X[0, 0] = -123.0
    assert load_bundled("iris")[0][0, 0] != -123.0


def test_load_bundled_unknown():
    with pytest.raises(ValueError) as info:
        load_bundled("mnist")
    for name in BUNDLED_NAMES:
        assert name in str(info.value)


def test_load_bundled_not_a_string():
    with pytest.raises(TypeError):
        load_bundled(3)  # type: ignore[arg-type]
