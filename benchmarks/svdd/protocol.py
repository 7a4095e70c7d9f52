"""Experimental protocol of Park (2022), chapters 4-7: private SVDD + equilibrium-point classifier.

Source: Jinseong Park (2022), *Differentially private multi-class classification using
kernel supports and equilibrium points*, master's thesis, Seoul National University (see
``REFERENCES.md``). Every ``L<number>`` below is a line number in the plain-text copy of
the thesis that this protocol was transcribed from (not part of dp-proto); section,
table, figure and equation numbers are the thesis' own.

This module is plain data plus a few small helpers; it runs no experiment. It
holds

* the target numbers: :data:`TABLE_7_1` (data sets and hyperparameters),
  :data:`TABLE_7_2` (run times), :data:`TABLE_7_3` (shuttle subsampled to 10% /
  30%), and what survives of Figures 5.1, 7.1 and 7.2 (:data:`FIGURES`; the
  plotted values were lost in extraction, only the text's claims remain);
* the algorithm as the text defines it: :data:`PHASE_I`, :data:`PHASE_II`,
  :data:`PHASE_III`, :data:`RELEASE_MODES`, :data:`BASELINES`;
* everything the text leaves open, as :class:`Unspec` records in
  :data:`UNSPECIFIED` (marker :data:`UNSPEC`), each with the fill we propose;
* privacy caveats of the text as written (:data:`PRIVACY_NOTES`);
* helpers that fix the proposed fills in code: :func:`load_dataset`,
  :func:`split_indices`, :func:`standardize`, :func:`lr_schedule`,
  :func:`svdd_laplace_scale`.

Run as a script it prints one JSON line summarising the protocol.

What the extraction lost: Figure 7.1 (all accuracy-vs-epsilon curves of the
eight data sets, i.e. the content of "Table 7.1's" results: Table 7.1 itself
holds only the data description and hyperparameters), Figure 7.2 (kNN release),
Figures 5.1 / 5.2 (pictures). Table 7.1's header (L495-496) is garbled and its
"dims"/"classes" columns are swapped in the iris and wine rows (L499-500);
the values below are corrected and the raw cells kept in ``raw``.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dp_proto.data import (
    five_gaussians,
    load_shuttle_3class,
    load_uci,
    read_tsv,
    stratified_subsample,
    three_moons,
)

__all__ = [
    "BASELINES",
    "EPSILONS",
    "EPSILONS_TABLE_7_3",
    "FIGURES",
    "HARDWARE",
    "SOURCE",
    "LR_DECAY_AT",
    "LR_DECAY_FACTOR",
    "METHODS",
    "N_RANDOM_FEATURES",
    "N_RUNS",
    "PHASE_I",
    "PHASE_II",
    "PHASE_III",
    "PRIVACY_NOTES",
    "PROPOSED_FILLS",
    "RELEASE_MODES",
    "TABLE_7_1",
    "TABLE_7_2",
    "TABLE_7_3",
    "TEST_FRACTION",
    "UNSPEC",
    "UNSPECIFIED",
    "DatasetRow",
    "ProposedSetting",
    "SVMSetting",
    "Unspec",
    "load_dataset",
    "lr_schedule",
    "split_indices",
    "standardize",
    "svdd_laplace_scale",
    "summary",
]

#: The document the protocol transcribes (line numbers ``L...`` refer to a plain-text copy of it).
SOURCE = "Park (2022), Differentially private multi-class classification using kernel supports and equilibrium points"

#: Marker for a value Park (2022) does not state (see :data:`UNSPECIFIED` for the fill).
UNSPEC = "UNSPEC"

# --------------------------------------------------------------------------- global settings
#: Privacy budgets of Figure 7.1 (L527: "epsilon = {0.01, 0.1, 1, 5, 10, 100}") plus a
#: non-private run (``math.inf`` here).
EPSILONS: tuple[float, ...] = (0.01, 0.1, 1.0, 5.0, 10.0, 100.0)
#: Budgets of Table 7.3 (L542): 0.01, 0.1, 1, 5 and "Non-private".
EPSILONS_TABLE_7_3: tuple[float, ...] = (0.01, 0.1, 1.0, 5.0)
#: Random 80/20 train/test split, evaluated over 5 runs (L523).
TEST_FRACTION = 0.2
N_RUNS = 5
#: F = 400 random Fourier features for the proposed method and SVM WEIGHT (L514, eq. 4.5).
N_RANDOM_FEATURES = 400
#: "We decayed the learning rate by a factor of 1/5 after 80% of iterations" (L523).
LR_DECAY_FACTOR = 0.2
LR_DECAY_AT = 0.8
#: Method names as the tables spell them (L495, L518, L543-546).
METHODS: tuple[str, ...] = ("SVM WEIGHT", "SVM SEMI", "Proposed", "SVM OUTPUT")
#: L523: hardware and software of the thesis' timings (Table 7.2).
HARDWARE = (
    "Intel(R) Xeon(R) Gold 5218R CPU @ 2.10GHz, Python 3.7.4, scikit-learn, SciPy, CVXOPT "
    "(L523); one-against-all for the SVMs"
)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class SVMSetting:
    """Hyperparameters of an SVM baseline in Table 7.1: ``C/n`` and RBF ``gamma``."""

    c_over_n: float
    gamma: float


@dataclass(frozen=True)
class ProposedSetting:
    """Hyperparameters of the proposed method in Table 7.1 (column ``C/n / gamma / lr / iters / r_max``).

    ``r_max is None`` where the table has "-" (the 2-D sets): no hypercubes,
    every equilibrium point is labelled on its own (L497-498, Figure 5.2 left).
    """

    c_over_n: float
    gamma: float
    lr: float
    iters: int
    r_max: float | None


@dataclass(frozen=True)
class DatasetRow:
    """One row of Table 7.1 (L493-504) plus where the data come from.

    ``n_train + n_test`` is the total number of rows the thesis used; ``source``
    says how :func:`load_dataset` rebuilds a set of that size (see
    :data:`UNSPECIFIED` ``"dataset_sizes"``).
    """

    name: str
    dims: int
    classes: int
    n_train: int
    n_test: int
    svm_weight: SVMSetting
    svm_semi: SVMSetting
    proposed: ProposedSetting
    svm_output: SVMSetting
    line: int
    source: str
    raw: str = ""
    notes: str = ""

    @property
    def n_total(self) -> int:
        return self.n_train + self.n_test


@dataclass(frozen=True)
class Unspec:
    """Something Park (2022) leaves open: what, the lines that come closest, our fill, alternatives."""

    what: str
    lines: tuple[int, ...]
    proposal: str
    alternatives: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- Table 7.1
_S = SVMSetting
_P = ProposedSetting

#: Table 7.1 (L493-504): "Benchmark data description and experimental settings".
#: Sizes: train/test after the 80/20 split (L523). The test sizes are
#: ``ceil(0.2 * n_total)`` in every row (wine 178 -> 36, vowel 528 -> 106), i.e.
#: scikit-learn's ``train_test_split(test_size=0.2)`` rounding.
TABLE_7_1: dict[str, DatasetRow] = {
    "three_moons": DatasetRow(
        "three_moons",
        2,
        3,
        320,
        80,
        svm_weight=_S(0.05, 5),
        svm_semi=_S(0.05, 5),
        proposed=_P(0.05, 5, 0.001, 20, None),
        svm_output=_S(0.05, 5),
        line=497,
        source="dp_proto.data.three_moons(n_samples=400) (construction ours, L510)",
        raw="three moons 2 3 320 80 0.05/5 0.05/5 0.05/5/0.001/20/- 0.05/5",
    ),
    "five_gaussians": DatasetRow(
        "five_gaussians",
        2,
        5,
        800,
        200,
        svm_weight=_S(0.1, 1),
        svm_semi=_S(0.1, 1),
        proposed=_P(0.1, 5, 0.001, 20, None),
        svm_output=_S(0.1, 1),
        line=498,
        source="dp_proto.data.five_gaussians(n_samples=1000) (the construction of Brinkrolf 2023, Sec. 4.6.1)",
        raw="five gaussians 2 5 800 200 0.1/1 0.1/1 0.1/5/0.001/20/- 0.1/1",
        notes="the proposed method uses gamma=5, the SVMs gamma=1 (as printed)",
    ),
    "iris": DatasetRow(
        "iris",
        4,
        3,
        80,
        20,
        svm_weight=_S(0.05, 1),
        svm_semi=_S(0.05, 1),
        proposed=_P(0.05, 1, 0.001, 10, 0.5),
        svm_output=_S(0.05, 1),
        line=499,
        source="load_uci('iris'): stratified subsample of 100 of the 150 rows (UNSPEC, see dataset_sizes)",
        raw="iris 3 4 80 20 ...",
        notes="printed dims/classes '3 4' are swapped (iris: 4 features, 3 classes); 80+20=100 "
        "although iris has 150 rows",
    ),
    "wine": DatasetRow(
        "wine",
        13,
        3,
        142,
        36,
        svm_weight=_S(0.05, 0.1),
        svm_semi=_S(0.05, 0.1),
        proposed=_P(0.05, 0.1, 0.1, 100, 1.0),
        svm_output=_S(0.05, 0.1),
        line=500,
        source="load_uci('wine_recognition'): all 178 rows",
        raw="wine 3 13 142 36 ...",
        notes="printed dims/classes '3 13' are swapped (wine: 13 features, 3 classes)",
    ),
    "vowel": DatasetRow(
        "vowel",
        10,
        11,
        422,
        106,
        svm_weight=_S(1.0, 1),
        svm_semi=_S(0.05, 1),
        proposed=_P(0.05, 1, 0.1, 30, 0.5),
        svm_output=_S(0.05, 1),
        line=501,
        source="vowel.tsv.gz rows with 'Train or Test' == 1: Deterding's 528 training rows",
        raw="vowel 10 11 422 106 1/1 0.05/1 0.05/1/0.1/30/0.5 0.05/1",
        notes="SVM WEIGHT uses C/n=1 (as printed), the others 0.05",
    ),
    "satimage": DatasetRow(
        "satimage",
        36,
        6,
        3548,
        887,
        svm_weight=_S(0.05, 0.1),
        svm_semi=_S(0.05, 1),
        proposed=_P(0.05, 0.1, 0.001, 20, 1.0),
        svm_output=_S(0.05, 1),
        line=502,
        source="load_uci('satimage') rows 0..4434 (= the original sat.trn, class counts checked)",
        raw="satimage 36 6 3548 887 0.05/0.1 0.05/1 0.05/0.1/0.001/20/1 0.05/1",
    ),
    "segment": DatasetRow(
        "segment",
        19,
        7,
        1232,
        308,
        svm_weight=_S(0.5, 1),
        svm_semi=_S(0.5, 1),
        proposed=_P(0.5, 1, 0.001, 20, 0.5),
        svm_output=_S(0.5, 1),
        line=503,
        source="load_uci('segmentation'): stratified subsample of 1540 of 2310 rows (UNSPEC)",
        raw="segment 19 7 1232 308 0.5/1 0.5/1 0.5/1/0.001/20/0.5 0.5/1",
        notes="1232+308=1540 = 2/3 of the 2310 rows of UCI segment",
    ),
    "shuttle": DatasetRow(
        "shuttle",
        9,
        3,
        24360,
        6090,
        svm_weight=_S(0.01, 0.1),
        svm_semi=_S(0.01, 0.1),
        proposed=_P(0.01, 1, 0.001, 20, 0.5),
        svm_output=_S(0.01, 0.1),
        line=504,
        source="load_shuttle_3class(): stratified subsample of 30450 rows from rows 0..43499 "
        "(= shuttle.trn; 30450 = 0.7 * 43500 exactly) (UNSPEC)",
        raw="shuttle 9 3 24360 6090 0.01/0.1 0.01/0.1 0.01/1/0.001/20/0.5 0.01/0.1",
        notes="7 classes merged to 3 (L510; mapping UNSPEC); L532: 24360 training samples; "
        "the proposed method uses gamma=1, the SVMs 0.1",
    ),
}

# --------------------------------------------------------------------------- Table 7.2
#: Table 7.2 (L516-521): "Training and inference time (sec) for each dataset" on the
#: machine of :data:`HARDWARE`. Which epsilon / how many runs: UNSPEC (one run of
#: train + predict on one split, we assume). SVM OUTPUT is not timed. Compare ratios
#: (e.g. WEIGHT / Proposed), not seconds.
TABLE_7_2: dict[str, dict[str, float]] = {
    "SVM WEIGHT": {
        "three_moons": 4.72,
        "five_gaussians": 100.65,
        "iris": 0.60,
        "wine": 4.66,
        "vowel": 71.17,
        "satimage": 1376.24,
        "segment": 298.70,
        "shuttle": 49943.29,
    },
    "SVM SEMI": {
        "three_moons": 5.01,
        "five_gaussians": 64.35,
        "iris": 0.51,
        "wine": 1.63,
        "vowel": 31.39,
        "satimage": 1158.10,
        "segment": 140.61,
        "shuttle": 52519.56,
    },
    "Proposed": {
        "three_moons": 0.90,
        "five_gaussians": 2.41,
        "iris": 0.18,
        "wine": 1.32,
        "vowel": 1.96,
        "satimage": 31.03,
        "segment": 4.54,
        "shuttle": 1334.80,
    },
}

# --------------------------------------------------------------------------- Table 7.3
#: Table 7.3 (L539-546): test accuracy on shuttle (3 classes) subsampled to 10% and
#: 30% (L550: then a random 80/20 split, "settings are the same as Table 7.1").
#: Keys: sampling ratio -> method -> epsilon (``math.inf`` = "Non-private") -> accuracy.
TABLE_7_3: dict[float, dict[str, dict[float, float]]] = {
    0.1: {
        "SVM WEIGHT": {0.01: 0.366, 0.1: 0.310, 1.0: 0.892, 5.0: 0.917, math.inf: 0.912},
        "SVM SEMI": {0.01: 0.332, 0.1: 0.484, 1.0: 0.899, 5.0: 0.932, math.inf: 0.930},
        "Proposed": {0.01: 0.456, 0.1: 0.644, 1.0: 0.908, 5.0: 0.983, math.inf: 0.987},
        "SVM OUTPUT": {0.01: 0.493, 0.1: 0.919, 1.0: 0.926, 5.0: 0.926, math.inf: 0.926},
    },
    0.3: {
        "SVM WEIGHT": {0.01: 0.135, 0.1: 0.456, 1.0: 0.957, 5.0: 0.955, math.inf: 0.948},
        "SVM SEMI": {0.01: 0.330, 0.1: 0.514, 1.0: 0.935, 5.0: 0.950, math.inf: 0.947},
        "Proposed": {0.01: 0.635, 0.1: 0.786, 1.0: 0.958, 5.0: 0.981, math.inf: 0.986},
        "SVM OUTPUT": {0.01: 0.559, 0.1: 0.943, 1.0: 0.943, 5.0: 0.946, math.inf: 0.946},
    },
}

# --------------------------------------------------------------------------- figures
#: What the text says about the figures; their plotted values are not in the .txt.
FIGURES: dict[str, dict[str, Any]] = {
    "5.1": {
        "lines": (403, 406, 161),
        "caption": "classification regions of non-private models (left) and models with "
        "perturbation (right) of the proposed method on five gaussians (top) and "
        "three moons (bottom)",
        "content": "train points as circles coloured by class; equilibrium points (stars) in "
        "the local minima; red lines: contours of the support level function; "
        "background: predicted class on a grid of the data space (L403)",
        "message": "with noise the EPs and the boundaries are distorted, but the decision "
        "regions stay similar to the non-private ones (L403)",
        "values": UNSPEC,  # epsilon of the perturbed panels is not stated
    },
    "5.2": {
        "lines": (457,),
        "caption": "2-D classification using equilibrium points (left) and multi-dimensional "
        "classification using hypercubes (right)",
    },
    "7.1": {
        "lines": (527, 530, 532),
        "caption": "test accuracy of SVM WEIGHT, SVM SEMI and the proposed method (publishing "
        "support function) on various datasets",
        "panels": (
            "a three_moons",
            "b five_gaussians",
            "c iris",
            "d wine",
            "e vowel",
            "f satimage",
            "g segment",
            "h shuttle",
        ),  # e=vowel, g=segment per L527
        "epsilons": EPSILONS,
        "values": UNSPEC,  # lost in extraction: no accuracy numbers for Table 7.1's sets
        "claims": (
            "the proposed method is more accurate than SVM WEIGHT and SVM SEMI on all data "
            "sets and close to SVM OUTPUT (L527)",
            "on vowel (7.1e) and segment (7.1g) the proposed method is even better (than SVM OUTPUT) (L527)",
            "shuttle (24360 training rows): SVM WEIGHT and SVM SEMI stay near non-private "
            "accuracy down to epsilon = 1 (L532)",
            "small data sets: apparent accuracy drop of the SVM baselines (L532)",
            "the proposed method is consistent over a wide range of epsilon (L532)",
        ),
    },
    "7.2": {
        "lines": (537, 554),
        "caption": "test accuracy of the proposed method releasing equilibrium points, "
        "varying the number of neighbours of kNN",
        "datasets": ("three_moons", "vowel"),
        "values": UNSPEC,
        "claims": (
            "vowel: 1-NN and 3-NN comparable to publishing the support function (L554)",
            "three moons and vowel: EP release similar to publishing the support function (L554)",
        ),
    },
}

# --------------------------------------------------------------------------- algorithm
#: Phase I, private SVDD (Chapter 4, Algorithm 1 L315-323, Section 5.1 L408-418).
PHASE_I: dict[str, Any] = {
    "kernel": "RBF K(x1, x2) = exp(-gamma ||x1 - x2||^2), kappa^2 = K(x, x) = 1 (L301)",
    "feature_map": "phi(x) = sqrt(2/F) [cos<rho_1,x>, sin<rho_1,x>, ..., cos<rho_F/2,x>, "
    "sin<rho_F/2,x>], F even, rho_k iid from the kernel's Fourier transform "
    "p (L303-306, L319); for the RBF kernel p = N(0, 2 gamma I_d); "
    "||phi(x)||^2 = 1 exactly",
    "n_features": N_RANDOM_FEATURES,
    "primal": "min_{R,a,xi} R^2 + (C/n) sum_i xi_i  s.t. ||phi(x_i) - a||^2 <= R^2 + xi_i, xi_i >= 0 (eq. 4.1, L277)",
    "dual": "max sum_j beta_j K(x_j,x_j) - sum_ij beta_i beta_j K(x_i,x_j) s.t. "
    "0 <= beta_j <= C/n, sum_j beta_j = 1 (eq. 4.2, L282-284), solved with the kernel "
    "induced by the map (4.5), i.e. K = Phi Phi^T (L320); feasible only if C/n >= 1/n",
    "center": "a* = sum_i beta_i phi(x_i) (L295, L321)",
    "support_function": "f(x) = ||phi(x) - a||^2 (eq. 4.3, L290); private: "
    "f_hat(x) = ||phi(x) - a_hat||^2, a_hat = a* + mu (eq. 4.6, L308)",
    "noise": "mu: F iid Laplace(lambda), lambda >= 2 C kappa sqrt(F) / (epsilon n) "
    "(Corollary 4.2 L336, Theorem 4.3 L358); with the table's C/n: "
    "lambda = 2 (C/n) sqrt(F) / epsilon, see svdd_laplace_scale",
    "clip": "clip a_hat by kappa = 1 (post-processing, L358-360); the error bound uses "
    "||a_hat||_inf <= kappa (L372-376) -> per-coordinate clip to [-1, 1]",
    "release": "a_hat and rho_1..rho_F/2 (L323)",
    "solver_in_thesis": "CVXOPT QP (L523)",
    "level_set": "L_f(r) = {x : f_hat(x) <= r} = C_1 u ... u C_m (eq. 5.1, L410-416); r is "
    "not needed for classification (basins partition all of R^d)",
}

#: Phase II, the dynamical system (Section 5.2, L420-437).
PHASE_II: dict[str, Any] = {
    "dynamics": "dx/dt = -grad f_hat(x) (eq. 5.2, L424), solved by gradient descent (L433, "
    "ref. [23]); grad f_hat(x) = -2 J_phi(x)^T a_hat (||phi||^2 is constant), so "
    "||a_hat||^2 and a positive rescaling of a_hat do not move the EPs",
    "equilibrium_point": "a local minimum s_hat of f_hat reached by the dynamics (L426)",
    "basin": "A(s_hat) = closure{x(0) : lim x(t) = s_hat} (eq. 5.3, L430); the basins partition R^d (eq. 5.4, L435)",
    "start_points": "the training points (L441: 'all data points converge to their respective "
    "equilibrium points'); test points at inference (L471)",
    "step_size": "initial lr from Table 7.1, multiplied by 1/5 after 80% of the iterations (L523); see lr_schedule",
    "iterations": "iters from Table 7.1 (fixed count, L523)",
    "stopping": UNSPEC,
    "merging": UNSPEC,
    "privacy_claim": "epsilon-DP of Phase II by parallel composition: every point converges "
    "to one EP (L437) (see PRIVACY_NOTES)",
    "complexity": "O(n^2 * iters) for the dynamics, O(n^3) for the QP (L534)",
}

#: Phase III, noisy labelling (Section 5.3, L439-454).
PHASE_III: dict[str, Any] = {
    "vote": "label of basin / EP s: y_hat_s = argmax_k { n_k + Lap(1/epsilon) }, n_k = number "
    "of training points of class k that converge to s; Laplace noise on every one of "
    "the c class counts, sensitivity 1 (eq. 5.5, L443-447)",
    "hypercubes": "in high dimensions group the EPs into hypercubes "
    "S_l = {s_j : ||s_0 - s_j||_inf <= r_max}, s_0 the centroid of S_l, and vote "
    "(eq. 5.5) with n_k counted over all points converging to EPs of the cube "
    "(eq. 5.6, L449-454); r_max per data set in Table 7.1, '-' = no cubes "
    "(the two 2-D sets)",
    "cube_construction": UNSPEC,
}

#: The two release modes (Chapter 6, L467-475) and how a user classifies.
RELEASE_MODES: dict[str, dict[str, Any]] = {
    "support_function": {
        "lines": (467, 471),
        "published": "a_hat, the feature map (rho), the trained EPs (or hypercubes) and their labels (L471)",
        "predict": "run the dynamics (5.2) from the test point (same lr / iters), take the "
        "label of the EP it converges to; if no training EP matches exactly, the "
        "label of the nearest training EP (L471)",
        "used_in": ("Figure 7.1", "Table 7.2", "Table 7.3"),
    },
    "equilibrium_points": {
        "lines": (467, 475, 554),
        "published": "the private EPs and their labels only (L475)",
        "predict": "k-nearest neighbours over the labelled EPs (L467, L475)",
        "k": UNSPEC,  # Figure 7.2 varies k; the text names 1-NN and 3-NN (L554)
        "used_in": ("Figure 7.2 (three moons, vowel)",),
    },
}

#: Baselines (Section 6.3 L477-481, Section 7.1 L487-506, Section 7.3 L514-523).
BASELINES: dict[str, dict[str, Any]] = {
    "SVM WEIGHT": {
        "ref": "Rubinstein et al. [36]",
        "lines": (479, 514),
        "method": "SVM on the F=400 random Fourier features, solve the dual, add Laplace noise "
        "to the primal weight vector w_hat = w* + mu (L479); one-against-all (L523)",
        "sensitivity": UNSPEC,  # not in Park (2022); see UNSPECIFIED["baseline_noise"]
    },
    "SVM OUTPUT": {
        "ref": "Jain and Thakurta [17]",
        "lines": (481, 491, 506),
        "method": "noise on the output <w*, phi(z)> + mu = sum_i beta_i K(z, x_i) + mu; needs "
        "the training data at inference, so it cannot be published; used as the "
        "'desired level of accuracy' (L481, L491, L506)",
        "sensitivity": UNSPEC,
    },
    "SVM SEMI": {
        "ref": "Jain and Thakurta [17], semi-interactive",
        "lines": (481, 489),
        "method": "the user hands the test set Z to the publisher, who publishes the w minimising "
        "(1/n_test) sum_i (<w - w*, phi(z_i)> - mu)^2 (L481); the thesis gives it the "
        "whole test set and delta = 1/n (L489)",
        "delta": "1/n (L489)",
        "sensitivity": UNSPEC,
    },
    "Non-private": {
        "lines": (527,),
        "method": "each model without noise (the baseline accuracy of each method)",
    },
    "excluded": "Huber-loss primal approximation of [6], [49] (publishes support vectors), "
    "[29], [39], [26] (similar to SVM WEIGHT) (L506)",
}

# --------------------------------------------------------------------------- open points
#: Everything Park (2022) leaves open, with the fill we propose.
UNSPECIFIED: dict[str, Unspec] = {
    "c_over_n_meaning": Unspec(
        "what the 'C/n' column of Table 7.1 is",
        (277, 284, 336, 358, 496),
        "the upper bound of the dual variables, 0 <= beta_j <= C/n, with sum beta = 1 "
        "(literal reading of eq. 4.1/4.2 and the column header); then lambda = "
        "2 (C/n) sqrt(F) / epsilon does not shrink with n (C/n=0.05, F=400: lambda = "
        "2/epsilon), which the reproduction should state",
        (
            "scikit-learn OneClassSVM's nu (box 1/(nu n), C = 1/nu): lambda = 2 sqrt(F) / "
            "(nu n epsilon); gives the n-dependence the motivation (L194) expects",
        ),
    ),
    "clipping": Unspec(
        "how a_hat is 'clipped by kappa'",
        (358, 360, 372, 376),
        "per-coordinate clip to [-1, 1] (what the error-bound proof uses)",
        ("L2 projection onto ||a_hat|| <= 1 (rescaling: same EPs, only the gradient's size changes)",),
    ),
    "preprocessing": Unspec(
        "feature scaling",
        (),
        "z-score each feature with the training split's mean and std (standardize); "
        "gamma = 0.1 for 13-D wine and r_max = 0.5..1 fit unit-variance features",
        (
            "min-max to [0, 1] or [-1, 1] with public bounds (needed for a strict DP claim: the "
            "scaler's statistics are not privatised in the thesis)",
        ),
    ),
    "split": Unspec(
        "whether the 80/20 split is stratified and which seeds",
        (523,),
        "stratified, n_test = ceil(0.2 n) (matches every row of Table 7.1), run r uses seed r "
        "(r = 0..4); the data-set subsample (where sizes must be matched) is drawn once per "
        "run with the same seed",
        ("plain shuffled split (sklearn.model_selection.train_test_split(test_size=0.2))",),
    ),
    "dataset_sizes": Unspec(
        "how the thesis' row counts arose where they differ from the UCI files",
        (499, 501, 502, 503, 504, 532),
        "match the stated totals: iris 100 of 150 (stratified), vowel = the 528 Deterding "
        "training rows (flag column == 1), satimage = rows 0..4434 (sat.trn), segment 1540 of "
        "2310 (stratified), shuttle 30450 of the 43500 shuttle.trn rows (stratified, "
        "0.7 * 43500 = 30450) after the 3-class merge; load_dataset(..., match_sizes=False) "
        "uses all rows instead",
        ("iris: the first 100 rows (only 2 classes, contradicts 'classes 3')",),
    ),
    "shuttle_merge": Unspec(
        "the 7 -> 3 class merge of shuttle",
        (510,),
        "{1 Rad Flow} -> 0, {4 High} -> 1, {5 Bypass, 2, 3, 6, 7} -> 2 "
        "(dp_proto.data.SHUTTLE_3CLASS_MAPPING; 45586 / 8903 / 3511 rows): keeps the two large "
        "classes and pools Bypass with the 244 rows of the four rare classes",
        ("keep classes 1, 4, 5 and drop the 244 rare rows",),
    ),
    "table_7_3_base": Unspec(
        "10% / 30% of which set",
        (539, 550),
        "of the whole merged shuttle (58000 rows; caption: 'of whole dataset'): 5800 / 17400 "
        "rows, stratified, then the 80/20 split",
        ("of the 30450-row Table 7.1 set (3045 / 9135 rows)",),
    ),
    "stopping_and_merging": Unspec(
        "when the descent stops and how end points become distinct EPs",
        (426, 433, 523),
        "run exactly `iters` steps of the lr schedule (as stated), then merge end points closer "
        "than merge_tol = 1e-3 * ell (ell = 1/sqrt(2 gamma), the kernel length) by single "
        "linkage into one EP, EP = mean of the merged end points. Our measurement (three moons, "
        "seed 0, non-private): with lr 0.001 and 20 steps the median point moves 5e-4 "
        "(median |grad f| 0.03), at epsilon <= 1 about 0.1, so with the stated schedule "
        "almost every training point is its own 'EP' and the method acts like 1-NN / a "
        "hypercube histogram with noisy labels",
        (
            "run to convergence (|step| < 1e-6 ell or 10^4 steps, e.g. with backtracking) for "
            "Figure 5.1, where few distinct EPs are drawn",
        ),
    ),
    "cube_construction": Unspec(
        "how the hypercubes S_l and their centres s_0 are chosen",
        (449, 451, 454),
        "greedy leader clustering: visit EPs by decreasing number of converged training "
        "points (ties: index), an unassigned EP becomes s_0 and takes every unassigned EP with "
        "||s_0 - s_j||_inf <= r_max; a test point gets the label of the cube of its nearest "
        "training EP",
        (
            "a fixed grid of cells of side 2 r_max anchored at 0 (data-independent, so the "
            "parallel-composition argument holds exactly; see PRIVACY_NOTES)",
        ),
    ),
    "budget_split": Unspec(
        "how epsilon is shared between Phase I (Laplace on a) and Phase III (Laplace on counts)",
        (358, 445),
        "as published: epsilon for each (the thesis' equations use the same epsilon in both; "
        "the total under basic composition is 2 epsilon, which the report must state); "
        "offer a strict mode with epsilon/2 each",
        (),
    ),
    "knn_k": Unspec("the values of k in Figure 7.2", (554,), "k in (1, 3, 5, 7, 9)", ()),
    "baseline_noise": Unspec(
        "the baselines' sensitivities and the multi-class budget",
        (479, 481, 523),
        "SVM WEIGHT: Rubinstein et al. [36] for min (C/n) sum hinge + ||w||^2/2: "
        "lambda = 4 C kappa sqrt(F) / (n epsilon) per binary classifier (verify against [36]); "
        "one-against-all: epsilon/c per classifier (strict) or epsilon each (as published, "
        "UNSPEC); SVM OUTPUT / SEMI: Jain and Thakurta [17] output perturbation",
        (),
    ),
    "figure_values": Unspec(
        "accuracy of every method on the eight sets at every epsilon (Figure 7.1), the kNN curves (Figure 7.2)",
        (527, 530, 537),
        "lost in extraction: reproduce the qualitative claims of FIGURES['7.1']['claims'] and the numbers of Table 7.3",
        (),
    ),
    "figure_5_1_epsilon": Unspec("epsilon of the perturbed panels of Figure 5.1", (403, 406), "epsilon = 1", ()),
    "timing_protocol": Unspec(
        "what Table 7.2 times (which epsilon, runs, train + inference)",
        (516, 523),
        "one run, epsilon = 1, training plus prediction of the test split, reported as ratios "
        "to the proposed method on the same machine",
        (),
    ),
    "synthetic_sets": Unspec(
        "the constructions of 'three moons' and 'five gaussians'",
        (510,),
        "three_moons(n_samples=400, noise=0.1) (a 3-moon extension of make_moons) and "
        "five_gaussians(n_samples=1000) (the five Gaussians of Brinkrolf 2023, Sec. 4.6.1) from "
        "dp_proto.data",
        (),
    ),
}

#: The proposed fills as parameters (the values the reproduction uses by default).
PROPOSED_FILLS: dict[str, Any] = {
    "dual_box": "c_over_n",  # 0 <= beta <= C/n
    "clip": "coordinate",  # a_hat <- clip(a_hat, -1, 1)
    "scaler": "standardize_on_train",
    "split_stratified": True,
    "merge_tol_lengthscales": 1e-3,  # merge_tol = 1e-3 / sqrt(2 gamma)
    "cube_construction": "greedy_leader_by_count",
    "budget_split": "as_published",  # epsilon for Phase I and epsilon for Phase III
    "knn_k": (1, 3, 5, 7, 9),
    "figure_5_1_epsilon": 1.0,
    "table_7_3_base_rows": 58000,
}

#: Privacy caveats of the method as written; the implementation should document them.
PRIVACY_NOTES: tuple[str, ...] = (
    "Phase I and Phase III both spend epsilon (L358, L445): 2 epsilon in total by basic "
    "composition unless the budget is split.",
    "The EPs are reached from the training points (L441), so the set of EPs released "
    "(mode 2) or used to build cubes depends on individual points beyond the noisy a_hat; "
    "the parallel-composition argument of L437 covers the votes given a data-independent "
    "partition. A strictly private variant starts the dynamics from public points (a grid "
    "or random points of the public domain) or uses a fixed grid of cubes, and votes in "
    "every cell, also the empty ones (the estimator's starts='normal' and starts='grid'; "
    "the grid's empty cubes are simulated exactly, see dp_proto.svdd.grid).",
    "Report-noisy-max with Lap(1/epsilon) per count is epsilon-DP per cell under add/remove "
    "of one record; replacing a record can touch two cells.",
    "Standardising with training statistics (our fill) is not private; a strict mode should scale with public bounds.",
    "With the table's C/n the Laplace scale 2 (C/n) sqrt(F)/epsilon dwarfs ||a*|| <= 1 for "
    "epsilon <= 1, so the private support function is mostly noise and the accuracy comes "
    "from the noisy votes (our reading, to be checked experimentally).",
)


# --------------------------------------------------------------------------- helpers
def svdd_laplace_scale(
    c_over_n: float, epsilon: float, n_features: int = N_RANDOM_FEATURES, kappa: float = 1.0
) -> float:
    """Laplace scale of Theorem 4.3 (L358): ``lambda = 2 (C/n) kappa sqrt(F) / epsilon``.

    ``c_over_n`` is the dual box bound C/n of Table 7.1; returns 0 for
    ``epsilon = inf`` (non-private).
    """
    if not c_over_n > 0 or not epsilon > 0 or n_features < 2 or n_features % 2:
        raise ValueError(
            f"need c_over_n > 0, epsilon > 0 and an even n_features >= 2, got c_over_n="
            f"{c_over_n}, epsilon={epsilon}, n_features={n_features}"
        )
    if math.isinf(epsilon):
        return 0.0
    return 2.0 * c_over_n * kappa * math.sqrt(n_features) / epsilon


def lr_schedule(lr: float, iters: int, decay_at: float = LR_DECAY_AT, factor: float = LR_DECAY_FACTOR) -> np.ndarray:
    """Step sizes of the descent: ``lr`` for the first ``ceil(decay_at * iters)`` steps, then ``lr * factor``.

    L523: "We decayed the learning rate by a factor of 1/5 after 80% of iterations".
    For iters = 20: 16 steps of ``lr`` and 4 of ``lr / 5``.

    Returns
    -------
    ndarray of shape (iters,), dtype float64
    """
    if not lr > 0 or int(iters) != iters or iters < 1:
        raise ValueError(f"need lr > 0 and an int iters >= 1, got lr={lr}, iters={iters}")
    iters = int(iters)
    steps = np.full(iters, float(lr))
    steps[math.ceil(decay_at * iters) :] *= factor
    return steps


def _data_dir(data_dir: str | os.PathLike | None) -> str | os.PathLike:
    if data_dir is not None:
        return data_dir
    env = os.environ.get("DP_PROTO_DATA_DIR", "").strip()
    if not env:
        raise FileNotFoundError("pass data_dir or set $DP_PROTO_DATA_DIR")
    return env


def _relabel(y: np.ndarray) -> np.ndarray:
    return np.unique(y, return_inverse=True)[1].reshape(-1).astype(np.int64)


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    random_state: int = 0,
    match_sizes: bool = True,
    shuttle_fraction: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One data set of Table 7.1 (or Table 7.3), before the 80/20 split, labels 0..c-1.

    Parameters
    ----------
    name : str
        A key of :data:`TABLE_7_1`.
    data_dir : path, optional
        Data directory for the UCI sets (default ``$DP_PROTO_DATA_DIR``).
    random_state : int
        Seed of the synthetic generators and of the size-matching subsample.
    match_sizes : bool, default True
        Subsample to the thesis' totals (``TABLE_7_1[name].n_total``; see
        ``UNSPECIFIED["dataset_sizes"]``); ``False`` keeps all rows of the file
        (vowel and satimage still use their training parts).
    shuttle_fraction : float, optional
        For Table 7.3: a stratified ``fraction`` (0.1 or 0.3) of the whole merged
        shuttle set (58000 rows) instead of the Table 7.1 set.

    Returns
    -------
    X : ndarray (n, d) float64, unscaled
    y : ndarray (n,) int64 in 0..c-1
    """
    if name not in TABLE_7_1:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(TABLE_7_1)}")
    row = TABLE_7_1[name]
    if name == "three_moons":
        return three_moons(n_samples=row.n_total, random_state=random_state)
    if name == "five_gaussians":
        return five_gaussians(n_samples=row.n_total, random_state=random_state)
    root = _data_dir(data_dir)
    if name == "shuttle":
        X, y = load_shuttle_3class(root)
        if shuttle_fraction is not None:
            return stratified_subsample(X, y, shuttle_fraction, random_state=random_state)
        if match_sizes:
            X, y = X[:43500], y[:43500]  # the original shuttle.trn rows
    elif name == "vowel":
        base = pathlib.Path(root)
        candidates = (base / "uci" / "vowel.tsv.gz", base / "vowel.tsv.gz")
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise FileNotFoundError(f"vowel not found; tried {', '.join(map(str, candidates))}")
        raw, y, names = read_tsv(path)
        if names[0] != "Train or Test":
            raise ValueError(f"{path}: expected 'Train or Test' as first column, got {names[0]!r}")
        train = raw[:, 0] == 1
        X, y = np.ascontiguousarray(raw[train, 3:]), y[train]
    else:
        file = {"iris": "iris", "wine": "wine_recognition", "satimage": "satimage", "segment": "segmentation"}[name]
        X, y = load_uci(file, root)
        if name == "satimage":
            X, y = X[:4435], y[:4435]  # the original sat.trn rows
    y = _relabel(y)
    if match_sizes and len(y) > row.n_total:
        X, y = stratified_subsample(X, y, n_samples=row.n_total, random_state=random_state)
    return np.asarray(X, dtype=np.float64), y


