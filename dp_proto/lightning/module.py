"""LightningModule for non-private prototype training (SGD, Adam or full-batch L-BFGS)."""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from dp_proto import backbones
from dp_proto.lvq.init import class_mean_prototypes
from dp_proto.lvq.layers import GLVQLayer, GMLVQLayer, LGMLVQLayer
from dp_proto.lvq.losses import wtac
from dp_proto.lvq.model import PrototypeModel
from dp_proto.lvq.sparse import check_penalty, check_sparsifiable, metric_parameter, sparsify_step_, sparsity
from dp_proto.lvq.training import make_optimizer, parameter_groups
from dp_proto.plotting import prototype_grid, relevance_image

__all__ = ["LVQModule", "describe_model", "model_from_spec", "plain_hparams", "plain_value"]

# Arguments of LVQModule and its DP subclasses that are never saved as hyperparameters.
_NOT_HPARAMS = ("model", "display_transform", "ledger", "generator")

_LAYER_KINDS: dict[type, str] = {GLVQLayer: "glvq", GMLVQLayer: "gmlvq", LGMLVQLayer: "lgmlvq"}
_LAYER_CLASSES = {kind: cls for cls, kind in _LAYER_KINDS.items()}
# Backbones a model spec may name: an allowlist, so a checkpoint cannot name arbitrary code.
_BACKBONES: dict[str, Callable[..., nn.Module]] = {
    "small_cnn": backbones.small_cnn,
    "tanh_cnn": backbones.tanh_cnn,
    "mlp": backbones.mlp,
}


def _same_shapes(a: nn.Module, b: nn.Module) -> bool:
    shapes_a = {k: tuple(v.shape) for k, v in a.state_dict().items()}
    return shapes_a == {k: tuple(v.shape) for k, v in b.state_dict().items()}


def _backbone_from_spec(spec: Mapping[str, Any]) -> nn.Module:
    options = dict(spec)
    name = options.pop("name", None)
    if name not in _BACKBONES:
        raise ValueError(f"unknown backbone {name!r} in the model spec; expected one of {sorted(_BACKBONES)}")
    return _BACKBONES[name](**options)


