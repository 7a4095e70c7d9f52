"""Entropy of the default noise generators and unbounded tails of the discrete samplers.

Generators: ``fresh_generator`` fills the whole generator state from ``os.urandom``
(torch's CPU generator keeps only the low 32 bits of a ``manual_seed``). Samplers:
``geometric_noise``, ``discrete_laplace_noise`` and ``discrete_gaussian_noise`` have
tails that follow the pmf at every distance (a ``floor(log u / log p)`` sampler on
53-bit uniforms stops near 37 scales). Seeded tests are deterministic; the secure-mode
and fresh-entropy tests use levels of 1e-4 or below (stated false-failure probability
per test).
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext

import numpy as np
import pytest
import torch
from scipy import stats

from dp_proto.privacy import noise as noise_module
from dp_proto.privacy import randomness
from dp_proto.privacy.noise import discrete_gaussian_noise, discrete_laplace_noise, geometric_noise
from dp_proto.privacy.randomness import fresh_generator, seeded_generator

MT_WORDS = 624
WORDS_AT = 24  # byte offset of the Mersenne Twister words in torch's CPU generator state
SMALLEST = 0.5 / 2.0**53  # the smallest uniform uniform_open returns (2^-54)


def _mt_words(gen: torch.Generator) -> np.ndarray:
    return np.frombuffer(gen.get_state().numpy().tobytes(), dtype="<u8", count=MT_WORDS, offset=WORDS_AT)


def _seeded_words(seed: int) -> np.ndarray:
    """The Mersenne Twister state that ``manual_seed(seed)`` gives (init_genrand on the
    low 32 bits)."""
    words = [seed & 0xFFFFFFFF]
    for i in range(1, MT_WORDS):
        prev = words[-1]
        words.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return np.array(words, dtype=np.uint64)


def _from_some_seed(words: np.ndarray) -> bool:
    """Whether some ``manual_seed`` value (any of the 2^64) produces this state: every
    seed's state is ``init_genrand`` of its low 32 bits, fixed by word 0."""
    return bool(np.array_equal(words, _seeded_words(int(words[0]))))


# -- A: entropy of the default generators ---------------------------------------------------------
def test_torch_cpu_generator_keeps_only_the_low_32_bits_of_a_seed():
    """Why ``manual_seed`` cannot carry the entropy (the fact ``seeded_generator`` states)."""
    for seed in (5, 2**40 + 5, 2**63 + 5, 2**64 - 1):
        low = seed % 2**32
        assert torch.equal(
            torch.randn(8, generator=torch.Generator().manual_seed(seed)),
            torch.randn(8, generator=torch.Generator().manual_seed(low)),
        )
        assert _from_some_seed(_mt_words(torch.Generator().manual_seed(seed)))
    a = seeded_generator(7, warn=False)
    b = seeded_generator(7 + 2**32, warn=False)
    assert a.initial_seed() != b.initial_seed()
    assert torch.equal(torch.rand(8, generator=a), torch.rand(8, generator=b))


def test_fresh_state_is_the_bytes_of_os_urandom(monkeypatch):
    """The 624 state words are os.urandom's bytes verbatim (19,937 bits of entropy), the
    first draw twists them, and no cached normal sample is left."""
    served: list[bytes] = []
    source = np.random.default_rng(0)

    def urandom(k: int) -> bytes:
        served.append(source.bytes(k))
        return served[-1]

    monkeypatch.setattr(randomness.os, "urandom", urandom)
    gen = fresh_generator()
    assert sum(len(b) for b in served) >= 4 * MT_WORDS + 8  # at least 19,968 bits read
    words = np.frombuffer(next(b for b in served if len(b) == 4 * MT_WORDS), dtype="<u4")
    assert np.array_equal(_mt_words(gen), words.astype(np.uint64))
    raw = gen.get_state().numpy().tobytes()
    assert struct.unpack_from("<iiQ", raw, 8) == (1, 1, 0)  # left = 1, seeded, next = 0
    assert struct.unpack_from("<i", raw, 5040) == (0,) and raw[5052] == 0  # no cached normal


