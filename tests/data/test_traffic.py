"""Tests of dp_proto.data.loaders.scats, .sensors and .geometry: SCATS counts, flow classes, windows, neighbours, time folds."""

from __future__ import annotations

import csv
import datetime as dt
import warnings
from pathlib import Path

import numpy as np
import pytest

from dp_proto.data.geometry import EARTH_RADIUS_KM, haversine_distances, nearest_neighbours
from dp_proto.data.loaders.scats import (
    SCATS_COUNTS_FILE,
    SLOTS_PER_DAY,
    TrafficNetwork,
    load_scats_counts,
)
from dp_proto.data.sensors import (
    FLOW_BIN_EDGES,
    FLOW_CLASS_NAMES,
    NodeData,
    discretize_flow,
    node_datasets,
    sliding_windows,
    time_block_folds,
)
from dp_proto.exceptions import DataValidationError
from dp_proto.llp import time_batches

HEADER = [
    "SCATS Number",
    "Location",
    "CD_MELWAY",
    "NB_LATITUDE",
    "NB_LONGITUDE",
    "HF VicRoads Internal",
    "VR Internal Stat",
    "VR Internal Loc",
    "NB_TYPE_SURVEY",
    "Date",
    *[f"V{i:02d}" for i in range(96)],
    "",
    "",
    "",
]
BANNER = [""] * 9 + ["Start Time"] + [f"{i // 4}:{15 * (i % 4):02d}" for i in range(96)] + [""] * 3


def _row(site, approach, day, counts, lat=-37.8, lon=145.0, location="A_ST N of B_RD"):
    """One file row; ``counts``: 96 values (numbers or strings) or a scalar for all slots."""
    if np.isscalar(counts):
        counts = [counts] * 96
    cells = ["" if isinstance(c, str) and c == "" else str(c) for c in counts]
    assert len(cells) == 96
    date = f"{day}/10/06"
    return [f"{site:04d}", location, "060 G10", str(lat), str(lon), "1", "2", str(approach), "1", date,
            *cells, "", "", ""]  # fmt: skip


