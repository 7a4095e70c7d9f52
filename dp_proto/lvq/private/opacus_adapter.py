"""Everything that touches Opacus: its DP optimizers with sound noise and a public
normaliser, and the registration of the prototype layers' closed-form samplers
(``dp_proto.lvq.private.grad_samplers.SAMPLERS``; importing this module registers them).

Opacus draws its Gaussian noise with ``torch.normal`` in the parameters' dtype. In
float32 on CPU that sampler never exceeds about 5.77 standard deviations (24-bit
uniforms), so a neighbour's outputs can fall outside the noise's support and delta is
understated; with ``generator=None`` it also draws from torch's global generator, which
``seed_everything`` makes predictable. And ``make_private`` divides the noisy sum by
``q * len(dataset)``, a private quantity under add/remove.

``make_noise_sound`` fixes all three on a constructed ``DPOptimizer`` (any of
Opacus' variants, per-layer and ghost clipping included):

* noise from ``dp_proto.privacy.noise.gaussian_noise`` (float64 Box-Muller on
  53-bit uniforms, then cast), from a generator seeded with fresh operating-system
  entropy unless the caller passes one (reproducible: see
  ``dp_proto.privacy.randomness``), or ``os.urandom`` with ``secure_mode=True``;
* ``expected_batch_size`` set to the caller's public value;
* every step's noisy sum passes through ``dp_proto.privacy.testing.intercept``;
* a record whose per-sample gradient has a NaN or infinite entry contributes zero to the
  clipped sum (Opacus' clip factor ``C / (norm + 1e-6)`` is NaN for it, and ``0 * inf`` is
  NaN, so one record with finite but extreme inputs, e.g. features of 1e38 in float32,
  made the whole step NaN: a release that shows whether the batch held such a record).
  Ghost clipping (no per-sample gradients) is not covered.

It also silences, once, torch's notice that a full backward hook fires on a module
whose inputs need no gradient (``quiet_opacus_hook_notice``): Opacus' per-sample hooks
on a network's first layer raise it at every DP-SGD step, and it is expected there.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from opacus.grad_sample import register_grad_sampler, register_norm_sampler
from opacus.optimizers import DPOptimizerFastGradientClipping
from opacus.optimizers.optimizer import DPOptimizer, _check_processed_flag, _mark_as_processed
from opacus.optimizers.perlayeroptimizer import DPPerLayerOptimizer

from dp_proto.lvq.private.grad_samplers import SAMPLERS
from dp_proto.privacy.data_parallel import DataParallel
from dp_proto.privacy.noise import gaussian_noise
from dp_proto.privacy.randomness import fresh_generator
from dp_proto.privacy.testing import intercept

__all__ = ["make_noise_sound", "check_expected_batch_size", "quiet_opacus_hook_notice"]

#: torch's notice (``torch.utils.hooks``) that Opacus' per-sample hooks raise at every step.
HOOK_NOTICE = (
    r"Full backward hook is firing when gradients are computed with respect to module outputs since no "
    r"inputs require gradients"
)
#: The modules the notice is attributed to in DP-SGD: it names the caller of ``backward``,
#: Lightning's ``LightningModule.backward`` or dp-proto's own training loop.
HOOK_NOTICE_CALLERS = r"(lightning\.pytorch\.core\.module|dp_proto\.)"


def quiet_opacus_hook_notice() -> None:
    """Ignore torch's backward-hook notice about Opacus' per-sample hooks (``HOOK_NOTICE``).

    Opacus' hooks read the gradient of a layer's output only, so the notice for a layer
    whose input needs no gradient (the first layer, or one after a frozen part) is
    expected; it fired at every step. The filter matches that message only, as a
    ``UserWarning`` attributed to ``HOOK_NOTICE_CALLERS``; privacy warnings
    (``PrivacyLeakWarning``, ``DomainWarning``) are never filtered. Added once: a call
    finding the filter in place changes nothing.
    """
    for action, message, category, module, _ in warnings.filters:
        if (
            action == "ignore"
            and category is UserWarning
            and getattr(message, "pattern", None) == HOOK_NOTICE
            and getattr(module, "pattern", None) == HOOK_NOTICE_CALLERS
        ):
            return
    warnings.filterwarnings("ignore", message=HOOK_NOTICE, category=UserWarning, module=HOOK_NOTICE_CALLERS)


def check_expected_batch_size(expected_batch_size: float) -> float:
    """A public expected batch size must be a finite number > 0."""
    value = float(expected_batch_size)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"expected_batch_size must be a public number > 0, got {expected_batch_size!r}")
    return value


def _sound_add_noise(self) -> None:
    """Opacus' ``add_noise`` with float64 noise from ``gaussian_noise``; data-parallel:
    only rank 0 adds noise, then the ranks' sums are all-reduced."""
    multiplier = getattr(self, "_adjusted_noise_multiplier", self.noise_multiplier)
    std = multiplier * self.max_grad_norm
    data_parallel = self._sound_data_parallel
    adds_noise = data_parallel is None or data_parallel.draws_noise
    for p in self.params:
        _check_processed_flag(p.summed_grad)
        summed = p.summed_grad

        def draw(summed=summed) -> torch.Tensor:
            if std == 0 or not adds_noise:
                return summed.clone()
            noise = gaussian_noise(
                summed.shape,
                std,
                generator=self._sound_generator,
                secure_mode=self._sound_secure,
                dtype=summed.dtype,
                device=summed.device,
            )
            return summed + noise

        p.grad = intercept(self._sound_name, summed, None, None, draw).view_as(p)
        _mark_as_processed(p.summed_grad)
    if data_parallel is not None:
        _all_reduce_grads(self)


