"""The documentation site opens from disk: plain file names and an offline search index."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml may hold ``!!python/name`` tags; only the plain keys matter here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def test_the_site_opens_from_disk_with_search():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert config["use_directory_urls"] is False  # site/index.html links to lvq.html, not lvq/
    # material's offline plugin ships the index as search/search_index.js: file:// allows no fetch
    assert "search" in plugins and "offline" in plugins
    nav = yaml.dump(config["nav"])
    assert "selection.md" in nav and "release.md" in nav


def test_the_api_index_states_the_public_names_of_every_package():
    """docs/api/index.md's table: one row per public package with its ``__all__`` size."""
    import importlib
    import re

    text = (ROOT / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w.]+)` \| (\d+) \|$", text, flags=re.MULTILINE))
    counts = {name: len(importlib.import_module(name).__all__) for name in rows}
    assert {name: int(n) for name, n in rows.items()} == counts
    documented = set(re.findall(r"api/[\w-]+\.md", (ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert len(documented) == len(rows)  # one page per package but dp_proto, plus this index
    assert f"| **all** | **{sum(counts.values())}** |" in text
