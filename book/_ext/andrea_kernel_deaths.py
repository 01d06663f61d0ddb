"""A notebook kernel that dies during the book build is reported in one line: which notebook,
which cell was running (index and first line) and how the kernel died (its signal or exit
status), where myst-nb / nbclient say only "DeadKernelError: Kernel died" under a traceback.

What jupyter-book 1.0.4 (myst-nb 1.4, nbclient 0.11) printed for a toy notebook whose cell 2 ran
os.kill(os.getpid(), signal.SIGKILL): "Exception occurred: ... nbclient.exceptions.
DeadKernelError: Kernel died", then two tracebacks; no cell, no signal, and the notebook only
in an earlier "Executing notebook" line. With this extension the exception reads
"DeadKernelError: dies.ipynb: cell 2 (`import os, signal`): the kernel died (killed by SIGKILL
(killed), often the out-of-memory killer)". tests/book_fixtures.py picks that line out of the
build log. The code is andrea_lab.execute_chapters.patch_dead_kernel_message (also used by
python -m andrea_lab.execute_chapters and the tests); this file tells it the notebook's name.
"""
from __future__ import annotations

from andrea_lab import execute_chapters as execute


def _reading(app, docname, source) -> None:
    execute.CURRENT_NOTEBOOK[0] = str(app.env.doc2path(docname, base=False))


def setup(app):
    execute.patch_dead_kernel_message()
    app.connect("source-read", _reading)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
