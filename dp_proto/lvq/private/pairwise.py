"""Differentially private one-versus-one GMLVQ with Platt-scaled, coupled probabilities.

``DPPairwiseGMLVQ`` is the private variant of ``dp_proto.lvq.PairwiseGMLVQ`` (Brinkrolf
2023, section 4.4). Every step that reads the private records is a mechanism of one
ledger; the rest is post-processing:

1. **DP initialisation** (``init_fraction * epsilon``): the noisy class means of
   ``dp_class_mean_prototypes`` (discrete Laplace on the ``c`` class counts, sensitivity
   1; Laplace on the class sums, l1 sensitivity ``d``), over all records. Pair
   ``(l, m)`` starts at the noisy means of ``l`` and ``m``; every ``Omega_k`` at the
   identity. The noisy counts are the public normalisers of everything after.
2. **Split**: every record goes to the calibration part with probability
   ``calibration_fraction`` by a coin of its own, drawn independently of the data
   (no stratification: a stratified split would depend on the labels).
3. **Pairs by DP-SGD** on the training part: Poisson sampling at rate ``q``; the
   per-record gradient of ``sum_{k ∋ y_i} Phi(mu_k(x_i))`` -- a record belongs to the
   ``c - 1`` pairs of its class and touches only their parameters -- is clipped
   *jointly* over those pairs to l2 norm ``C``, so the clipped sum over all ``K`` pairs
   has l2 sensitivity ``C`` (add/remove one record) and is one subsampled Gaussian
   mechanism per step, ``N(0, (sigma C)^2)`` on every coordinate. The noisy sum of pair
   ``k`` is divided by the public ``q n~_k``, ``n~_k`` from the noisy counts.
4. **Platt by DP-SGD** on the calibration part (``calibration="dp"``, the default):
   the ``2 K`` parameters ``(a_k, b_k)`` of ``r_lm = 1 / (1 + exp(a h + b))`` on the 1-D
   signed scores ``h in [-1, 1]`` of the released pair models. A record's logistic
   gradient on pair ``k`` is ``(t - r)(h, 1)``, of norm at most ``sqrt(2)``; over its
   ``c - 1`` pairs at most ``sqrt(2 (c - 1))``; it is still clipped explicitly to
   ``platt_max_grad_norm``. Platt's targets ``(N+ + 1)/(N+ + 2)``, ``1/(N- + 2)`` use the
   noisy counts times ``calibration_fraction`` instead of the private ``N+, N-``, so no
   pair can "lack a class": nothing raises or warns on the data. ``a`` is kept in
   ``[-50, -0.1]`` and ``b`` in ``[-10, 10]`` (public bounds, a projection: post-processing;
   ``a < 0`` because ``h > 0`` means closer to the pair's first class).
   ``calibration="public"``: Platt's fit (``fit_platt``) on ``public_calibration =
   (X_pub, y_pub)``, data the user declares public; no privacy cost, and the pairs get
   the whole budget (no split).
5. **Coupling** (``predict_proba``): post-processing.

Composition. The ledger composes the releases *sequentially*: DP initialisation, ``T``
subsampled Gaussian steps of the pairs, ``T_p`` subsampled Gaussian steps of Platt. The
pairs' noise multiplier is calibrated so that initialisation + pairs meet
``(1 - platt_epsilon_fraction) * epsilon``, then Platt's so that all three meet
``epsilon`` (at ``delta``, by the ledger's PLD accountant). Sequential composition holds
for any overlap of the parts, so the bound does not rest on the split.
The split would allow *parallel* composition of steps 3 and 4 (with a per-record coin
independent of the data, removing one record changes exactly one part, whichever its
coin chose; conditioned on the coin the other part's output is unchanged, and the
mixture over the coin of two ``(eps_i, delta_i)``-close output laws is
``(max eps_i, max delta_i)``-close by joint convexity of the hockey-stick divergence;
this holds in both directions of add/remove). The ledger has no parallel event, and a
claimed ``max`` would be a guarantee outside it, so it is not used: ``epsilon_`` is the
sequential bound, and the split is there to keep Platt's fit off the pairs' training
records (held-out scores, as in the non-private model).

Nothing derived from the private records without noise is exposed: the pair counts
(HT's ``n_lm``) are noisy; there is no training loss and no convergence warning;
``n_iter_`` is the public ``T``; the number of records clipped into the bounds is
curator-only (``curator_``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from dp_proto._threads import fit_threads
from dp_proto._validation import torch_device, torch_dtype
from dp_proto.lvq.coupling import COUPLING_METHODS
from dp_proto.lvq.losses import TRANSFER_FUNCTIONS, transfer
from dp_proto.lvq.pairwise import (
    PairwiseFit,
    PairwiseGMLVQ,
    PlattFit,
    class_pairs,
    fit_platt,
    pair_membership,
    pairwise_scores,
)
from dp_proto.lvq.private.dp_init import dp_class_mean_prototypes, dp_init_events
from dp_proto.lvq.private.estimators import DP_RELEASE_WITHHELD, FIT_SCOPE, _DPReleaseHooks, _PrivateInput
from dp_proto.privacy.domain import public_classes
from dp_proto.privacy.dpsgd_plan import calibrate_noise_multiplier, check_dp_sgd_settings, sgd_steps
from dp_proto.privacy.events import SubsampledGaussianEvent
from dp_proto.privacy.ledger import PrivacyEvent, PrivacyLedger, SharedLedger, check_shared_ledger, dp_sgd_event
from dp_proto.privacy.mechanisms import noise_rng
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.randomness import fresh_generator, noise_generator
from dp_proto.privacy.sampling import poisson_batch_index
from dp_proto.privacy.session import record_fit
from dp_proto.privacy.testing import intercept, per_record_coins
from dp_proto.release import register_model

__all__ = [
    "DPPairwiseGMLVQ",
    "PLATT_A_RANGE",
    "PLATT_B_RANGE",
    "pair_partners",
    "pairwise_clipped_gradient_sum",
    "platt_clipped_gradient_sum",
]

_EPS = 1e-12
_NORM_GUARD = 1e-6  # Opacus' guard in the clip factor C / (norm + 1e-6)

#: Public bounds of the private Platt parameters (a projection after every step).
PLATT_A_RANGE = (-50.0, -0.1)
PLATT_B_RANGE = (-10.0, 10.0)
#: Public start of the private Platt fit: ``r = 1 / (1 + exp(-4 h))``.
_PLATT_A0 = -4.0

CALIBRATIONS = ("dp", "public")


# ----------------------------------------------------------------------------- gradients
def pair_partners(num_classes: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """For every class ``l`` the ``c - 1`` pairs it belongs to: ``pair (c, c-1)`` (pair
    indices in ``class_pairs`` order) and ``side (c, c-1)`` (0 if ``l`` is the pair's
    first class, 1 if its second)."""
    pairs = class_pairs(num_classes, device=device)
    c, K = num_classes, pairs.shape[0]
    index = torch.full((c, c), -1, dtype=torch.long, device=device)
    index[pairs[:, 0], pairs[:, 1]] = torch.arange(K, device=device)
    index[pairs[:, 1], pairs[:, 0]] = torch.arange(K, device=device)
    partners = torch.stack([torch.cat([torch.arange(0, k), torch.arange(k + 1, c)]) for k in range(c)]).to(device)
    pair = index.gather(1, partners)
    side = (torch.arange(c, device=device)[:, None] > partners).long()
    return pair, side


def _clip_factor(norms: Tensor, max_grad_norm: float) -> Tensor:
    """``min(1, C / (norm + 1e-6))`` per record, and 0 for a record whose norm is not
    finite: a NaN or infinite gradient entry (a score or distance that overflowed in an
    adversarial model state) would otherwise make the whole sum NaN, a release that shows
    whether the data hold such a record. Use with ``_clipped``, which zeroes those rows."""
    return torch.where(torch.isfinite(norms), (max_grad_norm / (norms + _NORM_GUARD)).clamp(max=1.0), 0.0)


def _clipped(grad: Tensor, factor: Tensor) -> Tensor:
    """``grad (B, ...) * factor (B,)`` with the rows of factor 0 exactly 0 (``0 * nan`` is
    nan): every record contributes at most ``C`` in l2, a non-finite one nothing."""
    factor = factor.reshape(factor.shape + (1,) * (grad.dim() - 1))
    return torch.where(factor > 0, grad * factor, torch.zeros((), dtype=grad.dtype, device=grad.device))


def pairwise_clipped_gradient_sum(
    prototypes: Tensor,
    omegas: Tensor,
    x: Tensor,
    y: Tensor,
    partners: tuple[Tensor, Tensor],
    max_grad_norm: float,
    *,
    transfer_fn: str = "sigmoid",
    beta: float = 16.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """The clipped per-record gradient sum of the pair models: ``(grad prototypes (K, 2,
    d), grad omegas (K, r, d), per-record norms before clipping (B,))``.

    Record ``i`` of class ``l`` costs ``sum_j Phi(mu_j(x_i))`` over the ``c - 1`` pairs
    ``j`` of ``l`` (``mu = (d_own - d_other) / (d_own + d_other)`` under the pair's
    metric); its gradient, which is non-zero on those pairs' parameters only, is clipped
    jointly to l2 norm ``max_grad_norm``. Adding or removing one record therefore moves
    the returned sum by at most ``max_grad_norm`` in l2 (over all ``K`` pairs together).
    Distances are computed from differences ``x - w`` (no cancellation that could
    understate a norm). Exact per-record gradients: the gathered parameters of a row
    depend on that record only. A record whose gradient is not finite (distances that
    overflow under a huge ``Omega``) contributes zero.
    """
    pair_of, side_of = partners
    K, _, d = prototypes.shape
    B = x.shape[0]
    if B == 0:
        return torch.zeros_like(prototypes), torch.zeros_like(omegas), x.new_zeros(0)
    pair = pair_of[y]  # (B, c-1)
    side = side_of[y]  # (B, c-1)
    with torch.enable_grad():
        w = prototypes.detach()[pair].clone().requires_grad_(True)  # (B, c-1, 2, d)
        om = omegas.detach()[pair].clone().requires_grad_(True)  # (B, c-1, r, d)
        v = x[:, None, None, :] - w  # (B, c-1, 2, d)
        u = torch.einsum("bkrd,bkjd->bkjr", om, v)
        dist = u.pow(2).sum(-1)  # (B, c-1, 2)
        d_own = dist.gather(2, side[..., None])[..., 0]
        d_other = dist.gather(2, (1 - side)[..., None])[..., 0]
        mu = (d_own - d_other) / (d_own + d_other).clamp_min(_EPS)
        cost = transfer(mu, transfer_fn, beta)  # type: ignore[arg-type]
        gw, gom = torch.autograd.grad(cost.sum(), (w, om))
    with torch.no_grad():
        norms = (gw.pow(2).flatten(1).sum(1) + gom.pow(2).flatten(1).sum(1)).sqrt()
        factor = _clip_factor(norms, max_grad_norm)
        gw = _clipped(gw, factor)
        gom = _clipped(gom, factor)
        flat = pair.reshape(-1)
        sum_w = torch.zeros_like(prototypes).index_add_(0, flat, gw.reshape(-1, 2, d))
        sum_om = torch.zeros_like(omegas).index_add_(0, flat, gom.reshape(-1, *omegas.shape[1:]))
    return sum_w, sum_om, norms


def platt_clipped_gradient_sum(
    a: Tensor,
    b: Tensor,
    scores: Tensor,
    y: Tensor,
    partners: tuple[Tensor, Tensor],
    targets: tuple[Tensor, Tensor],
    max_grad_norm: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """The clipped per-record gradient sum of Platt's negative log-likelihood: ``(grad a
    (K,), grad b (K,), per-record norms before clipping (B,))``.

    ``scores (B, K)``: the signed scores of the records under all pairs (only the
    ``c - 1`` pairs of a record's class are read); ``targets = (t_pos (K,), t_neg (K,))``
    public. A record's gradient on pair ``k`` is ``(t - r)(h, 1)`` (norm at most
    ``sqrt(2)`` for ``|h| <= 1``); over its ``c - 1`` pairs it is clipped jointly to
    ``max_grad_norm``, the l2 sensitivity of the sum. A record with a NaN score (a pair
    model whose distances overflow) contributes zero.
    """
    pair_of, side_of = partners
    B = scores.shape[0]
    if B == 0:
        return torch.zeros_like(a), torch.zeros_like(b), scores.new_zeros(0)
    pair = pair_of[y]  # (B, c-1)
    side = side_of[y]
    h = scores.gather(1, pair).clamp(-1.0, 1.0)  # (B, c-1)
    t_pos, t_neg = targets
    t = torch.where(side == 0, t_pos[pair], t_neg[pair])
    r = torch.sigmoid(-(a[pair] * h + b[pair]))
    g = t - r  # d nll / d f, f = a h + b
    ga, gb = g * h, g
    norms = (ga.pow(2).sum(1) + gb.pow(2).sum(1)).sqrt()
    factor = _clip_factor(norms, max_grad_norm)
    flat = pair.reshape(-1)
    sum_a = torch.zeros_like(a).index_add_(0, flat, _clipped(ga, factor).reshape(-1))
    sum_b = torch.zeros_like(b).index_add_(0, flat, _clipped(gb, factor).reshape(-1))
    return sum_a, sum_b, norms


def _noisy(name: str, summed: Tensor, std: float, generator, secure_mode: bool) -> Tensor:
    """``summed + N(0, std^2)`` per coordinate, through the release hook (a subsampled
    step: no fixed sensitivity is declared; the clipped sums are checked on their own)."""

    def draw() -> Tensor:
        return summed + gaussian_noise(
            summed.shape, std, generator=generator, secure_mode=secure_mode, dtype=summed.dtype, device=summed.device
        )

    return intercept(name, summed, None, None, draw)


# ----------------------------------------------------------------------------- estimator
@register_model("dp_proto.DPPairwiseGMLVQ")
class DPPairwiseGMLVQ(_PrivateInput, _DPReleaseHooks, PairwiseGMLVQ):
    """Differentially private one-versus-one GMLVQ with Platt-scaled probabilities.

    DP class-mean initialisation, the ``c(c-1)/2`` pair models by one DP-SGD run (a
    record's gradient clipped jointly over the ``c - 1`` pairs it belongs to), and one
    Platt sigmoid per pair fitted by DP-SGD on a held-out calibration part (or on data
    declared public); ``predict_proba`` couples the pairwise probabilities as
    ``PairwiseGMLVQ`` does. The whole fit is ``(epsilon, delta)``-DP under add/remove one
    record, composed sequentially by one ledger (``ledger_``); see the module docstring
    for the mechanism and the argument.

    Parameters
    ----------
    coupling : {"pkpd", "ht", "wlw1", "wlw2", "voting"}, default "pkpd"
        As ``PairwiseGMLVQ`` (HT's ``n_lm`` are noisy counts).
    epsilon : float, default 1.0
        Total budget of the fit.
    delta : float, default 1e-5
    bounds : (lower, upper) or None, default None
        Public feature bounds, mapped onto ``[-1, 1]``; records outside are clipped
        (their count is curator-only). None: the data are in ``[-1, 1]^d`` already, with
        a ``DomainWarning`` (a public setting: it says nothing about the data).
    classes : array-like or None, default None
        The public label set; None reads it from ``y`` with a ``PrivacyLeakWarning``.
        A class without records still gets its pairs, from noise alone.
    calibration : {"dp", "public"}, default "dp"
        ``"dp"``: Platt by DP-SGD on a calibration part of the private records, charged
        to the ledger. ``"public"``: Platt's fit on ``public_calibration``, free.
    public_calibration : (X_pub, y_pub) or None
        Records the user declares public (required with ``calibration="public"``).
    calibration_fraction : float in (0, 1), default 0.2
        Probability of a record's coin sending it to the calibration part (``"dp"``).
    platt_epsilon_fraction : float in (0, 1), default 0.1
        Share of ``epsilon`` left for the Platt fit: initialisation and pairs are
        calibrated to ``(1 - platt_epsilon_fraction) * epsilon`` (``"dp"`` only).
    sampling_rate : float, default 0.01
        Poisson rate ``q`` of the pairs' DP-SGD (public).
    epochs : float, default 50
        ``T = ceil(epochs * int(1 / q))`` pair steps.
    max_grad_norm : float, default 0.5
        Clipping norm ``C`` of a record's joint gradient over its ``c - 1`` pairs.
    lr : float, default 0.05
        Step size of the pairs' SGD (on the noisy sum divided by ``q n~_k``).
    init_fraction : float, default 0.2
        Share of ``epsilon`` for the DP initialisation.
    platt_sampling_rate : float, default 0.2
    platt_epochs : float, default 20
    platt_max_grad_norm : float, default 1.0
    platt_lr : float, default 2.0
        Poisson rate, length, clipping norm and step size of the Platt DP-SGD. The last
        half of the iterates is averaged (post-processing).
    rank : int or None, default None
        Rows of every ``Omega_k``; None means ``d``.
    transfer_fn : {"identity", "sigmoid"}, default "sigmoid"
    beta : float, default 16.0
        Transfer of the pairs' GLVQ cost (DPGMLVQ's defaults).
    secure_mode : bool, default False
        Noise from ``os.urandom``.
    noise_seed : int or None, default None
        Reproducible noise for tests (warns ``PrivacyLeakWarning``).
    ledger : SharedLedger or None
        A budget shared by several fits; checked before the data are read.
    random_state : None
        Unused (all randomness of the fit is noise or sampling); kept for the API.
    verbose, device, dtype :
        As ``PairwiseGMLVQ`` (``dtype`` defaults to ``"float64"``).

    Attributes
    ----------
    classes_, pairs_, prototypes_, omegas_, platt_a_, platt_b_ :
        As ``PairwiseGMLVQ`` (prototypes and metrics in the input units).
    pair_counts_ : ndarray (K,)
        Noisy training counts of every pair (from the released class counts).
    n_iter_ : int
        The public number of pair DP-SGD steps ``T``.
    noise_multiplier_, platt_noise_multiplier_ : float
    ledger_ : PrivacyLedger
    epsilon_ : float
        What the ledger certifies at ``delta`` (at most ``epsilon``).
    privacy_ : dict
        The ledger's summary.
    curator_ : dict
        Curator-only (``num_clipped``).
    """

    def __init__(
        self,
        coupling: str = "pkpd",
        *,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        bounds: Any = None,
        classes: Any = None,
        calibration: str = "dp",
        public_calibration: Any = None,
        calibration_fraction: float = 0.2,
        platt_epsilon_fraction: float = 0.1,
        sampling_rate: float = 0.01,
        epochs: float = 50,
        max_grad_norm: float = 0.5,
        lr: float = 0.05,
        init_fraction: float = 0.2,
        platt_sampling_rate: float = 0.2,
        platt_epochs: float = 20,
        platt_max_grad_norm: float = 1.0,
        platt_lr: float = 2.0,
        rank: int | None = None,
        transfer_fn: str = "sigmoid",
        beta: float = 16.0,
        secure_mode: bool = False,
        noise_seed: int | None = None,
        ledger: SharedLedger | None = None,
        random_state: Any = None,
        verbose: int | None = None,
        device: str = "cpu",
        dtype: str = "float64",
    ) -> None:
        self.coupling = coupling
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.classes = classes
        self.calibration = calibration
        self.public_calibration = public_calibration
        self.calibration_fraction = calibration_fraction
        self.platt_epsilon_fraction = platt_epsilon_fraction
        self.sampling_rate = sampling_rate
        self.epochs = epochs
        self.max_grad_norm = max_grad_norm
        self.lr = lr
        self.init_fraction = init_fraction
        self.platt_sampling_rate = platt_sampling_rate
        self.platt_epochs = platt_epochs
        self.platt_max_grad_norm = platt_max_grad_norm
        self.platt_lr = platt_lr
        self.rank = rank
        self.transfer_fn = transfer_fn
        self.beta = beta
        self.secure_mode = secure_mode
        self.noise_seed = noise_seed
        self.ledger = ledger
        self.random_state = random_state
        self.verbose = verbose
        self.device = device
        self.dtype = dtype

    # -- the release format (dp_proto.release; RELEASE_DROPS from _DPReleaseHooks) ------
    _RELEASE_FITTED: ClassVar[tuple[str, ...]] = (
        "n_iter_",
        "noise_multiplier_",
        "platt_noise_multiplier_",
        "sampling_rate_",
        "epsilon_",
    )
    _RELEASE_WITHHELD: ClassVar[dict[str, str]] = {
        **DP_RELEASE_WITHHELD,
        "public_calibration": "records, not a setting: the data declared public for Platt's fit are not "
        "republished with the model",
    }
    _DOMAIN_NOTE: ClassVar[str] = (
        "the public domain of the fit: features were mapped from [lower, upper] onto [-1, 1] (records outside "
        "clipped); the model's tensors are mapped back to the input units"
    )

    # the noisy pair counts (from the released class counts), as coupling="ht" uses them
    _PAIR_COUNTS_DTYPE: ClassVar[type] = np.float64

    @classmethod
    def _release_tensors_per_pair(cls) -> tuple[str, ...]:
        """``PairwiseGMLVQ``'s less ``pair_loss`` (a DP-SGD fit has no exact cost)."""
        return ("platt_a", "platt_b", "pair_counts")

    # -- validation (public settings only) ---------------------------------------------
    def _validate_params(self) -> None:
        if self.coupling not in COUPLING_METHODS:
            raise ValueError(f"coupling must be one of {list(COUPLING_METHODS)}, got {self.coupling!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {self.calibration!r}")
        if self.calibration == "public" and self.public_calibration is None:
            raise ValueError("calibration='public' needs public_calibration=(X_pub, y_pub), data declared public")
        check_dp_sgd_settings(self.epsilon, self.delta, self.sampling_rate)
        sgd_steps(self.epochs, self.sampling_rate)
        for name in ("calibration_fraction", "platt_epsilon_fraction", "init_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 < value < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
        if self.calibration == "dp":
            if self.init_fraction + self.platt_epsilon_fraction >= 1:
                raise ValueError("init_fraction + platt_epsilon_fraction must be below 1 (the pairs need a share)")
            check_dp_sgd_settings(self.epsilon, self.delta, self.platt_sampling_rate)
            sgd_steps(self.platt_epochs, self.platt_sampling_rate)
        for name in ("max_grad_norm", "lr", "platt_max_grad_norm", "platt_lr", "beta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.rank is not None and (
            isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)) or self.rank < 1
        ):
            raise ValueError(f"rank must be a positive integer or None, got {self.rank!r}")
        if self.transfer_fn not in TRANSFER_FUNCTIONS:
            raise ValueError(f"transfer_fn must be one of {list(TRANSFER_FUNCTIONS)}, got {self.transfer_fn!r}")
        check_shared_ledger(self.ledger, type(self).__name__)
        torch_dtype(self.dtype)
        torch_device(self.device)

    # -- the public plan ---------------------------------------------------------------
    def privacy_plan(self, n_features: int) -> tuple[list[PrivacyEvent], float, float | None]:
        """The fit's events from public settings alone, and the noise multipliers of the
        pairs and of Platt (None with ``calibration="public"``)."""
        self._validate_params()
        eps, delta = float(self.epsilon), float(self.delta)
        init_events = list(dp_init_events(n_features, self.init_fraction * eps))
        q, T = float(self.sampling_rate), sgd_steps(self.epochs, self.sampling_rate)
        pairs_target = eps if self.calibration == "public" else (1.0 - self.platt_epsilon_fraction) * eps
        sigma = calibrate_noise_multiplier(pairs_target, delta, q, T, prior_events=tuple(init_events))
        events = [*init_events, dp_sgd_event(sigma, q, T)]
        if self.calibration == "public":
            return events, sigma, None
        qp, Tp = float(self.platt_sampling_rate), sgd_steps(self.platt_epochs, self.platt_sampling_rate)
        sigma_p = calibrate_noise_multiplier(eps, delta, qp, Tp, prior_events=tuple(events))
        events.append(SubsampledGaussianEvent(sigma_p, qp, count=Tp, name="platt/dp_sgd"))
        return events, sigma, sigma_p

    def planned_privacy_events(self, n_features: int) -> tuple[PrivacyEvent, ...]:
        """The releases ``fit`` makes on ``n_features`` features (``privacy_plan``'s events;
        ``DPPipeline`` checks them against its budget before anything is fitted)."""
        return tuple(self.privacy_plan(n_features)[0])

    # -- fit ---------------------------------------------------------------------------
    def fit(self, X, y) -> DPPairwiseGMLVQ:
        """Private fit on ``X (n, d)``, ``y (n,)``; see the class docstring."""
        X, y_index = self._fit_input(X, y)
        c = len(self.classes_)
        n, d = X.shape
        events, sigma, sigma_p = self.privacy_plan(d)
        shared = self.ledger
        if shared is not None:  # refuse before reading the data (public events only)
            shared.check(*events)
        Z = self._domain(X, fitting=True)

        tdtype = torch_dtype(self.dtype)
        x_t = torch.as_tensor(Z, dtype=tdtype, device=self.device)
        y_t = torch.as_tensor(y_index, dtype=torch.long, device=self.device)
        ledger = PrivacyLedger(budget=(float(self.epsilon), float(self.delta)), default_delta=float(self.delta))
        generator: torch.Generator | None = noise_generator(self.noise_seed, owner=type(self).__name__)
        generator = noise_rng(ledger, None if self.secure_mode else generator, self.secure_mode, None, "dp_sgd")
        self._generator = generator
        self._sampling_gen = fresh_generator() if self.secure_mode else generator

        init = dp_class_mean_prototypes(
            x_t,
            y_t,
            c,
            self.init_fraction * float(self.epsilon),
            ledger=ledger,
            generator=generator,
            secure_mode=self.secure_mode,
        )
        self._noisy_counts = init.noisy_counts.to(torch.float64).clamp_min(0.0).cpu()  # released
        self._init_means = init.prototypes.to(tdtype)
        self.pairs_ = class_pairs(c).numpy()
        self.noise_multiplier_ = sigma
        self.platt_noise_multiplier_ = sigma_p
        self.sampling_rate_ = float(self.sampling_rate)

        if self.calibration == "dp":
            f = float(self.calibration_fraction)
            coins = per_record_coins(
                "calibration_split",
                lambda: torch.rand(n, generator=self._sampling_gen, dtype=torch.float64) < f,
            ).to(self.device)
            train, calibrate = ~coins, coins
            train_share = 1.0 - f
        else:
            train = torch.ones(n, dtype=torch.bool, device=self.device)
            calibrate = None
            train_share = 1.0

        self._train_share = train_share
        ledger.spend(events[2])  # the pairs' steps, spent before they run
        rows = float(self.sampling_rate) * train_share * float(self._noisy_counts.sum())  # released counts
        with fit_threads(self._pairs_work(rows, c, d), self.device):
            result = self._fit_pairs(x_t[train], y_t[train], c)
        self._store_pairs(result)

        if self.calibration == "dp":
            assert calibrate is not None
            ledger.spend(events[3])
            scores = pairwise_scores(x_t[calibrate], result.prototypes, result.omegas)
            labels = pair_membership(y_t[calibrate], result.pairs)
            self._calibration_y = y_t[calibrate]
            rows = float(self.platt_sampling_rate) * f * float(self._noisy_counts.sum())
            with fit_threads(rows * 2 * len(self.pairs_), self.device):  # the 2 K sigmoid parameters
                platt = self._fit_calibration(scores, labels)
        else:
            X_pub, y_pub = self.public_calibration
            platt = self._public_platt(X_pub, y_pub, result)
        self.platt_a_ = platt.a.cpu().numpy()
        self.platt_b_ = platt.b.cpu().numpy()

        if shared is not None:
            shared.spend(*ledger.events)
        record_fit(self, ledger, shared=shared is not None, delta=float(self.delta))
        self.ledger_ = ledger
        self.epsilon_ = ledger.get_epsilon(float(self.delta))
        self.privacy_ = ledger.summary(float(self.delta))
        self.privacy_scope_ = FIT_SCOPE
        for name in ("_generator", "_sampling_gen", "_noisy_counts", "_init_means", "_calibration_y", "_train_share"):
            self.__dict__.pop(name, None)
        return self

    def _store_pairs(self, result: PairwiseFit) -> None:
        """Map the pair models (trained in ``[-1, 1]`` units) back to the input units:
        ``Omega (z - w_z) = Omega diag(2 / (u - l)) (x - w_x)``; metrics renormalised to
        trace 1 (the scores are scale free). Post-processing."""
        lower = np.broadcast_to(np.asarray(self.scaler_.lower_, dtype=np.float64), (self.n_features_in_,))
        upper = np.broadcast_to(np.asarray(self.scaler_.upper_, dtype=np.float64), (self.n_features_in_,))
        protos = result.prototypes.detach().cpu().numpy().astype(np.float64)
        omegas = result.omegas.detach().cpu().numpy().astype(np.float64) * (2.0 / (upper - lower))[None, None, :]
        norms = np.sqrt((omegas**2).reshape(len(omegas), -1).sum(1)).clip(min=_EPS)
        self.prototypes_ = self.scaler_.inverse_transform(protos)
        self.omegas_ = omegas / norms[:, None, None]
        self.pair_counts_ = result.pair_counts.cpu().numpy()
        self.n_iter_ = result.n_iter

    def _pair_noisy_counts(self, share: float) -> Tensor:
        """``share * (n~_l + n~_m)`` per pair, ``(K,)``: post-processing of the released counts."""
        counts = self._noisy_counts * share
        pairs = torch.as_tensor(self.pairs_)
        return counts[pairs[:, 0]] + counts[pairs[:, 1]]

    # -- the replaceable steps of PairwiseGMLVQ ----------------------------------------
    def _fit_pairs(self, x: Tensor, y: Tensor, num_classes: int) -> PairwiseFit:
        """The pair models by DP-SGD on the training part (its event already spent)."""
        pairs = class_pairs(num_classes, device=x.device)
        partners = pair_partners(num_classes, device=x.device)
        K, d = pairs.shape[0], x.shape[1]
        r = d if self.rank is None else int(self.rank)
        prototypes = self._init_means[pairs].clone()  # (K, 2, d)
        omegas = torch.eye(r, d, dtype=x.dtype, device=x.device).expand(K, r, d).clone()  # identity scale
        q, T = float(self.sampling_rate), sgd_steps(self.epochs, self.sampling_rate)
        C = float(self.max_grad_norm)
        std = float(self.noise_multiplier_) * C
        counts = self._pair_noisy_counts(self._train_share).to(x.dtype).to(x.device)
        scale = (float(self.lr) / (q * counts.clamp_min(1.0)))[:, None, None]  # public normaliser
        n_w, n = prototypes.numel(), x.shape[0]
        for _ in range(T):
            index = poisson_batch_index(n, q, self._sampling_gen, x.device)
            gw, gom, _ = pairwise_clipped_gradient_sum(
                prototypes, omegas, x[index], y[index], partners, C, transfer_fn=self.transfer_fn, beta=self.beta
            )
            summed = torch.cat([gw.reshape(-1), gom.reshape(-1)])
            noisy = _noisy("dp_sgd", summed, std, self._generator, self.secure_mode)
            prototypes = prototypes - scale * noisy[:n_w].view_as(prototypes)
            omegas = omegas - scale * noisy[n_w:].view_as(omegas)
        return PairwiseFit(
            pairs=pairs,
            prototypes=prototypes,
            omegas=omegas,
            pair_counts=counts,
            pair_losses=torch.full((K,), float("nan"), dtype=x.dtype),
            n_iter=T,
            losses=[],
            converged=True,
        )

    def _fit_calibration(self, scores: Tensor, labels: Tensor) -> PlattFit:
        """Platt by DP-SGD on the calibration part (its event already spent); ``labels``
        is not read (it is the calibration part's ``pair_membership``; the records'
        classes give the same roles)."""
        c = len(self.classes_)
        partners = pair_partners(c, device=scores.device)
        y = self._calibration_y
        dtype = scores.dtype
        f = float(self.calibration_fraction)
        class_counts = (self._noisy_counts * f).to(dtype).to(scores.device)
        pairs = torch.as_tensor(self.pairs_, device=scores.device)
        pos, neg = class_counts[pairs[:, 0]], class_counts[pairs[:, 1]]
        targets = ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0))  # Platt's, on noisy counts
        K = pairs.shape[0]
        a = torch.full((K,), _PLATT_A0, dtype=dtype, device=scores.device)
        b = torch.zeros(K, dtype=dtype, device=scores.device)
        qp, Tp = float(self.platt_sampling_rate), sgd_steps(self.platt_epochs, self.platt_sampling_rate)
        C = float(self.platt_max_grad_norm)
        sigma_p = self.platt_noise_multiplier_
        if sigma_p is None:  # pragma: no cover - calibration="public" never fits Platt privately
            raise RuntimeError("the private Platt fit needs the noise multiplier of its plan")
        std = float(sigma_p) * C
        scale = float(self.platt_lr) / (qp * (pos + neg).clamp_min(1.0))
        avg_a, avg_b, kept = torch.zeros_like(a), torch.zeros_like(b), 0
        n = scores.shape[0]
        for step in range(Tp):
            index = poisson_batch_index(n, qp, self._sampling_gen, scores.device)
            ga, gb, _ = platt_clipped_gradient_sum(a, b, scores[index], y[index], partners, targets, C)
            noisy = _noisy("platt/dp_sgd", torch.cat([ga, gb]), std, self._generator, self.secure_mode)
            a = (a - scale * noisy[:K]).clamp(*PLATT_A_RANGE)
            b = (b - scale * noisy[K:]).clamp(*PLATT_B_RANGE)
            if step >= Tp // 2:
                avg_a, avg_b, kept = avg_a + a, avg_b + b, kept + 1
        return PlattFit(a=avg_a / kept, b=avg_b / kept, positives=pos, negatives=neg, n_iter=Tp, converged=True)

    def _public_platt(self, X_pub, y_pub, result: PairwiseFit) -> PlattFit:
        """Platt's fit on records the user declared public (no privacy cost)."""
        X_pub = np.asarray(X_pub, dtype=np.float64)
        if X_pub.ndim != 2 or X_pub.shape[1] != self.n_features_in_:
            raise ValueError(f"public_calibration X must have shape (m, {self.n_features_in_}), got {X_pub.shape}")
        _, y_pub_index = public_classes(np.asarray(y_pub), self.classes_, type(self).__name__, warn=False)
        Z = self._domain(X_pub, fitting=False)
        tdtype = result.prototypes.dtype
        z_t = torch.as_tensor(Z, dtype=tdtype, device=result.prototypes.device)
        y_pt = torch.as_tensor(y_pub_index, dtype=torch.long, device=z_t.device)
        scores = pairwise_scores(z_t, result.prototypes, result.omegas)
        names = [f"classes ({self.classes_[i]!r}, {self.classes_[j]!r})" for i, j in self.pairs_.tolist()]
        return fit_platt(scores, pair_membership(y_pt, result.pairs), pair_names=names)
