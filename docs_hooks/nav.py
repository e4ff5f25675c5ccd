"""MkDocs hook: the site's navigation, built from the folders so that nobody edits a list.

Order: the home page, getting started, then the guides (the newcomer's path first, any other page
after them by title), the generated reference (docs_hooks/reference.py), the design pages (the
architecture first, the rest by title) and the results (dated pages, newest first). A page added
under docs/guides/, docs/design/ or docs/results/ appears in the nav without touching mkdocs.yml,
so developers adding pages at the same time do not conflict.

Must not: drop a page (every Markdown file under docs/ is in the nav), or read anything but the
pages' first heading.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:          # mkdocs loads a hook by its path, not as a package
    sys.path.insert(0, str(REPO))

from docs_hooks.reference import PAGES  # noqa: E402

DOCS = REPO / "docs"

#: The guides a newcomer reads in this order; other guides follow, by title.
GUIDE_ORDER = ("traces.md", "nvme.md", "femu.md", "sweeps.md", "report.md")
DESIGN_FIRST = ("architecture.md",)


def title(path: Path) -> str:
    """A page's first `# heading` (its file name when it has none)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#\s+(.+?)\s*$", line)
        if m:
            return m.group(1).replace("`", "")
    return path.stem.replace("-", " ")


def section(folder: str, first: tuple[str, ...] = (), newest_first: bool = False) -> list[Any]:
    d = DOCS / folder
    if not d.is_dir():
        return []
    pages = sorted(p for p in d.glob("*.md") if p.name != "index.md")
    if newest_first:
        pages.sort(key=lambda p: p.name, reverse=True)
    else:
        pages.sort(key=lambda p: (first.index(p.name) if p.name in first else len(first), title(p)))
    out: list[Any] = []
    if (d / "index.md").exists():
        out.append(f"{folder}/index.md")
    out += [{title(p): f"{folder}/{p.name}"} for p in pages]
    return out


def build_nav() -> list[Any]:
    nav: list[Any] = [{"Home": "index.md"}]
    if (DOCS / "getting-started.md").exists():
        nav.append({"Getting started": "getting-started.md"})
    # any other page at the top of docs/, by title
    others = [p for p in DOCS.glob("*.md") if p.name not in ("index.md", "getting-started.md")]
    nav += [{title(p): p.name} for p in sorted(others, key=title)]
    nav.append({"Guides": section("guides", GUIDE_ORDER)})
    nav.append({"Reference": [{t: uri} for uri, t in PAGES.items()]})
    nav.append({"Design": section("design", DESIGN_FIRST)})
    nav.append({"Results": section("results", newest_first=True)})
    # a page in any other folder still appears, under its folder's name
    known = {"guides", "design", "results", "reference"}
    for d in sorted(p for p in DOCS.iterdir() if p.is_dir() and p.name not in known and any(p.glob("*.md"))):
        nav.append({d.name.replace("-", " ").capitalize(): section(d.name)})
    return nav


def on_config(config: Any) -> Any:
    config["nav"] = build_nav()
    return config
