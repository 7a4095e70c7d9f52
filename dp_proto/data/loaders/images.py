"""Images with two labels (a *regular* and a *private* one) for adversarial anonymization.

The setting of Feutry et al. (2018), "Learning anonymized representations with
adversarial neural networks": an encoder should keep a *regular* label (e.g. a
facial expression or lighting condition) predictable while making a *private*
label (e.g. the identity) unpredictable.

Image loaders, all ``-> TwoLabelImages``
----------------------------------------
``load_image_folder(directory, pattern, size=None, grayscale=True, crop=None)``
    Every file whose name fully matches ``pattern`` (named groups ``regular``
    and ``private``); files may have no extension.
``load_two_label_csv(csv_path, image_column="path", regular_column="regular", ...)``
    Image paths and both labels from a CSV with a header.
``load_yale_faces(data_dir=None, size=YALE_DEFAULT_SIZE, crop=YALE_DEFAULT_CROP)``
    The Yale Face Database in ``<data_dir>/faces/yale/``: private = subject
    (15), regular = condition (11). ``crop=YALE_FACE_CROP, size=YALE_FACE_SIZE``
    centres every face in its own box (``FaceCrop``).

A synthetic task of the same kind: ``dp_proto.data.synthetic.make_entangled_task``.

Images are read with Pillow (imported when first needed); nothing here touches
the network.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dp_proto.data.loaders.common import PathLike, _resolve_data_dir
from dp_proto.exceptions import DataValidationError

__all__ = [
    "YALE_CONDITIONS",
    "YALE_PATTERN",
    "YALE_DEFAULT_CROP",
    "YALE_DEFAULT_SIZE",
    "YALE_FACE_SIZE",
    "TwoLabelImages",
    "FaceCrop",
    "YALE_FACE_CROP",
    "load_image_folder",
    "load_two_label_csv",
    "load_yale_faces",
]


Box = tuple[int, int, int, int]


#: A fixed box, or a function of the grey image (height, width) in [0, 1] giving one.
CropSpec = Box | Callable[[np.ndarray], Box]


Size = tuple[int, int]


#: The 11 conditions of the Yale Face Database (its regular labels), sorted.
YALE_CONDITIONS: tuple[str, ...] = (
    "centerlight",
    "glasses",
    "happy",
    "leftlight",
    "noglasses",
    "normal",
    "rightlight",
    "sad",
    "sleepy",
    "surprised",
    "wink",
)


#: File names of the Yale Face Database: ``subjectNN.<condition>``, optionally ``.gif``.
YALE_PATTERN: str = r"subject(?P<private>\d+)\.(?P<regular>" + "|".join(YALE_CONDITIONS) + r")(?:\.gif)?"


#: Default crop box (left, top, right, bottom) of ``load_yale_faces``: 256 wide,
#: 240 high, from the 320 x 243 originals.
YALE_DEFAULT_CROP: Box = (32, 2, 288, 242)


#: Default (height, width) of ``load_yale_faces``: the crop shrunk 8-fold.
YALE_DEFAULT_SIZE: Size = (30, 32)


#: (height, width) to use with ``YALE_FACE_CROP``: the box shrunk 4-fold.
YALE_FACE_SIZE: Size = (40, 36)


_SIXTEEN_BIT_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})


# --------------------------------------------------------------------------- containers
@dataclass(frozen=True)
class TwoLabelImages:
    """Images with a regular and a private label.

    Attributes
    ----------
    images : ndarray of shape (n, channels, height, width), dtype float32
        Pixel values in [0, 1]; ``channels`` is 1 (grey) or 3 (RGB).
    regular : ndarray of shape (n,), dtype int64
        Regular label of each image, an index into ``regular_names``.
    private : ndarray of shape (n,), dtype int64
        Private label of each image, an index into ``private_names``.
    regular_names : list of str
        The distinct regular labels, sorted (as strings).
    private_names : list of str
        The distinct private labels, sorted (as strings).
    files : list of str
        Path of each image file, in the order of the rows.
    """

    images: np.ndarray
    regular: np.ndarray
    private: np.ndarray
    regular_names: list[str]
    private_names: list[str]
    files: list[str]

    def __len__(self) -> int:
        return len(self.images)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of one image."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]


# --------------------------------------------------------------------------- argument checks
def _check_size(size: Size | None) -> Size | None:
    if size is None:
        return None
    try:
        height, width = size
    except (TypeError, ValueError):
        raise ValueError(f"size must be a (height, width) pair of ints, got {size!r}") from None
    for name, value in (("height", height), ("width", width)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"size {name} must be an int >= 1, got {value!r} (size={size!r})")
    return int(height), int(width)


def _check_crop(crop: CropSpec | None) -> CropSpec | None:
    if crop is None or callable(crop):
        return crop
    try:
        left, top, right, bottom = crop
    except (TypeError, ValueError):
        raise ValueError(f"crop must be a (left, top, right, bottom) box of 4 ints, got {crop!r}") from None
    values = (left, top, right, bottom)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in values):
        raise ValueError(f"crop must be a (left, top, right, bottom) box of 4 ints, got {crop!r}")
    if left < 0 or top < 0 or right <= left or bottom <= top:
        raise ValueError(f"crop {crop!r} is not a box: need 0 <= left < right and 0 <= top < bottom")
    return int(left), int(top), int(right), int(bottom)


@dataclass(frozen=True)
class FaceCrop:
    """A crop box of fixed size centred on the head, found in each image by itself.

    For portraits of a dark head (hair, face, clothes) in front of a bright
    background, such as the Yale faces: a pixel darker than ``threshold`` (grey
    level in [0, 1]) counts as head. The box is centred horizontally on the
    centroid of the head pixels in the upper ``upper_fraction`` of the image
    (the shoulders below are left out), and its top lies ``top_margin`` rows below
    the top of the head (the first row with more than ``min_row_pixels`` head
    pixels within ``width`` columns of that centre), which keeps the forehead,
    eyes and mouth and cuts most of the hair. The box is shifted back into the
    image where it would leave it. Columns within ``border`` pixels of either edge
    are ignored (scan lines).

    The box depends on nothing but the image itself, so it adds no dependence
    between records (it is part of the fixed preprocessing). It is a heuristic:
    a cast shadow on the wall beside the head moves the centre towards the
    shadow. On the Yale ``leftlight`` and ``rightlight`` images the box sits a
    median 44-45 columns (at most 87) away from the same subject's ``normal``
    image, against 1-3 columns (at most 28) for the other conditions.

    Call it with a grey image ``(height, width)`` to get ``(left, top, right,
    bottom)``; pass it as ``crop=`` to the image loaders.
    """

    width: int = 144
    height: int = 160
    top_margin: int = 25
    threshold: float = 0.55
    min_row_pixels: int = 15
    upper_fraction: float = 0.8
    border: int = 5

    def __post_init__(self) -> None:
        minimum = {"width": 1, "height": 1, "min_row_pixels": 1, "top_margin": 0, "border": 0}
        for name, low in minimum.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"FaceCrop.{name} must be an int >= {low}, got {value!r}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"FaceCrop.threshold must be in (0, 1], got {self.threshold!r}")
        if not 0.0 < self.upper_fraction <= 1.0:
            raise ValueError(f"FaceCrop.upper_fraction must be in (0, 1], got {self.upper_fraction!r}")

    def __call__(self, grey: np.ndarray) -> Box:
        grey = np.asarray(grey, dtype=np.float64)
        if grey.ndim != 2:
            raise ValueError(f"FaceCrop expects a grey image (height, width), got shape {grey.shape}")
        rows, cols = grey.shape
        if self.width > cols or self.height > rows:
            raise DataValidationError(
                f"face box {self.width} x {self.height} (width x height) does not fit in an image of {cols} x {rows}"
            )
        head = grey < self.threshold
        head[:, : self.border] = False
        head[:, cols - self.border :] = False
        counts = head[: max(int(round(self.upper_fraction * rows)), 1)].sum(axis=0)
        total = counts.sum()
        centre = int(round((counts * np.arange(cols)).sum() / total)) if total else cols // 2
        band = head[:, max(centre - self.width // 2, 0) : centre + self.width // 2].sum(axis=1)
        above = np.flatnonzero(band > self.min_row_pixels)
        top = int(above[0]) + self.top_margin if len(above) else 0
        top = min(max(top, 0), rows - self.height)
        left = min(max(centre - self.width // 2, 0), cols - self.width)
        return left, top, left + self.width, top + self.height


#: Per-image face box for ``load_yale_faces`` (``crop=YALE_FACE_CROP``): 144 wide,
#: 160 high, centred on the head (use with ``size=YALE_FACE_SIZE``).
YALE_FACE_CROP: FaceCrop = FaceCrop()


# --------------------------------------------------------------------------- image reading
def _resample_box() -> int:
    from PIL import Image

    return getattr(Image, "Resampling", Image).BOX


def _read_image(path: Path, *, grayscale: bool, crop: CropSpec | None, size: Size | None) -> np.ndarray:
    """One image as float32 (channels, height, width) in [0, 1]."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            if grayscale and im.mode in _SIXTEEN_BIT_MODES:
                # 16-bit grey (Pillow opens 16-bit PNGs as "I;16" or "I"): keep the precision.
                channels = [Image.fromarray(np.asarray(im, dtype=np.float32))]
                scale = 65535.0
            else:
                im = im.convert("L" if grayscale else "RGB")
                channels = [ch.convert("F") for ch in im.split()]
                scale = 255.0
    except UnidentifiedImageError:
        raise DataValidationError(
            f"{path}: not an image file that Pillow can read (expected e.g. GIF, PNG, JPEG)"
        ) from None
    except OSError as exc:
        raise DataValidationError(f"{path}: cannot read the image ({exc})") from exc

    width, height = channels[0].size
    if callable(crop):
        grey = np.mean([np.asarray(ch, dtype=np.float64) for ch in channels], axis=0) / scale
        crop = _check_crop(tuple(int(v) for v in crop(grey)))
    if crop is not None:
        if crop[2] > width or crop[3] > height:
            raise DataValidationError(
                f"{path}: crop box {crop} (left, top, right, bottom) does not fit in the image "
                f"of width {width} and height {height}"
            )
        channels = [ch.crop(crop) for ch in channels]
    if size is not None:
        resample = _resample_box()
        channels = [ch.resize((size[1], size[0]), resample=resample) for ch in channels]
    out = np.stack([np.asarray(ch, dtype=np.float32) for ch in channels]) / np.float32(scale)
    return np.clip(out, 0.0, 1.0, out=out)


