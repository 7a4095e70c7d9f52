"""The anonymizer's training functions check their inputs as the estimators do.

Records may be numpy arrays or tensors; NaN and inf are refused with the rows named;
every rate, learning rate and epoch count is range-checked with a message naming the
parameter. One test per bad input. Also: the progress bar (on by default, on stderr)
and the one Opacus notice that is silenced (and the privacy warnings that are not).
"""

import math
import warnings

import numpy as np
import pytest
import torch

from dp_proto.anonymizer import Anonymizer
from dp_proto.anonymizer.release import AnonymizerEncoder
from dp_proto.anonymizer.validation import as_records
from dp_proto.data import make_entangled_task
from dp_proto.exceptions import DataValidationError, PrivacyLeakWarning
from dp_proto.lightning.anonymizer import AnonymizerFit, fit_anonymizer
from dp_proto.lightning.dp_anonymizer import fit_dp_anonymizer
from dp_proto.lvq.private.opacus_adapter import HOOK_NOTICE, quiet_opacus_hook_notice

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
    pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\)"),
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`"),
]

ONE_EPOCH = dict(pretrain_regular_epochs=1, pretrain_private_epochs=0, adversarial_epochs=0)
DP = dict(epsilon=5.0, delta=1e-5, sampling_rate=0.25, num_regular=4, num_private=8)


def _task(n=80):
    t = make_entangled_task(n, seed=0)
    return t.x, t.regular, t.private  # numpy: float64 records, int labels


def _small():
    return Anonymizer.mlp(20, 4, 8, representation_dim=4, encoder_hidden=(8,), head_hidden=(4,))


def _with_bad_row(value):
    x, y, s = _task()
    x = x.copy()
    x[3, 5] = value
    return x, y, s


# --------------------------------------------------------------------------- records
@pytest.mark.parametrize("value, kind", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_fit_anonymizer_refuses_non_finite_records(value, kind):
    with pytest.raises(DataValidationError, match=rf"Input x contains {kind} in row\(s\) \[3\]"):
        fit_anonymizer(*_with_bad_row(value), **ONE_EPOCH)


def test_fit_anonymizer_refuses_nan_in_a_tensor():
    x, y, s = (torch.as_tensor(a) for a in _with_bad_row(np.nan))
    with pytest.raises(DataValidationError, match=r"Input x contains NaN in row\(s\) \[3\]"):
        fit_anonymizer(x, y, s, **ONE_EPOCH)


def test_fit_dp_anonymizer_refuses_nan_records():
    with pytest.raises(DataValidationError, match=r"Input x contains NaN in row\(s\) \[3\]"):
        fit_dp_anonymizer(*_with_bad_row(np.nan), **DP, **ONE_EPOCH)


def test_held_out_records_are_checked_too():
    x, y, s = _task()
    bad = _with_bad_row(np.inf)
    with pytest.raises(DataValidationError, match=r"val_data x contains inf in row\(s\) \[3\]"):
        fit_anonymizer(x, y, s, val_data=bad, **ONE_EPOCH)


def test_val_data_must_be_a_triple():
    x, y, s = _task()
    with pytest.raises(ValueError, match=r"val_data must be a tuple \(x, regular, private\)"):
        fit_anonymizer(x, y, s, val_data=(x, y), **ONE_EPOCH)


def test_non_numeric_records_are_refused():
    x, y, s = _task()
    with pytest.raises(DataValidationError, match="x must be numeric"):
        fit_anonymizer(x.astype(str), y, s, **ONE_EPOCH)


def test_records_need_a_row_per_record():
    x, y, s = _task()
    with pytest.raises(DataValidationError, match=r"x must have shape \(n, \.\.\.\)"):
        fit_anonymizer(x[:, 0], y, s, **ONE_EPOCH)


def test_no_record_is_refused():
    with pytest.raises(DataValidationError, match="holds no record"):
        as_records(np.zeros((0, 4)))


def test_boolean_tensors_are_refused():
    with pytest.raises(DataValidationError, match="real numbers"):
        as_records(torch.zeros(3, 2, dtype=torch.bool))


def test_numpy_records_and_labels_train_like_tensors():
    x, y, s = _task()
    kwargs = dict(anonymizer=_small, batch_size=20, enable_progress_bar=False, **ONE_EPOCH)
    from_numpy = fit_anonymizer(x, y, s, **kwargs)
    from_torch = fit_anonymizer(
        torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y), torch.as_tensor(s), **kwargs
    )
    for a, b in zip(from_numpy.module.parameters(), from_torch.module.parameters(), strict=True):
        assert torch.equal(a, b)
    z = AnonymizerEncoder(from_numpy.module.anonymizer.encoder).transform(x)  # numpy in, numpy out
    assert isinstance(z, np.ndarray) and z.shape == (len(x), 4) and z.dtype == np.float32


def test_fit_dp_anonymizer_takes_numpy_records_and_a_factory():
    x, y, s = _task()
    built = []

    def factory():
        built.append(_small())
        return built[-1]

    fit = fit_dp_anonymizer(
        x, y, s, anonymizer=factory, enable_progress_bar=False, noise_multiplier=1.0, **DP, **ONE_EPOCH
    )
    assert type(fit) is not tuple and isinstance(fit, AnonymizerFit)
    assert len(built) == 1 and fit.module.anonymizer is built[0]
    assert fit.ledger is fit.module.ledger and fit.ledger.events


# --------------------------------------------------------------------------- the networks
@pytest.mark.parametrize("fit", [fit_anonymizer, fit_dp_anonymizer], ids=["fit_anonymizer", "fit_dp_anonymizer"])
def test_a_factory_must_return_an_anonymizer(fit):
    extra = DP if fit is fit_dp_anonymizer else {}
    with pytest.raises(TypeError, match="the anonymizer factory's result must be an Anonymizer"):
        fit(*_task(), anonymizer=lambda: torch.nn.Linear(20, 4), **extra, **ONE_EPOCH)


def test_anonymizer_must_be_a_module_a_factory_or_none():
    with pytest.raises(TypeError, match="anonymizer must be an Anonymizer, a factory of one or None"):
        fit_anonymizer(*_task(), anonymizer="mlp", **ONE_EPOCH)


# --------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lam": -1.0}, "lam must be a finite number >= 0"),
        ({"lam": math.nan}, "lam must be a finite number >= 0"),
        ({"lam": math.inf}, "lam must be a finite number >= 0"),
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"lr": math.nan}, "lr must be a finite number > 0"),
        ({"encoder_lr": -0.1}, "encoder_lr must be a finite number > 0"),
        ({"momentum": 1.0}, r"momentum must lie in \[0, 1\)"),
        ({"optimizer": "adam", "momentum": -0.5}, r"momentum must lie in \[0, 1\)"),
        ({"weight_decay": -1e-4}, "weight_decay must be a finite number >= 0"),
        ({"pretrain_regular_epochs": -1}, "pretrain_regular_epochs must be an int >= 0"),
        ({"pretrain_private_epochs": 1.5}, "pretrain_private_epochs must be an int >= 0"),
        ({"adversarial_epochs": -2}, "adversarial_epochs must be an int >= 0"),
        ({"adversarial_epochs": True}, "adversarial_epochs must be an int >= 0"),
        ({"pretrain_regular_epochs": 0}, "the run has no epoch"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"seed": -1}, "seed must be an int >= 0"),
        ({"seed": 2**32}, r"seed must be an int in \[0, 2\*\*32\)"),
        ({"toggle_steps": 0}, "toggle_steps must be an int >= 1"),
        ({"mode": "alternate"}, "mode must be one of"),
        ({"optimizer": "sgd"}, "optimizer must be 'nesterov' or 'adam'"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_fit_anonymizer_names_a_bad_setting(kwargs, match):
    settings = {**ONE_EPOCH, "enable_progress_bar": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_anonymizer(*_task(), **settings)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0"),
        ({"epsilon": math.inf}, "epsilon must be a finite number > 0"),
        ({"delta": 0.0}, r"delta must lie in \(0, 1\)"),
        ({"delta": 1.0}, r"delta must lie in \(0, 1\)"),
        ({"sampling_rate": 0.0}, r"sampling_rate must lie in \(0, 1\]"),
        ({"sampling_rate": 1.5}, r"sampling_rate must lie in \(0, 1\]"),
        ({"max_grad_norm": 0.0}, "max_grad_norm must be a finite number > 0"),
        ({"noise_multiplier": -1.0}, "noise_multiplier must be a finite number >= 0"),
        ({"prior_fraction": 0.0}, r"prior_fraction must lie in \(0, 1\)"),
        ({"prior_fraction": 1.0}, r"prior_fraction must lie in \(0, 1\)"),
        ({"num_private": 1}, "num_private must be an int >= 2"),
        ({"num_regular": 2.0}, "num_regular must be an int >= 2"),
        ({"prior": torch.full((4,), 0.25), "expected_batch_size": 5.0}, "prior must have num_private = 8 entries"),
        ({"prior": [0.5, 0.6], "expected_batch_size": 5.0}, "probability vector"),
        ({"expected_batch_size": 0.0}, "expected_batch_size must be a public number > 0"),
        ({"lam": -1.0}, "lam must be a finite number >= 0"),
        ({"adversarial_epochs": -1}, "adversarial_epochs must be an int >= 0"),
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"mode": "simultaneous"}, "toggle"),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_fit_dp_anonymizer_names_a_bad_setting(kwargs, match):
    settings = {**DP, **ONE_EPOCH, "enable_progress_bar": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_dp_anonymizer(*_task(), **settings)


# --------------------------------------------------------------------------- progress
def test_the_progress_bar_is_on_by_default_and_goes_to_stderr(capsys):
    fit_anonymizer(*_task(), anonymizer=_small, batch_size=40, **ONE_EPOCH)
    out, err = capsys.readouterr()
    assert "epoch 1/1" in err.lower() and "epoch" not in out.lower()  # off a terminal: one line per epoch
    fit_anonymizer(*_task(), anonymizer=_small, batch_size=40, enable_progress_bar=False, **ONE_EPOCH)
    out, err = capsys.readouterr()
    assert "epoch" not in (err + out).lower()


# --------------------------------------------------------------------------- warnings
def test_opacus_hook_notices_are_silenced_but_privacy_warnings_are_not():
    x, y, s = _task()
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        fit_dp_anonymizer(
            x,
            y,
            s,
            epsilon=5.0,
            delta=1e-5,
            sampling_rate=0.25,
            noise_multiplier=1.0,
            anonymizer=_small,
            enable_progress_bar=False,
            pretrain_regular_epochs=1,
            pretrain_private_epochs=1,
            adversarial_epochs=1,
            per_record=False,  # Opacus' batched per-sample gradients, whose hooks give the notices
        )  # no class counts: a PrivacyLeakWarning
        ours = [f for f in warnings.filters if getattr(f[1], "pattern", None) == HOOK_NOTICE]
    messages = [str(w.message) for w in caught]
    assert not any("Full backward hook" in m for m in messages)
    assert any(issubclass(w.category, PrivacyLeakWarning) for w in caught)
    assert len(ours) == 1  # added once, narrowly: that message, UserWarning, the callers of backward
    action, _, category, module, _ = ours[0]
    assert action == "ignore" and category is UserWarning
    assert module.match("lightning.pytorch.core.module") and module.match("dp_proto.lvq.private.dpsgd")
    assert not module.match("torch.utils.hooks") and not module.match("opacus.privacy_engine")


def test_the_hook_filter_is_added_once():
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("error", append=True)  # anything not filtered raises
        quiet_opacus_hook_notice()
        quiet_opacus_hook_notice()
        assert sum(getattr(f[1], "pattern", None) == HOOK_NOTICE for f in warnings.filters) == 1
        warnings.warn_explicit(
            "Full backward hook is firing when gradients are computed with respect to module outputs since no "
            "inputs require gradients. See ...",
            UserWarning,
            "module.py",
            1,
            module="lightning.pytorch.core.module",
        )  # ignored (it would raise otherwise)
        with pytest.raises(PrivacyLeakWarning):
            warnings.warn("a privacy warning still reaches the user", PrivacyLeakWarning, stacklevel=1)
