"""`jupyter-book build ARGS...`, with the chapters executed on every core at once.

Jupyter Book 1's command line never asks Sphinx for parallel reading, so the fourteen notebooks
execute one after the other (about 440 s on a 2-core machine, where each core could take one).
Sphinx reads in parallel when asked, and myst-nb executes a notebook while reading it, so this
wrapper passes Sphinx `jobs` and hands each worker one document at a time, the longest chapters
started first (Sphinx's own batches put the first nine chapters in one worker; started last, the
longest chapter kept one worker busy for 45 s after the other had finished). Two extensions that Jupyter Book loads
declare nothing, which Sphinx reads as "not parallel safe" (and says so in a warning, an error
under -W); neither keeps per-document state that workers would have to merge, so they are declared
safe here (UNDECLARED says why for each). Everything else is the command line's:

    python scripts/jupyter_book_build.py . --all -W -n --keep-going

ANDREA_BUILD_JOBS sets the number of workers (default: the cores this process may use, at most 4).
Each chapter's kernel gets the cores divided by the workers as its threads (OMP_NUM_THREADS and
MKL_NUM_THREADS, unless the caller set them): two kernels of two threads each on two cores
oversubscribe them: measured on the 2-core machine, the build took 299 s with each kernel's
default threads and 234 s with one thread a kernel (the chapters' CPU timings say how many
threads they ran on).
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path


def kernel_threads(n_jobs: int, cores: int | None = None) -> dict[str, str]:
    """The thread settings each chapter's kernel inherits: cores // n_jobs (at least 1), for the
    variables the caller left unset."""
    cores = cores or len(os.sched_getaffinity(0))
    n = str(max(1, cores // max(1, n_jobs)))
    return {v: n for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if not os.environ.get(v)}


def jobs() -> int:
    raw = os.environ.get("ANDREA_BUILD_JOBS", "")
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 64:
            sys.exit(f"ANDREA_BUILD_JOBS: {raw!r} is not allowed; an integer in 1..64")
        return int(raw)
    return max(1, min(4, len(os.sched_getaffinity(0))))


SOURCE = Path(".")  # the book's source folder (main() sets it from the command line)

# The chapters that execute longest, measured in full builds on the 2-core machine (seconds):
# heads_on_real_text 97-99, why_heads_specialize 55-59. Started last, the longest one kept a
# worker busy for 45 s after the other had finished; started first, the others fill around it.
LONGEST_FIRST = ("book/heads_on_real_text", "book/why_heads_specialize")


def _size(doc: str) -> int:
    path = SOURCE / f"{doc}.ipynb"
    return path.stat().st_size if path.is_file() else 0


def start_order(arguments) -> list[str]:
    """The order the chapters should start in: LONGEST_FIRST, then the rest by notebook size,
    largest first (size in bytes standing in for execution time; Markdown pages last)."""
    first = [d for d in LONGEST_FIRST if d in arguments]
    return first + sorted((d for d in arguments if d not in first), key=_size, reverse=True)


def one_document_per_batch(arguments, nproc, maxbatch=10):
    """Sphinx's make_chunks, one document per chunk, arranged so the chapters START in
    start_order. Sphinx 7.4's ParallelTasks starts the first `nproc` tasks at once and the
    waiting ones last-in first-out (`_join_one` pops them with dict.popitem()), so after the
    first `nproc` the list is reversed; tests/test_jupyter_book_build.py runs Sphinx's own
    ParallelTasks and checks the order the tasks start in."""
    order = start_order(arguments)
    return [[d] for d in order[:nproc] + order[nproc:][::-1]]


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

    global SOURCE
    n = jobs()
    if argv and not argv[0].startswith("-"):
        SOURCE = Path(argv[0])
    os.environ.update(kernel_threads(n))
    if n > 1:
        declare_parallel_safe()
        jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx,
                                                             jobs=n)
        sphinx.builders.make_chunks = one_document_per_batch
    print(f"[book] executing the chapters with {n} worker{'s' if n > 1 else ''}, "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')} thread(s) each", flush=True)
    cli(["build", *argv], prog_name="jupyter-book")


if __name__ == "__main__":
    main(sys.argv[1:])