def _assemble(
    paths: list[Path],
    regular: list[str],
    private: list[str],
    *,
    size: Size | None,
    grayscale: bool,
    crop: CropSpec | None,
) -> TwoLabelImages:
    images = []
    first_shape: tuple[int, ...] | None = None
    for path in paths:
        img = _read_image(path, grayscale=grayscale, crop=crop, size=size)
        if first_shape is None:
            first_shape = img.shape
        elif img.shape != first_shape:
            raise DataValidationError(
                f"images differ in size: {paths[0]} is {first_shape[1]} x {first_shape[2]} "
                f"(height x width), {path} is {img.shape[1]} x {img.shape[2]}; pass "
                f"size=(height, width) to resize them all (and/or crop=(left, top, right, "
                f"bottom))"
            )
        images.append(img)
    regular_names = sorted(set(regular))
    private_names = sorted(set(private))
    r_index = {name: i for i, name in enumerate(regular_names)}
    p_index = {name: i for i, name in enumerate(private_names)}
    return TwoLabelImages(
        images=np.ascontiguousarray(np.stack(images), dtype=np.float32),
        regular=np.array([r_index[v] for v in regular], dtype=np.int64),
        private=np.array([p_index[v] for v in private], dtype=np.int64),
        regular_names=regular_names,
        private_names=private_names,
        files=[str(p) for p in paths],
    )