def _all_reduce_grads(self) -> None:
    """Every rank's ``p.grad`` becomes the sum over the ranks (one flat all-reduce): rank
    0's noisy partial sum plus the others' clipped partial sums."""
    grads = [p.grad for p in self.params]
    total = self._sound_data_parallel.all_reduce_sum(
        torch.cat([g.reshape(-1) for g in grads]), what="the all-reduce of the noisy gradient sum"
    )
    offset = 0
    for p, g in zip(self.params, grads, strict=True):
        p.grad = total[offset : offset + g.numel()].view_as(p).clone()
        offset += g.numel()


def _drop_non_finite_records(self) -> None:
    """Zero the per-sample gradients of every record with a NaN or infinite entry in any
    parameter, so that it contributes zero to the clipped sum and every record at most
    ``C`` (a finite row's clip factor is Opacus' own). No-op without per-sample
    gradients (ghost clipping) and for an empty batch."""
    params = list(self.params)
    if not params or any(getattr(p, "grad_sample", None) is None for p in params):
        return
    flat = [self._get_flat_grad_sample(p) for p in params]
    if flat[0].shape[0] == 0:
        return
    finite = torch.stack([torch.isfinite(g.reshape(g.shape[0], -1)).all(1).to(flat[0].device) for g in flat]).all(0)
    if bool(finite.all()):
        return
    for p, g in zip(params, flat, strict=True):
        keep = finite.to(g.device).reshape((-1,) + (1,) * (g.dim() - 1))
        p.grad_sample = torch.where(keep, g, torch.zeros((), dtype=g.dtype, device=g.device))


def _clip_with_floors(self, floors: dict) -> None:
    """Opacus' per-sample clipping (joint, or per parameter for ``DPPerLayerOptimizer``)
    with every parameter's per-sample norm raised to at least its floor ``(B,)``."""
    params = list(self.params)
    norms = []
    for p in params:
        flat = self._get_flat_grad_sample(p)
        norm = flat.reshape(len(flat), -1).norm(2, dim=-1)
        floor = floors.get(p)
        if floor is not None:  # a record whose floor is not finite contributes zero
            floor = floor.to(norm.device, norm.dtype)
            norm = torch.maximum(norm, torch.where(floor.isnan(), torch.inf, floor))
        norms.append(norm)
    if isinstance(self, DPPerLayerOptimizer):
        factors = [
            (bound / (norm + 1e-6)).clamp(max=1.0) for bound, norm in zip(self.max_grad_norms, norms, strict=True)
        ]
    else:
        joint = torch.stack(norms, dim=1).norm(2, dim=1) if norms and len(norms[0]) else None
        factor = (self.max_grad_norm / (joint + 1e-6)).clamp(max=1.0) if joint is not None else None
        factors = [factor] * len(params)
    for p, factor in zip(params, factors, strict=True):
        _check_processed_flag(p.grad_sample)
        grad_sample = self._get_flat_grad_sample(p).to(p.dtype)
        if factor is None:  # an empty batch
            grad = grad_sample.sum(0)
        else:
            grad = torch.einsum("i,i...", factor.to(grad_sample.device, p.dtype), grad_sample)
        p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
        _mark_as_processed(p.grad_sample)


