"""Tests of dp_proto.data.loaders.images and dp_proto.data.synthetic.entangled: two-label image loaders and the entangled synthetic task."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy.stats import chi2_contingency

import dp_proto.data as data_pkg
from dp_proto.data import (
    YALE_CONDITIONS,
    YALE_DEFAULT_CROP,
    YALE_DEFAULT_SIZE,
    YALE_FACE_CROP,
    YALE_FACE_SIZE,
    EntangledTask,
    FaceCrop,
    TwoLabelImages,
    entangled_label_joint,
    load_image_folder,
    load_two_label_csv,
    load_yale_faces,
    make_entangled_task,
)
from dp_proto.exceptions import DataValidationError

PATTERN = r"s(?P<private>\d+)_(?P<regular>[a-z]+)(?:\.(?:png|gif))?"


def _grey(seed: int, shape: tuple[int, int] = (6, 8)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _write(path: Path, arr: np.ndarray, fmt: str) -> Path:
    """Write ``arr`` (uint8 (h, w) or (h, w, 3), or uint16 (h, w)) as ``fmt`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, format=fmt)
    return path


@pytest.fixture
def face_folder(tmp_path) -> tuple[Path, dict[str, np.ndarray]]:
    """Four tiny grey images (GIF and PNG, with and without extension) and two stray files."""
    folder = tmp_path / "faces"
    arrays = {
        "s1_happy": _grey(1),
        "s1_sad.png": _grey(2),
        "s2_happy.gif": _grey(3),
        "s2_sad": _grey(4),
    }
    formats = {"s1_happy": "GIF", "s1_sad.png": "PNG", "s2_happy.gif": "GIF", "s2_sad": "PNG"}
    for name, arr in arrays.items():
        _write(folder / name, arr, formats[name])
    (folder / "README.txt").write_text("not an image\n")
    (folder / "s3_happy.jpeg").write_text("extension not allowed by the pattern\n")
    (folder / "s9_sub").mkdir()  # a folder, never read
    return folder, arrays


# --------------------------------------------------------------------------- load_image_folder
def test_folder_reads_matching_files_with_and_without_extension(face_folder):
    folder, arrays = face_folder
    out = load_image_folder(folder, PATTERN)
    assert isinstance(out, TwoLabelImages)
    names = sorted(arrays)  # deterministic order: sorted by file name
    assert [Path(f).name for f in out.files] == names
    assert len(out) == 4
    assert out.images.shape == (4, 1, 6, 8) and out.images.dtype == np.float32
    assert out.image_shape == (1, 6, 8)
    for i, name in enumerate(names):
        # GIF and PNG both store 8-bit grey exactly: values are pixel / 255.
        np.testing.assert_allclose(out.images[i, 0], arrays[name] / 255.0, atol=1e-6)


def test_folder_label_names_and_indices(face_folder):
    folder, _ = face_folder
    out = load_image_folder(folder, re.compile(PATTERN))
    assert out.regular_names == ["happy", "sad"]
    assert out.private_names == ["1", "2"]
    assert out.regular.dtype == np.int64 and out.private.dtype == np.int64
    for f, r, p in zip(out.files, out.regular, out.private, strict=True):
        m = re.fullmatch(PATTERN, Path(f).name)
        assert out.regular_names[r] == m.group("regular")
        assert out.private_names[p] == m.group("private")
    np.testing.assert_array_equal(out.private, [0, 0, 1, 1])
    np.testing.assert_array_equal(out.regular, [0, 1, 0, 1])


def test_folder_names_sorted_as_strings(tmp_path):
    for name in ("p10_b", "p2_a", "p2_c"):
        _write(tmp_path / name, _grey(0, (3, 3)), "PNG")
    out = load_image_folder(tmp_path, r"p(?P<private>\d+)_(?P<regular>[a-z])")
    assert out.private_names == ["10", "2"]
    assert out.regular_names == ["a", "b", "c"]
    assert [out.private_names[p] for p in out.private] == ["10", "2", "2"]


def test_crop_then_resize_with_box_averaging(tmp_path):
    # 6 x 8 image: a 4 x 4 block pattern in the middle, a border of 255 around it.
    arr = np.full((6, 8), 255, dtype=np.uint8)
    arr[1:5, 2:6] = np.kron(np.array([[0, 100], [200, 50]], dtype=np.uint8), np.ones((2, 2), np.uint8))
    _write(tmp_path / "s1_a", arr, "PNG")
    # Crop (left, top, right, bottom) = (2, 1, 6, 5) keeps exactly the block pattern.
    out = load_image_folder(tmp_path, PATTERN, crop=(2, 1, 6, 5))
    assert out.images.shape == (1, 1, 4, 4)
    np.testing.assert_allclose(out.images[0, 0] * 255, arr[1:5, 2:6], atol=1e-4)
    # Resizing 4 x 4 -> 2 x 2 with box resampling averages each 2 x 2 block exactly.
    out = load_image_folder(tmp_path, PATTERN, crop=(2, 1, 6, 5), size=(2, 2))
    np.testing.assert_allclose(out.images[0, 0] * 255, [[0, 100], [200, 50]], atol=1e-3)
    # Non-square target: size is (height, width).
    out = load_image_folder(tmp_path, PATTERN, size=(3, 5))
    assert out.images.shape == (1, 1, 3, 5)
    assert out.images.min() >= 0.0 and out.images.max() <= 1.0


def test_downsampling_is_antialiased(tmp_path):
    # A one-pixel checkerboard shrunk 4-fold must become flat grey (area average),
    # not black or white as nearest-neighbour sampling would give.
    board = (np.indices((16, 16)).sum(axis=0) % 2 * 255).astype(np.uint8)
    _write(tmp_path / "s1_a.png", board, "PNG")
    out = load_image_folder(tmp_path, PATTERN, size=(4, 4))
    np.testing.assert_allclose(out.images, 0.5, atol=1e-3)


def test_rgb_images(tmp_path):
    rgb = np.zeros((4, 5, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 255, 51, 0
    _write(tmp_path / "s1_a.png", rgb, "PNG")
    out = load_image_folder(tmp_path, PATTERN, grayscale=False)
    assert out.images.shape == (1, 3, 4, 5)
    np.testing.assert_allclose(out.images[0, :, 0, 0], [1.0, 0.2, 0.0], atol=1e-6)
    grey = load_image_folder(tmp_path, PATTERN)
    assert grey.images.shape == (1, 1, 4, 5)
    # Pillow's ITU-R 601-2 luma: L = 0.299 R + 0.587 G + 0.114 B (rounded to 8 bits).
    assert grey.images[0, 0, 0, 0] == pytest.approx(round(0.299 * 255 + 0.587 * 51) / 255, abs=1e-6)


def test_sixteen_bit_png_scaled_to_unit_range(tmp_path):
    arr = np.array([[0, 1000, 65535], [32768, 256, 12]], dtype=np.uint16)
    _write(tmp_path / "s1_a.png", arr, "PNG")
    out = load_image_folder(tmp_path, PATTERN)
    np.testing.assert_allclose(out.images[0, 0], arr / 65535.0, atol=1e-6)


def test_mismatched_sizes_need_size(tmp_path):
    _write(tmp_path / "s1_a", _grey(0, (6, 8)), "GIF")
    _write(tmp_path / "s2_a", _grey(1, (7, 8)), "GIF")
    with pytest.raises(DataValidationError, match=r"differ in size.*pass size=\(height, width\)"):
        load_image_folder(tmp_path, PATTERN)
    out = load_image_folder(tmp_path, PATTERN, size=(5, 4))
    assert out.images.shape == (2, 1, 5, 4)


def test_folder_no_match_names_directory_and_pattern(face_folder):
    folder, _ = face_folder
    with pytest.raises(FileNotFoundError) as info:
        load_image_folder(folder, r"x(?P<private>\d)_(?P<regular>\w+)")
    assert str(folder) in str(info.value)
    assert r"x(?P<private>\d)_(?P<regular>\w+)" in str(info.value)


def test_folder_errors(tmp_path, face_folder):
    folder, _ = face_folder
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        load_image_folder(tmp_path / "nowhere", PATTERN)
    with pytest.raises(ValueError, match=r"lacks the named group.*\(\?P<private>"):
        load_image_folder(folder, r"s(?P<regular>\d+)_[a-z]+")
    with pytest.raises(ValueError, match="crop"):
        load_image_folder(folder, PATTERN, crop=(4, 0, 2, 3))
    with pytest.raises(ValueError, match="crop"):
        load_image_folder(folder, PATTERN, crop=(0, 0, 2))
    with pytest.raises(ValueError, match="size"):
        load_image_folder(folder, PATTERN, size=(0, 3))
    with pytest.raises(ValueError, match="size"):
        load_image_folder(folder, PATTERN, size=(2.5, 3))
    with pytest.raises(DataValidationError, match="does not fit"):
        load_image_folder(folder, PATTERN, crop=(0, 0, 9, 6))


def test_folder_matching_file_that_is_not_an_image(tmp_path):
    _write(tmp_path / "s1_a", _grey(0), "PNG")
    (tmp_path / "s2_a").write_text("hello")
    with pytest.raises(DataValidationError, match=r"s2_a: not an image"):
        load_image_folder(tmp_path, PATTERN)


def test_folder_empty_label(tmp_path):
    _write(tmp_path / "s1_", _grey(0), "PNG")
    with pytest.raises(DataValidationError, match="empty"):
        load_image_folder(tmp_path, r"s(?P<private>\d+)_(?P<regular>[a-z]*)")


# --------------------------------------------------------------------------- load_two_label_csv
def _write_csv(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


def test_csv_relative_and_absolute_paths(tmp_path):
    img_dir = tmp_path / "imgs"
    a = _write(img_dir / "a", _grey(1), "GIF")  # no extension
    b = _write(img_dir / "b.png", _grey(2), "PNG")
    c = _write(tmp_path / "elsewhere" / "c.gif", _grey(3), "GIF")
    path = _write_csv(
        tmp_path / "labels.csv",
        [
            ["path", "note", "regular", "private"],
            ["imgs/b.png", "x", "smile", "bob"],
            [],
            [str(c.resolve()), "y", "frown", "alice"],
            ["imgs/a", "z", "smile", "alice"],
        ],
    )
    out = load_two_label_csv(path)
    assert out.files == [str(b), str(c.resolve()), str(a)]  # CSV order is kept
    assert out.images.shape == (3, 1, 6, 8)
    np.testing.assert_allclose(out.images[0, 0], _grey(2) / 255.0, atol=1e-6)
    np.testing.assert_allclose(out.images[2, 0], _grey(1) / 255.0, atol=1e-6)
    assert out.regular_names == ["frown", "smile"]
    assert out.private_names == ["alice", "bob"]
    np.testing.assert_array_equal(out.regular, [1, 0, 1])
    np.testing.assert_array_equal(out.private, [1, 0, 0])


def test_csv_custom_columns_resize_crop_rgb(tmp_path):
    _write(tmp_path / "a.png", _grey(1, (10, 12)), "PNG")
    _write(tmp_path / "b.png", _grey(2, (9, 14)), "PNG")
    path = _write_csv(
        tmp_path / "t.csv",
        [["file", "expr", "who"], ["a.png", "e1", "p1"], ["b.png", "e2", "p2"]],
    )
    kwargs = {"image_column": "file", "regular_column": "expr", "private_column": "who"}
    out = load_two_label_csv(path, **kwargs, crop=(1, 1, 9, 9), size=(4, 2), grayscale=False)
    assert out.images.shape == (2, 3, 4, 2)
    assert 0.0 <= out.images.min() and out.images.max() <= 1.0
    with pytest.raises(DataValidationError, match="pass size="):
        load_two_label_csv(path, **kwargs)


def test_csv_errors(tmp_path):
    _write(tmp_path / "a.png", _grey(1), "PNG")
    with pytest.raises(FileNotFoundError, match="CSV file not found"):
        load_two_label_csv(tmp_path / "none.csv")

    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n")
    with pytest.raises(DataValidationError, match="empty CSV"):
        load_two_label_csv(empty)

    header_only = _write_csv(tmp_path / "h.csv", [["path", "regular", "private"]])
    with pytest.raises(DataValidationError, match="no data rows"):
        load_two_label_csv(header_only)

    no_col = _write_csv(tmp_path / "c.csv", [["path", "regular", "who"], ["a.png", "r", "p"]])
    with pytest.raises(DataValidationError, match=r"no private column 'private'.*'who'"):
        load_two_label_csv(no_col)

    missing = _write_csv(
        tmp_path / "m.csv",
        [["path", "regular", "private"], ["a.png", "r", "p"], ["b.png", "r", "q"]],
    )
    with pytest.raises(FileNotFoundError, match=r"line 3: image file not found: .*b\.png"):
        load_two_label_csv(missing)

    blank = _write_csv(tmp_path / "b.csv", [["path", "regular", "private"], ["a.png", " ", "p"]])
    with pytest.raises(DataValidationError, match="empty 'regular' cell on line 2"):
        load_two_label_csv(blank)

    ragged = _write_csv(tmp_path / "r.csv", [["path", "regular", "private"], ["a.png", "r"]])
    with pytest.raises(DataValidationError, match="line 2 has 2 fields"):
        load_two_label_csv(ragged)

    dup = _write_csv(tmp_path / "d.csv", [["path", "path", "regular", "private"]])
    with pytest.raises(DataValidationError, match="more than once"):
        load_two_label_csv(dup)


# --------------------------------------------------------------------------- load_yale_faces
def _fake_yale(folder: Path, names: list[str]) -> None:
    rng = np.random.default_rng(0)
    for name in names:
        _write(folder / name, rng.integers(0, 256, (243, 320), dtype=np.uint8), "GIF")


def test_yale_fake_folder_defaults(tmp_path):
    folder = tmp_path / "faces" / "yale"
    _fake_yale(folder, ["subject01.happy", "subject01.wink", "subject02.glasses.gif"])
    (folder / "subject01.gif").write_text("not a condition: ignored")
    (folder / "Readme.txt").write_text("ignored")
    out = load_yale_faces(tmp_path)
    assert out.images.shape == (3, 1, *YALE_DEFAULT_SIZE)
    assert out.private_names == ["01", "02"]
    assert out.regular_names == ["glasses", "happy", "wink"]
    left, top, right, bottom = YALE_DEFAULT_CROP
    # The default size keeps the aspect ratio of the default crop.
    assert (right - left) / (bottom - top) == pytest.approx(YALE_DEFAULT_SIZE[1] / YALE_DEFAULT_SIZE[0])
    full = load_yale_faces(tmp_path, size=None, crop=None)
    assert full.images.shape == (3, 1, 243, 320)


def test_yale_also_found_in_data_dir_yale(tmp_path):
    _fake_yale(tmp_path / "yale", ["subject03.sad"])
    out = load_yale_faces(tmp_path, size=(8, 8))
    assert out.images.shape == (1, 1, 8, 8)


def test_yale_missing_folder(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"(?s)Yale faces folder not found.*faces[/\\]yale"):
        load_yale_faces(tmp_path)
    monkeypatch.delenv("DP_PROTO_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="DP_PROTO_DATA_DIR"):
        load_yale_faces()
    (tmp_path / "faces" / "yale").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no file in"):
        load_yale_faces(tmp_path)


@pytest.mark.slow
@pytest.mark.data
def test_real_yale(real_data_dir):
    if not (real_data_dir / "faces" / "yale").is_dir():
        pytest.skip("no faces/yale folder in the data directory")
    out = load_yale_faces(real_data_dir)
    assert out.images.shape == (164, 1, 30, 32) and out.images.dtype == np.float32
    assert 0.0 <= out.images.min() and out.images.max() <= 1.0
    assert out.images.std() > 0.1  # real pictures, not blank
    assert len(out.private_names) == 15 and out.private_names[0] == "01"
    assert out.regular_names == list(YALE_CONDITIONS)
    counts = np.bincount(out.private, minlength=15)
    assert counts[0] == 10 and np.all(counts[1:] == 11)  # subject01.centerlight is missing
    assert np.bincount(out.regular)[YALE_CONDITIONS.index("centerlight")] == 14
    full = load_yale_faces(real_data_dir, size=None, crop=None)
    assert full.images.shape == (164, 1, 243, 320)
    # The crop is a pure cut: cropping the full images by hand gives the same pixels.
    left, top, right, bottom = YALE_DEFAULT_CROP
    cropped = load_yale_faces(real_data_dir, size=None)
    np.testing.assert_array_equal(cropped.images, full.images[:, :, top:bottom, left:right])
    # Centred faces: every box lies inside the picture and the heads' horizontal
    # positions, which spread over about 100 columns in the full pictures, are aligned.
    faces = load_yale_faces(real_data_dir, crop=YALE_FACE_CROP, size=YALE_FACE_SIZE)
    assert faces.images.shape == (164, 1, *YALE_FACE_SIZE)
    lefts = np.array([YALE_FACE_CROP(img[0])[0] for img in full.images])
    assert lefts.min() < 60 and lefts.max() > 130
    dark = faces.images[:, 0] < 0.55
    centres = (dark.sum(axis=1) * np.arange(YALE_FACE_SIZE[1])).sum(axis=1) / dark.sum(axis=(1, 2))
    assert np.median(np.abs(centres - (YALE_FACE_SIZE[1] - 1) / 2)) < 3


# --------------------------------------------------------------------------- FaceCrop
def _portrait(centre: int, top: int, shape=(243, 320)) -> np.ndarray:
    """A white picture with a dark elliptic head (half-width 60, half-height 90) whose
    topmost row is ``top`` and whose centre column is ``centre``, in [0, 1]."""
    rows, cols = np.mgrid[: shape[0], : shape[1]]
    head = ((cols - centre) / 60.0) ** 2 + ((rows - top - 90) / 90.0) ** 2 <= 1.0
    return np.where(head, 0.3, 0.95)


@pytest.mark.parametrize("centre", [80, 160, 230])
def test_face_crop_centres_the_head(centre):
    crop = FaceCrop(width=100, height=120, top_margin=20)
    left, top, right, bottom = crop(_portrait(centre, top=30))
    assert (right - left, bottom - top) == (100, 120)
    assert abs((left + right) / 2 - centre) <= 1
    # The head's first row with more than 15 dark pixels, plus the margin.
    first = np.flatnonzero((_portrait(centre, top=30) < 0.55).sum(axis=1) > 15)[0]
    assert top == first + 20


def test_face_crop_stays_inside_the_image():
    crop = FaceCrop(width=144, height=160, top_margin=25)
    left, top, right, bottom = crop(_portrait(10, top=150))  # head at the bottom-left edge
    assert left == 0 and right == 144 and bottom == 243 and top == 243 - 160
    blank = np.full((243, 320), 0.95)  # no head at all: the centre box, from the top
    assert crop(blank) == (88, 0, 232, 160)


def test_face_crop_ignores_shoulders_and_border_columns():
    image = _portrait(200, top=20)
    image[200:, :120] = 0.2  # dark clothes at the bottom left, below the upper 80 %
    image[:, :5] = 0.0  # a dark scan line at the left edge
    left, _, right, _ = FaceCrop(width=100, height=100)(image)
    assert abs((left + right) / 2 - 200) <= 1


def test_face_crop_validation():
    for kwargs in (
        {"width": 0},
        {"height": 2.5},
        {"top_margin": -1},
        {"threshold": 0.0},
        {"upper_fraction": 1.5},
        {"min_row_pixels": True},
    ):
        with pytest.raises(ValueError, match="FaceCrop"):
            FaceCrop(**kwargs)
    with pytest.raises(ValueError, match="grey image"):
        FaceCrop()(np.zeros((243, 320, 3)))
    with pytest.raises(DataValidationError, match="does not fit"):
        FaceCrop(width=400)(np.zeros((243, 320)))


def test_folder_with_a_per_image_crop(tmp_path):
    folder = tmp_path / "faces"
    for name, centre in (("s1_happy.png", 70), ("s2_sad.png", 250)):
        _write(folder / name, (255 * _portrait(centre, top=30)).astype(np.uint8), "PNG")
    crop = FaceCrop(width=100, height=120)
    out = load_image_folder(folder, PATTERN, crop=crop)
    assert out.images.shape == (2, 1, 120, 100)
    full = load_image_folder(folder, PATTERN)
    for k in range(2):  # the same cut as the box computed from that image alone
        left, top, right, bottom = crop(full.images[k, 0])
        np.testing.assert_array_equal(out.images[k, 0], full.images[k, 0, top:bottom, left:right])
    rgb = load_image_folder(folder, PATTERN, crop=crop, grayscale=False, size=(12, 10))
    assert rgb.images.shape == (2, 3, 12, 10)


def test_yale_face_crop_on_fake_folder(tmp_path):
    _fake_yale(tmp_path / "faces" / "yale", ["subject01.happy", "subject02.sad"])
    out = load_yale_faces(tmp_path, crop=YALE_FACE_CROP, size=YALE_FACE_SIZE)
    assert out.images.shape == (2, 1, *YALE_FACE_SIZE)
    # The face box shrinks exactly 4-fold to the face size.
    assert (YALE_FACE_CROP.height / 4, YALE_FACE_CROP.width / 4) == YALE_FACE_SIZE


# --------------------------------------------------------------------------- make_entangled_task
def test_entangled_shapes_and_types():
    task = make_entangled_task(50, num_regular=3, num_private=5, dim=10)
    assert isinstance(task, EntangledTask) and len(task) == 50
    assert task.x.shape == (50, 10) and task.x.dtype == np.float32
    assert task.regular.shape == (50,) and task.regular.dtype == np.int64
    assert task.private.shape == (50,) and task.private.dtype == np.int64
    assert task.regular.min() >= 0 and task.regular.max() < 3
    assert task.private.min() >= 0 and task.private.max() < 5
    assert task.regular_basis.shape == (10, 3) and task.private_basis.shape == (10, 5)
    assert task.label_joint.shape == (5, 3)
    assert task.label_joint.sum() == pytest.approx(1.0)
    basis = np.hstack([task.regular_basis, task.private_basis])
    np.testing.assert_allclose(basis.T @ basis, np.eye(8), atol=1e-12)  # orthonormal, orthogonal


def test_entangled_deterministic():
    a = make_entangled_task(200, seed=7)
    b = make_entangled_task(200, seed=7)
    for field in ("x", "regular", "private", "regular_basis", "private_basis"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    c = make_entangled_task(200, seed=8)
    assert not np.array_equal(a.x, c.x)
    g = make_entangled_task(200, seed=np.random.default_rng(7))
    np.testing.assert_array_equal(g.x, a.x)


def test_entangled_noise_free_features_are_the_class_directions():
    task = make_entangled_task(100, noise=0.0, signal=2.5, seed=3)
    onehot_y = np.eye(4)[task.regular]
    onehot_s = np.eye(8)[task.private]
    np.testing.assert_allclose(task.x @ task.regular_basis, 2.5 * onehot_y, atol=1e-5)
    np.testing.assert_allclose(task.x @ task.private_basis, 2.5 * onehot_s, atol=1e-5)
    # Projecting out the private subspace leaves a function of the regular label only.
    removed = task.x - (task.x @ task.private_basis) @ task.private_basis.T
    np.testing.assert_allclose(removed, 2.5 * task.regular_basis.T[task.regular], atol=1e-5)


def test_entanglement_one_ties_labels():
    task = make_entangled_task(2000, num_regular=3, num_private=7, entanglement=1.0, seed=1)
    np.testing.assert_array_equal(task.regular, task.private % 3)
    assert task.best_private_accuracy_given_regular == pytest.approx(3 / 7)


def test_entanglement_zero_independent_labels():
    task = make_entangled_task(40_000, entanglement=0.0, seed=2)
    table = np.zeros((8, 4))
    np.add.at(table, (task.private, task.regular), 1)
    # Chi-square test of independence (fixed seed, so not flaky): no evidence of dependence.
    assert chi2_contingency(table).pvalue > 1e-3
    joint = table / table.sum()
    product = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
    assert np.abs(joint - product).max() < 0.005
    assert task.best_private_accuracy_given_regular == pytest.approx(task.chance_private)


def test_chance_private():
    for k in (2, 5, 8):
        task = make_entangled_task(10, num_private=k, dim=20)
        assert task.chance_private == pytest.approx(1 / k)


@pytest.mark.parametrize(
    "num_regular,num_private,entanglement",
    [(4, 8, 0.5), (4, 8, 0.0), (3, 5, 0.3), (6, 4, 0.7), (2, 2, 1.0), (5, 9, 0.9)],
)
def test_best_private_accuracy_exact_and_empirical(num_regular, num_private, entanglement):
    n = 200_000
    task = make_entangled_task(
        n,
        num_regular=num_regular,
        num_private=num_private,
        entanglement=entanglement,
        dim=num_regular + num_private,
        seed=11,
    )
    best = task.best_private_accuracy_given_regular
    # Closed form: each y with a preimage under s -> s mod num_regular is most likely
    # from one of them; min(K_y, K_s) such y.
    k = min(num_regular, num_private)
    assert best == pytest.approx((k * entanglement + 1 - entanglement) / num_private)
    assert task.chance_private <= best + 1e-12
    # Empirical: accuracy of the Bayes rule on the sample, and of the best rule fitted on it
    # (the argmax of the empirical joint). Standard error <= 0.5 / sqrt(n) ~ 0.0011, so a
    # tolerance of 0.006 is more than 5 standard errors.
    joint = task.label_joint
    bayes_guess = joint.argmax(axis=0)  # most likely s for each y
    empirical = np.mean(bayes_guess[task.regular] == task.private)
    assert empirical == pytest.approx(best, abs=0.006)
    table = np.zeros((num_private, num_regular))
    np.add.at(table, (task.private, task.regular), 1)
    assert table.max(axis=0).sum() / n == pytest.approx(best, abs=0.006)
    np.testing.assert_allclose(table / n, joint, atol=0.004)


def test_entangled_label_joint_function():
    joint = entangled_label_joint(4, 8, 0.5)
    np.testing.assert_allclose(joint, make_entangled_task(1).label_joint)
    np.testing.assert_allclose(joint.sum(axis=1), 1 / 8)


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"n": 0}, ValueError, "n must be >= 1"),
        ({"n": 2.0}, TypeError, "n must be an int"),
        ({"entanglement": -0.1}, ValueError, r"entanglement must be in \[0, 1\]"),
        ({"entanglement": 1.5}, ValueError, r"entanglement must be in \[0, 1\]"),
        ({"entanglement": float("nan")}, ValueError, "entanglement"),
        ({"num_regular": 1}, ValueError, "num_regular must be >= 2"),
        ({"num_private": 1}, ValueError, "num_private must be >= 2"),
        ({"dim": 11}, ValueError, r"dim must be >= num_regular \+ num_private = 12"),
        ({"signal": -1.0}, ValueError, "signal"),
        ({"noise": float("inf")}, ValueError, "noise"),
        ({"seed": "abc"}, TypeError, "seed must be an int"),
        ({"seed": -1}, ValueError, "seed must be a non-negative int"),
    ],
)
def test_entangled_validation(kwargs, error, match):
    args = {"n": 10, **kwargs}
    with pytest.raises(error, match=match):
        make_entangled_task(**args)


def test_public_exports():
    for name in (
        "TwoLabelImages",
        "EntangledTask",
        "load_image_folder",
        "load_two_label_csv",
        "load_yale_faces",
        "make_entangled_task",
        "FaceCrop",
        "YALE_FACE_CROP",
        "YALE_FACE_SIZE",
    ):
        assert name in data_pkg.__all__ and hasattr(data_pkg, name)
