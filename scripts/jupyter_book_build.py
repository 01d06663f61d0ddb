"""`jupyter-book build ARGS...`, with the chapters executed on every core at once.

Jupyter Book 1's command line never asks Sphinx for parallel reading, so the fourteen notebooks
execute one after the other (about 440 s on a 2-core machine, where each core could take one).
Sphinx reads in parallel when asked, and myst-nb executes a notebook while reading it, so this
wrapper passes Sphinx `jobs` and hands each worker one document at a time (Sphinx's own batches
put the first nine chapters, alphabetically, in one worker). Two extensions that Jupyter Book loads
declare nothing, which Sphinx reads as "not parallel safe" (and says so in a warning, an error
under -W); neither keeps per-document state that workers would have to merge, so they are declared
safe here (UNDECLARED says why for each). Everything else is the command line's:

    python scripts/jupyter_book_build.py . --all -W -n --keep-going

ANDREA_BUILD_JOBS sets the number of workers (default: the cores this process may use, at most 4).
"""
from __future__ import annotations

import functools
import os
import sys


def jobs() -> int:
    raw = os.environ.get("ANDREA_BUILD_JOBS", "")
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 64:
            sys.exit(f"ANDREA_BUILD_JOBS: {raw!r} is not allowed; an integer in 1..64")
        return int(raw)
    return max(1, min(4, len(os.sched_getaffinity(0))))


def one_document_per_batch(arguments, nproc, maxbatch=10):
    """Sphinx's make_chunks, one document per chunk: a free worker takes the next chapter."""
    return [[a] for a in arguments]


# Extensions that declare no parallel safety, and why reading in parallel is safe for each.
UNDECLARED = {
    # Replaces the table of contents' section numbering, which Sphinx runs once in the main
    # process after every document has been read; it stores nothing per document.
    "sphinx_multitoc_numbering": "renumbers the merged table of contents",
    # Adds nodes and transforms that act only when the LaTeX builder runs (this is an HTML
    # build), and config values; no environment data.
    "sphinx_jupyterbook_latex": "LaTeX-only transforms",
}


def declare_parallel_safe() -> None:
    import importlib

    for name in UNDECLARED:
        mod = importlib.import_module(name)
        setup = getattr(mod, "setup")

        def safe_setup(app, _setup=setup):
            return {**(_setup(app) or {}), "parallel_read_safe": True,
                    "parallel_write_safe": True}

        setattr(mod, "setup", safe_setup)


def main(argv: list[str]) -> None:
    import jupyter_book.sphinx
    import sphinx.builders
    from jupyter_book.cli.main import main as cli

    n = jobs()
    if n > 1:
        declare_parallel_safe()
        jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx,
                                                             jobs=n)
        sphinx.builders.make_chunks = one_document_per_batch
    print(f"[book] executing the chapters with {n} worker{'s' if n > 1 else ''}", flush=True)
    cli(["build", *argv], prog_name="jupyter-book")


if __name__ == "__main__":
    main(sys.argv[1:])
