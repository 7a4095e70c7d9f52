"""Scikit-learn estimator for the bin-based DP-LVQ schemes: subsample-and-aggregate
(``dp_proto.lvq.private.saa``) and the centre of attention (``dp_proto.lvq.private.coa``).

Both train vanilla GLVQ on ``num_bins`` disjoint random bins of the private data and
release one private aggregate of the bins' models; the released model carries its
ledger like the DP-SGD estimators (``privacy_``, ``ledger_``, ``epsilon_``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from dp_proto._validation import torch_device, torch_dtype
from dp_proto.lvq.estimators import GLVQ
from dp_proto.lvq.init import make_prototype_labels
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.private.aggregate import BinTraining, SubsampleAggregate
from dp_proto.lvq.private.estimators import FIT_SCOPE, _PrivateLVQ
from dp_proto.privacy.curator import curator_attach, curator_log
from dp_proto.privacy.events import PrivacyEvent
from dp_proto.privacy.randomness import noise_generator
from dp_proto.privacy.session import record_fit
from dp_proto.release import register_model

__all__ = ["SubsampleAggregateGLVQ"]


@register_model("dp_proto.SubsampleAggregateGLVQ")
class SubsampleAggregateGLVQ(_PrivateLVQ, GLVQ):
    """Differentially private GLVQ from ``num_bins`` disjoint bins of the data.

    Every record gets an i.i.d. uniform bin label; vanilla GLVQ (Adam, ``epochs``) runs
    on every bin, all bins as one batched computation; the bins' prototypes are
    projected into the public domain and aggregated:

    * ``aggregation="mean"`` (subsample-and-aggregate): the per-prototype mean over bins
      plus discrete Gaussian noise on a public grid for the sensitivity ``min(2 sqrt(W d), 2 radius sqrt(W))``
      of the sum (W prototypes, d features, domain ``[-1, 1]^d`` after ``bounds``);
    * ``aggregation="centre_of_attention"``: the smooth-sensitivity release of the bin
      model with the smallest ``t0``-radius (Nissim, Raskhodnikova and Smith). Its noise
      is of the order of the domain unless epsilon is large and the dimension small.

    Parameters
    ----------
    prototypes_per_class : int or mapping class -> int, default 1
        With several prototypes for a class, ``reference`` is required.
    num_bins : int, default 50
        ``m`` (public). More bins: less noise on the mean (``1/m``), fewer records per bin.
        Choose it from a public estimate of the data size: with ``m`` above the number of
        records some bins are empty and contribute their data-free start (the box centre)
        to the mean. The estimator cannot warn about that: whether ``m`` exceeds the
        record count depends on one record, so a warning would be a release of its own.
        The number of empty bins is curator-only (``curator_["empty_bins"]``, and a
        message on the ``dp_proto.curator`` logger).
    aggregation : {"mean", "centre_of_attention"}, default "mean"
        Subsample-and-aggregate, or the centre of attention.
    epsilon : float, default 1.0
        Budget of the single release.
    delta : float, default 1e-5
        The ``delta`` of the ``(epsilon, delta)`` guarantee.
    bounds : (lower, upper) or None
        Public bounds of the features, mapped onto ``[-1, 1]`` (records outside are
        clipped and counted); ``None``: the data are in ``[-1, 1]^d`` already.
    classes : array-like or None
        The public set of class labels; ``None`` reads it from ``y`` with a
        ``PrivacyLeakWarning`` (see ``DPGLVQ``).
    radius : float or None
        Also project every bin prototype onto the l2 ball of this radius (in the mapped
        ``[-1, 1]^d`` units) around the origin; a public choice that holds the class
        prototypes cuts the noise by up to ``sqrt(d)`` times.
    reference : array (W, d) or None
        Public prototypes, in feature units and in the order of the classes, to which
        each bin's prototypes of a class are matched (several prototypes per class).
    training : BinTraining or None
        GLVQ with Adam on every bin: ``BinTraining(epochs=30, batch_size=64, lr=0.01)``
        (None: those defaults).
    secure_mode : bool, default False
        Bin labels, shuffles and noise from ``os.urandom`` directly.
    noise_seed : int or None, default None
        None (the default): bin labels, shuffles and noise from a generator seeded with
        fresh operating-system entropy. An int reproduces the whole private fit exactly:
        for tests and benchmarks only (warns ``PrivacyLeakWarning``; the ledger's summary
        says ``"noise": "reproducible"``).
    random_state : ignored
        Kept for scikit-learn compatibility: every random choice of this estimator
        touches the release, so none of it may come from a public seed.
    device : str, default "cpu"
        Torch device of the bins' training.
    dtype : {"float64", "float32"}, default "float64"
        Torch dtype of the bins' training.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels (``classes``, sorted).
    prototypes_ : ndarray (W, d)
        Released prototypes, in the original feature units.
    prototype_labels_ : ndarray (W,)
        Class label of every prototype.
    epsilon_ : float
        What the ledger certifies at ``delta``.
    privacy_ : dict
        The ledger's summary.
    ledger_ : PrivacyLedger
        The run's one release.
    noise_std_ : float
        ``aggregation="mean"`` only: the noise std per coordinate of the mean, in the
        mapped units (public).
    model_ : PrototypeModel
        The released model (in the mapped units).
    privacy_scope_ : str
        What the guarantee covers (the records passed to ``fit``).
    curator_ : dict
        Curator-only, outside the guarantee (how many records were clipped into the
        domain, how many bins stayed empty): ``del est.curator_`` before pickling a
        fitted estimator; ``save_release`` leaves it out.

    References
    ----------
    Brinkrolf, Göpfert & Hammer (2019). Differential privacy for learning vector
    quantization. *Neurocomputing* 342.

    Nissim, Raskhodnikova & Smith (2007). Smooth sensitivity and sampling in private
    data analysis. *STOC 2007*.

    Examples
    --------
    >>> from dp_proto.data import three_gaussians
    >>> from dp_proto.lvq.private import BinTraining, SubsampleAggregateGLVQ
    >>> X, y = three_gaussians(n_per_class=300, random_state=0)
    >>> est = SubsampleAggregateGLVQ(num_bins=10, epsilon=1.0, bounds=(-10, 10), classes=[0, 1, 2], training=BinTraining(epochs=5))
    >>> est.fit(X, y).prototypes_.shape, est.epsilon_ <= 1.0
    ((3, 2), True)
    """

    _RELEASE_FITTED: ClassVar[tuple[str, ...]] = ("n_iter_", "noise_std_", "epsilon_")

    def __init__(
        self,
        prototypes_per_class=1,
        *,
        num_bins=50,
        aggregation="mean",
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        classes=None,
        radius=None,
        reference=None,
        training=None,
        secure_mode=False,
        noise_seed=None,
        random_state=None,
        device="cpu",
        dtype="float64",
    ):
        self.prototypes_per_class = prototypes_per_class
        self.num_bins = num_bins
        self.aggregation = aggregation
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.classes = classes
        self.radius = radius
        self.reference = reference
        self.training = training
        self.secure_mode = secure_mode
        self.noise_seed = noise_seed
        self.random_state = random_state
        self.device = device
        self.dtype = dtype

    def aggregation_recipe(self) -> SubsampleAggregate:
        """The run's public recipe (checks the settings; built from the parameters, before
        any data are seen)."""
        return SubsampleAggregate(
            self.epsilon,
            self.delta,
            num_bins=self.num_bins,
            aggregation=self.aggregation,
            training=BinTraining() if self.training is None else self.training,
            radius=self.radius,
            secure_mode=self.secure_mode,
        )

    def _validate_params(self) -> None:
        torch_dtype(self.dtype)
        torch_device(self.device)
        self.aggregation_recipe()

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The release ``fit`` makes on ``n_features`` features, from public settings only
        (``DPPipeline`` checks it against its budget before anything is fitted): the
        discrete Gaussian release of the bins' mean, whose sensitivity needs the number of
        prototypes and so the public label set ``classes``, or the centre of attention's
        ``(epsilon, delta)`` release."""
        recipe = self.aggregation_recipe()
        if recipe.aggregation == "mean" and self.classes is None:
            raise ValueError(
                "SubsampleAggregateGLVQ plans its release before reading the data from the public label set: "
                "pass classes=[...]"
            )
        # the centre of attention's release does not depend on the number of prototypes
        num_prototypes = 0 if self.classes is None else sum(self._prototype_counts(np.unique(np.asarray(self.classes))))
        return recipe.planned_events(num_prototypes, n_features)

    def fit(self, X, y):
        """Private training on ``X (n, d)``, ``y (n,)``; see the class docstring."""
        X, y_index = self._fit_input(X, y)
        recipe = self.aggregation_recipe()
        counts = self._prototype_counts(self.classes_)
        tdtype = torch_dtype(self.dtype)
        Z = self._domain(X, fitting=True)
        x_t = torch.as_tensor(Z, dtype=torch.float64, device=self.device)
        y_t = torch.as_tensor(y_index, dtype=torch.long, device=self.device)
        reference = None
        if self.reference is not None:
            reference = torch.as_tensor(
                self._domain(np.asarray(self.reference, dtype=np.float64), fitting=False),
                dtype=torch.float64,
                device=self.device,
            )

        # Bin labels, shuffles and noise: all randomness of this fit touches the release.
        generator = (
            None if self.secure_mode else noise_generator(self.noise_seed, self.device, owner=type(self).__name__)
        )
        labels = make_prototype_labels(len(self.classes_), counts).to(self.device)
        self.model_ = PrototypeModel(self._make_layer(Z.shape[1], len(labels), generator, tdtype), labels)
        release = recipe.run(self.model_, x_t, y_t, reference=reference, generator=generator)
        if release.noise_std is not None:
            self.noise_std_ = release.noise_std  # public: epsilon, delta, W, d, domain and m only
        elif hasattr(self, "noise_std_"):
            # The centre of attention's noise std S(Z)/alpha depends on the bins' models
            # without noise: it is neither stored nor returned.
            del self.noise_std_
        if recipe.aggregation == "mean":
            curator_attach(self, empty_bins=release.empty_bins)
            if release.empty_bins:  # curator-only: a warning would depend on the record count
                curator_log(
                    "SubsampleAggregateGLVQ: %d of num_bins=%d bins got no record and contribute their "
                    "data-free start to the mean; choose num_bins from a public estimate of the data size",
                    release.empty_bins,
                    self.num_bins,
                )
        ledger = release.ledger
        self.n_iter_ = recipe.training.epochs
        record_fit(self, ledger, shared=False, delta=self.delta)
        self.ledger_ = ledger
        self.epsilon_ = ledger.get_epsilon(self.delta)
        ledger.attach(self.model_)
        self.privacy_ = self.model_.privacy_
        self.privacy_scope_ = FIT_SCOPE
        self.prototypes_ = self.scaler_.inverse_transform(release.prototypes.detach().cpu().numpy())
        self.prototype_labels_ = self.classes_[labels.cpu().numpy()]
        return self
