"""What a node of the LLP protocol publishes, in the release format of ``dp_proto.release``.

In the protocol of Sachweh, Boiar & Liebig (2021, Sec. 3) the one thing that leaves node
``i`` is its release: the label proportions of the public time batches, exact or
epsilon-DP (``LLPNode.release``), sent to its neighbours. ``LLPNodeRelease`` is that
table with the node's ledger and the public batch grid, and it is what a node can
publish under its guarantee: ``NetworkResult.node_release(i)`` (or, in a distributed
run, ``NodeResult.node_release()``) builds it, ``save_release(path)`` writes it and
``dp_proto.load_release(path)`` reads it back, e.g. for a new node that trains on it
(``LLPNode.train([release.proportions])``).

Published: the proportions ``(num_batches, num_classes)``, the ``valid`` mask
``(num_batches,)``, the batch grid, the label count, the release's settings (``epsilon``,
``batch_size``, ``time_range``, ``floor``, ``estimator``) and, for a private release, the
ledger's epsilon and events. Left out: the noisy counts behind a private release (kept
in memory for diagnostics; the wire protocol of ``dp_proto.llp.distributed`` sends the
proportions only), the noise seed, and everything node-local: features, labels, the
clustering and the models (``LLPNodeModel``, which is not private).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from dp_proto.llp.grid import BatchGrid
from dp_proto.llp.node import LLPConfig
from dp_proto.llp.proportions import DEFAULT_FLOOR, LabelProportions, check_estimator
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.release import ledger_from_manifest, ledger_manifest
from dp_proto.release import (
    Releasable,
    Release,
    decode_hyperparameters,
    encode_hyperparameters,
    register_model,
    registered_name,
)

__all__ = ["LLPNodeRelease"]


@register_model("dp_proto.LLPNodeRelease")
@dataclass(frozen=True)
class LLPNodeRelease(Releasable):
    """The release of node ``node`` of an LLP run: its label proportions, its ledger, the grid.

    Build it with ``NetworkResult.node_release(i)`` (``NodeResult.node_release()`` in a
    distributed run) or ``LLPNodeRelease.from_config``.

    Attributes
    ----------
    node : int
        The node's index.
    proportions : LabelProportions
        The release, ``proportions (num_batches, num_classes)`` and ``valid
        (num_batches,)``; ``epsilon`` None for an exact release. ``noisy_counts`` are
        never published (None after loading).
    ledger : PrivacyLedger or None
        The node's ledger (one discrete Laplace event per private release; a
        ``non_private`` event for an exact one). A loaded private release has a read-only
        ``ReleasedLedger``; a loaded exact release has None (its manifest says
        ``"private": false``).
    grid : BatchGrid
        The public batch grid: row ``k`` is the slots ``[origin + k b, origin + (k + 1) b)``.
    floor : float, default 1e-3
        Lower clip bound of the noisy counts (a public setting).
    estimator : {"clipped", "unbiased"}, default "clipped"
        How the noisy counts became proportions (``private_label_proportions``).

    Notes
    -----
    The guarantee (Sachweh, Boiar & Liebig 2021, with the public clip bounds and the
    discrete Laplace noise of ``private_label_proportions``): the table is pure
    epsilon-DP for node ``node``'s training windows (add/remove one window); the grid,
    the label set and the settings are public.
    """

    node: int
    proportions: LabelProportions
    ledger: PrivacyLedger | None
    grid: BatchGrid
    floor: float = DEFAULT_FLOOR
    estimator: str = "clipped"

    #: What a release leaves out, with the reason; every other field is published.
    RELEASE_DROPS: ClassVar[dict[str, str]] = {
        "noisy_counts": "the noisy counts behind a private release: epsilon-DP like the proportions, but not "
        "what the node sends (the wire carries the proportions only, dp_proto.llp.distributed); kept in "
        "memory for diagnostics",
    }

    def __post_init__(self) -> None:
        table = self.proportions.proportions
        if table.dim() != 2 or table.shape[0] != self.grid.num_batches:
            raise ValueError(
                f"node {self.node}: the proportions {tuple(table.shape)} do not fit the grid's "
                f"{self.grid.num_batches} batches"
            )
        if self.proportions.valid.shape != (table.shape[0],):
            raise ValueError(f"node {self.node}: valid must have shape ({table.shape[0]},)")
        if self.proportions.epsilon is not None and self.ledger is None:
            raise ValueError(f"node {self.node}: a private release needs the node's ledger")

    @classmethod
    def from_config(
        cls, node: int, proportions: LabelProportions, ledger: PrivacyLedger | None, config: LLPConfig
    ) -> LLPNodeRelease:
        """The release of node ``node`` in a run with ``config`` (with ``time_range`` set).

        Parameters
        ----------
        node : int
            The node's index.
        proportions : LabelProportions
            What ``LLPNode.release`` returned.
        ledger : PrivacyLedger or None
            The node's ledger (``LLPNode.ledger``).
        config : LLPConfig
            The run's settings (``LLPConfig.resolve`` d).

        Returns
        -------
        LLPNodeRelease
        """
        return cls(int(node), proportions, ledger, config.grid, floor=config.floor, estimator=config.estimator)

    @property
    def num_batches(self) -> int:
        """Rows of the table (batches of the grid)."""
        return self.proportions.num_batches

    @property
    def num_classes(self) -> int:
        """Columns of the table (the public label set ``0 .. num_classes - 1``)."""
        return self.proportions.num_classes

    @property
    def epsilon(self) -> float | None:
        """The release's epsilon (None: exact)."""
        return self.proportions.epsilon

    @property
    def private(self) -> bool:
        """Whether the release is epsilon-DP: an epsilon, and a ledger of private events only."""
        events = () if self.ledger is None else self.ledger.events
        return self.epsilon is not None and bool(events) and all(event.is_private for event in events)

    # -- the release format (dp_proto.release) -----------------------------------------
    def _settings(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "batch_size": self.grid.batch_size,
            "time_range": [self.grid.origin, self.grid.stop],
            "num_classes": self.num_classes,
            "floor": float(self.floor),
            "estimator": self.estimator,
        }

    def to_release(self) -> Release:
        """The node's release in the release format (in memory; ``save_release`` writes it).

        Returns
        -------
        Release
            Tensors ``proportions (num_batches, num_classes)`` float64 and ``valid
            (num_batches,)`` bool; the settings as hyperparameters; the node, the grid and
            the table's shape as the public section; the ledger's epsilon and events (or
            ``{"private": false}`` for an exact release). ``noisy_counts`` left out.
        """
        if self.epsilon is not None and not self.private:
            raise ValueError(
                f"node {self.node}: the release has epsilon {self.epsilon} but its ledger records a non-private "
                "release as well; publish a release whose ledger holds its own events only"
            )
        hyperparameters, not_saved = encode_hyperparameters(self._settings())
        privacy: dict[str, Any] = {"private": False}
        if self.private:
            assert self.ledger is not None
            privacy = ledger_manifest(
                self.ledger,
                scope=f"pure epsilon-DP (add/remove one training window of node {self.node}) for the whole "
                "label-proportion table; the batch grid (time_range, batch_size), the label set, floor and "
                "estimator are public; the node's models are not part of this release",
            )
        return Release(
            model=registered_name(self),
            tensors={
                "proportions": self.proportions.proportions.detach().cpu().numpy(),
                "valid": self.proportions.valid.detach().cpu().numpy(),
            },
            hyperparameters=hyperparameters,
            hyperparameters_not_saved=not_saved,
            public={
                "node": self.node,
                "num_batches": self.num_batches,
                "num_classes": self.num_classes,
                "grid": {"origin": self.grid.origin, "stop": self.grid.stop, "batch_size": self.grid.batch_size},
                "note": "row k of the table is the batch of slots [origin + k batch_size, origin + (k + 1) "
                "batch_size) at every node; valid marks the rows a receiver may use",
            },
            privacy=privacy,
            dropped=() if self.proportions.noisy_counts is None else ("noisy_counts",),
        )

    @classmethod
    def from_release(cls, release: Release, *, device: torch.device | str = "cpu") -> LLPNodeRelease:
        """The node's release of ``release`` (``dp_proto.release.read_release``), on ``device``.

        Parameters
        ----------
        release : Release
            A release of an ``LLPNodeRelease``.
        device : torch.device or str, default "cpu"
            Device of the tables.

        Returns
        -------
        LLPNodeRelease
            The same proportions and ``valid`` mask, ``noisy_counts`` None; a private
            release's ledger is read-only and composes its events afresh.

        Raises
        ------
        ValueError
            A release of another model, or tables that do not fit the manifest.
        """
        cls.check_release_model(release)
        settings: Mapping[str, Any] = decode_hyperparameters(release.hyperparameters)
        public = release.public
        grid_info = public["grid"]
        grid = BatchGrid(int(grid_info["origin"]), int(grid_info["stop"]), int(grid_info["batch_size"]))
        shape = (grid.num_batches, int(public["num_classes"]))
        table = release.tensor("proportions", 2)
        valid = release.tensor("valid", 1)
        if table.shape != shape or valid.shape != shape[:1] or valid.dtype != np.bool_:
            raise ValueError(
                f"the release's proportions {table.shape} and valid {valid.shape} ({valid.dtype}) do not fit "
                f"the grid's table {shape} (a bool valid mask expected)"
            )
        epsilon = settings.get("epsilon")
        if release.private != (epsilon is not None):
            raise ValueError("the release's privacy section does not match its epsilon")
        proportions = LabelProportions(
            torch.from_numpy(np.array(table)).to(device),
            torch.from_numpy(np.array(valid)).to(device),
            None if epsilon is None else float(epsilon),
            None,
        )
        ledger = ledger_from_manifest(release.privacy) if release.private else None
        return cls(
            int(public["node"]),
            proportions,
            ledger,
            grid,
            floor=float(settings.get("floor", DEFAULT_FLOOR)),
            estimator=check_estimator(settings.get("estimator", "clipped")),
        )
