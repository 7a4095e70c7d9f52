"""Where the randomness of a private release comes from.

A release is only as private as its noise is unpredictable. The rule of this package:

* **Noise and sampling coins come from fresh operating-system entropy by default.**
  ``fresh_generator`` fills the whole state of a ``torch.Generator`` from ``os.urandom``:
  on the CPU the 624 32-bit words of its Mersenne Twister (19,937 bits of entropy), on
  CUDA the 64-bit Philox key and a random counter offset (126 bits: torch requires the
  offset to be a multiple of 4). It never relies on ``manual_seed``, which on the CPU
  keeps only the low 32 bits of a seed. ``secure_mode=True`` on a sampler skips the
  generator and reads ``os.urandom`` directly. A mechanism given ``generator=None``
  uses a fresh generator, never torch's global one (which ``torch.manual_seed`` or
  Lightning's ``seed_everything`` make predictable).
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
import struct
import warnings
import weakref
from typing import Literal

import numpy as np
import torch

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
    """64 bits from ``os.urandom`` as a non-negative int below ``2^64``.

    Not enough to seed a noise generator with: ``torch.Generator.manual_seed`` accepts
    it, but the CPU generator keeps only its low 32 bits (see ``seeded_generator``);
    ``fresh_generator`` fills the generator's whole state from ``os.urandom`` instead."""
    return int.from_bytes(os.urandom(8), "little")


# torch's CPU generator state (``get_state()``, a uint8 tensor): the C struct
# ``CPUGeneratorImplState`` of ATen/CPUGeneratorImpl.h, little-endian. Byte offsets:
# initial seed (uint64) 0, ``left`` (int32) 8, ``seeded`` (int32) 12, ``next`` (uint64)
# 16, the 624 Mersenne Twister words (each stored as a uint64 whose low 32 bits are
# used) 24, then the cached normal samples: double ``normal_x`` / ``normal_y`` /
# ``normal_rho`` 5016 / 5024 / 5032, ``normal_is_valid`` (int32) 5040, float
# ``next_float_normal_sample`` 5048, ``is_next_float_normal_sample_valid`` (bool) 5052.
_MT_WORDS = 624
_CPU_STATE_BYTES = 5056
_CPU_WORDS_AT = 24
_CPU_NORMAL_AT = 5016  # normal_x, normal_y, normal_rho, normal_is_valid
_CPU_FLOAT_NORMAL_AT = 5048  # next_float_normal_sample, is_next_float_normal_sample_valid


def _mersenne_words() -> np.ndarray:
    """624 uniform 32-bit words from ``os.urandom``, redrawn in the (probability
    ``2^-19937``) case that they form the all-zero Mersenne Twister state (the top bit
    of word 0 and words 1-623 all zero), which never leaves zero."""
    while True:
        words = np.frombuffer(os.urandom(4 * _MT_WORDS), dtype="<u4")
        if words[1:].any() or words[0] >> 31:
            return words


def _randomize_cpu(gen: torch.Generator) -> None:
    """Overwrite the whole Mersenne Twister state of CPU generator ``gen`` with
    ``os.urandom`` words; no cached normal sample survives."""
    state = gen.get_state()
    if state.numel() != _CPU_STATE_BYTES:
        raise RuntimeError(
            f"unknown torch CPU generator state ({state.numel()} bytes, expected {_CPU_STATE_BYTES}); "
            "fresh_generator cannot fill it from os.urandom"
        )
    raw = bytearray(state.numpy().tobytes())
    words = _mersenne_words()
    # the initial-seed field is reported by initial_seed() and used by no draw: a random
    # value, unrelated to the words. left = 1, next = 0: the first draw twists the words.
    struct.pack_into("<QiiQ", raw, 0, entropy_seed(), 1, 1, 0)
    raw[_CPU_WORDS_AT : _CPU_WORDS_AT + 8 * _MT_WORDS] = words.astype("<u8").tobytes()
    struct.pack_into("<dddi", raw, _CPU_NORMAL_AT, 0.0, 0.0, 0.0, 0)  # no cached double normal
    struct.pack_into("<f?", raw, _CPU_FLOAT_NORMAL_AT, 0.0, False)  # no cached float normal
    gen.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    back = gen.get_state().numpy().tobytes()
    stored = np.frombuffer(back, dtype="<u8", count=_MT_WORDS, offset=_CPU_WORDS_AT)
    if not np.array_equal(stored, words.astype(np.uint64)) or struct.unpack_from("<iiQ", back, 8) != (1, 1, 0):
        raise RuntimeError("torch's CPU generator did not take the os.urandom state; its layout has changed")


def _randomize_philox(gen: torch.Generator) -> None:
    """Random 64-bit Philox key and random counter offset (a multiple of 4, as torch
    requires: 62 bits) for CUDA generator ``gen``."""
    key, offset = entropy_seed(), entropy_seed() & ~3
    gen.manual_seed(key)  # a CUDA generator keeps all 64 bits of the seed as its Philox key
    gen.set_offset(offset)
    if gen.initial_seed() % 2**64 != key or gen.get_offset() % 2**64 != offset:  # (signed or unsigned)
        raise RuntimeError("torch's CUDA generator did not take the os.urandom key and offset")


def check_noise_seed(noise_seed) -> int | None:
    """``noise_seed`` as an int (None stays None); anything but a non-negative integer
    (Python or NumPy; not a bool) raises ``ValueError``."""
    if noise_seed is None:
        return None
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, numbers.Integral) or noise_seed < 0:
        raise ValueError(f"noise_seed must be None or a non-negative int, got {noise_seed!r}")
    return int(noise_seed)


def fresh_generator(device: torch.device | str | None = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (CPU by default) whose whole state comes from
    ``os.urandom``: the default source of every noise draw and sampling coin.

    CPU: the 624 32-bit words of the Mersenne Twister state are read from
    ``os.urandom`` (19,937 bits of entropy; the all-zero state is excluded), with no
    cached normal sample. CUDA: the 64-bit Philox key and the counter offset are read
    from ``os.urandom`` (126 bits; the offset is a multiple of 4, as torch requires).
    No ``manual_seed`` value reproduces the stream: ``initial_seed()`` returns a random
    number unrelated to it. Other device types raise ``ValueError``."""
    gen = torch.Generator(device=device if device is not None else "cpu")
    if gen.device.type == "cpu":
        _randomize_cpu(gen)
    elif gen.device.type == "cuda":
        _randomize_philox(gen)
    else:
        raise ValueError(f"fresh_generator fills CPU and CUDA generators only, not {gen.device.type!r}")
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

    ``manual_seed`` semantics: seeds are taken modulo ``2^64``, and torch's CPU
    generator (Mersenne Twister) uses only the low 32 bits of the seed, so seeds that
    agree modulo ``2^32`` draw the same numbers on the CPU (``initial_seed()`` still
    returns the full value). A CUDA generator uses all 64 bits as its Philox key.
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
