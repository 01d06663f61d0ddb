"""The book's own static files: MathJax served from the build (formulas typeset with no network)
and the book's stylesheet, book/_static/andrea.css (narrow screens).

MathJax: Sphinx's mathjax extension loads MathJax 3 from a CDN by default. This extension points
`mathjax_path` at `_static/mathjax/tex-mml-chtml.js` (the same MathJax 3 component the CDN would
serve) and copies the files it needs from the `sphinx-mathjax-offline` package, which
requirements.txt installs (it ships MathJax 3.2.2). The page keeps Sphinx's MathJax
configuration: myst's `$...$` and `$$...$$` arrive in the HTML as `\\(...\\)` and `\\[...\\]`
inside `class="math"` elements, which MathJax 3 typesets by default.
Copied: the combined TeX+MathML -> CommonHTML component and its lazily loaded parts (TeX
extensions that `autoload` fetches, MathML input, CommonHTML fonts, the menu and accessibility
parts), not the SVG output or the other combined components.

Stylesheet: book/_static is added to `html_static_path` and andrea.css to the pages (Jupyter
Book only picks up a `_static` folder at the repository root).
"""
from __future__ import annotations

import shutil
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from sphinx.errors import ExtensionError

PACKAGE = "sphinx-mathjax-offline"
COMPONENT = "tex-mml-chtml.js"
KEEP = (COMPONENT, "input", "output/chtml", "output/chtml.js", "ui", "a11y", "sre", "adaptors")


def mathjax_source() -> Path:
    """The folder holding MathJax's files in the installed package."""
    try:
        dist = distribution(PACKAGE)
    except PackageNotFoundError:
        raise ExtensionError(f"andrea_mathjax_local: the package {PACKAGE!r} is not installed; "
                             f"install requirements.txt (scripts/setup_env.sh does)") from None
    src = Path(dist.locate_file(f"{PACKAGE}/static/mathjax"))
    if not (src / COMPONENT).is_file():
        raise ExtensionError(f"andrea_mathjax_local: {src / COMPONENT} is missing")
    return src


def _set_path(app, config) -> None:
    mathjax_source()  # fail at the start of the build, not after it
    config.mathjax_path = f"mathjax/{COMPONENT}"  # relative: resolved against _static/


def _copy(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    src = mathjax_source()
    dest = Path(app.outdir) / "_static" / "mathjax"
    for rel in KEEP:
        s, d = src / rel, dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            shutil.copy2(s, d)


STATIC = Path(__file__).resolve().parent.parent / "_static"  # book/_static
CSS = "andrea.css"


def _add_static(app, config) -> None:
    if str(STATIC) not in map(str, config.html_static_path):
        config.html_static_path.append(str(STATIC))


def setup(app):
    app.setup_extension("sphinx.ext.mathjax")
    app.connect("config-inited", _set_path)
    app.connect("config-inited", _add_static)
    app.add_css_file(CSS)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
