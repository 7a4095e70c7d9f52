"""One sensor node of the LLP protocol: its settings, its data, its release and its models.

``LLPConfig`` holds the settings every node of a run shares (the public batch grid,
the label set, epsilon, the clustering and search settings, the seeds);
``LLPNode`` is one node's part of the protocol of Sachweh, Boiar & Liebig (2021):

1. ``LLPNode(i, data, config)`` keeps node ``i``'s training windows inside the public
   recording period and maps them onto the batch grid;
2. ``LLPNode.release`` counts its labels per batch and releases their proportions,
   exact or epsilon-DP, recording the release in the node's own ledger;
3. ``LLPNode.train`` fits its ``c + 1`` labelled clusterings, one per source of
   proportions: its own first, then those it received.

Counts one record can change. In a private run nothing a node does raises, warns or
changes a shape because of how many windows it has: fewer than ``b`` or ``k``
windows go to the curator log only, and ``train`` still returns ``c + 1`` models
with ``k`` centres each (a node with fewer than ``k`` windows, even none, gets the
fixed procedure of ``LLPNode.train``). An exact run refuses such a node with an error.

``simulate_network`` (every node in one process) and
``run_node`` (one process per node, ``torch.distributed``) both drive
this class, so a node computes the same thing in both.

Randomness. The Laplace noise of a private release comes from fresh operating-system
entropy (``node_noise_generator`` with ``noise_seed=None``); ``seed`` drives only the
non-private randomness, ``node_generator`` ``(seed, i)``: the k-means seeding, then
the starts of the local searches, in that order.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from dp_proto._neighbours import check_points
from dp_proto._validation import check_int
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.llp.assignment import AssignmentResult, local_search
from dp_proto.llp.bags import BAG_LOSSES, LLPBagModel, _initialised, fit_bag_model
from dp_proto.llp.grid import BatchGrid
from dp_proto.llp.kmeans import KMeansResult
from dp_proto.llp.model import LLPNodeModel, NodeFit, fit_node_models
from dp_proto.llp.proportions import (
    DEFAULT_FLOOR,
    LabelProportions,
    as_source,
    batch_label_counts,
    check_estimator,
    private_label_proportions,
)
from dp_proto.privacy.calibration import check_epsilon
from dp_proto.privacy.curator import curator_log
from dp_proto.privacy.events import NonPrivateEvent
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.randomness import check_noise_seed, fresh_generator, seeded_generator

__all__ = ["LLPConfig", "LLPNode", "node_generator", "node_noise_generator"]

OWN_PROPORTIONS = ("exact", "released")
LEARNERS = ("kmeans", "bag")
BAG_SOURCES = ("own", "all")


@dataclass(frozen=True)
class LLPConfig:
    """The settings of an LLP run, the same at every node (checked on construction).

    A frozen dataclass: its fields are its parameters and its attributes.

    Attributes
    ----------
    batch_size : int
        ``b``: slots per batch; also the public upper clip bound of the noisy counts.
    k : int
        Clusters of every node's k-means.
    epsilon : float > 0 or None, default None
        Privacy of every node's release (add/remove one window of that node);
        ``None``: exact proportions.
    time_range : (int, int) or None
        ``(origin, stop)``, the public recording period: it fixes the batch grid
        (``BatchGrid``) and so the shape of every release. Required
        for a private run; an exact run in one process may leave it out (see
        ``resolve``).
    num_classes : int or None
        ``L``, the public label set ``0 .. L - 1``. ``None``: taken from the nodes'
        ``num_classes`` attribute (e.g. ``NodeData``, whose value
        comes from the flow-class edges its labels were made with).
    seed : int >= 0, default 0
        Non-private randomness only (``node_generator``); never the noise.
    noise_seed : int >= 0 or None, default None
        ``None``: fresh noise. An int makes every node's noise reproducible
        (``node_noise_generator``): for tests and benchmarks only; warns with
        ``PrivacyLeakWarning`` in a private run, and the
        ledgers say ``"noise": "reproducible"``.
    n_starts : int, default 32
        Local-search starts per source of proportions.
    n_init : int, default 3
        k-means restarts.
    floor : float, default 1e-3
        Lower clip bound of the noisy counts.
    own_proportions : {"exact", "released"}, default "exact"
        What a node's own model is fitted to: its exact proportions (its labels never
        leave it, so noise there would protect nothing), or its noisy release (as
        Sachweh, Boiar & Liebig 2021, whose ``Q(j)`` is the table the neighbours get).
    estimator : {"clipped", "unbiased"}, default "clipped"
        How noisy counts become proportions
        (``private_label_proportions``).
    swaps : bool, default True
        Whether the local search also tries swap moves (besides relabel moves).
    kmeans_max_iter : int, default 100
        Lloyd iterations of k-means (see ``fit_node_models``).
    search_max_iter : int, default 1000
        Steps of the local search (see ``fit_node_models``).
    learner : {"kmeans", "bag"}, default "kmeans"
        ``"kmeans"``: Sachweh, Boiar & Liebig (2021), a k-means clustering labelled once
        per source, majority vote. ``"bag"``: one small network trained on the bags'
        proportions (``dp_proto.llp.bags``, the DLLP loss of Ardehaly & Culotta 2017);
        ``k``, ``n_starts``, ``n_init``, ``swaps`` and the iteration counts are then unused.
    bag_sources : {"own", "all"}, default "own"
        The bag learner's sources: the node's own proportions only, or its own and every
        neighbour's (the loss averaged over them). With ``own_proportions="exact"`` and
        ``"own"``, the learner reads no release: a private run trains the same model.
    bag_epochs : int, default 300
        Full-batch Adam steps of the bag learner.
    bag_hidden : int, default 64
        Units of each of its two hidden layers.
    bag_loss : {"kl", "cross_entropy"} or None, default None
        The bag learner's loss (``dp_proto.llp.bags``): ``"kl"`` needs proportions on the
        simplex; ``"cross_entropy"`` is linear in the proportions, so the unbiased
        release's noise averages out. ``None``: ``"cross_entropy"`` with
        ``estimator="unbiased"``, else ``"kl"``. ``"kl"`` is refused for a private run
        whose learner reads unbiased releases (their rows leave the simplex).
    """

    batch_size: int
    k: int
    epsilon: float | None = None
    time_range: tuple[int, int] | None = None
    num_classes: int | None = None
    seed: int = 0
    noise_seed: int | None = None
    n_starts: int = 32
    n_init: int = 3
    floor: float = DEFAULT_FLOOR
    own_proportions: str = "exact"
    estimator: str = "clipped"
    swaps: bool = True
    kmeans_max_iter: int = 100
    search_max_iter: int = 1000
    learner: str = "kmeans"
    bag_sources: str = "own"
    bag_epochs: int = 300
    bag_hidden: int = 64
    bag_loss: str | None = None

    def __post_init__(self) -> None:
        def fix(name: str, value) -> None:  # frozen: normalise the checked values in place
            object.__setattr__(self, name, value)

        fix("batch_size", check_int("batch_size", self.batch_size, 1))
        fix("k", check_int("k", self.k, 1))
        if self.epsilon is not None:
            fix("epsilon", float(check_epsilon(self.epsilon)))
        if self.time_range is not None:
            grid = BatchGrid.from_time_range(self.time_range, self.batch_size)
            fix("time_range", (grid.origin, grid.stop))
        if self.num_classes is not None:
            fix("num_classes", check_int("num_classes", self.num_classes, 1))
        fix("seed", check_int("seed", self.seed, 0))
        fix("noise_seed", check_noise_seed(self.noise_seed))
        fix("n_starts", check_int("n_starts", self.n_starts, 1))
        fix("n_init", check_int("n_init", self.n_init, 1))
        floor = float(self.floor)
        if not math.isfinite(floor) or floor <= 0:
            raise ValueError(f"floor must be a finite number > 0, got {self.floor!r}")
        fix("floor", floor)
        if self.own_proportions not in OWN_PROPORTIONS:
            raise ValueError(f"own_proportions must be one of {OWN_PROPORTIONS}, got {self.own_proportions!r}")
        fix("estimator", check_estimator(self.estimator))
        fix("kmeans_max_iter", check_int("kmeans_max_iter", self.kmeans_max_iter, 1))
        fix("search_max_iter", check_int("search_max_iter", self.search_max_iter, 0))
        if self.learner not in LEARNERS:
            raise ValueError(f"learner must be one of {LEARNERS}, got {self.learner!r}")
        if self.bag_sources not in BAG_SOURCES:
            raise ValueError(f"bag_sources must be one of {BAG_SOURCES}, got {self.bag_sources!r}")
        fix("bag_epochs", check_int("bag_epochs", self.bag_epochs, 1))
        fix("bag_hidden", check_int("bag_hidden", self.bag_hidden, 1))
        if self.bag_loss is None:
            fix("bag_loss", "cross_entropy" if self.estimator == "unbiased" else "kl")
        if self.bag_loss not in BAG_LOSSES:
            raise ValueError(f"bag_loss must be one of {BAG_LOSSES} or None, got {self.bag_loss!r}")
        reads_release = self.own_proportions == "released" or self.bag_sources == "all"
        if self.bag_loss == "kl" and self.estimator == "unbiased" and self.private and reads_release:
            raise ValueError(
                "bag_loss='kl' needs proportions on the simplex, and the unbiased release's rows leave it; "
                "use bag_loss='cross_entropy' (or None)"
            )

    @classmethod
    def from_settings(cls, config: LLPConfig | None, settings: dict, owner: str) -> LLPConfig:
        """``config``, or one built from keyword ``settings`` (exactly one of the two)."""
        if config is not None:
            if settings:
                raise TypeError(f"{owner}: pass either config or the settings {sorted(settings)}, not both")
            if not isinstance(config, LLPConfig):
                raise TypeError(f"{owner}: config must be an LLPConfig, got {type(config).__name__}")
            return config
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - fields)
        if unknown:
            raise TypeError(f"{owner}: unknown setting(s) {unknown}; the settings are {sorted(fields)}")
        missing = [name for name in ("batch_size", "k") if name not in settings]
        if missing:
            raise TypeError(f"{owner}: missing setting(s) {missing}")
        return cls(**settings)

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    @property
    def grid(self) -> BatchGrid:
        """The public batch grid; needs ``time_range``."""
        if self.time_range is None:
            raise ValueError("the batch grid needs time_range=(origin, stop)")
        return BatchGrid.from_time_range(self.time_range, self.batch_size)

    def resolve(self, nodes: Sequence, owner: str) -> LLPConfig:
        """This config with ``time_range`` and ``num_classes`` filled in.

        ``num_classes=None`` takes the nodes' ``num_classes`` attribute (they must agree).
        ``time_range=None`` raises for a private run -- derived from the data, the number
        of batches (the shape of every release) would depend on single records -- and is
        ``(0, 1 + the largest time of any node)`` for an exact one.
        """
        changes = {}
        if self.num_classes is None:
            declared = {getattr(node, "num_classes", None) for node in nodes}
            if None in declared or len(declared) != 1:
                raise ValueError(
                    f"{owner}: pass num_classes, the public label set (the nodes do not all declare "
                    f"the same num_classes: {sorted(declared, key=str)})"
                )
            changes["num_classes"] = int(declared.pop())
        if self.time_range is None:
            if self.private:
                raise ValueError(
                    f"{owner}: a private run (epsilon={self.epsilon!r}) needs the public "
                    "time_range=(origin, stop) (the recording period): it fixes the batch grid and so "
                    "the shape of every release; derived from the data, the number of batches would "
                    "depend on single records"
                )
            last = max((int(np.max(node.time)) for node in nodes if len(node.time)), default=0)
            changes["time_range"] = (0, last + 1)
        return dataclasses.replace(self, **changes) if changes else self


# --------------------------------------------------------------------------- generators
def _derived_seed(*words: int) -> int:
    """The first 63 bits of ``SeedSequence(words).generate_state(2, uint32)`` (low word first)."""
    state = np.random.SeedSequence([int(w) for w in words]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) | (int(state[1]) << 32)) & ((1 << 63) - 1)


#: Extra word of the noise streams' seed sequence: ``node_noise_generator(s, i)`` and
#: ``node_generator(s, i)`` never share a stream, even for the same ``s``.
_NOISE_STREAM = 0x6E6F697365  # "noise"


def node_generator(seed: int, node_index: int, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of node ``node_index``'s non-private randomness in a run with ``seed``.

    It draws the k-means seeding and the local-search starts, never the noise of a
    release (see ``node_noise_generator``). The generator's seed is the first 63
    bits of ``numpy.random.SeedSequence([seed, node_index]).generate_state(2, uint32)``
    (low word first): different nodes get well-separated streams, and a node's
    stream depends only on ``(seed, node_index)``, not on how many nodes there are
    or in which order they run.

    Parameters
    ----------
    seed, node_index : int
        Both >= 0.
    device : torch.device or str, default "cpu"
        Device of the generator (draws for CUDA tensors need a CUDA generator).
    """
    seed = check_int("seed", seed, 0)
    node_index = check_int("node_index", node_index, 0)
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(_derived_seed(seed, node_index))
    return gen


