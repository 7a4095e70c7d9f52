"""MkDocs hooks of the dp-proto documentation (registered under ``hooks:`` in mkdocs.yml).

Four jobs; the first two tie the site to the benchmark suite's generated files:

1. **Results fragments.** A line of its own ``<!-- results: CAP -->`` in a page is
   replaced by the content of ``benchmarks/CAP/RESULTS.md`` (the fragment that
   ``make results`` writes for one capability). Its headings are moved down so that
   they nest under the heading the marker stands under, and its figure links
   (``figures/NAME.png``, relative to the capability folder) work unchanged, because
   of job 2 and because every page with a marker lies at the top of ``docs/``.
   A missing fragment, or a marker naming no capability folder, is logged as a
   WARNING: ``mkdocs build --strict`` then fails. Nothing is skipped silently.
2. **Figures.** Every ``benchmarks/*/figures/*.png`` is published into the site at
   ``figures/NAME.png``. Two PNGs with the same name in different folders are
   logged as a WARNING (the second would shadow the first).
3. **Repository files included, not copied.** A line of its own
   ``<!-- include: PATH -->`` (PATH relative to the repository root, e.g.
   ``CHANGELOG.md``) is replaced by that file. Links in it to the repository's
   Markdown files that have a page here (``README.md``, ``CHANGELOG.md``,
   ``REFERENCES.md``) are pointed at those pages. A missing file is a WARNING.
4. **Data-set cards.** ``datasets/*.md`` (the cards at the top of the repository) are
   published as pages under ``datasets/``, so the docs link to them and they stay in
   one place.

The hooks read only files; they import nothing from dp_proto.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

# a logger under "mkdocs" so that `mkdocs build --strict` counts its warnings
log = logging.getLogger("mkdocs.hooks.dp_proto")

MARKER = re.compile(r"^[ \t]*<!--\s*results:\s*(?P<cap>[A-Za-z0-9_.-]+)\s*-->[ \t]*$", re.MULTILINE)
INCLUDE = re.compile(r"^[ \t]*<!--\s*include:\s*(?P<path>[A-Za-z0-9_./-]+)\s*-->[ \t]*$", re.MULTILINE)
LINK = re.compile(r"(\]\()(?P<target>[^)\s#]+)(?P<rest>[^)]*\))")
HEADING = re.compile(r"^(#{1,6})(\s)", re.MULTILINE)
FENCE = re.compile(r"^\s*(```|~~~)")

BENCHMARKS = "benchmarks"
FIGURES = "figures"
DATASETS = "datasets"
#: repository Markdown files that have a page of their own in the site
PAGE_OF = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "REFERENCES.md": "references.md"}


def _root(config) -> Path:
    """The repository root: the folder that holds mkdocs.yml."""
    return Path(config["config_file_path"]).resolve().parent


def _figure_paths(root: Path) -> list[Path]:
    return sorted((root / BENCHMARKS).glob(f"*/{FIGURES}/*.png"))


def on_files(files: Files, config) -> Files:
    """Publish benchmarks/*/figures/*.png at figures/<name>.png and datasets/*.md at datasets/."""
    root = _root(config)
    for path in sorted((root / DATASETS).glob("*.md")):
        uri = f"{DATASETS}/{path.name}"
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    seen: dict[str, Path] = {}
    for path in _figure_paths(root):
        uri = f"{FIGURES}/{path.name}"
        if path.name in seen:
            log.warning(
                "figure name %s is used twice (%s and %s); PNG names must be unique across benchmarks/*/figures",
                path.name,
                seen[path.name],
                path,
            )
            continue
        seen[path.name] = path
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def _shift_headings(text: str, base_level: int) -> str:
    """Move the fragment's headings down so that its top level becomes ``base_level + 1``
    (code fences left alone; no heading deeper than 6)."""
    lines = text.splitlines()
    levels = []
    in_fence = False
    for line in lines:
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := HEADING.match(line)):
            levels.append(len(m.group(1)))
    if not levels:
        return text
    shift = max(0, base_level + 1 - min(levels))
    if shift == 0:
        return text
    out = []
    in_fence = False
    for line in lines:
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := HEADING.match(line)):
            line = "#" * min(6, len(m.group(1)) + shift) + line[len(m.group(1)) :]
        out.append(line)
    return "\n".join(out)


def _level_before(markdown: str, position: int) -> int:
    """Level of the last heading before ``position`` (0 if none), outside code fences."""
    level = 0
    in_fence = False
    for line in markdown[:position].splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := HEADING.match(line)):
            level = len(m.group(1))
    return level


def _relink(text: str) -> str:
    """Point links to README.md / CHANGELOG.md / REFERENCES.md at their pages."""

    def relink(match: re.Match[str]) -> str:
        target = PAGE_OF.get(match.group("target"), match.group("target"))
        return match.group(1) + target + match.group("rest")

    return LINK.sub(relink, text)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace every ``<!-- include: PATH -->`` line by that repository file and every
    ``<!-- results: CAP -->`` line by benchmarks/CAP/RESULTS.md."""
    root = _root(config)

    def include(match: re.Match[str]) -> str:
        path = (root / match.group("path")).resolve()
        if root not in path.parents or not path.is_file():
            log.warning("%s: included file %s is missing", page.file.src_uri, match.group("path"))
            return match.group(0)
        return _relink(path.read_text(encoding="utf-8").strip("\n")) + "\n"

    markdown = INCLUDE.sub(include, markdown)

    def replace(match: re.Match[str]) -> str:
        cap = match.group("cap")
        folder = root / BENCHMARKS / cap
        fragment = folder / "RESULTS.md"
        if not folder.is_dir():
            log.warning("%s: results marker names %r, but there is no folder %s", page.file.src_uri, cap, folder)
            return match.group(0)
        if not fragment.is_file():
            log.warning(
                "%s: results fragment %s is missing (run `make results` to generate it)",
                page.file.src_uri,
                fragment.relative_to(root),
            )
            return match.group(0)
        text = fragment.read_text(encoding="utf-8").strip("\n")
        return _shift_headings(text, _level_before(markdown, match.start())) + "\n"

    return MARKER.sub(replace, markdown)


def on_serve(server, config, builder):
    """`mkdocs serve`: rebuild when a fragment or a figure changes."""
    root = _root(config)
    for folder in sorted((root / BENCHMARKS).glob("*/")):
        if (folder / "RESULTS.md").exists():
            server.watch(str(folder / "RESULTS.md"))
        if (folder / FIGURES).is_dir():
            server.watch(str(folder / FIGURES))
    return server
