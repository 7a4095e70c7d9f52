"""Fixed, data-independent feature extractors to put a private prototype head on.

``Scattering2D``  the 2-D wavelet scattering transform (ScatterNet of Tramèr & Boneh 2021):
                  no trainable parameters and no data read, so it costs no privacy budget
"""

from dp_proto.features.scattering import Scattering2D

__all__ = ["Scattering2D"]
