"""Data sets by kind: scikit-learn's bundled sets, loaders of files in a data directory
(``.loaders``), sensor-network windows and geometry, synthetic data (``.synthetic``).

Nothing here downloads implicitly; the ``download_*`` functions must be called
explicitly and are the only ones that use the network.

Bundled (``dp_proto.data.bundled``)
--------------------------------------
``load_bundled(name)``
    "digits", "iris", "wine", "breast_cancer" -> ``(X float64, y int64)``.

Files in a data directory (``dp_proto.data.loaders``: ``common``, ``mnist``, ``uci``)
------------------------------------------------------------------------------------
``default_data_dir()``
    ``Path($DP_PROTO_DATA_DIR)`` or ``None``.
``read_idx(path)``
    One idx array (MNIST format), gzipped or not.
``load_mnist(data_dir=None, split="train", flatten=False)``
    ``(X uint8 (n, 28, 28) or (n, 784), y int64)`` from ``data_dir/mnist/``.
``read_tsv(path, target="target")``
    ``(X float64, y, feature_names)`` from a tab-separated table.
``load_uci(name, data_dir=None)``
    ``(X, y)`` from ``data_dir/uci/<name>.tsv.gz`` (names in ``UCI_DATASETS``;
    "vowel" drops its train/test flag, speaker and sex columns).

Downloads (``dp_proto.data.download``)
-----------------------------------------
``download_mnist(data_dir, base_url=DEFAULT_MNIST_MIRROR, force=False, opener=None, ...)``
    The four MNIST files into ``data_dir/mnist/``, md5-checked, atomic.
``download_uci(name, data_dir, url, opener=None, ...)``
    A TSV table from ``url`` into ``data_dir/uci/<name>.tsv.gz``.

Two-label images for anonymization (``dp_proto.data.loaders.images``)
--------------------------------------------------------------------------
``load_image_folder(directory, pattern, size=None, grayscale=True, crop=None)``
    Images whose file names match ``pattern`` (groups ``regular``, ``private``)
    -> ``TwoLabelImages`` (images float32 (n, c, h, w) in [0, 1], label indices, names).
``load_two_label_csv(csv_path, image_column="path", regular_column="regular", ...)``
    The same from a CSV of image paths and labels.
``load_yale_faces(data_dir=None, size=YALE_DEFAULT_SIZE, crop=YALE_DEFAULT_CROP)``
    Yale faces from ``data_dir/faces/yale/``: private = subject, regular = condition;
    ``crop=YALE_FACE_CROP, size=YALE_FACE_SIZE`` centres each face (``FaceCrop``).
``make_entangled_task(n, num_regular=4, num_private=8, entanglement=0.5, ...)``
    (``dp_proto.data.synthetic.entangled``) Synthetic features with a known label dependence -> ``EntangledTask``.
``feature_relevance_set(n_samples=3000, n_strong=3, n_redundant=10, n_irrelevant=37, ...)``
    (``dp_proto.data.synthetic.relevance``) Planted strongly relevant, redundant and
    irrelevant features (the FRI set of Brinkrolf 2023, ch. 5) -> ``(X, y, kinds)``.

Traffic counts for learning from label proportions (``dp_proto.data.loaders.scats``,
``dp_proto.data.sensors``, ``dp_proto.data.geometry``)
----------------------------------------------------------------------------------------
``load_scats_counts(data_dir=None, min_days=14)``
    SCATS loop-detector counts -> ``TrafficNetwork`` (one 15-minute series per detector,
    coordinates, dropped detectors with the reason).
``node_datasets(network, window=5, horizon=1)``
    Sliding windows per detector -> ``NodeData`` (features, flow-class labels, time).
``discretize_flow``, ``nearest_neighbours``, ``haversine_distances``, ``time_block_folds``
    Flow classes (``FLOW_BIN_EDGES``), geographic neighbours, time-aligned folds (the batch
    grid of the LLP protocol is ``dp_proto.llp.BatchGrid``).

Motion windows (``dp_proto.data.loaders.motion``)
-------------------------------------------------
``load_hapt_windows(data_dir=None, *, signals=False)``
    UCI HAPT smartphone signals from ``data_dir/motion/hapt_raw_50hz.npz`` cut into 2.56 s
    windows (50 % overlap) inside each activity segment -> ``HAPTWindows`` (142 features of
    our own per window, activity 0..5 (``HAPT_ACTIVITIES``), volunteer, recording, start,
    segment; with ``signals=True`` the samples, ``(m, 128, 6)`` float32).
``hapt_identity_splits(windows, n_splits=5, test_fraction=0.3, random_state=None)``
    ``(train_rows, test_rows)`` splits of whole segments (no overlapping windows across
    them), every volunteer on both sides, about ``test_fraction`` of each in test.
``hapt_window_features(windows)``
    The 142 features of windows ``(m, n, 6)`` (not the 561 published HAR features).
``sequence_order(windows, rows, order)``
    Indices sorted into ``"time"`` or ``"activity_blocks"`` order.

Synthetic (``dp_proto.data.synthetic.toy``), all ``-> (X float64, y int64)``
------------------------------------------------------------------------------
``two_gaussians_with_outlier(setting="extreme", n_per_class=50, random_state=None)``
``noisy_xor(n_per_cluster=300, extra_bottom_left=0, std=1.0, random_state=None)``
``noisy_xor_unbalanced(n_per_cluster=300, std=1.0, random_state=None)``
``three_gaussians(n_per_class=3000, n_features=2, scale=5.0, random_state=None)``
``three_moons(n_samples=400, noise=0.1, random_state=None)``
``five_gaussians(n_per_class=1500, random_state=None, *, n_samples=None)``

Class merging (``dp_proto.data.loaders.uci``) and subsampling (``dp_proto.data.sampling``)
---------------------------------------------------------------------------------------------
``merge_classes(y, mapping)``
    Relabel through a mapping -> int64 labels.
``load_shuttle_3class(data_dir=None, mapping=SHUTTLE_3CLASS_MAPPING)``
    UCI shuttle (58000 x 9) with classes {1} -> 0, {4} -> 1, {2, 3, 5, 6, 7} -> 2.
``stratified_subsample(X, y, fraction=None, random_state=None, *, n_samples=None, return_indices=False)``
    A class-stratified random subset of the rows (original order kept).
"""

