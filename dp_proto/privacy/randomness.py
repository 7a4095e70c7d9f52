"""Where the randomness of a private release comes from.

A release is only as private as its noise is unpredictable. The rule of this package:

* **Noise and sampling coins come from fresh operating-system entropy by default.**
  ``fresh_generator`` seeds a ``torch.Generator`` with 64 bits from ``os.urandom``
  (``secure_mode=True`` on a sampler skips the generator and reads ``os.urandom`` directly).
  A mechanism given ``generator=None`` uses a fresh generator, never torch's global one
  (which ``torch.manual_seed`` or Lightning's ``seed_everything`` make predictable).
* **A seed governs only non-private randomness** (initial jitter, splits, k-means++
  starts, restarts): ``random_state`` and config seeds never reach the noise.
* **Exact reproduction is an explicit opt-in** (``noise_seed=`` on the estimators and
  trainers, or a seeded ``torch.Generator`` passed to a mechanism): it warns with
  ``PrivacyLeakWarning``, and the ledger's summary records
  ``"noise": "reproducible"``, so a released model says whether its noise can be
  replayed by whoever knows the seed.

The ledger records the source of every release's randomness
(``note_noise_source``):
``"fresh"`` (a generator from OS entropy), ``"secure"`` (``os.urandom`` directly) or
``"reproducible"`` (a seed or a caller's generator).
"""

from __future__ import annotations

import numbers
import os
import warnings
import weakref
from typing import Literal

import torch

from dp_proto._deprecation import renamed_keyword
from dp_proto.exceptions import PrivacyLeakWarning

__all__ = [
    "fresh_generator",
    "seeded_generator",
    "noise_generator",
    "noise_source",
    "resolve_generator",
    "entropy_seed",
    "check_noise_seed",
    "NoiseSource",
]

NoiseSource = Literal["fresh", "secure", "reproducible"]

# Generators this module made. Anything else a caller passes counts as reproducible:
# whoever built it may know its seed.
_FRESH: weakref.WeakSet[torch.Generator] = weakref.WeakSet()
_ACKNOWLEDGED: weakref.WeakSet[torch.Generator] = weakref.WeakSet()


def entropy_seed() -> int:
    """64 bits from ``os.urandom`` as a non-negative int (``torch.Generator`` accepts
    seeds up to ``2^64 - 1``)."""
    return int.from_bytes(os.urandom(8), "little")


def check_noise_seed(noise_seed) -> int | None:
    """``noise_seed`` as an int (None stays None); anything but a non-negative integer
    (Python or NumPy; not a bool) raises ``ValueError``."""
    if noise_seed is None:
        return None
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, numbers.Integral) or noise_seed < 0:
        raise ValueError(f"noise_seed must be None or a non-negative int, got {noise_seed!r}")
    return int(noise_seed)


def fresh_generator(device: torch.device | str | None = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (CPU by default) seeded with 64 bits of
    operating-system entropy: the default source of every noise draw and sampling coin."""
    gen = torch.Generator(device=device if device is not None else "cpu")
    gen.manual_seed(entropy_seed())
    _FRESH.add(gen)
    return gen


def seeded_generator(
    seed: int, device: torch.device | str | None = None, *, owner: str = "this release", warn: bool = True
) -> torch.Generator:
    """A generator seeded with ``seed``: the explicit opt-in to reproducible noise.

    Warns with ``PrivacyLeakWarning`` (``warn=False`` when the caller warned
    already): whoever knows ``seed`` can subtract the noise and read the pre-noise
    release, and a known sampling seed removes the amplification by subsampling. The
    warning does not print the seed (warnings end up in logs).
    """
    if seed is None:
        raise ValueError("seeded_generator needs a seed; use fresh_generator() for fresh entropy")
    checked = int(check_noise_seed(seed) or 0)  # not None: seed is not None
    if warn:
        warnings.warn(
            f"{owner}: noise_seed makes the noise reproducible; whoever knows the seed can "
            "remove it, so the release is not private against them. Use it for tests and "
            "benchmarks only; the ledger records 'noise': 'reproducible'",
            PrivacyLeakWarning,
            stacklevel=3,
        )
    gen = torch.Generator(device=device if device is not None else "cpu")
    gen.manual_seed(checked % 2**64)
    _ACKNOWLEDGED.add(gen)
    return gen


def noise_generator(
    noise_seed: int | None, device: torch.device | str | None = None, *, owner: str = "this release"
) -> torch.Generator:
    """The generator of a private release: fresh entropy when ``noise_seed`` is None,
    else ``seeded_generator`` (which warns)."""
    if noise_seed is None:
        return fresh_generator(device)
    return seeded_generator(noise_seed, device, owner=owner)


@renamed_keyword("secure", "secure_mode")
def noise_source(generator: torch.Generator | None, secure_mode: bool = False) -> NoiseSource:
    """What a sampler called with ``generator`` / ``secure_mode`` draws from."""
    if secure_mode:
        return "secure"
    if generator is None or generator in _FRESH:
        return "fresh"
    return "reproducible"


def resolve_generator(
    generator: torch.Generator | None, device: torch.device | str | None = None, *, owner: str = "a mechanism"
) -> torch.Generator:
    """The generator a sampler uses: ``generator`` itself, or a fresh one for None.

    A generator that this module did not make (a caller's own, possibly seeded) is the
    opt-in to reproducible noise: it warns once per generator with
    ``PrivacyLeakWarning``."""
    if generator is None:
        return fresh_generator(device)
    if generator not in _FRESH and generator not in _ACKNOWLEDGED:
        warnings.warn(
            f"{owner} draws its noise from a caller's torch.Generator: whoever knows its seed "
            "can reproduce and remove the noise. Pass generator=None (fresh operating-system "
            "entropy) for a release that leaves the curator",
            PrivacyLeakWarning,
            stacklevel=3,
        )
        _ACKNOWLEDGED.add(generator)
    return generator
