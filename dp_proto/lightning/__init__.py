"""Lightning integration: data modules, training modules and experiment runner.

:class:`ArrayDataModule`  in-memory arrays, stratified splits, scaling fitted on train only
:class:`LVQModule`        non-private GLVQ/GMLVQ/LGMLVQ training with TensorBoard pictures
:class:`DPLVQModule`      DP-SGD (Opacus, sound float64 noise from fresh entropy), every step
                          recorded once in a PrivacyLedger, the budget checked per epoch
:class:`PrivacySpendCallback` epsilon per epoch in TensorBoard, the ledger in checkpoints
                          (resuming never resets the spend nor counts a step twice)
:func:`run_experiment`    builds data, model and trainer from a config dict (YAML files in ``training/``)
"""

from dp_proto.lightning.callbacks import PrivacySpendCallback
from dp_proto.lightning.datamodule import ArrayDataModule
from dp_proto.lightning.dp_module import DPLVQModule
from dp_proto.lightning.experiment import DEFAULT_CONFIG, load_config, run_experiment
from dp_proto.lightning.module import LVQModule

__all__ = ["ArrayDataModule", "DPLVQModule", "PrivacySpendCallback", "LVQModule", "DEFAULT_CONFIG", "load_config", "run_experiment"]
