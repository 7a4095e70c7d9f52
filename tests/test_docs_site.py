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
