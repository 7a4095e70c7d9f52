"""Lightning integration: data modules, training modules and experiment runner.

``ArrayDataModule``  in-memory arrays, stratified splits, scaling fitted on train only
``LVQModule``        non-private GLVQ/GMLVQ/LGMLVQ training with TensorBoard pictures
``DPLVQModule``      DP-SGD (Opacus, sound float64 noise from fresh entropy), every step
                          recorded once in a PrivacyLedger, the budget checked per epoch
``PrivacySpendCallback`` epsilon per epoch in TensorBoard, the ledger in checkpoints
                          (resuming never resets the spend nor counts a step twice)
``StderrProgressBar``    the trainers' progress on stderr (bars on a terminal, else one
                          line per epoch), so stdout stays free for results
``.anonymizer``, ``.dp_anonymizer`` the anonymizer's training on Lightning

Adapters only: the experiment runners (``run_experiment``, the config loader) live in
``dp_proto.experiments``.
"""

from dp_proto.lightning.callbacks import PrivacySpendCallback, StderrProgressBar
from dp_proto.lightning.datamodule import ArrayDataModule
from dp_proto.lightning.dp_module import DPLVQModule
from dp_proto.lightning.module import LVQModule

__all__ = ["ArrayDataModule", "DPLVQModule", "PrivacySpendCallback", "StderrProgressBar", "LVQModule"]