# --------------------------------------------------------------------------- loaders
def load_image_folder(
    directory: PathLike,
    pattern: str | re.Pattern[str],
    *,
    size: Size | None = None,
    grayscale: bool = True,
    crop: CropSpec | None = None,
) -> TwoLabelImages:
    """Load the images of a folder whose file names carry both labels.

    Every file of ``directory`` (not its subfolders) whose name fully matches
    ``pattern`` is read with Pillow, whatever its extension (the Yale files,
    for instance, are GIFs without one); the named groups ``regular`` and
    ``private`` of the match give its labels. Other files are ignored.

    Parameters
    ----------
    directory : str or os.PathLike
        The folder.
    pattern : str or re.Pattern
        Regular expression matched with ``fullmatch`` against each file name;
        it must have the named groups ``regular`` and ``private``, e.g. for
        Yale ``r"subject(?P<private>\\d+)\\.(?P<regular>[a-z]+)"``.
    size : (height, width) or None, default None
        Resize every image (after the crop) with box (area-averaging,
        antialiased) resampling. ``None`` keeps the size; the images must
        then all have the same size.
    grayscale : bool, default True
        Convert to one grey channel; else to three RGB channels.
    crop : (left, top, right, bottom), callable or None, default None
        Box in pixels (right and bottom exclusive) cut out before resizing, or a
        function of each grey image ``(height, width)`` in [0, 1] (the channel
        mean for RGB) returning that image's box, e.g. ``FaceCrop``.

    Returns
    -------
    TwoLabelImages
        ``images`` float32 of shape (n, 1 or 3, height, width) in [0, 1],
        rows in the order of the sorted file names.

    Raises
    ------
    ValueError
        If ``pattern`` lacks a named group, or ``size`` / ``crop`` is malformed.
    FileNotFoundError
        If ``directory`` does not exist or no file name matches ``pattern``.
    DataValidationError
        If a matching file is not a readable image, a match leaves a label
        empty, the crop does not fit an image, or the images differ in size
        and ``size`` is ``None``.
    """
    directory = Path(directory).expanduser()
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    missing = [g for g in ("regular", "private") if g not in regex.groupindex]
    if missing:
        raise ValueError(
            f"pattern '{regex.pattern}' lacks the named group(s) {', '.join(f'(?P<{g}>...)' for g in missing)}"
        )
    size, crop = _check_size(size), _check_crop(crop)
    if not directory.is_dir():
        raise FileNotFoundError(f"image folder not found: {directory}")

    paths: list[Path] = []
    regular: list[str] = []
    private: list[str] = []
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        match = regex.fullmatch(path.name)
        if match is None or not path.is_file():
            continue
        r, p = match.group("regular"), match.group("private")
        if not r or not p:
            raise DataValidationError(
                f"{path}: file name matches '{regex.pattern}' but leaves the regular or "
                f"private label empty (regular={r!r}, private={p!r})"
            )
        paths.append(path)
        regular.append(r)
        private.append(p)
    if not paths:
        raise FileNotFoundError(f"no file in {directory} has a name that fully matches the pattern '{regex.pattern}'")
    return _assemble(paths, regular, private, size=size, grayscale=grayscale, crop=crop)


