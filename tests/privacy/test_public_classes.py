"""``public_classes``: the label set of a private fit comes from the public ``classes``."""

import numpy as np
import pytest

from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.privacy.domain import public_classes


def test_indices_point_into_the_sorted_public_set_and_absent_classes_stay():
    classes, index = public_classes(np.array(["b", "d", "b"]), ["d", "a", "b", "c"], "M")
    assert classes.tolist() == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(classes[index], ["b", "d", "b"])
    # an empty y or a single observed class is fine once the set is public
    assert public_classes(np.array([], dtype=int), [0, 1], "M")[1].shape == (0,)
    assert public_classes(np.array([1, 1]), [0, 1], "M")[1].tolist() == [1, 1]


def test_reading_the_set_from_the_private_labels_warns():
    with pytest.warns(PrivacyLeakWarning, match="M: classes=None"):
        classes, index = public_classes(np.array([3, 1, 3]), None, "M")
    assert classes.tolist() == [1, 3] and index.tolist() == [1, 0, 1]
    with pytest.warns(PrivacyLeakWarning), pytest.raises(ValueError, match="at least 2 classes"):
        public_classes(np.array([1, 1]), None, "M")


@pytest.mark.parametrize(
    "classes, error, match",
    [
        ([0, 1, 1], ValueError, "repeated"),
        ([0], ValueError, "at least 2 public classes"),
        ([[0, 1], [2, 3]], ValueError, "1-D"),
        ([0, 2], DataValidationError, "labels outside the public classes"),
    ],
)
def test_bad_public_sets_and_unknown_labels_are_refused(classes, error, match):
    with pytest.raises(error, match=match):
        public_classes(np.array([0, 1, 2]), classes, "M")
