"""LightningModule for non-private prototype training (SGD, Adam or full-batch L-BFGS)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning as L
import torch
from torch import Tensor

from dp_proto.lvq.init import class_mean_prototypes
from dp_proto.lvq.layers import GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import wtac
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.training import make_optimizer, parameter_groups
from dp_proto.plotting import prototype_grid, relevance_image

__all__ = ["LVQModule"]

# Arguments of LVQModule and its DP subclasses that are never saved as hyperparameters.
_NOT_HPARAMS = ("model", "display_transform", "ledger", "generator", "noise_generator")


class LVQModule(L.LightningModule):
    """Trains a ``PrototypeModel`` on the GLVQ cost.

    Logs ``train_loss``/``train_acc``, ``val_loss``/``val_acc`` and ``test_acc``;
    to TensorBoard it also writes, every ``image_every_n_epochs`` epochs, the
    prototypes as images (when ``image_shape`` is given, e.g. ``(28, 28)``) and
    the relevance matrix of a GMLVQ layer (the first few local ones for LGMLVQ).

    Parameters
    ----------
    model : PrototypeModel
    optimizer : {"adam", "sgd", "lbfgs"}
        ``lbfgs`` is meant for full-batch loaders (``batch_size=None``).
    lr : float
    momentum : float
        SGD momentum (default 0.9).
    metric_lr_scale : float
        Learning rate of the metric (Omega) relative to ``lr`` (default 1.0).
    max_lbfgs_iter : int
        L-BFGS iterations per training step (one step per epoch with a full batch).
    transfer_fn, beta
        Transfer function of the GLVQ cost.
    image_shape : sequence of int, optional
        Shape to draw each prototype in.
    display_transform : callable, optional
        Maps prototypes ``(W, d)`` back to raw input units before drawing
        (e.g. ``ArrayDataModule.inverse_transform``).
    """

    def __init__(
        self,
        model: PrototypeModel,
        *,
        optimizer: str = "adam",
        lr: float = 0.01,
        momentum: float = 0.9,
        metric_lr_scale: float = 1.0,
        max_lbfgs_iter: int = 20,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        image_shape: Sequence[int] | None = None,
        display_transform: Callable[[Tensor], Tensor] | None = None,
        image_every_n_epochs: int = 5,
    ) -> None:
        super().__init__()
        if optimizer not in ("adam", "sgd", "lbfgs"):
            raise ValueError(f"optimizer must be 'adam', 'sgd' or 'lbfgs', got {optimizer!r}")
        self.model = model
        self.optimizer_name = optimizer
        self.lr = lr
        self.momentum = momentum
        self.metric_lr_scale = metric_lr_scale
        self.max_lbfgs_iter = max_lbfgs_iter
        self.transfer_fn = transfer_fn
        self.beta = beta
        self.image_shape = tuple(image_shape) if image_shape is not None else None
        self.display_transform = display_transform
        self.image_every_n_epochs = image_every_n_epochs
        # Never hyperparameters (they land in hparams.yaml and in checkpoints): the model,
        # the ledger, and the noise generator of a DP subclass (its state replays the noise).
        self.save_hyperparameters(ignore=list(_NOT_HPARAMS))

    # -- initialisation ------------------------------------------------------------------
    @torch.no_grad()
    def init_prototypes(self, x: Tensor, y: Tensor, generator: torch.Generator | None = None) -> None:
        """Place the prototypes at the class means of the backbone features of ``x``."""
        feats = self.model.features(x.to(self.model.prototype_labels.device)).flatten(1)
        protos = class_mean_prototypes(
            feats.to(self.model.layer.prototypes.dtype),
            y.to(feats.device),
            self.model.prototype_labels,
            generator=generator,
        )
        self.model.layer.prototypes.copy_(protos)

    # -- steps ---------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)

    def _step(self, batch, stage: str) -> Tensor:
        x, y = batch
        distances = self.model(x)
        loss = self.model.loss(distances, y, transfer_fn=self.transfer_fn, beta=self.beta)  # type: ignore[arg-type]
        acc = (wtac(distances, self.model.prototype_labels) == y).float().mean()
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True, prog_bar=stage != "test")
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def training_step(self, batch, batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")

    def predict_step(self, batch, batch_idx: int) -> Tensor:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return wtac(self.model(x), self.model.prototype_labels)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        # Post-processing projection of the metric (trace(Lambda) = 1), eq. 2.20.
        self.model.layer.normalize_()

    def configure_optimizers(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.optimizer_name == "lbfgs":
            return torch.optim.LBFGS(
                params, lr=1.0, max_iter=self.max_lbfgs_iter, history_size=20, line_search_fn="strong_wolfe"
            )
        groups = parameter_groups(self.model, self.lr, self.metric_lr_scale)
        return make_optimizer(self.optimizer_name, groups, self.lr, momentum=self.momentum)

    # -- pictures ------------------------------------------------------------------------
    def on_train_epoch_end(self) -> None:
        epoch = self.current_epoch
        last = self.trainer.max_epochs is not None and epoch == self.trainer.max_epochs - 1
        if epoch % self.image_every_n_epochs == 0 or last:
            self.log_images()

    def log_images(self) -> None:
        """Write prototype and relevance images to every TensorBoard logger."""
        writers = [lg.experiment for lg in self.loggers if hasattr(lg.experiment, "add_image")]
        if not writers:
            return
        layer = self.model.layer
        images: dict[str, Tensor] = {}
        if self.image_shape is not None and isinstance(self.model.backbone, torch.nn.Identity):
            protos = layer.prototypes.detach()
            if self.display_transform is not None:
                protos = self.display_transform(protos)
            images["prototypes"] = prototype_grid(protos, self.image_shape)
        if isinstance(layer, LGMLVQLayer):
            for j, lam in enumerate(layer.relevance_matrices[:4]):
                images[f"relevance_matrix/prototype_{j}"] = relevance_image(lam)
        elif isinstance(layer, GMLVQLayer):
            images["relevance_matrix"] = relevance_image(layer.relevance_matrix)
        for writer in writers:
            for tag, image in images.items():
                writer.add_image(tag, image, self.current_epoch)