def _sound_clip_and_accumulate(base: type[DPOptimizer]):
    """``base``'s ``clip_and_accumulate`` (with the per-sample norms raised to the floors of
    ``norm_floors``, if set); if the clipped sum came out non-finite (a record with a NaN
    or infinite per-sample gradient: its clip factor is NaN), the sum is restored and
    formed again after ``_drop_non_finite_records``. The common case costs one finiteness
    check of the ``(P,)`` sums, not of the ``(B, P)`` per-sample gradients."""

    def clip_and_accumulate(self) -> None:
        floors = self._sound_norm_floors() if self._sound_norm_floors is not None else {}

        def clip() -> None:
            if floors:
                _clip_with_floors(self, floors)
            else:
                base.clip_and_accumulate(self)

        params = list(self.params)
        saved = [None if getattr(p, "summed_grad", None) is None else p.summed_grad.clone() for p in params]
        clip()
        sums = [p.summed_grad for p in params if getattr(p, "summed_grad", None) is not None]
        if not sums or bool(torch.stack([torch.isfinite(s).all() for s in sums]).all()):
            return
        for p, before in zip(params, saved, strict=True):
            p.summed_grad = before
        _drop_non_finite_records(self)
        clip()

    return clip_and_accumulate


_SOUND_CLASSES: dict[type, type] = {}


def _sound_class(base: type) -> type:
    """The subclass of an Opacus optimizer class whose ``add_noise`` draws our noise (one per base)."""
    if base not in _SOUND_CLASSES:
        _SOUND_CLASSES[base] = type(
            f"Sound{base.__name__}",
            (base,),
            {
                "add_noise": _sound_add_noise,
                "clip_and_accumulate": _sound_clip_and_accumulate(base),
                "_dp_proto_sound": True,
                "_sound_data_parallel": None,
                "_sound_norm_floors": None,
            },
        )
    return _SOUND_CLASSES[base]


def make_noise_sound(
    optimizer: DPOptimizer,
    *,
    expected_batch_size: float,
    generator: torch.Generator | None = None,
    secure_mode: bool = False,
    name: str = "dp_sgd",
    data_parallel: DataParallel | None = None,
    norm_floors: Callable[[], dict[torch.Tensor, torch.Tensor]] | None = None,
) -> DPOptimizer:
    """Make ``optimizer`` (an Opacus ``DPOptimizer``) draw float64 noise from fresh
    entropy (or ``generator``, or ``os.urandom`` with ``secure_mode``), divide by the
    public ``expected_batch_size`` and drop records whose per-sample gradient is not
    finite (they contribute zero). Returns the same object; idempotent.

    ``data_parallel`` (``dp_proto.privacy.data_parallel``): this rank's clipped sum is
    all-reduced over the ranks, the noise drawn on rank 0 only, so the step is that of
    one process over all the ranks' records; ``expected_batch_size`` is then the global
    one (``q`` times all records).

    ``norm_floors``: called once per step before clipping, returns ``{parameter: (B,)}``
    lower bounds of the records' per-sample norms (the parameters it leaves out keep
    their computed norms); a record is clipped by its norm raised to the floors
    (``dp_proto.lvq.private.guard``: the prototype layers' cancellation guard). The
    sensitivity stays ``max_grad_norm``: a larger clipping norm only shrinks a record's
    clipped gradient. Not used by ghost clipping, whose norm samplers hold the floors."""
    if not isinstance(optimizer, DPOptimizer):
        raise TypeError(f"expected an Opacus DPOptimizer, got {type(optimizer).__name__}")
    if secure_mode and generator is not None:
        raise ValueError("secure_mode=True draws from os.urandom; do not pass a generator as well")
    if norm_floors is not None and isinstance(optimizer, DPOptimizerFastGradientClipping):
        raise ValueError(
            "norm_floors needs per-sample gradients; ghost clipping takes its floors from the norm samplers"
        )
    base = type(optimizer)
    if not getattr(base, "_dp_proto_sound", False):
        optimizer.__class__ = _sound_class(base)
    optimizer.expected_batch_size = check_expected_batch_size(expected_batch_size)
    optimizer._sound_secure = bool(secure_mode)
    optimizer._sound_generator = None if secure_mode else (generator if generator is not None else fresh_generator())
    optimizer._sound_name = name
    optimizer._sound_data_parallel = data_parallel
    optimizer._sound_norm_floors = norm_floors
    optimizer.generator = None  # Opacus' own sampler is never used
    quiet_opacus_hook_notice()  # every DP-SGD trainer sets Opacus up through here
    return optimizer


for _layer, (_grad_sample, _norm_sample) in SAMPLERS.items():
    register_grad_sampler(_layer)(_grad_sample)
    register_norm_sampler(_layer)(_norm_sample)
