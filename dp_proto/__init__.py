"""dp-proto: privacy-preserving learning with prototype models.

Subpackages
-----------
``dp_proto.lvq``        distances, prototype layers, GLVQ loss, initialisers, estimators
``dp_proto.privacy``    mechanisms and the privacy ledger
``dp_proto.lightning``  LightningModules, DataModules and callbacks
``dp_proto.data``       bundled, file-based and synthetic data sets
"""

from dp_proto.exceptions import (
    DataValidationError,
    DomainWarning,
    PrivacyBudgetExceededError,
    PrivacyLeakWarning,
)

__version__ = "0.1.0"

__all__ = [
    "DataValidationError",
    "DomainWarning",
    "PrivacyBudgetExceededError",
    "PrivacyLeakWarning",
    "__version__",
]
