"""Notebook Markdown that JupyterLab, Colab and the book all render.

JupyterLab and Colab render a Markdown cell as CommonMark (plus $...$ math and raw HTML); the
book (myst-nb) renders MyST, a superset. Anything MyST-only — a `:::{note}` colon fence, a
```` ```{directive} ```` fence, a {doc}/{ref}/{glue}/{numref}/{term} role — reaches a Jupyter or
Colab reader as raw text. Each Markdown cell is rendered here with a CommonMark renderer
(markdown-it-py, which myst-parser itself is built on) and the result is searched for MyST
syntax left as text or as a fenced block whose language is a directive.
Notes are HTML admonitions (`<div class="admonition note">`, rendered as admonitions in the book
by myst's html_admonition extension); chapter links are relative links to the .ipynb files.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from book_toc import REPO

NOTEBOOKS = sorted((REPO / "book").glob("*.ipynb"))
COMMONMARK = MarkdownIt("commonmark")
MYST_ROLE = re.compile(r"(?<!`)\{(doc|ref|glue|glue:text|glue:md|numref|term|eq|download|abbr|sub|"
                       r"sup|math|cite|index|prf:ref)\}`")
MYST_TEXT = (":::{", "```{", "(?)=")


def myst_left_in(markdown: str) -> list[str]:
    """MyST-only constructs that a CommonMark renderer leaves visible in `markdown`."""
    found = []
    for tok in COMMONMARK.parse(markdown):
        if tok.type == "fence" and tok.info.strip().startswith("{"):
            found.append(f"directive fence ```{tok.info.strip()}")
        if tok.type == "html_block":
            continue
        text = tok.content if tok.type != "fence" else ""  # `{doc}` in a code span: shown as code
        found += [f"role {m.group(0)}" for m in MYST_ROLE.finditer(text)]
        found += [f"text {s!r}" for s in MYST_TEXT if s in text]
        if re.search(r"^\([\w-]+\)=\s*$", text, re.M):
            found.append("MyST target (label)=")
    return found


@pytest.mark.parametrize("text, bad", [
    (":::{admonition} Title\n:class: note\nbody\n:::", True),
    ("```{code-cell} python\nx = 1\n```", True),
    ("See {doc}`three_matrices` for more.", True),
    ("The value is {glue:text}`x`.", True),
    ("(my-label)=\n# Title", True),
    ('<div class="admonition note">\n<p class="admonition-title">Note</p>\n<p>ok</p>\n</div>',
     False),
    ("See [Three matrices](three_matrices.ipynb) and $x^2$ and `{doc}` as code.", False),
    ("```python\nx = {'a': 1}\n```", False),
])
def test_detector_catches_myst_and_passes_commonmark(text, bad):
    assert bool(myst_left_in(text)) is bad, myst_left_in(text)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_cells_are_commonmark(nb: Path):
    cells = json.loads(nb.read_text())["cells"]
    problems = [f"cell {i}: {p}" for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                for p in myst_left_in("".join(c["source"]))]
    assert not problems, f"{nb.name}: MyST-only syntax a Jupyter/Colab reader sees as text:\n" + \
        "\n".join(problems)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_links_between_chapters_point_at_files_that_exist(nb: Path):
    cells = json.loads(nb.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    targets = re.findall(r"\]\(([\w./-]+\.(?:ipynb|md))(?:#[\w-]*)?\)", text)
    missing = sorted({t for t in targets if not (nb.parent / t).is_file()})
    assert not missing, f"{nb.name} links to missing files: {missing}"
