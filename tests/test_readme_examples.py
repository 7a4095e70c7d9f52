"""The README's and the getting-started page's examples, run as a new user would.

Every ```python block of ``README.md`` and ``docs/getting-started.md`` is executed the
way it would be pasted into one Python session: statement by statement, in the order of
the file, in one namespace per file (a later block uses names of an earlier one, e.g.
``X, y``), from a scratch working directory (the blocks write ``release/`` and ``saa/``).
The values of top-level expression statements are kept, as a REPL shows them, and so is
what the block prints.

``BLOCKS`` holds, per file and block index, the block's hash, what its comments (and the
prose around it) document and the check of exactly that. A block whose text changes
fails ``test_blocks_are_the_checked_ones`` until its documented values are re-checked
against its check and the hash is updated; a new block fails until it gets an entry.
``PROSE`` does the same for the claims of the surrounding text that can be checked.

A block that needs the real data sets (``data_dir``) runs only when the data directory
exists (``$DP_PROTO_DATA_DIR``, else ``../shared/data`` beside the repository) and is
skipped otherwise. Placeholders get the minimal setup the text documents (``data_dir`` is
that directory), never an edit of the block.

The shell blocks are checked without running the long commands: every ``dp-proto ...``
command parses with the real parser (placeholders filled), every config it names is a
valid config, every ``make`` target exists and every ``pip install`` extra is declared.
The demo's documented sample output is compared line by line, numbers and paths masked,
with what ``dp-proto demo --quick`` prints.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dp_proto.exceptions import DomainWarning, PrivacyLeakWarning

ROOT = Path(__file__).resolve().parents[1]
README = "README.md"
GETTING_STARTED = "docs/getting-started.md"
FILES = (README, GETTING_STARTED)


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def fenced_blocks(name: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks of ``name`` whose info string is ``lang`` ("" for a
    plain fence), in order."""
    return re.findall(rf"^```{re.escape(lang)}[ \t]*\n(.*?)^```[ \t]*$", _text(name), flags=re.S | re.M)


def block_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


@dataclass
class Run:
    """What one block did: its namespace (shared with the file's other blocks), the
    values its top-level expressions showed (``shown[source] = value``), what it printed,
    the warnings it raised and the working directory it ran in."""

    ns: dict[str, Any]
    cwd: Path
    shown: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    warnings: list[warnings.WarningMessage] = field(default_factory=list)

    def value(self, source: str) -> Any:
        """The value the expression statement ``source`` showed (as a REPL would)."""
        assert source in self.shown, f"no top-level expression {source!r} in the block: {list(self.shown)}"
        return self.shown[source]


@dataclass(frozen=True)
class Block:
    """One python block: its hash, what it documents, the check of that, the earlier
    blocks (same file) whose names it uses, and whether it is slow or needs the data."""

    sha: str
    documents: str
    check: Callable[[Run], None]
    needs: tuple[int, ...] = ()
    slow: bool = False
    data: bool = False


# --------------------------------------------------------------------------- README


def _readme_gmlvq(run: Run) -> None:
    score, shape = run.value("model.score(X / 16, y), model.lambda_.shape")
    assert tuple(shape) == (64, 64)  # relevance matrix (64, 64)
    assert score > 0.9  # training accuracy of GMLVQ on the digits (0.96)


def _check_dp_release(path: Path, model: Any, X: Any) -> dict:
    """A private release: safetensors + JSON manifest, nothing curator-only, no noise
    seed; it loads and predicts identically."""
    import dp_proto

    assert sorted(p.name for p in path.iterdir()) == ["README.md", "manifest.json", "model.safetensors"]
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    assert "curator_" in manifest["dropped"]
    assert "curator_" not in manifest["fitted"]
    assert manifest["hyperparameters"]["noise_seed"] is None
    loaded = dp_proto.load_release(path)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    return manifest


def _readme_dpgmlvq(run: Run) -> None:
    epsilon, ledger = run.value("model.epsilon_, model.ledger_")  # certified by the ledger
    assert 0.99 <= epsilon <= 1.0
    assert ledger.get_epsilon() == pytest.approx(epsilon)
    assert [e.name for e in ledger.events] == ["dp_init/class_counts", "dp_init/class_sums", "dp_sgd"]
    assert "budget: epsilon 1 at delta 1e-05" in str(ledger)
    model, X = run.ns["model"], run.ns["X"]
    _check_dp_release(run.cwd / "release", model, X)  # safetensors + JSON manifest, nothing curator-only


