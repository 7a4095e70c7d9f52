"""UCI HAPT windows (dp_proto.data.loaders.motion): windowing, features, raw signals, identity
splits and sequence orders on tiny synthetic files with the keys and dtypes of
``motion/hapt_raw_50hz.npz``; two tests on the real file (skipped when absent)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dp_proto.data as data_pkg
from dp_proto.data import (
    HAPT_ACTIVITIES,
    HAPTWindows,
    hapt_identity_splits,
    hapt_window_features,
    load_hapt_windows,
    sequence_order,
)
from dp_proto.data.loaders.common import DATA_DIR_ENV_VAR
from dp_proto.data.loaders.motion import HAPT_FILE, HAPT_N_FEATURES, HAPT_WINDOW_SAMPLES, HAPT_WINDOW_STEP
from dp_proto.exceptions import DataValidationError

# (experiment, user, [(file label, samples), ...]) in time order
RECORDINGS = [
    # unlabelled; walking (300: 3 windows); a transition (150: none); sitting (exactly 128: 1);
    # walking again (100: too short); laying (100: too short, continued by the next recording)
    (0, 1, [(-1, 20), (1, 300), (7, 150), (4, 128), (1, 100), (6, 100)]),
    # laying (100: too short on its own); upstairs (256: 3); unlabelled; downstairs (192: 2);
    # upstairs again (130: 1)
    (1, 2, [(6, 100), (2, 256), (-1, 50), (3, 192), (2, 130)]),
]

# (experiment, start, label 0..5) of every window, in file order
EXPECTED = [
    (0, 20, 0),
    (0, 84, 0),
    (0, 148, 0),
    (0, 470, 3),
    (1, 100, 1),
    (1, 164, 1),
    (1, 228, 1),
    (1, 406, 2),
    (1, 470, 2),
    (1, 598, 1),
]


# segment of every window of EXPECTED: one per activity segment that gives windows, in file order
EXPECTED_SEGMENT = [0, 0, 0, 1, 2, 2, 2, 3, 3, 4]


def _raw_arrays(recordings=RECORDINGS) -> dict[str, np.ndarray]:
    label, user, experiment, sequence = [], [], [], []
    for exp, usr, segments in recordings:
        lab = np.concatenate([np.full(n, lb) for lb, n in segments])
        label.append(lab)
        user.append(np.full(len(lab), usr))
        experiment.append(np.full(len(lab), exp))
        sequence.append(np.arange(len(lab)))
    n = sum(len(lab) for lab in label)
    rng = np.random.default_rng(0)
    return {
        "signals": rng.normal(0.0, 1.0, (n, 6)).astype(np.float32),
        "label": np.concatenate(label).astype(np.int8),
        "user": np.concatenate(user).astype(np.int8),
        "experiment": np.concatenate(experiment).astype(np.int16),
        "sequence": np.concatenate(sequence).astype(np.int32),
        "columns": np.array(["acc-x", "acc-y", "acc-z", "gyro-x", "gyro-y", "gyro-z"]),
    }


def _write(data_dir: Path, arrays: dict[str, np.ndarray]) -> Path:
    path = data_dir / HAPT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


@pytest.fixture
def fake_hapt(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    arrays = _raw_arrays()
    _write(tmp_path, arrays)
    return tmp_path, arrays


# --------------------------------------------------------------------------- windowing
def test_windows_lie_inside_activity_segments(fake_hapt):
    data_dir, raw = fake_hapt
    w = load_hapt_windows(data_dir)
    assert isinstance(w, HAPTWindows) and len(w) == len(EXPECTED)
    got = list(zip(w.experiment.tolist(), w.start.tolist(), w.labels.tolist(), strict=True))
    assert got == EXPECTED
    np.testing.assert_array_equal(w.subject, [1, 1, 1, 1, 2, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(w.segment, EXPECTED_SEGMENT)
    assert w.signals is None
    for field in ("labels", "subject", "experiment", "start", "segment"):
        assert getattr(w, field).dtype == np.int64
    assert set(w.labels.tolist()) <= set(range(len(HAPT_ACTIVITIES)))
    # every sample of a window is in the window's recording and carries its activity:
    # no window crosses a segment or a recording, none holds a transition or unlabelled sample
    offset = {exp: int(np.flatnonzero(raw["experiment"] == exp)[0]) for exp, _, _ in RECORDINGS}
    for exp, start, label in got:
        rows = offset[exp] + start + np.arange(HAPT_WINDOW_SAMPLES)
        assert np.all(raw["experiment"][rows] == exp)
        assert np.all(raw["label"][rows] == label + 1)
    # 50 % overlap: consecutive windows of one segment start half a window apart
    assert HAPT_WINDOW_STEP * 2 == HAPT_WINDOW_SAMPLES
    assert np.diff(w.start[:3]).tolist() == [HAPT_WINDOW_STEP] * 2
    assert np.diff(w.start[4:7]).tolist() == [HAPT_WINDOW_STEP] * 2


def test_features_are_those_of_the_windows(fake_hapt):
    data_dir, raw = fake_hapt
    w = load_hapt_windows(data_dir)
    assert w.features.shape == (len(EXPECTED), HAPT_N_FEATURES) == (10, 142)
    assert w.features.dtype == np.float64 and np.all(np.isfinite(w.features))
    offset = {exp: int(np.flatnonzero(raw["experiment"] == exp)[0]) for exp, _, _ in RECORDINGS}
    first = np.array([offset[exp] + start for exp, start, _ in EXPECTED])
    windows = raw["signals"].astype(np.float64)[first[:, None] + np.arange(HAPT_WINDOW_SAMPLES)]
    np.testing.assert_array_equal(w.features, hapt_window_features(windows))


def test_signals_are_the_samples_of_the_windows(fake_hapt):
    data_dir, raw = fake_hapt
    plain, w = load_hapt_windows(data_dir), load_hapt_windows(data_dir, signals=True)
    assert w.signals.shape == (len(EXPECTED), HAPT_WINDOW_SAMPLES, 6) and w.signals.dtype == np.float32
    offset = {exp: int(np.flatnonzero(raw["experiment"] == exp)[0]) for exp, _, _ in RECORDINGS}
    for i, (exp, start, _) in enumerate(EXPECTED):
        rows = offset[exp] + start + np.arange(HAPT_WINDOW_SAMPLES)
        np.testing.assert_array_equal(w.signals[i], raw["signals"][rows])
    # the same windows, features bit-identical with or without the signals
    for field in ("features", "labels", "subject", "experiment", "start", "segment"):
        np.testing.assert_array_equal(getattr(w, field), getattr(plain, field), strict=True)
    np.testing.assert_array_equal(w.features, hapt_window_features(w.signals))


def test_window_features_values_and_shapes():
    t = np.arange(HAPT_WINDOW_SAMPLES) / 50.0
    freq = 6 * 50.0 / HAPT_WINDOW_SAMPLES  # 2.34 Hz: 6 whole periods in the window, an FFT bin
    window = np.zeros((1, HAPT_WINDOW_SAMPLES, 6))
    window[0, :, 0] = np.sin(2 * np.pi * freq * t)  # acc-x
    window[0, :, 2] = 1.0  # gravity on acc-z
    f = hapt_window_features(window)[0]
    assert f.shape == (142,)
    np.testing.assert_allclose(f[:6], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0], atol=1e-12)  # means of the channels
    dominant = f[8 * 16 : 8 * 17]  # 8 x (4 moments, 5 quantiles, 2 jerk, 5 bands) before them
    assert dominant[0] == pytest.approx(freq)
    assert hapt_window_features(np.zeros((0, HAPT_WINDOW_SAMPLES, 6))).shape == (0, 142)
    assert hapt_window_features(window.astype(np.float32)).dtype == np.float64
    with pytest.raises(ValueError, match=r"\(m, n >= 2, 6\)"):
        hapt_window_features(np.zeros((2, HAPT_WINDOW_SAMPLES, 3)))
    with pytest.raises(ValueError, match=r"\(m, n >= 2, 6\)"):
        hapt_window_features(np.zeros((HAPT_WINDOW_SAMPLES, 6)))


# --------------------------------------------------------------------------- orders
def test_sequence_order_time_and_activity_blocks(fake_hapt):
    w = load_hapt_windows(fake_hapt[0])
    rows = np.arange(len(w))
    shuffled = np.random.default_rng(1).permutation(rows)
    # time: recording after recording, time order in each
    for given in (rows, shuffled):
        np.testing.assert_array_equal(sequence_order(w, given, "time"), rows)
    # activity blocks: recording 1's second upstairs window (start 598) joins its first block
    blocks = [0, 1, 2, 3, 4, 5, 6, 9, 7, 8]
    for given in (rows, shuffled):
        np.testing.assert_array_equal(sequence_order(w, given, "activity_blocks"), blocks)
    # one volunteer's rows
    second = np.flatnonzero(w.subject == 2)
    np.testing.assert_array_equal(sequence_order(w, second[::-1], "time"), second)
    labels = w.labels[sequence_order(w, second, "activity_blocks")]
    assert labels.tolist() == [1, 1, 1, 1, 2, 2]


def test_sequence_order_rejects_an_unknown_order(fake_hapt):
    w = load_hapt_windows(fake_hapt[0])
    with pytest.raises(ValueError, match="'time', 'activity_blocks'.*'blocks'"):
        sequence_order(w, np.arange(len(w)), "blocks")


# --------------------------------------------------------------------------- identity splits
def _many_segments() -> list[tuple[int, int, list[tuple[int, int]]]]:
    """3 volunteers x 2 recordings, each activity twice per recording (1 to 6 windows),
    separated by unlabelled gaps of 1 to 39 samples (two segments of one label stay two)."""
    rng = np.random.default_rng(3)
    recordings = []
    for exp in range(6):
        segments = [(-1, 30)]
        for label in rng.permutation(np.repeat(np.arange(1, 7), 2)).tolist():
            segments += [(label, int(rng.integers(128, 450))), (-1, int(rng.integers(1, 40)))]
        recordings.append((exp, exp // 2 + 1, segments))
    return recordings


@pytest.fixture
def split_windows(tmp_path) -> HAPTWindows:
    _write(tmp_path, _raw_arrays(_many_segments()))
    return load_hapt_windows(tmp_path)


def _check_split(w: HAPTWindows, train: np.ndarray, test: np.ndarray) -> None:
    assert train.dtype == test.dtype == np.int64
    np.testing.assert_array_equal(np.sort(np.r_[train, test]), np.arange(len(w)))
    assert not set(w.segment[train].tolist()) & set(w.segment[test].tolist())
    # no window of train shares a sample with one of test
    same_recording = w.experiment[train][:, None] == w.experiment[test][None, :]
    close = np.abs(w.start[train][:, None] - w.start[test][None, :]) < HAPT_WINDOW_SAMPLES
    assert not np.any(same_recording & close)
    volunteers = np.unique(w.subject).tolist()
    assert np.unique(w.subject[train]).tolist() == np.unique(w.subject[test]).tolist() == volunteers


def test_identity_splits_keep_segments_whole_and_volunteers_on_both_sides(split_windows):
    w = split_windows
    assert len(w) > 100 and np.unique(w.segment).size == 72  # 6 recordings x 12 segments
    splits = hapt_identity_splits(w, n_splits=4, test_fraction=0.3, random_state=0)
    assert len(splits) == 4
    for train, test in splits:
        _check_split(w, train, test)
        for v in (1, 2, 3):  # about 30 % of each volunteer's windows in test
            fraction = np.sum(w.subject[test] == v) / np.sum(w.subject == v)
            assert 0.2 < fraction < 0.4
    # a new test set per split, the same splits from the same seed
    assert len({tuple(test.tolist()) for _, test in splits}) == 4
    again = hapt_identity_splits(w, n_splits=4, test_fraction=0.3, random_state=0)
    for (train, test), (train2, test2) in zip(splits, again, strict=True):
        np.testing.assert_array_equal(train, train2)
        np.testing.assert_array_equal(test, test2)
    other = hapt_identity_splits(w, n_splits=1, test_fraction=0.3, random_state=1)[0][1]
    assert not np.array_equal(other, splits[0][1])


def test_identity_splits_extreme_fractions_keep_both_sides(split_windows, fake_hapt):
    for fraction in (0.01, 0.99):
        for train, test in hapt_identity_splits(split_windows, 3, fraction, random_state=2):
            _check_split(split_windows, train, test)
    # the tiny file: volunteer 1 has two segments, volunteer 2 three
    w = load_hapt_windows(fake_hapt[0])
    for train, test in hapt_identity_splits(w, 5, 0.5, random_state=np.random.default_rng(0)):
        _check_split(w, train, test)


def test_identity_splits_errors(fake_hapt):
    w = load_hapt_windows(fake_hapt[0])
    # volunteer 3 gets segment 1 of volunteer 1, who keeps only segment 0
    single = replace(w, subject=np.where(w.segment == 1, 3, w.subject))
    with pytest.raises(DataValidationError, match=r"volunteer\(s\) \[1, 3\] have a single segment"):
        hapt_identity_splits(single)
    for fraction in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\)"):
            hapt_identity_splits(w, test_fraction=fraction)
    with pytest.raises(ValueError, match="n_splits must be >= 1"):
        hapt_identity_splits(w, n_splits=0)
    with pytest.raises(TypeError, match="n_splits must be an int"):
        hapt_identity_splits(w, n_splits=2.0)


# --------------------------------------------------------------------------- data directory and errors
def test_data_dir_from_the_environment(fake_hapt, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(fake_hapt[0]))
    assert len(load_hapt_windows()) == len(EXPECTED)
    assert len(load_hapt_windows(str(fake_hapt[0]))) == len(EXPECTED)


def test_missing_file_and_missing_data_dir(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"(?s)motion/hapt_raw_50hz\.npz.*Reyes-Ortiz"):
        load_hapt_windows(tmp_path)
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)
    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV_VAR):
        load_hapt_windows()


def test_malformed_files(tmp_path):
    arrays = _raw_arrays()
    _write(tmp_path, {k: v for k, v in arrays.items() if k != "user"})
    with pytest.raises(DataValidationError, match="missing array.*'user'"):
        load_hapt_windows(tmp_path)
    _write(tmp_path, arrays | {"label": arrays["label"][:-1]})
    with pytest.raises(DataValidationError, match="wrong shape.*'label'"):
        load_hapt_windows(tmp_path)
    _write(tmp_path, arrays | {"signals": arrays["signals"][:, :3]})
    with pytest.raises(DataValidationError, match=r"'signals' must be of shape \(n, 6\)"):
        load_hapt_windows(tmp_path)
    gap = arrays["sequence"].copy()
    gap[500:798] += 10  # a jump inside recording 0
    _write(tmp_path, arrays | {"sequence": gap})
    with pytest.raises(DataValidationError, match="consecutive samples"):
        load_hapt_windows(tmp_path)
    _write(tmp_path, arrays | {"label": np.where(arrays["label"] > 0, 7, -1).astype(np.int8)})
    with pytest.raises(DataValidationError, match="no activity segment"):
        load_hapt_windows(tmp_path)


def test_exported_from_dp_proto_data():
    names = ("HAPT_ACTIVITIES", "HAPTWindows", "hapt_identity_splits", "hapt_window_features", "load_hapt_windows")
    for name in (*names, "sequence_order"):
        assert name in data_pkg.__all__ and hasattr(data_pkg, name)


# --------------------------------------------------------------------------- real data
@pytest.mark.data
def test_real_hapt_windows(real_data_dir):
    if not (real_data_dir / HAPT_FILE).is_file():
        pytest.skip(f"{HAPT_FILE} not in {real_data_dir}")
    w = load_hapt_windows(real_data_dir)
    assert len(w) == 10411 and w.features.shape == (10411, 142)
    assert np.unique(w.subject).tolist() == list(range(1, 31))
    assert np.unique(w.labels).tolist() == list(range(6))
    assert np.unique(w.experiment).size == 61
    assert np.all(np.isfinite(w.features))
    # windows come in file order: recording after recording, time order within one
    np.testing.assert_array_equal(sequence_order(w, np.arange(len(w)), "time"), np.arange(len(w)))


@pytest.mark.data
def test_real_hapt_signals_and_identity_splits(real_data_dir, capsys):
    if not (real_data_dir / HAPT_FILE).is_file():
        pytest.skip(f"{HAPT_FILE} not in {real_data_dir}")
    w = load_hapt_windows(real_data_dir, signals=True)
    assert len(w) == 10411 and w.signals.shape == (10411, 128, 6) and w.signals.dtype == np.float32
    assert np.unique(w.segment).size == w.segment[-1] + 1 == 856
    splits = hapt_identity_splits(w, n_splits=5, random_state=0)
    assert len(splits) == 5
    for train, test in splits:
        assert len(train) + len(test) == 10411 and 0.25 < len(test) / 10411 < 0.35
        assert not set(w.segment[train].tolist()) & set(w.segment[test].tolist())
        assert np.unique(w.subject[train]).tolist() == np.unique(w.subject[test]).tolist() == list(range(1, 31))
    assert capsys.readouterr() == ("", "")
