"""scikit-learn estimators: API compliance, accuracy floors, round trips, bad input."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dp_proto.exceptions import DataValidationError
from dp_proto.lvq import GLVQ, GMLVQ, LGMLVQ

ESTIMATORS = [GLVQ, GMLVQ, LGMLVQ]


@parametrize_with_checks([GLVQ(max_iter=50), GMLVQ(max_iter=50), LGMLVQ(max_iter=50)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _split(loader, seed=0):
    X, y = loader(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)


# Floors well below what the models reach (digits: about 0.93 / 0.96 / 0.96), so a
# broken optimiser or distance fails them while seed noise does not.
@pytest.mark.parametrize(
    "cls, loader, floor",
    [
        (GLVQ, load_iris, 0.8),
        (GMLVQ, load_iris, 0.9),
        (LGMLVQ, load_iris, 0.85),
        (GLVQ, load_wine, 0.9),
        (GMLVQ, load_wine, 0.9),
        (LGMLVQ, load_wine, 0.85),
        (GLVQ, load_digits, 0.88),
        (GMLVQ, load_digits, 0.92),
        pytest.param(LGMLVQ, load_digits, 0.9, marks=pytest.mark.slow),
    ],
)
def test_accuracy_floor_on_bundled_data(cls, loader, floor):
    Xtr, Xte, ytr, yte = _split(loader)
    model = make_pipeline(StandardScaler(), cls(random_state=0)).fit(Xtr, ytr)
    assert model.score(Xte, yte) >= floor


@pytest.mark.parametrize("solver", ["adam", "sgd"])
def test_minibatch_solvers_learn(solver):
    Xtr, Xte, ytr, yte = _split(load_iris)
    model = make_pipeline(
        StandardScaler(), GMLVQ(solver=solver, max_iter=60, lr=0.05, batch_size=16, random_state=0)
    ).fit(Xtr, ytr)
    assert model.score(Xte, yte) >= 0.85
    assert np.isclose(np.trace(model[-1].lambda_), 1.0)


def test_fitted_attributes_and_string_labels():
    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    model = GMLVQ(prototypes_per_class={"virginica": 2}, rank=2, random_state=0).fit(X, names)
    assert model.prototypes_.shape == (4, 4)
    assert model.prototype_labels_.tolist() == ["setosa", "versicolor", "virginica", "virginica"]
    assert model.omega_.shape == (2, 4) and model.lambda_.shape == (4, 4)
    assert set(model.predict(X)) <= set(names)
    scores = model.decision_function(X[:5])
    assert scores.shape == (5, 3)
    assert (model.classes_[scores.argmax(1)] == model.predict(X[:5])).all()
    local = LGMLVQ(rank=3, random_state=0).fit(X, y)
    assert local.omega_.shape == (3, 3, 4) and local.lambda_.shape == (3, 4, 4)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_round_trip_pickle_clone_and_seed(cls):
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = cls(prototypes_per_class=2, random_state=7, max_iter=100)
    a = est.fit(X, y)
    restored = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(restored.predict(X), a.predict(X))
    b = clone(est).fit(X, y)
    np.testing.assert_allclose(b.prototypes_, a.prototypes_)
    assert clone(est).get_params() == est.get_params()


class TestBadInput:
    X, y = load_iris(return_X_y=True)

    def test_nan_and_inf_rows_are_named(self):
        X = self.X.copy()
        X[3, 1] = np.nan
        X[17, 0] = np.inf
        with pytest.raises(DataValidationError, match=r"NaN and inf in row\(s\) \[3, 17\]"):
            GLVQ().fit(X, self.y)
        model = GLVQ(max_iter=20).fit(self.X, self.y)
        with pytest.raises(DataValidationError, match=r"row\(s\) \[3, 17\]"):
            model.predict(X)

    def test_unseen_labels_at_score_time(self):
        model = GLVQ(max_iter=20).fit(self.X, self.y)
        y = self.y.copy()
        y[0] = 7
        with pytest.raises(DataValidationError, match=r"label\(s\) \[7\] that were not seen"):
            model.score(self.X, y)

    def test_wrong_number_of_features(self):
        model = GMLVQ(max_iter=20).fit(self.X, self.y)
        with pytest.raises(ValueError, match="X has 3 features, but GMLVQ is expecting 4"):
            model.predict(self.X[:, :3])

    def test_class_without_samples(self):
        with pytest.raises(DataValidationError, match=r"class\(es\) \[5\] that have no samples"):
            GLVQ(prototypes_per_class={5: 2}).fit(self.X, self.y)

    def test_fewer_samples_than_prototypes(self):
        with pytest.raises(DataValidationError, match="fewer samples"):
            GLVQ(prototypes_per_class=3).fit(self.X[[0, 50, 100, 1]], self.y[[0, 50, 100, 1]])
        with pytest.raises(DataValidationError, match="fewer samples than prototypes"):
            GLVQ(prototypes_per_class={2: 2}).fit(self.X[[0, 1, 50, 51, 100]], self.y[[0, 1, 50, 51, 100]])

    def test_non_numeric_X(self):
        X = self.X.astype(object)
        X[4, 2] = "abc"
        with pytest.raises(DataValidationError, match="X must be numeric"):
            GLVQ().fit(X, self.y)

    def test_single_class(self):
        with pytest.raises(ValueError, match="at least 2 classes"):
            GLVQ().fit(self.X[:50], self.y[:50])

    @pytest.mark.parametrize(
        "params, message",
        [
            ({"solver": "newton"}, "solver"),
            ({"max_iter": 0}, "max_iter"),
            ({"lr": -1.0}, "lr"),
            ({"dtype": "float16"}, "dtype"),
            ({"prototypes_per_class": 0}, "at least one prototype"),
            ({"transfer_fn": "tanh"}, "transfer"),
        ],
    )
    def test_bad_parameters(self, params, message):
        with pytest.raises(ValueError, match=message):
            GLVQ(**params).fit(self.X, self.y)


def test_lbfgs_stopping_at_max_iter_warns_convergence():
    from sklearn.datasets import load_iris
    from sklearn.exceptions import ConvergenceWarning

    X, y = load_iris(return_X_y=True)
    with pytest.warns(ConvergenceWarning, match=r"GLVQ: L-BFGS stopped at max_iter=2 iterations without converging"):
        GLVQ(max_iter=2).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert GLVQ().fit(X, y).n_iter_ < 500  # converges: no warning
        GLVQ(solver="adam", max_iter=2).fit(X, y)  # fixed epochs: no convergence test, no warning


def test_verbose_shows_a_progress_bar_on_stderr_only(capsys, monkeypatch):
    """verbose=1: a tqdm bar on stderr (shown after two seconds; the delay is removed
    here), nothing on stdout; verbose=0 (the default): nothing at all."""
    import tqdm.auto

    from dp_proto.lvq import training
    from dp_proto.privacy import dpsgd_plan

    for module in (training, dpsgd_plan):
        monkeypatch.setattr(module, "tqdm", lambda *a, **k: tqdm.auto.tqdm(*a, **{**k, "delay": 0}))
    from sklearn.datasets import load_iris

    from dp_proto.lvq.private import DPGLVQ

    X, y = load_iris(return_X_y=True)
    for est, label in [
        (GLVQ(verbose=1), "L-BFGS"),
        (GMLVQ(solver="adam", max_iter=3, verbose=1), "adam"),
        (DPGLVQ(bounds=(0, 8), classes=[0, 1, 2], sampling_rate=0.1, epochs=2, verbose=1), "DP-SGD"),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        out, err = capsys.readouterr()
        assert label in err and out == ""
        est.set_params(verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        out, err = capsys.readouterr()
        assert label not in err and out == ""
