"""Support vector data description on random Fourier features (Park 2022, chapters 4-7).

``RandomFourierFeatures`` is the feature map of eq. 4.5 for the RBF kernel;
``solve_svdd_dual`` solves the SVDD dual (eq. 4.2) in that feature space over the
capped simplex ``{0 <= beta_i <= C/n, sum beta = 1}`` (exact projection:
``project_capped_simplex``) and returns the centre ``a = Phi^T beta`` whose
sensitivity Corollary 4.2 bounds. ``.equilibrium`` runs Phase II: batched gradient
descent on the support function, equilibrium points and their basins.
``.private`` holds the mechanisms (private centre, noisy cell votes, private
quantile), ``.grid`` the public lattice of cubes with its exact sparse noisy
histogram, and ``.estimators`` the scikit-learn style ``PrivateSVDD`` (one class,
outlier detection) and ``PrivateSVDDClassifier`` (equilibrium-point classifier).
"""

from dp_proto.svdd.equilibrium import (
    Equilibria,
    find_equilibria,
    support_function,
    support_gradient,
)
from dp_proto.svdd.estimators import PrivateSVDD, PrivateSVDDClassifier
from dp_proto.svdd.features import RandomFourierFeatures, rbf_kernel
from dp_proto.svdd.grid import PublicGrid, grid_threshold, sparse_noisy_histogram
from dp_proto.svdd.private import (
    centre_sensitivity,
    full_box_centre,
    noisy_cell_counts,
    private_quantile,
    release_centre,
)
from dp_proto.svdd.solver import (
    SVDDSolution,
    frank_wolfe_gap,
    project_capped_simplex,
    solve_svdd_dual,
)

__all__ = [
    "PrivateSVDD",
    "PrivateSVDDClassifier",
    "centre_sensitivity",
    "full_box_centre",
    "noisy_cell_counts",
    "private_quantile",
    "release_centre",
    "PublicGrid",
    "grid_threshold",
    "sparse_noisy_histogram",
    "Equilibria",
    "find_equilibria",
    "support_function",
    "support_gradient",
    "RandomFourierFeatures",
    "SVDDSolution",
    "frank_wolfe_gap",
    "project_capped_simplex",
    "rbf_kernel",
    "solve_svdd_dual",
]