def load_two_label_csv(
    csv_path: PathLike,
    *,
    image_column: str = "path",
    regular_column: str = "regular",
    private_column: str = "private",
    size: Size | None = None,
    grayscale: bool = True,
    crop: CropSpec | None = None,
) -> TwoLabelImages:
    """Load images listed in a CSV file with their regular and private labels.

    The CSV (comma-separated, with a header row, UTF-8) has one row per image;
    blank lines are skipped and cells are stripped of surrounding blanks.
    Image paths are relative to the CSV's folder, or absolute.

    Parameters
    ----------
    csv_path : str or os.PathLike
        The CSV file.
    image_column, regular_column, private_column : str
        Header names of the image path and of the two label columns (any
        other columns are ignored).
    size, grayscale, crop
        As in ``load_image_folder``.

    Returns
    -------
    TwoLabelImages
        ``images`` float32 of shape (n, 1 or 3, height, width) in [0, 1],
        rows in the order of the CSV.

    Raises
    ------
    FileNotFoundError
        If the CSV or an image it lists does not exist (the message names the
        path and the CSV line).
    DataValidationError
        Empty CSV (no header or no rows), a missing column (the message lists
        the columns found), a row with the wrong number of fields, an empty
        cell in one of the three columns, an unreadable image, or images of
        different sizes with ``size`` ``None``.
    """
    csv_path = Path(csv_path).expanduser()
    size, crop = _check_size(size), _check_crop(crop)
    if not csv_path.is_file():
        raise FileNotFoundError(f"CSV file not found: {csv_path}")
    text = csv_path.read_text(encoding="utf-8-sig")
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for row in reader:
        if row and any(cell.strip() for cell in row):
            header = [cell.strip() for cell in row]
            break
    if header is None:
        raise DataValidationError(f"{csv_path}: empty CSV file (no header row)")
    columns = {"image": image_column, "regular": regular_column, "private": private_column}
    for role, name in columns.items():
        if name not in header:
            raise DataValidationError(f"{csv_path}: no {role} column {name!r}; columns found: {header}")
        if header.count(name) > 1:
            raise DataValidationError(f"{csv_path}: column {name!r} appears more than once")
    idx = {role: header.index(name) for role, name in columns.items()}

    base = csv_path.parent
    paths: list[Path] = []
    regular: list[str] = []
    private: list[str] = []
    for row in reader:
        if not row or not any(cell.strip() for cell in row):
            continue
        line = reader.line_num
        if len(row) != len(header):
            raise DataValidationError(f"{csv_path}: line {line} has {len(row)} fields, the header has {len(header)}")
        cells = {role: row[i].strip() for role, i in idx.items()}
        for role, value in cells.items():
            if not value:
                raise DataValidationError(f"{csv_path}: empty {columns[role]!r} cell on line {line}")
        image = Path(cells["image"]).expanduser()
        image = image if image.is_absolute() else base / image
        if not image.is_file():
            raise FileNotFoundError(
                f"{csv_path}, line {line}: image file not found: {image} (relative paths are "
                f"taken from the CSV's folder {base})"
            )
        paths.append(image)
        regular.append(cells["regular"])
        private.append(cells["private"])
    if not paths:
        raise DataValidationError(f"{csv_path}: the CSV has a header but no data rows")
    return _assemble(paths, regular, private, size=size, grayscale=grayscale, crop=crop)


