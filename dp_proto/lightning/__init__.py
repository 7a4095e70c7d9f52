"""Lightning integration: data modules, training modules and experiment runner.

:class:`ArrayDataModule`  in-memory arrays, stratified splits, scaling fitted on train only
:class:`LVQModule`        non-private GLVQ/GMLVQ/LGMLVQ training with TensorBoard pictures
:class:`PrivacySpendCallback` epsilon per epoch in TensorBoard, the ledger in checkpoints
:func:`run_experiment`    builds data, model and trainer from a config dict (YAML files in ``training/``)
"""

from dp_proto.lightning.callbacks import PrivacySpendCallback
from dp_proto.lightning.datamodule import ArrayDataModule
from dp_proto.lightning.experiment import DEFAULT_CONFIG, load_config, run_experiment
from dp_proto.lightning.module import LVQModule

__all__ = ["ArrayDataModule", "PrivacySpendCallback", "LVQModule", "DEFAULT_CONFIG", "load_config", "run_experiment"]
