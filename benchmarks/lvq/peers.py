"""sklvq (the numpy/scikit-learn LVQ package) as a speed and accuracy peer of dp-proto.

Why a shim: sklvq 0.1.2, its latest release, predates scikit-learn 1.6, which dp-proto
requires. Its estimators call ``self._validate_data(...)``, a ``BaseEstimator`` method
that scikit-learn 1.6 replaced by the function ``sklearn.utils.validation.validate_data``,
and pass ``force_all_finite=`` (renamed ``ensure_all_finite=``) to it and to
``check_array``; so every ``fit`` fails with an ``AttributeError``. :func:`load_sklvq`
monkeypatches, in memory and idempotently, sklvq's base class (``_validate_data`` calls
``validate_data``) and the ``check_array``/``check_X_y`` names its modules imported from
scikit-learn, and only maps the renamed keyword; the installed files are not edited and
sklvq behaves otherwise as it intends.

Not shimmed (outside what our benchmarks reach): ``predict`` on a two-class problem uses
the removed ``np.int``, and the base classes list ``ClassifierMixin`` after
``BaseEstimator``, so scikit-learn's tags do not mark the estimators as classifiers.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from types import ModuleType
from typing import Any

try:
    PEER_NAME = f"sklvq {metadata.version('sklvq')}"
except metadata.PackageNotFoundError:
    PEER_NAME = "sklvq (not installed)"

MODELS = ("GLVQ", "GMLVQ", "LGMLVQ")
SOLVERS = ("default", "lbfgs")

_MARK = "_dp_proto_shim"


def _renamed(kwargs: dict[str, Any]) -> dict[str, Any]:
    if "force_all_finite" in kwargs:
        kwargs = dict(kwargs)
        kwargs["ensure_all_finite"] = kwargs.pop("force_all_finite")
    return kwargs


def _renaming(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **_renamed(kwargs))

    setattr(wrapper, _MARK, True)
    return wrapper


def load_sklvq() -> ModuleType:
    """The ``sklvq`` module, made to work with scikit-learn >= 1.6 (see the module docstring).

    Safe to call any number of times: the shim is applied once.

    Raises:
        ImportError: sklvq is not installed.
    """
    try:
        import sklvq
        from sklvq.models import LVQBaseClass
    except ImportError as exc:
        raise ImportError("the sklvq peer needs the sklvq package: pip install sklvq") from exc
    from sklearn.utils.validation import validate_data

    if not getattr(LVQBaseClass.__dict__.get("_validate_data"), _MARK, False):

        def _validate_data(self, *args, **kwargs):
            return validate_data(self, *args, **_renamed(kwargs))

        setattr(_validate_data, _MARK, True)
        LVQBaseClass._validate_data = _validate_data
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "sklvq" or name.startswith("sklvq.")):
            continue
        for func_name in ("check_array", "check_X_y"):
            func = vars(module).get(func_name)
            if func is not None and not getattr(func, _MARK, False):
                setattr(module, func_name, _renaming(func))
    return sklvq


def sklvq_estimator(model: str, *, solver: str = "default", random_state: int = 0, max_iter: int | None = None):
    """An unfitted sklvq estimator with one prototype per class and otherwise sklvq's defaults.

    sklvq's defaults (0.1.2): prototypes at the class-conditional means plus a uniform
    offset of at most 1e-4 (drawn from ``random_state``), the relative-distance discriminant
    mu = (d+ - d-) / (d+ + d-) summed (not averaged) over the samples, with a sigmoid
    (beta = 1) for GLVQ and GMLVQ but the identity for LGMLVQ; GLVQ uses the squared
    Euclidean distance, GMLVQ one full-rank Omega and LGMLVQ one Omega per prototype, both
    initialised to the identity and rescaled to trace(Omega^T Omega) = 1 after every update.

    Args:
        model: ``"GLVQ"``, ``"GMLVQ"`` or ``"LGMLVQ"``.
        solver: ``"default"``: sklvq's default solver, steepest gradient descent with
            ``batch_size=1`` (per-sample stochastic updates in a Python loop), 10 epochs
            (``max_runs``) with a reshuffle each, step size 0.1 for prototypes and Omega
            alike, annealed as 0.1 / (1 + epoch / max_runs); no convergence test.
            ``"lbfgs"``: ``solver_type="lbfgs"``, scipy's ``minimize(method="L-BFGS-B")``
            on the full batch with scipy's default options (maxiter 15000, ftol ~2.2e-9,
            gtol 1e-5).
        random_state: seeds the prototype offsets and the SGD shuffles.
        max_iter: if given, caps the iterations: the SGD epochs (``max_runs``) or
            L-BFGS-B's ``options["maxiter"]``; None keeps sklvq's and scipy's defaults.
    """
    sklvq = load_sklvq()
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    kwargs: dict[str, Any] = {"prototype_n_per_class": 1, "random_state": random_state}
    if solver == "lbfgs":
        kwargs["solver_type"] = "lbfgs"
        if max_iter is not None:
            kwargs["solver_params"] = {"options": {"maxiter": max_iter}}
    elif max_iter is not None:
        kwargs["solver_params"] = {"max_runs": max_iter}
    return getattr(sklvq, model)(**kwargs)