def _readme_saa(run: Run) -> None:
    est, X3, y3 = run.ns["est"], run.ns["X3"], run.ns["y3"]
    assert est.ledger_.get_epsilon() == pytest.approx(1.25)
    assert est.score(X3, y3) > 0.8  # three well-separated Gaussians: median 0.998, 0.92 the lowest of 60 fits
    assert est.curator_.keys() >= {"num_clipped", "empty_bins"}
    manifest = _check_dp_release(run.cwd / "saa", est, X3)
    assert manifest["dropped"] == ["curator_"]  # leaves out curator_ (clipped records, empty bins)


def _readme_anonymizer(run: Run) -> None:
    from dp_proto.anonymizer.evaluation import encode, fresh_attacker_accuracy

    report = run.value("fresh_attacker_accuracy(encode(fit.module.anonymizer.encoder, x[1000:]), s[1000:])")
    x, r, s, fit = (run.ns[k] for k in ("x", "r", "s", "fit"))
    raw_private = fresh_attacker_accuracy(x[1000:], s[1000:])
    z = encode(fit.module.anonymizer.encoder, x[1000:])
    regular = fresh_attacker_accuracy(z, r[1000:])
    # prose: the private label about 73 % from the representation, 89 % from the records
    # (chance 14 %); the regular label about 91 % (94 % from the records)
    assert abs(report.accuracy - 0.73) < 0.06 and abs(raw_private.accuracy - 0.89) < 0.04
    assert abs(report.chance - 0.14) < 0.02 and report.accuracy < raw_private.accuracy - 0.08
    assert abs(regular.accuracy - 0.91) < 0.04
    assert abs(fresh_attacker_accuracy(x[1000:], r[1000:]).accuracy - 0.94) < 0.04


def _readme_svdd(run: Run) -> None:
    epsilon = run.value("clf.ledger_.get_epsilon()")
    assert 0.99 <= epsilon <= 1.0  # epsilon=1.0, pure DP
    # centre + record count + votes
    assert [e.name for e in run.ns["clf"].ledger_.events] == ["svdd/centre", "svdd/record_count", "svdd/votes"]


def _readme_llp(run: Run) -> None:
    network = run.ns["network"]  # SCATS counts: 138 detectors
    assert len(network.coordinates) == 138  # 138 detectors kept (docs/llp.md)
    evaluation = run.value("evaluate(result, nodes, [f[1] for f in folds])")
    assert len(evaluation.node_accuracy) == 138
    # vote about 0.57, own models about 0.67 (chance 1/6): the vote scores below the own models
    assert abs(evaluation.accuracy - 0.57) < 0.04 and abs(evaluation.own_accuracy - 0.67) < 0.04
    assert evaluation.own_accuracy > evaluation.accuracy > 1 / 6


# --------------------------------------------------------------------------- getting started


def _gs_estimator(run: Run) -> None:
    score = float(run.stdout.split()[0])  # print(model.score(X_test, y_test))
    assert score > 0.9


def _gs_private(run: Run) -> None:
    lines = run.stdout.splitlines()
    score, epsilon = map(float, lines[0].split())  # print(dp.score(...), dp.epsilon_)
    dp = run.ns["dp"]
    assert 0.99 <= epsilon <= 1.0 and epsilon == pytest.approx(dp.ledger_.get_epsilon())
    assert score > 0.5
    printed = "\n".join(lines[1:])  # print(dp.ledger_): every release of the run
    for name in ("dp_init/class_counts", "dp_init/class_sums", "dp_sgd"):
        assert f"- {name}:" in printed
    # publish: no curator-only data, no noise seed
    _check_dp_release(run.cwd / "release", dp, run.ns["X_test"])


