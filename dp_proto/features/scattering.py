"""A 2-D wavelet scattering transform (Mallat 2012; Bruna & Mallat 2013) in pure torch.

The filter bank and the order of operations follow kymatio's ``Scattering2D`` (Andreux
et al. 2020), the implementation behind the ScatterNet features of Tramèr & Boneh (2021,
"Differentially Private Learning Needs Better Features"; J = 2, L = 8 on 28 x 28 MNIST,
81 channels of 7 x 7), and match its coefficients to float rounding. The difference is
the batching: one FFT of the input, and at each order one product of the spectra with
the L wavelets of a scale for all images and angles at once (a loop over the J scales
only), where kymatio loops over the paths one at a time; the low-pass, a separable
Gaussian, is two small matrix products instead of an FFT round trip.
"""

from __future__ import annotations

import math
from numbers import Integral

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dp_proto._validation import check_int
from dp_proto.exceptions import DataValidationError

__all__ = ["Scattering2D"]

#: kymatio's gabor_2d divides by 2 * 3.1415 * sigma**2 / slant; we keep its constant (not
#: math.pi, 3e-5 relative apart) so that our coefficients match kymatio's to float precision
_KYMATIO_PI = 3.1415

#: images (n * C) transformed at once when chunk_size is None: on CPU, a chunk that stays in
#: cache (timings: docs/privacy-core.md); elsewhere, a bound on memory (~0.6 MB each)
_CPU_CHUNK = 64
_DEVICE_CHUNK = 4096

#: the periodisation of gabor_2d: the Gaussian is summed over 5 x 5 copies of the grid
_PERIODS = torch.arange(-2, 3, dtype=torch.float64)


def _gabor(m: int, n: int, sigma: float, theta: float, xi: float, slant: float = 1.0) -> Tensor:
    """Periodised Gabor filter in space, ``(m, n)`` complex128 (kymatio's ``gabor_2d``).

    ``g(u) = exp(-u^T A u + i xi (cos theta, sin theta) . u) / (2 pi sigma^2 / slant)`` with
    ``A = R diag(1, slant^2) R^T / (2 sigma^2)``, R the rotation by theta; u runs over the
    grid and its 24 nearest periodic copies.
    """
    c, s = math.cos(theta), math.sin(theta)
    rot = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    curv = rot @ torch.diag(torch.tensor([1.0, slant * slant], dtype=torch.float64)) @ rot.T / (2 * sigma * sigma)
    xx = (torch.arange(m, dtype=torch.float64) + m * _PERIODS[:, None])[:, None, :, None]  # (5, 1, m, 1)
    yy = (torch.arange(n, dtype=torch.float64) + n * _PERIODS[:, None])[None, :, None, :]  # (1, 5, 1, n)
    quad = curv[0, 0] * xx * xx + (curv[0, 1] + curv[1, 0]) * xx * yy + curv[1, 1] * yy * yy
    phase = xi * (c * xx + s * yy)
    gab = torch.exp(torch.complex(-quad, phase)).sum(dim=(0, 1))
    return gab / (2 * _KYMATIO_PI * sigma * sigma / slant)


def _morlet(m: int, n: int, sigma: float, theta: float, xi: float, slant: float) -> Tensor:
    """Morlet wavelet in space, ``(m, n)`` complex128: the Gabor minus its envelope times
    the constant that makes the sum exactly zero (the zero-mean correction)."""
    wave = _gabor(m, n, sigma, theta, xi, slant)
    envelope = _gabor(m, n, sigma, theta, 0.0, slant)
    return wave - (wave.sum() / envelope.sum()) * envelope


def _crop(f_hat: Tensor, res: int, dim: int) -> Tensor:
    """Spectra along ``dim`` (size M) at resolution ``res``: size ``M / 2**res``.

    Keeps the frequencies below ``M / 2**(res + 1)`` in absolute value, as kymatio's
    ``periodize_filter_fft`` does (its mask zeroes the rest, so its fold aliases nothing).
    """
    h = f_hat.shape[dim] >> (res + 1)
    return torch.cat([f_hat.narrow(dim, 0, h), f_hat.narrow(dim, f_hat.shape[dim] - h, h)], dim=dim)


