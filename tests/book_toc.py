"""What the book contains, read from _toc.yml (shared by test_notebooks.py and test_book.py)."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TOC = REPO / "_toc.yml"


def _entries(node) -> list[str]:
    """Every ``file:`` of a jb-book toc, in reading order (parts, chapters, sections)."""
    out = []
    if isinstance(node, dict):
        if "file" in node:
            out.append(str(node["file"]))
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key) or []:
                out.extend(_entries(child))
    return out


def toc_docnames() -> list[str]:
    """Docnames in the toc, root first, without extension (e.g. ``book/intro``)."""
    toc = yaml.safe_load(TOC.read_text()) or {}
    names = [str(toc["root"])] + _entries(toc)
    return [n[: -len(Path(n).suffix)] if Path(n).suffix in (".md", ".ipynb") else n
            for n in names]


def source_of(docname: str) -> Path | None:
    """The source file of a docname (.ipynb preferred, then .md), or None when missing."""
    for ext in (".ipynb", ".md"):
        p = REPO / (docname + ext)
        if p.exists():
            return p
    return None


def toc_notebooks() -> list[str]:
    """Docnames of the toc entries that are notebooks (the chapters)."""
    return [d for d in toc_docnames() if (REPO / (d + ".ipynb")).exists()]