def test_fresh_generators_with_the_same_seed_field_draw_different_noise(monkeypatch):
    """Two fresh generators whose seeds agree in all 64 bits (the value ``initial_seed()``
    reports) still draw different noise: the seed field carries none of the entropy."""
    monkeypatch.setattr(randomness, "entropy_seed", lambda: 0x0123456789ABCDEF)
    a, b = fresh_generator(), fresh_generator()
    assert a.initial_seed() == b.initial_seed() == 0x0123456789ABCDEF
    assert not torch.equal(torch.randn(16, generator=a), torch.randn(16, generator=b))


def test_no_manual_seed_reproduces_a_fresh_generator():
    """No seed reaches the state of a fresh generator (a seed's state is fixed by its low
    32 bits); in particular its own ``initial_seed()`` and that seed's low 32 bits give
    other noise. False-failure probability about 2^-19900 per generator."""
    for _ in range(8):
        gen = fresh_generator()
        assert not _from_some_seed(_mt_words(gen))
        seed = gen.initial_seed()
        replay = [torch.Generator().manual_seed(s) for s in (seed, seed % 2**32)]
        drawn = torch.rand(64, generator=gen, dtype=torch.float64)
        for other in replay:
            assert not torch.equal(torch.rand(64, generator=other, dtype=torch.float64), drawn)


def test_fresh_state_words_look_uniform():
    """64 fresh states: their 64 x 19,968 bits are balanced (6 standard deviations: false
    failure below 1e-8) and no two states share a word position's value more often than
    chance allows (expected about 3e-4 coincidences in all)."""
    words = np.stack([_mt_words(fresh_generator()) for _ in range(64)]).astype(np.uint32)
    ones = int(np.unpackbits(words.view(np.uint8)).sum())
    bits = words.size * 32
    assert abs(ones - bits / 2) < 6 * math.sqrt(bits / 4)
    same = sum(int((words[i] == words[j]).sum()) for i in range(64) for j in range(i))
    assert same <= 8  # Poisson(2016 * 624 / 2^32 ~ 3e-4): false failure far below 1e-20


