"""A private fit takes any record count, none included: how many records a node or a
data set holds is private, so removing the last one must not turn a fit into an error."""

import numpy as np
import pytest

from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ
from dp_proto.privacy.testing import neighbour_check


@pytest.mark.parametrize("cls", [DPGLVQ, DPGMLVQ, DPLGMLVQ])
def test_removing_the_only_record_leaves_a_fitted_model_of_the_same_shape(cls):
    def release(X, y):
        return cls(epsilon=1.0, bounds=(-1, 1), classes=[0, 1, 2], epochs=1, sampling_rate=0.5).fit(X, y)

    X, y = np.array([[0.5, -0.5, 0.25]]), np.array([2])
    report = neighbour_check(release, (X, y), removals=[0], curator_only=("curator_",))
    report.assert_ok()
    empty = release(X[:0], y[:0])
    assert empty.prototypes_.shape == (3, 3)
    assert empty.predict(X).shape == (1,)