def node_noise_generator(
    noise_seed: int | None, node_index: int, device: torch.device | str = "cpu", *, warn: bool = True
) -> torch.Generator:
    """The generator of node ``node_index``'s release noise.

    ``noise_seed=None`` (the default of every LLP release): a generator seeded with 64
    bits of operating-system entropy
    (``fresh_generator``); the ledger of the release
    records ``"noise": "fresh"``.

    ``noise_seed`` given: the explicit opt-in to reproducible noise, for tests and
    benchmarks. The generator is seeded with the first 63 bits of
    ``SeedSequence([noise_seed, node_index, 0x6E6F697365])`` (a stream of its own per
    node, never the stream of ``node_generator`` for the same numbers); it warns
    with ``PrivacyLeakWarning`` (``warn=False`` when the
    caller warned already), since whoever knows ``noise_seed`` can subtract the noise
    and read the exact counts, and the ledger records ``"noise": "reproducible"``.

    Parameters
    ----------
    noise_seed : int >= 0 or None
    node_index : int >= 0
    device : torch.device or str, default "cpu"
    warn : bool, default True
    """
    node_index = check_int("node_index", node_index, 0)
    if noise_seed is None:
        return fresh_generator(torch.device(device))
    noise_seed = check_noise_seed(noise_seed)
    if warn:
        warn_noise_seed(f"LLP node {node_index}", "its release")
    return seeded_generator(_derived_seed(noise_seed, node_index, _NOISE_STREAM), torch.device(device), warn=False)