BLOCKS: dict[str, dict[int, Block]] = {
    README: {
        0: Block("dc849943e4a6", "# relevance matrix (64, 64)", _readme_gmlvq, slow=True),
        1: Block(
            "5eec360ed377",
            "epsilon_ / ledger_ certified by the ledger; save_release: safetensors + JSON manifest, nothing "
            "curator-only; prose: load_release predicts identically",
            _readme_dpgmlvq,
            needs=(0,),
            slow=True,
        ),
        2: Block("19f606141c2e", "save_release leaves out curator_ (clipped records, empty bins)", _readme_saa),
        3: Block("0eee5fcaa75b", "keep a regular label, hide a private one", _readme_anonymizer, slow=True),
        4: Block("943aed93ab67", "pure epsilon-DP: centre + record count + votes", _readme_svdd),
        5: Block(
            "38128ba066b8",
            "SCATS counts: 138 detectors; vote about 0.57, own models about 0.67; prose: why the vote is below",
            _readme_llp,
            slow=True,
            data=True,
        ),
    },
    GETTING_STARTED: {
        0: Block("d40efc979d4d", "a first estimator: prints its test accuracy", _gs_estimator),
        1: Block(
            "c8b443cdfbf5",
            "epsilon_: what the ledger certifies; the ledger lists every release; the release holds no "
            "curator-only data, no noise seed",
            _gs_private,
            needs=(0,),
            slow=True,
        ),
    },
}


# --------------------------------------------------------------------------- running blocks


def real_data_dir() -> Path | None:
    env = os.environ.get("DP_PROTO_DATA_DIR")
    candidate = Path(env) if env else ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


class FileSession:
    """One Python session per documentation file: blocks run in file order, each once,
    with the blocks it needs run first."""

    def __init__(self, name: str, cwd: Path) -> None:
        self.name = name
        self.cwd = cwd
        self.sources = fenced_blocks(name, "python")
        data = real_data_dir()
        # the documented placeholder of the docs pages; the README's block reads the variable
        self.ns: dict[str, Any] = {"__name__": "__main__", "data_dir": str(data) if data else None}
        if data is not None:
            os.environ.setdefault("DP_PROTO_DATA_DIR", str(data))
        self.runs: dict[int, Run] = {}
        self.failed: dict[int, BaseException] = {}

    def run(self, index: int) -> Run:
        if index in self.failed:
            raise RuntimeError(f"{self.name} python block {index} failed earlier") from self.failed[index]
        if index in self.runs:
            return self.runs[index]
        for needed in BLOCKS[self.name][index].needs:
            self.run(needed)
        try:
            self.runs[index] = self._execute(index)
        except BaseException as err:
            self.failed[index] = err
            raise
        return self.runs[index]

    def _execute(self, index: int) -> Run:
        source = self.sources[index]
        run = Run(ns=self.ns, cwd=self.cwd)
        filename = f"<{self.name} python block {index}>"
        out = io.StringIO()
        previous = Path.cwd()
        os.chdir(self.cwd)
        try:
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
                warnings.simplefilter("always")
                for stmt in ast.parse(source, filename).body:
                    if isinstance(stmt, ast.Expr):
                        code = compile(ast.Expression(stmt.value), filename, "eval")
                        run.shown[ast.get_source_segment(source, stmt.value)] = eval(code, self.ns)
                    else:
                        exec(compile(ast.Module([stmt], type_ignores=[]), filename, "exec"), self.ns)
        finally:
            os.chdir(previous)
        run.stdout = out.getvalue()
        run.warnings = list(caught)
        return run


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FileSession]:
    return {name: FileSession(name, tmp_path_factory.mktemp(Path(name).stem)) for name in FILES}


def _block_params() -> list[Any]:
    params = []
    for name, table in BLOCKS.items():
        for index, block in table.items():
            marks = [pytest.mark.slow] if block.slow else []
            if block.data:
                marks.append(pytest.mark.data)
            params.append(pytest.param(name, index, marks=marks, id=f"{name}-block{index}"))
    return params


def _changed_message(name: str, index: int, source: str) -> str:
    return (
        f"{name} python block {index} changed (hash {block_hash(source)}, checked text "
        f"{BLOCKS[name][index].sha}): re-check the values its comments and the prose around it document "
        f"({BLOCKS[name][index].documents!r}) against its check in tests/test_readme_examples.py, then set "
        f"its hash to {block_hash(source)!r}"
    )