def describe_model(model: PrototypeModel, backbone: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """A plain-data description of ``model``'s architecture (no weights), from which
    ``model_from_spec`` builds an equal model to load a ``state_dict`` into.

    Parameters
    ----------
    model : PrototypeModel
        With a ``GLVQLayer``, ``GMLVQLayer`` or ``LGMLVQLayer`` (exactly these classes).
    backbone : mapping, optional
        For a model with a backbone: ``{"name": ..., **kwargs}`` naming the builder in
        ``dp_proto.backbones`` (``"small_cnn"``, ``"tanh_cnn"`` or ``"mlp"``) and its arguments, e.g.
        ``{"name": "small_cnn", "in_channels": 1, "out_features": 32}``; checked against
        the model's backbone (same parameter names and shapes).

    Returns
    -------
    dict or None
        Keys ``layer`` (``"glvq"``, ``"gmlvq"`` or ``"lgmlvq"``), ``in_features``,
        ``num_prototypes``, ``rank``, ``normalize``, ``dtype``, ``prototype_labels`` and
        ``backbone``; None for a layer of another class, or a backbone without ``backbone``.
    """
    layer = model.layer
    kind = _LAYER_KINDS.get(type(layer))
    if kind is None:
        return None
    if backbone is not None:
        backbone = {str(k): plain_value(v, "backbone") for k, v in backbone.items()}
        if not _same_shapes(_backbone_from_spec(backbone), model.backbone):
            raise ValueError(f"the backbone {backbone} does not match the model's backbone")
    elif model.has_backbone:
        return None
    return {
        "layer": kind,
        "in_features": int(layer.in_features),
        "num_prototypes": int(layer.num_prototypes),
        "rank": int(getattr(layer, "rank", layer.in_features)),
        "normalize": bool(getattr(layer, "normalize", False)),
        "dtype": str(layer.prototypes.dtype).removeprefix("torch."),
        "prototype_labels": [int(v) for v in model.prototype_labels.tolist()],
        "backbone": backbone,
    }


def model_from_spec(spec: Mapping[str, Any]) -> PrototypeModel:
    """A new ``PrototypeModel`` of the architecture ``spec`` describes (``describe_model``);
    its weights are placeholders, to be replaced by a ``state_dict``."""
    kind = spec.get("layer")
    if kind not in _LAYER_CLASSES:
        raise ValueError(f"unknown layer {kind!r} in the model spec; expected one of {sorted(_LAYER_CLASSES)}")
    dtype = getattr(torch, str(spec.get("dtype", "float32")), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"unknown dtype {spec.get('dtype')!r} in the model spec")
    kwargs: dict[str, Any] = {"dtype": dtype}
    if kind != "glvq":
        kwargs.update(rank=spec.get("rank"), normalize=bool(spec.get("normalize", False)))
    layer = _LAYER_CLASSES[kind](int(spec["in_features"]), int(spec["num_prototypes"]), **kwargs)
    backbone = _backbone_from_spec(spec["backbone"]) if spec.get("backbone") is not None else None
    labels = spec.get("prototype_labels")
    return PrototypeModel(layer, labels if labels is not None else [0] * layer.num_prototypes, backbone=backbone)


def plain_value(value: Any, name: str) -> Any:
    """``value`` as plain data that ``torch.load(weights_only=True)`` and ``yaml.safe_load``
    accept: None, bool, int, float, str, and lists and str-keyed dicts of them (NumPy
    scalars and arrays, tensors and tuples are converted); raises ``TypeError`` otherwise."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.generic, np.ndarray, Tensor)):
        value = value.tolist()
        return plain_value(value, name) if isinstance(value, list) else value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [plain_value(v, name) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain_value(v, name) for k, v in value.items()}
    raise TypeError(f"hyperparameter {name!r} is a {type(value).__name__}, not plain data")


def plain_hparams(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters as plain data (``plain_value``); one that is not plain data is
    left out with a ``UserWarning`` (pass it to ``load_from_checkpoint`` yourself)."""
    out = {}
    for name, value in hparams.items():
        try:
            out[name] = plain_value(value, name)
        except TypeError as err:
            warnings.warn(
                f"{err}: not saved in checkpoints (torch.load(weights_only=True) would refuse it); "
                f"pass {name}= to load_from_checkpoint",
                UserWarning,
                stacklevel=3,
            )
    return out


class LVQModule(L.LightningModule):
    """Trains a ``PrototypeModel`` on the GLVQ cost.

    Logs ``train_loss``/``train_acc``, ``val_loss``/``val_acc`` and ``test_acc``;
    to TensorBoard it also writes, every ``image_every_n_epochs`` epochs, the
    prototypes as images (when ``image_shape`` is given, e.g. ``(28, 28)``) and
    the relevance matrix of a GMLVQ layer (the first few local ones for LGMLVQ).

    Checkpoints hold plain data only (they load with ``torch.load``'s default
    ``weights_only=True``): the weights, the optimizer state and the hyperparameters,
    among them ``model_spec``, the model's architecture (``describe_model``), so that
    ``LVQModule.load_from_checkpoint(path)`` rebuilds the model by itself. The model, the
    ``display_transform`` (and a DP subclass's ledger and generator) are never
    hyperparameters.

    Parameters
    ----------
    model : PrototypeModel, optional
        Required unless ``model_spec`` is given (``load_from_checkpoint`` passes that).
    optimizer : {"adam", "sgd", "lbfgs"}
        ``lbfgs`` is meant for full-batch loaders (``batch_size=None``).
    lr : float
    momentum : float
        SGD momentum (default 0.9).
    metric_lr_scale : float
        Learning rate of the metric (Omega) relative to ``lr`` (default 1.0).
    group_lasso : float
        Feature sparsity (Brinkrolf 2023, ch. 5; GMLVQ and LGMLVQ layers, ``sgd`` or
        ``adam``): after every step the group soft-threshold of the metric's feature
        columns with the metric's step size ``lr * metric_lr_scale``
        (``dp_proto.lvq.sparse.sparsify_step_``), logged as ``sparsity`` every epoch.
        In the DP subclass it is post-processing of the noisy step (default 0.0: off).
    max_lbfgs_iter : int
        L-BFGS iterations per training step (one step per epoch with a full batch).
    transfer_fn, beta
        Transfer function of the GLVQ cost.
    image_shape : sequence of int, optional
        Shape to draw each prototype in.
    display_transform : callable, optional
        Maps prototypes ``(W, d)`` back to raw input units before drawing
        (e.g. ``ArrayDataModule.inverse_transform``).
    image_every_n_epochs : int
        How often to draw the pictures.
    model_spec : dict, optional
        The architecture (``describe_model``). With ``model``: only its ``"backbone"``
        entry is read, naming the builder of the model's backbone (needed to rebuild a
        model with a backbone; without it such a checkpoint needs ``model=`` to load).
        Without ``model``: the model is built from it (``model_from_spec``).
    """

    def __init__(
        self,
        model: PrototypeModel | None = None,
        *,
        optimizer: str = "adam",
        lr: float = 0.01,
        momentum: float = 0.9,
        metric_lr_scale: float = 1.0,
        group_lasso: float = 0.0,
        max_lbfgs_iter: int = 20,
        transfer_fn: str = "identity",
        beta: float = 1.0,
        image_shape: Sequence[int] | None = None,
        display_transform: Callable[[Tensor], Tensor] | None = None,
        image_every_n_epochs: int = 5,
        model_spec: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if optimizer not in ("adam", "sgd", "lbfgs"):
            raise ValueError(f"optimizer must be 'adam', 'sgd' or 'lbfgs', got {optimizer!r}")
        if model is None:
            if model_spec is None:
                raise TypeError(f"{type(self).__name__} needs a model (or the model_spec of a checkpoint)")
            model = model_from_spec(model_spec)
        spec = describe_model(model, backbone=(model_spec or {}).get("backbone"))
        _check_group_lasso(group_lasso, model, optimizer)
        self.model = model
        self.optimizer_name = optimizer
        self.lr = lr
        self.momentum = momentum
        self.metric_lr_scale = metric_lr_scale
        self.group_lasso = float(group_lasso)
        self.max_lbfgs_iter = max_lbfgs_iter
        self.transfer_fn = transfer_fn
        self.beta = beta
        self.image_shape = tuple(image_shape) if image_shape is not None else None
        self.display_transform = display_transform
        self.image_every_n_epochs = image_every_n_epochs
        # Never hyperparameters (they land in hparams.yaml and in checkpoints): the model,
        # the ledger, and the noise generator of a DP subclass (its state replays the noise).
        self.save_hyperparameters(ignore=list(_NOT_HPARAMS))
        # Saved again as plain data (a NumPy float would make torch.load(weights_only=True)
        # refuse the checkpoint), with the architecture in place of the model.
        self.save_hyperparameters({**plain_hparams(self.hparams), "model_spec": spec})

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
        # sync_dist: under data-parallel training, the mean over the processes' shards
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True, prog_bar=stage != "test", sync_dist=True)
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
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
        if self.group_lasso > 0:  # the proximal step of the group lasso (also post-processing)
            sparsify_step_(metric_parameter(self.model), self.lr * self.metric_lr_scale, self.group_lasso)

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
        if self.group_lasso > 0:
            self.log("sparsity", sparsity(metric_parameter(self.model).detach()), prog_bar=True)
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
        if self.image_shape is not None and not self.model.has_backbone:
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


def _check_group_lasso(group_lasso: float, model: PrototypeModel, optimizer: str) -> None:
    if check_penalty("group_lasso", group_lasso) == 0:
        return
    check_sparsifiable(model)
    if optimizer == "lbfgs":
        raise ValueError("group_lasso needs optimizer 'sgd' or 'adam' (a step size per step), not 'lbfgs'")