def warn_noise_seed(owner: str, what: str = "every node's release") -> None:
    """The ``PrivacyLeakWarning`` of a private run given a ``noise_seed``."""
    warnings.warn(
        f"{owner}: noise_seed makes the Laplace noise of {what} reproducible; "
        "whoever knows the seed can remove it and read the exact label counts, so the release is "
        "not private against them. Use it for tests and benchmarks only; the ledger records "
        "'noise': 'reproducible'",
        PrivacyLeakWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------- one node
def node_name(index: int, data) -> str:
    """``"node i"``, with the detector when the data has one."""
    det = getattr(data, "detector", None)
    return f"node {index}" + (f" (detector {det})" if det is not None else "")


def node_tensors(index: int, data, mask, num_classes: int, device) -> tuple[Tensor, Tensor, np.ndarray]:
    """Node ``index``'s windows selected by ``mask``: features (m, d), labels (m,), times (m,).

    Raises ``ValueError`` for shapes that do not match and
    ``DataValidationError`` for NaN/inf features or labels
    outside ``0 .. num_classes - 1``."""
    name = node_name(index, data)
    feats = np.asarray(data.features)
    labels = np.asarray(data.labels)
    times = np.asarray(data.time)
    m = len(labels)
    if feats.ndim != 2 or feats.shape[0] != m or times.shape != (m,):
        raise ValueError(
            f"{name}: features (m, d), labels (m,) and time (m,) do not match: "
            f"{feats.shape}, {labels.shape}, {times.shape}"
        )
    if mask is None:
        mask = np.ones(m, dtype=bool)
    mask = np.asarray(mask)
    if mask.shape != (m,) or mask.dtype != bool:
        raise ValueError(f"{name}: mask must be a boolean array of shape ({m},), got {mask.dtype} {mask.shape}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise DataValidationError(f"{name}: labels must hold integers, got dtype {labels.dtype}")
    sel = labels[mask]
    if sel.size and (sel.min() < 0 or sel.max() >= num_classes):
        bad = sorted(set(sel[(sel < 0) | (sel >= num_classes)].tolist()))[:10]
        raise DataValidationError(f"{name}: label(s) {bad} outside the classes 0..{num_classes - 1}")
    try:
        x = check_points(torch.as_tensor(feats[mask], device=device), "features")
    except DataValidationError as err:
        raise DataValidationError(f"{name}: {err}") from err
    return x, torch.as_tensor(sel, device=device).long(), times[mask]


class LLPNode:
    """Node ``index`` of an LLP run: its training windows on the public grid, its release, its models.

    Parameters
    ----------
    index : int
        The node's index (its generators' stream, its rank in a distributed run).
    data : NodeData-like
        ``features (m, d)``, ``labels (m,)`` (int in ``0 .. num_classes - 1``) and
        ``time (m,)`` (global slot).
    config : LLPConfig
        With ``time_range`` and ``num_classes`` set (``LLPConfig.resolve``).
    train_mask : bool array of shape (m,), optional
        The training windows (default: all). Windows outside the recording period are
        dropped; their number goes to the curator log only.
    device : torch.device or str, default "cpu"

    Attributes
    ----------
    features : Tensor (m', d); labels : Tensor (m',) int64; batch_ids : Tensor (m',) int64
        The training windows kept, on ``device``.
    ledger : PrivacyLedger
        The node's own ledger: one Laplace event per private release, one
        ``non_private`` event per exact release.

    Raises
    ------
    ValueError
        Fewer training windows than ``batch_size``, or (k-means learner) than ``k``, in an
        exact run. A private run logs both for the curator instead (an error would depend
        on single records), and ``train`` fits such a node too, with models of the same
        shapes.
    DataValidationError
        NaN/inf features, labels outside the label set.
    """

    def __init__(
        self,
        index: int,
        data,
        config: LLPConfig,
        *,
        train_mask: np.ndarray | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if config.time_range is None or config.num_classes is None:
            raise ValueError("LLPNode needs a config with time_range and num_classes (LLPConfig.resolve)")
        self.index = check_int("index", index, 0)
        self.config = config
        self.device = torch.device(device)
        self.name = node_name(index, data)
        self.grid = config.grid
        self.ledger = PrivacyLedger()
        self._own: LabelProportions | None = None
        x, y, t = node_tensors(index, data, train_mask, config.num_classes, self.device)
        inside = self.grid.contains(t)
        if not bool(inside.all()):
            curator_log(
                "%s: %d training window(s) outside the public time_range [%d, %d) dropped",
                self.name,
                int((~inside).sum()),
                self.grid.origin,
                self.grid.stop,
            )
            keep = torch.as_tensor(inside, device=x.device)
            x, y, t = x[keep], y[keep], t[inside]
        if x.shape[0] < config.batch_size:
            message = (
                f"{self.name} has {x.shape[0]} training windows, fewer than "
                f"batch_size={config.batch_size}: its proportions would describe (almost) all "
                f"its data at once; use a smaller b"
            )
            if not config.private:
                raise ValueError(message)
            curator_log("%s", message)
        if config.learner == "kmeans" and x.shape[0] < config.k:
            message = f"{self.name} has {x.shape[0]} training windows, fewer than k={config.k} clusters"
            if not config.private:
                raise ValueError(message)
            # Private: whether one record more or less crosses k must change nothing the
            # run shows, so the node releases and trains (train's few-windows procedure).
            curator_log("%s", message)
        self.features, self.labels = x, y
        self.batch_ids = torch.as_tensor(self.grid.batch_ids(t), device=self.device)

    def release(self) -> LabelProportions:
        """Count the labels per batch and release their proportions (what the neighbours get).

        Private: one Laplace release of the whole ``(num_batches, num_classes)`` count
        table, noise from ``node_noise_generator`` ``(noise_seed, index)`` (fresh
        entropy by default; this method does not warn for a ``noise_seed``, its callers
        do). Exact: the proportions, and a ``non_private`` event in the ledger.
        """
        cfg, i = self.config, self.index
        counts = batch_label_counts(self.labels, self.batch_ids, self.grid.num_batches, cfg.num_classes)
        noise = None
        if cfg.private:
            noise = node_noise_generator(cfg.noise_seed, i, self.device, warn=False)
        else:
            self.ledger.spend(NonPrivateEvent(name=f"llp/node{i}/label_proportions"))
        release = private_label_proportions(
            counts,
            cfg.epsilon,
            batch_sizes=cfg.batch_size,
            floor=cfg.floor,
            ledger=self.ledger,
            generator=noise,
            name=f"llp/node{i}/label_counts",
            estimator=cfg.estimator,
        )
        if cfg.own_proportions == "released" or not cfg.private:
            self._own = release
        else:
            self._own = private_label_proportions(counts, None)
        return release

    def train(self, received: Sequence[LabelProportions]) -> NodeFit:
        """Fit the node's models: its own proportions first, then each of ``received`` in order.

        The k-means seeding, then the local-search starts, come from
        ``node_generator`` ``(seed, index)``. Call ``release`` first.

        Whatever the number ``m`` of training windows, the k-means learner returns one
        model per source with ``k`` centres each, and the bag learner one network of
        the configured size. A node with ``m < k`` windows (possible in a private run
        only; an exact node refuses it on construction) gets a fixed procedure instead
        of k-means, so that whether one record more or less crosses ``k`` raises
        nothing and changes no shape: every window is the centre of a cluster of its
        own (the k-means optimum, inertia 0) and the other ``k - m`` clusters are empty,
        their centres copies of the last window's (ties go to the lower index, so they
        never predict); with no window at all the ``k`` centres are zeros. The clusters
        are then labelled by the local search as usual; a source that no window of the
        node can be compared with (no window at all) labels every cluster with its
        largest total proportion over its valid batches (label 0 without one), loss 0.
        The bag learner with no window returns its network as initialised from
        ``node_generator`` (standardisation by mean 0 and scale 1), untrained.
        """
        if self._own is None:
            raise RuntimeError(f"{self.name}: release() comes before train()")
        cfg = self.config
        sources = [self._own, *(r.to(self.device) for r in received)]
        if cfg.learner == "bag":
            return self._train_bag(sources)
        if self.features.shape[0] < cfg.k:
            return self._train_few_windows(sources)
        try:
            return fit_node_models(
                self.features,
                self.batch_ids,
                sources,
                k=cfg.k,
                n_starts=cfg.n_starts,
                generator=node_generator(cfg.seed, self.index, self.device),
                n_init=cfg.n_init,
                kmeans_max_iter=cfg.kmeans_max_iter,
                search_max_iter=cfg.search_max_iter,
                swaps=cfg.swaps,
            )
        except ValueError as err:
            raise type(err)(f"{self.name}: {err}") from err

    def _train_bag(self, sources: Sequence[LabelProportions]) -> NodeFit:
        """The bag learner (``learner="bag"``) on the own source or on all of them; its
        initial weights come from ``node_generator`` ``(seed, index)``."""
        cfg = self.config
        if self.features.shape[0] == 0:
            d = self.features.shape[1]
            zeros, ones = torch.zeros(d, dtype=torch.float32), torch.ones(d, dtype=torch.float32)
            generator = node_generator(cfg.seed, self.index, self.device)
            network = _initialised(d, cfg.num_classes, cfg.bag_hidden, zeros, ones, generator).to(self.device)
            network.eval()
            return NodeFit([LLPBagModel(network, cfg.num_classes, math.nan)], None, None, [])
        try:
            model = fit_bag_model(
                self.features,
                self.batch_ids,
                sources[:1] if cfg.bag_sources == "own" else sources,
                hidden=cfg.bag_hidden,
                epochs=cfg.bag_epochs,
                generator=node_generator(cfg.seed, self.index, self.device),
                loss=cfg.bag_loss,
            )
        except ValueError as err:
            raise type(err)(f"{self.name}: {err}") from err
        return NodeFit([model], None, None, [])

    def _train_few_windows(self, sources: Sequence[LabelProportions]) -> NodeFit:
        """The k-means learner's models for a node with fewer windows than ``k`` (see
        ``train``): ``k`` centres, one model per source, the local-search starts from
        ``node_generator`` ``(seed, index)``."""
        cfg = self.config
        x = self.features if self.features.is_floating_point() else self.features.to(torch.float64)
        m, k, device = x.shape[0], cfg.k, x.device
        if m:
            centres = x[torch.arange(k, device=device).clamp(max=m - 1)].clone()
        else:
            centres = x.new_zeros((k, x.shape[1]))
        own_cluster = torch.arange(m, device=device)
        clustering = KMeansResult(centres, own_cluster, 0.0, 0)
        cluster_counts = batch_label_counts(own_cluster, self.batch_ids, self.grid.num_batches, k)
        has_records = cluster_counts.sum(1) > 0
        generator = node_generator(cfg.seed, self.index, self.device)
        models, searches = [], []
        for i, source in enumerate(sources):
            p, valid = as_source(source)
            p = p.to(device)
            weights = None if valid is None else valid.to(device)
            usable = has_records if weights is None else has_records & (weights > 0)
            if bool(usable.any()):
                try:
                    res = local_search(
                        cluster_counts,
                        p,
                        n_starts=cfg.n_starts,
                        max_iter=cfg.search_max_iter,
                        swaps=cfg.swaps,
                        weights=weights,
                        generator=generator,
                    )
                except ValueError as err:
                    raise type(err)(f"{self.name}: proportion source {i}: {err}") from err
            else:
                res = _uniform_assignment(p, weights, k)
            searches.append(res)
            models.append(LLPNodeModel(centres, res.assignment, cfg.num_classes, res.loss))
        return NodeFit(models, clustering, cluster_counts, searches)


def _uniform_assignment(proportions: Tensor, weights: Tensor | None, k: int) -> AssignmentResult:
    """Every one of ``k`` clusters labelled with the label of the largest total proportion
    over the batches of positive weight (ties and no such batch: the smallest label); loss 0,
    as no batch of the node carries weight."""
    p = torch.as_tensor(proportions).to(torch.float64)
    rows = p if weights is None else p[weights > 0]
    label = int(rows.sum(0).argmax()) if rows.shape[0] else 0
    assignment = torch.full((k,), label, dtype=torch.int64, device=p.device)
    return AssignmentResult(
        assignment=assignment,
        loss=0.0,
        n_iter=0,
        converged=True,
        start_losses=torch.zeros(1, dtype=torch.float64, device=p.device),
        assignments=assignment[None].clone(),
    )