def _filter_subsample(u_hat: Tensor, psi: Tensor, k: int) -> Tensor:
    """Spectra ``(B, T, M, N)`` times filters ``(S, M, N)``, subsampled by k in space:
    ``(B, T, S, M / k, N / k)``, the spectra of ``(u_t * psi_s)[::k, ::k]``.

    Subsampling in space is periodisation in frequency (the mean of the k x k aliases),
    so for k > 1 the product and the periodisation are one contraction over the aliases,
    a batched matrix product per frequency instead of a product, then a mean. The
    mean's 1 / k**2 is left out: the filters carry the inverse FFT's normalisation.
    """
    if k == 1:
        return u_hat[:, :, None] * psi
    (b, t, m, n), s = u_hat.shape, psi.shape[0]
    u = u_hat.reshape(b, t, k, m // k, k, n // k)
    f = psi.to(u_hat.dtype).reshape(s, k, m // k, k, n // k)
    return torch.einsum("btapcq,sapcq->btspq", u, f)


def _ifft_modulus(z_hat: Tensor) -> Tensor:
    """``|ifft2(z_hat)|`` without the ``1 / (M N)`` (the filters carry it).

    Without gradients the modulus is ``hypot`` of the real and imaginary parts; with them,
    complex ``abs``, whose gradient at 0 is 0 where hypot's is NaN (a constant image has
    ``x * psi = 0``).
    """
    z = torch.fft.ifft2(z_hat, norm="forward")
    return z.abs() if z.requires_grad else torch.hypot(z.real, z.imag)


def wavelet_bank(m: int, n: int, J: int, L: int) -> list[Tensor]:
    """Fourier-domain Morlet wavelets on the padded grid ``(m, n)``, float64 (kymatio's ``filter_bank``).

    ``psi[r]`` holds the wavelets of scale j >= r at resolution r,
    ``((J - r) * L, m / 2**r, n / 2**r)``, ordered by (j, theta), for r < max(J - 1, 1).
    Wavelet (j, theta): sigma = 0.8 * 2**j, xi = 3 pi / 4 / 2**j, slant = 4 / L, angle
    ``(int(L / 2 - 1) - theta) * pi / L``. Spectra are real: the imaginary part of the
    DFT is dropped (it is zero to rounding).
    """
    psi_space = [
        _morlet(m, n, 0.8 * 2**j, (int(L - L / 2 - 1) - theta) * math.pi / L, 0.75 * math.pi / 2**j, 4.0 / L)
        for j in range(J)
        for theta in range(L)
    ]
    psi_hat = torch.fft.fft2(torch.stack(psi_space)).real  # (J * L, m, n)
    return [_crop(_crop(psi_hat[r * L :], r, -2), r, -1) for r in range(max(J - 1, 1))]


def lowpass_matrix(size: int, sigma: float, res: int, stride: int) -> Tensor:
    """One axis of the low-pass at resolution ``res``: ``(size_r / stride - 2, size_r)``, float64.

    kymatio's phi, ``gabor_2d(m, n, sigma, 0, 0)`` (a periodised Gaussian, cropped in
    frequency to ``size_r = size / 2**res``), is separable: ``phi(u, v) = g(u) g(v)``.
    So ``u * phi``, subsampled by ``stride`` and cropped by one sample a side, is
    ``R u C^T`` with R, C these matrices; the 2-D normalisation is left to the caller.
    Row i is the circular kernel centred on sample ``(i + 1) * stride``.
    """
    grid = torch.arange(size, dtype=torch.float64) + size * _PERIODS[:, None]
    gauss = torch.exp(-(grid**2) / (2 * sigma * sigma)).sum(dim=0)  # (size,)
    kernel = torch.fft.ifft(_crop(torch.fft.fft(gauss).real, res, -1)).real  # (size_r,)
    size_r = kernel.shape[0]
    centres = torch.arange(stride, size_r - stride, stride)
    return kernel[(centres[:, None] - torch.arange(size_r)) % size_r]


class Scattering2D(nn.Module):
    """2-D wavelet scattering transform of order 1 or 2 (Mallat 2012; Bruna & Mallat 2013).

    With a Gaussian low-pass ``phi`` (sigma ``0.8 * 2**(J-1)``, kymatio's; about ``2**J``
    wide) and Morlet wavelets ``psi_{j, t}`` (sigma ``0.8 * 2**j``, central frequency
    ``3 pi / 4 / 2**j``, slant ``4 / L``, zero mean) at scales ``j < J`` and ``L`` angles
    ``t``, all built in the Fourier domain on the padded grid (periodised), the channels
    are (in this order)

    - order 0: ``x * phi``                                   (1 channel)
    - order 1: ``|x * psi_{j1,t1}| * phi``                   (J * L channels, by (j1, t1))
    - order 2: ``||x * psi_{j1,t1}| * psi_{j2,t2}| * phi``, j2 > j1
      (L**2 * J * (J - 1) / 2 channels, by (j1, t1, j2, t2))

    each subsampled by ``2**J``. So ``K = 1 + J L + L**2 J (J - 1) / 2`` channels per input
    channel: 81 for J = 2, L = 8 (the ScatterNet of Tramèr & Boneh 2021 on MNIST), and
    ``1 + J L`` for ``max_order=1``. Filters and numerics follow kymatio (Andreux et al.
    2020) to float rounding, including its subsampling along the way: the signal after
    a wavelet of scale j is subsampled by ``2**j``, with the later filters cropped in
    frequency to match.

    Padding: each image is reflect-padded by ``2**J`` pixels on every side, to
    ``(H + 2**(J+1), W + 2**(J+1))`` (kymatio's padded size
    ``((H + 2**J) // 2**J + 1) * 2**J`` for H divisible by ``2**J``); the convolutions are
    circular on that grid and the outermost output pixel on each side (the padding) is
    cropped, so the output is ``(H / 2**J, W / 2**J)``.

    Privacy: the transform has no trainable parameters and its filters are fixed
    functions of ``(shape, J, L)``; it reads no data, so using it as a backbone costs no
    privacy budget (Tramèr & Boneh 2021). Gradients flow through it to the input, so it
    can sit under a trainable head (in front of a DP-SGD-trained prototype layer).

    Args:
        shape: ``(H, W)`` of the inputs; both divisible by ``2**J`` and at least ``2**(J+1)``.
        J: number of scales (>= 1); the output is subsampled by ``2**J``.
        L: number of angles (>= 1); kymatio's filters are tuned for L = 8.
        max_order: 1 or 2.
        chunk_size: at most this many images (``n * C``) are transformed at once, which
            bounds the memory (about 0.6 MB an MNIST image for J = 2, without autograd);
            None: 64 on CPU (where larger chunks fall out of cache), 4096 elsewhere.

    Shapes:
        input ``(n, H, W)`` or ``(n, C, H, W)``, floating point (float16/bfloat16 are
        computed in float32 and cast back); output ``(n, C * K, H / 2**J, W / 2**J)``
        (``C = 1`` for 3-d input), channel ``c * K + k`` being path k of input channel c,
        which is kymatio's ``(n, C, K, ...)`` output flattened.

    Example::

        scatter = Scattering2D((28, 28), J=2)           # 81 channels of 7 x 7
        features = scatter(images)                      # (n, 1, 28, 28) -> (n, 81, 7, 7)
        head = nn.Sequential(scatter, nn.Flatten(), prototype_layer)
    """

    def __init__(
        self,
        shape: tuple[int, int] = (28, 28),
        J: int = 2,
        L: int = 8,
        max_order: int = 2,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        self.chunk_size = None if chunk_size is None else check_int("chunk_size", chunk_size, 1)
        self.J = check_int("J", J, 1)
        self.L = check_int("L", L, 1)
        if isinstance(max_order, bool) or max_order not in (1, 2):
            raise ValueError(f"max_order must be 1 or 2, got {max_order!r}")
        self.max_order = int(max_order)
        self.shape = _check_shape(shape, self.J)
        self.pad = 2**self.J
        m, n = (size + 2 * self.pad for size in self.shape)
        # float64 and not in state_dict (they are functions of the arguments); cast per call
        for r, psi in enumerate(wavelet_bank(m, n, self.J, self.L)):
            # with the inverse FFT's 1 / (M_r N_r), which with the 1 / k**2 of a subsampling
            # by k is that of an unnormalised inverse FFT on the grid of resolution r
            self.register_buffer(f"psi_{r}", psi / psi[0].numel(), persistent=False)
        sigma = 0.8 * 2 ** (self.J - 1)  # kymatio's phi (not 0.8 * 2**J)
        for r in range(self.J):
            rows = lowpass_matrix(m, sigma, r, 2 ** (self.J - r)) / (2 * _KYMATIO_PI * sigma * sigma)
            self.register_buffer(f"phi_rows_{r}", rows, persistent=False)
            self.register_buffer(f"phi_cols_{r}", lowpass_matrix(n, sigma, r, 2 ** (self.J - r)), persistent=False)

    @property
    def n_paths(self) -> int:
        """K, the number of output channels per input channel."""
        J, L = self.J, self.L
        return 1 + J * L + (L * L * J * (J - 1) // 2 if self.max_order == 2 else 0)

    @property
    def output_shape(self) -> tuple[int, int]:
        """``(H / 2**J, W / 2**J)``, the spatial size of the output."""
        return self.shape[0] >> self.J, self.shape[1] >> self.J

    def extra_repr(self) -> str:
        return f"shape={self.shape}, J={self.J}, L={self.L}, max_order={self.max_order}, K={self.n_paths}"

    def forward(self, x: Tensor) -> Tensor:
        """``(n, H, W)`` or ``(n, C, H, W)`` -> ``(n, C * K, H / 2**J, W / 2**J)``."""
        self._check_input(x)
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        u = x.to(dtype).reshape(-1, 1, *self.shape)  # (B, 1, H, W), B = n * C
        chunk = self.chunk_size or (_CPU_CHUNK if u.device.type == "cpu" else _DEVICE_CHUNK)
        out = torch.cat([self._scatter(part) for part in u.split(chunk)])  # (B, K, h, w)
        return out.reshape(x.shape[0], -1, *out.shape[-2:]).to(x.dtype)

    def _scatter(self, u: Tensor) -> Tensor:
        """Images ``(B, 1, H, W)`` -> paths ``(B, K, h, w)``."""
        u = F.pad(u, (self.pad,) * 4, mode="reflect")  # (B, 1, M, N)
        paths = [self._lowpass(u, 0)]  # order 0: (B, 1, h, w)
        x_hat = torch.fft.fft2(u)  # (B, 1, M, N)
        psi = self._buffer("psi_0", u.dtype)  # (J * L, M, N)
        second: list[Tensor] = []
        for j1 in range(self.J):
            # order 1, by scale: |x * psi_{j1, t1}| at resolution j1, (B, L, M / 2**j1, N / 2**j1)
            u1_hat = _filter_subsample(x_hat, psi[j1 * self.L : (j1 + 1) * self.L], 2**j1)
            u1 = _ifft_modulus(u1_hat[:, 0])
            paths.append(self._lowpass(u1, j1))
            if self.max_order == 2 and j1 < self.J - 1:
                second.append(self._second_order(u1, j1))
        return torch.cat(paths + second, dim=1)

    def _second_order(self, u1: Tensor, j1: int) -> Tensor:
        """``(B, L, M_j1, N_j1)`` maps ``|x * psi_{j1, t1}|`` -> ``(B, L * L * (J-1-j1), h, w)``.

        One FFT, then one product per scale j2 > j1 with its L wavelets (at resolution
        j1); channels ordered by (t1, j2, t2), as kymatio's paths.
        """
        u1_hat = torch.fft.fft2(u1)  # (B, L, M_j1, N_j1)
        psi = self._buffer(f"psi_{j1}", u1.dtype)  # (L * (J - j1), M_j1, N_j1), scales j1 .. J-1
        out = []
        for j2 in range(j1 + 1, self.J):
            u2_hat = _filter_subsample(u1_hat, psi[(j2 - j1) * self.L : (j2 - j1 + 1) * self.L], 2 ** (j2 - j1))
            out.append(self._lowpass(_ifft_modulus(u2_hat), j2))  # (B, L, L, h, w)
        return torch.cat(out, dim=2).flatten(1, 2)

    def _lowpass(self, u: Tensor, res: int) -> Tensor:
        """Real maps ``(..., M / 2**res, N / 2**res)`` -> ``u * phi`` at the output grid, ``(..., h, w)``.

        Two small matrix products (phi is separable), the same numbers as kymatio's
        FFT, multiply, periodise, inverse FFT and crop.
        """
        rows = self._buffer(f"phi_rows_{res}", u.dtype)  # (h, M_res)
        cols = self._buffer(f"phi_cols_{res}", u.dtype)  # (w, N_res)
        return rows @ (u @ cols.T)

    def _buffer(self, name: str, dtype: torch.dtype) -> Tensor:
        return getattr(self, name).to(dtype)

    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"Scattering2D expects a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"Scattering2D expects a real floating-point tensor, got dtype {x.dtype}")
        if x.ndim not in (3, 4) or tuple(x.shape[-2:]) != self.shape:
            raise DataValidationError(
                f"Scattering2D{self.shape} expects input (n, {self.shape[0]}, {self.shape[1]}) or "
                f"(n, C, {self.shape[0]}, {self.shape[1]}), got {tuple(x.shape)}"
            )


def _check_shape(shape: tuple[int, int], J: int) -> tuple[int, int]:
    """``shape`` as two ints divisible by ``2**J`` and at least ``2**(J+1)``.

    The lower bound keeps the reflect padding (``2**J`` a side) inside the image and
    leaves an output of at least 2 x 2; below it the coarsest filters' support
    (about ``2**J``) does not fit in the image.
    """
    try:
        pair = tuple(shape)
    except TypeError:
        pair = ()
    if len(pair) != 2 or any(isinstance(s, bool) or not isinstance(s, Integral) for s in pair):
        raise ValueError(f"shape must be two ints (H, W), got {shape!r}")
    shape = (int(pair[0]), int(pair[1]))
    step = 2**J
    if any(s % step for s in shape):
        raise ValueError(f"shape {shape} must be divisible by 2**J = {step}")
    if min(shape) < 2 * step:
        raise ValueError(f"shape {shape} is smaller than the filters' support: need H, W >= 2**(J+1) = {2 * step}")
    return shape
