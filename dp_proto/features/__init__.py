"""Fixed, data-independent feature extractors to put a private prototype head on.

``Scattering2D``     the 2-D wavelet scattering transform (ScatterNet of Tramèr & Boneh 2021):
                     no trainable parameters and no data read, so it costs no privacy budget
``GroupNormalizer``  per-record group normalisation of channelled features (Wu & He 2018):
                     each record by its own statistics, so it costs no privacy budget either
``RandomConvFeatures`` random zero-mean filters, a rectifier and average pooling (Saxe et al.
                     2011): a seeded, public map; the fallback where scattering does not fit
``preimage``         the image whose features are closest to a point of the feature space
                     (a prototype): post-processing of a release, no data read
"""

from dp_proto.features.normalize import GroupNormalizer
from dp_proto.features.preimage import preimage
from dp_proto.features.random_conv import RandomConvFeatures
from dp_proto.features.scattering import Scattering2D

__all__ = ["GroupNormalizer", "RandomConvFeatures", "Scattering2D", "preimage"]