def test_set_state_round_trip_and_cached_normals_cleared():
    """The layout the module writes is the one torch reads: a generator given another's
    state draws the same numbers; two generators seeded alike and then filled from
    os.urandom draw different ones; a cached normal sample does not survive."""
    a = fresh_generator()
    b = torch.Generator()
    b.set_state(a.get_state())
    assert torch.equal(
        torch.rand(1000, generator=a, dtype=torch.float64), torch.rand(1000, generator=b, dtype=torch.float64)
    )
    c, d = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    torch.randn(1, dtype=torch.float64, generator=c)  # caches a second normal sample
    assert struct.unpack_from("<i", c.get_state().numpy().tobytes(), 5040) == (1,)
    randomness._randomize_cpu(c)
    randomness._randomize_cpu(d)
    assert struct.unpack_from("<i", c.get_state().numpy().tobytes(), 5040) == (0,)
    assert not torch.equal(
        torch.randn(4, dtype=torch.float64, generator=c), torch.randn(4, dtype=torch.float64, generator=d)
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fresh_cuda_generator_has_random_key_and_offset():
    a, b = fresh_generator("cuda"), fresh_generator("cuda")
    assert a.device.type == "cuda" and a.get_offset() % 4 == 0
    assert (a.initial_seed(), a.get_offset()) != (b.initial_seed(), b.get_offset())
    replay = torch.Generator(device="cuda").manual_seed(a.initial_seed())  # offset 0, not a's
    drawn = torch.rand(64, generator=a, device="cuda", dtype=torch.float64)
    assert not torch.equal(torch.rand(64, generator=replay, device="cuda", dtype=torch.float64), drawn)
    assert geometric_noise(100, 3.0, device="cuda").device.type == "cuda"
    assert discrete_laplace_noise(100, 3.0, generator=a).device.type == "cuda"
    assert discrete_gaussian_noise(100, 3.0, generator=b).dtype == torch.int64


# -- B: unbounded tails, forced uniforms -------------------------------------------------------------
def _pin_smallest(monkeypatch, calls: int) -> None:
    """``uniform_open`` returns its smallest value, 2^-54, everywhere for the first
    ``calls`` calls, then real uniforms (so a sampler's loops still end)."""
    real = noise_module.uniform_open
    left = [calls]

    def pinned(shape, **kwargs):
        u = real(shape, **kwargs)
        if left[0] > 0:
            left[0] -= 1
            u.fill_(SMALLEST)
        return u

    monkeypatch.setattr(noise_module, "uniform_open", pinned)


@pytest.mark.parametrize("scale", [0.001, 0.01, 0.3, 1.0, 7.5, 1025.0, 1e6])
def test_geometric_goes_past_37_scales_when_the_uniforms_say_so(monkeypatch, scale):
    """Forced to its smallest uniforms, a ``floor(log u / log p)`` sampler returns
    ``floor(37.4 scale)`` at most (0 below scale 0.027); this one keeps counting."""
    _pin_smallest(monkeypatch, calls=400)  # 126 calls per whole step at scale 0.001
    g = geometric_noise(4, scale, generator=torch.Generator().manual_seed(0))
    assert g.dtype == torch.int64
    assert int(g.min()) > 37.5 * scale and int(g.min()) >= 1


def test_discrete_laplace_far_tail_is_reachable(monkeypatch):
    """The first value's first geometric pinned at the smallest uniforms (40 calls), all
    else drawn: the difference goes beyond 37 scales (a ``floor(log u / log p)``
    sampler stops at 18 at scale 0.5)."""
    real = noise_module.uniform_open
    left = [40]

    def first_pinned(shape, **kwargs):
        u = real(shape, **kwargs)
        if left[0] > 0:
            left[0] -= 1
            u.view(-1)[0] = SMALLEST  # slot 0 of the first geometric, while it counts
        return u

    monkeypatch.setattr(noise_module, "uniform_open", first_pinned)
    k = discrete_laplace_noise(3, 0.5, generator=torch.Generator().manual_seed(1))
    assert int(k[0]) > 37.5 * 0.5


def test_discrete_gaussian_accepts_a_candidate_40_sigma_out(monkeypatch):
    """A candidate at 40 sigma is kept with probability exp(-about 780): a float64
    ``u < exp(-g)`` test never keeps it (exp underflows, u >= 2^-54); the exact-tailed
    coin keeps it when every uniform is at its smallest."""
    real_laplace = noise_module.discrete_laplace_noise
    first = [True]

    def far_candidates(shape, scale, **kwargs):
        if first[0]:
            first[0] = False
            return torch.full(noise_module._shape(shape), 40, dtype=torch.int64)
        return real_laplace(shape, scale, **kwargs)

    monkeypatch.setattr(noise_module, "discrete_laplace_noise", far_candidates)
    _pin_smallest(monkeypatch, calls=200)
    out = discrete_gaussian_noise(4, 1.0, generator=torch.Generator().manual_seed(2))
    assert torch.equal(out, torch.full((4,), 40, dtype=torch.int64))


def test_bernoulli_exp_handles_any_gamma():
    draw = noise_module._uniform_source(torch.Generator().manual_seed(3), False, None)
    assert not noise_module._bernoulli_exp(math.inf, 1000, draw).any()
    assert not noise_module._bernoulli_exp(1e300, 1000, draw).any()
    assert noise_module._bernoulli_exp(0.0, 1000, draw).all()
    gamma = torch.tensor([0.0, 0.5, 3.0, 9.0, 17.0, 1e300, math.inf], dtype=torch.float64).repeat(20_000)
    hits = noise_module._bernoulli_exp(gamma, gamma.numel(), draw).reshape(20_000, 7).double().mean(0)
    expected = torch.exp(-gamma[:7])
    assert torch.all((hits - expected).abs() <= 6 * torch.sqrt(expected * (1 - expected) / 20_000) + 1e-12)


# -- B: exact probabilities of every decision on the 53-bit lattice -----------------------------------------
def _lattice(k: torch.Tensor) -> torch.Tensor:
    """The uniform of index ``k`` on a generator's 53-bit lattice (each has probability 2^-53)."""
    return torch.where(k == 0, SMALLEST, k.to(torch.float64) / 2.0**53)


def _first_index(holds, count: int) -> torch.Tensor:
    """Per threshold ``t < count``: the smallest lattice index ``k`` with ``holds(u)[t]``
    true at ``u[t] = u_k`` (2^53 if none); ``holds`` maps ``count`` uniforms to ``count``
    booleans, each monotone in its uniform (False, ..., False, True, ...)."""
    lo = torch.zeros(count, dtype=torch.int64)
    hi = torch.full((count,), 2**53, dtype=torch.int64)
    while bool((lo < hi).any()):
        mid = (lo + hi) // 2
        ok = holds(_lattice(mid))
        lo, hi = torch.where(ok, lo, mid + 1).minimum(hi), torch.where(ok, mid, hi)
    return lo


def _max_relative_error(counts: torch.Tensor, exact: list[Decimal]) -> Decimal:
    return max(abs(Decimal(int(c)) / Decimal(2**53) / e - 1) for c, e in zip(counts.tolist(), exact, strict=True))


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5, 100.0, 900.0, 1025.0, 3000.0, 1e6, 2.0**50])
def test_every_outcome_of_every_uniform_has_its_exact_probability(scale):
    """For each uniform ``geometric_noise`` draws, the probability of each outcome, counted
    exactly on the 53-bit lattice, is within 1e-12 (relative) of the exact value: the
    count of whole steps ``H`` with its fresh start, and every group of low digits."""
    getcontext().prec = 40
    low, depth = noise_module._plan(scale)
    exact_scale = Decimal(scale)
    if depth:  # H: outcomes 0..depth-1 and "depth" (the fresh start), non-increasing in u
        gamma = float(2**low) / scale
        step = Decimal(2**low) / exact_scale
        at_least = _first_index(
            lambda u: noise_module._truncated_count(u, gamma, depth) < torch.arange(1, depth + 1), depth
        )  # at_least[j - 1] = #{k : H-step of u_k >= j}
        ge = torch.cat([torch.tensor([2**53]), at_least, torch.tensor([0])])
        counts = ge[:-1] - ge[1:]
        exact = [(-step * j).exp() * (1 - (-step).exp()) for j in range(depth)] + [(-step * depth).exp()]
        assert _max_relative_error(counts, exact) < 1e-12
    at = 0
    for width in noise_module._groups(low):
        size = 2**width
        ratio = (-Decimal(2**at) / exact_scale).exp()
        from_ = _first_index(
            lambda u, at=at, width=width, size=size: noise_module._digits(u, at, width, scale) >= torch.arange(1, size),
            size - 1,
        )
        edges = torch.cat([torch.tensor([0]), from_, torch.tensor([2**53])])
        exact = [ratio**d * (1 - ratio) / (1 - ratio**size) for d in range(size)]
        assert _max_relative_error(edges[1:] - edges[:-1], exact) < 1e-12
        at += width


