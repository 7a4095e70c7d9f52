"""Deprecated: split by kind into the loaders of ``dp_proto.data.loaders`` (``common``, ``mnist``, ``uci``) (this path is removed in the next release)."""

from dp_proto._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "DATA_DIR_ENV_VAR": "dp_proto.data.loaders.common",
        "IDX_DTYPES": "dp_proto.data.loaders.mnist",
        "MNIST_FILES": "dp_proto.data.loaders.mnist",
        "PathLike": "dp_proto.data.loaders.common",
        "UCI_DATASETS": "dp_proto.data.loaders.uci",
        "_GZIP_MAGIC": "dp_proto.data.loaders.common",
        "_UCI_DROP_LEADING": "dp_proto.data.loaders.uci",
        "_UCI_EXPECTED_RAW_FEATURES": "dp_proto.data.loaders.uci",
        "_check_name": "dp_proto.data.loaders.common",
        "_find_bad_cell": "dp_proto.data.loaders.uci",
        "_mnist_candidates": "dp_proto.data.loaders.mnist",
        "_parse_labels": "dp_proto.data.loaders.uci",
        "_read_bytes": "dp_proto.data.loaders.common",
        "_resolve_data_dir": "dp_proto.data.loaders.common",
        "default_data_dir": "dp_proto.data.loaders.common",
        "load_mnist": "dp_proto.data.loaders.mnist",
        "load_uci": "dp_proto.data.loaders.uci",
        "read_idx": "dp_proto.data.loaders.mnist",
        "read_tsv": "dp_proto.data.loaders.uci",
    },
)
