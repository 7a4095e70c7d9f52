"""The anonymizer's encoder in the release format (``dp_proto.release``).

What a user publishes after training an anonymizer (Feutry, Piantanida, Bengio &
Duhamel 2018) is the **encoder**, the network that maps a record to its anonymised
representation ``z``; whoever holds it encodes their own records. With the DP flag
(``fit_dp_anonymizer``) the release also carries the ledger of the run.

``AnonymizerEncoder`` (registered as ``"dp_proto.AnonymizerEncoder"``)
    A trained ``MLPEncoder`` or ``ConvEncoder``, frozen (a CPU copy in eval mode), with
    the public settings of its training. ``save_release(path)`` writes
    ``model.safetensors`` (the encoder's ``state_dict``, float32) and ``manifest.json``
    (the architecture as JSON hyperparameters, the input shape, the training settings
    under ``source``); ``dp_proto.load_release(path)`` rebuilds the network from the
    JSON and loads the weights: no pickled module anywhere.
``DPAnonymizerEncoder`` (``"dp_proto.DPAnonymizerEncoder"``)
    The same, trained by ``fit_dp_anonymizer``: the manifest's privacy section is the
    ledger's (``dp_proto.privacy.release.ledger_manifest``), and the loaded encoder's
    ``ledger_`` is a read-only ``ReleasedLedger``.

Left out (``RELEASE_DROPS``, named in the manifest's ``dropped``): the regular-label and
private-label branches, the private labels' prior, the trainer, the epoch wall times,
the restarts' scores and the index of the kept restart; for the DP encoder also the
noise generator. The branches are training aids: the regular branch is a classifier a
user can train afresh on ``z``, and the private branch is the adversary the encoder
was trained against, a ready-made attack on the private label (with DP it is covered
by the guarantee, but it is still of no use to whoever encodes records). The seeds of
the run (``seed``, ``noise_seed``) are never written; the class counts are not needed
to encode and are not written either.

Only the built-in encoders are released: their architecture is rebuilt from JSON. A
custom encoder needs a release class of its own (``dp_proto.release.register_model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from dp_proto.anonymizer.modules import ConvEncoder, MLPEncoder, SignalEncoder
from dp_proto.anonymizer.validation import as_records, check_count
from dp_proto.privacy.ledger import PrivacyLedger
from dp_proto.privacy.release import ledger_from_manifest, ledger_manifest, summary_from_manifest
from dp_proto.release import Releasable, Release, register_model, registered_name

__all__ = [
    "ENCODERS",
    "RELEASE_DROPS",
    "DP_RELEASE_DROPS",
    "DP_SCOPE",
    "AnonymizerEncoder",
    "DPAnonymizerEncoder",
    "describe_encoder",
    "encoder_from_architecture",
]

#: The encoders a release can rebuild, by class name (the manifest's ``encoder``).
ENCODERS: dict[str, type[nn.Module]] = {
    "MLPEncoder": MLPEncoder,
    "ConvEncoder": ConvEncoder,
    "SignalEncoder": SignalEncoder,
}

#: What a trained anonymizer holds beyond its encoder, left out of the release, with the reason.
RELEASE_DROPS: dict[str, str] = {
    "regular_head": "training aid: the regular-label branch; not needed to encode (a classifier on z can "
    "be trained afresh by whoever uses the representation)",
    "private_head": "training aid: the private-label branch, the adversary the encoder was trained "
    "against; publishing it would hand out a ready-made attack on the private label",
    "prior": "training aid: the private labels' prior of the random-guessing term; without DP it is "
    "the exact private class frequencies of the training records",
    "trainer": "the Lightning Trainer: a live object of the run (optimizer states, logged metrics)",
    "epoch_times": "wall times of the training epochs, a trace of the curator's run (with Poisson "
    "batches they grow with the private record count)",
    "restarts": "the restarts' scores, fresh probes' accuracies on the training records without noise",
    "chosen": "the index of the kept restart, chosen by those scores",
}
#: ``RELEASE_DROPS`` of the DP encoder: also the noise generator.
DP_RELEASE_DROPS: dict[str, str] = {
    **RELEASE_DROPS,
    "noise_generator": "its state would replay the noise and the Poisson sampling of the run; never "
    "published (the privacy section says whether the noise was reproducible)",
}
#: Training arguments never written, with the reason (the manifest's ``hyperparameters_not_saved``).
WITHHELD: dict[str, str] = {
    "seed": "the seed of the initialisation and of the non-private shuffling; a release holds no seed of its run",
}
DP_WITHHELD: dict[str, str] = {
    **WITHHELD,
    "noise_seed": "it would replay the noise and the sampling of the run; never published",
}
#: What the guarantee of a ``DPAnonymizerEncoder`` covers (``privacy_scope_``).
DP_SCOPE = (
    "the (epsilon, delta) guarantee covers the records passed to fit_dp_anonymizer (add/remove one record): "
    "the whole training transcript (encoder and both branches), hence the released encoder; the input shape, "
    "the architecture, the class counts, a prior passed as public and the hyperparameters are public. An "
    "encoding z = encoder(x) of a record x is a new release about x, not covered by this guarantee"
)


def describe_encoder(encoder: nn.Module) -> dict[str, Any] | None:
    """``{"encoder": class name, **encoder.architecture()}`` (JSON data) for a built-in
    encoder (exactly ``MLPEncoder``, ``ConvEncoder`` or ``SignalEncoder``), None for another; the release's
    manifest and a Lightning checkpoint's ``anonymizer_spec`` store it, and
    ``encoder_from_architecture`` rebuilds the network from it."""
    name = type(encoder).__name__
    if ENCODERS.get(name) is not type(encoder):
        return None
    return {"encoder": name, **encoder.architecture()}  # type: ignore[operator]


def encoder_from_architecture(hyperparameters: Mapping[str, Any]) -> nn.Module:
    """A new, untrained built-in encoder of the architecture ``hyperparameters``
    (``describe_encoder``'s form: ``{"encoder": class name, **arguments}``) describes.
    Only the classes of ``ENCODERS`` are built (an allow-list: the JSON never names
    arbitrary code); ``ValueError`` for another name or arguments that do not build one."""
    params = dict(hyperparameters)
    name = params.pop("encoder", None)
    if not isinstance(name, str) or name not in ENCODERS:
        raise ValueError(f"encoder {name!r} is none of the built-in encoders {sorted(ENCODERS)}")
    try:
        return ENCODERS[name](**params)
    except TypeError as err:
        raise ValueError(f"hyperparameters {params} do not build a {name}: {err}") from err


def _clean_copy(encoder: nn.Module) -> nn.Module:
    """A new encoder of the same architecture with ``encoder``'s weights, on the CPU, in
    eval mode, without hooks (Opacus' per-sample hooks of a DP run stay behind)."""
    if type(encoder) not in ENCODERS.values():
        raise TypeError(
            f"only the built-in encoders ({', '.join(ENCODERS)}) can be released: their architecture is rebuilt "
            f"from JSON. A {type(encoder).__module__}.{type(encoder).__qualname__} needs a release class of its "
            "own (dp_proto.release.register_model)"
        )
    copy = type(encoder)(**encoder.architecture())  # type: ignore[operator]
    state = {k: v.detach().to("cpu", copy=True) for k, v in encoder.state_dict().items()}
    copy.load_state_dict(state, strict=True)
    return copy.eval()


@register_model("dp_proto.AnonymizerEncoder")
class AnonymizerEncoder(Releasable, nn.Module):
    """A trained anonymizer's encoder, frozen, in the release format.

    ``forward(x)`` maps records ``(B, *input_shape)`` to representations
    ``(B, representation_dim)``; ``transform(X)`` does the same for a numpy array or a
    tensor, checked for NaN and inf, and returns a numpy array. Build it with
    ``AnonymizerFit.to_encoder()`` (``dp_proto.lightning.anonymizer``) or from a trained
    encoder; publish it with ``save_release``; load it with ``dp_proto.load_release``.

    Parameters
    ----------
    encoder : MLPEncoder or ConvEncoder
        The trained encoder. It is copied (CPU, eval mode), so later training of the
        original does not change this one.
    settings : mapping str -> any, optional
        Public settings of the training (lambda, the schedule, learning rates...),
        written to the manifest's ``source``. JSON data only.
    fitted : mapping str -> any, optional
        Public scalars of the run (``epochs_``...), written to the manifest's ``fitted``.

    Attributes
    ----------
    encoder : MLPEncoder or ConvEncoder
        The frozen copy.
    input_shape : tuple of int
        The shape of one record: ``(d,)`` for the MLP encoder (records are flattened),
        ``(C, H, W)`` for the CNN.
    representation_dim : int
        The width ``r`` of the representation.
    settings_ : dict
        The public training settings.
    fitted_ : dict
        The public scalars of the run.

    References
    ----------
    Feutry, Piantanida, Bengio & Duhamel (2018). Learning anonymized representations
    with adversarial neural networks. arXiv:1802.09386.
    """

    #: Parts of a trained anonymizer the release leaves out, with the reason.
    RELEASE_DROPS: ClassVar[dict[str, str]] = RELEASE_DROPS
    #: Training arguments never written, with the reason.
    WITHHELD: ClassVar[dict[str, str]] = WITHHELD

    def __init__(
        self,
        encoder: nn.Module,
        *,
        settings: Mapping[str, Any] | None = None,
        fitted: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.encoder = _clean_copy(encoder)
        self.settings_ = dict(settings or {})
        self.fitted_ = dict(fitted or {})
        self.requires_grad_(False)
        self.eval()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.encoder.input_shape)  # type: ignore[arg-type]

    @property
    def representation_dim(self) -> int:
        return int(self.encoder.representation_dim)  # type: ignore[arg-type]

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def forward(self, x: Tensor) -> Tensor:
        """Representations ``(B, representation_dim)`` of records ``x (B, *input_shape)``."""
        return self.encoder(x)

    @torch.no_grad()
    def transform(self, X: Any, batch_size: int = 1024) -> np.ndarray:
        """Encode records: ``X (n, *input_shape)``, a numpy array or a tensor (float32 is
        used; NaN and inf are refused) -> ``z (n, representation_dim)``, float32 numpy.

        Parameters
        ----------
        X : array-like or Tensor of shape (n, ...)
            The records.
        batch_size : int, default 1024
            Records per forward pass.

        Returns
        -------
        ndarray of shape (n, representation_dim)
        """
        batch_size = check_count("batch_size", batch_size, 1)
        x = as_records(X, "X").to(self.device)
        was_training = self.training
        self.eval()
        try:
            parts = [self.encoder(x[i : i + batch_size]) for i in range(0, len(x), batch_size)]
        finally:
            self.train(was_training)
        return torch.cat(parts).cpu().numpy()

    # -- the release format -------------------------------------------------------------
    def _privacy(self) -> dict[str, Any]:
        return {"private": False}

    def to_release(self) -> Release:
        """The encoder in the release format (in memory; ``save_release`` writes it).

        Tensors: the encoder's ``state_dict`` (float32), under its own keys
        (``net.0.weight``, ...). Manifest: ``hyperparameters`` = ``{"encoder": class
        name, **architecture()}``; ``public`` = input shape, representation width,
        input dtype; ``source`` = the public training settings; ``fitted``;
        ``dropped`` = ``RELEASE_DROPS``; ``hyperparameters_not_saved`` = the seeds.
        """
        tensors = {k: v.detach().cpu().contiguous().numpy() for k, v in self.encoder.state_dict().items()}
        return Release(
            model=registered_name(self),
            tensors=tensors,
            hyperparameters={"encoder": type(self.encoder).__name__, **self.encoder.architecture()},  # type: ignore[operator]
            hyperparameters_not_saved=dict(self.WITHHELD),
            public={
                "input_shape": list(self.input_shape),
                "representation_dim": self.representation_dim,
                "input_dtype": "float32",
                "note": "records of shape input_shape (flattened for the MLP encoder) map to representations "
                "of width representation_dim",
            },
            privacy=self._privacy(),
            fitted=dict(self.fitted_),
            dropped=tuple(self.RELEASE_DROPS),
            source={"settings": dict(self.settings_)},
        )

    @classmethod
    def from_release(cls, release: Release, *, device: str | torch.device = "cpu") -> AnonymizerEncoder:
        """The encoder of ``release`` (``dp_proto.release.read_release``), on ``device``.

        The network is rebuilt from the manifest's JSON hyperparameters and its weights
        loaded from the tensors; ``ValueError`` for a release of another model, an
        unknown encoder class, or tensors that do not fit the architecture.
        """
        cls.check_release_model(release)
        cls._check_privacy(release)
        name = release.hyperparameters.get("encoder")  # a built-in encoder's name, once it is built
        try:
            network: Any = encoder_from_architecture(release.hyperparameters)
        except ValueError as err:
            raise ValueError(f"the release's {err}") from err
        expected_state = network.state_dict()
        if set(release.tensors) != set(expected_state):
            raise ValueError(
                f"the release holds the tensors {sorted(release.tensors)}, but a {name} of its architecture has "
                f"{sorted(expected_state)}"
            )
        state = {}
        for key, ref in expected_state.items():
            array = release.tensor(key)
            if tuple(array.shape) != tuple(ref.shape) or array.dtype != np.float32:
                raise ValueError(
                    f"tensor {key!r} of the release is {array.dtype} of shape {tuple(array.shape)}; the architecture "
                    f"needs float32 of shape {tuple(ref.shape)}"
                )
            state[key] = torch.from_numpy(np.array(array, dtype=np.float32, order="C"))
        network.load_state_dict(state, strict=True)
        public = release.public
        if list(public.get("input_shape", [])) != list(network.input_shape) or int(
            public.get("representation_dim", -1)
        ) != int(network.representation_dim):
            raise ValueError(
                f"the manifest's input_shape {public.get('input_shape')} / representation_dim "
                f"{public.get('representation_dim')} disagree with the architecture "
                f"({list(network.input_shape)}, {network.representation_dim})"
            )
        encoder = cls.__new__(cls)
        AnonymizerEncoder._build(
            encoder, network, dict((release.source or {}).get("settings", {})), dict(release.fitted)
        )
        encoder._restore_privacy(release)
        return encoder.to(device)

    def _build(self, network: nn.Module, settings: dict[str, Any], fitted: dict[str, Any]) -> None:
        """``__init__`` without the copy (for a network ``from_release`` just built)."""
        nn.Module.__init__(self)
        self.encoder = network
        self.settings_ = settings
        self.fitted_ = fitted
        self.requires_grad_(False)
        self.eval()

    @classmethod
    def _check_privacy(cls, release: Release) -> None:
        if release.private:
            raise ValueError(f"the release of {release.model} is private, but {cls.__name__} is not")

    def _restore_privacy(self, release: Release) -> None:
        pass


@register_model("dp_proto.DPAnonymizerEncoder")
class DPAnonymizerEncoder(AnonymizerEncoder):
    """The encoder of a DP anonymizer (``fit_dp_anonymizer``), with its ledger.

    The whole training transcript is ``(epsilon, delta)``-DP for the training records
    (add/remove one record), so the encoder is too (post-processing); the release's
    privacy section is the ledger's epsilon, delta and events (``DP_SCOPE`` says what
    it covers).

    Parameters
    ----------
    encoder : MLPEncoder or ConvEncoder
        The trained encoder (copied: CPU, eval mode, without Opacus' hooks).
    ledger : PrivacyLedger
        The run's ledger (``AnonymizerFit.ledger``).
    delta : float, optional
        The delta at which epsilon is reported (default: the ledger's).
    scope : str, default DP_SCOPE
        What the guarantee covers.
    settings, fitted : mapping, optional
        As for ``AnonymizerEncoder``.

    Attributes
    ----------
    ledger_ : PrivacyLedger
        The run's ledger; a read-only ``ReleasedLedger`` after ``load_release``.
    privacy_ : dict
        The ledger's summary (epsilon, delta, accountant, noise source, events).
    privacy_scope_ : str
        What the guarantee covers.
    """

    RELEASE_DROPS: ClassVar[dict[str, str]] = DP_RELEASE_DROPS
    WITHHELD: ClassVar[dict[str, str]] = DP_WITHHELD

    def __init__(
        self,
        encoder: nn.Module,
        *,
        ledger: PrivacyLedger,
        delta: float | None = None,
        scope: str = DP_SCOPE,
        settings: Mapping[str, Any] | None = None,
        fitted: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be the run's PrivacyLedger, got {type(ledger).__name__}")
        super().__init__(encoder, settings=settings, fitted=fitted)
        self.ledger_ = ledger
        self.delta_ = ledger.default_delta if delta is None else float(delta)
        self.privacy_ = ledger.summary(self.delta_)
        self.privacy_scope_: str | None = scope

    def _privacy(self) -> dict[str, Any]:
        return ledger_manifest(self.ledger_, self.delta_, scope=self.privacy_scope_)

    @classmethod
    def _check_privacy(cls, release: Release) -> None:
        if not release.private:
            raise ValueError(f"the release of {release.model} is not private: it has no ledger")

    def _restore_privacy(self, release: Release) -> None:
        self.ledger_ = ledger_from_manifest(release.privacy)
        self.privacy_ = summary_from_manifest(release.privacy)
        self.delta_ = float(release.privacy["delta"])
        self.privacy_scope_ = release.privacy.get("scope")
