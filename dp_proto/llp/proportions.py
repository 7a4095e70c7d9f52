"""Label counts of time batches and their differentially private proportions.

The release of Sachweh, Boiar & Liebig (2021, "Differentially private learning from
label proportions", Sec. 3, the algorithm box): per batch ``B_i`` the label
counts get ``Lap(1/epsilon)`` noise each, are clipped to ``[0.001, m]`` and
normalised to proportions. The proportions are what a node sends to its
neighbours.

Neighbouring relation and sensitivity
-------------------------------------
A record is one sample (window) of a node: its features, its label and its time
slot. Batches are fixed, public time windows (``BatchGrid``: batch ``k`` is
the slots ``[origin + k b, origin + (k + 1) b)`` at every node), so a record
lies in exactly one batch and has exactly one label. Adding or removing one
record therefore changes exactly one entry of the ``(num_batches, num_classes)``
count table by exactly one: the l1 sensitivity of the whole table is 1, and
Laplace noise of scale ``1/epsilon`` on every entry makes the whole table
epsilon-DP (add/remove one record) -- the same argument as a histogram; the
per-batch loop of Sachweh, Boiar & Liebig is parallel composition over disjoint batches.
Clipping and normalising are post-processing, *provided the clip bounds are
public* (see ``private_label_proportions``). The shape of the table must be
public too: the batch grid comes from a public time range, never from the times in
the data (see ``simulate_network``).

Randomness. The noise comes from fresh operating-system entropy unless the caller
opts into reproducible noise (``noise_seed``, or a ``generator`` of its own), which
warns with ``PrivacyLeakWarning`` and is recorded in the
ledger (``summary()["noise"] == "reproducible"``).

Floating point. The noise is discrete Laplace (integers, ``P(k) ~ exp(-epsilon |k|)``)
added to the integer counts (``laplace_mechanism`` with
``grid=1``), so the noisy counts are integers and Mironov's (2012) floating-point attack
on continuous Laplace has nothing to read; clipping and normalising are
post-processing. See ``dp_proto.privacy.noise``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dp_proto.exceptions import DataValidationError
from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.curator import curator_log
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.mechanisms import laplace_mechanism
from dp_proto.privacy.randomness import seeded_generator

__all__ = [
    "DEFAULT_FLOOR",
    "ESTIMATORS",
    "check_estimator",
    "LabelProportions",
    "as_source",
    "batch_label_counts",
    "private_label_proportions",
    "proportion_bounds",
]

#: Lower clip bound of a noisy count (0.001, as Sachweh, Boiar & Liebig 2021).
DEFAULT_FLOOR = 1e-3

#: How noisy counts become proportions: ``"clipped"`` clips to ``[floor, b]`` and
#: normalises (the release of Sachweh, Boiar & Liebig 2021); ``"unbiased"`` divides the
#: unclipped noisy counts by the public batch size.
ESTIMATORS = ("clipped", "unbiased")


def check_estimator(estimator: str) -> str:
    """``estimator`` checked against ``ESTIMATORS``."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return estimator


@dataclass(frozen=True)
class LabelProportions:
    """Label proportions of the batches of one node, as sent to its neighbours.

    Attributes
    ----------
    proportions : Tensor of shape (num_batches, num_classes), float64
        Rows sum to 1 (except for ``estimator="unbiased"``, whose rows are
        unbiased noisy estimates).
    valid : Tensor of shape (num_batches,), bool
        Rows a receiver may use. Exact (``epsilon=None``) proportions: the
        batches that hold at least one record (empty batches get uniform
        rows, which carry no information). Private proportions: all ``True``;
        every batch of the public grid is released, whether or not it holds
        records, since which batches are empty is itself a property of the
        data.
    epsilon : float or None
        Privacy parameter of the release; ``None`` for exact proportions.
    noisy_counts : Tensor of shape (num_batches, num_classes) or None
        Private releases: the noisy counts the proportions are computed from
        (clipped for the ``"clipped"`` estimator; as private as the proportions; kept
        for diagnostics and tests). ``None`` for exact proportions.
    """

    proportions: Tensor
    valid: Tensor
    epsilon: float | None = None
    noisy_counts: Tensor | None = None

    @property
    def num_batches(self) -> int:
        return int(self.proportions.shape[0])

    @property
    def num_classes(self) -> int:
        return int(self.proportions.shape[1])

    def to(self, device: torch.device | str) -> LabelProportions:
        """The same release on ``device`` (what a receiver does with a message)."""
        counts = None if self.noisy_counts is None else self.noisy_counts.to(device)
        return LabelProportions(self.proportions.to(device), self.valid.to(device), self.epsilon, counts)


