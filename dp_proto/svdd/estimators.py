"""scikit-learn style estimators: private SVDD and the equilibrium-point classifier.

``PrivateSVDD`` releases a private support function (Phase I of Park 2022) and
detects outliers with it; ``PrivateSVDDClassifier`` adds Phases II and III: the
equilibrium points of the private support function partition the space into basins,
and each basin (or hypercube of basins) is labelled by a noisy vote.

Everything runs as tensor code on ``device`` (CPU or CUDA); inputs may be NumPy arrays
or tensors. Every noisy release is recorded in ``ledger_``.

Randomness. ``random_state`` seeds only the public randomness: the random Fourier
features and the start points of the dynamics, which do not depend on the data. The
noise of every private release comes from fresh operating-system entropy
(``dp_proto.privacy.randomness``); ``noise_seed`` is the explicit opt-in to
reproducible noise (it warns with ``PrivacyLeakWarning`` and the
ledger's summary says ``"noise": "reproducible"``).

What a private fit shows. Whatever a private fit exposes -- fitted attributes and their
shapes, ledger events, warnings, exceptions -- is a function of the noisy releases and of
public settings only, so it is the same on neighbouring data sets
(``neighbour_check``). Diagnostics computed from the
private data without noise (the record count, a class with a single record, the
solver's duality gap) go to the curator-only dict ``curator_`` and the
``dp_proto.curator`` logger (``dp_proto.privacy.curator``); delete ``curator_`` before
pickling a fitted estimator. Non-private fits (``epsilon=None``) still warn and raise.

Publishing. ``save_release(path)`` writes a fitted estimator in the release format of
``dp_proto.release`` (``model.safetensors`` + ``manifest.json``: the published tensors,
the hyperparameters, the ledger's events; no ``curator_``, no noise seed, no pickle);
``dp_proto.load_release(path)`` loads it back, predicting identically.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, OutlierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from dp_proto._neighbours import knn_predict
from dp_proto._progress import progress_bar, show_status
from dp_proto._validation import torch_device, torch_dtype
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.privacy.calibration import optional_epsilon
from dp_proto.privacy.curator import curator_attach, curator_outside_bounds
from dp_proto.privacy.domain import public_classes
from dp_proto.privacy.events import DiscreteLaplaceEvent, NonPrivateEvent, PrivacyEvent, PureEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import noisy_count
from dp_proto.privacy.randomness import check_noise_seed, noise_generator
from dp_proto.privacy.release import ledger_from_manifest, ledger_manifest
from dp_proto.privacy.session import record_fit
from dp_proto.release import (
    Releasable,
    Release,
    decode_labels,
    encode_hyperparameters,
    encode_labels,
    register_model,
    registered_name,
)
from dp_proto.svdd.cells import group_hypercubes, nearest_index
from dp_proto.svdd.equilibrium import descend, merge_points, support_function
from dp_proto.svdd.features import RandomFourierFeatures
from dp_proto.svdd.grid import (
    MAX_CELLS,
    PublicGrid,
    cube_counts,
    grid_threshold,
    sparse_noisy_histogram,
)
from dp_proto.svdd.private import (
    centre_sensitivity,
    full_box_centre,
    noisy_cell_counts,
    private_quantile,
    release_centre,
)
from dp_proto.svdd.solver import DEFAULT_MAX_ITER, check_private_tol, solve_svdd_dual

__all__ = ["PrivateSVDD", "PrivateSVDDClassifier"]


def _is_private(epsilon) -> bool:
    return optional_epsilon(epsilon) is not None


def _empty_cell_threshold(num_classes: int, eps_votes: float) -> float:
    """Noisy total a cell needs to be labelled: ``max(0.5, sqrt(2 c) / eps)``.

    An empty cell's noisy total is a sum of ``c`` Laplace(``1/eps``) draws, standard
    deviation ``sqrt(2 c) / eps``: one standard deviation keeps most empty cells out
    without discarding the small cells that a fine partition needs; ``0.5`` (half a
    record) removes the empty cells once the noise is small.
    """
    return max(0.5, math.sqrt(2.0 * num_classes) / eps_votes)


# -- what a release leaves out (RELEASE_DROPS), and what its guarantee covers --------------
_CURATOR_ONLY = (
    "curator-only: diagnostics computed from the private data without noise (record count, solver gap "
    "and iterations, single-record classes), outside the guarantee"
)
_NON_PRIVATE_LEDGER = (
    "non-private fits only (epsilon=None, or the classifier's starts='training'): the ledger records a "
    'non_private release (epsilon = inf); the manifest says "private": false instead'
)
_SVDD_SCOPE = (
    "pure epsilon-DP (add/remove one record) for the records passed to fit; the hyperparameters and the "
    "random feature map (drawn from random_state without the data) are public"
)
_CLASSIFIER_SCOPE = (
    "pure epsilon-DP (add/remove one record) for the records passed to fit (the centre, the record count "
    "and the votes); the hyperparameters, the random feature map and the start points (drawn from "
    "random_state without the data), the grid's box and the label set are public"
)


class _SVDDBase(Releasable, BaseEstimator):
    """Phase I shared by both estimators: feature map, dual solve, (private) centre."""

    def _device(self) -> torch.device:
        return torch_device(self.device) if self.device is not None else torch.device("cpu")

    def _torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def _as_tensor(self, X, *, fitting: bool) -> torch.Tensor:
        X = torch.as_tensor(
            X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X), dtype=self._torch_dtype()
        ).to(self._device())
        if X.dim() != 2 or X.shape[0] == 0:
            # no sizes in the message: the number of rows is private
            raise ValueError(
                f"expected X of shape (n, d) with n >= 1, got a {X.dim()}-D array"
                + (" without rows" if X.dim() == 2 else "")
            )
        if not bool(torch.isfinite(X).all()):
            raise ValueError("X contains NaN or inf")
        if fitting:
            self.n_features_in_ = X.shape[1]
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted with {self.n_features_in_}")
        return X

    def _generator(self) -> torch.Generator:
        """The public generator (``random_state``): feature map and start points, never noise."""
        gen = torch.Generator(device=self._device())
        if self.random_state is None:
            gen.seed()
        else:
            gen.manual_seed(int(self.random_state))
        return gen

    def _noise_generator(self) -> torch.Generator:
        """The generator of the private releases (CPU): fresh operating-system entropy, or
        ``noise_seed`` (which warns with PrivacyLeakWarning). Independent of ``random_state``."""
        seed = None if self.noise_seed is None else int(self.noise_seed)
        return noise_generator(seed, "cpu", owner=type(self).__name__)

    def _check_common(self) -> None:
        if not 0 < self.c_over_n <= 1:
            raise ValueError(f"c_over_n (the dual box C/n) must lie in (0, 1], got {self.c_over_n!r}")
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol!r}")
        if _is_private(self.epsilon):
            check_private_tol(self.tol)
        check_noise_seed(self.noise_seed)

    def _fit_centre(
        self,
        X: torch.Tensor,
        epsilon: float | None,
        gen: torch.Generator,
        noise: torch.Generator | None,
        bar: Any = None,
    ) -> torch.Tensor:
        """Feature map, dual solve and centre (private when ``epsilon`` is a number, with
        noise from ``noise``); the solver's gap goes to the progress ``bar``."""
        n = X.shape[0]
        cap = float(self.c_over_n)
        if epsilon is None and cap * n < 1.0 - 1e-9:
            raise ValueError(
                f"c_over_n={self.c_over_n} is below 1/n = {1.0 / n:.3g}: the dual's constraints "
                f"0 <= beta_i <= C/n, sum beta = 1 cannot be met with n={n} records"
            )
        # The solve (and so the sensitivity analysis, ||phi|| = 1) runs in float64; the
        # dynamics may then run in the working dtype.
        features = RandomFourierFeatures(
            X.shape[1], self.num_features, self.gamma, generator=gen, dtype=torch.float64, device=X.device
        )
        phi = features(X)
        self.features_ = features.to(X.dtype)
        if epsilon is not None and cap * n < 1.0:
            # Fewer than 1/cap records: every beta_i at the box (dp_proto.svdd.private); a
            # private fit must not fail on a condition one record decides.
            exact = full_box_centre(phi, cap)
            curator_attach(self, n_records=n, box_full=True, solver_gap=0.0, solver_iterations=0)
        else:
            # A private fit runs the solver until the gap is <= tol (no iteration cap): the
            # centre's sensitivity assumes it, and a cap that one record could make the
            # solver hit would void the guarantee.
            def show_gap(gap: float) -> None:
                if bar is not None and epsilon is None:  # a private fit shows its phases only
                    show_status(bar, f"centre: gap {gap:.1e}, tol {self.tol:g}")

            solution = solve_svdd_dual(
                phi,
                min(cap * n, float(n)),
                tol=self.tol,
                max_iter=DEFAULT_MAX_ITER if epsilon is None else None,
                on_round=show_gap,
            )
            exact = solution.centre
            if epsilon is not None:
                # the gap and the iteration count depend on the data: curator-only
                curator_attach(
                    self, n_records=n, box_full=False, solver_gap=solution.gap, solver_iterations=solution.iterations
                )
        # The exact solution is not kept on the estimator: pickling it would publish it.
        if epsilon is None:
            return exact.to(X.dtype)
        centre = release_centre(exact, cap, epsilon, tol=self.tol, ledger=self.ledger_, generator=noise)
        return centre.to(X.dtype)

    def _new_ledger(self) -> PrivacyLedger:
        return self.ledger if self.ledger is not None else PrivacyLedger()

    def _planned_centre(self, epsilon: float) -> PrivacyEvent:
        """The event of the centre's release at ``epsilon`` (``release_centre``)."""
        sensitivity = centre_sensitivity(float(self.c_over_n), int(self.num_features), tol=self.tol)
        return PureEvent(epsilon, name="svdd/centre", sensitivity=sensitivity)

    def score_samples(self, X) -> np.ndarray:
        """``-f^(x) = -||phi(x) - a^||^2`` for ``X (m, d)``: higher means more inside the support."""
        check_is_fitted(self, "centre_")
        X = self._as_tensor(X, fitting=False)
        return (-support_function(self.features_, self.centre_, X)).cpu().numpy()

    # -- the release format (dp_proto.release) -----------------------------------------
    #: Fitted attributes a release may leave out, with the reason; ``_release_drops`` picks
    #: those that apply to the fit at hand. Every other fitted attribute is published and
    #: restored by ``from_release``; the tests check that the two cover ``vars(est)``, so a
    #: new fitted attribute needs a decision here.
    RELEASE_DROPS: ClassVar[dict[str, str]] = {}
    # hyperparameters never written, with the reason
    _RELEASE_WITHHELD: ClassVar[dict[str, str]] = {
        "noise_seed": "it would replay the noise of the fit; never published (the privacy section says "
        "whether the noise was reproducible)",
        "ledger": "the curator's ledger object; its events are the privacy section, and a loaded model has "
        "a read-only ledger_",
    }
    # the fitted attribute whose presence means "fitted"
    _FITTED_MARK: ClassVar[str] = "centre_"

    def _fit_was_private(self) -> bool:
        """Whether every release of the fit was private (a ``non_private`` event: no)."""
        ledger = getattr(self, "ledger_", None)  # a loaded non-private release has none
        events = () if ledger is None else ledger.events
        return bool(events) and all(event.is_private for event in events)

    def to_release(self) -> Release:
        """The fitted estimator in the release format (in memory; ``save_release`` writes it).

        Returns
        -------
        Release
            The tensors and manifest sections that the class's ``_release_*`` hooks list
            (never ``__dict__``): a private fit's privacy section is its ledger
            (``dp_proto.privacy.ledger_manifest``); a non-private fit (``epsilon=None``,
            or the classifier's ``starts="training"``) writes ``{"private": False}``.

        Raises
        ------
        NotFittedError
            Before ``fit``.
        """
        check_is_fitted(self, self._FITTED_MARK)
        private = self._fit_was_private()
        hyperparameters, not_saved = encode_hyperparameters(
            self.get_params(deep=False), withheld=self._RELEASE_WITHHELD
        )
        privacy: dict[str, Any] = (
            ledger_manifest(self.ledger_, scope=self._privacy_scope()) if private else {"private": False}
        )
        note = None if private else self._non_private_note()
        if note is not None:
            privacy["note"] = note
        return Release(
            model=registered_name(self),
            tensors=self._release_tensors(),
            hyperparameters=hyperparameters,
            hyperparameters_not_saved=not_saved,
            public={"n_features": int(self.n_features_in_), **self._release_public()},
            privacy=privacy,
            fitted=self._release_fitted(),
            dropped=tuple(self._release_drops(private)),
        )

    @classmethod
    def from_release(cls, release: Release, *, device: str | None = None) -> Any:
        """The fitted estimator of ``release`` (``dp_proto.release.read_release``).

        Its ``predict`` (and ``decision_function`` where the class has one) equals the
        saved estimator's exactly on the same device; the attributes the release left
        out are absent. A private release gets a read-only ``ledger_``
        (``dp_proto.privacy.ledger_from_manifest``).

        Parameters
        ----------
        release : Release
            A release of this class.
        device : str or None, default None
            Where the loaded model computes (the saved ``device`` is replaced; None: CPU).

        Returns
        -------
        estimator
            A fitted ``cls``.

        Raises
        ------
        ValueError
            A release of another model, unknown hyperparameters, or tensors whose shapes
            do not fit the manifest.
        """
        estimator = cls.estimator_from_release(release, device=device)
        estimator.n_features_in_ = int(release.public["n_features"])
        estimator._restore_release(release)
        if release.private:
            estimator.ledger_ = ledger_from_manifest(release.privacy)
        return estimator

    def _release_tensor(self, release: Release, name: str, shape: tuple[int | None, ...]) -> torch.Tensor:
        """Tensor ``name`` of ``release`` on the estimator's device, checked against ``shape``
        (``None``: any length)."""
        array = release.tensor(name, len(shape))
        if any(want is not None and got != want for got, want in zip(array.shape, shape, strict=True)):
            raise ValueError(
                f"tensor {name!r} of the release has shape {tuple(array.shape)}, expected "
                f"{tuple('*' if n is None else n for n in shape)}"
            )
        return torch.from_numpy(np.array(array)).to(self._device())

    def _feature_map_release(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The public feature map: its frequencies ``(d, F/2)`` and its description."""
        features = self.features_
        tensors = {
            "features.frequencies": features.frequencies.detach().cpu().numpy(),
            "centre": self.centre_.detach().cpu().numpy(),
        }
        public = {
            "in_features": int(features.in_features),
            "num_features": int(features.num_features),
            "gamma": float(features.gamma),
            "note": "random Fourier features of exp(-gamma ||x - y||^2) (Rahimi & Recht 2007), drawn from "
            "random_state without the data; centre is the released centre a^ in that feature space",
        }
        return tensors, public

    def _restore_feature_map(self, release: Release) -> None:
        description = release.public["feature_map"]
        d, num_features = int(self.n_features_in_), int(description["num_features"])
        frequencies = self._release_tensor(release, "features.frequencies", (d, num_features // 2))
        # a placeholder draw from a generator of its own (the global one is left alone),
        # replaced by the published frequencies
        features = RandomFourierFeatures(
            d,
            num_features,
            float(description["gamma"]),
            generator=torch.Generator().manual_seed(0),
            dtype=frequencies.dtype,
            device=frequencies.device,
        )
        features.frequencies = frequencies
        self.features_ = features
        self.centre_ = self._release_tensor(release, "centre", (num_features,))

    # hooks of the two estimators
    def _release_tensors(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _release_public(self) -> dict[str, Any]:
        raise NotImplementedError

    def _release_fitted(self) -> dict[str, Any]:
        raise NotImplementedError

    def _release_drops(self, private: bool) -> list[str]:
        raise NotImplementedError

    def _privacy_scope(self) -> str:
        raise NotImplementedError

    def _non_private_note(self) -> str | None:
        return None

    def _restore_release(self, release: Release) -> None:
        raise NotImplementedError


@register_model("dp_proto.PrivateSVDD")
class PrivateSVDD(OutlierMixin, _SVDDBase):
    """One-class SVDD on random Fourier features with a private centre and radius.

    Releases the centre ``a^`` (Laplace, Corollary 4.2, projected onto the unit ball)
    with ``centre_fraction * epsilon`` and the radius ``R^2`` with the rest, as the
    private ``1 - contamination`` quantile of the training scores ``f^(x_i)`` (exponential
    mechanism on the public grid ``linspace(0, 4, 401)``; ``f^`` lies in ``[0, 4]``).
    ``decision_function(x) = R^2 - f^(x)`` is positive inside the description.

    Parameters
    ----------
    c_over_n : float, default 0.05
        Box of the dual, ``0 <= beta_i <= C/n`` (``C/n`` of Park 2022, Table 7.1), a public
        constant. The centre's sensitivity is ``2 sqrt(F) C/n`` (l1), so small values are
        cheaper. Non-private fits need ``C/n >= 1/n`` (else ``ValueError``); a private fit
        with fewer than ``n / C`` records puts every ``beta_i`` at the box instead
        (centre ``C/n sum_i phi_i``, see ``dp_proto.svdd.private``), because failing
        would depend on one record.
    gamma : float, default 1.0
        RBF kernel width of ``exp(-gamma ||x - y||^2)``.
    num_features : int, default 400
        Random Fourier features ``F`` (even).
    epsilon : float or None, default 1.0
        Total budget (pure DP, add/remove one record); ``None`` or ``inf``: non-private.
    centre_fraction : float, default 0.5
        Share of ``epsilon`` spent on the centre.
    contamination : float, default 0.1
        Fraction of training points meant to fall outside the description.
    tol : float, default 1e-8
        Duality-gap tolerance of the dual solver; enters the sensitivity as
        ``2 sqrt(F) sqrt(tol)``. A private fit runs the solver until the gap is ``<= tol``
        (no iteration cap, so its running time depends on the data) and needs
        ``tol >= 1e-10`` (``dp_proto.svdd.solver.MIN_PRIVATE_TOL``).
    random_state : int or None
        Seed of the public randomness: the random Fourier features (and, in
        ``PrivateSVDDClassifier``, the start points). It never reaches the noise.
    noise_seed : int or None, default None
        ``None``: the noise of the private releases comes from fresh operating-system
        entropy. An int makes it reproducible (tests, benchmarks): a
        ``PrivacyLeakWarning`` is issued and the ledger's summary
        says ``"noise": "reproducible"`` -- whoever knows the seed can remove the noise.
    device : str or None
        Where to compute (``"cpu"``, ``"cuda"``); default CPU.
    dtype : "float32" (default) or "float64"
        Precision of the feature map, the dynamics and the released centre; the dual
        is always solved in float64.
    ledger : PrivacyLedger, optional
        Ledger to record the releases in (a budget there is enforced); default a new one.
    verbose : int or None, default None
        Progress bar on stderr (the phase, and in a non-private fit the solver's gap; it
        appears after two seconds): None in interactive use only (a terminal or Jupyter),
        0 never, 1 always.

    Attributes
    ----------
    centre_ : Tensor (F,)
        The released centre ``a^`` in feature space.
    features_ : RandomFourierFeatures
        The public feature map.
    radius2_ : float
        The released squared radius ``R^2``.
    offset_ : float
        ``-radius2_`` (scikit-learn's outlier-detector convention).
    ledger_ : PrivacyLedger
        The fit's releases (a ``non_private`` event when ``epsilon`` is None).
    curator_ : dict
        Private fits only -- **curator-only** diagnostics computed from the data without
        noise: ``n_records``, ``box_full`` (fewer than ``n / C`` records), ``solver_gap``
        (at most ``tol``) and ``solver_iterations``. ``save_release`` leaves it out;
        delete it before pickling the estimator.

    Notes
    -----
    Publishing: ``save_release(path)`` (or ``save``) writes the fitted estimator in the
    release format of ``dp_proto.release``: the tensors ``features.frequencies (d, F/2)``
    (the public feature map) and ``centre (F,)``; in ``manifest.json`` the
    hyperparameters (``noise_seed`` and ``ledger`` withheld), the feature count, the
    feature map's ``num_features`` and ``gamma``, ``radius2_`` and ``offset_``, and the
    ledger's epsilon and events. Left out (``RELEASE_DROPS``): ``curator_``, and the
    ``ledger_`` of a non-private fit, whose manifest says ``"private": false``.
    ``dp_proto.load_release(path)`` gives back an estimator whose ``decision_function``
    and ``predict`` equal the saved one's, with a read-only ``ledger_``.

    References
    ----------
    Park (2022). *Differentially private multi-class classification using kernel
    supports and equilibrium points*. Master's thesis, Seoul National University.

    Rahimi & Recht (2007). Random features for large-scale kernel machines. *NIPS 2007*.

    Examples
    --------
    >>> import numpy as np
    >>> from dp_proto.svdd import PrivateSVDD
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> svdd = PrivateSVDD(c_over_n=0.05, gamma=0.5, epsilon=None, random_state=0).fit(X)
    >>> svdd.predict([[0.0, 0.0], [8.0, 8.0]]).tolist()  # inside, outside
    [1, -1]
    """

    def __init__(
        self,
        c_over_n: float = 0.05,
        gamma: float = 1.0,
        num_features: int = 400,
        epsilon: float | None = 1.0,
        *,
        centre_fraction: float = 0.5,
        contamination: float = 0.1,
        tol: float = 1e-8,
        random_state: int | None = None,
        noise_seed: int | None = None,
        device: str | None = None,
        dtype: str = "float32",
        ledger: PrivacyLedger | None = None,
        verbose: int | None = None,
    ) -> None:
        self.c_over_n = c_over_n
        self.gamma = gamma
        self.num_features = num_features
        self.epsilon = epsilon
        self.centre_fraction = centre_fraction
        self.contamination = contamination
        self.tol = tol
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.device = device
        self.dtype = dtype
        self.ledger = ledger
        self.verbose = verbose

    def _check_params(self) -> None:
        self._check_common()
        if not 0 < self.centre_fraction < 1:
            raise ValueError(f"centre_fraction must lie in (0, 1), got {self.centre_fraction!r}")
        if not 0 < self.contamination < 1:
            raise ValueError(f"contamination must lie in (0, 1), got {self.contamination!r}")

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The releases ``fit`` makes, from public settings only (``DPPipeline`` checks them
        against its budget before anything is fitted): the centre with ``centre_fraction *
        epsilon`` and the radius with the rest; one ``non_private`` event for
        ``epsilon=None``. ``n_features`` does not enter (the releases live in the feature
        space)."""
        self._check_params()
        if not _is_private(self.epsilon):
            return (NonPrivateEvent(name="svdd/non_private"),)
        eps_centre = self.centre_fraction * self.epsilon
        return (
            self._planned_centre(eps_centre),
            PureEvent(self.epsilon - eps_centre, name="svdd/radius", sensitivity=1.0),
        )

    def fit(self, X, y=None) -> PrivateSVDD:
        """Fit on ``X (n, d)``; ``y`` is ignored."""
        with progress_bar(type(self).__name__, 2, self.verbose, unit="phase") as bar:
            self._fit(X, bar)
        record_fit(self, self.ledger_, shared=self.ledger is not None, delta=1e-5)
        return self

    def _fit(self, X, bar: Any) -> None:
        self._check_params()
        private = _is_private(self.epsilon)
        X = self._as_tensor(X, fitting=True)
        gen = self._generator()
        noise = self._noise_generator() if private else None
        self.ledger_ = self._new_ledger()
        self.__dict__.pop("curator_", None)
        eps_centre = self.centre_fraction * self.epsilon if private else None
        show_status(bar, "centre")
        self.centre_ = self._fit_centre(X, eps_centre, gen, noise, bar)
        bar.update()
        show_status(bar, "radius")
        scores = support_function(self.features_, self.centre_, X)
        level = 1.0 - self.contamination
        if private:
            grid = torch.linspace(0.0, 4.0, 401, dtype=torch.float64, device=X.device)
            self.radius2_ = private_quantile(
                scores, level, self.epsilon - eps_centre, grid, ledger=self.ledger_, generator=noise, name="svdd/radius"
            )
        else:
            self.radius2_ = float(torch.quantile(scores.to(torch.float64), level))
            self.ledger_.spend(NonPrivateEvent(name="svdd/non_private"))
        self.offset_ = -self.radius2_
        bar.update()

    def decision_function(self, X) -> np.ndarray:
        """``R^2 - f^(x)`` for ``X (m, d)``: positive for inliers."""
        return self.score_samples(X) + self.radius2_

    def predict(self, X) -> np.ndarray:
        """``+1`` for inliers, ``-1`` for outliers."""
        return np.where(self.decision_function(X) >= 0, 1, -1)

    # -- the release format -------------------------------------------------------------
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "curator_": _CURATOR_ONLY,
        "ledger_": _NON_PRIVATE_LEDGER,
    }

    def _release_tensors(self) -> dict[str, np.ndarray]:
        return self._feature_map_release()[0]

    def _release_public(self) -> dict[str, Any]:
        return {"feature_map": self._feature_map_release()[1]}

    def _release_fitted(self) -> dict[str, Any]:
        return {"radius2_": float(self.radius2_), "offset_": float(self.offset_)}

    def _release_drops(self, private: bool) -> list[str]:
        return [name for name in ("curator_",) if name in vars(self)] + ([] if private else ["ledger_"])

    def _privacy_scope(self) -> str:
        return _SVDD_SCOPE

    def _restore_release(self, release: Release) -> None:
        self._restore_feature_map(release)
        self.radius2_ = float(release.fitted["radius2_"])
        self.offset_ = float(release.fitted["offset_"])


@register_model("dp_proto.PrivateSVDDClassifier")
class PrivateSVDDClassifier(ClassifierMixin, _SVDDBase):
    """Multi-class classifier from the equilibrium points of a private SVDD (Park 2022).

    Phase I releases a private centre ``a^`` (see ``PrivateSVDD``). Phase II runs the
    gradient dynamics of ``f^(x) = ||phi(x) - a^||^2`` (``lr`` for the first 80 % of
    ``iters`` steps, ``lr / 5`` after, the schedule of Park 2022) from start points, merges end
    points closer than ``merge_tol`` into equilibrium points (EPs) and, with ``r_max``,
    groups EPs into hypercubes of that half-width (greedy leaders, eq. 5.6). Phase III runs
    the dynamics from every training point, sends it to the cell (EP or hypercube) of the
    nearest EP and labels every cell by the arg-max of its class counts plus discrete
    Laplace noise of scale ``1/eps`` (eq. 5.5); cells whose noisy total falls below ``min_count`` stay unlabelled.

    Start points (``starts``); all but ``"training"`` are differentially private:

    * ``"auto"`` (default): ``"grid"`` when the grid has a cube size (``grid_step`` or
      ``r_max``), at most ``2^62`` cubes, and a cube needs at most ``n^ / grid_ratio``
      records to be released (``n^`` the noisy record count, ``count_fraction * epsilon``;
      without privacy the grid is always taken); ``"normal"`` otherwise. Fine cubes win
      when the records are many per cube; small or high-dimensional sets lose most cubes
      to the release threshold and do better with a few large random cells.
    * ``"normal"``: ``n_starts`` points drawn from ``N(0, I)``, independently of the
      data -- the scale of standardised inputs. The EPs, the basins and the cells are
      then post-processing of ``a^``; the training data enter only through the noisy
      cell counts, which cost ``epsilon`` once (one record changes one count). Total:
      ``epsilon`` = ``centre_fraction * epsilon`` for the centre + ``count_fraction *
      epsilon`` for the record count of ``n_starts="auto"`` + the rest for the votes.
    * ``"grid"``: the hypercubes of eq. 5.6 fixed in advance -- the lattice of step
      ``grid_step`` (default ``2 r_max``) anchored at 0 in the public box ``bounds``
      (default ``(-4, 4)``). Every training point runs the dynamics and votes in the cube
      of its end point (clamped into the box); the cubes whose largest noisy class count
      reaches a threshold are released (``sparse_noisy_histogram``,
      which draws the noise of the empty cubes implicitly; at most ``false_cells`` empty
      cubes pass on average). Budget: ``centre_fraction * epsilon`` for the centre, the rest for the votes
      (less ``count_fraction * epsilon`` under ``"auto"``). A point is classified by the
      cube centre nearest to the end of its dynamics.
    * ``"uniform"``: like ``"normal"`` with points drawn uniformly from the public box ``bounds``.
    * an array ``(m, d)`` of public points: the same, with these starts.
    * ``"training"``: the variant of Park (2022), for reproduction -- the dynamics start
      from the training points (L441) and hypercube leaders are visited by the number of
      training points per EP; the noise is spent as published, ``epsilon`` on the centre
      and ``epsilon`` on the votes. **This variant is not differentially private**: the
      released EPs are (after few dynamics steps, nearly) training records. The ledger
      records a ``non_private`` event (``"svdd/training_starts"``, so its epsilon is inf;
      a ledger with a budget refuses the fit before the data are touched) next to the two
      Laplace releases, ``is_private_`` is False and a
      ``PrivacyLeakWarning`` is issued.

    Release modes (``release``): ``"support_function"`` publishes ``a^``, the feature map
    and the labelled EPs; a point is classified by running the dynamics from it and taking
    the label of the nearest labelled EP (its basin's label when that basin has one).
    ``"equilibrium_points"`` publishes only the labelled EPs; a point gets the majority
    label of its ``n_neighbors`` nearest labelled EPs.

    Parameters
    ----------
    c_over_n : float, default 0.05
        Box of the dual, ``0 <= beta_i <= C/n``, a public constant (as in
        ``PrivateSVDD``).
    gamma : float, default 1.0
        RBF kernel width of ``exp(-gamma ||x - y||^2)``.
    num_features : int, default 400
        Random Fourier features ``F`` (even).
    epsilon : float or None, default 1.0
        Total budget (pure DP, add/remove one record); ``None`` or ``inf``: non-private
        (exact centre, exact counts).
    centre_fraction : float, default 0.5
        Share of ``epsilon`` spent on the centre with public starts.
    bounds : (lower, upper), floats or arrays ``(d,)``
        Public box the starts are drawn from; required for ``starts="uniform"``. The box of
        the grid (default ``(-4, 4)``).
    classes : array-like or None
        The public set of class labels; a class without records wins a cell's vote
        only by noise. ``None`` reads it from ``y``, with a
        ``PrivacyLeakWarning`` when the fit is private.
    starts : {"auto", "normal", "grid", "uniform", "training"} or array (m, d), default "auto"
        Where the dynamics start (see above); ``"training"`` is not private.
    n_starts : int or "auto", default "auto"
        Number of public starts (the number of cells is at most this). More cells resolve
        finer class boundaries, but a cell's vote is only reliable when it holds well over
        ``1 / epsilon_votes`` records. ``"auto"`` spends ``count_fraction * epsilon`` on a
        noisy record count ``n^`` and uses ``clip(epsilon_votes n^ / 4, 2 c, max_starts)``
        starts (``n`` itself without privacy).
    count_fraction : float, default 0.05
        Share of ``epsilon`` spent on the noisy record count of ``starts="auto"`` or
        ``n_starts="auto"`` (drawn once for both).
    max_starts : int, default 2000
        Upper limit of ``n_starts="auto"``.
    lr : float, default 0.001
        Learning rate of the dynamics (Park 2022, Table 7.1).
    iters : int, default 20
        Number of steps of the dynamics (Park 2022, Table 7.1).
    merge_tol : float or None
        End points in the same grid cell of this width merge into one EP; default
        ``1e-3 / sqrt(2 gamma)`` (a thousandth of the kernel length).
    r_max : float or None
        Half-width (l-infinity) of the hypercubes; ``None``: one cell per EP.
    min_count : float or None
        Cells whose noisy total count is below this stay unlabelled (a test point there
        takes the label of the nearest labelled equilibrium point). Default
        ``max(0.5, sqrt(2 c) / epsilon_votes)`` (``c`` classes): one standard deviation of
        an empty cell's noisy total, and at least half a record; 0.5 without privacy. If no
        cell reaches it, the cell with the largest noisy total labels everything. With the
        grid: the largest noisy class count a cube needs to be released (the grid's noise is
        discrete Laplace, so the counts are integers and a real ``min_count`` acts as its
        ceiling), default ``grid_threshold``: the smallest integer
        ``t >= 1`` with at most ``false_cells`` expected empty cubes passing, at most
        ``ceil(ln(c M / ((1 + exp(-epsilon_votes)) false_cells)) / epsilon_votes)`` for ``M``
        cubes; if no cube reaches it, the cube with the largest noisy count labels everything.
    release : {"support_function", "equilibrium_points"}, default "support_function"
        What is published and how a point is classified (see above).
    n_neighbors : int, default 1
        ``k`` of the k-nearest-EP vote in the ``"equilibrium_points"`` mode.
    grid_step : float or None
        Side of the grid's cubes; default ``2 r_max``.
    false_cells : float, default 1.0
        Expected number of empty cubes the grid releases (with random labels); fewer cost
        a higher threshold, ``ln(1 / false_cells) / epsilon_votes`` more records.
    grid_ratio : float, default 200
        ``starts="auto"`` takes the grid when its threshold is at most ``n^ / grid_ratio``
        (how the default was chosen: docs/svdd.md, "How it works").
    tol : float, default 1e-8
        Duality-gap tolerance of the dual solver (as in ``PrivateSVDD``; private
        fits need ``tol >= 1e-10``).
    random_state : int or None, default None
        Draws the feature map and the ``"normal"`` / ``"uniform"`` start points; never the
        noise.
    noise_seed : int or None, default None
        ``None``: the noise (centre, record count, votes, the grid's empty cubes) comes
        from fresh operating-system entropy. An int makes it reproducible, with a
        ``PrivacyLeakWarning``.
    device : str or None, default None
        Where to compute (``"cpu"``, ``"cuda"``); default CPU.
    dtype : {"float32", "float64"}, default "float32"
        Precision of the feature map, the dynamics and the released centre.
    ledger : PrivacyLedger, optional
        Ledger to record the releases in (a budget there is enforced); default a new one.
    verbose : int or None, default None
        Progress bar on stderr (the phase, and in a non-private fit the solver's gap; it
        appears after two seconds): None in interactive use only (a terminal or Jupyter),
        0 never, 1 always.

    Attributes
    ----------
    classes_ : ndarray (c,)
        The class labels.
    features_ : RandomFourierFeatures
        The public feature map.
    centre_ : Tensor (F,)
        The released centre ``a^``.
    equilibria_ : Tensor (k, d)
        All equilibrium points (with the grid: the released cubes' centres).
    ep_cell_ : Tensor (k,)
        Cell of each equilibrium point.
    cell_counts_ : Tensor (cells, c)
        Released (noisy) class counts per cell.
    cell_labels_ : Tensor (cells,)
        Class index of every cell, or -1 (unlabelled).
    labelled_points_ : Tensor (m, d)
        The equilibrium points the model classifies with.
    labelled_classes_ : Tensor (m,)
        Their class indices.
    starts_ : str
        The start mode used (``"auto"`` resolved).
    grid_ : PublicGrid or None
        The public lattice (``PublicGrid``) of ``starts="grid"``.
    cubes_ : Tensor (cells, d)
        With the grid: the released cubes' integer coordinates.
    ledger_ : PrivacyLedger
        The fit's releases.
    is_private_ : bool
        False for ``epsilon=None`` and for ``starts="training"``.
    curator_ : dict
        Private fits only -- **curator-only** diagnostics computed from the data without
        noise (see ``PrivateSVDD``, plus ``single_record_classes``: the classes with
        exactly one record, which a non-private fit warns about). ``save_release``
        leaves it out; delete it before pickling the estimator.
    n_starts_ : int
        Random starts only: the number of start points used (``n_starts`` resolved).

    Notes
    -----
    Publishing: ``save_release(path)`` (or ``save``) writes what ``release`` publishes,
    in the release format of ``dp_proto.release``: the tensors ``labelled_points (m, d)``
    and ``labelled_classes (m,)`` (int64 indices into ``classes_``), and for
    ``"support_function"`` also ``features.frequencies (d, F/2)`` and ``centre (F,)``;
    in ``manifest.json`` the hyperparameters (``noise_seed`` and ``ledger`` withheld), the
    label set, the feature count, the grid (or None), ``starts_``, ``n_starts_``,
    ``is_private_`` and the ledger's epsilon and events (``"private": false`` for
    ``epsilon=None`` and for ``starts="training"``). Left out (``RELEASE_DROPS``):
    ``curator_``; the cell structure behind the votes (``equilibria_``, ``ep_cell_``,
    ``cell_counts_``, ``cell_labels_``, ``cubes_``), not needed to predict; the feature
    map and the centre under ``"equilibrium_points"``; a non-private fit's ``ledger_``.
    ``dp_proto.load_release(path)`` gives back an estimator that predicts identically
    (in the saved ``release`` mode).

    References
    ----------
    Park (2022). *Differentially private multi-class classification using kernel
    supports and equilibrium points*. Master's thesis, Seoul National University.

    Rahimi & Recht (2007). Random features for large-scale kernel machines. *NIPS 2007*.
    """

    def __init__(
        self,
        c_over_n: float = 0.05,
        gamma: float = 1.0,
        num_features: int = 400,
        epsilon: float | None = 1.0,
        *,
        centre_fraction: float = 0.5,
        bounds: Any = None,
        classes: Any = None,
        starts: Any = "auto",
        n_starts: int | str = "auto",
        count_fraction: float = 0.05,
        max_starts: int = 2000,
        lr: float = 0.001,
        iters: int = 20,
        merge_tol: float | None = None,
        r_max: float | None = None,
        min_count: float | None = None,
        release: str = "support_function",
        n_neighbors: int = 1,
        grid_step: float | None = None,
        false_cells: float = 1.0,
        grid_ratio: float = 200.0,
        tol: float = 1e-8,
        random_state: int | None = None,
        noise_seed: int | None = None,
        device: str | None = None,
        dtype: str = "float32",
        ledger: PrivacyLedger | None = None,
        verbose: int | None = None,
    ) -> None:
        self.c_over_n = c_over_n
        self.gamma = gamma
        self.num_features = num_features
        self.epsilon = epsilon
        self.centre_fraction = centre_fraction
        self.bounds = bounds
        self.classes = classes
        self.starts = starts
        self.n_starts = n_starts
        self.count_fraction = count_fraction
        self.max_starts = max_starts
        self.lr = lr
        self.iters = iters
        self.merge_tol = merge_tol
        self.r_max = r_max
        self.min_count = min_count
        self.release = release
        self.n_neighbors = n_neighbors
        self.grid_step = grid_step
        self.false_cells = false_cells
        self.grid_ratio = grid_ratio
        self.tol = tol
        self.random_state = random_state
        self.noise_seed = noise_seed
        self.device = device
        self.dtype = dtype
        self.ledger = ledger
        self.verbose = verbose

    # -- parameters ---------------------------------------------------------------------
    def _start_mode(self) -> str:
        if isinstance(self.starts, str):
            if self.starts not in ("auto", "normal", "uniform", "grid", "training"):
                raise ValueError(
                    f"starts must be 'auto', 'normal', 'uniform', 'grid', 'training' or an array of "
                    f"points, "
                    f"got {self.starts!r}"
                )
            return self.starts
        return "given"

    def _check_params(self) -> None:
        self._check_common()
        if self.release not in ("support_function", "equilibrium_points"):
            raise ValueError(f"release must be 'support_function' or 'equilibrium_points', got {self.release!r}")
        if not self.lr > 0 or int(self.iters) != self.iters or self.iters < 0:
            raise ValueError(f"need lr > 0 and an int iters >= 0, got lr={self.lr!r}, iters={self.iters!r}")
        if self.r_max is not None and not self.r_max > 0:
            raise ValueError(f"r_max must be > 0 or None, got {self.r_max!r}")
        if self.merge_tol is not None and not self.merge_tol > 0:
            raise ValueError(f"merge_tol must be > 0 or None, got {self.merge_tol!r}")
        if int(self.n_neighbors) != self.n_neighbors or self.n_neighbors < 1:
            raise ValueError(f"n_neighbors must be a positive int, got {self.n_neighbors!r}")
        if not 0 < self.centre_fraction < 1:
            raise ValueError(f"centre_fraction must lie in (0, 1), got {self.centre_fraction!r}")
        if self.n_starts != "auto" and (
            isinstance(self.n_starts, (str, bool)) or int(self.n_starts) != self.n_starts or self.n_starts < 1
        ):
            raise ValueError(f"n_starts must be a positive int or 'auto', got {self.n_starts!r}")
        if (
            self.n_starts == "auto" or self.starts == "auto"
        ) and not 0 < self.count_fraction < 1 - self.centre_fraction:
            raise ValueError(f"count_fraction must lie in (0, 1 - centre_fraction), got {self.count_fraction!r}")
        if int(self.max_starts) != self.max_starts or self.max_starts < 1:
            raise ValueError(f"max_starts must be a positive int, got {self.max_starts!r}")
        if self.grid_step is not None and not self.grid_step > 0:
            raise ValueError(f"grid_step must be > 0 or None, got {self.grid_step!r}")
        if not self.false_cells > 0:
            raise ValueError(f"false_cells must be > 0, got {self.false_cells!r}")
        if not self.grid_ratio > 0:
            raise ValueError(f"grid_ratio must be > 0, got {self.grid_ratio!r}")

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The releases ``fit`` makes on ``n_features`` features, from public settings only
        (``DPPipeline`` checks them against its budget before anything is fitted): the
        centre, the noisy record count (``starts="auto"``, or ``n_starts="auto"`` with random
        starts) and the votes. Under ``starts="auto"`` with a cube size, whether the votes go
        to the grid or to random starts depends on the noisy count, so they are planned as a
        generic ``epsilon``-DP release, which bounds both. ``epsilon=None`` plans a
        ``non_private`` event, and so does ``starts="training"`` (before its two releases)."""
        self._check_params()
        mode = self._start_mode()
        if not _is_private(self.epsilon):
            return (NonPrivateEvent(name="svdd/non_private"),)
        if mode == "training":
            return (
                NonPrivateEvent(name="svdd/training_starts"),
                self._planned_centre(self.epsilon),
                DiscreteLaplaceEvent(self.epsilon, grid_steps=1, name="svdd/votes", sensitivity=1.0),
            )
        needs_count = mode == "auto" or (self.n_starts == "auto" and mode in ("normal", "uniform"))
        eps_centre = self.centre_fraction * self.epsilon
        eps_count = self.count_fraction * self.epsilon if needs_count else None
        eps_votes = self.epsilon - eps_centre - (eps_count or 0.0)
        events: list[PrivacyEvent] = [self._planned_centre(eps_centre)]
        if eps_count is not None:
            events.append(DiscreteLaplaceEvent(eps_count, grid_steps=1, name="svdd/record_count", sensitivity=1.0))
        if mode == "auto" and (
            (self.grid_step is None and self.r_max is None) or self._public_grid(n_features).num_cells > MAX_CELLS
        ):
            mode = "normal"  # what _auto_mode decides without the count
        if mode == "grid":
            self._public_grid(n_features)  # refuses a grid without a cube size before the data are read
            events.append(PureEvent(eps_votes, name="svdd/grid_votes", sensitivity=1.0))
        elif mode == "auto":
            events.append(PureEvent(eps_votes, name="svdd/votes", sensitivity=1.0))
        else:  # noisy_cell_counts
            events.append(DiscreteLaplaceEvent(eps_votes, grid_steps=1, name="svdd/votes", sensitivity=1.0))
        return tuple(events)

    def _choose_n_starts(self, n_hat: float | None, c: int, eps_votes: float | None) -> int:
        """``n_starts`` as given, or the ``"auto"`` rule on the (noisy) record count ``n_hat``."""
        if self.n_starts != "auto":
            return int(self.n_starts)
        if eps_votes is None:
            return int(min(self.max_starts, max(2 * c, n_hat)))
        return int(min(self.max_starts, max(2 * c, round(eps_votes * n_hat / 4.0))))

    def _auto_mode(self, d: int, c: int, n_hat: float, eps_votes: float | None) -> str:
        """``starts="auto"``: the grid when it has a cube size, at most ``2^62`` cubes, and
        its release threshold is at most ``n_hat / grid_ratio``; the normal starts otherwise."""
        if self.grid_step is None and self.r_max is None:
            return "normal"
        grid = self._public_grid(d)
        if grid.num_cells > MAX_CELLS:
            return "normal"
        if eps_votes is None:
            return "grid"
        return "grid" if self._grid_release_threshold(grid, c, eps_votes) <= n_hat / self.grid_ratio else "normal"

    def _grid_release_threshold(self, grid: PublicGrid, c: int, eps_votes: float) -> float:
        """Largest noisy class count a cube needs to be released: ``min_count`` (the grid's
        noisy counts are integers, so it acts as ``ceil(min_count)``) or the integer
        ``grid_threshold``."""
        if self.min_count is not None:
            return math.ceil(self.min_count)
        return grid_threshold(grid.num_cells, c, eps_votes, self.false_cells)

    def _public_starts(self, mode: str, d: int, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        device = self._device()
        if mode == "given":
            starts = torch.as_tensor(np.asarray(self.starts), dtype=dtype).to(device)
            if starts.dim() != 2 or starts.shape[1] != d or starts.shape[0] < 1:
                raise ValueError(f"starts must be an array of shape (m, {d}) with m >= 1, got {tuple(starts.shape)}")
            return starts
        if mode == "normal":
            z = torch.randn(self.n_starts_, d, generator=gen, dtype=torch.float64, device=gen.device)
            return z.to(device=device, dtype=dtype)
        if self.bounds is None:
            raise ValueError(
                "starts='uniform' draws the start points from a public box: pass bounds=(lower, upper) "
                "(numbers or arrays of length d), fixed without looking at the data"
            )
        lower, upper = (
            torch.as_tensor(np.broadcast_to(np.asarray(b, dtype=np.float64), (d,)).copy(), dtype=dtype, device=device)
            for b in self.bounds
        )
        if not bool((upper > lower).all()):
            raise ValueError("every upper bound must exceed its lower bound")
        u = torch.rand(self.n_starts_, d, generator=gen, dtype=torch.float64, device=gen.device)
        return lower + u.to(device=device, dtype=dtype) * (upper - lower)

    def _public_grid(self, d: int) -> PublicGrid:
        """The lattice of ``starts="grid"``: step ``grid_step`` (default ``2 r_max``) in ``bounds``
        (default ``(-4, 4)``, standardised inputs)."""
        step = self.grid_step if self.grid_step is not None else (2.0 * self.r_max if self.r_max is not None else None)
        if step is None:
            raise ValueError("starts='grid' needs the cube size: pass grid_step (or r_max, giving step 2 r_max)")
        lower, upper = self.bounds if self.bounds is not None else (-4.0, 4.0)
        return PublicGrid.from_box(float(step), lower, upper, d)

    def _grid_votes(
        self, X: torch.Tensor, labels: torch.Tensor, c: int, eps_votes: float | None, noise: torch.Generator | None
    ) -> torch.Tensor:
        """Phase III on the public grid: cube of every descended record, (sparse) noisy counts.
        Sets the cell attributes and returns the released cube centres ``(k, d)``."""
        grid = self.grid_
        cubes = grid.index(self._dynamics(X))
        if eps_votes is not None:
            idx, counts = sparse_noisy_histogram(
                cubes,
                labels,
                grid,
                c,
                eps_votes,
                self._grid_release_threshold(grid, c, eps_votes),
                ledger=self.ledger_,
                generator=noise,
            )
        else:
            _, idx, counts = cube_counts(cubes, labels, grid, c)
            keep = counts.max(1).values >= (self.min_count if self.min_count is not None else 0.5)
            if not bool(keep.any()):
                keep[counts.max(1).values.argmax()] = True
            idx, counts = idx[keep], counts[keep]
            self.ledger_.spend(NonPrivateEvent(name="svdd/non_private"))
        self.cubes_ = idx.to(X.device)
        self.cell_counts_ = counts.to(X.device)
        self.cell_labels_ = self.cell_counts_.argmax(1)
        self.ep_cell_ = torch.arange(idx.shape[0], device=X.device)
        return grid.centres(idx, X.dtype).to(X.device)

    # -- fitting ------------------------------------------------------------------------
    def _dynamics(self, x: torch.Tensor) -> torch.Tensor:
        return descend(self.features_, self.centre_, x, lr=self.lr, iters=int(self.iters))

    def fit(self, X, y) -> PrivateSVDDClassifier:
        """Fit on ``X (n, d)`` and labels ``y (n,)``; see the class docstring."""
        with progress_bar(type(self).__name__, 4, self.verbose, unit="phase") as bar:
            self._fit(X, y, bar)
        record_fit(self, self.ledger_, shared=self.ledger is not None, delta=1e-5)
        return self

    def _fit(self, X, y, bar: Any) -> None:
        self._check_params()
        private = _is_private(self.epsilon)
        mode = self._start_mode()
        if y is None:
            raise ValueError("PrivateSVDDClassifier requires y")
        y = np.asarray(y)
        check_classification_targets(y)
        X = self._as_tensor(X, fitting=True)
        if y.shape != (X.shape[0],):
            raise ValueError("y must have shape (n,): one label per row of X")
        # non-private fits and the (non-private) variant of Park 2022 may read the labels from y
        self.classes_, y_index = public_classes(
            y, self.classes, type(self).__name__, warn=private and mode != "training"
        )
        labels = torch.as_tensor(y_index, device=X.device)
        c = len(self.classes_)
        gen = self._generator()
        self.ledger_ = self._new_ledger()
        self.__dict__.pop("curator_", None)
        self.__dict__.pop("n_starts_", None)  # set below by random starts only: none left from a refit
        self.is_private_ = private and mode != "training"
        if self.bounds is not None:  # the start points' box: records far outside it are missed
            records, entries = _count_outside(X, self.bounds)
            curator_outside_bounds(self, records, X.shape[0], entries=(entries, X.numel()), clipped=False)
        single = self.classes_[np.bincount(y_index, minlength=c) == 1]
        if self.is_private_:
            # Whether a class has one record is decided by that record: curator only.
            curator_attach(self, single_record_classes=list(single))
        elif len(single):
            # Not an error: one record must not decide whether the fit succeeds.
            warnings.warn(
                f"class(es) {list(single)} have only one training sample; such a class rarely wins a noisy vote",
                UserWarning,
                stacklevel=2,
            )
        if private and mode == "training":
            warnings.warn(
                "starts='training' (the variant of Park 2022) releases equilibrium points reached "
                "from training records: the model is not differentially private",
                PrivacyLeakWarning,
                stacklevel=2,
            )
            # recorded first: a ledger with a budget refuses the fit before the data are touched
            self.ledger_.spend(NonPrivateEvent(name="svdd/training_starts"))
        noise = self._noise_generator() if private else None
        # a noisy record count for starts="auto" and for n_starts="auto" with random starts
        needs_count = mode == "auto" or (self.n_starts == "auto" and mode in ("normal", "uniform"))
        if private:
            eps_centre = self.epsilon if mode == "training" else self.centre_fraction * self.epsilon
            eps_count = self.count_fraction * self.epsilon if needs_count else None
            eps_votes = self.epsilon if mode == "training" else self.epsilon - eps_centre - (eps_count or 0.0)
        else:
            eps_centre = eps_count = eps_votes = None
        show_status(bar, "centre")
        self.centre_ = self._fit_centre(X, eps_centre, gen, noise, bar)
        bar.update()
        n_hat = None
        if needs_count:
            n_hat = (
                float(X.shape[0])
                if eps_count is None
                else max(
                    noisy_count(X.shape[0], eps_count, ledger=self.ledger_, name="svdd/record_count", generator=noise),
                    1.0,
                )
            )
        if mode == "auto":
            mode = self._auto_mode(X.shape[1], c, n_hat, eps_votes)
        self.starts_ = mode
        self.grid_ = self._public_grid(X.shape[1]) if mode == "grid" else None
        self.cubes_ = None
        if self.grid_ is not None:
            # Phases II and III on the fixed cubes: records flow, then vote in their cube.
            show_status(bar, "grid votes")
            points = self._grid_votes(X, labels, c, eps_votes, noise)
            bar.update(3)
            self.equilibria_ = self.labelled_points_ = points
            self.labelled_classes_ = self.cell_labels_
            return
        if mode in ("normal", "uniform"):
            self.n_starts_ = self._choose_n_starts(n_hat, c, eps_votes)

        # Phase II: equilibrium points from the starts, merged; cells.
        starts = X if mode == "training" else self._public_starts(mode, X.shape[1], gen, X.dtype)
        merge_tol = self.merge_tol if self.merge_tol is not None else 1e-3 / math.sqrt(2.0 * self.gamma)
        show_status(bar, "equilibrium points")
        ends = self._dynamics(starts)
        points, basin = merge_points(ends, merge_tol)
        self.equilibria_ = points
        if self.r_max is not None:
            basin_size = torch.bincount(basin, minlength=points.shape[0])
            # visit EPs by decreasing basin size (of public starts, or the training points of Park 2022's variant)
            order = torch.sort(-basin_size, stable=True).indices
            self.ep_cell_ = group_hypercubes(points, float(self.r_max), order)
        else:
            self.ep_cell_ = torch.arange(points.shape[0], device=X.device)
        num_cells = int(self.ep_cell_.max()) + 1

        bar.update()
        # Phase III: every training point to the cell of its (nearest) EP; noisy votes.
        show_status(bar, "records' cells")
        train_ep = basin if mode == "training" else nearest_index(self._dynamics(X), points)
        train_cell = self.ep_cell_[train_ep]
        bar.update()
        show_status(bar, "votes")
        if private:
            counts = noisy_cell_counts(
                train_cell, labels, num_cells, c, eps_votes, ledger=self.ledger_, generator=noise
            )
            min_count = self.min_count if self.min_count is not None else _empty_cell_threshold(c, eps_votes)
        else:
            flat = torch.bincount(train_cell * c + labels, minlength=num_cells * c)
            counts = flat.reshape(num_cells, c).to(torch.float64)
            min_count = self.min_count if self.min_count is not None else 0.5
            self.ledger_.spend(NonPrivateEvent(name="svdd/non_private"))
        self.cell_counts_ = counts
        totals = counts.sum(1)
        keep = totals >= min_count
        if not bool(keep.any()):
            keep[totals.argmax()] = True
        self.cell_labels_ = torch.where(keep, counts.argmax(1), torch.full_like(keep, -1, dtype=torch.int64))
        labelled = self.cell_labels_[self.ep_cell_] >= 0
        self.labelled_points_ = points[labelled]
        self.labelled_classes_ = self.cell_labels_[self.ep_cell_[labelled]]
        bar.update()

    # -- the release format -------------------------------------------------------------
    _FITTED_MARK: ClassVar[str] = "labelled_points_"
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "curator_": _CURATOR_ONLY,
        "ledger_": _NON_PRIVATE_LEDGER,
        "equilibria_": "every equilibrium point, the unlabelled ones included (with the grid: the released "
        "cubes' centres, the same points as labelled_points_): post-processing of the released centre, not "
        "needed to predict; the model is published as its labelled points (Park 2022)",
        "ep_cell_": "the cell of every equilibrium point: the partition behind the votes, not needed to predict",
        "cell_counts_": "the noisy class counts per cell: epsilon-DP and in the ledger, but not needed to "
        "predict (labelled_classes_ holds their arg-max for every published point)",
        "cell_labels_": "the label of every cell (-1: unlabelled): labelled_classes_ holds it for every "
        "published point",
        "cubes_": "with the grid, the integer coordinates of the released cubes, whose centres are "
        "labelled_points_; None otherwise",
        "features_": "release='equilibrium_points' publishes the labelled equilibrium points only (Park 2022): "
        "the feature map is not needed to predict",
        "centre_": "release='equilibrium_points' publishes the labelled equilibrium points only (Park 2022): "
        "the centre is not needed to predict",
    }
    _CELL_STRUCTURE: ClassVar[tuple[str, ...]] = ("equilibria_", "ep_cell_", "cell_counts_", "cell_labels_", "cubes_")
    _PUBLIC_FITTED: ClassVar[tuple[str, ...]] = ("starts_", "n_starts_", "is_private_")

    def _publishes_support_function(self) -> bool:
        if self.release not in ("support_function", "equilibrium_points"):
            raise ValueError(f"release must be 'support_function' or 'equilibrium_points', got {self.release!r}")
        return self.release == "support_function"

    def _release_tensors(self) -> dict[str, np.ndarray]:
        tensors = {
            "labelled_points": self.labelled_points_.detach().cpu().numpy(),
            "labelled_classes": self.labelled_classes_.detach().cpu().numpy(),
        }
        if self._publishes_support_function():
            tensors.update(self._feature_map_release()[0])
        return tensors

    def _release_public(self) -> dict[str, Any]:
        grid = self.grid_
        public: dict[str, Any] = {
            "classes": encode_labels(self.classes_),
            "grid": None
            if grid is None
            else {"step": grid.step, "lo": grid.lo, "hi": grid.hi, "lower": grid.lower, "upper": grid.upper},
        }
        if self._publishes_support_function():
            public["feature_map"] = self._feature_map_release()[1]
        return public

    def _release_fitted(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._PUBLIC_FITTED if name in vars(self)}

    def _release_drops(self, private: bool) -> list[str]:
        drops = [name for name in ("curator_", *self._CELL_STRUCTURE) if name in vars(self)]
        if not self._publishes_support_function():
            drops += ["features_", "centre_"]
        return drops if private else [*drops, "ledger_"]

    def _privacy_scope(self) -> str:
        if self.classes is None:
            return (
                f"{_CLASSIFIER_SCOPE}; except the label set: classes=None read it from the private y, and the "
                "guarantee does not cover which labels occur"
            )
        return _CLASSIFIER_SCOPE

    def _non_private_note(self) -> str | None:
        if getattr(self, "starts_", None) == "training":
            return (
                "starts='training' (the variant of Park 2022) is not differentially private: the published "
                "equilibrium points are reached from training records"
            )
        return None

    def _restore_release(self, release: Release) -> None:
        public = release.public
        self.classes_ = decode_labels(public["classes"])
        grid = public.get("grid")
        self.grid_ = (
            None
            if grid is None
            else PublicGrid(
                float(grid["step"]),
                tuple(int(v) for v in grid["lo"]),
                tuple(int(v) for v in grid["hi"]),
                tuple(float(v) for v in grid["lower"]),
                tuple(float(v) for v in grid["upper"]),
            )
        )
        points = self._release_tensor(release, "labelled_points", (None, int(self.n_features_in_)))
        labels = self._release_tensor(release, "labelled_classes", (points.shape[0],))
        if points.shape[0] < 1 or labels.dtype != torch.int64:
            raise ValueError("the release needs at least one labelled point and int64 labelled_classes")
        if int(labels.min()) < 0 or int(labels.max()) >= len(self.classes_):
            raise ValueError(f"labelled_classes of the release must lie in 0..{len(self.classes_) - 1}")
        self.labelled_points_, self.labelled_classes_ = points, labels
        if self._publishes_support_function():
            if "feature_map" not in public:
                raise ValueError("a release='support_function' model needs its feature map and centre")
            self._restore_feature_map(release)
        for name in self._PUBLIC_FITTED:
            if name in release.fitted:
                setattr(self, name, release.fitted[name])

    # -- prediction ---------------------------------------------------------------------
    def _predict_index(self, X) -> torch.Tensor:
        check_is_fitted(self, "labelled_points_")
        X = self._as_tensor(X, fitting=False)
        if self.release == "support_function" and "centre_" not in vars(self):
            raise ValueError(
                "this model was published with release='equilibrium_points' (its labelled equilibrium points "
                "only): it has no centre to run the dynamics of release='support_function'"
            )
        clamp = self.grid_.clamp if self.grid_ is not None else (lambda z: z)
        if self.release == "equilibrium_points":
            k = min(int(self.n_neighbors), self.labelled_points_.shape[0])  # k > m: all labelled EPs
            return knn_predict(self.labelled_points_, self.labelled_classes_, clamp(X), k, len(self.classes_))
        return self.labelled_classes_[nearest_index(clamp(self._dynamics(X)), self.labelled_points_)]

    def predict(self, X) -> np.ndarray:
        """Class labels for ``X (m, d)``: shape ``(m,)``."""
        return self.classes_[self._predict_index(X).cpu().numpy()]


def _count_outside(X: torch.Tensor, bounds: Any) -> tuple[int, int]:
    """How many rows of ``X (n, d)`` leave the box ``bounds = (lower, upper)`` (scalars or
    ``(d,)``) in some coordinate, and how many entries do (curator-only: private counts)."""
    lower, upper = (torch.as_tensor(np.asarray(b, dtype=np.float64), dtype=X.dtype, device=X.device) for b in bounds)
    beyond = (X < lower) | (X > upper)
    return int(beyond.any(1).sum()), int(beyond.sum())