def _write(path: Path, rows, header=HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(BANNER)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _load(path, **kw) -> TrafficNetwork:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return load_scats_counts(path, **kw)


def _ramp(offset):
    return [offset + i for i in range(96)]


# --------------------------------------------------------------------------- parsing
@pytest.fixture
def small_dir(tmp_path) -> Path:
    """Data dir with 3 detectors (2 sites) x 2 days (1 and 2 October 2006)."""
    rows = [
        _row(970, 7, 1, _ramp(0), lat=-37.86723, lon=145.09103, location="HIGH ST W of X"),
        _row(970, 7, 2, _ramp(100), lat=-37.86723, lon=145.09103, location="HIGH ST W of X"),
        _row(970, 1, 1, _ramp(1000), lat=-37.86703, lon=145.09159),
        _row(970, 1, 2, _ramp(2000), lat=-37.86703, lon=145.09159),
        _row(4335, 2, 2, 7, lat=-37.80619, lon=145.03532, location="HIGH_ST NE of CHARLES_ST"),
        _row(4335, 2, 1, 8, lat=-37.80619, lon=145.03532, location="HIGH_ST NE of CHARLES_ST"),
    ]
    _write(tmp_path / "data" / SCATS_COUNTS_FILE, rows)
    return tmp_path / "data"


def test_parse_small_file(small_dir):
    net = load_scats_counts(small_dir, min_days=1)
    assert isinstance(net, TrafficNetwork)
    assert net.detectors == [(970, 1), (970, 7), (4335, 2)]  # sorted (site, approach)
    assert net.locations[1] == "HIGH ST W of X"
    assert net.start_date == dt.date(2006, 10, 1)
    assert net.series.shape == (3, 2 * SLOTS_PER_DAY) and net.series.dtype == np.float64
    np.testing.assert_array_equal(net.time, np.arange(192))
    assert net.time.dtype == np.int64
    np.testing.assert_allclose(net.coordinates[1], [-37.86723, 145.09103])
    np.testing.assert_array_equal(net.series[0], np.r_[_ramp(1000), _ramp(2000)])
    np.testing.assert_array_equal(net.series[1], np.r_[_ramp(0), _ramp(100)])
    np.testing.assert_array_equal(net.series[2], np.r_[[8] * 96, [7] * 96])  # rows out of order
    assert net.dropped == {"no_coordinates": [], "too_few_days": []}
    assert net.n_dropped == 0 and len(net) == 3
    np.testing.assert_array_equal(net.days_with_data(), [2, 2, 2])
    stamps = net.timestamps(np.array([0, 1, 96 + 9]))
    assert stamps[1] == np.datetime64("2006-10-01T00:15")
    assert stamps[2] == np.datetime64("2006-10-02T02:15")


def test_file_locations(small_dir, tmp_path):
    direct = small_dir / SCATS_COUNTS_FILE
    a = load_scats_counts(direct, min_days=1)  # the file itself
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / direct.name).write_bytes(direct.read_bytes())
    b = load_scats_counts(flat, min_days=1)  # file directly in the data dir
    np.testing.assert_array_equal(a.series, b.series)
    with pytest.raises(FileNotFoundError, match="scats_counts_oct2006.csv") as info:
        load_scats_counts(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere" / SCATS_COUNTS_FILE) in str(info.value)


def test_drops_detectors_without_coordinates_or_with_few_days(tmp_path):
    rows = [
        _row(1, 1, 1, 10), _row(1, 1, 2, 10), _row(1, 1, 3, 10),
        _row(2, 1, 1, 10, lat=0, lon=0), _row(2, 1, 2, 10, lat=0, lon=0),
        _row(2, 1, 3, 10, lat=0, lon=0),
        _row(3, 5, 2, 10),  # one day only
        _row(4, 3, 1, 10, lat="", lon=""), _row(4, 3, 2, 10, lat="", lon=""),
        _row(5, 7, 1, 10), _row(5, 7, 3, [""] * 96),  # second row all blank: 1 day of data
    ]  # fmt: skip
    path = _write(tmp_path / "c.csv", rows)
    with pytest.warns(UserWarning, match=r"kept 1 of 5 detectors; dropped 2 without coord"):
        net = load_scats_counts(path, min_days=2)
    assert net.detectors == [(1, 1)]
    assert net.dropped == {"no_coordinates": [(2, 1), (4, 3)], "too_few_days": [(3, 5), (5, 7)]}
    assert net.n_dropped == 4
    assert net.series.shape == (1, 3 * 96) and net.coordinates.shape == (1, 2)
    # min_days=1 keeps both short detectors; no warning beyond the coordinates one
    net1 = _load(path, min_days=1)
    assert net1.detectors == [(1, 1), (3, 5), (5, 7)]
    assert np.isnan(net1.series[1, :96]).all() and (net1.series[1, 96:192] == 10).all()


def test_missing_values_blank_negative_and_missing_days(tmp_path):
    counts = list(range(96))
    counts[3] = ""
    counts[4] = -1
    counts[5] = "-3"
    rows = [_row(1, 1, 1, counts), _row(1, 1, 3, 4), _row(2, 3, 2, 6), _row(2, 3, 3, 6)]
    net = _load(_write(tmp_path / "c.csv", rows), min_days=1)
    s = net.series
    assert s.shape == (2, 3 * 96)
    assert np.isnan(s[0, 3:6]).all() and s[0, 2] == 2 and s[0, 6] == 6
    assert np.isnan(s[0, 96:192]).all()  # day 2 missing for detector 1
    assert (s[0, 192:] == 4).all()
    assert np.isnan(s[1, :96]).all() and (s[1, 96:] == 6).all()
    np.testing.assert_array_equal(net.days_with_data(), [2, 2])


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda r: r.__setitem__(12, "abc"), "non-numeric count 'abc' in column V02"),
        (lambda r: r.__setitem__(9, "31/2/06"), "unreadable date"),
        (lambda r: r.__setitem__(0, "x12"), "site number"),
        (lambda r: r.__setitem__(3, "north"), "latitude"),
        (lambda r: r.__delitem__(slice(50, None)), "fields"),
    ],
)
def test_malformed_rows(tmp_path, mutate, match):
    rows = [_row(1, 1, 1, 5), _row(1, 1, 2, 5)]
    mutate(rows[1])
    with pytest.raises(DataValidationError, match=match):
        load_scats_counts(_write(tmp_path / "c.csv", rows))


