"""Fresh attackers: grouped cross-fitting, enrolment attackers, the representation CNN."""

import numpy as np
import pytest

from dp_proto.anonymizer.evaluation import (
    ALL_ATTACKERS,
    RepresentationCNN,
    enrolled_attacker_accuracy,
    fresh_attacker_accuracy,
)


def _duplicated_records(seed: int = 0):
    """40 groups of 4 near-copies of one random point, a random binary label per group:
    the label cannot be learned from z, only matched to a copy of the same record."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, 5))
    z = np.repeat(centres, 4, axis=0) + 1e-3 * rng.standard_normal((160, 5))
    s = np.repeat(np.arange(40) % 2, 4)
    groups = np.repeat(np.arange(40), 4)
    return z, s, groups


def test_groups_keep_copies_of_a_record_on_one_side():
    z, s, groups = _duplicated_records()
    leaky = fresh_attacker_accuracy(z, s, attackers=("knn",))
    grouped = fresh_attacker_accuracy(z, s, attackers=("knn",), groups=groups)
    assert leaky.accuracy > 0.85  # 1-NN finds the copy on the other side
    assert grouped.accuracy < 0.7  # no copy across the split: about chance (0.5)
    assert grouped.n == 160


def test_groups_are_checked():
    z, s, groups = _duplicated_records()
    with pytest.raises(ValueError, match="groups must have shape"):
        fresh_attacker_accuracy(z, s, groups=groups[:-1], attackers=("knn",))
    with pytest.raises(ValueError, match="1 groups cannot fill 2 folds"):
        fresh_attacker_accuracy(z, s, groups=np.zeros(160, dtype=int), attackers=("knn",))


def test_enrolled_attackers_identify_planted_classes():
    rng = np.random.default_rng(1)
    means = 4 * rng.standard_normal((6, 3))
    s_enrol, s_test = np.arange(300) % 6, np.arange(120) % 6
    z_enrol = means[s_enrol] + rng.standard_normal((300, 3))
    z_test = means[s_test] + rng.standard_normal((120, 3))
    report = enrolled_attacker_accuracy(z_enrol, s_enrol, z_test, s_test, attackers=ALL_ATTACKERS)
    assert set(report.accuracies) == set(ALL_ATTACKERS)
    assert report.accuracy > 0.85 and report.n == 120
    assert report.chance == pytest.approx(1 / 6)
    noise = enrolled_attacker_accuracy(rng.standard_normal((300, 3)), s_enrol, z_test, s_test, attackers=("logistic",))
    assert noise.accuracy < 0.4  # representations unrelated to the label: near chance


def test_enrolled_attackers_reject_bad_input():
    z, s = np.zeros((10, 3)), np.arange(10) % 2
    with pytest.raises(ValueError, match="differ in width"):
        enrolled_attacker_accuracy(z, s, np.zeros((4, 2)), s[:4])
    with pytest.raises(ValueError, match="single private class"):
        enrolled_attacker_accuracy(z, np.zeros(10, dtype=int), z, s)
    with pytest.raises(ValueError, match="of the test records"):
        enrolled_attacker_accuracy(z, s, z, s[:-1])
    with pytest.raises(ValueError, match="no test record"):
        enrolled_attacker_accuracy(z, s, z[:0], s[:0])
    with pytest.raises(ValueError, match="unknown attacker"):
        enrolled_attacker_accuracy(z, s, z, s, attackers=("forest",))


def test_representation_cnn_learns_and_repeats_with_its_seed():
    rng = np.random.default_rng(3)
    z = rng.standard_normal((400, 8)).astype(np.float32)
    s = np.where(z[:, 2] * z[:, 5] > 0, 7, 3)  # a product of two coordinates: not linear
    first = RepresentationCNN(seed=4).fit(z[:300], s[:300])
    assert set(first.classes_) == {3, 7}
    assert first.score(z[300:], s[300:]) > 0.8
    again = RepresentationCNN(seed=4).fit(z[:300], s[:300]).predict(z[300:])
    np.testing.assert_array_equal(first.predict(z[300:]), again)
