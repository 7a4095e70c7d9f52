"""dp-proto: privacy-preserving learning with prototype models.

Subpackages (imports run one way: ``privacy`` <- models <- ``lightning`` <- ``cli``)

``dp_proto.privacy``      model-free DP core: mechanisms, noise, calibration, the privacy ledger
``dp_proto.lvq``          distances, prototype layers, GLVQ loss, initialisers, estimators
``dp_proto.lvq.private``  DP initialisation, DP-SGD, subsample-and-aggregate, DP estimators
``dp_proto.svdd``         private SVDD and the equilibrium-point classifier
``dp_proto.llp``          differentially private learning from label proportions
``dp_proto.anonymizer``   the adversarial anonymizer's modules and losses
``dp_proto.lightning``    LightningModules, DataModules and callbacks
``dp_proto.data``         bundled, file-based and synthetic data sets
``dp_proto.release``      the release format of fitted models; ``dp_proto.load_release(path)``
"""

from typing import TYPE_CHECKING, Any

from dp_proto._version import __version__
from dp_proto.exceptions import (
    DataValidationError,
    DomainWarning,
    PrivacyBudgetExceededError,
    PrivacyLeakWarning,
)

if TYPE_CHECKING:
    from dp_proto.release import load_release

__all__ = [
    "DataValidationError",
    "DomainWarning",
    "PrivacyBudgetExceededError",
    "PrivacyLeakWarning",
    "__version__",
    "load_release",
]


def __getattr__(name: str) -> Any:
    # load_release on first use: `import dp_proto` stays free of numpy and safetensors
    if name == "load_release":
        from dp_proto.release import load_release

        return load_release
    raise AttributeError(f"module 'dp_proto' has no attribute {name!r}")