from dp_proto.data.bundled import BUNDLED_NAMES, load_bundled
from dp_proto.data.download import (
    DEFAULT_MNIST_MIRROR,
    MNIST_MD5,
    ChecksumError,
    DownloadError,
    download_mnist,
    download_uci,
)
from dp_proto.data.geometry import (
    haversine_distances,
    nearest_neighbours,
)
from dp_proto.data.loaders.common import (
    DATA_DIR_ENV_VAR,
    default_data_dir,
)
from dp_proto.data.loaders.images import (
    YALE_CONDITIONS,
    YALE_DEFAULT_CROP,
    YALE_DEFAULT_SIZE,
    YALE_FACE_CROP,
    YALE_FACE_SIZE,
    YALE_PATTERN,
    FaceCrop,
    TwoLabelImages,
    load_image_folder,
    load_two_label_csv,
    load_yale_faces,
)
from dp_proto.data.loaders.mnist import (
    load_mnist,
    read_idx,
)
from dp_proto.data.loaders.motion import (
    HAPT_ACTIVITIES,
    HAPTWindows,
    hapt_identity_splits,
    hapt_window_features,
    load_hapt_windows,
    sequence_order,
)
from dp_proto.data.loaders.scats import (
    TrafficNetwork,
    load_scats_counts,
)
from dp_proto.data.loaders.uci import (
    SHUTTLE_3CLASS_MAPPING,
    SHUTTLE_CLASS_NAMES,
    UCI_DATASETS,
    load_shuttle_3class,
    load_uci,
    merge_classes,
    read_tsv,
)
from dp_proto.data.sampling import (
    stratified_subsample,
)
from dp_proto.data.sensors import (
    FLOW_BIN_EDGES,
    NodeData,
    discretize_flow,
    node_datasets,
    sliding_windows,
    time_block_folds,
)
from dp_proto.data.synthetic.entangled import (
    EntangledTask,
    entangled_label_joint,
    make_entangled_task,
)
from dp_proto.data.synthetic.relevance import FEATURE_KINDS, feature_relevance_set
from dp_proto.data.synthetic.toy import (
    FIVE_GAUSSIANS_MEANS,
    OUTLIER_MEANS,
    XOR_CENTERS,
    five_gaussians,
    five_gaussians_covariances,
    noisy_xor,
    noisy_xor_unbalanced,
    three_gaussians,
    three_gaussians_means,
    three_moons,
    two_gaussians_with_outlier,
)

__all__ = [
    "FLOW_BIN_EDGES",
    "NodeData",
    "TrafficNetwork",
    "discretize_flow",
    "haversine_distances",
    "load_scats_counts",
    "nearest_neighbours",
    "node_datasets",
    "sliding_windows",
    "time_block_folds",
    "HAPT_ACTIVITIES",
    "HAPTWindows",
    "hapt_identity_splits",
    "hapt_window_features",
    "load_hapt_windows",
    "sequence_order",
    "BUNDLED_NAMES",
    "DATA_DIR_ENV_VAR",
    "DEFAULT_MNIST_MIRROR",
    "FIVE_GAUSSIANS_MEANS",
    "MNIST_MD5",
    "OUTLIER_MEANS",
    "SHUTTLE_3CLASS_MAPPING",
    "SHUTTLE_CLASS_NAMES",
    "UCI_DATASETS",
    "XOR_CENTERS",
    "YALE_CONDITIONS",
    "YALE_DEFAULT_CROP",
    "YALE_DEFAULT_SIZE",
    "YALE_FACE_CROP",
    "YALE_FACE_SIZE",
    "YALE_PATTERN",
    "ChecksumError",
    "DownloadError",
    "EntangledTask",
    "FaceCrop",
    "TwoLabelImages",
    "default_data_dir",
    "download_mnist",
    "download_uci",
    "entangled_label_joint",
    "five_gaussians",
    "five_gaussians_covariances",
    "load_bundled",
    "load_image_folder",
    "load_mnist",
    "load_shuttle_3class",
    "load_two_label_csv",
    "load_uci",
    "load_yale_faces",
    "make_entangled_task",
    "FEATURE_KINDS",
    "feature_relevance_set",
    "merge_classes",
    "noisy_xor",
    "noisy_xor_unbalanced",
    "read_idx",
    "read_tsv",
    "stratified_subsample",
    "three_gaussians",
    "three_gaussians_means",
    "three_moons",
    "two_gaussians_with_outlier",
]