def _check_index_vector(values: Tensor, name: str, upper: int, what: str) -> Tensor:
    if not isinstance(values, Tensor):
        values = torch.as_tensor(values)
    if values.dim() != 1:
        raise ValueError(f"{name} must have shape (m,), got {tuple(values.shape)}")
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        raise DataValidationError(f"{name} must hold integers, got dtype {values.dtype}")
    if values.numel():
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi >= upper:
            bad = values[(values < 0) | (values >= upper)]
            raise DataValidationError(
                f"{name} must lie in 0..{upper - 1} ({what}), got value(s) "
                f"{sorted(set(bad[:10].tolist()))} (range [{lo}, {hi}])"
            )
    return values.long()


def as_source(source: LabelProportions | Tensor) -> tuple[Tensor, Tensor | None]:
    """``(proportions (B, L), valid (B,) or None)`` of a source of proportions: a
    ``LabelProportions`` or a bare table (every bag valid)."""
    if isinstance(source, LabelProportions):
        return source.proportions, source.valid
    return torch.as_tensor(source), None


def batch_label_counts(labels: Tensor, batch_ids: Tensor, num_batches: int, num_classes: int) -> Tensor:
    """Number of records of every (batch, label) pair.

    Parameters
    ----------
    labels : Tensor of shape (m,), integer
        Class of each record, ``0 .. num_classes - 1``.
    batch_ids : Tensor of shape (m,), integer
        Batch of each record, ``0 .. num_batches - 1`` (e.g. from
        ``dp_proto.llp.grid.time_batches``), on the device of ``labels``.
    num_batches, num_classes : int
        Size of the table; both >= 1.

    Returns
    -------
    Tensor of shape (num_batches, num_classes), float64
        On the device of ``labels``.

    Raises
    ------
    ValueError
        Shapes that differ or are not 1-d; ``num_batches`` or ``num_classes`` < 1.
    DataValidationError
        Non-integer values, or a label or batch id out of range.
    """
    for name, value in (("num_batches", num_batches), ("num_classes", num_classes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    labels = _check_index_vector(labels, "labels", num_classes, f"num_classes={num_classes}")
    batch_ids = _check_index_vector(batch_ids, "batch_ids", num_batches, f"num_batches={num_batches}")
    if labels.shape != batch_ids.shape:
        raise ValueError(
            f"labels and batch_ids must have the same length, got {labels.numel()} and {batch_ids.numel()}"
        )
    flat = batch_ids.to(labels.device) * num_classes + labels
    counts = torch.bincount(flat, minlength=num_batches * num_classes)
    return counts.to(torch.float64).reshape(num_batches, num_classes)


def proportion_bounds(num_classes: int, max_count: float, floor: float = DEFAULT_FLOOR) -> tuple[float, float]:
    """Smallest and largest proportion ``private_label_proportions`` can output.

    With every count clipped to ``[floor, max_count]``, a proportion is at least
    ``floor / (floor + (L - 1) max_count)`` and at most ``max_count / (max_count
    + (L - 1) floor)`` for ``L = num_classes``.
    """
    rest = num_classes - 1
    return floor / (floor + rest * max_count), max_count / (max_count + rest * floor)


def _check_counts(counts: Tensor) -> Tensor:
    if not isinstance(counts, Tensor):
        counts = torch.as_tensor(counts, dtype=torch.float64)
    if counts.dim() != 2 or counts.shape[1] < 1:
        raise ValueError(f"counts must have shape (num_batches, num_classes), got {tuple(counts.shape)}")
    counts = counts.to(torch.float64)
    if not bool(torch.isfinite(counts).all()):
        rows = torch.nonzero(~torch.isfinite(counts).all(1)).flatten()[:10].tolist()
        raise DataValidationError(f"counts contain NaN or inf (batch row(s) {rows})")
    if bool((counts < 0).any()):
        raise DataValidationError("counts must be >= 0")
    if not torch.equal(counts, torch.round(counts)):
        raise DataValidationError(
            "counts must be whole numbers (records per batch and label); the release adds integer noise to them"
        )
    return counts


def private_label_proportions(
    counts: Tensor,
    epsilon: float | None,
    *,
    batch_sizes: float | Tensor | None = None,
    floor: float = DEFAULT_FLOOR,
    ledger: PrivacyLedger | None = None,
    generator: torch.Generator | None = None,
    noise_seed: int | None = None,
    name: str = "llp/label_counts",
    estimator: str = "clipped",
) -> LabelProportions:
    """Label proportions of every batch: exact, or epsilon-DP (Sachweh, Boiar & Liebig 2021).

    Private release (``epsilon`` given), per batch ``i`` and class ``l``::

        q_il = clip(n_il + Lap(1/epsilon), floor, M_i),   p_il = q_il / sum_l q_il

    The noise is drawn by ONE ``laplace_mechanism``
    call on the whole table (l1 sensitivity 1, ``single_coordinate=True``), so
    ``ledger`` records one Laplace release with noise multiplier ``1/epsilon``
    and the whole table is epsilon-DP under add/remove one record: a record lies in
    exactly one batch (a public time window) and has one label, so it changes one
    count by one. Clipping and normalising are post-processing.

    Clip bounds. Sachweh, Boiar & Liebig clip to ``[0.001, m]`` with ``m`` the batch's true
    number of records (its line 7). That ``m`` is data-dependent (windows touching a
    missing count are dropped), and a data-dependent bound is not post-processing:
    a count clipped at ``m`` next to a count clipped at ``floor`` gives a proportion
    ``m / (m + floor + ...)`` with positive probability, an atom whose position
    reveals ``m`` exactly and which a neighbouring data set (``m +- 1``) never
    produces, so no epsilon holds. Here the upper bound ``M_i`` is public:
    ``batch_sizes`` (the nominal batch size ``b``, or one public bound per batch);
    ``None`` clips from below only. ``floor`` keeps every proportion positive, as in
    the paper.

    Bias. Clipping at ``floor`` moves every small count up (for a true count of 0
    the clipped value has mean about ``1 / (2 epsilon)``, i.e. 5 windows at
    epsilon = 0.1), so the clipped proportions are pulled towards uniform, and a
    labelling fitted to them spreads labels too evenly. ``estimator="unbiased"``
    releases ``(n_il + Lap(1/epsilon)) / M_i`` instead: no clipping and no
    normalisation, an unbiased estimate of ``n_il / M_i`` (the proportion itself
    when the batch is full, ``m_i = M_i``), whose rows need not sum to 1 and may be
    negative. With the squared loss of ``local_search``, zero-mean
    noise on the target adds a constant to the expected loss, so the expected loss
    has the minimiser of the exact proportions. Same noise, same ledger event,
    same epsilon (post-processing with a public ``M_i``).

    Parameters
    ----------
    counts : Tensor of shape (num_batches, num_classes)
        From ``batch_label_counts``; finite, >= 0.
    epsilon : float > 0 or None
        ``None``: exact proportions, nothing is drawn or recorded.
    batch_sizes : float, or Tensor of shape (num_batches,), optional
        Public upper clip bound(s), >= ``floor``: the nominal batch size ``b``
        (the number of time slots per batch, an upper bound on the records in a
        batch). Ignored when ``epsilon`` is None.
    floor : float, default 1e-3
        Lower clip bound (the paper's 0.001), > 0.
    ledger : PrivacyLedger, optional
        Records the release (and refuses it over budget before noise is drawn).
    generator : torch.Generator, optional
        Source of the noise, on the device of ``counts``. Default: a fresh generator
        seeded from operating-system entropy. A caller's generator makes the noise
        reproducible (warns with ``PrivacyLeakWarning``
        unless it came from ``dp_proto.privacy.randomness``; the ledger records
        ``"noise": "reproducible"``).
    noise_seed : int or None, default None
        Explicit opt-in to reproducible noise (tests, benchmarks): the noise comes
        from a generator seeded with ``noise_seed``; warns with
        ``PrivacyLeakWarning`` and the ledger records
        ``"noise": "reproducible"``. Not together with ``generator``.
    name : str
        Name of the event in the ledger.
    estimator : {"clipped", "unbiased"}, default "clipped"
        ``"clipped"``: clip and normalise (the paper's release). ``"unbiased"``:
        ``(counts + noise) / batch_sizes`` (needs ``batch_sizes``), see Bias.

    Returns
    -------
    LabelProportions
        ``proportions (num_batches, num_classes)`` float64 on the device of
        ``counts``, rows summing to 1 (not so for ``"unbiased"``); ``valid (num_batches,)``: for exact
        proportions the batches with records (rows without records are uniform),
        for private ones all ``True`` (all batches of the public grid are
        released). With ``batch_sizes = b`` private proportions of the clipped
        estimator lie in ``proportion_bounds`` ``(num_classes, b, floor)``.

    Raises
    ------
    ValueError
        Bad shapes, ``epsilon``, ``floor`` or ``batch_sizes``; both ``generator`` and
        ``noise_seed``.
    DataValidationError
        NaN, inf or negative counts.

    Warns
    -----
    PrivacyLeakWarning
        ``noise_seed`` or a caller's ``generator`` (reproducible noise).

    Notes
    -----
    A batch whose total exceeds its public bound ``batch_sizes`` (the bound is then
    not an upper bound on the data; the release stays epsilon-DP, but the clip biases
    the proportions) is reported to the curator log ``dp_proto.curator`` only: a
    warning would depend on single records.
    """
    counts = _check_counts(counts)
    num_batches, num_classes = counts.shape
    estimator = check_estimator(estimator)
    if epsilon is None:
        totals = counts.sum(1, keepdim=True)
        valid = totals.squeeze(1) > 0
        uniform = torch.full_like(counts, 1.0 / num_classes)
        props = torch.where(valid[:, None], counts / totals.clamp_min(1.0), uniform)
        return LabelProportions(props, valid, None)

    epsilon = check_epsilon(epsilon)
    if estimator == "unbiased" and batch_sizes is None:
        raise ValueError("estimator='unbiased' divides by the public batch_sizes; pass batch_sizes")
    floor = float(floor)
    if not math.isfinite(floor) or floor <= 0:
        raise ValueError(f"floor must be a finite number > 0, got {floor!r}")
    upper = None
    if batch_sizes is not None:
        upper = torch.as_tensor(batch_sizes, dtype=torch.float64, device=counts.device)
        if upper.dim() == 0:
            upper = upper.expand(num_batches)
        if upper.shape != (num_batches,):
            raise ValueError(f"batch_sizes must be a number or have shape ({num_batches},), got {tuple(upper.shape)}")
        if not bool(torch.isfinite(upper).all()) or bool((upper < floor).any()):
            raise ValueError(f"batch_sizes must be finite and >= floor={floor:g}")
        over = counts.sum(1) > upper
        if bool(over.any()):
            curator_log(
                "%s: %d batch(es) hold more records than their public bound batch_sizes (the "
                "release stays epsilon-DP, but the bound is wrong: the clipping estimator clips "
                "their counts to it, the unbiased one divides by it)",
                name,
                int(over.sum()),
            )
    if noise_seed is not None:
        if generator is not None:
            raise ValueError("pass either generator or noise_seed, not both")
        generator = seeded_generator(noise_seed, counts.device, owner=name)
    noisy = laplace_mechanism(
        counts,
        1.0,
        epsilon,
        ledger=ledger,
        name=name,
        generator=generator,
        single_coordinate=True,
        grid=1.0,
        value_on_grid=True,  # integer counts, integer noise
    )
    valid = torch.ones(num_batches, dtype=torch.bool, device=counts.device)
    if estimator == "unbiased":
        return LabelProportions(noisy / upper[:, None], valid, epsilon, noisy)
    noisy = noisy.clamp_min(floor)
    if upper is not None:
        noisy = torch.minimum(noisy, upper[:, None])
    props = noisy / noisy.sum(1, keepdim=True)
    return LabelProportions(props, valid, epsilon, noisy)