@pytest.mark.parametrize("scale", [0.001, 0.01, 0.05])
def test_small_scales_have_the_exact_nonzero_rate(scale):
    """At scale 0.01, ``P(G >= 1) = exp(-100)``: realised (counted on the lattice) within
    1e-11 relative, where a ``floor(log u / log p)`` sampler has 0."""
    getcontext().prec = 40
    low, depth = noise_module._plan(scale)
    assert (low, depth) == (0, 0)  # a coin Bernoulli(exp(-1/scale)) per whole step
    gamma = 1.0 / scale
    whole = math.floor(gamma / noise_module._CHUNK)
    first = math.exp(whole * noise_module._CHUNK - gamma)

    def below(pr: float) -> int:
        return int(_first_index(lambda u: u >= pr, 1)[0])  # #{k : u_k < pr}

    realised = Decimal(below(first)) / 2**53 * (Decimal(below(noise_module._EXP_MINUS_CHUNK)) / 2**53) ** whole
    assert abs(realised / (-Decimal(1) / Decimal(scale)).exp() - 1) < 1e-11


# -- B: goodness of fit ----------------------------------------------------------------------------------
def _geometric_cells(scale: float, n: int, edges: np.ndarray) -> np.ndarray:
    p = math.exp(-1.0 / scale)
    tail = p ** edges.astype(np.float64)  # P(G >= edge)
    return n * np.append(tail[:-1] - tail[1:], tail[-1])


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5])
def test_geometric_and_discrete_laplace_fit_the_pmf_at_a_million_draws(scale):
    gen = torch.Generator().manual_seed(int(100 * scale))
    n = 1_000_000
    g = geometric_noise(n, scale, generator=gen).numpy()
    kmax = max(3, int(12 * scale))
    edges = np.arange(0, kmax + 1)
    observed = np.append(np.bincount(np.minimum(g, kmax), minlength=kmax + 1)[:kmax], np.sum(g >= kmax))
    assert stats.chisquare(observed, _geometric_cells(scale, n, edges)).pvalue > 1e-3

    k = discrete_laplace_noise(n, scale, generator=gen).numpy()
    p = math.exp(-1.0 / scale)
    values = np.arange(-kmax + 1, kmax)
    pmf = (1 - p) / (1 + p) * p ** np.abs(values)
    tail = p**kmax / (1 + p)  # P(K >= kmax) = P(K <= -kmax)
    observed = np.concatenate([[np.sum(k <= -kmax)], [np.sum(k == v) for v in values], [np.sum(k >= kmax)]])
    assert stats.chisquare(observed, n * np.concatenate([[tail], pmf, [tail]])).pvalue > 1e-3