@pytest.mark.parametrize("name", FILES)
def test_blocks_are_the_checked_ones(name: str) -> None:
    sources = fenced_blocks(name, "python")
    table = BLOCKS[name]
    assert len(sources) == len(table), (
        f"{name} has {len(sources)} python blocks, BLOCKS checks {len(table)}: give every block an entry "
        f"(its hash, what it documents and the check of that)"
    )
    for index, source in enumerate(sources):
        assert block_hash(source) == table[index].sha, _changed_message(name, index, source)


def _bound_and_loaded(source: str) -> tuple[set[str], set[str]]:
    tree = ast.parse(source)
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound, loaded


@pytest.mark.parametrize("name", FILES)
def test_needs_cover_the_names_a_block_uses(name: str) -> None:
    """A block pasted on its own after the blocks it ``needs`` defines every name it uses
    (``data_dir`` is the documented placeholder)."""
    sources = fenced_blocks(name, "python")
    for index, source in enumerate(sources):
        bound, loaded = _bound_and_loaded(source)
        for needed in BLOCKS[name][index].needs:
            bound |= _bound_and_loaded(sources[needed])[0]
        free = loaded - bound - set(dir(builtins)) - {"data_dir"}
        assert not free, f"{name} python block {index} uses {sorted(free)}, defined by none of its needs"


@pytest.mark.parametrize(("name", "index"), _block_params())
def test_python_block(name: str, index: int, sessions: dict[str, FileSession]) -> None:
    session = sessions[name]
    block = BLOCKS[name][index]
    source = session.sources[index]
    assert block_hash(source) == block.sha, _changed_message(name, index, source)
    if block.data and real_data_dir() is None:
        pytest.skip("needs the real data sets: set DP_PROTO_DATA_DIR or provide ../shared/data")
    run = session.run(index)
    # the documented public settings (bounds, classes) are complete: no privacy warning
    leaks = [w for w in run.warnings if issubclass(w.category, (PrivacyLeakWarning, DomainWarning))]
    assert not leaks, [str(w.message) for w in leaks]
    block.check(run)


# --------------------------------------------------------------------------- prose claims