def split_indices(y: np.ndarray, run: int, test_fraction: float = TEST_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """Stratified random split for run ``run`` (seed = run): ``n_test = ceil(test_fraction * n)``.

    Returns sorted ``(train_idx, test_idx)`` int64 arrays that partition ``range(n)``.
    """
    y = np.asarray(y)
    n = len(y)
    n_test = math.ceil(round(test_fraction * n, 9))
    if not 0 < n_test < n:
        raise ValueError(f"test_fraction {test_fraction} of {n} rows gives {n_test} test rows")
    _, _, test = stratified_subsample(np.arange(n), y, n_samples=n_test, random_state=run, return_indices=True)
    mask = np.ones(n, dtype=bool)
    mask[test] = False
    return np.flatnonzero(mask).astype(np.int64), test


def standardize(X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-score both arrays with the training mean and std (constant features: std 1)."""
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (X_train - mean) / std, (X_test - mean) / std


def summary() -> dict[str, Any]:
    """The protocol as a JSON-serialisable dict."""

    def eps_key(e: float) -> str:
        return "non-private" if math.isinf(e) else repr(e)

    return {
        "benchmark": "svdd_protocol",
        "source": SOURCE,
        "epsilons": list(EPSILONS),
        "runs": N_RUNS,
        "test_fraction": TEST_FRACTION,
        "n_random_features": N_RANDOM_FEATURES,
        "table_7_1": {k: {**asdict(v), "n_total": v.n_total} for k, v in TABLE_7_1.items()},
        "table_7_2": TABLE_7_2,
        "table_7_3": {
            repr(r): {m: {eps_key(e): a for e, a in accs.items()} for m, accs in by_method.items()}
            for r, by_method in TABLE_7_3.items()
        },
        "unspecified": sorted(UNSPECIFIED),
        "proposed_fills": {k: list(v) if isinstance(v, tuple) else v for k, v in PROPOSED_FILLS.items()},
    }


if __name__ == "__main__":
    print(json.dumps(summary()))
