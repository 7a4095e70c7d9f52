"""Decision regions of the private SVDD classifier, after Figure 5.1 of Park (2022).

A 2 x 3 grid: rows five Gaussians and three moons, columns non-private, epsilon = 5
and epsilon = 1 (the total budget of :class:`~dp_proto.svdd.PrivateSVDDClassifier`'s
sound default: data-independent ``N(0, I)`` starts, half of epsilon on the centre,
half on the cell votes). Every panel shows, on data standardised with the training
split (80/20 split of run 0, :func:`svdd_protocol.split_indices`),

* the background: the predicted class (``model.predict``) on a grid;
* the training points, coloured by class;
* the labelled equilibrium points (``labelled_points_``) as stars in their class colour;
* red contour lines of the released support function ``f(x) = ||phi(x) - a^||^2``;
* the test accuracy in the title, and ``cos(a^, a*)``, the cosine between the released
  and the exact centre (how much of the data survives the noise).

C/n and gamma are those of Table 7.1. The table's dynamics (``lr = 0.001``, 20 steps)
hardly move the points, so its "equilibrium points" are the start points themselves.
The default, ``--converge``, runs ``lr = 0.5`` for 300 steps (lr / 5 for the last 20 %),
which takes the private dynamics to their minima (gradient norm at the labelled EPs
below 1e-3, printed as ``max_ep_gradient``; a warning goes to stderr otherwise);
``--table-7-1`` draws the table's setting. The non-private support function is far
flatter (``||a*||`` about 0.2, while the released ``a^`` is projected onto the unit sphere
whenever the noise dominates), so its dynamics stop short of the minima (gradient norm
about 1e-2 at its EPs); larger steps (lr 0.8-1) make the private dynamics oscillate for
some seeds.
The dynamics run in float32 (``--dtype``; the dual solve is float64 either way): the
dynamics on the grid dominate the run time, and float32 roughly halves it on a CPU.

Usage::

    python -m benchmarks.svdd.plot_regions
    python -m benchmarks.svdd.plot_regions --table-7-1 --out /tmp/svdd_regions_table.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.base import clone

from benchmarks.svdd.protocol import (
    N_RANDOM_FEATURES,
    TABLE_7_1,
    load_dataset,
    split_indices,
    standardize,
)
from dp_proto.exceptions import PrivacyLeakWarning
from dp_proto.svdd import PrivateSVDDClassifier, support_function, support_gradient

DATASETS = {"five_gaussians": "five Gaussians", "three_moons": "three moons"}
EPSILONS: tuple[float | None, ...] = (None, 5.0, 1.0)
CONVERGE = {"lr": 0.5, "iters": 300}


def _eps_label(eps: float | None) -> str:
    return "non-private" if eps is None else f"eps={eps:g}"


def fit_panel(
    name: str, eps: float | None, *, lr: float, iters: int, n_starts, seed: int, grid_size: int, dtype: str = "float32"
) -> dict:
    """Fit one model and evaluate everything its panel shows."""
    X, y = load_dataset(name)
    train, test = split_indices(y, 0)
    X_train, X_test = standardize(X[train], X[test])
    setting = TABLE_7_1[name].proposed
    model = PrivateSVDDClassifier(
        c_over_n=setting.c_over_n,
        gamma=setting.gamma,
        num_features=N_RANDOM_FEATURES,
        epsilon=eps,
        lr=lr,
        iters=iters,
        n_starts=n_starts,
        r_max=setting.r_max,
        classes=np.arange(TABLE_7_1[name].classes),
        random_state=seed,
        noise_seed=seed,
        dtype=dtype,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default starts must not warn about a leak ...
        # ... except the expected one: noise_seed makes the figure's noise reproducible
        warnings.filterwarnings("ignore", message=".*noise_seed", category=PrivacyLeakWarning)
        model.fit(X_train, y[train])
    accuracy = float(model.score(X_test, y[test]))

    lo, hi = X_train.min(0) - 0.5, X_train.max(0) + 0.5
    gx, gy = np.linspace(lo[0], hi[0], grid_size), np.linspace(lo[1], hi[1], grid_size)
    mesh = np.stack(np.meshgrid(gx, gy), -1).reshape(-1, 2)
    grid = torch.as_tensor(mesh, dtype=model.centre_.dtype)
    # in blocks: the dynamics allocate (m, F/2) intermediates at every step
    blocks = np.array_split(mesh, max(1, len(mesh) // 1024))
    predicted = np.concatenate([model.predict(b) for b in blocks]).reshape(grid_size, grid_size)
    f = support_function(model.features_, model.centre_, grid).numpy().reshape(grid_size, grid_size)

    # the exact centre: the same seed draws the same feature map, without noise
    exact = clone(model).set_params(epsilon=None).fit(X_train, y[train]).centre_
    cosine = float(exact @ model.centre_ / (exact.norm() * model.centre_.norm()))
    gradient = torch.linalg.vector_norm(
        support_gradient(model.features_, model.centre_, model.labelled_points_), dim=-1
    )
    return {
        "name": name,
        "eps": eps,
        "accuracy": accuracy,
        "model": model,
        "X": X_train,
        "y": y[train],
        "extent": (lo[0], hi[0], lo[1], hi[1]),
        "gx": gx,
        "gy": gy,
        "predicted": predicted,
        "f": f,
        "cosine": cosine,
        "max_ep_gradient": float(gradient.max()),
        "ledger_epsilon": model.ledger_.get_epsilon(),
    }


def draw(panels: list[dict], out: str, title: str, footnote: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    colours = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(
        len(DATASETS), len(EPSILONS), figsize=(4.2 * len(EPSILONS), 3.9 * len(DATASETS)), squeeze=False
    )
    for ax, p in zip(axes.flat, panels, strict=True):
        model = p["model"]
        classes = model.classes_
        index = np.searchsorted(classes, p["predicted"])
        cmap = ListedColormap(colours[: len(classes)])
        ax.imshow(
            index,
            origin="lower",
            extent=p["extent"],
            cmap=cmap,
            vmin=-0.5,
            vmax=len(classes) - 0.5,
            alpha=0.3,
            interpolation="nearest",
            aspect="auto",
        )
        ax.contour(p["gx"], p["gy"], p["f"], levels=8, colors="red", linewidths=0.6, alpha=0.8)
        ax.scatter(
            *p["X"].T, c=[colours[k] for k in np.searchsorted(classes, p["y"])], s=6, edgecolors="k", linewidths=0.2
        )
        stars = model.labelled_points_.cpu().numpy()
        ax.scatter(
            *stars.T,
            c=[colours[k] for k in model.labelled_classes_.cpu().numpy()],
            marker="*",
            s=110,
            edgecolors="k",
            linewidths=0.7,
            zorder=3,
        )
        ax.set_xlim(p["extent"][:2])
        ax.set_ylim(p["extent"][2:])
        cos = "" if p["eps"] is None else f", cos(a^, a*) = {p['cosine']:.2f}"
        ax.set_title(
            f"{_eps_label(p['eps'])}: test accuracy {p['accuracy']:.3f}\n{len(stars)} labelled EPs{cos}", fontsize=9
        )
        ax.tick_params(labelsize=7)
    for row, name in zip(axes, DATASETS, strict=True):
        setting = TABLE_7_1[name].proposed
        row[0].set_ylabel(
            f"{DATASETS[name]} (C/n {setting.c_over_n:g}, gamma {setting.gamma:g})\nx2 (standardised)", fontsize=9
        )
    for ax in axes[-1]:
        ax.set_xlabel("x1 (standardised)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.text(0.5, 0.005, footnote, ha="center", va="bottom", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/svdd/figures/svdd_regions.png")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random_state and noise_seed of every model (feature map and starts; the reproducible noise); default 0",
    )
    parser.add_argument(
        "--n-starts",
        default="auto",
        help="public N(0, I) start points of the dynamics: an int or 'auto' (default, "
        "the estimator's rule from a noisy record count)",
    )
    parser.add_argument("--grid", type=int, default=90, help="grid points per axis; default 90")
    parser.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="precision of the models; default float32 (faster dynamics)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--converge",
        dest="dynamics",
        action="store_const",
        const="converge",
        help=f"lr {CONVERGE['lr']}, {CONVERGE['iters']} steps: EPs at the minima (default)",
    )
    mode.add_argument(
        "--table-7-1",
        dest="dynamics",
        action="store_const",
        const="table",
        help="lr and iters of Table 7.1 (0.001, 20): the points barely move",
    )
    parser.set_defaults(dynamics="converge")
    args = parser.parse_args(argv)
    if args.n_starts != "auto":
        args.n_starts = int(args.n_starts)

    start = time.perf_counter()
    panels = []
    for name in DATASETS:
        setting = TABLE_7_1[name].proposed
        lr, iters = (CONVERGE["lr"], CONVERGE["iters"]) if args.dynamics == "converge" else (setting.lr, setting.iters)
        for eps in EPSILONS:
            panels.append(
                fit_panel(
                    name,
                    eps,
                    lr=lr,
                    iters=iters,
                    n_starts=args.n_starts,
                    seed=args.seed,
                    grid_size=args.grid,
                    dtype=args.dtype,
                )
            )
    dyn = (
        f"lr {CONVERGE['lr']:g}, {CONVERGE['iters']} steps"
        if args.dynamics == "converge"
        else "lr 0.001, 20 steps (Table 7.1)"
    )
    title = (
        f"Private SVDD classifier (Park 2022, cf. Fig. 5.1): C/n and gamma of Table 7.1, F = "
        f"{N_RANDOM_FEATURES}, dynamics {dyn},\nN(0, I) starts (n_starts={args.n_starts}), release "
        f"'support_function', seed {args.seed}; eps = total budget (half centre, 5 % count, rest votes)"
    )
    footnote = (
        "Background: predicted class; dots: training points (80/20 split, run 0); stars: "
        "labelled equilibrium points; red: contours of the released support function "
        "||phi(x) - a^||^2. Both private columns use the same seed, so the same noise draw "
        "(scaled by 1/eps) dominates their centres. The flat non-private function stops "
        "short of its minima, hence its many EPs."
    )
    if args.dynamics == "converge":
        for p in panels:
            if p["eps"] is not None and p["max_ep_gradient"] > 1e-3:
                print(
                    f"warning: {p['name']} {_eps_label(p['eps'])}: gradient norm {p['max_ep_gradient']:.2g} "
                    "at a labelled EP, the dynamics did not converge",
                    file=sys.stderr,
                )
    draw(panels, args.out, title, footnote)
    results = {f"{p['name']}/{_eps_label(p['eps'])}": round(p["accuracy"], 4) for p in panels}
    print(
        json.dumps(
            {
                "benchmark": "svdd_regions",
                "results": results,
                "settings": {
                    "dynamics": args.dynamics,
                    "lr_iters": dyn,
                    "n_starts": args.n_starts,
                    "seed": args.seed,
                    "grid": args.grid,
                    "dtype": args.dtype,
                    "out": args.out,
                },
                "max_ep_gradient": {
                    f"{p['name']}/{_eps_label(p['eps'])}": float(f"{p['max_ep_gradient']:.3g}") for p in panels
                },
                "ledger_epsilon": {
                    f"{p['name']}/{_eps_label(p['eps'])}": (
                        None if math.isinf(p["ledger_epsilon"]) else round(p["ledger_epsilon"], 6)
                    )
                    for p in panels
                },
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