def _three_fold_cv_total(sessions: dict[str, FileSession]) -> None:
    """README: 3-fold CV of the epsilon-1 DP-GMLVQ totals 1.83 (1.77 at epochs=3), not 3.

    A fit's events depend on public settings only (not on the training fold), so three
    folds' spend is three copies of the README model's events."""
    from dp_proto.lvq.private import DPGMLVQ
    from dp_proto.privacy import SharedLedger

    run = sessions[README].run(1)
    X, y = run.ns["X"], run.ns["y"]
    fitted = {"default": run.ns["model"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted["epochs=3"] = DPGMLVQ(epsilon=1.0, delta=1e-5, bounds=(0, 16), classes=range(10), epochs=3).fit(X, y)
    totals = {}
    for key, model in fitted.items():
        shared = SharedLedger(budget=(3.0, 1e-5))
        for _ in range(3):
            shared.spend(*model.ledger_.events)
        totals[key] = round(shared.get_epsilon(), 2)
    assert totals == {"default": 1.83, "epochs=3": 1.77}


def _torch_pin(_sessions: dict[str, FileSession]) -> None:
    assert re.search(r"^torch==2\.13\.0$", (ROOT / "constraints.txt").read_text(encoding="utf-8"), flags=re.M)


PROSE: list[tuple[str, str, Callable[[dict[str, FileSession]], None], bool]] = [
    # (file, the claim as written, its check, slow)
    (
        README,
        "a 3-fold cross-validation of that epsilon-1 model totals 1.83 (1.77 at `epochs=3`), not 3",
        _three_fold_cv_total,
        True,
    ),
    (GETTING_STARTED, "`constraints.txt`, which pins `torch==2.13.0`", _torch_pin, False),
]


@pytest.mark.parametrize(
    ("name", "claim", "check"),
    [pytest.param(n, c, f, marks=[pytest.mark.slow] if s else [], id=f"{n}-{f.__name__}") for n, c, f, s in PROSE],
)
def test_prose_claim(name: str, claim: str, check: Callable, sessions: dict[str, FileSession]) -> None:
    text = " ".join(_text(name).split())
    assert claim in text, f"{name} no longer says {claim!r}: re-check the claim and update PROSE"
    check(sessions)


# --------------------------------------------------------------------------- shell commands


def _shell_lines(name: str) -> list[str]:
    """The commands of the ```bash blocks (comments stripped) and the inline code spans."""
    lines = []
    for block in fenced_blocks(name, "bash"):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                lines.extend(part.strip() for part in line.split("&&"))
    text = re.sub(r"^```.*?^```", "", _text(name), flags=re.S | re.M)
    lines.extend(" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text))  # may wrap lines
    return lines


#: placeholders of the documented commands and what a user would put there
PLACEHOLDERS = {"DIR": "/path/to/data", "FILE": "training/configs/digits_gmlvq.yaml"}


def _commands(prefix: str) -> list[tuple[str, list[str]]]:
    found = []
    for name in FILES:
        for line in _shell_lines(name):
            line = re.sub(r"^([A-Z_]+=\S*\s+)+", "", line)  # OMP_NUM_THREADS=1 dp-proto demo
            if line.startswith(prefix + " ") or line == prefix:
                argv = [PLACEHOLDERS.get(a, a) for a in shlex.split(line)[1:]]
                found.append((name, argv))
    return found


def test_every_dp_proto_command_parses() -> None:
    from dp_proto.cli import build_parser

    commands = _commands("dp-proto")
    assert any(argv[:1] == ["train"] for _, argv in commands)
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    for name, argv in commands:
        if len(argv) == 1:  # a subcommand named in the prose ("a private `dp-proto train` run")
            assert argv[0] in subcommands, f"{name}: dp-proto has no subcommand {argv[0]!r}"
            continue
        args = parser.parse_args(argv)
        config = getattr(args, "config", None)
        if config is not None:
            assert (ROOT / config).is_file(), f"{name}: {config} does not exist"
            if args.command == "train":
                from dp_proto.experiments.lvq import load_config

                load_config(ROOT / config, args.overrides)  # a documented config validates


def test_every_make_target_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, flags=re.M))
    commands = [(name, argv) for name, argv in _commands("make") if argv]  # not "the `make` targets"
    assert {"demo", "test", "test-fast", "lint", "typecheck", "docs", "results"} <= {a[0] for _, a in commands}
    for name, argv in commands:
        assert argv[0] in targets, f"{name}: the Makefile has no target {argv[0]!r}"


def test_every_pip_extra_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    documented = [
        (name, re.search(r"\.\[(\w+)\]", " ".join(argv)))
        for name, argv in _commands("pip")
        if "install" in argv and "-e" in argv
    ]
    assert {m.group(1) for _, m in documented if m} == {"dev", "docs", "vision", "bench"}
    for name, match in documented:
        assert match and match.group(1) in extras, f"{name}: pyproject.toml declares no extra {match!r}"
    assert (ROOT / "constraints.txt").is_file()
    assert (ROOT / "training/configs/digits_gmlvq.yaml").is_file()
    import importlib.util

    assert importlib.util.find_spec("tensorboard") is not None  # `tensorboard --logdir runs`


# --------------------------------------------------------------------------- the demo's output


def _skeleton(text: str) -> list[str]:
    """Output lines with paths, quoted paths and numbers masked."""
    lines = []
    for line in text.strip().splitlines():
        line = re.sub(r"'[^']*'", "'PATH'", line)
        line = re.sub(r"(?<![\w/])/\S+", "PATH", line)
        line = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", line)
        lines.append(line.rstrip())
    return lines


@pytest.mark.slow
def test_demo_prints_the_documented_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/getting-started.md shows the demo's output: ``dp-proto demo --quick`` prints
    the same lines (the numbers differ: 3 epochs, and the private ones from run to run)."""
    from dp_proto.cli import main

    (documented,) = [b for b in fenced_blocks(GETTING_STARTED, "") if b.startswith("model ")]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["demo", "--quick", "--no-progress"]) == 0
    assert _skeleton(out.getvalue()) == _skeleton(documented)