def test_malformed_files(tmp_path):
    dup = _write(tmp_path / "dup.csv", [_row(1, 1, 1, 5), _row(1, 1, 1, 6)])
    with pytest.raises(DataValidationError, match="second row for detector"):
        load_scats_counts(dup)
    moved = _write(tmp_path / "moved.csv", [_row(1, 1, 1, 5), _row(1, 1, 2, 5, lat=-37.9)])
    with pytest.raises(DataValidationError, match="coordinates"):
        load_scats_counts(moved)
    no_col = _write(tmp_path / "nocol.csv", [[c for c in r] for r in [_row(1, 1, 1, 5)]],
                    header=[h.replace("VR Internal Loc", "Approach") for h in HEADER])  # fmt: skip
    with pytest.raises(DataValidationError, match="VR Internal Loc"):
        load_scats_counts(no_col)
    (tmp_path / "nohead.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataValidationError, match="no header row"):
        load_scats_counts(tmp_path / "nohead.csv")
    empty = _write(tmp_path / "empty.csv", [])
    with pytest.raises(DataValidationError, match="no data rows"):
        load_scats_counts(empty)
    with pytest.raises(ValueError, match="outage_zero_fraction"):
        load_scats_counts(empty, outage_zero_fraction=0)


def test_network_wide_zero_outage_rule(tmp_path):
    base = [list(range(10, 106)) for _ in range(4)]
    for k in range(3):  # 3 of 4 detectors count 0 at slots 8 and 9: an outage
        base[k][8] = base[k][9] = 0
    base[0][20] = 0  # a lone zero (1 of 4): real low traffic, kept
    rows = [_row(s + 1, 1, 1, base[s], lat=-37.8 - s / 100) for s in range(4)]
    path = _write(tmp_path / "c.csv", rows)
    net = _load(path, min_days=1)
    np.testing.assert_array_equal(net.outage_slots, [8, 9])
    assert net.n_outage_values == 6
    assert np.isnan(net.series[:3, 8:10]).all()
    np.testing.assert_array_equal(net.series[3, 8:10], [18, 19])  # the nonzero one is kept
    assert net.series[0, 20] == 0
    off = _load(path, min_days=1, outage_zero_fraction=None)
    assert off.outage_slots.size == 0 and off.n_outage_values == 0
    assert (off.series[:3, 8:10] == 0).all()


# --------------------------------------------------------------------------- flow classes
def test_discretize_flow_exact_and_edges():
    counts = [0, 4, 4.9, 5, 29, 30, 59, 60, 149, 150, 259, 260, 261, 695]
    expected = [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5]
    out = discretize_flow(counts)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(discretize_flow(np.array([[5.0], [260.0]])), [[1], [5]])
    assert FLOW_BIN_EDGES == (0, 5, 30, 60, 150, 260) and len(FLOW_CLASS_NAMES) == 6
    np.testing.assert_array_equal(discretize_flow([1, 2, 3], bin_edges=(0, 2)), [0, 1, 1])
    with pytest.raises(DataValidationError, match="negative counts"):
        discretize_flow([3, -1])
    with pytest.raises(DataValidationError, match="NaN"):
        discretize_flow([3, np.nan])
    with pytest.raises(ValueError, match="strictly increasing"):
        discretize_flow([3], bin_edges=(0, 5, 5))


# --------------------------------------------------------------------------- windows
def test_sliding_windows_exact():
    s = np.array([1, 2, 3, 4, 5, 6, np.nan, 8, 9, 10, 11], dtype=float)
    X, y, t = sliding_windows(s, window=3, horizon=1)
    # end positions 2..9; windows touching index 6 (as feature or target) dropped
    np.testing.assert_array_equal(X, [[1, 2, 3], [2, 3, 4], [3, 4, 5], [8, 9, 10]])
    np.testing.assert_array_equal(y, [4, 5, 6, 11])
    np.testing.assert_array_equal(t, [3, 4, 5, 10])
    assert X.dtype == np.float64 and t.dtype == np.int64
    X2, y2, t2 = sliding_windows(s, window=2, horizon=2)
    # [5, 6] -> 8 is kept: the missing value lies between window and target, in neither
    np.testing.assert_array_equal(X2, [[1, 2], [2, 3], [3, 4], [5, 6], [8, 9]])
    np.testing.assert_array_equal(y2, [4, 5, 6, 8, 11])
    np.testing.assert_array_equal(t2, [3, 4, 5, 7, 10])
    # explicit time with a gap: no window spans it
    X3, y3, t3 = sliding_windows([1, 2, 3, 4, 5], time=[10, 11, 12, 20, 21], window=2)
    np.testing.assert_array_equal(X3, [[1, 2]])
    np.testing.assert_array_equal(y3, [3])
    np.testing.assert_array_equal(t3, [12])
    assert sliding_windows([1.0, 2.0], window=5)[0].shape == (0, 5)
    with pytest.raises(ValueError, match="strictly increasing"):
        sliding_windows([1, 2, 3], time=[0, 2, 1])
    with pytest.raises(ValueError, match="window"):
        sliding_windows([1, 2, 3], window=0)
    with pytest.raises(ValueError, match="1-d"):
        sliding_windows(np.zeros((2, 3)))


def test_node_datasets_windows_and_labels(tmp_path):
    day = [0] * 96
    day[:8] = [3, 5, 29, 30, 60, 150, 260, 700]
    rows = [_row(1, 1, 1, day)]
    net = _load(_write(tmp_path / "c.csv", rows), min_days=1, outage_zero_fraction=None)
    (node,) = node_datasets(net, window=5, horizon=1)
    assert isinstance(node, NodeData) and node.detector == (1, 1)
    assert len(node) == 96 - 5
    np.testing.assert_array_equal(node.features[:3], [day[0:5], day[1:6], day[2:7]])
    np.testing.assert_array_equal(node.counts[:4], [150, 260, 700, 0])
    np.testing.assert_array_equal(node.labels[:4], [4, 5, 5, 0])
    np.testing.assert_array_equal(node.time[:4], [5, 6, 7, 8])
    assert node.labels.dtype == np.int64 and node.features.shape == (91, 5)
    (n3,) = node_datasets(net, window=2, horizon=1)
    np.testing.assert_array_equal(n3.labels[:6], [1, 2, 3, 4, 5, 5])  # 29,30,60,150,260,700


def test_time_alignment_across_detectors_with_different_missing_days(tmp_path):
    rows = [
        _row(1, 1, 1, _ramp(0)), _row(1, 1, 3, _ramp(200)),  # detector A: day 2 missing
        _row(2, 1, 1, _ramp(1000)), _row(2, 1, 2, _ramp(1100)),  # detector B: day 3 missing
    ]  # fmt: skip
    net = _load(_write(tmp_path / "c.csv", rows), min_days=1)
    a, b = node_datasets(net)
    np.testing.assert_array_equal(a.time, np.r_[5:96, 192 + 5 : 288])
    np.testing.assert_array_equal(b.time, np.arange(5, 192))  # continuous across midnight
    for node, i in ((a, 0), (b, 1)):
        np.testing.assert_array_equal(node.counts, net.series[i, node.time])
        np.testing.assert_array_equal(node.features[:, -1], net.series[i, node.time - 1])
    common = np.intersect1d(a.time, b.time)
    np.testing.assert_array_equal(common, np.arange(5, 96))
    # the same time value means the same 15 minutes: day*96 + slot of the target
    ia, ib = np.searchsorted(a.time, common), np.searchsorted(b.time, common)
    np.testing.assert_array_equal(b.counts[ib] - a.counts[ia], 1000)
    # global batches line up: batch k covers the same slots at both nodes
    ba, bb = time_batches(a.time, 32), time_batches(b.time, 32)
    assert set(ba) == {0, 1, 2, 6, 7, 8} and set(bb) == {0, 1, 2, 3, 4, 5}
    np.testing.assert_array_equal(a.time[ba == 1], b.time[bb == 1])


# --------------------------------------------------------------------------- neighbours
def test_haversine_one_degree_on_equator():
    d = haversine_distances([[0, 0], [0, 1], [1, 0]])
    one_degree = np.pi / 180 * EARTH_RADIUS_KM
    np.testing.assert_allclose(d[0, 1], one_degree, rtol=1e-12)
    np.testing.assert_allclose(d[0, 2], one_degree, rtol=1e-12)
    np.testing.assert_array_equal(d, d.T)
    assert (np.diag(d) == 0).all()


def test_nearest_neighbours_hand_made_geometry():
    #    C ---- A ---- B ---------- D   (on the equator, at lon -1, 0, 1, 3)
    coords = [[0, 0], [0, 1], [0, -1], [0, 3]]
    nb = nearest_neighbours(coords, 2)
    assert nb.dtype == np.int64 and nb.shape == (4, 2)
    np.testing.assert_array_equal(nb[0], [1, 2])  # B and C tie at 1 degree: lower index first
    np.testing.assert_array_equal(nb[1], [0, 2])  # C and D tie at 2 degrees
    np.testing.assert_array_equal(nb[2], [0, 1])
    np.testing.assert_array_equal(nb[3], [1, 0])
    np.testing.assert_array_equal(nearest_neighbours(coords, 3)[1], [0, 2, 3])
    for i, row in enumerate(nearest_neighbours(coords, 3)):
        assert i not in row
    with pytest.raises(ValueError, match="only 4 nodes"):
        nearest_neighbours(coords, 4)
    with pytest.raises(ValueError, match="c must be >= 1"):
        nearest_neighbours(coords, 0)
    with pytest.raises(ValueError, match="only 1 nodes"):
        nearest_neighbours([[0, 0]], 1)
    with pytest.raises(DataValidationError, match="out of range"):
        nearest_neighbours([[0, 0], [95, 0]], 1)


def test_haversine_vs_euclidean_degrees():
    # At latitude 60 one degree of longitude is half a degree of latitude.
    coords = [[60.0, 10.0], [61.0, 10.0], [60.0, 11.5]]
    assert nearest_neighbours(coords, 1)[0, 0] == 2  # 1.5 deg east ~ 83 km < 1 deg north ~ 111 km
    assert nearest_neighbours(coords, 1, metric="euclidean")[0, 0] == 1
    with pytest.raises(ValueError, match="metric"):
        nearest_neighbours(coords, 1, metric="manhattan")


# --------------------------------------------------------------------------- folds
def test_time_block_folds_partition_contiguous_blocks():
    rng = np.random.default_rng(0)
    t = rng.permutation(np.r_[0:40, 62:103])  # unsorted, with a gap
    folds = time_block_folds(t, n_folds=10)
    assert len(folds) == 10
    tests = np.array([test for _, test in folds])
    np.testing.assert_array_equal(tests.sum(axis=0), 1)  # every sample in exactly one test block
    for k, (train, test) in enumerate(folds):
        assert train.dtype == bool and train.shape == t.shape
        np.testing.assert_array_equal(train, ~test)  # gap=0: train is the rest
        lo, hi = 103 * k // 10, 103 * (k + 1) // 10  # range [0, 103) in blocks of 10 or 11
        np.testing.assert_array_equal(test, (t >= lo) & (t < hi))
    assert not folds[4][1].any() and not folds[5][1].any()  # blocks [41, 51), [51, 61)
    assert folds[6][1].sum() == 10  # block [61, 72) holds 62..71


def test_time_block_folds_gap_and_range():
    t = np.arange(100)
    folds = time_block_folds(t, n_folds=4, time_range=(0, 100), gap=5)
    train, test = folds[1]  # test block [25, 50)
    np.testing.assert_array_equal(np.flatnonzero(test), np.arange(25, 50))
    np.testing.assert_array_equal(np.flatnonzero(train), np.r_[0:20, 55:100])
    # same time_range -> same blocks for a node with fewer samples
    sub = np.array([3, 30, 60, 99])
    sub_folds = time_block_folds(sub, n_folds=4, time_range=(0, 100))
    np.testing.assert_array_equal([f[1].nonzero()[0][0] for f in sub_folds], [0, 1, 2, 3])
    with pytest.raises(ValueError, match="outside time_range"):
        time_block_folds(sub, n_folds=4, time_range=(10, 100))
    with pytest.raises(ValueError, match="fewer than n_folds"):
        time_block_folds([0, 1, 2], n_folds=10)
    with pytest.raises(ValueError, match="empty"):
        time_block_folds([], n_folds=2)
    with pytest.raises(ValueError, match="n_folds"):
        time_block_folds(t, n_folds=1)


# --------------------------------------------------------------------------- real data
@pytest.mark.data
def test_real_scats_counts(real_data_dir):
    if not (real_data_dir / SCATS_COUNTS_FILE).is_file():
        pytest.skip(f"{SCATS_COUNTS_FILE} not in {real_data_dir}")
    with pytest.warns(UserWarning, match="kept 138 of 140 detectors"):
        net = load_scats_counts(real_data_dir)
    # 140 (site, approach) pairs; the README's 139 counts Location texts, one shared by two.
    assert len(net) == 138
    assert net.dropped == {"no_coordinates": [(4266, 1)], "too_few_days": [(3001, 6)]}
    assert net.series.shape == (138, 31 * 96)
    assert net.start_date == dt.date(2006, 10, 1)
    assert net.timestamps(net.time[-1]) == np.datetime64("2006-10-31T23:45")
    # daylight saving started on 29 October 2006: the skipped hour is zeros in the file
    np.testing.assert_array_equal(net.outage_slots, 28 * 96 + np.arange(7, 11))
    assert np.nanmin(net.series) >= 0 and np.nanmax(net.series) == 695
    nodes = node_datasets(net)
    sizes = np.array([len(n) for n in nodes])
    assert sizes.min() == 2107 and sizes.max() == 2971 and sizes.sum() == 397446
    hist = np.bincount(np.concatenate([n.labels for n in nodes]), minlength=6)
    print("flow class histogram", dict(zip(FLOW_CLASS_NAMES, hist.tolist(), strict=True)))
    assert hist.size == 6 and (hist > 0).all()
    np.testing.assert_array_equal(hist, [23154, 82732, 43892, 139716, 86304, 21648])
    nb = nearest_neighbours(net.coordinates, 3)
    assert nb.shape == (138, 3) and not (nb == np.arange(138)[:, None]).any()