def load_yale_faces(
    data_dir: PathLike | None = None,
    *,
    size: Size | None = YALE_DEFAULT_SIZE,
    crop: CropSpec | None = YALE_DEFAULT_CROP,
) -> TwoLabelImages:
    """Load the Yale Face Database: private label = subject, regular label = condition.

    Reads ``<data_dir>/faces/yale/subjectNN.<condition>`` (or ``<data_dir>/yale/``):
    grey GIFs of 320 x 243 pixels (width x height), without extension
    (``.gif`` is accepted too), of 15 subjects under the 11 conditions of
    ``YALE_CONDITIONS``. The usual copy has 164 images
    (``subject01.centerlight`` is missing from it); other files are ignored.

    Defaults. The faces are roughly frontal but their horizontal position
    varies by subject: the head (hair included) spans columns 33-220 for
    subject 06 but 135-291 for subject 12, and the heads reach from about
    row 10 to the shoulders at the bottom edge. ``YALE_DEFAULT_CROP``
    ``(32, 2, 288, 242)`` therefore only cuts the empty 32-column margins at
    either side (the strips beside a face that are wall or cast shadow) and
    the first two rows (a dark scan line in some files), leaving a box of
    256 x 240 (width x height) that keeps every face whole. A tighter,
    portrait box would cut the cheeks of subjects 06 or 12. The box shrinks
    exactly 8-fold to ``YALE_DEFAULT_SIZE`` ``(30, 32)`` (height, width):
    each pixel is the mean of an 8 x 8 block, the aspect ratio is kept, and
    the 960 pixels are close to the 29 x 37 = 1073 pixels of the
    anonymization experiments of Feutry et al. (2018).

    Centred faces. With the fixed box, where a head sits tells who it is, and
    an expression shows at a different place for every subject.
    ``crop=YALE_FACE_CROP, size=YALE_FACE_SIZE`` instead cuts a 144 x 160 box
    around each head (found in that image alone, ``FaceCrop``) and shrinks
    it 4-fold to 40 x 36: forehead to chin, the eyes at about the same place in
    every image. It makes the condition easier and the identity harder to
    learn from the pixels (by how much: the data-set card,
    datasets/yale-faces.md).

    Parameters
    ----------
    data_dir : str, os.PathLike or None
        The data directory; ``None`` uses ``dp_proto.data.default_data_dir``.
    size : (height, width) or None, default (30, 32)
        Output size (box resampling); ``None`` keeps the cropped size.
    crop : (left, top, right, bottom), callable or None, default (32, 2, 288, 242)
        Box cut out before resizing; ``None`` keeps the whole 320 x 243 image;
        ``YALE_FACE_CROP`` (a ``FaceCrop``) centres each face in its
        own 144 x 160 box (then use ``size=YALE_FACE_SIZE``, ``(40, 36)``).

    Returns
    -------
    TwoLabelImages
        ``images`` float32 of shape (n, 1, height, width) in [0, 1] (164 x 1 x
        30 x 32 with the defaults), ``private_names`` the subject numbers
        ``"01"``..``"15"``, ``regular_names`` the conditions; rows sorted by
        file name.

    Raises
    ------
    FileNotFoundError
        If the folder is absent (the message lists the paths tried) or holds
        no Yale file.
    DataValidationError
        If a file is not a readable image or the crop does not fit.
    """
    hint = (
        "Put the Yale Face Database (Belhumeur, Hespanha & Kriegman; files named "
        "subjectNN.<condition>) into <data_dir>/faces/yale/."
    )
    root = _resolve_data_dir(data_dir, hint)
    candidates = [root / "faces" / "yale", root / "yale"]
    folder = next((p for p in candidates if p.is_dir()), None)
    if folder is None:
        listing = "\n  ".join(str(p) for p in candidates)
        raise FileNotFoundError(f"Yale faces folder not found; tried:\n  {listing}\n{hint}")
    return load_image_folder(folder, YALE_PATTERN, size=size, grayscale=True, crop=crop)
