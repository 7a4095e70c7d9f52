"""Deprecated: split by kind into ``dp_proto.data.loaders.images`` and ``dp_proto.data.synthetic.entangled`` (this path is removed in the next release)."""

from dp_proto._deprecation import moved_names

__getattr__ = moved_names(
    __name__,
    {
        "Box": "dp_proto.data.loaders.images",
        "CropSpec": "dp_proto.data.loaders.images",
        "EntangledTask": "dp_proto.data.synthetic.entangled",
        "FaceCrop": "dp_proto.data.loaders.images",
        "PathLike": "dp_proto.data.loaders.common",
        "Size": "dp_proto.data.loaders.images",
        "TwoLabelImages": "dp_proto.data.loaders.images",
        "YALE_CONDITIONS": "dp_proto.data.loaders.images",
        "YALE_DEFAULT_CROP": "dp_proto.data.loaders.images",
        "YALE_DEFAULT_SIZE": "dp_proto.data.loaders.images",
        "YALE_FACE_CROP": "dp_proto.data.loaders.images",
        "YALE_FACE_SIZE": "dp_proto.data.loaders.images",
        "YALE_PATTERN": "dp_proto.data.loaders.images",
        "_SIXTEEN_BIT_MODES": "dp_proto.data.loaders.images",
        "_assemble": "dp_proto.data.loaders.images",
        "_check_crop": "dp_proto.data.loaders.images",
        "_check_probability": "dp_proto.data.synthetic.entangled",
        "_check_size": "dp_proto.data.loaders.images",
        "_read_image": "dp_proto.data.loaders.images",
        "_resample_box": "dp_proto.data.loaders.images",
        "entangled_label_joint": "dp_proto.data.synthetic.entangled",
        "load_image_folder": "dp_proto.data.loaders.images",
        "load_two_label_csv": "dp_proto.data.loaders.images",
        "load_yale_faces": "dp_proto.data.loaders.images",
        "make_entangled_task": "dp_proto.data.synthetic.entangled",
    },
)