def test_geometric_tail_rates_at_scale_one():
    """``P(G >= k) = exp(-k)`` for every ``k`` up to 12 (4 million draws; 6 standard
    deviations each, false failure below 1e-7 in all)."""
    g = geometric_noise(4_000_000, 1.0, generator=torch.Generator().manual_seed(11)).numpy()
    for k in range(1, 13):
        expected = 4_000_000 * math.exp(-k)
        assert abs(int(np.sum(g >= k)) - expected) < 6 * math.sqrt(expected) + 1


@pytest.mark.parametrize("scale", [1025.0, 3000.0, 1e6])
def test_large_scales_fit_in_quantile_cells(scale):
    """Cells between integer edges at the exact distribution's quantiles (probabilities
    exact), plus the parity of the values (the lowest digit group)."""
    n = 1_000_000
    g = geometric_noise(n, scale, generator=torch.Generator().manual_seed(5)).numpy()
    edges = np.unique(np.ceil(-scale * np.log1p(-np.linspace(0, 0.9999, 60))).astype(np.int64))
    observed = np.append(np.diff(np.searchsorted(np.sort(g), edges)), np.sum(g >= edges[-1]))
    assert stats.chisquare(observed, _geometric_cells(scale, n, edges)).pvalue > 1e-3
    p = math.exp(-1.0 / scale)
    odd = p / (1 + p)
    assert abs(np.mean(g % 2) - odd) < 5 * math.sqrt(odd * (1 - odd) / n)


# -- B: the rest of the contract ---------------------------------------------------------------------------
def test_secure_mode_fresh_entropy_and_reproducibility():
    secure = discrete_laplace_noise(200_000, 2.0, secure_mode=True).numpy()
    p = math.exp(-0.5)
    values = np.arange(-15, 16)
    pmf = (1 - p) / (1 + p) * p ** np.abs(values)
    observed = np.append([np.sum(secure == v) for v in values], np.sum(np.abs(secure) > 15))
    assert stats.chisquare(observed, 200_000 * np.append(pmf, 1 - pmf.sum())).pvalue > 1e-4
    with pytest.raises(ValueError, match="os.urandom"):
        geometric_noise(3, 1.0, secure_mode=True, generator=torch.Generator())
    assert not torch.equal(discrete_laplace_noise(64, 10.0), discrete_laplace_noise(64, 10.0))
    for sampler in (geometric_noise, discrete_laplace_noise, discrete_gaussian_noise):
        a = sampler((3, 5), 4.0, generator=torch.Generator().manual_seed(9))
        b = sampler((3, 5), 4.0, generator=torch.Generator().manual_seed(9))
        assert torch.equal(a, b) and a.dtype == torch.int64 and a.shape == (3, 5) and a.device.type == "cpu"
        assert sampler(0, 4.0).shape == (0,)


def test_scale_limits():
    assert geometric_noise(1000, 2.0**50, generator=torch.Generator().manual_seed(0)).min() >= 0
    for bad in (0.0, -1.0, math.nan, math.inf, 2.0**51):
        with pytest.raises(ValueError, match="scale"):
            geometric_noise(3, bad)
        with pytest.raises(ValueError, match="scale"):
            discrete_laplace_noise(3, bad)
    with pytest.raises(ValueError, match="sigma"):
        discrete_gaussian_noise(3, 2.0**50)
