"""What a ``DPPipeline`` accepts as a step (dp_proto.privacy.preprocessing): every private
estimator of the library, public maps and post-processing declared as such, and nothing
that would be fitted on the private records without noise."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.datasets import load_iris
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, Normalizer, StandardScaler

import dp_proto.lvq.private as lvq_private
import dp_proto.privacy.preprocessing as preprocessing
import dp_proto.svdd as svdd
import dp_proto.svdd.baselines as svdd_baselines
from dp_proto.exceptions import PrivacyBudgetExceededError
from dp_proto.features import GroupNormalizer
from dp_proto.lvq.private import DPGLVQ, DPGMLVQ, DPLGMLVQ, BinTraining, DPPairwiseGMLVQ, SubsampleAggregateGLVQ
from dp_proto.privacy import PrivacyLedger, SharedLedger
from dp_proto.privacy.preprocessing import DPPCA, DPPipeline, DPStandardScaler, PostProcessing, PublicMap
from dp_proto.svdd import PrivateSVDD, PrivateSVDDClassifier
from dp_proto.svdd.baselines import PrivateSVMOutput, PrivateSVMWeight

X, Y = load_iris(return_X_y=True)
CLASSES = [0, 1, 2]
DELTA = 1e-5
BUDGET = (6.0, DELTA)
# one DP-SGD recipe for the three DP-SGD estimators: the ledger calibrates its noise once
DP_SGD = dict(epsilon=2.0, delta=DELTA, bounds=(-4, 4), classes=CLASSES, epochs=1, sampling_rate=0.2)
RFF = dict(num_features=40, epsilon=2.0, random_state=0)

#: Every private estimator of the library, in a fast setting; "exact": whether its plan
#: is the very events its fit records (otherwise an upper bound of them).
PRIVATE_STEPS = {
    "DPGLVQ": (lambda: DPGLVQ(**DP_SGD), True),
    "DPGMLVQ": (lambda: DPGMLVQ(**DP_SGD), True),
    "DPLGMLVQ": (lambda: DPLGMLVQ(**DP_SGD), True),
    "SubsampleAggregateGLVQ": (
        lambda: SubsampleAggregateGLVQ(
            num_bins=5, epsilon=2.0, bounds=(-4, 4), classes=CLASSES, training=BinTraining(epochs=2)
        ),
        True,
    ),
    "SubsampleAggregateGLVQ-centre_of_attention": (
        lambda: SubsampleAggregateGLVQ(
            num_bins=5, aggregation="centre_of_attention", epsilon=2.0, delta=1e-6, bounds=(-4, 4), classes=CLASSES
        ),
        True,
    ),
    "DPPairwiseGMLVQ": (
        lambda: DPPairwiseGMLVQ(
            epsilon=2.0,
            bounds=(-4, 4),
            classes=CLASSES,
            sampling_rate=0.5,
            epochs=1,
            platt_epochs=1,
            platt_sampling_rate=0.5,
        ),
        True,
    ),
    "PrivateSVDD": (lambda: PrivateSVDD(**RFF), True),
    "PrivateSVDDClassifier": (
        lambda: PrivateSVDDClassifier(classes=CLASSES, starts="normal", n_starts=20, **RFF),
        True,
    ),
    "PrivateSVDDClassifier-grid": (
        lambda: PrivateSVDDClassifier(classes=CLASSES, starts="grid", r_max=1.0, **RFF),
        True,
    ),
    # starts="auto" picks grid or random starts by the noisy count: the votes are planned as a bound
    "PrivateSVDDClassifier-auto": (lambda: PrivateSVDDClassifier(classes=CLASSES, r_max=1.0, **RFF), False),
    "PrivateSVMWeight": (lambda: PrivateSVMWeight(classes=CLASSES, **RFF), True),
    "PrivateSVMOutput": (lambda: PrivateSVMOutput(classes=CLASSES, **RFF), True),
}
SLOW_STEPS = {"DPPairwiseGMLVQ"}  # its private Platt fit calibrates a second noise multiplier


def _step_params():
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_STEPS else name for name in PRIVATE_STEPS]


def _pipeline(model, budget=BUDGET):
    return DPPipeline(
        [
            ("log", PublicMap(FunctionTransformer(np.log1p))),
            ("scale", DPStandardScaler(bounds=(0, 3), epsilon=0.5)),
            ("model", model),
        ],
        budget=budget,
    )


class _Untouchable:
    """Stands for X: any read of it fails the test."""

    def __array__(self, *args, **kwargs):
        raise AssertionError("X was read")

    def __len__(self):
        raise AssertionError("X was read")


def test_every_private_estimator_of_the_library_is_listed_here():
    """A new private estimator (a scikit-learn estimator with an epsilon) needs a plan and a
    place in PRIVATE_STEPS."""
    found = set()
    for module in (lvq_private, svdd, svdd_baselines, preprocessing):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                not cls.__name__.startswith("_")
                and issubclass(cls, BaseEstimator)
                and "epsilon" in cls._get_param_names()
            ):
                assert callable(getattr(cls, "planned_privacy_events", None)), cls.__name__
                found.add(cls.__name__)
    listed = {name.split("-")[0] for name in PRIVATE_STEPS} | {"DPStandardScaler", "DPPCA"}
    assert found == listed


@pytest.mark.parametrize("name", _step_params())
def test_every_private_estimator_works_as_a_step_and_the_pipeline_charges_all_its_releases(name):
    make, exact = PRIVATE_STEPS[name]
    model = make()
    pipe = _pipeline(model)
    planned = pipe.planned_privacy_events(X.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the DP-SGD estimators' bounds clip, and so on
        pipe.fit(X, Y)
    assert pipe.step_roles_ == {"log": "public map", "scale": "private", "model": "private"}
    recorded = pipe.ledger_.events
    scaler = pipe.named_steps["scale"]
    assert recorded[:1] == scaler.ledger_.events
    if model.ledger_ is not pipe.ledger_:  # the model kept its own ledger: all of it is on the pipeline's
        assert recorded[1:] == model.ledger_.events
    if exact:
        assert recorded == planned
    else:
        assert [e.name for e in recorded[:2]] == [e.name for e in planned[:2]]
        assert PrivacyLedger.epsilon_of(recorded, DELTA) <= PrivacyLedger.epsilon_of(planned, DELTA) + 1e-9
    composed = pipe.ledger_.get_epsilon(DELTA)
    assert composed == pytest.approx(PrivacyLedger.epsilon_of(recorded, DELTA))
    # more than the scaler's alone, unless the model's fit releases nothing (PrivateSVMOutput)
    assert scaler.ledger_.get_epsilon(DELTA) < composed <= BUDGET[0] or recorded[1:] == ()
    assert pipe.privacy_["epsilon"] == pytest.approx(composed)
    assert pipe.predict(X[:1]).shape == (1,)  # (one query: PrivateSVMOutput charges it)


@pytest.mark.parametrize(
    "name, model",
    [
        ("PrivateSVDD", lambda: PrivateSVDD(num_features=40, epsilon=None)),
        ("PrivateSVDDClassifier", lambda: PrivateSVDDClassifier(num_features=40, classes=CLASSES, epsilon=None)),
        ("PrivateSVDDClassifier-training", lambda: PrivateSVDDClassifier(classes=CLASSES, starts="training", **RFF)),
        ("PrivateSVMWeight", lambda: PrivateSVMWeight(num_features=40, classes=CLASSES, epsilon=None)),
        ("PrivateSVMOutput", lambda: PrivateSVMOutput(num_features=40, classes=CLASSES, epsilon=None)),
    ],
)
def test_a_non_private_setting_of_a_private_estimator_is_refused_before_any_release(name, model):
    pipe = _pipeline(model())
    assert any(not e.is_private for e in pipe.planned_privacy_events(X.shape[1]))
    with pytest.raises(PrivacyBudgetExceededError, match="refused"):
        pipe.fit(X, Y)
    assert not any(hasattr(step, "ledger_") for _, step in pipe.steps)  # nothing fitted, no noise drawn


@pytest.mark.parametrize(
    "step, match",
    [
        (LogisticRegression(), "'clf' \\(LogisticRegression\\) is neither private nor declared public"),
        (StandardScaler(), "'clf' \\(StandardScaler\\) is neither private nor declared public"),
        (Pipeline([("pca", PCA(2))]), "'clf' \\(Pipeline\\) is neither private"),
        (
            PublicMap(StandardScaler()),
            "'clf': PublicMap\\(StandardScaler\\) is not fitted.*Fit it on public data first",
        ),
        (PostProcessing(PCA(2)), "'clf': PostProcessing\\(PCA\\) is not fitted"),
        (PublicMap(DPStandardScaler(bounds=(0, 8))), "DPStandardScaler is a private step: put it in the pipeline"),
        (PublicMap("passthrough"), "PublicMap needs a function"),
        (PublicMap(StandardScaler), "PublicMap needs a function"),
    ],
)
def test_a_step_that_would_learn_from_the_records_without_noise_is_refused_before_x_is_read(step, match):
    scale = ("scale", DPStandardScaler(bounds=(0, 8), epsilon=0.5))
    with pytest.raises(TypeError, match=match):  # at construction
        DPPipeline([scale, ("clf", step)], budget=(1.0, DELTA))
    pipe = DPPipeline([scale, ("clf", PublicMap(np.tanh))], budget=(1.0, DELTA))
    pipe.set_params(clf=step)  # swapped in after construction: refused when fit starts
    starts = [pipe.fit, lambda X, y: pipe.planned_privacy_events(4)]
    if hasattr(pipe, "fit_transform"):  # a final transformer
        starts.append(pipe.fit_transform)
    for start in starts:
        with pytest.raises(TypeError, match=match):
            start(_Untouchable(), Y)
    assert not hasattr(pipe.named_steps["scale"], "ledger_") and not hasattr(pipe, "ledger_")


def test_a_cache_is_refused():
    with pytest.raises(ValueError, match="takes no memory"):
        DPPipeline([("scale", DPStandardScaler(bounds=(0, 8)))], budget=(1.0, DELTA), memory="/tmp")


def test_a_step_whose_release_needs_the_public_label_set_is_refused_without_it_before_any_fit():
    for model in (SubsampleAggregateGLVQ(num_bins=5, bounds=(-4, 4)), PrivateSVMWeight(num_features=40)):
        with pytest.raises(ValueError, match="pass classes="):
            _pipeline(model).fit(X, Y)  # planning reads the width of X, nothing else
        assert not hasattr(model, "classes_") and not hasattr(model, "ledger_")


def test_public_maps_cost_nothing_and_keep_their_public_fit():
    public = np.random.default_rng(0).normal(4.0, 2.0, (50, 4))  # a public reference set
    scaler = StandardScaler().fit(public)
    model = DPGLVQ(**DP_SGD)
    steps = [
        ("log", PublicMap(FunctionTransformer(np.log1p))),  # stateless
        ("unit", PublicMap(Normalizer())),  # stateless, per record
        ("group", GroupNormalizer(channels=2, groups=1)),  # a library map that learns nothing
        ("public", PublicMap(scaler)),  # fitted on public data: never refitted
        ("slice", PublicMap(lambda Z: Z[:, :3])),  # a function; its width is probed on zeros
        ("model", model),
    ]
    pipe = DPPipeline(steps, budget=BUDGET)
    alone = DPPipeline([("model", DPGLVQ(**DP_SGD))], budget=BUDGET)
    assert pipe.planned_privacy_events(4) == alone.planned_privacy_events(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, Y)
    assert pipe.step_roles_["group"] == "public map" and pipe.step_roles_["slice"] == "public map"
    assert pipe.named_steps["public"].transformer is scaler and scaler.n_samples_seen_ == 50  # not refitted
    assert [e.name for e in pipe.ledger_.events] == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd"]
    assert pipe.ledger_.get_epsilon(DELTA) == pytest.approx(model.epsilon_)
    # model selection clones every step: the public fit survives, the pipeline stays valid
    copy = clone(pipe).named_steps["public"]
    assert copy.transformer is scaler and not hasattr(copy, "n_features_in_")
    assert PublicMap(np.tanh, output_width=7).n_features_out(4) == 7
    assert PublicMap(np.tanh, output_width=lambda d: 2 * d).n_features_out(4) == 8
    with pytest.raises(ValueError, match="pass output_width"):
        PublicMap(lambda Z: Z[:, 10]).n_features_out(4)


def test_post_processing_of_an_earlier_release_costs_nothing_here():
    shared = SharedLedger(budget=BUDGET)
    released = DPStandardScaler(bounds=(0, 8), epsilon=0.5, ledger=shared).fit(X)  # charged to shared
    pipe = DPPipeline([("scale", PostProcessing(released)), ("model", DPGLVQ(**DP_SGD))], ledger=shared)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, Y)
    assert pipe.step_roles_ == {"scale": "post-processing", "model": "private"}
    assert [e.name for e in shared.events] == [
        "dp_standard_scaler",
        "dp_init/class_counts",
        "dp_init/class_sums",
        "dp_sgd",
    ]
    np.testing.assert_array_equal(pipe[:-1].transform(X), released.transform(X))


def test_fit_transform_and_fit_predict_go_through_the_same_checks():
    steps = lambda eps: [  # noqa: E731
        ("scale", DPStandardScaler(bounds=(0, 8), epsilon=eps)),
        ("pca", DPPCA(2, epsilon=eps, norm_bound=3.0)),
    ]
    with pytest.raises(PrivacyBudgetExceededError, match="refused"):
        DPPipeline(steps(1.0), budget=(1.2, DELTA)).fit_transform(X)
    pipe = DPPipeline(steps(0.5), budget=(1.5, DELTA))
    Z = pipe.fit_transform(X)
    assert Z.shape == (150, 2) and [e.name for e in pipe.ledger_.events] == [
        "dp_standard_scaler",
        "dp_pca_second_moment",
    ]
    assert pipe.step_roles_ == {"scale": "private", "pca": "private"}
    assert not hasattr(pipe, "fit_predict")  # the final step has none


def test_the_pipeline_says_when_any_step_drew_reproducible_noise():
    fresh = DPPipeline([("scale", DPStandardScaler(bounds=(0, 8)))], budget=(2.0, DELTA)).fit(X)
    seeded = DPPipeline([("scale", DPStandardScaler(bounds=(0, 8), noise_seed=0))], budget=(2.0, DELTA)).fit(X)
    assert fresh.privacy_["noise"] == "fresh" and seeded.privacy_["noise"] == "reproducible"


def test_an_interactive_final_step_charges_every_query_to_the_pipeline():
    pipe = _pipeline(PrivateSVMOutput(classes=CLASSES, **RFF), budget=(4.0, DELTA)).fit(X, Y)
    before = pipe.privacy_["epsilon"]
    pipe.predict(X[:1])  # one query: epsilon 2 more
    assert pipe.privacy_["epsilon"] > before + 1.5 and pipe.ledger_.events[-1].name == "svm_output_queries"
    with pytest.raises(PrivacyBudgetExceededError, match="svm_output_queries"):
        pipe.predict(X[:5])
